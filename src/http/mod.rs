//! The HTTP layer: parses, authorises and serialises; the engine does the rest.
//!
//! One route table ([`routes`]); each handler carries its OpenAPI
//! description (`#[utoipa::path]`), collected from the table itself, so the
//! document served at `/openapi.json` is the table ([`openapi`]).

pub mod admin;
pub mod auth;
pub mod errors;
pub mod feed;
pub mod health;
pub mod jobs;
pub mod limits;
pub mod mastodon;
pub mod openapi;
pub mod posts;
pub mod relations;
pub mod socket;
pub mod users;
pub mod views;

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::middleware::NormalizePath;
use actix_web::web;
use serde::Deserialize;
use tracing::Instrument;
use utoipa_actix_web::scope;
use utoipa_actix_web::service_config::ServiceConfig;

use crate::error::AppError;
use crate::types::PageRequest;

/// The route table. `/metrics` is left out when it has a port of its own.
pub fn routes(cfg: &mut ServiceConfig, metrics_here: bool) {
    cfg.service(health::healthz).service(health::readyz);
    if metrics_here {
        cfg.service(health::metrics);
    }
    // Under /api/, a path with a trailing slash names what it names
    // without one, as on Mastodon (Mastodon.py asks for
    // `/api/v1/instance/`).
    cfg.service(
        scope::scope("/api/v1")
            .wrap(NormalizePath::trim())
            .service(users::create)
            .service(users::get)
            .service(users::delete)
            .service(users::follow)
            .service(users::follow_many)
            .service(users::import)
            .service(users::unfollow)
            .service(users::posts)
            .service(relations::mute)
            .service(relations::unmute)
            .service(relations::block)
            .service(relations::unblock)
            .service(relations::mutes)
            .service(relations::blocks)
            .service(posts::create)
            .service(posts::get)
            .service(posts::delete)
            .service(feed::home)
            .service(feed::stream)
            .service(jobs::get)
            .service(admin::get_settings)
            .service(admin::put_settings)
            .service(admin::suspend)
            .service(admin::unsuspend)
            // The Mastodon API's timeline subset (the literal account
            // paths before `{id}`).
            .service(mastodon::instance::v1)
            .service(mastodon::defaults::preferences)
            .service(mastodon::defaults::custom_emojis)
            .service(mastodon::defaults::announcements)
            .service(mastodon::defaults::followed_tags)
            .service(mastodon::markers::get)
            .service(mastodon::markers::set)
            .service(mastodon::notifications::list)
            .service(mastodon::notifications::unread_count)
            .service(mastodon::notifications::clear)
            .service(mastodon::notifications::get)
            .service(mastodon::notifications::dismiss)
            .service(mastodon::accounts::verify_credentials)
            .service(mastodon::accounts::lookup)
            .service(mastodon::accounts::relationships)
            .service(mastodon::accounts::get)
            .service(mastodon::accounts::follow)
            .service(mastodon::accounts::unfollow)
            .service(mastodon::accounts::mute)
            .service(mastodon::accounts::unmute)
            .service(mastodon::accounts::block)
            .service(mastodon::accounts::unblock)
            .service(mastodon::accounts::followers)
            .service(mastodon::accounts::following)
            .service(mastodon::timelines::account_statuses)
            .service(mastodon::statuses::create)
            .service(mastodon::statuses::several)
            .service(mastodon::statuses::get)
            .service(mastodon::statuses::delete)
            .service(mastodon::timelines::home)
            .service(mastodon::timelines::list)
            .service(mastodon::lists::all)
            .service(mastodon::lists::create)
            .service(mastodon::lists::members)
            .service(mastodon::lists::add)
            .service(mastodon::lists::remove_members)
            .service(mastodon::lists::get)
            .service(mastodon::lists::update)
            .service(mastodon::lists::remove)
            .service(mastodon::lists::of_account)
            .service(mastodon::streaming::user)
            .service(mastodon::streaming::list_stream)
            .service(mastodon::streaming::health)
            .service(mastodon::streaming::websocket),
    );
    cfg.service(
        scope::scope("/api/v2")
            .wrap(NormalizePath::trim())
            .service(mastodon::instance::v2)
            .service(mastodon::search::search)
            .service(mastodon::notification_groups::list)
            .service(mastodon::notification_groups::unread_count)
            .service(mastodon::notification_groups::get)
            .service(mastodon::notification_groups::group_accounts)
            .service(mastodon::notification_groups::dismiss)
            .service(mastodon::filters::get_keyword)
            .service(mastodon::filters::update_keyword)
            .service(mastodon::filters::remove_keyword)
            .service(mastodon::filters::list)
            .service(mastodon::filters::create)
            .service(mastodon::filters::get)
            .service(mastodon::filters::update)
            .service(mastodon::filters::remove)
            .service(mastodon::filters::list_keywords)
            .service(mastodon::filters::add_keyword),
    );
}

