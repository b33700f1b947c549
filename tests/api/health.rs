use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::{error_code, spawn_app};

#[tokio::test]
async fn healthz_and_readyz_answer_when_both_stores_are_up() {
    let app = spawn_app().await;
    let res = app.request(Method::GET, "/healthz", None, None).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.json::<Value>().await.unwrap()["status"], "ok");
    let res = app.request(Method::GET, "/readyz", None, None).await;
    assert_eq!(res.status(), StatusCode::OK);
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_json() {
    let app = spawn_app().await;
    let res = app.request(Method::GET, "/nowhere", None, None).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );
    let res = app
        .request(Method::GET, "/api/v1/nowhere", Some(&app.admin), None)
        .await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );
    let res = app
        .request(Method::PATCH, "/api/v1/posts/1", Some(&app.admin), None)
        .await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed".into())
    );
    let res = app.request(Method::POST, "/healthz", None, None).await;
    assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn metrics_expose_requests_fan_out_and_fallbacks() {
    let app = spawn_app().await;
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    app.home(&reader, 5).await;
    app.publish(&author, "counted").await;
    app.settle().await;
    app.home(&reader, 5).await;
    let res = app.request(Method::GET, "/metrics", None, None).await;
    assert_eq!(res.status(), StatusCode::OK);
    let text = res.text().await.unwrap();
    for needle in [
        r#"http_requests_total{method="GET",route="/api/v1/feed",status="200"}"#,
        r#"http_request_duration_seconds_bucket{method="POST",route="/api/v1/posts""#,
        r#"fanout_jobs{state="pending"}"#,
        r#"fanout_jobs{state="running"}"#,
        r#"fanout_jobs{state="dead"}"#,
        "fanout_delivery_lag_seconds_count",
        "fanout_inbox_writes_total",
        "redis_errors_total",
        "postgres_errors_total",
        r#"feed_pages_total{reason="none",source="redis"}"#,
        r#"feed_pages_total{reason="past_floor",source="postgres"}"#,
        "feed_rebuilds_total",
        "feed_deferred_writes_total",
    ] {
        assert!(text.contains(needle), "/metrics lacks {needle}");
    }
    let writes: f64 = text
        .lines()
        .find(|l| l.starts_with("fanout_inbox_writes_total "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(writes >= 1.0, "the publish wrote to the reader's inbox");
}

#[tokio::test]
async fn instances_starting_together_on_a_new_database_all_start() {
    let settings = crate::helpers::test_settings();
    let _cleanup = crate::helpers::Cleanup::of(&settings);
    feed_service::store::pg::ensure_database(secrecy::ExposeSecret::expose_secret(
        &settings.database.url,
    ))
    .await
    .unwrap();
    let builds = (0..4).map(|_| feed_service::startup::Application::build(&settings));
    for (i, built) in futures::future::join_all(builds)
        .await
        .into_iter()
        .enumerate()
    {
        if let Err(e) = built {
            panic!("instance {i} did not start: {}", e.chain());
        }
    }
}

#[tokio::test]
async fn unknown_methods_do_not_mint_metric_series() {
    let app = spawn_app().await;
    let size = || async {
        let res = app.request(Method::GET, "/metrics", None, None).await;
        res.text().await.unwrap()
    };
    let before = size().await.len();
    for i in 1..=300 {
        let method = Method::from_bytes(format!("M{i}").as_bytes()).unwrap();
        let res = app
            .client
            .request(method, app.url("/healthz"))
            .send()
            .await
            .unwrap();
        assert!(res.status().is_client_error(), "M{i}: {}", res.status());
    }
    let after = size().await;
    assert!(!after.contains("method=\"M1\""), "a series per method");
    assert!(
        after.contains("method=\"other\""),
        "unknown methods are counted"
    );
    // Other tests of this process add their own (bounded) series meanwhile.
    assert!(
        after.len() < before + 64 * 1024,
        "/metrics grew from {before} to {} bytes",
        after.len()
    );
}
