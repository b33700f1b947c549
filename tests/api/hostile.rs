//! A hostile client: floods of unknown paths, headers and query keys,
//! oversized and malformed bodies and tokens, and Unicode edge cases in
//! usernames and bodies. Every case answers a documented 4xx (or succeeds
//! where the input is valid), none a 5xx, and `/metrics` stays bounded.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use std::process::Stdio;

use crate::helpers::{spawn_app, test_settings, Cleanup, TestApp};
use crate::process::spawn_service;

/// Sends raw JSON text (escapes as the client wrote them) to `path`.
async fn raw_json(
    app: &TestApp,
    method: Method,
    path: &str,
    token: &str,
    text: &str,
) -> StatusCode {
    app.client
        .request(method, app.url(path))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(text.to_string())
        .send()
        .await
        .unwrap()
        .status()
}

async fn metrics_size(app: &TestApp) -> usize {
    let res = app.request(Method::GET, "/metrics", None, None).await;
    res.text().await.unwrap().len()
}

fn documented_4xx(status: StatusCode) -> bool {
    [400, 401, 403, 404, 405, 408, 409, 413, 422, 429, 431].contains(&status.as_u16())
}

#[tokio::test]
async fn a_hostile_client_gets_documented_4xx_and_nothing_grows() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let before = metrics_size(&app).await;

    // Unknown paths, with and without a token.
    for i in 0..300 {
        let path = format!("/api/v1/nowhere/{i}/{}", "x".repeat(i % 50));
        let res = app
            .client
            .get(app.url(&path))
            .bearer_auth(&alice.token)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{path}");
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["error"]["code"], "not_found");
    }

    // Many headers, long headers, many query keys.
    let mut req = app
        .client
        .get(app.url("/api/v1/feed"))
        .bearer_auth(&alice.token);
    for i in 0..200 {
        req = req.header(format!("x-junk-{i}"), "v".repeat(100));
    }
    let status = req.send().await.map(|r| r.status());
    if let Ok(status) = status {
        assert!(
            status.is_success() || documented_4xx(status),
            "many headers: {status}"
        );
    }
    let long = app
        .client
        .get(app.url("/api/v1/feed"))
        .bearer_auth(&alice.token)
        .header("x-long", "v".repeat(64 * 1024))
        .send()
        .await
        .map(|r| r.status());
    if let Ok(status) = long {
        assert!(
            documented_4xx(status) || status.is_success(),
            "a long header: {status}"
        );
    }
    let query: Vec<String> = (0..2000).map(|i| format!("k{i}=v{i}")).collect();
    let res = app
        .client
        .get(app.url(&format!("/api/v1/feed?{}", query.join("&"))))
        .bearer_auth(&alice.token)
        .send()
        .await
        .unwrap();
    // Unknown keys are ignored; the query is bounded by the server's limits.
    let status = res.status();
    assert!(
        status.is_success() || documented_4xx(status),
        "unknown query keys: {status}"
    );

    // Tokens: huge, malformed, odd schemes.
    for token in [
        "x".repeat(100 * 1024),
        "a.b.c".to_string(),
        "....".to_string(),
        "eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0.".to_string(),
    ] {
        let res = app
            .client
            .get(app.url("/api/v1/feed"))
            .header("authorization", format!("Bearer {token}"))
            .send()
            .await
            .map(|r| r.status());
        if let Ok(status) = res {
            assert!(documented_4xx(status), "token {}…: {status}", &token[..4]);
        }
    }
    for header in ["Basic YTpi", "Bearer", "bearer  ", "Bearer \u{7f}"] {
        let res = app
            .client
            .get(app.url("/api/v1/feed"))
            .header("authorization", header)
            .send()
            .await
            .map(|r| r.status());
        if let Ok(status) = res {
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{header:?}");
        }
    }

    // Bodies: oversized, malformed, wrong types, deep nesting.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    for text in [
        format!("{{\"body\": \"{}\"}}", "x".repeat(70 * 1024)),
        "{\"body\": ".to_string(),
        "{\"body\": 5}".to_string(),
        "[]".to_string(),
        deep,
        "{\"body\": \"ok\", \"extra\": 1}".to_string(),
        "{\"body\": \"\\ud800\"}".to_string(),
        "{\"body\": \"\\udc00x\"}".to_string(),
        "{\"body\": \"a\\u0000b\"}".to_string(),
        "\u{feff}{\"body\": \"bom\"}".to_string(),
    ] {
        let status = raw_json(&app, Method::POST, "/api/v1/posts", &alice.token, &text).await;
        assert!(
            documented_4xx(status),
            "{}…: {status}",
            &text[..text.len().min(30)]
        );
    }

    // Usernames: only [a-z0-9_] is a username; every other form is 422 or 400.
    for name in [
        "a\\u0000b",
        "\\ud83d\\ude00",
        "e\\u0301",
        "\\u202eevil",
        "\\ud800",
        "ａｂｃ",
        "Alice",
        "",
        "a b",
    ] {
        let text = format!("{{\"username\": \"{name}\"}}");
        let status = raw_json(&app, Method::POST, "/api/v1/users", &app.admin, &text).await;
        assert!(
            status == StatusCode::UNPROCESSABLE_ENTITY || status == StatusCode::BAD_REQUEST,
            "{name}: {status}"
        );
    }

    // Bodies that are valid Unicode are kept exactly, counted in characters.
    let mut published = Vec::new();
    for body in [
        "😀".repeat(2000),
        "e\u{301}".repeat(1000),
        "\u{202e}right-to-left\u{200f}".to_string(),
        "tab\tand\nnewline".to_string(),
    ] {
        let res = app
            .request(
                Method::POST,
                "/api/v1/posts",
                Some(&alice.token),
                Some(json!({"body": body})),
            )
            .await;
        assert_eq!(
            res.status(),
            StatusCode::CREATED,
            "{}",
            body.chars().count()
        );
        let post: Value = res.json().await.unwrap();
        assert_eq!(post["body"], body.as_str());
        published.push(body);
    }
    let over = "😀".repeat(2001);
    let res = app
        .request(
            Method::POST,
            "/api/v1/posts",
            Some(&alice.token),
            Some(json!({"body": over})),
        )
        .await;
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let own = app
        .request(
            Method::GET,
            &format!("/api/v1/users/{}/posts?limit=10", alice.id),
            Some(&alice.token),
            None,
        )
        .await;
    let page: Value = own.json().await.unwrap();
    let mut bodies: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["body"].as_str().unwrap().to_string())
        .collect();
    bodies.reverse();
    assert_eq!(bodies, published, "nothing else was published");

    // Other tests of this process add their own (bounded) series meanwhile.
    let after = metrics_size(&app).await;
    assert!(
        after < before + 64 * 1024,
        "/metrics grew from {before} to {after}"
    );
}

