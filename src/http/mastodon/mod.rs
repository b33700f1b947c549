//! The Mastodon API's home-timeline subset, beside the service's own API
//! and on the same engine: instance, accounts, relationships, search,
//! markers, notifications (one by one and grouped), filters, lists, statuses, the home and list timelines and the home's stream, in Mastodon's shapes, status codes
//! and pagination (ids in query parameters, a `Link` header).
//!
//! Ids: an account's is its user id; a status's encodes its place in the
//! feed ([`entities::status_id`]), so `max_id`, `since_id` and `min_id`
//! are exact bounds and a page is read through the cursor pages. Errors
//! keep the service's shape (`{"error": {"code", "message"}}`).

pub mod accounts;
pub mod defaults;
pub mod entities;
pub mod filters;
pub mod instance;
pub mod lists;
pub mod markers;
pub mod notification_groups;
pub mod notifications;
pub mod search;
pub mod statuses;
pub mod streaming;
pub mod timelines;

use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse};
use serde::Deserialize;

use crate::engine::{Bounds, Engine};
use crate::error::AppError;
use crate::store::pg::{AccountRow, FilterWithKeywords, IdRange};
use crate::types::{Post, UserId};
use entities::{parse_status_id, post_status_id, Origin, Status};

/// The paging parameters of a list, as Mastodon names them.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct IdPaging {
    /// Only what is older than this id.
    #[param(value_type = Option<String>)]
    max_id: Option<String>,
    /// Only what is newer than this id (the newest of it).
    #[param(value_type = Option<String>)]
    since_id: Option<String>,
    /// Only what is newer than this id (the closest to it).
    #[param(value_type = Option<String>)]
    min_id: Option<String>,
    /// Items at most (default 20 for statuses, 40 for accounts; at most
    /// 40 and 80; larger values are lowered to those).
    #[param(value_type = Option<i64>, minimum = 1)]
    limit: Option<String>,
}

impl IdPaging {
    /// The limit asked, within 1 to `max` (`default` if none).
    fn limit(&self, default: u32, max: u32) -> Result<u32, AppError> {
        limit_param(self.limit.as_deref(), default, max)
    }

    /// The bounds asked, as ids of a list paged by number (accounts,
    /// notifications); `what` names them in errors.
    fn id_range(&self, what: &str) -> Result<IdRange, AppError> {
        let bound = |name: &str, raw: &Option<String>| -> Result<Option<i64>, AppError> {
            raw.as_deref()
                .filter(|v| !v.is_empty())
                .map(|v| {
                    crate::domain::parse_id(v, &format!("{name} ({what})"))
                        .map_err(AppError::BadRequest)
                })
                .transpose()
        };
        let min = bound("min_id", &self.min_id)?;
        Ok(IdRange {
            below: bound("max_id", &self.max_id)?,
            above: min.or(bound("since_id", &self.since_id)?),
            closest: min.is_some(),
        })
    }

    /// The status bounds asked.
    fn status_bounds(&self) -> Result<Bounds, AppError> {
        let parse = |name: &str, raw: &Option<String>| {
            raw.as_deref()
                .filter(|v| !v.is_empty())
                .map(|v| {
                    parse_status_id(v).ok_or_else(|| {
                        AppError::BadRequest(format!(
                            "{name} must be a status id this service gave, got {v:?}"
                        ))
                    })
                })
                .transpose()
        };
        let (max, since, min) = (
            parse("max_id", &self.max_id)?,
            parse("since_id", &self.since_id)?,
            parse("min_id", &self.min_id)?,
        );
        Ok(Bounds {
            older_than: max,
            // min_id wins over since_id, as Mastodon has it.
            newer_than: min.or(since),
            closest: min.is_some(),
        })
    }
}

/// A `limit` parameter as Mastodon reads it: within 1 to `max` (`default`
/// if none).
fn limit_param(raw: Option<&str>, default: u32, max: u32) -> Result<u32, AppError> {
    match raw {
        None | Some("") => Ok(default),
        Some(v) => v
            .parse::<i64>()
            .map(|n| n.clamp(1, i64::from(max)) as u32)
            .map_err(|_| AppError::BadRequest(format!("limit must be an integer, got {v:?}"))),
    }
}

