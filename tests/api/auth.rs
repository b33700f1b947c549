//! The authentication matrix: 401 for missing, forged, expired or malformed
//! tokens on every route; 403 for acting for someone else or non-admins on
//! admin routes.

use feed_service::http::auth::{Claims, JwtKeys};
use feed_service::types::UserId;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{error_code, spawn_app};

fn routes() -> Vec<(Method, &'static str)> {
    vec![
        (Method::POST, "/api/v1/users"),
        (Method::GET, "/api/v1/users/1"),
        (Method::PUT, "/api/v1/users/1/following/2"),
        (Method::DELETE, "/api/v1/users/1/following/2"),
        (Method::POST, "/api/v1/posts"),
        (Method::GET, "/api/v1/posts/1"),
        (Method::DELETE, "/api/v1/posts/1"),
        (Method::GET, "/api/v1/feed"),
        (Method::GET, "/api/v1/users/1/posts"),
        (Method::GET, "/api/v1/admin/settings"),
        (Method::PUT, "/api/v1/admin/settings"),
    ]
}

fn forged(secret: &[u8], sub: &str, exp: u64, role: Option<&str>) -> String {
    let claims = Claims {
        sub: sub.to_string(),
        exp,
        nbf: None,
        iat: None,
        iss: None,
        aud: None,
        role: role.map(str::to_string),
    };
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn every_api_route_rejects_bad_tokens_with_401() {
    let app = spawn_app().await;
    let secret = app.jwt_secret.as_bytes();
    let far = 4_000_000_000;
    let bad_tokens: Vec<(&str, Option<String>)> = vec![
        ("no header", None),
        ("empty", Some(String::new())),
        ("garbage", Some("not-a-token".into())),
        (
            "wrong secret",
            Some(forged(
                b"some-other-secret-entirely",
                "1",
                far,
                Some("admin"),
            )),
        ),
        (
            "expired",
            Some(forged(secret, "1", 1_000_000_000, Some("admin"))),
        ),
        ("non-numeric sub", Some(forged(secret, "alice", far, None))),
        ("negative sub", Some(forged(secret, "-5", far, None))),
    ];
    for (method, path) in routes() {
        for (what, token) in &bad_tokens {
            let mut req = app
                .client
                .request(method.clone(), app.url(path))
                .json(&json!({}));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let res = app.send(&method, path, req).await;
            assert_eq!(
                error_code(res).await,
                (StatusCode::UNAUTHORIZED, "unauthorized".into()),
                "{method} {path} with {what}"
            );
        }
        let req = app
            .client
            .request(method.clone(), app.url(path))
            .header("Authorization", format!("Basic {}", app.admin));
        let res = app.send(&method, path, req).await;
        assert_eq!(
            res.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {path} with Basic"
        );
    }
}

#[tokio::test]
async fn users_may_not_act_for_others_nor_use_admin_routes() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    let post = app.publish(&alice, "mine").await;
    let cases = vec![
        (
            Method::PUT,
            format!("/api/v1/users/{}/following/{}", alice.id, bob.id),
            None,
        ),
        (
            Method::DELETE,
            format!("/api/v1/users/{}/following/{}", alice.id, bob.id),
            None,
        ),
        (Method::DELETE, format!("/api/v1/posts/{}", post.id), None),
        (
            Method::POST,
            "/api/v1/users".to_string(),
            Some(json!({"username": "carol"})),
        ),
        (Method::GET, "/api/v1/admin/settings".to_string(), None),
        (
            Method::PUT,
            "/api/v1/admin/settings".to_string(),
            Some(json!({"inbox_max_len": 5})),
        ),
    ];
    for (method, path, body) in cases {
        let res = app
            .request(method.clone(), &path, Some(&bob.token), body)
            .await;
        assert_eq!(
            error_code(res).await,
            (StatusCode::FORBIDDEN, "forbidden".into()),
            "{method} {path}"
        );
    }
    // Nothing changed.
    assert_eq!(app.user(bob.id).await["follower_count"], 0);
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/posts/{}", post.id),
            Some(&bob.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(app.engine.settings().inbox_max_len, 1000);
    // An admin may act for anyone; a user for itself.
    let res = app
        .request(
            Method::PUT,
            &format!("/api/v1/users/{}/following/{}", bob.id, alice.id),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert_eq!(app.user(alice.id).await["follower_count"], 1);
}

#[tokio::test]
async fn the_token_subcommand_mints_what_the_server_accepts() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_feed-service"))
        .args(["token", "--user", &alice.id.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let res = app
        .request(Method::GET, "/api/v1/feed", Some(&token), None)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let keys = JwtKeys::new(app.jwt_secret.as_bytes()).unwrap();
    assert_eq!(keys.verify(&token).unwrap().id, UserId(alice.id));
}

#[tokio::test]
async fn a_configured_issuer_and_audience_are_required_and_the_minted_tokens_carry_them() {
    let mut settings = crate::helpers::test_settings();
    settings.auth.issuer = "https://apps.example".into();
    settings.auth.audience = "feed".into();
    let app = crate::helpers::spawn_app_with(settings).await;
    // The service's own tokens (the helpers mint them like `token` does).
    let alice = app.create_user("alice").await;
    let res = app
        .request(Method::GET, "/api/v1/feed", Some(&alice.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    // A token without them is refused.
    let far = 4_000_000_000;
    let bare = forged(app.jwt_secret.as_bytes(), &alice.id.to_string(), far, None);
    let res = app
        .request(Method::GET, "/api/v1/feed", Some(&bare), None)
        .await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );
}
