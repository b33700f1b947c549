use feed_service::types::UserId;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::spawn_app;

#[tokio::test]
async fn created_users_can_be_read_back() {
    let app = spawn_app().await;
    let res = app
        .request(
            Method::POST,
            "/api/v1/users",
            Some(&app.admin),
            Some(json!({"username": "a_1"})),
        )
        .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let created: Value = res.json().await.unwrap();
    assert_eq!(created["username"], "a_1");
    assert_eq!(created["follower_count"], 0);
    assert_eq!(created["following_count"], 0);
    assert_eq!(created["big_v"], false);
    let fetched = app.user(created["id"].as_i64().unwrap()).await;
    assert_eq!(fetched, created);
}

#[tokio::test]
async fn follow_and_unfollow_are_idempotent_and_keep_counts() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    app.follow(&bob, &alice).await;
    app.follow(&bob, &alice).await;
    assert_eq!(app.user(alice.id).await["follower_count"], 1);
    assert_eq!(app.user(bob.id).await["following_count"], 1);
    app.unfollow(&bob, &alice).await;
    app.unfollow(&bob, &alice).await;
    assert_eq!(app.user(alice.id).await["follower_count"], 0);
    assert_eq!(app.user(bob.id).await["following_count"], 0);
}

#[tokio::test]
async fn concurrent_mutual_follows_do_not_deadlock() {
    let app = spawn_app().await;
    let users = app.users("u", 6).await;
    let mut tasks = Vec::new();
    for a in &users {
        for b in &users {
            if a.id != b.id {
                tasks.push(app.follow(a, b));
            }
        }
    }
    futures::future::join_all(tasks).await;
    for u in &users {
        let v = app.user(u.id).await;
        assert_eq!(v["follower_count"], 5);
        assert_eq!(v["following_count"], 5);
    }
}

#[tokio::test]
async fn unfollowing_ids_never_followed_leaves_the_readers_state_as_it_is() {
    let app = spawn_app().await;
    let reader = app.create_user("reader").await;
    let author = app.create_user("author").await;
    let stranger = app.create_user("stranger").await;
    // The reader's copy is built, then takes one follow change.
    app.home(&reader, 5).await;
    app.follow(&reader, &author).await;
    let key = app.engine.redis().keys().following(UserId(reader.id));
    let fields = || async {
        let mut conn = app.engine.redis().connection().await.unwrap();
        let n: i64 = redis::cmd("HLEN")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        n
    };
    let before = fields().await;
    assert!(before >= 2, "the copy holds its mark and the author");
    for unknown in (1_000_000..1_000_050).chain([stranger.id]) {
        let path = format!("/api/v1/users/{}/following/{unknown}", reader.id);
        let res = app
            .request(Method::DELETE, &path, Some(&reader.token), None)
            .await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT, "{path}");
    }
    assert_eq!(fields().await, before, "unfollows of nobody grew {key}");
    // A real unfollow still applies, and its repeat is harmless.
    app.unfollow(&reader, &author).await;
    app.unfollow(&reader, &author).await;
    app.publish(&author, "unseen").await;
    app.settle().await;
    assert!(app.home(&reader, 5).await.is_empty());
}

#[tokio::test]
async fn follows_past_the_admin_cap_answer_422_and_change_nothing() {
    let app = spawn_app().await;
    app.set_settings(json!({"max_follows": 2})).await;
    let reader = app.create_user("reader").await;
    let authors = app.users("author", 3).await;
    app.follow(&reader, &authors[0]).await;
    app.follow(&reader, &authors[1]).await;
    // A repeat of a follow it has is no new follow.
    app.follow(&reader, &authors[1]).await;
    let path = format!("/api/v1/users/{}/following/{}", reader.id, authors[2].id);
    let res = app
        .request(Method::PUT, &path, Some(&reader.token), None)
        .await;
    let (status, code) = crate::helpers::error_code(res).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable")
    );
    assert_eq!(app.user(reader.id).await["following_count"], 2);
    assert_eq!(app.user(authors[2].id).await["follower_count"], 0);
    app.publish(&authors[2], "not followed").await;
    app.settle().await;
    assert!(app.home(&reader, 10).await.is_empty());
    // Room again after an unfollow.
    app.unfollow(&reader, &authors[0]).await;
    app.follow(&reader, &authors[2]).await;
    assert_eq!(app.user(reader.id).await["following_count"], 2);
}
