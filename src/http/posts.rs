use actix_web::{delete, get, post, web, HttpResponse};
use serde::Deserialize;

use super::auth::Caller;
use super::errors::ErrorBody;
use super::views::PostView;
use super::JsonObject;
use crate::domain::{parse_id, IdempotencyKey, PostBody, PostMeta};
use crate::engine::{Engine, Publishing};
use crate::error::AppError;
use crate::types::PostId;

/// A new post.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"body": "hello", "meta": {"lang": "en"}}))]
pub struct NewPostBody {
    /// 1 to 2000 characters.
    #[schema(min_length = 1, max_length = 2000)]
    body: String,
    /// The app's own data: a JSON object of at most 4 KiB (written
    /// compactly), returned with the post.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    meta: Option<serde_json::Value>,
}

/// The header that names a publish for its retries.
const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The key a publish names itself with for its retries, if any.
pub(crate) fn idempotency_key(
    req: &actix_web::HttpRequest,
) -> Result<Option<IdempotencyKey>, AppError> {
    req.headers()
        .get(IDEMPOTENCY_KEY)
        .map(|v| IdempotencyKey::parse(v.as_bytes()).map_err(AppError::BadRequest))
        .transpose()
}

/// Set on the answer to a retry: the post is the first call's.
const REPLAYED: &str = "idempotent-replayed";

/// Publishes a post by the caller. It is committed, and in every
/// follower's feed, when this returns. With an `Idempotency-Key`, a retry
/// (same key, same body and meta, within 24 hours) answers the first post
/// again, with `Idempotent-Replayed: true`, and publishes nothing.
#[utoipa::path(
    tag = "posts",
    operation_id = "create_post",
    request_body = NewPostBody,
    params(
        ("Idempotency-Key" = Option<String>, Header,
            description = "1 to 255 visible ASCII characters naming this publish for its retries"),
    ),
    responses(
        (status = 201, description = "The post (the first one, on a retry)", body = PostView,
            headers(("Idempotent-Replayed" = String, description = "`true` on a retry's answer")),
            links(
            ("GetPost" = (operation_id = "get_post", parameters(("id" = "$response.body#/id")))),
            ("DeletePost" = (operation_id = "delete_post", parameters(("id" = "$response.body#/id")))),
        )),
        (status = 400, description = "A malformed Idempotency-Key", body = ErrorBody),
        (status = 403, description = "The caller's account is suspended", body = ErrorBody),
        (status = 404, description = "The caller is not a user", body = ErrorBody),
        (status = 409, description = "A publish with the same key is in progress", body = ErrorBody),
        (status = 422, description = "Invalid body or meta, or a key used for another post", body = ErrorBody),
    )
)]
#[post("/posts")]
pub async fn create(
    req: actix_web::HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    JsonObject(body): JsonObject<NewPostBody>,
) -> Result<HttpResponse, AppError> {
    let key = idempotency_key(&req)?;
    let text = PostBody::parse(&body.body).map_err(AppError::Unprocessable)?;
    let meta = match &body.meta {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(PostMeta::parse(v).map_err(AppError::Unprocessable)?),
    };
    let published = engine
        .posts()
        .publish_keyed(caller.id, (&text, meta.as_ref()), key.as_ref())
        .await?;
    let mut res = HttpResponse::Created();
    if published.replayed {
        res.insert_header((REPLAYED, "true"));
    }
    let answer = res.json(PostView::from(&published.post));
    after_the_answer(published.held);
    Ok(answer)
}

/// Lets this instance's streams tell a new post once its publish's answer
/// is written: the task that drops `held` runs after the connection's
/// current turn, in which actix writes the answer to the socket. (Dropped
/// at once, the streams' events would wake first and the answer would
/// wait for the cores behind them.)
pub(crate) fn after_the_answer(held: Option<Publishing>) {
    if let Some(held) = held {
        actix_web::rt::spawn(async move { drop(held) });
    }
}

/// A live post (404 while its author and the caller block one another).
#[utoipa::path(
    tag = "posts",
    operation_id = "get_post",
    params(("id" = i64, Path, description = "Post id", minimum = 1)),
    responses(
        (status = 200, description = "The post", body = PostView),
        (status = 404, description = "No such post, or deleted", body = ErrorBody),
    )
)]
#[get("/posts/{id}")]
pub async fn get(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let id = parse_id(&path, "post id")
        .map(PostId)
        .map_err(AppError::BadRequest)?;
    let post = engine.posts().post_seen_by(caller.viewer(), id).await?;
    Ok(HttpResponse::Ok().json(PostView::from(&post)))
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
    let id = parse_id(&path, "post id")
        .map(PostId)
        .map_err(AppError::BadRequest)?;
    let actor = (!caller.admin).then_some(caller.id);
    engine.posts().delete_post(id, actor).await?;
    Ok(HttpResponse::NoContent().finish())
}
