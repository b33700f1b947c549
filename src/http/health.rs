//! Probes and metrics.

use actix_web::{get, web, HttpRequest, HttpResponse};
use serde::Serialize;

use crate::engine::Engine;
use crate::error::AppError;

/// The process is up.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(example = json!({"status": "ok"}))]
pub struct Health {
    pub status: String,
}

/// Both stores answer.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(example = json!({"status": "ok", "postgres": "ok", "redis": "ok"}))]
pub struct Ready {
    pub status: String,
    pub postgres: String,
    pub redis: String,
}

/// Liveness: the process is up.
#[utoipa::path(
    tag = "probes",
    operation_id = "healthz",
    responses((status = 200, description = "The process is up", body = Health))
)]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: "ok".into(),
    })
}

/// Readiness: PostgreSQL and Redis both answer (503 names what is down).
#[utoipa::path(
    tag = "probes",
    operation_id = "readyz",
    responses((status = 200, description = "Both stores answer", body = Ready))
)]
#[get("/readyz")]
pub async fn readyz(engine: web::Data<Engine>) -> Result<HttpResponse, AppError> {
    let (pg, redis) = engine.ready().await;
    let down: Vec<&str> = [("PostgreSQL", pg.is_err()), ("Redis", redis.is_err())]
        .into_iter()
        .filter(|(_, down)| *down)
        .map(|(name, _)| name)
        .collect();
    if down.is_empty() {
        Ok(HttpResponse::Ok().json(Ready {
            status: "ok".into(),
            postgres: "ok".into(),
            redis: "ok".into(),
        }))
    } else {
        Err(AppError::Unavailable {
            what: if down.len() == 2 {
                "PostgreSQL and Redis"
            } else {
                down[0]
            },
            source: format!("{} not answering", down.join(" and ")).into(),
        })
    }
}

/// Whether `given` is `expected`, in a time that depends on `expected`'s
/// length alone (how much of a guess is right does not show in it).
fn same_token(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = given.len() ^ expected.len();
    for (i, e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!e);
        diff = std::hint::black_box(diff | usize::from(g ^ e));
    }
    diff == 0
}

/// The bearer token `/metrics` requires, if configured.
#[derive(Clone, Default)]
pub struct MetricsToken(pub Option<String>);

/// Prometheus metrics (text format). The gauges read from PostgreSQL are
/// refreshed in the background: a scrape makes no query.
#[utoipa::path(
    tag = "probes",
    operation_id = "metrics",
    responses(
        (status = 200, description = "Prometheus text format", body = String,
            content_type = "text/plain"),
        (status = 401, description = "A bearer token is configured and this is not it",
            body = super::errors::ErrorBody),
    )
)]
#[get("/metrics")]
pub async fn metrics(req: HttpRequest) -> Result<HttpResponse, AppError> {
    if let Some(token) = req
        .app_data::<web::Data<MetricsToken>>()
        .and_then(|t| t.0.as_deref())
    {
        let given = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same_token(g.trim().as_bytes(), token.as_bytes())) {
            return Err(AppError::Unauthorized(
                "/metrics needs its bearer token".into(),
            ));
        }
    }
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(crate::metrics::render()))
}

#[cfg(test)]
mod tests {
    use super::same_token;

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token(b"abcdef", b"abcdef"));
        for other in [&b"abcdeg"[..], b"abcde", b"abcdefg", b"", b"Abcdef"] {
            assert!(!same_token(other, b"abcdef"), "{other:?}");
        }
    }
}
