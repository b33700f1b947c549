//! Mastodon's notifications (v1): a user's new followers (`follow`), newest
//! first and paged by notification id; one by id; dismissed one by one or
//! cleared; the unread count from the notifications marker. The kinds the
//! service has no source of (mentions, favourites, boosts, …) are never
//! produced: asking for them finds none.

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use serde::Serialize;
use serde_json::json;

use super::entities::{iso8601, Account, Origin};
use super::IdPaging;
use crate::engine::notifications::{Told, KINDS};
use crate::engine::Engine;
use crate::error::AppError;
use crate::http::auth::Caller;
use crate::http::errors::ErrorBody;
use crate::store::pg::NotificationFilter;

/// Notifications a page holds by default, and at most.
pub(super) const DEFAULT_LIMIT: u32 = 40;
pub(super) const MAX_LIMIT: u32 = 80;

/// The unread count counts to this by default, and at most to
/// [`crate::store::pg::NOTIFICATIONS_KEPT`].
const DEFAULT_COUNT_LIMIT: u32 = 100;

/// Mastodon's kinds of notification: a filter may name any of them.
const MASTODON_KINDS: [&str; 14] = [
    "mention",
    "status",
    "reblog",
    "follow",
    "follow_request",
    "favourite",
    "poll",
    "update",
    "admin.sign_up",
    "admin.report",
    "severed_relationships",
    "moderation_warning",
    "quote",
    "quoted_update",
];

/// A notification, as Mastodon's Notification.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MastodonNotification)]
pub struct Notification {
    id: String,
    /// `follow`.
    #[serde(rename = "type")]
    kind: String,
    /// The group it belongs to (`follow-<hour>`: new followers within
    /// twelve hours of the group's first).
    group_key: String,
    created_at: String,
    /// Whose act it tells of.
    account: Account,
}

impl Notification {
    pub(super) fn new((row, account): &Told, origin: &Origin) -> Self {
        Notification {
            id: row.id.to_string(),
            kind: row.kind.clone(),
            group_key: row.group_key.clone(),
            created_at: iso8601(row.created_at_ms),
            account: Account::new(account, origin),
        }
    }
}

/// A notification id in a path or a bound.
fn notification_id(name: &str, raw: &str) -> Result<i64, AppError> {
    crate::domain::parse_id(raw, name).map_err(AppError::BadRequest)
}

/// The kinds a repeated parameter names, each one of Mastodon's.
pub(super) fn known_kinds(req: &HttpRequest, name: &str) -> Result<Vec<String>, AppError> {
    let names = super::repeated_param(req, name)?;
    for name in &names {
        if !MASTODON_KINDS.contains(&name.as_str()) {
            return Err(AppError::BadRequest(format!(
                "{name:?} is not a kind of notification"
            )));
        }
    }
    Ok(names)
}

/// The kinds a page asks for: `types[]` (all if none) less
/// `exclude_types[]`, of those the service has.
pub(super) fn kinds(req: &HttpRequest) -> Result<Option<Vec<String>>, AppError> {
    let types = known_kinds(req, "types")?;
    let excluded = known_kinds(req, "exclude_types")?;
    if types.is_empty() && excluded.is_empty() {
        return Ok(None);
    }
    let wanted = KINDS
        .iter()
        .filter(|k| types.is_empty() || types.iter().any(|t| t == *k))
        .filter(|k| !excluded.iter().any(|t| t == *k))
        .map(|k| k.to_string())
        .collect();
    Ok(Some(wanted))
}

/// The `types[]`, `exclude_types[]` and `account_id` of a request.
pub(super) fn filter(req: &HttpRequest) -> Result<NotificationFilter, AppError> {
    let account = super::repeated_param(req, "account_id")?
        .first()
        .map(|v| super::account_id(v))
        .transpose()?;
    Ok(NotificationFilter {
        kinds: kinds(req)?,
        account,
    })
}

