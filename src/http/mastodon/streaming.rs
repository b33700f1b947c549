//! Mastodon's streaming API for the home and lists: `GET
//! /api/v1/streaming/user` and `/api/v1/streaming/list` as Server-Sent
//! Events, and `GET /api/v1/streaming` as a WebSocket (what browser clients
//! and masto.js use; the `user` stream and `list` streams), all over the
//! service's live streams.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use actix_web::{get, web, HttpRequest, HttpResponse};
use serde_json::json;

use super::entities::{status_id, Origin, Status};
use super::filters::filtered;
use super::notifications::Notification;
use crate::engine::stream::{Event, Events, Opening, Streams};
use crate::engine::Engine;
use crate::error::AppError;
use crate::http::auth::streaming_caller;
use crate::http::errors::ErrorBody;
use crate::http::feed::{event_id, event_stream, last_event_id};
use crate::http::limits::{charge_read, client_address};
use crate::http::socket::cut_of;
use crate::store::pg::FilterWithKeywords;
use crate::types::{Entry, ListId, UserId};

/// The streams a WebSocket subscribes to here: the user's (its home and
/// its own events), and a list's.
const USER_STREAM: &str = "user";
const LIST_STREAM: &str = "list";

/// The stream a message names: the user's (`None`) or a list's; an error
/// message for any other, or a list id that is not one.
fn named_stream(message: &serde_json::Value) -> Result<Option<ListId>, String> {
    match message["stream"].as_str() {
        Some(USER_STREAM) => Ok(None),
        Some(LIST_STREAM) => {
            let id = match &message["list"] {
                serde_json::Value::String(s) => s.parse::<i64>().ok(),
                serde_json::Value::Number(n) => n.as_i64(),
                _ => None,
            };
            id.filter(|i| *i > 0)
                .map(|i| Some(ListId(i)))
                .ok_or_else(|| "a list stream needs the id of one of the caller's lists".into())
        }
        _ => Err("only the user and list streams are served here".into()),
    }
}

/// Whether the streaming API is up (Mastodon): `OK`. No token needed.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_streaming_health",
    responses((status = 200, description = "Up", content_type = "text/plain", body = String))
)]
#[get("/streaming/health")]
pub async fn health() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("OK")
}

/// The caller's home, live (Mastodon's user stream, Server-Sent Events):
/// `update` with each new status of the home (pushed or pulled), `delete`
/// with a deleted status's id, `notification` with each new notification
/// (live only: missed ones are read from the notifications), a comment as
/// heartbeat. The token comes as
/// a bearer token or as `access_token` in the query. Each `update` carries
/// its position as its id: reconnecting with `Last-Event-ID` replays what
/// was missed, from the feed itself. Same limits as `GET /api/v1/feed/stream`.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_stream_user",
    params(
        ("access_token" = Option<String>, Query, description = "The token, if no Authorization header"),
        ("Last-Event-ID" = Option<String>, Header,
            description = "The id of the last event received: resume after it"),
    ),
    responses(
        (status = 200, description = "The live stream", content_type = "text/event-stream", body = String),
        (status = 400, description = "A malformed Last-Event-ID, or one this service never gave", body = ErrorBody),
        (status = 404, description = "The caller is no account", body = ErrorBody),
        (status = 429, description = "Too many streams of this user or this address, or requests", body = ErrorBody),
        (status = 503, description = "Too many streams on this instance", body = ErrorBody),
    )
)]
#[get("/streaming/user")]
pub async fn user(
    req: HttpRequest,
    engine: web::Data<Engine>,
    streams: web::Data<Streams>,
) -> Result<HttpResponse, AppError> {
    sse(&req, &engine, &streams, None).await
}

/// The `list` parameter of a list stream.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParam {
    /// The id of one of the caller's lists.
    #[param(value_type = String)]
    list: String,
}