/// The documented paths and their methods: what tells a 405 from a 404.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    /// (path template split in segments, methods)
    paths: Vec<(Vec<String>, Vec<String>)>,
}

impl RouteTable {
    pub fn new<'a>(paths: impl IntoIterator<Item = (&'a str, Vec<String>)>) -> Self {
        RouteTable {
            paths: paths
                .into_iter()
                .map(|(p, m)| (p.split('/').map(str::to_string).collect(), m))
                .collect(),
        }
    }

    /// The methods served at `path` (upper case), none if no route has it.
    pub fn methods_for(&self, path: &str) -> Vec<String> {
        let segments: Vec<&str> = path.split('/').collect();
        let matching: Vec<&(Vec<String>, Vec<String>)> = self
            .paths
            .iter()
            .filter(|(template, _)| {
                template.len() == segments.len()
                    && template.iter().zip(&segments).all(|(t, s)| {
                        (t.starts_with('{') && t.ends_with('}') && !s.is_empty()) || t == s
                    })
            })
            .collect();
        // A literal path is its own route (`/notifications/clear` is not
        // the notification `{id}` named "clear").
        let exact: Vec<_> = matching
            .iter()
            .filter(|(template, _)| template.iter().zip(&segments).all(|(t, s)| t == s))
            .copied()
            .collect();
        let matching = if exact.is_empty() { matching } else { exact };
        matching
            .into_iter()
            .flat_map(|(_, methods)| methods.iter().cloned())
            .fold(Vec::new(), |mut all, m| {
                // A literal path may also match a template (`/accounts/lookup`
                // and `/accounts/{id}`): each method once.
                if !all.contains(&m) {
                    all.push(m);
                }
                all
            })
    }
}

/// Scroll parameters as sent; parsed into a [`PageRequest`] (so that a
/// bad one answers a JSON 400 naming it).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Newest score to include (a `next`'s `max`): the page is what comes
    /// next, older. Absent (and no `min`): the newest page.
    #[param(value_type = Option<i64>, minimum = 0)]
    max: Option<String>,
    /// Refresh from this score (a `prev`'s `min`): the page is the entries
    /// immediately newer than the position, newest first. Not with `max`.
    #[param(value_type = Option<i64>, minimum = 0)]
    min: Option<String>,
    /// Entries scored exactly `max` already seen, the newest of that score
    /// (with `max`); or scored exactly `min`, the oldest of that score
    /// (with `min`). Up to 10,000, or more inside a longer run of equal
    /// scores (a cursor the service gave).
    #[param(value_type = Option<i64>, minimum = 0, maximum = 10000)]
    offset: Option<String>,
    /// The post the position stands on (a `next`'s or `prev`'s `id`, with
    /// its `max` or `min`): the page is what lies below (above) that entry
    /// in feed order, exactly, whatever joins or leaves its millisecond.
    /// `offset` then only sizes the first read. Feeds only: an account list
    /// refuses it.
    #[param(value_type = Option<i64>, minimum = 1)]
    id: Option<String>,
    /// Items per page.
    #[param(value_type = Option<i64>, minimum = 1, maximum = 100)]
    limit: Option<String>,
}

impl PageQuery {
    pub fn parse(&self) -> Result<PageRequest, AppError> {
        let int = |name: &str, raw: &Option<String>| -> Result<Option<i64>, AppError> {
            raw.as_deref()
                .map(|v| {
                    v.parse::<i64>().map_err(|_| {
                        AppError::BadRequest(format!("{name} must be an integer, got {v:?}"))
                    })
                })
                .transpose()
        };
        PageRequest::parse(
            int("max", &self.max)?,
            int("min", &self.min)?,
            int("offset", &self.offset)?,
            int("id", &self.id)?,
            int("limit", &self.limit)?,
        )
        .map_err(AppError::BadRequest)
    }
}

/// The longest a request's body may take to arrive
/// (`server.request_timeout_secs`).
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub std::time::Duration);

