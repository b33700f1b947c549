//! Mastodon's streaming API for the home: `GET /api/v1/streaming/user` as
//! Server-Sent Events, and `GET /api/v1/streaming` as a WebSocket (what
//! browser clients and masto.js use), both over the service's live
//! streams.

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
use crate::types::{Entry, UserId};
/// The one stream a WebSocket subscribes to here.
const USER_STREAM: &str = "user";

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
    let caller = streaming_caller(&req)?;
    let opening = Opening {
        reader: caller.id,
        from: last_event_id(&req)?,
        address: client_address(&req),
        profiles: true,
        own_events: true,
    };
    let events = streams.follow(opening, cut_of(&req)).await?;
    let live = Live::new(events, Origin::of(&req), &engine, caller.id).await?;
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
/// Mastodon sends it); `unsubscribe` stops it. The token comes as the
/// `Sec-WebSocket-Protocol` (echoed back), a bearer token, or
/// `access_token`. Only the user stream exists here: other streams answer
/// an `error` message. At most `feed.websockets_per_user` sockets per user;
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

impl Socket {
    async fn run(mut self, mut messages: actix_ws::MessageStream, subscribed_now: bool) {
        use futures::StreamExt;
        let mut sender: Option<tokio::task::JoinHandle<()>> = None;
        if subscribed_now {
            sender = self.subscribe().await;
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
                    let said = serde_json::from_str::<serde_json::Value>(&text);
                    let reply = match said {
                        Ok(m) if m["type"] == "subscribe" && m["stream"] == USER_STREAM => {
                            if sender.as_ref().is_none_or(|s| s.is_finished()) {
                                sender = self.subscribe().await;
                            }
                            None
                        }
                        Ok(m) if m["type"] == "unsubscribe" && m["stream"] == USER_STREAM => {
                            if let Some(s) = sender.take() {
                                s.abort();
                            }
                            None
                        }
                        _ => Some(json!({"error": "only the user stream is served here"})),
                    };
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
        if let Some(s) = sender {
            s.abort();
        }
        let _ = self.session.close(close).await;
    }

    /// Opens the user stream and starts sending it.
    async fn subscribe(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        let opened = match self.streams.follow(self.opening, cut_of(&self.req)).await {
            Ok(events) => {
                Live::new(
                    events,
                    self.origin.clone(),
                    &self.engine,
                    self.opening.reader,
                )
                .await
            }
            Err(e) => Err(e),
        };
        match opened {
            Ok(mut live) => {
                let mut session = self.session.clone();
                Some(actix_web::rt::spawn(async move {
                    while let Some(said) = live.next().await {
                        let sent = match said.websocket() {
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

    /// As a WebSocket text message (none for what is a ping there).
    fn websocket(&self) -> Option<String> {
        let (event, payload) = match self {
            Said::Hello | Said::Heartbeat => return None,
            Said::Update { status, .. } => ("update", serde_json::to_string(status).ok()?),
            Said::Delete(id) => ("delete", id.clone()),
            Said::Notification(n) => ("notification", serde_json::to_string(n).ok()?),
            Said::FiltersChanged => {
                return Some(
                    json!({"stream": [USER_STREAM], "event": "filters_changed"}).to_string(),
                )
            }
        };
        Some(json!({"stream": [USER_STREAM], "event": event, "payload": payload}).to_string())
    }
}

/// One open user stream, in Mastodon's terms: the engine's stream brings
/// each post's author and each deletion's time (read under the stream's
/// turn, and read again when that fails). The reader's `home` filters,
/// read when it opens and again when they change, mark each update with
/// what they match and keep back what a `hide` filter matches.
struct Live {
    events: Events,
    origin: Origin,
    engine: Engine,
    reader: UserId,
    filters: Vec<FilterWithKeywords>,
}

impl Live {
    async fn new(
        events: Events,
        origin: Origin,
        engine: &Engine,
        reader: UserId,
    ) -> Result<Self, AppError> {
        let filters = engine.filters().applying(reader, "home").await?;
        Ok(Live {
            events,
            origin,
            engine: engine.clone(),
            reader,
            filters,
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