/// One of the caller's lists, live (Mastodon's list stream, Server-Sent
/// Events): `update` with each new status of the list (its members'
/// posts), `delete` with a deleted status's id, a comment as heartbeat;
/// as the user stream, without the user's own events, and resumed with
/// `Last-Event-ID`. A member added or taken out changes what comes next
/// at once; the stream ends when the list is deleted. Same limits as the
/// user stream (its streams count with the user's).
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_stream_list",
    params(
        ListParam,
        ("access_token" = Option<String>, Query, description = "The token, if no Authorization header"),
        ("Last-Event-ID" = Option<String>, Header,
            description = "The id of the last event received: resume after it"),
    ),
    responses(
        (status = 200, description = "The live stream", content_type = "text/event-stream", body = String),
        (status = 400, description = "A list id that is not one, or a malformed Last-Event-ID", body = ErrorBody),
        (status = 404, description = "The caller has no such list", body = ErrorBody),
        (status = 429, description = "Too many streams of this user or this address, or requests", body = ErrorBody),
        (status = 503, description = "Too many streams on this instance", body = ErrorBody),
    )
)]
#[get("/streaming/list")]
pub async fn list_stream(
    req: HttpRequest,
    engine: web::Data<Engine>,
    streams: web::Data<Streams>,
    query: web::Query<ListParam>,
) -> Result<HttpResponse, AppError> {
    let list = super::lists::list_id(&query.list)?;
    sse(&req, &engine, &streams, Some(list)).await
}

/// The caller's home (`list` none) or one of its lists as Server-Sent
/// Events.
async fn sse(
    req: &HttpRequest,
    engine: &Engine,
    streams: &Streams,
    list: Option<ListId>,
) -> Result<HttpResponse, AppError> {
    let caller = streaming_caller(req)?;
    let opening = Opening {
        reader: caller.id,
        list,
        from: last_event_id(req)?,
        address: client_address(req),
        profiles: true,
        own_events: list.is_none(),
    };
    let events = streams.follow(opening, cut_of(req)).await?;
    let live = Live::new(events, Origin::of(req), engine, opening).await?;
    Ok(event_stream(futures::stream::unfold(
        live,
        |mut live| async move {
            let said = live.next().await?;
            Some((said.sse(), live))
        },
    )))
}

/// Mastodon's streaming WebSocket: after `{"type": "subscribe", "stream":
/// "user"}`, each event of the home as `{"stream": ["user"], "event":
/// "update" | "delete" | "notification", "payload": "…"}` (the payload a JSON text, as
/// Mastodon sends it); after `{"type": "subscribe", "stream": "list",
/// "list": "<id>"}`, each event of that list as `{"stream": ["list",
/// "<id>"], …}`; `unsubscribe` stops one. The token comes as the
/// `Sec-WebSocket-Protocol` (echoed back), a bearer token, or
/// `access_token`. Only the user and list streams exist here: other
/// streams answer an `error` message, as does a list the caller does not
/// have. At most `feed.websockets_per_user` sockets per user;
/// each message the client sends is charged to its request budget (past
/// it, the socket is closed); the service pings every
/// `feed.stream_heartbeat_secs` and closes a socket silent for
/// `feed.websocket_idle_secs`.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_streaming_websocket",
    params(
        ("access_token" = Option<String>, Query, description = "The token, if neither header carries it"),
        ("stream" = Option<String>, Query, description = "`user`: subscribed from the start"),
    ),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol"),
        (status = 400, description = "Not a WebSocket handshake", body = ErrorBody),
        (status = 404, description = "The caller is no account", body = ErrorBody),
        (status = 429, description = "Too many sockets of this user, or requests", body = ErrorBody),
    )
)]
#[get("/streaming")]
pub async fn websocket(
    req: HttpRequest,
    body: web::Payload,
    engine: web::Data<Engine>,
    streams: web::Data<Streams>,
    sockets: web::Data<Sockets>,
) -> Result<HttpResponse, AppError> {
    let upgrade = req
        .headers()
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !upgrade {
        return Err(AppError::BadRequest(
            "this is a WebSocket endpoint: send Upgrade: websocket".into(),
        ));
    }
    let protocol = req
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let caller = match &protocol {
        Some(token) => crate::http::auth::charged_token_caller(&req, token)?,
        None => streaming_caller(&req)?,
    };
    let held = Sockets::hold(&sockets, caller.id, engine.tuning().websockets_per_user)?;
    engine.user(caller.id).await?;
    let subscribed_now = web::Query::<HashMap<String, String>>::from_query(req.query_string())
        .map(|q| q.get("stream").is_some_and(|s| s == USER_STREAM))
        .unwrap_or(false);
    let (mut response, session, messages) = actix_ws::handle(&req, body)
        .map_err(|e| AppError::BadRequest(format!("WebSocket handshake: {e}")))?;
    if let Some(token) = protocol {
        if let Ok(value) = actix_web::http::header::HeaderValue::from_str(&token) {
            response
                .headers_mut()
                .insert(actix_web::http::header::SEC_WEBSOCKET_PROTOCOL, value);
        }
    }
    let tuning = engine.tuning();
    let socket = Socket {
        session,
        engine: engine.get_ref().clone(),
        streams: streams.get_ref().clone(),
        opening: Opening {
            reader: caller.id,
            list: None,
            from: None,
            address: client_address(&req),
            profiles: true,
            own_events: true,
        },
        origin: Origin::of(&req),
        req: req.clone(),
        ping: Duration::from_secs(tuning.stream_heartbeat_secs),
        idle: Duration::from_secs(tuning.websocket_idle_secs),
        _held: held,
    };
    actix_web::rt::spawn(socket.run(messages, subscribed_now));
    Ok(response)
}

