use actix_web::{delete, get, post, web, HttpRequest, HttpResponse};
use futures::StreamExt;
use serde::Deserialize;

use super::entities::{parse_status_id, Origin, Status};
use super::filters::filtered;
use crate::domain::PostBody;
use crate::engine::Engine;
use crate::error::AppError;
use crate::http::auth::Caller;
use crate::http::errors::{read_body, ErrorBody, MAX_BODY_BYTES};
use crate::types::{Post, PostId};

/// A new status, as JSON or a form. Only public text posts exist here:
/// what would ask for more (media, polls, replies, a content warning, a
/// narrower visibility, scheduling) is refused rather than dropped.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = MastodonNewStatus, example = json!({"status": "hello"}))]
pub struct NewStatus {
    /// 1 to 2000 characters.
    status: Option<String>,
    /// `public` (or `unlisted`, shown the same).
    visibility: Option<String>,
    spoiler_text: Option<String>,
    in_reply_to_id: Option<String>,
    scheduled_at: Option<String>,
    #[serde(rename = "media_ids[]", alias = "media_ids")]
    #[schema(value_type = Option<Vec<String>>)]
    media_ids: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    poll: Option<serde_json::Value>,
}

impl NewStatus {
    /// The post's text, or why it cannot be published here.
    fn text(&self) -> Result<PostBody, AppError> {
        let refuse = |what: &str| {
            Err(AppError::Unprocessable(format!(
                "{what} is not supported by this service"
            )))
        };
        let some = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
        match self.visibility.as_deref() {
            None | Some("") | Some("public") | Some("unlisted") => {}
            Some(other) => return refuse(&format!("visibility {other:?}")),
        }
        if some(&self.spoiler_text) {
            return refuse("spoiler_text");
        }
        if some(&self.in_reply_to_id) {
            return refuse("in_reply_to_id");
        }
        if some(&self.scheduled_at) {
            return refuse("scheduled_at");
        }
        let present = |v: &Option<serde_json::Value>| match v {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Array(a)) => !a.is_empty(),
            Some(serde_json::Value::String(s)) => !s.is_empty(),
            Some(_) => true,
        };
        if present(&self.media_ids) {
            return refuse("media_ids");
        }
        if present(&self.poll) {
            return refuse("poll");
        }
        PostBody::parse(self.status.as_deref().unwrap_or_default()).map_err(AppError::Unprocessable)
    }
}

/// The new status of a request body: JSON, or a form.
fn new_status(req: &HttpRequest, body: &[u8]) -> Result<NewStatus, AppError> {
    let json = super::is_json(req);
    if json {
        match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(v @ serde_json::Value::Object(_)) => serde_json::from_value(v)
                .map_err(|e| AppError::BadRequest(format!("invalid JSON body: {e}"))),
            Ok(_) => Err(AppError::BadRequest(
                "the body must be a JSON object".into(),
            )),
            Err(e) => Err(AppError::BadRequest(format!("invalid JSON body: {e}"))),
        }
    } else {
        // A form: Mastodon's `media_ids[]` may repeat; only whether it is
        // there matters.
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
            .map_err(|e| AppError::BadRequest(format!("invalid form body: {e}")))?;
        let field = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let media = pairs
            .iter()
            .any(|(k, v)| (k == "media_ids[]" || k == "media_ids") && !v.is_empty());
        let poll = pairs.iter().any(|(k, _)| k.starts_with("poll"));
        Ok(NewStatus {
            status: field("status"),
            visibility: field("visibility"),
            spoiler_text: field("spoiler_text"),
            in_reply_to_id: field("in_reply_to_id"),
            scheduled_at: field("scheduled_at"),
            media_ids: media.then_some(serde_json::Value::Bool(true)),
            poll: poll.then_some(serde_json::Value::Bool(true)),
        })
    }
}

/// Publishes a status (Mastodon): in every follower's home when this
/// returns. With `Idempotency-Key`, a retry within 24 hours answers the
/// first status and publishes nothing.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_post_status",
    request_body(content = NewStatus, content_type = "application/json"),
    params(
        ("Idempotency-Key" = Option<String>, Header,
            description = "1 to 255 visible ASCII characters naming this publish for its retries"),
    ),
    responses(
        (status = 200, description = "The status (the first one, on a retry)", body = Status),
        (status = 403, description = "The caller is suspended", body = ErrorBody),
        (status = 404, description = "The caller is no account", body = ErrorBody),
        (status = 408, description = "The body arrived too slowly", body = ErrorBody),
        (status = 409, description = "A publish with the same key is in progress", body = ErrorBody),
        (status = 413, description = "A body over 64 KiB", body = ErrorBody),
        (status = 422, description = "No text, too long, or asking for what is not supported", body = ErrorBody),
    )
)]
#[post("/statuses")]
pub async fn create(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    payload: web::Payload,
) -> Result<HttpResponse, AppError> {
    let body = read_body(payload, MAX_BODY_BYTES).await?;
    let key = crate::http::posts::idempotency_key(&req)?;
    let text = new_status(&req, &body)?.text()?;
    let published = engine
        .posts()
        .publish_keyed(caller.id, (&text, None), key.as_ref())
        .await?;
    let answer = status(&req, &engine, &published.post).await;
    crate::http::posts::after_the_answer(published.held);
    answer
}

