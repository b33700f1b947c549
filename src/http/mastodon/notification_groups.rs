//! Mastodon's grouped notifications (v2, Mastodon 4.3): the same
//! notifications as v1, in groups (new followers within twelve hours of a
//! group's first share it); a page holds up to `limit` groups, each
//! counting the notifications of it the page covers. A group is read,
//! its accounts listed and it is dismissed whole by its key; the unread
//! count counts groups.

use std::collections::HashMap;

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use serde::Serialize;
use serde_json::json;

use super::entities::{iso8601, Account, Origin};
use super::notifications::{filter, known_kinds, unread, DEFAULT_LIMIT, MAX_LIMIT};
use super::IdPaging;
use crate::engine::notifications::{groups_of, Group};
use crate::engine::Engine;
use crate::error::AppError;
use crate::http::auth::Caller;
use crate::http::errors::ErrorBody;
use crate::store::pg::{AccountRow, NotificationRow};
use crate::types::UserId;

/// A group of notifications, as Mastodon's NotificationGroup.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MastodonNotificationGroup)]
pub struct NotificationGroup {
    group_key: String,
    /// How many of its notifications the page covers (all of them when
    /// the group is read by its key).
    notifications_count: usize,
    /// `follow`.
    #[serde(rename = "type")]
    kind: String,
    most_recent_notification_id: String,
    /// Paging only: the oldest and newest of its notifications the page
    /// covers, and the newest one's time.
    #[serde(skip_serializing_if = "Option::is_none")]
    page_min_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    page_max_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latest_page_notification_at: Option<String>,
    /// The accounts of its newest notifications (at most eight), each in
    /// `accounts`.
    sample_account_ids: Vec<String>,
}

impl NotificationGroup {
    fn new(group: &Group, paged: bool) -> Self {
        let page = |v: String| paged.then_some(v);
        NotificationGroup {
            group_key: group.key.clone(),
            notifications_count: group.count,
            kind: group.kind.clone(),
            most_recent_notification_id: group.newest.id.to_string(),
            page_min_id: page(group.oldest_id.to_string()),
            page_max_id: page(group.newest.id.to_string()),
            latest_page_notification_at: page(iso8601(group.newest.created_at_ms)),
            sample_account_ids: group.sample.iter().map(|a| a.to_string()).collect(),
        }
    }
}

/// Groups with what they name, as Mastodon's GroupedNotificationsResults.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MastodonGroupedNotifications)]
pub struct Grouped {
    accounts: Vec<Account>,
    /// Always empty: no kind of notification here names a status.
    #[schema(value_type = Vec<Object>)]
    statuses: Vec<serde_json::Value>,
    notification_groups: Vec<NotificationGroup>,
}

impl Grouped {
    fn new(groups: &[Group], accounts: &[AccountRow], paged: bool, origin: &Origin) -> Self {
        let by_id: HashMap<UserId, &AccountRow> = accounts.iter().map(|a| (a.id, a)).collect();
        let mut named: Vec<UserId> = groups.iter().flat_map(|g| g.sample.clone()).collect();
        named.sort();
        named.dedup();
        Grouped {
            accounts: named
                .iter()
                .filter_map(|id| by_id.get(id))
                .map(|a| Account::new(a, origin))
                .collect(),
            statuses: Vec::new(),
            notification_groups: groups
                .iter()
                .map(|g| NotificationGroup::new(g, paged))
                .collect(),
        }
    }
}

/// Whether follows are grouped: `grouped_types[]` names the kinds that
/// are (all of Mastodon's groupable ones, `follow` among them, if none).
fn follows_grouped(req: &HttpRequest) -> Result<bool, AppError> {
    let grouped = known_kinds(req, "grouped_types")?;
    Ok(grouped.is_empty() || grouped.iter().any(|k| k == "follow"))
}

/// `expand_accounts`: `full` or `partial_avatars` (every account comes in
/// full either way).
fn check_expand_accounts(req: &HttpRequest) -> Result<(), AppError> {
    let asked = super::repeated_param(req, "expand_accounts")?;
    match asked.first().map(String::as_str) {
        None | Some("full" | "partial_avatars") => Ok(()),
        Some(other) => Err(AppError::BadRequest(format!(
            "expand_accounts must be full or partial_avatars, got {other:?}"
        ))),
    }
}