/// Statuses of `posts` (newest first) as a Mastodon list answers them:
/// their authors read once each, what `filters` match marked, and a
/// `Link` header to the next page (older: `max_id`) and the previous one
/// (newer: `min_id`).
async fn status_list(
    req: &HttpRequest,
    engine: &Engine,
    posts: Vec<Post>,
    filters: &[FilterWithKeywords],
) -> Result<HttpResponse, AppError> {
    let origin = Origin::of(req);
    let statuses = statuses(engine, &origin, &posts).await?;
    let statuses = filters::filtered(filters, statuses, false);
    let ends = posts.first().zip(posts.last());
    let ends = ends.map(|(first, last)| (post_status_id(first), post_status_id(last)));
    Ok(paged(req, &origin, ends, statuses))
}

/// A list's answer, with a `Link` header when it has `ends` (the ids of
/// its first and last items).
fn paged(
    req: &HttpRequest,
    origin: &Origin,
    ends: Option<(String, String)>,
    body: impl serde::Serialize,
) -> HttpResponse {
    let mut res = HttpResponse::Ok();
    if let Some((first, last)) = ends {
        res.insert_header(("Link", link(req, origin, &last, &first)));
    }
    res.json(body)
}

/// Posts as statuses, their authors' profiles read at once (a post whose
/// author has no active account since is left out).
pub(crate) async fn statuses(
    engine: &Engine,
    origin: &Origin,
    posts: &[Post],
) -> Result<Vec<Status>, AppError> {
    let authors: Vec<UserId> = posts.iter().map(|p| p.author_id).collect();
    let profiles: HashMap<UserId, AccountRow> = engine
        .profiles()
        .profiles(&authors)
        .await?
        .into_iter()
        .map(|p| (p.id, p))
        .collect();
    Ok(posts
        .iter()
        .filter_map(|p| {
            profiles
                .get(&p.author_id)
                .map(|a| Status::new(p, a, origin))
        })
        .collect())
}

/// A `Link` header: `next` (older than `last`), `prev` (newer than
/// `first`), on the request's own path with its other parameters.
fn link(req: &HttpRequest, origin: &Origin, last: &str, first: &str) -> String {
    let kept: Vec<(String, String)> =
        serde_urlencoded::from_str::<Vec<(String, String)>>(req.query_string())
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| !matches!(k.as_str(), "max_id" | "min_id" | "since_id"))
            .collect();
    let url = |bound: &str, id: &str| {
        let mut params = kept.clone();
        params.push((bound.to_string(), id.to_string()));
        format!(
            "{}{}?{}",
            origin.0,
            req.path(),
            serde_urlencoded::to_string(&params).unwrap_or_default()
        )
    };
    format!(
        "<{}>; rel=\"next\", <{}>; rel=\"prev\"",
        url("max_id", last),
        url("min_id", first)
    )
}

/// The values of a parameter a client may repeat, as Mastodon clients send
/// it: `name[]`, `name[0]`, or plain `name`.
fn repeated_param(req: &HttpRequest, name: &str) -> Result<Vec<String>, AppError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(req.query_string())
        .map_err(|e| AppError::BadRequest(format!("invalid query string: {e}")))?;
    Ok(pairs
        .into_iter()
        .filter(|(k, _)| {
            k.strip_prefix(name).is_some_and(|rest| {
                rest.is_empty() || (rest.starts_with('[') && rest.ends_with(']'))
            })
        })
        .map(|(_, v)| v)
        .collect())
}

/// Whether a request's body is JSON (else a form, as Mastodon takes both).
fn is_json(req: &HttpRequest) -> bool {
    req.headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// An account id in a path (a user id).
fn account_id(raw: &str) -> Result<UserId, AppError> {
    crate::domain::parse_id(raw, "account id")
        .map(UserId)
        .map_err(AppError::BadRequest)
}
