use actix_web::{get, web, HttpRequest, HttpResponse};

use super::entities::Status;
use super::{account_id, status_list, IdPaging};
use crate::engine::{Engine, Feed};
use crate::error::AppError;
use crate::http::auth::Caller;
use crate::http::errors::ErrorBody;

/// Statuses a timeline page holds by default, and at most.
const DEFAULT_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 40;

/// The caller's home timeline (Mastodon): the same feed as
/// `GET /api/v1/feed`, paged by status ids. `max_id`: older than it;
/// `since_id`: the newest newer than it; `min_id`: the ones immediately
/// newer than it (to fill a gap or refresh with no gap). The `Link` header
/// names the next (`max_id`) and previous (`min_id`) pages.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_home_timeline",
    params(IdPaging),
    responses(
        (status = 200, description = "Statuses, newest first", body = Vec<Status>,
            headers(("Link" = String, description = "`rel=\"next\"` and `rel=\"prev\"` pages"))),
        (status = 404, description = "The caller is no account", body = ErrorBody),
    )
)]
#[get("/timelines/home")]
pub async fn home(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    query: web::Query<IdPaging>,
) -> Result<HttpResponse, AppError> {
    let (bounds, limit) = (
        query.status_bounds()?,
        query.limit(DEFAULT_LIMIT, MAX_LIMIT)?,
    );
    engine.user(caller.id).await?;
    let posts = engine
        .reads()
        .page_between(Feed::Home(caller.id), bounds, limit)
        .await?;
    status_list(&req, &engine, posts).await
}

/// An account's statuses (Mastodon), newest first, paged as the home
/// timeline; none while it and the caller block one another.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_account_statuses",
    params(("id" = String, Path, description = "Account id"), IdPaging),
    responses(
        (status = 200, description = "Statuses, newest first", body = Vec<Status>,
            headers(("Link" = String, description = "`rel=\"next\"` and `rel=\"prev\"` pages"))),
        (status = 404, description = "No such account", body = ErrorBody),
    )
)]
#[get("/accounts/{id}/statuses")]
pub async fn account_statuses(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<IdPaging>,
) -> Result<HttpResponse, AppError> {
    let author = account_id(&path)?;
    let (bounds, limit) = (
        query.status_bounds()?,
        query.limit(DEFAULT_LIMIT, MAX_LIMIT)?,
    );
    engine.profiles().profile(author).await?;
    let feed = Feed::Author {
        viewer: caller.viewer(),
        author,
    };
    let posts = engine.reads().page_between(feed, bounds, limit).await?;
    status_list(&req, &engine, posts).await
}
