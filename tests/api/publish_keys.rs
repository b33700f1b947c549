//! Retry-safe publish (`Idempotency-Key`) and the app's own data on a post
//! (`meta`).

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use feed_service::engine::Stats;
use feed_service::store::redis::Fault;
use feed_service::types::{PageRequest, PostId, UserId};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{error_code, ids, spawn_app, TestApp, TestResponse, TestUser};

/// `POST /api/v1/posts` with an optional key.
async fn publish(app: &TestApp, who: &TestUser, key: Option<&str>, body: Value) -> TestResponse {
    let mut req = app
        .client
        .post(app.url("/api/v1/posts"))
        .bearer_auth(&who.token)
        .json(&body);
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    app.send(&Method::POST, "/api/v1/posts", req).await
}

fn replayed(res: &TestResponse) -> bool {
    res.headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

async fn own_posts(app: &TestApp, who: &TestUser) -> Vec<PostId> {
    ids(&app
        .scroll(&format!("/api/v1/users/{}/posts", who.id), &who.token, 50)
        .await)
}

#[tokio::test]
async fn a_retry_with_the_same_key_answers_the_first_post_and_publishes_nothing() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    app.follow(&bob, &alice).await;

    let first = publish(&app, &alice, Some("retry-1"), json!({"body": "once"})).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(!replayed(&first));
    let first: Value = first.json().await.unwrap();
    for _ in 0..3 {
        let again = publish(&app, &alice, Some("retry-1"), json!({"body": "once"})).await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert!(replayed(&again), "a retry's answer says so");
        assert_eq!(again.json::<Value>().await.unwrap(), first);
    }
    app.settle().await;
    assert_eq!(
        own_posts(&app, &alice).await,
        vec![PostId(first["id"].as_i64().unwrap())]
    );
    assert_eq!(
        app.home(&bob, 10).await,
        vec![PostId(first["id"].as_i64().unwrap())]
    );

    // The same key with another body or other meta is refused; another
    // user's key is its own.
    let other = publish(&app, &alice, Some("retry-1"), json!({"body": "twice"})).await;
    assert_eq!(
        error_code(other).await,
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable".to_string()
        )
    );
    let other = publish(
        &app,
        &alice,
        Some("retry-1"),
        json!({"body": "once", "meta": {"a": 1}}),
    )
    .await;
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let bobs = publish(&app, &bob, Some("retry-1"), json!({"body": "once"})).await;
    assert_eq!(bobs.status(), StatusCode::CREATED);
    assert!(!replayed(&bobs));
    // Without a key, every call publishes.
    for _ in 0..2 {
        let res = publish(&app, &alice, None, json!({"body": "once"})).await;
        assert_eq!(res.status(), StatusCode::CREATED);
    }
    assert_eq!(own_posts(&app, &alice).await.len(), 3);
}

#[tokio::test]
async fn concurrent_publishes_with_one_key_make_one_post() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let calls = (0..8).map(|_| publish(&app, &alice, Some("burst"), json!({"body": "hi"})));
    let answers = futures::future::join_all(calls).await;
    let mut ids = Vec::new();
    for res in answers {
        assert_eq!(res.status(), StatusCode::CREATED);
        ids.push(PostId(
            res.json::<Value>().await.unwrap()["id"].as_i64().unwrap(),
        ));
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "one post for one key: {ids:?}");
    assert_eq!(own_posts(&app, &alice).await, ids);
}

#[tokio::test]
async fn a_publish_deferred_by_redis_is_retried_safely() {
    // Redis refuses writes: the post is committed, its Redis update left
    // to its job, and the call answers 201. A client that timed out and
    // retries with its key gets the same post.
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let deferred = || Stats::get(&app.engine.stats().deferred_writes);
    let before = deferred();
    app.engine.redis().faults().arm(40, Fault::Refuse);
    let first = publish(&app, &alice, Some("slow"), json!({"body": "hi"})).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(
        deferred(),
        before + 1,
        "the publish's Redis update was deferred"
    );
    let first: Value = first.json().await.unwrap();
    let again = publish(&app, &alice, Some("slow"), json!({"body": "hi"})).await;
    app.engine.redis().faults().disarm();
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.json::<Value>().await.unwrap()["id"], first["id"]);
    app.settle().await;
    assert_eq!(
        own_posts(&app, &alice).await,
        vec![PostId(first["id"].as_i64().unwrap())]
    );
}

