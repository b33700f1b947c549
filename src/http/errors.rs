//! Every error leaves as JSON: `{"error": {"code", "message"}}`, including
//! actix's own extractor, routing and method errors.

use actix_web::error::{JsonPayloadError, PayloadError, QueryPayloadError};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use serde_json::json;

use crate::error::AppError;

/// Every error response: `{"error": {"code", "message"}}`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(example = json!({"error": {"code": "not_found", "message": "post 9 does not exist"}}))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// For people; says nothing of internal causes.
    pub message: String,
}

/// The stable error codes (API.md).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    Conflict,
    PayloadTooLarge,
    Unprocessable,
    RateLimited,
    RequestTimeout,
    Unavailable,
    Internal,
}

impl ResponseError for AppError {
    fn status_code(&self) -> StatusCode {
        match self {
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::NotFound(_) => StatusCode::NOT_FOUND,
            AppError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            AppError::Conflict(_) => StatusCode::CONFLICT,
            AppError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            AppError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            AppError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            AppError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            AppError::Unavailable { .. }
            | AppError::TimedOut { .. }
            | AppError::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            AppError::Internal { .. } => tracing::error!(error = %self.chain(), "internal error"),
            AppError::Unavailable { .. } | AppError::TimedOut { .. } => {
                tracing::warn!(error = %self.chain(), "dependency unavailable")
            }
            _ => {}
        }
        let mut response = HttpResponse::build(self.status_code());
        match self {
            AppError::Unauthorized(_) => {
                response.insert_header(("WWW-Authenticate", "Bearer"));
            }
            AppError::RateLimited {
                retry_after_secs, ..
            }
            | AppError::Overloaded {
                retry_after_secs, ..
            } => {
                response.insert_header(("Retry-After", retry_after_secs.to_string()));
            }
            _ => {}
        }
        response.json(json!({
            "error": { "code": self.code(), "message": self.public_message() }
        }))
    }
}

fn json_error(err: JsonPayloadError, _req: &HttpRequest) -> actix_web::Error {
    let app = match &err {
        JsonPayloadError::OverflowKnownLength { .. }
        | JsonPayloadError::Overflow { .. }
        | JsonPayloadError::Payload(PayloadError::Overflow) => {
            AppError::PayloadTooLarge("request body is over 64 KiB".into())
        }
        JsonPayloadError::ContentType => {
            AppError::BadRequest("Content-Type must be application/json".into())
        }
        JsonPayloadError::Payload(PayloadError::Io(e))
            if e.kind() == std::io::ErrorKind::TimedOut =>
        {
            AppError::RequestTimeout("the request body did not arrive in time".into())
        }
        JsonPayloadError::Deserialize(e) => AppError::BadRequest(format!("invalid JSON body: {e}")),
        other => AppError::BadRequest(format!("invalid request body: {other}")),
    };
    app.into()
}

fn query_error(err: QueryPayloadError, _req: &HttpRequest) -> actix_web::Error {
    AppError::BadRequest(format!("invalid query string: {err}")).into()
}

fn path_error(err: actix_web::error::PathError, _req: &HttpRequest) -> actix_web::Error {
    AppError::BadRequest(format!("invalid path: {err}")).into()
}

/// Request bodies are limited to 64 KiB.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A request's whole body, read as it arrives and refused as soon as it
/// passes `limit` bytes (413), or arrives too slowly (408): every failure
/// a JSON error, unlike actix's own `Bytes` extractor's.
pub async fn read_body(mut payload: web::Payload, limit: usize) -> Result<web::Bytes, AppError> {
    use futures::StreamExt;
    let mut bytes = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| match e {
            PayloadError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                AppError::RequestTimeout("the request body did not arrive in time".into())
            }
            PayloadError::Overflow => too_large(limit),
            other => AppError::BadRequest(format!("could not read the body: {other}")),
        })?;
        if bytes.len() + chunk.len() > limit {
            return Err(too_large(limit));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes.freeze())
}

fn too_large(limit: usize) -> AppError {
    AppError::PayloadTooLarge(format!("request body is over {} KiB", limit / 1024))
}

pub fn json_config() -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(MAX_BODY_BYTES)
        .error_handler(json_error)
}

pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(query_error)
}

pub fn path_config() -> web::PathConfig {
    web::PathConfig::default().error_handler(path_error)
}

/// What no route serves: 405 on a path that exists for other methods (with
/// `Allow`), 404 elsewhere.
pub async fn unmatched(req: HttpRequest) -> HttpResponse {
    let allowed = req
        .app_data::<web::Data<super::RouteTable>>()
        .map(|t| t.methods_for(req.path()))
        .unwrap_or_default();
    if allowed.is_empty() {
        return AppError::NotFound(format!("no route for {}", req.path())).error_response();
    }
    let mut res =
        AppError::MethodNotAllowed(format!("{} is not allowed on {}", req.method(), req.path()))
            .error_response();
    if let Ok(value) = actix_web::http::header::HeaderValue::from_str(&allowed.join(", ")) {
        res.headers_mut()
            .insert(actix_web::http::header::ALLOW, value);
    }
    res
}
