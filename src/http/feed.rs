use actix_web::{get, web, HttpResponse};

use super::auth::Caller;
use super::limits::client_address;
use super::socket::cut_of;
use super::views::{PageView, PostView};
use super::PageQuery;
use crate::engine::stream::{Event, Opening, Streams};
use crate::engine::Engine;
use crate::error::AppError;
use crate::types::Prev;

/// The caller's own home feed, newest first. The first request sends no
/// `max`; each next one sends back the `next` of the previous response. A
/// refresh sends back a `prev` as `min` and `offset`: the entries
/// immediately newer than it, newest first.
#[utoipa::path(
    tag = "feed",
    operation_id = "home_feed",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the home feed", body = PageView),
        (status = 404, description = "The caller is no account (or one being deleted)", body = super::errors::ErrorBody),
    )
)]
#[get("/feed")]
pub async fn home(
    caller: Caller,
    engine: web::Data<Engine>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, AppError> {
    let req = query.parse()?;
    let page = engine.reads().home_page(caller.id, req).await?;
    Ok(HttpResponse::Ok().json(PageView::from(&page)))
}

/// The caller's home feed, live (Server-Sent Events): first `open` with the
/// current position as its id, then each new entry of the home as a
/// `post` (the post as JSON; its id the position right above it, a
/// `prev`), oldest first, pushed or pulled; `delete` (`{"id"}`) when a post
/// of an author it shows is deleted; `remove` (`{"author_id", "reason"}`)
/// when an author's posts leave it (`unfollow`, `mute`, `block`,
/// `suspend`, `delete`); a comment line as heartbeat. Reconnecting with
/// `Last-Event-ID` (an id it got) replays what came after it, from the
/// feed itself: no gap, no repeat, up to the newest `feed.stream_replay`
/// entries (from an older id, `open` names it as its `gap`). At most
/// `feed.streams_per_user` per user, `feed.streams_per_address` per
/// client address and `feed.streams_per_instance` per instance; a client
/// that stops reading is cut after `feed.stream_stall_secs`.
#[utoipa::path(
    tag = "feed",
    operation_id = "home_stream",
    params(
        ("Last-Event-ID" = Option<String>, Header,
            description = "The id of the last event received (`<min>:<offset>:<post id>`, or `<min>:<offset>` from older releases): resume after it"),
    ),
    responses(
        (status = 200, description = "The live stream", content_type = "text/event-stream", body = String),
        (status = 400, description = "A malformed Last-Event-ID, or one this service never gave", body = super::errors::ErrorBody),
        (status = 404, description = "The caller is no account (or one being deleted)", body = super::errors::ErrorBody),
        (status = 429, description = "Too many streams of this user or this address, or requests", body = super::errors::ErrorBody),
        (status = 503, description = "Too many streams on this instance", body = super::errors::ErrorBody),
    )
)]
#[get("/feed/stream")]
pub async fn stream(
    req: actix_web::HttpRequest,
    caller: Caller,
    streams: web::Data<Streams>,
) -> Result<HttpResponse, AppError> {
    let opening = Opening {
        reader: caller.id,
        list: None,
        from: last_event_id(&req)?,
        address: client_address(&req),
        profiles: false,
        own_events: false,
    };
    let events = streams.follow(opening, cut_of(&req)).await?;
    Ok(event_stream(futures::stream::unfold(
        events,
        |mut events| async move {
            let event = events.recv().await?;
            Some((sse(&event), events))
        },
    )))
}

/// A response of Server-Sent Events, each chunk as the stream gives it,
/// that no proxy should buffer.
pub(crate) fn event_stream(chunks: impl futures::Stream<Item = String> + 'static) -> HttpResponse {
    use futures::StreamExt;
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(chunks.map(|text| Ok::<_, actix_web::Error>(web::Bytes::from(text))))
}

/// The position a reconnecting stream resumes from (`Last-Event-ID`).
pub(crate) fn last_event_id(req: &actix_web::HttpRequest) -> Result<Option<Prev>, AppError> {
    match req.headers().get("last-event-id") {
        None => Ok(None),
        Some(v) => Ok(Some(v.to_str().ok().and_then(parse_event_id).ok_or_else(
            || {
                AppError::BadRequest(
                    "Last-Event-ID must be an event id of this stream: \
                     <min>:<offset>:<post id> (or <min>:<offset>)"
                        .into(),
                )
            },
        )?)),
    }
}

/// An event id: a position, `<min>:<offset>:<post id>` (the entry it
/// names), or `<min>:<offset>` where it names none (below every entry).
pub(crate) fn event_id(at: &Prev) -> String {
    match at.id {
        Some(id) => format!("{}:{}:{id}", at.min, at.offset),
        None => format!("{}:{}", at.min, at.offset),
    }
}

/// A position from an event id; the older `<min>:<offset>` form resumes by
/// count.
fn parse_event_id(text: &str) -> Option<Prev> {
    let mut parts = text.trim().split(':');
    let min = parts.next()?.parse::<i64>().ok()?;
    let offset = parts.next()?.parse::<u32>().ok()?;
    let id = match parts.next() {
        None => None,
        Some(id) => Some(id.parse::<i64>().ok().filter(|id| *id > 0)?),
    };
    if parts.next().is_some() || min < 0 {
        return None;
    }
    Some(Prev {
        min,
        offset,
        id: id.map(crate::types::PostId),
    })
}

/// An event as Server-Sent Events write it.
fn sse(event: &Event) -> String {
    let position = |at: &Prev| serde_json::to_value(at).unwrap_or_default();
    match event {
        Event::Open { at, gap } => {
            let mut data = position(at);
            if let Some(gap) = gap {
                data["gap"] = position(gap);
            }
            format!(
                "retry: 1000\nevent: open\nid: {}\ndata: {data}\n\n",
                event_id(at)
            )
        }
        Event::Post { post, id, .. } => format!(
            "event: post\nid: {}\ndata: {}\n\n",
            event_id(id),
            serde_json::to_string(&PostView::from(post)).unwrap_or_default()
        ),
        Event::Delete { id, .. } => {
            format!("event: delete\ndata: {}\n\n", serde_json::json!({"id": id}))
        }
        Event::Remove { author, reason } => format!(
            "event: remove\ndata: {}\n\n",
            serde_json::json!({"author_id": author, "reason": reason})
        ),
        // (This stream does not ask for its reader's own events.)
        Event::Notification(_) | Event::FiltersChanged => String::new(),
        Event::Heartbeat => ": heartbeat\n\n".to_string(),
    }
}
