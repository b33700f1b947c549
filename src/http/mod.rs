//! The HTTP layer: parses, authorises and serialises; the engine does the rest.

pub mod admin;
pub mod auth;
pub mod errors;
pub mod feed;
pub mod health;
pub mod posts;
pub mod users;

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, Resource};
use serde::Deserialize;
use tracing::Instrument;

use crate::error::AppError;
use crate::types::PageRequest;
use errors::method_not_allowed;

/// A resource whose unsupported methods answer 405 in JSON.
fn resource(path: &str) -> Resource {
    web::resource(path).default_service(web::to(method_not_allowed))
}

/// The route table.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/healthz").route(web::get().to(health::healthz)))
        .service(resource("/readyz").route(web::get().to(health::readyz)))
        .service(resource("/metrics").route(web::get().to(health::metrics)))
        .service(
            web::scope("/api/v1/admin").service(
                resource("/settings")
                    .route(web::get().to(admin::get_settings))
                    .route(web::put().to(admin::put_settings)),
            ),
        )
        .service(
            web::scope("/api/v1")
                .service(resource("/users").route(web::post().to(users::create)))
                .service(resource("/users/{id}").route(web::get().to(users::get)))
                .service(
                    resource("/users/{id}/following/{target}")
                        .route(web::put().to(users::follow))
                        .route(web::delete().to(users::unfollow)),
                )
                .service(resource("/users/{id}/posts").route(web::get().to(users::posts)))
                .service(resource("/posts").route(web::post().to(posts::create)))
                .service(
                    resource("/posts/{id}")
                        .route(web::get().to(posts::get))
                        .route(web::delete().to(posts::delete)),
                )
                .service(resource("/feed").route(web::get().to(feed::home))),
        );
}

/// Scroll parameters as sent; parsed into a [`PageRequest`].
#[derive(Debug, Deserialize)]
pub struct PageQuery {
    max: Option<String>,
    offset: Option<String>,
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
            int("offset", &self.offset)?,
            int("limit", &self.limit)?,
        )
        .map_err(AppError::BadRequest)
    }
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
    crate::metrics::HTTP_REQUESTS
        .with_label_values(&[route.as_str(), method.as_str(), res.status().as_str()])
        .inc();
    crate::metrics::HTTP_LATENCY
        .with_label_values(&[route.as_str(), method.as_str()])
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
