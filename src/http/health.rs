use actix_web::{web, HttpResponse};
use serde_json::json;

use crate::engine::Engine;
use crate::error::AppError;

/// The process is up.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}

/// PostgreSQL and Redis both answer.
pub async fn readyz(engine: web::Data<Engine>) -> Result<HttpResponse, AppError> {
    let (pg, redis) = engine.ready().await;
    let down: Vec<&str> = [("PostgreSQL", pg.is_err()), ("Redis", redis.is_err())]
        .into_iter()
        .filter(|(_, down)| *down)
        .map(|(name, _)| name)
        .collect();
    if down.is_empty() {
        Ok(HttpResponse::Ok().json(json!({ "status": "ok", "postgres": "ok", "redis": "ok" })))
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

/// Prometheus metrics (text format).
pub async fn metrics(engine: web::Data<Engine>) -> HttpResponse {
    if let Ok((pending, running, dead)) = engine.pg().job_counts().await {
        let jobs = &crate::metrics::FANOUT_JOBS;
        jobs.with_label_values(&["pending"]).set(pending);
        jobs.with_label_values(&["running"]).set(running);
        jobs.with_label_values(&["dead"]).set(dead);
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(crate::metrics::render())
}
