//! The bad-input matrix: every parameter of every route, with wrong types,
//! out-of-range values, over-long strings and malformed JSON. Each gets a
//! JSON error with the documented status and code, and changes nothing.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{error_code, spawn_app};

enum Body {
    None,
    Json(Value),
    Raw(&'static str, String),
}

#[tokio::test]
async fn bad_input_gets_a_json_error_and_changes_nothing() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    let post = app.publish(&alice, "hello").await;
    let a = alice.id;
    let long_name = "a".repeat(33);
    let long_body = "x".repeat(2001);
    let huge = format!("{{\"body\": \"{}\"}}", "y".repeat(70 * 1024));
    let cases: Vec<(Method, String, Body, &str, StatusCode, &str)> = vec![
        // POST /users
        (
            Method::POST,
            "/api/v1/users".into(),
            Body::Json(json!({})),
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/users".into(),
            Body::Json(json!({"username": 5})),
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/users".into(),
            Body::Json(json!({"username": "x", "extra": 1})),
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/users".into(),
            Body::Raw("application/json", "{\"username\":".into()),
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/users".into(),
            Body::Raw("text/plain", "{\"username\":\"zed\"}".into()),
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/users".into(),
            Body::None,
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/users".into(),
            Body::Json(json!({"username": ""})),
            "admin",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::POST,
            "/api/v1/users".into(),
            Body::Json(json!({"username": long_name})),
            "admin",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::POST,
            "/api/v1/users".into(),
            Body::Json(json!({"username": "Bad-Name"})),
            "admin",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::POST,
            "/api/v1/users".into(),
            Body::Json(json!({"username": "alice"})),
            "admin",
            StatusCode::CONFLICT,
            "conflict",
        ),
        // GET /users/{id}
        (
            Method::GET,
            "/api/v1/users/abc".into(),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/users/-1".into(),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/users/0".into(),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/users/99999999999999999999".into(),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/users/1.5".into(),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/users/987654".into(),
            Body::None,
            "alice",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        // following
        (
            Method::PUT,
            format!("/api/v1/users/{a}/following/x"),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::PUT,
            format!("/api/v1/users/x/following/{a}"),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::PUT,
            format!("/api/v1/users/{a}/following/-2"),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::PUT,
            format!("/api/v1/users/{a}/following/987654"),
            Body::None,
            "alice",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::PUT,
            format!("/api/v1/users/{a}/following/{a}"),
            Body::None,
            "alice",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::DELETE,
            format!("/api/v1/users/{a}/following/x"),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        // posts
        (
            Method::POST,
            "/api/v1/posts".into(),
            Body::Json(json!({})),
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/posts".into(),
            Body::Json(json!({"body": 1})),
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/posts".into(),
            Body::Json(json!({"body": null})),
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/posts".into(),
            Body::Json(json!(["body"])),
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/posts".into(),
            Body::Raw("application/json", "{body: 'x'}".into()),
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/posts".into(),
            Body::Json(json!({"body": ""})),
            "alice",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::POST,
            "/api/v1/posts".into(),
            Body::Json(json!({"body": long_body})),
            "alice",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::POST,
            "/api/v1/posts".into(),
            Body::Json(json!({"body": "nul\u{0}byte"})),
            "alice",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::POST,
            "/api/v1/posts".into(),
            Body::Raw("application/json", huge.clone()),
            "alice",
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            Method::POST,
            "/api/v1/statuses".into(),
            Body::Raw("application/json", huge),
            "alice",
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            Method::GET,
            "/api/v1/users/1/mutes?max=1764500000000&offset=20000".into(),
            Body::None,
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/users/1/blocks?offset=4294967295".into(),
            Body::None,
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/posts/x".into(),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/posts/0".into(),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/posts/987654".into(),
            Body::None,
            "alice",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::DELETE,
            "/api/v1/posts/x".into(),
            Body::None,
            "alice",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::DELETE,
            "/api/v1/posts/987654".into(),
            Body::None,
            "alice",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        // feed and author pages
        (
            Method::GET,
            "/api/v1/feed?max=-1".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?max=abc".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?max=".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?max=1e3".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?offset=-1".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?offset=10001".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?offset=3".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?max=5&offset=10001".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?offset=x".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?limit=0".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?limit=101".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?limit=2.5".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?limit=1&limit=2".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/feed?max=99999999999999999999".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            format!("/api/v1/users/{a}/posts?limit=0"),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            format!("/api/v1/users/{a}/posts?max=x"),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            format!("/api/v1/users/{a}/posts?offset=10001"),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/users/x/posts".into(),
            Body::None,
            "bob",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/api/v1/users/987654/posts".into(),
            Body::None,
            "bob",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        // admin settings
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Json(json!({"big_v_threshold": "x"})),
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Json(json!({"nope": 1})),
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Json(json!({"inbox_max_len": 1.5})),
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Raw("application/json", "[".into()),
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Json(json!([1, 2, 3, 4, 5])),
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/api/v1/users".into(),
            Body::Json(json!(["zed"])),
            "admin",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Json(json!({"big_v_threshold": 0})),
            "admin",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Json(json!({"big_v_demote_threshold": 10000})),
            "admin",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Json(json!({"big_v_demote_threshold": -1})),
            "admin",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Json(json!({"active_window_secs": 0})),
            "admin",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Json(json!({"inbox_max_len": 0})),
            "admin",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Json(json!({"outbox_max_len": 100001})),
            "admin",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
        (
            Method::PUT,
            "/api/v1/admin/settings".into(),
            Body::Json(json!({"inbox_idle_ttl_secs": 59})),
            "admin",
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
        ),
    ];
    for (method, path, body, who, status, code) in cases {
        let token = match who {
            "admin" => app.admin.clone(),
            "alice" => alice.token.clone(),
            _ => bob.token.clone(),
        };
        let mut req = app
            .client
            .request(method.clone(), app.url(&path))
            .bearer_auth(&token);
        req = match body {
            Body::None => req,
            Body::Json(v) => req.json(&v),
            Body::Raw(ct, text) => req.header("Content-Type", ct).body(text),
        };
        let res = app.send(&method, &path, req).await;
        assert_eq!(
            error_code(res).await,
            (status, code.to_string()),
            "{method} {path}"
        );
    }
    // Nothing changed: two users, alice's one post, default settings, no follows.
    assert_eq!(app.user(alice.id).await["follower_count"], 0);
    assert_eq!(app.user(alice.id).await["following_count"], 0);
    let res = app
        .request(Method::GET, "/api/v1/users/3", Some(&app.admin), None)
        .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let (items, _) = app
        .page(&format!("/api/v1/users/{a}/posts"), &bob.token, None, 100)
        .await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].id, post.id);
    let settings = app.settings().await;
    assert_eq!(
        settings,
        json!({"big_v_threshold": 10000, "big_v_demote_threshold": 8000, "active_window_secs": 604800, "inbox_max_len": 1000, "outbox_max_len": 1000, "inbox_idle_ttl_secs": 2592000, "max_follows": 10000, "max_fanout_backlog": 100000, "home_includes_own_posts": true, "follow_copy_limit": 100})
    );
}

/// Reads what the server sends until it closes the connection, sends
/// `needle`, or `limit` passes.
async fn read_until(
    stream: &mut tokio::net::TcpStream,
    needle: &str,
    limit: std::time::Duration,
) -> String {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let reading = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            if String::from_utf8_lossy(&got).contains(needle) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(limit, reading).await;
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn slow_clients_are_cut_off_with_408() {
    use std::time::{Duration, Instant};
    use tokio::io::AsyncWriteExt;
    let mut settings = crate::helpers::test_settings();
    settings.server.request_head_timeout_ms = 2000;
    settings.server.request_timeout_secs = 1;
    let app = crate::helpers::spawn_app_with(settings).await;
    let alice = app.create_user("alice").await;
    let addr = app.address.trim_start_matches("http://").to_string();

    // A head that never ends.
    let mut slow_head = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow_head
        .write_all(b"GET /api/v1/feed HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let reply = read_until(&mut slow_head, "\r\n\r\n", Duration::from_secs(10)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 408"),
        "{reply}"
    );

    // A body that trickles: 10 of its 100 bytes, then nothing.
    let mut slow_body = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /api/v1/posts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"body\": \"",
        alice.token
    );
    slow_body.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let reply = read_until(&mut slow_body, "request_timeout", Duration::from_secs(10)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("\"request_timeout\""), "{reply}");
    // Nothing was published.
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/users/{}/posts", alice.id),
            Some(&alice.token),
            None,
        )
        .await;
    let page: Value = res.json().await.unwrap();
    assert_eq!(page["items"], json!([]));
}