/// One round of a flood against a running service: unknown methods, paths,
/// headers and query keys, and bodies past the limit, each request new.
async fn flood(client: &reqwest::Client, base: &str, round: usize) -> usize {
    let mut sent = 0;
    for i in 0..400 {
        let n = round * 1000 + i;
        let method = Method::from_bytes(format!("M{n}").as_bytes()).unwrap();
        let requests = [
            client.request(method, format!("{base}/healthz")),
            client.get(format!("{base}/api/v1/nowhere/{n}")),
            client
                .get(format!("{base}/api/v1/feed?k{n}=v&j{n}=w"))
                .header(format!("x-junk-{n}"), "v".repeat(200)),
            client
                .post(format!("{base}/api/v1/posts"))
                .header("content-type", "application/json")
                .body(vec![b'x'; 128 * 1024]),
        ];
        for req in requests {
            if let Ok(res) = req.send().await {
                assert!(!res.status().is_server_error(), "{}", res.status());
                let _ = res.bytes().await;
            }
            sent += 1;
        }
    }
    sent
}

#[tokio::test]
async fn a_flood_of_new_junk_leaves_the_process_s_memory_where_it_was() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let service = spawn_service(&settings, &[], Stdio::null()).await;
    let base = format!("http://127.0.0.1:{}", service.port);
    let client = reqwest::Client::new();
    let metrics = |client: reqwest::Client| {
        let url = format!("{base}/metrics");
        async move {
            client
                .get(url)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
                .len()
        }
    };
    // One round first: pools and caches reach their working size.
    flood(&client, &base, 0).await;
    let (rss, size) = (service.resident_bytes(), metrics(client.clone()).await);
    let mut sent = 0;
    for round in 1..=4 {
        sent += flood(&client, &base, round).await;
    }
    let (rss_after, size_after) = (service.resident_bytes(), metrics(client.clone()).await);
    eprintln!(
        "{sent} new requests (200 MiB of refused bodies): resident {} -> {} KiB, /metrics {size} -> {size_after} B",
        rss / 1024,
        rss_after / 1024
    );
    assert!(
        rss_after < rss + 16 * 1024 * 1024,
        "the process grew from {rss} to {rss_after} bytes"
    );
    assert!(
        size_after < size + 8 * 1024,
        "/metrics grew from {size} to {size_after}"
    );
}

/// The streaming URL an instance document gives, asked with `headers`.
async fn streaming_url(app: &TestApp, headers: &[(&str, &str)]) -> String {
    let mut req = app.client.get(app.url("/api/v2/instance"));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let doc: Value = req.send().await.unwrap().json().await.unwrap();
    doc["configuration"]["urls"]["streaming"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn urls_in_bodies_never_come_from_forwarded_headers() {
    let app = spawn_app().await;
    let own = app.url("").replacen("http://", "ws://", 1);
    let own = own.trim_end_matches('/');
    // Forwarded headers any client can send (and a shared cache would
    // pass on) change nothing.
    let forged = [
        ("x-forwarded-host", "evil.example"),
        ("x-forwarded-proto", "https"),
        ("forwarded", "for=1.2.3.4;host=evil.example;proto=https"),
    ];
    assert_eq!(streaming_url(&app, &forged).await, own);
    // A Host that is not a host name is not written into a body either.
    let url = streaming_url(&app, &[("host", "evil.example/x?@")]).await;
    assert!(!url.contains("evil"), "{url}");
    // With a public URL configured, it is the one written, whatever comes.
    let mut settings = test_settings();
    settings.server.public_url = "https://feed.example.com/".into();
    let app = crate::helpers::spawn_app_with(settings).await;
    assert_eq!(streaming_url(&app, &forged).await, "wss://feed.example.com");
    let me = app.create_user("me").await;
    let res = app
        .request(
            Method::GET,
            "/api/v1/accounts/verify_credentials",
            Some(&me.token),
            None,
        )
        .await;
    let account: Value = res.json().await.unwrap();
    let url = account["url"].as_str().unwrap();
    assert!(url.starts_with("https://feed.example.com/"), "{url}");
}