/// The status of one post.
async fn status(req: &HttpRequest, engine: &Engine, post: &Post) -> Result<HttpResponse, AppError> {
    let author = engine.profiles().profile(post.author_id).await?;
    Ok(HttpResponse::Ok().json(Status::new(post, &author, &Origin::of(req))))
}

/// The post a status id (or a post id of the service's own API) names.
async fn post_of(caller: &Caller, engine: &Engine, raw: &str) -> Result<Post, AppError> {
    let gone = || AppError::NotFound(format!("status {raw} does not exist"));
    let (id, score) = match parse_status_id(raw) {
        Some(entry) => (entry.id, Some(entry.score)),
        None => (
            crate::domain::parse_id(raw, "status id")
                .map(PostId)
                .map_err(AppError::BadRequest)?,
            None,
        ),
    };
    let post = engine.posts().post_seen_by(caller.viewer(), id).await?;
    if score.is_some_and(|s| s != post.created_at_ms) {
        return Err(gone());
    }
    Ok(post)
}

/// A status (Mastodon).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_get_status",
    params(("id" = String, Path, description = "Status id (or post id)")),
    responses(
        (status = 200, description = "The status", body = Status),
        (status = 404, description = "No such status, or deleted", body = ErrorBody),
    )
)]
#[get("/statuses/{id}")]
pub async fn get(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let post = post_of(&caller, &engine, &path).await?;
    let author = engine.profiles().profile(post.author_id).await?;
    let status = Status::new(&post, &author, &Origin::of(&req));
    let filters = engine.filters().applying(caller.id, "thread").await?;
    let status = filtered(&filters, vec![status], false);
    Ok(HttpResponse::Ok().json(status.first()))
}

/// Statuses one call reads at most (Mastodon's limit).
pub const MAX_STATUSES: usize = 20;

/// Several statuses (Mastodon 4.3): `id[]` repeated, up to 20, answered in
/// the order asked (each once); those that do not exist, are deleted or
/// are hidden from the caller are left out.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_get_statuses",
    params(("id[]" = Vec<String>, Query, description = "Status ids (or post ids)")),
    responses(
        (status = 200, description = "The statuses found, in the order asked", body = Vec<Status>),
        (status = 400, description = "A malformed id", body = ErrorBody),
        (status = 422, description = "More than 20 ids", body = ErrorBody),
    )
)]
#[get("/statuses")]
pub async fn several(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
) -> Result<HttpResponse, AppError> {
    let mut ids = super::repeated_param(&req, "id")?;
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(id.clone()));
    if ids.len() > MAX_STATUSES {
        return Err(AppError::Unprocessable(format!(
            "at most {MAX_STATUSES} ids at once"
        )));
    }
    let found = futures::stream::iter(ids.iter().map(|id| post_of(&caller, &engine, id)))
        .buffered(4)
        .collect::<Vec<_>>()
        .await;
    let mut posts = Vec::with_capacity(found.len());
    for post in found {
        match post {
            Ok(post) => posts.push(post),
            Err(AppError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let statuses = super::statuses(&engine, &Origin::of(&req), &posts).await?;
    let filters = engine.filters().applying(caller.id, "thread").await?;
    Ok(HttpResponse::Ok().json(filtered(&filters, statuses, false)))
}

/// Deletes a status (Mastodon): the caller's own, or any for an admin. No
/// page shows it once this returns; the answer is the status deleted.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_delete_status",
    params(("id" = String, Path, description = "Status id (or post id)")),
    responses(
        (status = 200, description = "The status deleted", body = Status),
        (status = 403, description = "Another user's status", body = ErrorBody),
        (status = 404, description = "No such status, or deleted already", body = ErrorBody),
    )
)]
#[delete("/statuses/{id}")]
pub async fn delete(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let post = post_of(&caller, &engine, &path).await?;
    let author = engine.profiles().profile(post.author_id).await?;
    let actor = (!caller.admin).then_some(caller.id);
    engine.posts().delete_post(post.id, actor).await?;
    Ok(HttpResponse::Ok().json(Status::new(&post, &author, &Origin::of(&req))))
}
