use actix_web::{web, HttpResponse};

use super::auth::Caller;
use super::PageQuery;
use crate::engine::Engine;
use crate::error::AppError;

/// The caller's own home feed.
pub async fn home(
    caller: Caller,
    engine: web::Data<Engine>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, AppError> {
    let req = query.parse()?;
    let page = engine.home_page(caller.id, req).await?;
    Ok(HttpResponse::Ok().json(page))
}