/// The caller's notifications (Mastodon), newest first, with a `Link`
/// header; `types[]`, `exclude_types[]` and `account_id` narrow them.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_notifications",
    params(
        IdPaging,
        ("types[]" = Option<Vec<String>>, Query, description = "Only these kinds"),
        ("exclude_types[]" = Option<Vec<String>>, Query, description = "Not these kinds"),
        ("account_id" = Option<String>, Query, description = "Only from this account"),
    ),
    responses(
        (status = 200, description = "The notifications", body = Vec<Notification>),
        (status = 400, description = "A malformed id or an unknown kind", body = ErrorBody),
    )
)]
#[get("/notifications")]
pub async fn list(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    query: web::Query<IdPaging>,
) -> Result<HttpResponse, AppError> {
    let limit = query.limit(DEFAULT_LIMIT, MAX_LIMIT)?;
    let range = query.id_range("a notification id")?;
    let filter = filter(&req)?;
    let told = engine
        .notifications()
        .page(caller.id, range, &filter, limit)
        .await?;
    let origin = Origin::of(&req);
    let notes: Vec<Notification> = told.iter().map(|t| Notification::new(t, &origin)).collect();
    let ends = told.first().zip(told.last());
    let ends = ends.map(|(first, last)| (first.0.id.to_string(), last.0.id.to_string()));
    Ok(super::paged(&req, &origin, ends, notes))
}

/// How many notifications are newer than the caller's notifications
/// marker (Mastodon 4.3), counted up to `limit` (default 100, at most
/// 1,000); `types[]`, `exclude_types[]` and `account_id` narrow them.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_notifications_unread_count",
    params(
        ("limit" = Option<i64>, Query, description = "Count up to this"),
        ("types[]" = Option<Vec<String>>, Query, description = "Only these kinds"),
        ("exclude_types[]" = Option<Vec<String>>, Query, description = "Not these kinds"),
        ("account_id" = Option<String>, Query, description = "Only from this account"),
    ),
    responses(
        (status = 200, description = "`{\"count\": n}`", body = Object),
        (status = 400, description = "A malformed limit", body = ErrorBody),
    )
)]
#[get("/notifications/unread_count")]
pub async fn unread_count(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    query: web::Query<IdPaging>,
) -> Result<HttpResponse, AppError> {
    unread(&req, &caller, &engine, &query, false).await
}

/// `{"count": n}`: how many of the caller's notifications (with
/// `grouped`, groups) are newer than its notifications marker, counted up
/// to the `limit` asked.
pub(super) async fn unread(
    req: &HttpRequest,
    caller: &Caller,
    engine: &Engine,
    query: &IdPaging,
    grouped: bool,
) -> Result<HttpResponse, AppError> {
    let most = crate::store::pg::NOTIFICATIONS_KEPT as u32;
    let limit = query.limit(DEFAULT_COUNT_LIMIT, most)?;
    let filter = filter(req)?;
    let count = engine
        .notifications()
        .unread(caller.id, &filter, grouped, limit)
        .await?;
    Ok(HttpResponse::Ok().json(json!({ "count": count })))
}

/// Removes every notification of the caller (Mastodon).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_notifications_clear",
    responses((status = 200, description = "`{}`", body = Object))
)]
#[post("/notifications/clear")]
pub async fn clear(caller: Caller, engine: web::Data<Engine>) -> Result<HttpResponse, AppError> {
    engine.notifications().dismiss(caller.id, None).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

/// One of the caller's notifications (Mastodon).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_notification",
    params(("id" = String, Path, description = "Notification id")),
    responses(
        (status = 200, description = "The notification", body = Notification),
        (status = 400, description = "A malformed id", body = ErrorBody),
        (status = 404, description = "The caller has no notification of that id", body = ErrorBody),
    )
)]
#[get("/notifications/{id}")]
pub async fn get(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    if path.as_str() == "clear" {
        // The literal route's path, asked with another method.
        return Ok(crate::http::errors::unmatched(req).await);
    }
    let id = notification_id("notification id", &path)?;
    let told = engine.notifications().one(caller.id, id).await?;
    Ok(HttpResponse::Ok().json(Notification::new(&told, &Origin::of(&req))))
}

/// Removes one of the caller's notifications (Mastodon).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_notification_dismiss",
    params(("id" = String, Path, description = "Notification id")),
    responses(
        (status = 200, description = "`{}`", body = Object),
        (status = 400, description = "A malformed id", body = ErrorBody),
        (status = 404, description = "The caller has no notification of that id", body = ErrorBody),
    )
)]
#[post("/notifications/{id}/dismiss")]
pub async fn dismiss(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let id = notification_id("notification id", &path)?;
    engine.notifications().dismiss(caller.id, Some(id)).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}