/// The open WebSockets per user on this instance.
#[derive(Default)]
pub struct Sockets {
    held: Mutex<HashMap<UserId, usize>>,
}

/// One open socket's place among its user's.
pub struct Held {
    sockets: web::Data<Sockets>,
    user: UserId,
}

impl Sockets {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<UserId, usize>) -> R) -> R {
        let mut held = match self.held.lock() {
            Ok(h) => h,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut held)
    }

    /// A place for one more socket of `user`, if it holds fewer than
    /// `most` (checked and taken at once).
    fn hold(sockets: &web::Data<Self>, who: UserId, most: usize) -> Result<Held, AppError> {
        sockets.with(|held| {
            let n = held.entry(who).or_default();
            if *n >= most {
                return Err(AppError::RateLimited {
                    message: format!(
                        "user {who} holds {n} streaming sockets already, the most allowed \
                         (feed.websockets_per_user)"
                    ),
                    retry_after_secs: 5,
                });
            }
            *n += 1;
            Ok(())
        })?;
        Ok(Held {
            sockets: sockets.clone(),
            user: who,
        })
    }

    /// Sockets open on this instance.
    pub fn open(&self) -> usize {
        self.with(|held| held.values().sum())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.sockets.with(|held| {
            if let Some(n) = held.get_mut(&self.user) {
                *n -= 1;
                if *n == 0 {
                    held.remove(&self.user);
                }
            }
        });
    }
}

/// One WebSocket: the client's messages in; the home's events out, sent
/// by a task of their own (so that no message in cancels an event half
/// read).
struct Socket {
    session: actix_ws::Session,
    engine: Engine,
    streams: Streams,
    opening: Opening,
    origin: Origin,
    /// The upgrade request: its connection, and the limits' app data.
    req: HttpRequest,
    ping: Duration,
    idle: Duration,
    _held: Held,
}

/// A socket's subscriptions: the task sending each stream, by its list
/// (`None`: the user stream).
type Senders = HashMap<Option<ListId>, tokio::task::JoinHandle<()>>;

