//! Follows in bulk: many in one call, and imports of any length as jobs.

use std::time::Duration;

use diesel_async::SimpleAsyncConnection;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{assert_unique, error_code, ids, newest_first, spawn_app, TestApp, TestUser};

async fn follow_many(app: &TestApp, who: &TestUser, targets: &[i64]) -> (StatusCode, Value) {
    let res = app
        .request(
            Method::PUT,
            &format!("/api/v1/users/{}/following", who.id),
            Some(&who.token),
            Some(json!({ "ids": targets })),
        )
        .await;
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

fn list(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn many_follows_in_one_call_show_every_post_once_and_skip_what_cannot_be() {
    let app = spawn_app().await;
    app.set_settings(json!({"follow_copy_limit": 3})).await;
    let reader = app.create_user("reader").await;
    let authors = app.users("author", 6).await;
    let blocker = app.create_user("blocker").await;
    let mut posts = Vec::new();
    for (i, a) in authors.iter().enumerate() {
        for k in 0..(2 + i) {
            posts.push(app.publish(a, &format!("{i}.{k}")).await);
        }
    }
    app.follow(&reader, &authors[0]).await;
    let res = app
        .request(
            Method::PUT,
            &format!("/api/v1/users/{}/blocks/{}", blocker.id, reader.id),
            Some(&blocker.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let mut targets: Vec<i64> = authors.iter().map(|a| a.id).collect();
    targets.extend([reader.id, blocker.id, 987_654, authors[1].id]);
    let (status, answer) = follow_many(&app, &reader, &targets).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(list(&answer["followed"]), targets[1..6].to_vec());
    assert_eq!(list(&answer["already"]), vec![authors[0].id]);
    assert_eq!(
        list(&answer["skipped"]),
        vec![reader.id, blocker.id, 987_654]
    );
    let u = app.user(reader.id).await;
    assert_eq!(u["following_count"], 6);
    for a in &authors[1..] {
        assert_eq!(app.user(a.id).await["follower_count"], 1);
    }
    // Every post of every author once, in order: the three newest of each
    // from the inbox, the rest through the fallback.
    let want = newest_first(&posts);
    for size in [1, 4, 50] {
        let got = app.home(&reader, size).await;
        assert_unique(&got);
        assert_eq!(got, want, "pages of {size}");
    }
    // The same call again changes nothing.
    let (status, again) = follow_many(&app, &reader, &targets[..6]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(list(&again["followed"]).is_empty());
    assert_eq!(list(&again["already"]).len(), 6);
    assert_eq!(app.user(reader.id).await["following_count"], 6);
}

#[tokio::test]
async fn a_follow_of_many_past_the_cap_or_the_size_changes_nothing() {
    let app = spawn_app().await;
    app.set_settings(json!({"max_follows": 3})).await;
    let reader = app.create_user("reader").await;
    let authors = app.users("author", 4).await;
    let ids: Vec<i64> = authors.iter().map(|a| a.id).collect();
    let (status, body) = follow_many(&app, &reader, &ids).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("unprocessable"))
    );
    assert_eq!(app.user(reader.id).await["following_count"], 0);
    assert_eq!(app.user(authors[0].id).await["follower_count"], 0);
    let too_many: Vec<i64> = (1..=1001).collect();
    for list in [&[][..], &too_many[..]] {
        let (status, _) = follow_many(&app, &reader, list).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{} ids",
            list.len()
        );
    }
    let res = app
        .request(
            Method::PUT,
            &format!("/api/v1/users/{}/following", reader.id),
            Some(&authors[0].token),
            Some(json!({"ids": [authors[1].id]})),
        )
        .await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::FORBIDDEN, "forbidden".into())
    );
}

#[tokio::test]
async fn an_import_of_thousands_runs_as_a_job_and_then_the_feed_scrolls_whole() {
    let app = spawn_app().await;
    let reader = app.create_user("reader").await;
    // 2,500 accounts (made in SQL: the import is what is tested), 60 of
    // them with posts; the list also names unknown ids and repeats.
    let mut conn = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(
        app.database_url(),
    )
    .await
    .unwrap();
    conn.batch_execute(
        "INSERT INTO users (username) SELECT 'bulk' || g FROM generate_series(1, 2500) g",
    )
    .await
    .unwrap();
    let first = reader.id + 1;
    let posters: Vec<TestUser> = (0..60)
        .map(|i| TestUser {
            id: first + i * 40,
            token: app.keys.mint(first + i * 40, false, 3600).unwrap(),
        })
        .collect();
    let mut posts = Vec::new();
    for (i, p) in posters.iter().enumerate() {
        posts.push(app.publish(p, &format!("post {i}")).await);
        posts.push(app.publish(p, &format!("post {i} again")).await);
    }
    let mut targets: Vec<i64> = (first..first + 2500).collect();
    targets.extend([9_999_999, first, first + 1]);
    let res = app
        .request(
            Method::POST,
            &format!("/api/v1/users/{}/imports", reader.id),
            Some(&reader.token),
            Some(json!({ "ids": targets })),
        )
        .await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let location = res.headers()["location"].to_str().unwrap().to_string();
    let job: Value = res.json().await.unwrap();
    assert_eq!(
        (job["kind"].as_str(), job["total"].as_i64()),
        (Some("import_follows"), Some(2503))
    );
    let mut last = Value::Null;
    for _ in 0..600 {
        let res = app
            .request(Method::GET, &location, Some(&reader.token), None)
            .await;
        last = res.json().await.unwrap();
        if last["state"] == "done" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last["state"], "done", "{last}");
    assert_eq!(
        (last["done"].as_i64(), last["skipped"].as_i64()),
        (Some(2503), Some(1))
    );
    assert_eq!(app.user(reader.id).await["following_count"], 2500);
    // A full scroll: every post of every followed account once, in order.
    let got = ids(&app.scroll("/api/v1/feed", &reader.token, 7).await);
    assert_unique(&got);
    assert_eq!(got, newest_first(&posts));
    // An import of more than a million ids is refused, and starts nothing.
    let huge = format!("{{\"ids\": [{}1]}}", "1,".repeat(1_000_000));
    let res = app
        .client
        .post(app.url(&format!("/api/v1/users/{}/imports", reader.id)))
        .bearer_auth(&reader.token)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(app.user(reader.id).await["following_count"], 2500);
}
