use feed_service::types::UserId;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use feed_service::domain::PostBody;
use feed_service::startup::Application;
use feed_service::types::PageRequest;

use crate::helpers::{error_code, ids, spawn_app, spawn_app_with, test_settings};

#[tokio::test]
async fn a_published_post_can_be_read_and_deleted_once() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let before = feed_service::engine::now_ms();
    let post = app.publish(&alice, "héllo wörld").await;
    assert_eq!(post.author_id, UserId(alice.id));
    assert_eq!(post.author_username, "alice");
    assert_eq!(post.body, "héllo wörld");
    assert!(post.created_at_ms >= before);
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/posts/{}", post.id),
            Some(&alice.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let fetched: Value = res.json().await.unwrap();
    assert_eq!(fetched["body"], "héllo wörld");
    assert_eq!(fetched["author_username"], "alice");

    assert_eq!(
        app.delete_post(&alice, post.id.0).await.status(),
        StatusCode::NO_CONTENT
    );
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/posts/{}", post.id),
            Some(&alice.token),
            None,
        )
        .await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );
    let res = app.delete_post(&alice, post.id.0).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );
}

#[tokio::test]
async fn only_the_author_or_an_admin_deletes() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    let post = app.publish(&alice, "one").await;
    let res = app.delete_post(&bob, post.id.0).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::FORBIDDEN, "forbidden".into())
    );
    let res = app
        .request(
            Method::DELETE,
            &format!("/api/v1/posts/{}", post.id),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn an_author_page_lists_its_own_live_posts() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    let mut mine = Vec::new();
    for i in 0..9 {
        mine.push(
            app.publish_at(
                &alice,
                &format!("p{i}"),
                crate::helpers::T0 + 1_000 + (i / 3),
            )
            .await,
        );
    }
    app.publish(&bob, "not alice").await;
    assert_eq!(
        app.delete_post(&alice, mine[4].id.0).await.status(),
        StatusCode::NO_CONTENT
    );
    mine.remove(4);
    let expected = crate::helpers::newest_first(&mine);
    for size in 1..=4 {
        let seen = app
            .scroll(
                &format!("/api/v1/users/{}/posts", alice.id),
                &bob.token,
                size,
            )
            .await;
        assert_eq!(ids(&seen), expected, "page size {size}");
    }
}

#[tokio::test]
async fn a_token_for_a_user_that_does_not_exist_cannot_publish() {
    let app = spawn_app().await;
    let res = app
        .request(
            Method::POST,
            "/api/v1/posts",
            Some(&app.admin),
            Some(serde_json::json!({"body": "x"})),
        )
        .await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );
}

#[tokio::test]
async fn only_post_times_a_feed_entry_holds_are_recorded() {
    use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    // The engine refuses a time before 2020 (a clock gone wrong)...
    let body = feed_service::domain::PostBody::parse("old").unwrap();
    assert!(app
        .engine
        .posts()
        .publish_at(UserId(alice.id), &body, 5_000)
        .await
        .is_err());
    // ...and so do the records, whoever writes them.
    let mut conn = AsyncPgConnection::establish(app.database_url())
        .await
        .unwrap();
    let refused = diesel::sql_query(
        "INSERT INTO posts (author_id, body, created_at_ms) VALUES ($1, 'old', 5000)",
    )
    .bind::<diesel::sql_types::BigInt, _>(alice.id)
    .execute(&mut conn)
    .await
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("posts_created_at_in_feed_range"),
        "{refused}"
    );
    assert!(app.home(&alice, 5).await.is_empty());
    let own = app
        .scroll(
            &format!("/api/v1/users/{}/posts", alice.id),
            &alice.token,
            5,
        )
        .await;
    assert!(own.is_empty(), "nothing was recorded");
}

#[tokio::test]
async fn a_publish_makes_one_query_and_writes_redis_in_one_round_trip_on_one_node() {
    let settings = test_settings();
    let app = spawn_app_with(settings.clone()).await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    app.follow(&bob, &alice).await;
    // Counted on an instance of its own whose background work never runs:
    // its counters count the publishes' work alone.
    let quiet = Application::build(&settings).await.unwrap();
    let engine = quiet.engine().clone();
    let body = PostBody::parse("p").unwrap();
    // The first publish loads the scripts and opens the connections.
    engine
        .posts()
        .publish(UserId(alice.id), &body)
        .await
        .unwrap();
    // The cache, the delivery in flight, the outbox entry and the hint go
    // as one transaction on a node; on a cluster the cache and the delivery
    // in flight at once, then the outbox entry, then the hint, then the
    // wait for the replicas.
    let trips = if engine.redis().is_cluster() { 4 } else { 1 };
    for _ in 0..3 {
        let (sql, before) = (engine.pg().queries(), engine.redis().round_trips());
        let post = engine
            .posts()
            .publish(UserId(alice.id), &body)
            .await
            .unwrap();
        assert_eq!(engine.pg().queries() - sql, 1, "SQL of a publish");
        assert_eq!(
            engine.redis().round_trips() - before,
            trips,
            "Redis round trips of a publish"
        );
        // And it is where a reader looks at once.
        let page = engine
            .reads()
            .home_page(UserId(bob.id), PageRequest::first(1))
            .await
            .unwrap();
        assert_eq!(page.items[0].id, post.id);
    }
}