impl Socket {
    async fn run(mut self, mut messages: actix_ws::MessageStream, subscribed_now: bool) {
        use futures::StreamExt;
        let mut senders = Senders::new();
        if subscribed_now {
            if let Some(s) = self.subscribe(None).await {
                senders.insert(None, s);
            }
        }
        let mut heard = tokio::time::Instant::now();
        let mut pings = tokio::time::interval(self.ping);
        pings.tick().await;
        let close = loop {
            let message = tokio::select! {
                m = messages.next() => m,
                _ = pings.tick() => {
                    if self.session.ping(b"").await.is_err() {
                        break None;
                    }
                    continue;
                }
                _ = tokio::time::sleep_until(heard + self.idle) => {
                    break Some(actix_ws::CloseReason {
                        code: actix_ws::CloseCode::Away,
                        description: Some("silent for too long".into()),
                    });
                }
            };
            let Some(Ok(message)) = message else {
                break None;
            };
            heard = tokio::time::Instant::now();
            match message {
                actix_ws::Message::Text(text) => {
                    if let Err(e) = charge_read(&self.req, self.opening.reader) {
                        let error = json!({"error": e.public_message()});
                        let _ = self.session.text(error.to_string()).await;
                        break Some(actix_ws::CloseReason {
                            code: actix_ws::CloseCode::Policy,
                            description: Some("too many messages".into()),
                        });
                    }
                    let reply = self.act(&text, &mut senders).await;
                    if let Some(error) = reply {
                        if self.session.text(error.to_string()).await.is_err() {
                            break None;
                        }
                    }
                }
                actix_ws::Message::Ping(bytes) if self.session.pong(&bytes).await.is_err() => {
                    break None;
                }
                actix_ws::Message::Close(_) => break None,
                _ => {}
            }
        };
        for s in senders.into_values() {
            s.abort();
        }
        let _ = self.session.close(close).await;
    }

    /// Acts on a client's message: subscribes to a stream, or stops one;
    /// an error message to send back for anything else.
    async fn act(&mut self, text: &str, senders: &mut Senders) -> Option<serde_json::Value> {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(text) else {
            return Some(json!({"error": "a message must be JSON"}));
        };
        let stream = match named_stream(&message) {
            Ok(stream) => stream,
            Err(e) => return Some(json!({ "error": e })),
        };
        match message["type"].as_str() {
            Some("subscribe") => {
                if senders.get(&stream).is_none_or(|s| s.is_finished()) {
                    if let Some(s) = self.subscribe(stream).await {
                        senders.insert(stream, s);
                    }
                }
                None
            }
            Some("unsubscribe") => {
                if let Some(s) = senders.remove(&stream) {
                    s.abort();
                }
                None
            }
            _ => Some(json!({"error": "a message's type is subscribe or unsubscribe"})),
        }
    }

    /// Opens the user stream (`list` none) or a list's and starts sending
    /// it.
    async fn subscribe(&mut self, list: Option<ListId>) -> Option<tokio::task::JoinHandle<()>> {
        let opening = Opening {
            list,
            own_events: list.is_none(),
            ..self.opening
        };
        let opened = match self.streams.follow(opening, cut_of(&self.req)).await {
            Ok(events) => Live::new(events, self.origin.clone(), &self.engine, opening).await,
            Err(e) => Err(e),
        };
        match opened {
            Ok(mut live) => {
                let mut session = self.session.clone();
                Some(actix_web::rt::spawn(async move {
                    while let Some(said) = live.next().await {
                        let sent = match said.websocket(&live.stream) {
                            Some(text) => session.text(text).await,
                            None => Ok(()),
                        };
                        if sent.is_err() {
                            return;
                        }
                    }
                    // The stream ended (the instance stops): so does the socket.
                    let _ = session.close(None).await;
                }))
            }
            Err(e) => {
                let error = json!({"error": e.public_message()});
                let _ = self.session.text(error.to_string()).await;
                None
            }
        }
    }
}

/// What a Mastodon stream says.
enum Said {
    /// The stream is open.
    Hello,
    Heartbeat,
    Update {
        status: Box<Status>,
        id: String,
    },
    Delete(String),
    Notification(Box<Notification>),
    FiltersChanged,
}

impl Said {
    /// As Server-Sent Events.
    fn sse(&self) -> String {
        match self {
            Said::Hello => ":)\n\n".to_string(),
            Said::Heartbeat => ":thump\n\n".to_string(),
            Said::Update { status, id } => format!(
                "event: update\nid: {id}\ndata: {}\n\n",
                serde_json::to_string(status).unwrap_or_default()
            ),
            Said::Delete(id) => format!("event: delete\ndata: {id}\n\n"),
            Said::Notification(n) => format!(
                "event: notification\ndata: {}\n\n",
                serde_json::to_string(n).unwrap_or_default()
            ),
            // (No payload: Mastodon writes `undefined`.)
            Said::FiltersChanged => "event: filters_changed\ndata: undefined\n\n".to_string(),
        }
    }

