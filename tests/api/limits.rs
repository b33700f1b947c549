//! Limits that protect the service and its stores: request rates, job
//! coalescing, the work of a deep page, and `/metrics` that costs nothing.

use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use feed_service::engine::Stats;
use feed_service::startup::Application;
use feed_service::types::{PageRequest, UserId};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{error_code, spawn_app, spawn_app_with, test_settings, Cleanup, TestResponse};

fn retry_after(res: &TestResponse) -> u64 {
    res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_user_past_its_budget_gets_429_with_retry_after_reads_and_writes_apart() {
    let mut settings = test_settings();
    settings.limits.enabled = true;
    settings.limits.user_reads_per_sec = 1;
    settings.limits.user_read_burst = 3;
    settings.limits.user_writes_per_sec = 1;
    settings.limits.user_write_burst = 2;
    let app = spawn_app_with(settings).await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    let feed = async |who: &str| {
        app.request(Method::GET, "/api/v1/feed", Some(who), None)
            .await
    };
    for _ in 0..3 {
        assert_eq!(feed(&alice.token).await.status(), StatusCode::OK);
    }
    let refused = feed(&alice.token).await;
    assert!((1..=2).contains(&retry_after(&refused)));
    assert_eq!(
        error_code(refused).await,
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited".into())
    );
    // Writes have their own budget, and other users theirs.
    let post = async |who: &str| {
        app.request(
            Method::POST,
            "/api/v1/posts",
            Some(who),
            Some(json!({"body": "x"})),
        )
        .await
    };
    assert_eq!(post(&alice.token).await.status(), StatusCode::CREATED);
    assert_eq!(post(&alice.token).await.status(), StatusCode::CREATED);
    let refused = post(&alice.token).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(feed(&bob.token).await.status(), StatusCode::OK);
    // An admin is not limited (it has no home: it reads a user).
    for _ in 0..10 {
        let res = app
            .request(
                Method::GET,
                &format!("/api/v1/users/{}", alice.id),
                Some(&app.admin),
                None,
            )
            .await;
        assert_eq!(res.status(), StatusCode::OK);
    }
    // The budget refills.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(feed(&alice.token).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn per_address_limits_are_off_by_default_and_follow_a_trusted_proxy_header() {
    let app = spawn_app().await;
    for _ in 0..300 {
        let res = app.request(Method::GET, "/healthz", None, None).await;
        assert_eq!(res.status(), StatusCode::OK);
    }
    let mut settings = test_settings();
    settings.limits.ip_per_sec = 1;
    settings.limits.ip_burst = 2;
    settings.limits.trusted_proxy_header = "X-Forwarded-For".into();
    let app = spawn_app_with(settings).await;
    let from = |address: &'static str| {
        let req = app
            .client
            .get(app.url("/healthz"))
            .header("x-forwarded-for", format!("10.9.9.9, {address}"));
        app.send(&Method::GET, "/healthz", req)
    };
    assert_eq!(from("192.0.2.1").await.status(), StatusCode::OK);
    assert_eq!(from("192.0.2.1").await.status(), StatusCode::OK);
    let refused = from("192.0.2.1").await;
    assert!(retry_after(&refused) >= 1);
    assert_eq!(
        error_code(refused).await,
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited".into())
    );
    // The proxy's last hop is the client: another address has its own.
    assert_eq!(from("192.0.2.2").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn toggling_a_follow_queues_at_most_one_job_for_the_pair() {
    // No workers run: every job stays queued.
    let settings = test_settings();
    let app = Application::build(&settings).await.unwrap();
    let _cleanup = Cleanup::of(&settings);
    let engine = app.engine().clone();
    let a = engine.pg().users().create_user("a").await.unwrap().id;
    let b = engine.pg().users().create_user("b").await.unwrap().id;
    // Redis refuses every call: each call's own cache update fails and its
    // job stays queued.
    engine
        .redis()
        .faults()
        .arm(100_000, feed_service::store::redis::Fault::Refuse);
    for _ in 0..10 {
        assert!(engine.relations().follow(a, b).await.is_err());
        assert!(engine.relations().unfollow(a, b).await.is_err());
    }
    assert!(engine.relations().follow(a, b).await.is_err());
    assert_eq!(engine.pg().jobs().pending_jobs().await.unwrap(), 1);
    // One a worker holds is kept; the next replaces any untouched one.
    let held = engine
        .fanout()
        .claim(0)
        .await
        .unwrap()
        .expect("the follow job");
    for _ in 0..10 {
        assert!(engine.relations().unfollow(a, b).await.is_err());
        assert!(engine.relations().follow(a, b).await.is_err());
    }
    assert_eq!(engine.pg().jobs().pending_jobs().await.unwrap(), 2);
    drop(held);
}

#[tokio::test]
async fn a_page_deep_in_a_run_of_equal_scores_costs_what_a_first_page_does() {
    let app = spawn_app().await;
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    app.settle().await;
    let mut conn = AsyncPgConnection::establish(app.database_url())
        .await
        .unwrap();
    diesel::sql_query(
        "INSERT INTO posts (author_id, body, created_at_ms) \
         SELECT $1, 'tie', 1764500005000 FROM generate_series(1, 12000)",
    )
    .bind::<diesel::sql_types::BigInt, _>(author.id)
    .execute(&mut conn)
    .await
    .unwrap();
    let stats = app.engine.stats();
    let cost = |req: PageRequest| {
        let engine = app.engine.clone();
        async move {
            let (e0, r0) = (
                Stats::get(&stats.entries_read),
                Stats::get(&stats.rows_read),
            );
            let page = engine
                .reads()
                .home_page(UserId(reader.id), req)
                .await
                .unwrap();
            assert_eq!(page.items.len(), 100);
            Stats::get(&stats.entries_read) - e0 + Stats::get(&stats.rows_read) - r0
        }
    };
    let first = cost(PageRequest::first(100)).await;
    for offset in [50, 5_000, 10_000, 11_000] {
        let req = PageRequest::parse(Some(1_764_500_005_000), None, Some(offset), None, Some(100))
            .unwrap();
        let deep = cost(req).await;
        assert!(
            deep <= 3 * first.max(202),
            "offset {offset}: {deep} entries and rows, a first page {first}"
        );
    }
}

#[tokio::test]
async fn a_metrics_scrape_makes_no_query() {
    let mut settings = test_settings();
    settings.metrics.refresh_ms = 3_600_000;
    settings.feed.settings_refresh_ms = 1_000;
    let app = spawn_app_with(settings).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = app.engine.pg().queries();
    let started = std::time::Instant::now();
    for _ in 0..20 {
        let res = app.request(Method::GET, "/metrics", None, None).await;
        assert_eq!(res.status(), StatusCode::OK);
    }
    // The admin settings' reload (one query a second) may fall in between.
    let reloads = started.elapsed().as_millis() as u64 / 1_000 + 1;
    let made = app.engine.pg().queries() - before;
    assert!(made <= reloads, "20 scrapes: {made} queries");
}

#[tokio::test]
async fn metrics_can_have_a_port_and_a_token_of_their_own() {
    let mut settings = test_settings();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    settings.metrics.port = port;
    settings.metrics.token = Some("a-metrics-token-of-some-length".to_string().into());
    let app = spawn_app_with(settings).await;
    let res = app.request(Method::GET, "/metrics", None, None).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND, "not on the main port");
    let url = format!("http://127.0.0.1:{port}/metrics");
    let res = app.client.get(&url).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let res = app
        .client
        .get(&url)
        .bearer_auth("a-metrics-token-of-some-length")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.text().await.unwrap().contains("http_requests_total"));
}