/// Gives a request's body its deadline: a client trickling its body gets
/// 408 `request_timeout` (its extractor fails, see `errors.rs`) and holds
/// nothing longer. Handlers themselves are never cut short.
pub async fn deadline(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let Some(limit) = req.app_data::<web::Data<Deadline>>().map(|d| d.0) else {
        return next.call(req).await;
    };
    // A WebSocket's "body" is its messages, for as long as it is open (a
    // GET: no other GET route reads a body).
    let websocket = req.method() == actix_web::http::Method::GET
        && req
            .headers()
            .get(actix_web::http::header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if websocket {
        return next.call(req).await;
    }
    let (http, payload) = req.into_parts();
    let timed = TimedPayload {
        inner: payload,
        deadline: Box::pin(tokio::time::sleep(limit)),
        expired: false,
    };
    let boxed: std::pin::Pin<Box<dyn futures::Stream<Item = _>>> = Box::pin(timed);
    next.call(ServiceRequest::from_parts(http, boxed.into()))
        .await
}

/// A body that fails with `TimedOut` once its deadline passes.
struct TimedPayload {
    inner: actix_web::dev::Payload,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    expired: bool,
}

impl futures::Stream for TimedPayload {
    type Item = Result<web::Bytes, actix_web::error::PayloadError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::future::Future;
        use std::task::Poll;
        if self.expired {
            return Poll::Ready(None);
        }
        if let Poll::Ready(item) = std::pin::Pin::new(&mut self.inner).poll_next(cx) {
            return Poll::Ready(item);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.expired = true;
            let late =
                std::io::Error::new(std::io::ErrorKind::TimedOut, "the body came too slowly");
            return Poll::Ready(Some(Err(actix_web::error::PayloadError::Io(late))));
        }
        Poll::Pending
    }
}

/// A request's method as a metric label: the standard ones by name, any
/// other as `other`, so that a client cannot mint new series.
fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method as M;
    const KNOWN: [(M, &str); 9] = [
        (M::GET, "GET"),
        (M::HEAD, "HEAD"),
        (M::POST, "POST"),
        (M::PUT, "PUT"),
        (M::DELETE, "DELETE"),
        (M::PATCH, "PATCH"),
        (M::OPTIONS, "OPTIONS"),
        (M::CONNECT, "CONNECT"),
        (M::TRACE, "TRACE"),
    ];
    KNOWN
        .iter()
        .find(|(m, _)| m == method)
        .map_or("other", |(_, name)| name)
}

/// One log line per request, with a request id (also sent back as
/// `x-request-id`). Headers, and so tokens, are never logged.
pub async fn log_request(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let request_id = uuid::Uuid::new_v4().simple().to_string();
    let method = req.method().clone();
    let path = req.path().to_string();
    let span = tracing::info_span!("request", id = %request_id, %method, %path);
    let mut res = next.call(req).instrument(span).await?;
    if let Ok(value) = actix_web::http::header::HeaderValue::from_str(&request_id) {
        res.headers_mut().insert(
            actix_web::http::header::HeaderName::from_static("x-request-id"),
            value,
        );
    }
    let route = res
        .request()
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_string());
    let elapsed = started.elapsed();
    let label = method_label(&method);
    crate::metrics::HTTP_REQUESTS
        .with_label_values(&[route.as_str(), label, res.status().as_str()])
        .inc();
    crate::metrics::HTTP_LATENCY
        .with_label_values(&[route.as_str(), label])
        .observe(elapsed.as_secs_f64());
    tracing::info!(
        request_id = %request_id,
        %method,
        %path,
        status = res.status().as_u16(),
        elapsed_ms = elapsed.as_secs_f64() * 1000.0,
        "request"
    );
    Ok(res)
}

/// A JSON request body that must be an object (serde would also accept an
/// array for a struct), deserialized into `T`.
pub struct JsonObject<T>(pub T);

impl<T: serde::de::DeserializeOwned + 'static> actix_web::FromRequest for JsonObject<T> {
    type Error = actix_web::Error;
    type Future = futures::future::LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(
        req: &actix_web::HttpRequest,
        payload: &mut actix_web::dev::Payload,
    ) -> Self::Future {
        let object =
            web::Json::<serde_json::Map<String, serde_json::Value>>::from_request(req, payload);
        Box::pin(async move {
            let web::Json(map) = object.await?;
            serde_json::from_value(serde_json::Value::Object(map))
                .map(JsonObject)
                .map_err(|e| AppError::BadRequest(format!("invalid JSON body: {e}")).into())
        })
    }
}