    /// As a WebSocket text message of `stream` (none for what is a ping
    /// there).
    fn websocket(&self, stream: &serde_json::Value) -> Option<String> {
        let (event, payload) = match self {
            Said::Hello | Said::Heartbeat => return None,
            Said::Update { status, .. } => ("update", serde_json::to_string(status).ok()?),
            Said::Delete(id) => ("delete", id.clone()),
            Said::Notification(n) => ("notification", serde_json::to_string(n).ok()?),
            Said::FiltersChanged => {
                return Some(json!({"stream": stream, "event": "filters_changed"}).to_string())
            }
        };
        Some(json!({"stream": stream, "event": event, "payload": payload}).to_string())
    }
}

/// One open user or list stream, in Mastodon's terms: the engine's stream
/// brings each post's author and each deletion's time (read under the
/// stream's turn, and read again when that fails). The reader's `home`
/// filters (a list is read in that context), read when it opens and again
/// when they change (told on the user stream), mark each update with what
/// they match and keep back what a `hide` filter matches.
struct Live {
    events: Events,
    origin: Origin,
    engine: Engine,
    reader: UserId,
    filters: Vec<FilterWithKeywords>,
    /// Its name on a WebSocket: `["user"]`, or `["list", "<id>"]`.
    stream: serde_json::Value,
}

impl Live {
    async fn new(
        events: Events,
        origin: Origin,
        engine: &Engine,
        opening: Opening,
    ) -> Result<Self, AppError> {
        let reader = opening.reader;
        let filters = engine.filters().applying(reader, "home").await?;
        let stream = match opening.list {
            None => json!([USER_STREAM]),
            Some(list) => json!([LIST_STREAM, list.to_string()]),
        };
        Ok(Live {
            events,
            origin,
            engine: engine.clone(),
            reader,
            filters,
            stream,
        })
    }

    /// The next thing to say (none once the stream ended).
    async fn next(&mut self) -> Option<Said> {
        loop {
            let event = self.events.recv().await?;
            if let Event::FiltersChanged = event {
                // (Kept as they were if they cannot be read now.)
                match self.engine.filters().applying(self.reader, "home").await {
                    Ok(filters) => self.filters = filters,
                    Err(e) => tracing::debug!(error = %e.chain(), "a stream kept its filters"),
                }
                return Some(Said::FiltersChanged);
            }
            if let Some(said) = self.said(&event) {
                return Some(said);
            }
        }
    }

    /// An event in Mastodon's terms (none for what it has no event for).
    fn said(&self, event: &Event) -> Option<Said> {
        match event {
            Event::Open { .. } => Some(Said::Hello),
            Event::Heartbeat => Some(Said::Heartbeat),
            Event::Post {
                post,
                id,
                author: Some(author),
            } => {
                let status = Status::new(post, author, &self.origin);
                let status = filtered(&self.filters, vec![status], true);
                let status = status.into_iter().next()?;
                Some(Said::Update {
                    status: Box::new(status),
                    id: event_id(id),
                })
            }
            // (A stream asked for profiles: every post has its author.)
            Event::Post { author: None, .. } => None,
            Event::Delete { id, at: Some(at) } => {
                Some(Said::Delete(status_id(Entry::new(*at, *id))))
            }
            // A purged post is in no feed any more: nothing to say.
            Event::Delete { at: None, .. } => None,
            // Mastodon's stream has no event for an author's posts leaving
            // the home: a client's next read shows it.
            Event::Remove { .. } => None,
            Event::Notification(told) => Some(Said::Notification(Box::new(Notification::new(
                told,
                &self.origin,
            )))),
            // (Taken by `next`.)
            Event::FiltersChanged => None,
        }
    }
}
