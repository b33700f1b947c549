use actix_web::{delete, get, post, web, HttpResponse};
use serde::Deserialize;

use super::auth::Caller;
use super::errors::ErrorBody;
use super::JsonObject;
use crate::domain::{parse_id, PostBody};
use crate::engine::Engine;
use crate::error::AppError;
use crate::store::pg::models::Post;

/// A new post.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"body": "hello"}))]
pub struct NewPostBody {
    /// 1 to 2000 characters.
    #[schema(min_length = 1, max_length = 2000)]
    body: String,
}

/// Publishes a post by the caller. It is committed, and in every
/// follower's feed, when this returns.
#[utoipa::path(
    tag = "posts",
    operation_id = "create_post",
    request_body = NewPostBody,
    responses(
        (status = 201, description = "The post", body = Post, links(
            ("GetPost" = (operation_id = "get_post", parameters(("id" = "$response.body#/id")))),
            ("DeletePost" = (operation_id = "delete_post", parameters(("id" = "$response.body#/id")))),
        )),
        (status = 404, description = "The caller is not a user", body = ErrorBody),
        (status = 422, description = "Invalid body", body = ErrorBody),
    )
)]
#[post("/posts")]
pub async fn create(
    caller: Caller,
    engine: web::Data<Engine>,
    JsonObject(body): JsonObject<NewPostBody>,
) -> Result<HttpResponse, AppError> {
    let text = PostBody::parse(&body.body).map_err(AppError::Unprocessable)?;
    let post = engine.publish(caller.id, &text).await?;
    Ok(HttpResponse::Created().json(post))
}

/// A live post.
#[utoipa::path(
    tag = "posts",
    operation_id = "get_post",
    params(("id" = i64, Path, description = "Post id", minimum = 1)),
    responses(
        (status = 200, description = "The post", body = Post),
        (status = 404, description = "No such post, or deleted", body = ErrorBody),
    )
)]
#[get("/posts/{id}")]
pub async fn get(
    _caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let id = parse_id(&path, "post id").map_err(AppError::BadRequest)?;
    Ok(HttpResponse::Ok().json(engine.post(id).await?))
}

/// Deletes a post: its author's, or any for an admin. No page shows it
/// once this returns.
#[utoipa::path(
    tag = "posts",
    operation_id = "delete_post",
    params(("id" = i64, Path, description = "Post id", minimum = 1)),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "Another user's post", body = ErrorBody),
        (status = 404, description = "No such post, or deleted already", body = ErrorBody),
    )
)]
#[delete("/posts/{id}")]
pub async fn delete(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let id = parse_id(&path, "post id").map_err(AppError::BadRequest)?;
    let actor = (!caller.admin).then_some(caller.id);
    engine.delete_post(id, actor).await?;
    Ok(HttpResponse::NoContent().finish())
}
