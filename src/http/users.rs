use actix_web::{delete, get, post, put, web, HttpResponse};
use serde::Deserialize;

use super::auth::{Admin, Caller};
use super::errors::ErrorBody;
use super::{JsonObject, PageQuery};
use crate::domain::{parse_id, Username};
use crate::engine::{Engine, Page};
use crate::error::AppError;
use crate::store::pg::models::User;

/// A new user.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"username": "alice"}))]
pub struct NewUserBody {
    /// 1 to 32 characters of `[a-z0-9_]`.
    #[schema(min_length = 1, max_length = 32, pattern = "^[a-z0-9_]{1,32}$")]
    username: String,
}

fn id(raw: &str, what: &str) -> Result<i64, AppError> {
    parse_id(raw, what).map_err(AppError::BadRequest)
}

/// Creates a user (admin).
#[utoipa::path(
    tag = "users",
    operation_id = "create_user",
    request_body = NewUserBody,
    responses(
        (status = 201, description = "The user", body = User, links(
            ("GetUser" = (operation_id = "get_user", parameters(("id" = "$response.body#/id")))),
            ("Follow" = (operation_id = "follow", parameters(("target" = "$response.body#/id")))),
            ("UserPosts" = (operation_id = "user_posts", parameters(("id" = "$response.body#/id")))),
        )),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 409, description = "Username taken", body = ErrorBody),
        (status = 422, description = "Invalid username", body = ErrorBody),
    )
)]
#[post("/users")]
pub async fn create(
    _admin: Admin,
    engine: web::Data<Engine>,
    JsonObject(body): JsonObject<NewUserBody>,
) -> Result<HttpResponse, AppError> {
    let username = Username::parse(&body.username).map_err(AppError::Unprocessable)?;
    let user = engine.create_user(&username).await?;
    Ok(HttpResponse::Created().json(user))
}

/// A user.
#[utoipa::path(
    tag = "users",
    operation_id = "get_user",
    params(("id" = i64, Path, description = "User id", minimum = 1)),
    responses(
        (status = 200, description = "The user", body = User),
        (status = 404, description = "No such user", body = ErrorBody),
    )
)]
#[get("/users/{id}")]
pub async fn get(
    _caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let user = engine.user(id(&path, "user id")?).await?;
    Ok(HttpResponse::Ok().json(user))
}

/// The (follower, target) of a following route, once the caller may act
/// for the follower.
fn edge(caller: &Caller, path: &(String, String)) -> Result<(i64, i64), AppError> {
    let follower = id(&path.0, "user id")?;
    let target = id(&path.1, "target user id")?;
    caller.may_act_for(follower)?;
    Ok((follower, target))
}

/// User `id` follows `target` (idempotent).
#[utoipa::path(
    tag = "users",
    operation_id = "follow",
    params(
        ("id" = i64, Path, description = "The follower (the caller, unless admin)", minimum = 1),
        ("target" = i64, Path, description = "The user to follow", minimum = 1),
    ),
    responses(
        (status = 204, description = "Following"),
        (status = 403, description = "Acting for another user", body = ErrorBody),
        (status = 404, description = "No such user", body = ErrorBody),
        (status = 422, description = "A user cannot follow itself", body = ErrorBody),
    )
)]
#[put("/users/{id}/following/{target}")]
pub async fn follow(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let (follower, target) = edge(&caller, &path)?;
    engine.follow(follower, target).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// User `id` stops following `target` (idempotent). No page shows the
/// target's posts to it once this returns.
#[utoipa::path(
    tag = "users",
    operation_id = "unfollow",
    params(
        ("id" = i64, Path, description = "The follower (the caller, unless admin)", minimum = 1),
        ("target" = i64, Path, description = "The user to stop following", minimum = 1),
    ),
    responses(
        (status = 204, description = "Not following"),
        (status = 403, description = "Acting for another user", body = ErrorBody),
    )
)]
#[delete("/users/{id}/following/{target}")]
pub async fn unfollow(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let (follower, target) = edge(&caller, &path)?;
    engine.unfollow(follower, target).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// An author's own posts, newest first, with the same cursors as the feed
/// (`max` down, `min` up). Empty while the author and the caller block one
/// another.
#[utoipa::path(
    tag = "users",
    operation_id = "user_posts",
    params(("id" = i64, Path, description = "Author id", minimum = 1), PageQuery),
    responses(
        (status = 200, description = "A page of the author's posts", body = Page),
        (status = 404, description = "No such user", body = ErrorBody),
    )
)]
#[get("/users/{id}/posts")]
pub async fn posts(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, AppError> {
    let author = id(&path, "user id")?;
    let req = query.parse()?;
    let page = engine
        .author_page_seen_by(caller.viewer(), author, req)
        .await?;
    Ok(HttpResponse::Ok().json(page))
}
