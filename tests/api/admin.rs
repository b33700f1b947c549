use feed_service::types::UserId;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{spawn_app, spawn_app_with, test_settings};

#[tokio::test]
async fn settings_are_read_updated_in_part_and_persisted() {
    let app = spawn_app().await;
    let res = app
        .request(
            Method::GET,
            "/api/v1/admin/settings",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let before: Value = res.json().await.unwrap();
    assert_eq!(before["big_v_threshold"], 10000);
    let after = app
        .set_settings(json!({"inbox_max_len": 50, "active_window_secs": 60}))
        .await;
    assert_eq!(after["inbox_max_len"], 50);
    assert_eq!(after["active_window_secs"], 60);
    assert_eq!(after["big_v_threshold"], 10000);
    let again = app.settings().await;
    assert_eq!(again, after);
}

#[tokio::test]
async fn a_change_through_one_instance_reaches_another() {
    let one = spawn_app().await;
    // A second instance on the same database and Redis prefix.
    let mut settings = test_settings();
    settings.database.url = secrecy::SecretString::from(one.database_url().to_string());
    let two = spawn_app_with(settings).await;
    one.set_settings(json!({"big_v_threshold": 5, "big_v_demote_threshold": 2}))
        .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(two.engine.settings().big_v_threshold, 5);
    assert_eq!(two.engine.settings().big_v_demote_threshold, 2);
    // `two` drops first and removes the shared database; `one` finds it gone.
}

#[tokio::test]
async fn big_v_follows_follower_counts_with_hysteresis() {
    let app = spawn_app().await;
    app.set_settings(json!({"big_v_threshold": 3, "big_v_demote_threshold": 2}))
        .await;
    let star = app.create_user("star").await;
    let fans = app.users("fan", 3).await;
    app.follow(&fans[0], &star).await;
    app.follow(&fans[1], &star).await;
    assert_eq!(app.user(star.id).await["big_v"], false);
    app.follow(&fans[2], &star).await;
    assert_eq!(app.user(star.id).await["big_v"], true);
    // 2 followers: not below the demote threshold yet.
    app.unfollow(&fans[2], &star).await;
    assert_eq!(app.user(star.id).await["big_v"], true);
    app.unfollow(&fans[1], &star).await;
    assert_eq!(app.user(star.id).await["big_v"], false);
    // Threshold changes apply to every author at once.
    app.set_settings(json!({"big_v_threshold": 1, "big_v_demote_threshold": 0}))
        .await;
    assert_eq!(app.user(star.id).await["big_v"], true);
    app.set_settings(json!({"big_v_threshold": 100, "big_v_demote_threshold": 50}))
        .await;
    assert_eq!(app.user(star.id).await["big_v"], false);
}

#[tokio::test]
async fn concurrent_partial_updates_keep_each_other_s_fields() {
    let app = spawn_app().await;
    for round in 0..20i64 {
        let (a, b) = (100 + round, 200 + round);
        let put = |body: Value| {
            app.client
                .put(app.url("/api/v1/admin/settings"))
                .bearer_auth(&app.admin)
                .json(&body)
                .send()
        };
        let (ra, rb) = tokio::join!(
            put(json!({ "inbox_max_len": a })),
            put(json!({ "outbox_max_len": b }))
        );
        assert_eq!(ra.unwrap().status(), StatusCode::OK);
        assert_eq!(rb.unwrap().status(), StatusCode::OK);
        let now = app.settings().await;
        assert_eq!(
            (
                now["inbox_max_len"].as_i64(),
                now["outbox_max_len"].as_i64()
            ),
            (Some(a), Some(b)),
            "round {round}"
        );
    }
}

#[tokio::test]
async fn a_follow_through_another_instance_uses_the_thresholds_just_set() {
    let one = spawn_app().await;
    // A second instance that has not reloaded the settings yet.
    let mut settings = test_settings();
    settings.database.url = secrecy::SecretString::from(one.database_url().to_string());
    settings.redis.key_prefix = one.engine.redis().keys().prefix().to_string();
    let two = feed_service::startup::Application::build(&settings)
        .await
        .unwrap();
    let star = one.create_user("star").await;
    let fans = one.users("fan", 2).await;
    one.follow(&fans[0], &star).await;
    one.set_settings(json!({"big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    two.engine()
        .relations()
        .follow(UserId(fans[1].id), UserId(star.id))
        .await
        .unwrap();
    assert_eq!(one.user(star.id).await["big_v"], true);
    two.engine()
        .relations()
        .unfollow(UserId(fans[1].id), UserId(star.id))
        .await
        .unwrap();
    two.engine()
        .relations()
        .unfollow(UserId(fans[0].id), UserId(star.id))
        .await
        .unwrap();
    assert_eq!(one.user(star.id).await["big_v"], false);
}
