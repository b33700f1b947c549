//! Every error leaves as JSON: `{"error": {"code", "message"}}`, including
//! actix's own extractor, routing and method errors.

use actix_web::error::{JsonPayloadError, PayloadError, QueryPayloadError};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use serde_json::json;

use crate::error::AppError;

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
            AppError::Unavailable { .. } | AppError::TimedOut { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
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
        if let AppError::Unauthorized(_) = self {
            response.insert_header(("WWW-Authenticate", "Bearer"));
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

pub async fn not_found(req: HttpRequest) -> Result<HttpResponse, AppError> {
    Err(AppError::NotFound(format!("no route for {}", req.path())))
}

pub async fn method_not_allowed(req: HttpRequest) -> Result<HttpResponse, AppError> {
    Err(AppError::MethodNotAllowed(format!(
        "{} is not allowed on {}",
        req.method(),
        req.path()
    )))
}
