//! Mastodon's markers: where the caller stopped reading its home and its
//! notifications, shared by all its devices. The home's is a status id,
//! which names a place in the feed: `min_id` from it pages on exactly
//! there. A marker set with `version` (this service's addition) is set
//! only if no other device moved it since (409 otherwise).

use std::collections::BTreeMap;

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use serde::Serialize;
use serde_json::Value;

use super::entities::{iso8601, parse_status_id};
use crate::engine::markers::Timeline;
use crate::engine::Engine;
use crate::error::AppError;
use crate::http::auth::Caller;
use crate::http::errors::{read_body, ErrorBody};
use crate::store::pg::MarkerRow;

/// A request body of markers is small: a few ids.
const MAX_BODY_BYTES: usize = 4096;

/// A timeline's marker, as Mastodon's Marker.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = MastodonMarker)]
pub struct Marker {
    /// The id of the last item read (a status id for `home`).
    last_read_id: String,
    /// Raised by each change (0 when set first).
    version: i64,
    /// When it was last moved (ISO 8601).
    updated_at: String,
}

/// Markers by timeline name.
type MarkerMap = BTreeMap<&'static str, Marker>;

fn answer(rows: Vec<MarkerRow>) -> MarkerMap {
    rows.into_iter()
        .filter_map(|row| {
            let timeline = Timeline::parse(&row.timeline)?;
            Some((
                timeline.as_str(),
                Marker {
                    last_read_id: row.last_read_id,
                    version: row.version,
                    updated_at: iso8601(row.updated_at_ms),
                },
            ))
        })
        .collect()
}

/// The caller's markers (Mastodon) of the timelines named by `timeline[]`
/// (`home`, `notifications`); those never set are left out, and no
/// timeline named answers `{}`.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_get_markers",
    params(("timeline[]" = Option<Vec<String>>, Query, description = "home, notifications")),
    responses(
        (status = 200, description = "The markers, by timeline", body = BTreeMap<String, Marker>),
        (status = 400, description = "A timeline without markers", body = ErrorBody),
    )
)]
#[get("/markers")]
pub async fn get(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
) -> Result<HttpResponse, AppError> {
    let mut timelines = Vec::new();
    for name in super::repeated_param(&req, "timeline")? {
        let timeline = timeline(&name)?;
        if !timelines.contains(&timeline) {
            timelines.push(timeline);
        }
    }
    if timelines.is_empty() {
        return Ok(HttpResponse::Ok().json(MarkerMap::new()));
    }
    let rows = engine.markers().get(caller.id, &timelines).await?;
    Ok(HttpResponse::Ok().json(answer(rows)))
}

/// Moves the caller's markers (Mastodon): `home[last_read_id]`,
/// `notifications[last_read_id]` (a form, or JSON objects by timeline),
/// each with an optional `version` it must still be at; all or none is
/// written. Answers the markers set.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_set_markers",
    request_body(content = Object, content_type = "application/json",
        description = "`{\"home\": {\"last_read_id\": \"…\", \"version\": 3}}` (version optional)"),
    responses(
        (status = 200, description = "The markers set, by timeline", body = BTreeMap<String, Marker>),
        (status = 400, description = "An unknown timeline, a missing or foreign id, a malformed version", body = ErrorBody),
        (status = 409, description = "A marker is not at the version given: nothing was written", body = ErrorBody),
        (status = 413, description = "A body over 4 KiB", body = ErrorBody),
    )
)]
#[post("/markers")]
pub async fn set(
    req: HttpRequest,
    caller: Caller,
    engine: web::Data<Engine>,
    payload: web::Payload,
) -> Result<HttpResponse, AppError> {
    let body = read_body(payload, MAX_BODY_BYTES).await?;
    let fields = fields(&req, &body)?;
    let mut changes: Vec<(Timeline, &str, Option<i64>)> = Vec::new();
    for (name, (id, version)) in &fields {
        let timeline = timeline(name)?;
        let id = id
            .as_deref()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| AppError::BadRequest(format!("{name}[last_read_id] is missing")))?;
        check_id(timeline, id)?;
        let version = version
            .as_deref()
            .map(|v| {
                v.parse::<i64>().ok().filter(|v| *v >= 0).ok_or_else(|| {
                    AppError::BadRequest(format!(
                        "{name}[version] must be a number from 0, got {v:?}"
                    ))
                })
            })
            .transpose()?;
        changes.push((timeline, id, version));
    }
    if changes.is_empty() {
        return Ok(HttpResponse::Ok().json(MarkerMap::new()));
    }
    let rows = engine.markers().set(caller.id, &changes).await?;
    Ok(HttpResponse::Ok().json(answer(rows)))
}

fn timeline(name: &str) -> Result<Timeline, AppError> {
    Timeline::parse(name).ok_or_else(|| {
        AppError::BadRequest(format!(
            "a marker's timeline is home or notifications, not {name:?}"
        ))
    })
}

/// The home's marker is a status id the service gave (a place in the
/// feed); a notifications marker, a number.
fn check_id(timeline: Timeline, id: &str) -> Result<(), AppError> {
    let ok = match timeline {
        Timeline::Home => parse_status_id(id).is_some(),
        Timeline::Notifications => {
            (1..=20).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_digit())
        }
    };
    if ok {
        Ok(())
    } else {
        Err(AppError::BadRequest(format!(
            "{}[last_read_id] must be {}, got {id:?}",
            timeline.as_str(),
            match timeline {
                Timeline::Home => "a status id this service gave",
                Timeline::Notifications => "a notification id",
            }
        )))
    }
}

/// Each timeline's `last_read_id` and `version` of a body: JSON objects by
/// timeline, or a form of `timeline[field]` pairs.
type Fields = BTreeMap<String, (Option<String>, Option<String>)>;

fn fields(req: &HttpRequest, body: &[u8]) -> Result<Fields, AppError> {
    let json = super::is_json(req);
    let mut fields = Fields::new();
    if json {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| AppError::BadRequest(format!("invalid JSON body: {e}")))?;
        let Value::Object(timelines) = value else {
            return Err(AppError::BadRequest(
                "the body must be a JSON object".into(),
            ));
        };
        for (name, marker) in timelines {
            let Value::Object(marker) = marker else {
                return Err(AppError::BadRequest(format!("{name} must be an object")));
            };
            let text = |v: Option<&Value>| match v {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => Some(other.to_string()),
            };
            let entry = (
                text(marker.get("last_read_id")),
                text(marker.get("version")),
            );
            fields.insert(name, entry);
        }
    } else {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
            .map_err(|e| AppError::BadRequest(format!("invalid form body: {e}")))?;
        for (key, value) in pairs {
            let Some((name, field)) = key.strip_suffix(']').and_then(|k| k.split_once('[')) else {
                return Err(AppError::BadRequest(format!(
                    "{key:?} is not timeline[last_read_id] or timeline[version]"
                )));
            };
            let entry = fields.entry(name.to_string()).or_default();
            match field {
                "last_read_id" => entry.0 = Some(value),
                "version" => entry.1 = Some(value),
                _ => {
                    return Err(AppError::BadRequest(format!(
                        "{key:?} is not timeline[last_read_id] or timeline[version]"
                    )))
                }
            }
        }
    }
    Ok(fields)
}
