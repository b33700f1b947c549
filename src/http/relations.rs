//! Mutes and blocks: what a user keeps out of its home, and whom it keeps
//! apart from.

use actix_web::{delete, get, put, web, HttpResponse};

use super::auth::Caller;
use super::errors::ErrorBody;
use super::users::{edge, id};
use super::views::UserPageView;
use super::PageQuery;
use crate::engine::{Engine, Relation};
use crate::error::AppError;

/// User `id` mutes `target` (idempotent): the target's posts leave its
/// home when this returns; follows are kept.
#[utoipa::path(
    tag = "relations",
    operation_id = "mute",
    params(
        ("id" = i64, Path, description = "The muter (the caller, unless admin)", minimum = 1),
        ("target" = i64, Path, description = "The user to mute", minimum = 1),
    ),
    responses(
        (status = 204, description = "Muted"),
        (status = 403, description = "Acting for another user", body = ErrorBody),
        (status = 404, description = "No such user", body = ErrorBody),
        (status = 422, description = "A user cannot mute itself", body = ErrorBody),
    )
)]
#[put("/users/{id}/mutes/{target}")]
pub async fn mute(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let (user, target) = edge(&caller, &path)?;
    engine.relations().mute(user, target, true).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// User `id` unmutes `target` (idempotent): the target's posts are back
/// in its home when this returns, if it follows the target.
#[utoipa::path(
    tag = "relations",
    operation_id = "unmute",
    params(
        ("id" = i64, Path, description = "The muter (the caller, unless admin)", minimum = 1),
        ("target" = i64, Path, description = "The user to unmute", minimum = 1),
    ),
    responses(
        (status = 204, description = "Not muted"),
        (status = 403, description = "Acting for another user", body = ErrorBody),
        (status = 404, description = "No such user", body = ErrorBody),
        (status = 422, description = "A user cannot unmute itself", body = ErrorBody),
    )
)]
#[delete("/users/{id}/mutes/{target}")]
pub async fn unmute(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let (user, target) = edge(&caller, &path)?;
    engine.relations().mute(user, target, false).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// User `id` blocks `target` (idempotent): the follows between them go,
/// either way, and neither may follow the other (422) while it stands;
/// neither sees the other's posts.
#[utoipa::path(
    tag = "relations",
    operation_id = "block",
    params(
        ("id" = i64, Path, description = "The blocker (the caller, unless admin)", minimum = 1),
        ("target" = i64, Path, description = "The user to block", minimum = 1),
    ),
    responses(
        (status = 204, description = "Blocked"),
        (status = 403, description = "Acting for another user", body = ErrorBody),
        (status = 404, description = "No such user", body = ErrorBody),
        (status = 422, description = "A user cannot block itself", body = ErrorBody),
    )
)]
#[put("/users/{id}/blocks/{target}")]
pub async fn block(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let (user, target) = edge(&caller, &path)?;
    engine.relations().block(user, target).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// User `id` unblocks `target` (idempotent; no follow comes back).
#[utoipa::path(
    tag = "relations",
    operation_id = "unblock",
    params(
        ("id" = i64, Path, description = "The blocker (the caller, unless admin)", minimum = 1),
        ("target" = i64, Path, description = "The user to unblock", minimum = 1),
    ),
    responses(
        (status = 204, description = "Not blocked"),
        (status = 403, description = "Acting for another user", body = ErrorBody),
    )
)]
#[delete("/users/{id}/blocks/{target}")]
pub async fn unblock(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let (user, target) = edge(&caller, &path)?;
    engine.relations().unblock(user, target).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The users `id` mutes, newest first (the feed's `max`/`offset` cursor
/// over when).
#[utoipa::path(
    tag = "relations",
    operation_id = "list_mutes",
    params(("id" = i64, Path, description = "The muter (the caller, unless admin)", minimum = 1), PageQuery),
    responses(
        (status = 200, description = "A page of muted users", body = UserPageView),
        (status = 403, description = "Another user's list", body = ErrorBody),
    )
)]
#[get("/users/{id}/mutes")]
pub async fn mutes(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, AppError> {
    list(caller, engine, path, query, Relation::Mutes).await
}

/// The users `id` blocks, newest first (the feed's `max`/`offset` cursor
/// over when).
#[utoipa::path(
    tag = "relations",
    operation_id = "list_blocks",
    params(("id" = i64, Path, description = "The blocker (the caller, unless admin)", minimum = 1), PageQuery),
    responses(
        (status = 200, description = "A page of blocked users", body = UserPageView),
        (status = 403, description = "Another user's list", body = ErrorBody),
    )
)]
#[get("/users/{id}/blocks")]
pub async fn blocks(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, AppError> {
    list(caller, engine, path, query, Relation::Blocks).await
}

async fn list(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<PageQuery>,
    which: Relation,
) -> Result<HttpResponse, AppError> {
    let user = id(&path, "user id")?;
    caller.may_act_for(user)?;
    let req = query.parse()?;
    let page = engine.relations().relations(user, which, req).await?;
    Ok(HttpResponse::Ok().json(UserPageView::from(&page)))
}
