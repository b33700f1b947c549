//! Tasks a user or an admin started (an account's deletion, an import of
//! follows), and how far they have got.

use actix_web::{get, web, HttpResponse};

use super::auth::Token;
use super::errors::ErrorBody;
use super::views::TaskView;
use crate::domain::parse_id;
use crate::engine::Engine;
use crate::error::AppError;
use crate::types::TaskId;

/// A task and its progress: its user's, or any for an admin. Kept a week
/// after it ends. (A deleted account's token still reads its own tasks, so
/// that its deletion can be watched.)
#[utoipa::path(
    tag = "jobs",
    operation_id = "get_job",
    params(("id" = i64, Path, description = "The task", minimum = 1)),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 404, description = "No such task (or another user's)", body = ErrorBody),
    )
)]
#[get("/jobs/{id}")]
pub async fn get(
    Token(caller): Token,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let id = parse_id(&path, "job id")
        .map(TaskId)
        .map_err(AppError::BadRequest)?;
    let task = engine.accounts().task(caller.viewer(), id).await?;
    Ok(HttpResponse::Ok().json(TaskView::from(&task)))
}