/// The caller's notifications in groups (Mastodon v2), the group with the
/// newest notification first, with a `Link` header: a page covers a run
/// of consecutive notifications holding at most `limit` groups.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_grouped_notifications",
    params(
        IdPaging,
        ("types[]" = Option<Vec<String>>, Query, description = "Only these kinds"),
        ("exclude_types[]" = Option<Vec<String>>, Query, description = "Not these kinds"),
        ("account_id" = Option<String>, Query, description = "Only from this account"),
        ("grouped_types[]" = Option<Vec<String>>, Query,
            description = "The kinds grouped (default: all groupable, `follow` among them)"),
        ("expand_accounts" = Option<String>, Query,
            description = "`full` or `partial_avatars`: every account comes in full"),
        ("include_filtered" = Option<bool>, Query, description = "Accepted; nothing is filtered"),
    ),
    responses(
        (status = 200, description = "The groups", body = Grouped),
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
    let grouped = follows_grouped(&req)?;
    check_expand_accounts(&req)?;
    let page = engine
        .notifications()
        .grouped_page(caller.id, range, &filter, grouped, limit)
        .await?;
    let origin = Origin::of(&req);
    let body = Grouped::new(&page.groups, &page.accounts, true, &origin);
    let ends = page
        .ends
        .map(|(max, min)| (max.to_string(), min.to_string()));
    Ok(super::paged(&req, &origin, ends, body))
}

/// How many groups of notifications are newer than the caller's
/// notifications marker (Mastodon v2), counted up to `limit` (default
/// 100, at most 1,000).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_grouped_notifications_unread_count",
    params(
        ("limit" = Option<i64>, Query, description = "Count up to this"),
        ("types[]" = Option<Vec<String>>, Query, description = "Only these kinds"),
        ("exclude_types[]" = Option<Vec<String>>, Query, description = "Not these kinds"),
        ("account_id" = Option<String>, Query, description = "Only from this account"),
        ("grouped_types[]" = Option<Vec<String>>, Query, description = "The kinds grouped"),
    ),
    responses(
        (status = 200, description = "`{\"count\": n}`", body = Object),
        (status = 400, description = "A malformed limit or an unknown kind", body = ErrorBody),
    )
)]
#[get("/notifications/unread_count")]
pub async fn unread_count(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    query: web::Query<IdPaging>,
) -> Result<HttpResponse, AppError> {
    let grouped = follows_grouped(&req)?;
    unread(&req, &caller, &engine, &query, grouped).await
}

/// One of the caller's groups, all of it (Mastodon v2).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_notification_group",
    params(("group_key" = String, Path, description = "The group's key")),
    responses(
        (status = 200, description = "The group", body = Grouped),
        (status = 404, description = "The caller has no group of that key", body = ErrorBody),
    )
)]
#[get("/notifications/{group_key}")]
pub async fn get(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let told = engine.notifications().group(caller.id, &path).await?;
    let rows: Vec<NotificationRow> = told.iter().map(|(row, _)| row.clone()).collect();
    // (Read by its key, the group is one whatever the kinds grouped.)
    let mut groups = groups_of(&rows, true);
    for g in &mut groups {
        g.key = path.to_string();
    }
    let accounts: Vec<AccountRow> = told.into_iter().map(|(_, a)| a).collect();
    let body = Grouped::new(&groups, &accounts, false, &Origin::of(&req));
    Ok(HttpResponse::Ok().json(body))
}

/// The accounts of one of the caller's groups, newest first, each once
/// (Mastodon v2).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_notification_group_accounts",
    params(("group_key" = String, Path, description = "The group's key")),
    responses(
        (status = 200, description = "The accounts", body = Vec<Account>),
        (status = 404, description = "The caller has no group of that key", body = ErrorBody),
    )
)]
#[get("/notifications/{group_key}/accounts")]
pub async fn group_accounts(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    let told = engine.notifications().group(caller.id, &path).await?;
    let origin = Origin::of(&req);
    let mut seen = std::collections::HashSet::new();
    let accounts: Vec<Account> = told
        .iter()
        .filter(|(_, a)| seen.insert(a.id))
        .map(|(_, a)| Account::new(a, &origin))
        .collect();
    Ok(HttpResponse::Ok().json(accounts))
}

/// Removes one of the caller's groups, every notification of it
/// (Mastodon v2).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_notification_group_dismiss",
    params(("group_key" = String, Path, description = "The group's key")),
    responses(
        (status = 200, description = "`{}`", body = Object),
        (status = 404, description = "The caller has no group of that key", body = ErrorBody),
    )
)]
#[post("/notifications/{group_key}/dismiss")]
pub async fn dismiss(
    caller: Caller,
    engine: web::Data<Engine>,
    path: web::Path<String>,
) -> Result<HttpResponse, AppError> {
    engine
        .notifications()
        .dismiss_group(caller.id, &path)
        .await?;
    Ok(HttpResponse::Ok().json(json!({})))
}
