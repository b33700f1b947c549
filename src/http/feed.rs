use actix_web::{get, web, HttpResponse};

use super::auth::Caller;
use super::PageQuery;
use crate::engine::{Engine, Page};
use crate::error::AppError;

/// The caller's own home feed, newest first. The first request sends no
/// `max`; each next one sends back the `next` of the previous response. A
/// refresh sends back a `prev` as `min` and `offset`: the entries
/// immediately newer than it, newest first.
#[utoipa::path(
    tag = "feed",
    operation_id = "home_feed",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the home feed", body = Page),
        (status = 404, description = "The caller is no account (or one being deleted)", body = super::errors::ErrorBody),
    )
)]
#[get("/feed")]
pub async fn home(
    caller: Caller,
    engine: web::Data<Engine>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, AppError> {
    let req = query.parse()?;
    let page = engine.home_page(caller.id, req).await?;
    Ok(HttpResponse::Ok().json(page))
}