#[tokio::test]
async fn a_publish_after_redis_forgot_its_scripts_is_written_at_once() {
    // A restart, a flush or a failover leaves Redis without the scripts:
    // the publish's transaction fails on them, loads them and runs again,
    // so nothing is deferred to a job.
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let deferred = || Stats::get(&app.engine.stats().deferred_writes);
    let before = deferred();
    app.engine.redis().forget_scripts().await.unwrap();
    let res = publish(&app, &alice, None, json!({"body": "after a flush"})).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let id = PostId(res.json::<Value>().await.unwrap()["id"].as_i64().unwrap());
    assert_eq!(
        deferred(),
        before,
        "the publish's Redis update was deferred"
    );
    assert_eq!(own_posts(&app, &alice).await, vec![id]);
}

#[tokio::test]
async fn a_key_past_its_day_publishes_anew_and_bad_keys_change_nothing() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let first = publish(&app, &alice, Some("daily"), json!({"body": "hi"})).await;
    let first: Value = first.json().await.unwrap();
    let mut pg = AsyncPgConnection::establish(app.database_url())
        .await
        .unwrap();
    diesel::sql_query("UPDATE publish_keys SET created_at = now() - interval '25 hours'")
        .execute(&mut pg)
        .await
        .unwrap();
    let later = publish(&app, &alice, Some("daily"), json!({"body": "hi"})).await;
    assert_eq!(later.status(), StatusCode::CREATED);
    assert!(!replayed(&later));
    assert_ne!(later.json::<Value>().await.unwrap()["id"], first["id"]);

    for key in ["", "with space", &"k".repeat(256), "ключ"] {
        let res = publish(&app, &alice, Some(key), json!({"body": "bad key"})).await;
        assert_eq!(
            error_code(res).await,
            (StatusCode::BAD_REQUEST, "bad_request".to_string()),
            "key {key:?}"
        );
    }
    assert_eq!(own_posts(&app, &alice).await.len(), 2);
    // The old keys are forgotten in the background.
    let posts = app.engine.pg().posts();
    assert_eq!(posts.forget_old_publish_keys().await.unwrap(), 0);
    diesel::sql_query("UPDATE publish_keys SET created_at = now() - interval '25 hours'")
        .execute(&mut pg)
        .await
        .unwrap();
    assert_eq!(posts.forget_old_publish_keys().await.unwrap(), 1);
}

async fn home_metas(app: &TestApp, reader: &TestUser) -> Vec<Option<String>> {
    let (items, _) = app.page("/api/v1/feed", &reader.token, None, 10).await;
    items.into_iter().map(|p| p.meta).collect()
}

#[tokio::test]
async fn meta_comes_back_from_every_read_path() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    app.follow(&bob, &alice).await;
    app.home(&bob, 5).await;
    let meta = json!({"lang": "en", "tags": ["a", "ü"], "n": 1.5, "deep": {"x": null}});
    let res = publish(
        &app,
        &alice,
        None,
        json!({"body": "with meta", "meta": meta}),
    )
    .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let post: Value = res.json().await.unwrap();
    assert_eq!(post["meta"], meta);
    let plain = publish(&app, &alice, None, json!({"body": "none", "meta": null})).await;
    let plain: Value = plain.json().await.unwrap();
    assert!(plain.get("meta").is_none(), "no meta, no field: {plain}");
    app.settle().await;

    let id = post["id"].as_i64().unwrap();
    let fetched: Value = app
        .request(
            Method::GET,
            &format!("/api/v1/posts/{id}"),
            Some(&bob.token),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(fetched["meta"], meta);
    let want = vec![None, Some(meta.to_string())];
    assert_eq!(home_metas(&app, &bob).await, want, "warm page");
    app.engine.redis().delete_all().await.unwrap();
    assert_eq!(
        home_metas(&app, &bob).await,
        want,
        "page after Redis lost everything"
    );
    let page = app
        .engine
        .reads()
        .page_from_pg(
            app.engine.reads().home_scope(UserId(bob.id)),
            &PageRequest::first(10),
        )
        .await
        .unwrap();
    let from_pg: Vec<Option<String>> = page.items.into_iter().map(|p| p.meta).collect();
    assert_eq!(from_pg, want, "page from PostgreSQL");

    // Refused: not an object, or too large; nothing published.
    for bad in [json!([1]), json!("x"), json!({"k": "x".repeat(4089)})] {
        let res = publish(&app, &alice, None, json!({"body": "bad", "meta": bad})).await;
        assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    }
    assert_eq!(own_posts(&app, &alice).await.len(), 2);
}
