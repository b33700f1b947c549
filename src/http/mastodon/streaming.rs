//! Mastodon's streaming API for the home: `GET /api/v1/streaming/user` as
//! Server-Sent Events, and `GET /api/v1/streaming` as a WebSocket (what
//! browser clients and masto.js use), both over the service's live
//! streams.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix_web::{get, web, HttpRequest, HttpResponse};
use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;

use super::entities::{status_id, Origin, Status};
use crate::engine::stream::{Event, Streams};
use crate::engine::Engine;
use crate::error::AppError;
use crate::http::auth::streaming_caller;
use crate::http::errors::ErrorBody;
use crate::http::feed::{event_id, event_stream, last_event_id};
use crate::store::pg::AccountRow;
use crate::types::Entry;

/// How long a stream reuses an author's profile before reading it again.
const PROFILE_TTL: Duration = Duration::from_secs(30);
/// Authors' profiles a stream keeps at most.
const PROFILES_KEPT: usize = 256;
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
/// with a deleted status's id, a comment as heartbeat. The token comes as
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
        (status = 404, description = "The caller is no account", body = ErrorBody),
        (status = 429, description = "Too many streams of this user", body = ErrorBody),
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
    let from = last_event_id(&req)?;
    engine.user(caller.id).await?;
    let events = streams.follow(caller.id, from).await?;
    let live = Live::new(events, &engine, Origin::of(&req));
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
/// "update" | "delete", "payload": "…"}` (the payload a JSON text, as
/// Mastodon sends it); `unsubscribe` stops it. The token comes as the
/// `Sec-WebSocket-Protocol` (echoed back), a bearer token, or
/// `access_token`. Only the user stream exists here: other streams answer
/// an `error` message.
#[utoipa::path(
    tag = "mastodon",
    operation_id = "mastodon_streaming_websocket",
    params(
        ("access_token" = Option<String>, Query, description = "The token, if neither header carries it"),
        ("stream" = Option<String>, Query, description = "`user`: subscribed from the start"),
    ),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol"),
        (status = 404, description = "The caller is no account", body = ErrorBody),
    )
)]
#[get("/streaming")]
pub async fn websocket(
    req: HttpRequest,
    body: web::Payload,
    engine: web::Data<Engine>,
    streams: web::Data<Streams>,
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
        Some(token) => crate::http::auth::token_caller(&req, token)?,
        None => streaming_caller(&req)?,
    };
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
    let socket = Socket {
        session,
        engine: engine.get_ref().clone(),
        streams: streams.get_ref().clone(),
        origin: Origin::of(&req),
        reader: caller.id,
    };
    actix_web::rt::spawn(socket.run(messages, subscribed_now));
    Ok(response)
}

/// One WebSocket: the client's messages in; the home's events out, sent
/// by a task of their own (so that no message in cancels an event half
/// read).
struct Socket {
    session: actix_ws::Session,
    engine: Engine,
    streams: Streams,
    origin: Origin,
    reader: i64,
}

impl Socket {
    async fn run(mut self, mut messages: actix_ws::MessageStream, subscribed_now: bool) {
        use futures::StreamExt;
        let mut sender: Option<tokio::task::JoinHandle<()>> = None;
        if subscribed_now {
            sender = self.subscribe().await;
        }
        while let Some(Ok(message)) = messages.next().await {
            match message {
                actix_ws::Message::Text(text) => {
                    match serde_json::from_str::<serde_json::Value>(&text) {
                        Ok(m) if m["type"] == "subscribe" && m["stream"] == USER_STREAM => {
                            if sender.as_ref().is_none_or(|s| s.is_finished()) {
                                sender = self.subscribe().await;
                            }
                        }
                        Ok(m) if m["type"] == "unsubscribe" && m["stream"] == USER_STREAM => {
                            if let Some(s) = sender.take() {
                                s.abort();
                            }
                        }
                        _ => {
                            let error = json!({"error": "only the user stream is served here"});
                            if self.session.text(error.to_string()).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                actix_ws::Message::Ping(bytes) if self.session.pong(&bytes).await.is_err() => {
                    break;
                }
                actix_ws::Message::Close(_) => break,
                _ => {}
            }
        }
        if let Some(s) = sender {
            s.abort();
        }
        let _ = self.session.close(None).await;
    }

    /// Opens the user stream and starts sending it.
    async fn subscribe(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        match self.streams.follow(self.reader, None).await {
            Ok(events) => {
                let mut live = Live::new(events, &self.engine, self.origin.clone());
                let mut session = self.session.clone();
                Some(actix_web::rt::spawn(async move {
                    while let Some(said) = live.next().await {
                        let sent = match said.websocket() {
                            Some(text) => session.text(text).await,
                            None => session.ping(b"").await,
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
        }
    }

    /// As a WebSocket text message (none for what is a ping there).
    fn websocket(&self) -> Option<String> {
        let (event, payload) = match self {
            Said::Hello | Said::Heartbeat => return None,
            Said::Update { status, .. } => ("update", serde_json::to_string(status).ok()?),
            Said::Delete(id) => ("delete", id.clone()),
        };
        Some(json!({"stream": [USER_STREAM], "event": event, "payload": payload}).to_string())
    }
}

/// One open user stream, in Mastodon's terms.
struct Live {
    events: UnboundedReceiver<Event>,
    engine: Engine,
    origin: Origin,
    /// Authors' profiles, with when they were read.
    profiles: HashMap<i64, (Instant, AccountRow)>,
}

impl Live {
    fn new(events: UnboundedReceiver<Event>, engine: &Engine, origin: Origin) -> Self {
        Live {
            events,
            engine: engine.clone(),
            origin,
            profiles: HashMap::new(),
        }
    }

    /// The next thing to say (none once the stream ended).
    async fn next(&mut self) -> Option<Said> {
        loop {
            let event = self.events.recv().await?;
            if let Some(said) = self.said(&event).await {
                return Some(said);
            }
        }
    }

    /// An event in Mastodon's terms (none for what it has no event for).
    async fn said(&mut self, event: &Event) -> Option<Said> {
        match event {
            Event::Open(_) => Some(Said::Hello),
            Event::Heartbeat => Some(Said::Heartbeat),
            Event::Post { post, id } => {
                let author = self.profile(post.author_id).await?;
                Some(Said::Update {
                    status: Box::new(Status::new(post, &author, &self.origin)),
                    id: event_id(id),
                })
            }
            Event::Delete(id) => {
                // A purged post is in no feed any more: nothing to say.
                let at = self.engine.post_time(*id).await.ok()??;
                Some(Said::Delete(status_id(Entry::new(at, *id))))
            }
            // Mastodon's stream has no event for an author's posts leaving
            // the home: a client's next read shows it.
            Event::Remove { .. } => None,
        }
    }

    async fn profile(&mut self, author: i64) -> Option<AccountRow> {
        if let Some((at, row)) = self.profiles.get(&author) {
            if at.elapsed() < PROFILE_TTL {
                return Some(row.clone());
            }
        }
        let row = self.engine.profile(author).await.ok()?;
        if self.profiles.len() >= PROFILES_KEPT {
            self.profiles.clear();
        }
        self.profiles.insert(author, (Instant::now(), row.clone()));
        Some(row)
    }
}
