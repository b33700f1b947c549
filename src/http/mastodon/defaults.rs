//! What clients ask for on start-up and on their home screen that the
//! service has nothing of, or only its defaults: preferences, custom
//! emojis, announcements and followed hashtags, in Mastodon's shapes. An
//! empty list is Mastodon's answer for a server without any.

use actix_web::{get, HttpResponse};
use serde_json::json;

use crate::http::auth::Caller;

/// The caller's preferences (Mastodon): the service's defaults, which no
/// call changes (every post is public, in the author's words).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_preferences",
    responses((status = 200, description = "The caller's preferences", body = Object))
)]
#[get("/preferences")]
pub async fn preferences(_caller: Caller) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "posting:default:visibility": "public",
        "posting:default:sensitive": false,
        "posting:default:language": null,
        "reading:expand:media": "default",
        "reading:expand:spoilers": false,
    }))
}

/// The server's custom emojis (Mastodon): none. No token needed.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_custom_emojis",
    responses((status = 200, description = "No custom emoji", body = Vec<Object>))
)]
#[get("/custom_emojis")]
pub async fn custom_emojis() -> HttpResponse {
    HttpResponse::Ok().json(json!([]))
}

/// The server's announcements (Mastodon): none.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_announcements",
    responses((status = 200, description = "No announcement", body = Vec<Object>))
)]
#[get("/announcements")]
pub async fn announcements(_caller: Caller) -> HttpResponse {
    HttpResponse::Ok().json(json!([]))
}

/// The hashtags the caller follows (Mastodon): none, as the service has no
/// hashtags.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_followed_tags",
    responses((status = 200, description = "No followed hashtag", body = Vec<Object>))
)]
#[get("/followed_tags")]
pub async fn followed_tags(_caller: Caller) -> HttpResponse {
    HttpResponse::Ok().json(json!([]))
}
