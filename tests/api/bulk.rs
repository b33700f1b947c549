//! Follows in bulk: many in one call, and imports of any length as jobs.

use feed_service::types::UserId;
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
            token: app.keys.mint(UserId(first + i * 40), false, 3600).unwrap(),
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

async fn import(app: &TestApp, who: &TestUser, ids: &[i64]) -> (StatusCode, Value) {
    let res = app
        .request(
            Method::POST,
            &format!("/api/v1/users/{}/imports", who.id),
            Some(&who.token),
            Some(json!({ "ids": ids })),
        )
        .await;
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn pg(app: &TestApp) -> diesel_async::AsyncPgConnection {
    <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(
        app.database_url(),
    )
    .await
    .unwrap()
}

/// A connection in a transaction that holds `user`'s row locked (until
/// it commits): a job that follows `user` waits on it.
async fn holding(app: &TestApp, user: i64) -> diesel_async::AsyncPgConnection {
    let mut conn = pg(app).await;
    conn.batch_execute(&format!(
        "BEGIN; SELECT id FROM users WHERE id = {user} FOR UPDATE"
    ))
    .await
    .unwrap();
    conn
}

#[derive(diesel::QueryableByName)]
struct N {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

async fn count(conn: &mut diesel_async::AsyncPgConnection, sql: &str) -> i64 {
    diesel_async::RunQueryDsl::get_result::<N>(diesel::sql_query(sql), conn)
        .await
        .unwrap()
        .n
}

#[tokio::test]
async fn a_user_holds_at_most_two_open_imports_and_their_lists_leave_when_done() {
    let app = spawn_app().await;
    // The import's first target is held locked by this test, so the
    // first import waits on it in its worker and the second in the queue.
    let held = app.create_user("held").await;
    let reader = app.create_user("reader").await;
    let mut conn = holding(&app, held.id).await;
    let (s1, first) = import(&app, &reader, &[held.id]).await;
    let (s2, _) = import(&app, &reader, &[held.id]).await;
    assert_eq!((s1, s2), (StatusCode::ACCEPTED, StatusCode::ACCEPTED));
    // A third is refused before its body is read, and queues nothing.
    let (s3, body) = import(&app, &reader, &[held.id]).await;
    assert_eq!(s3, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let mut other = pg(&app).await;
    let tasks = format!(
        "SELECT count(*) AS n FROM tasks WHERE user_id = {} AND kind = 'import_follows'",
        reader.id
    );
    assert_eq!(count(&mut other, &tasks).await, 2);
    conn.batch_execute("COMMIT").await.unwrap();
    let location = format!("/api/v1/jobs/{}", first["id"]);
    app.job_done(&reader.token, &location).await;
    app.settle().await;
    // Once they end, their lists are gone; a new import is taken.
    let lists = format!(
        "SELECT (SELECT count(*) FROM import_chunks c JOIN tasks t ON t.id = c.task_id \
           WHERE t.user_id = {0}) \
         + (SELECT count(*) FROM tasks WHERE user_id = {0} AND targets IS NOT NULL) AS n",
        reader.id
    );
    assert_eq!(count(&mut other, &lists).await, 0);
    let (s4, _) = import(&app, &reader, &[held.id]).await;
    assert_eq!(s4, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn fifty_imports_do_not_hold_back_a_delivery() {
    let app = spawn_app().await;
    let author = app.create_user("author").await;
    let fans = app.users("fan", 200).await;
    for f in &fans {
        app.follow(f, &author).await;
        app.home(f, 1).await;
    }
    let importers = app.users("importer", 25).await;
    let mut conn = pg(&app).await;
    conn.batch_execute(
        "INSERT INTO users (username) SELECT 'many' || g FROM generate_series(1, 5000) g",
    )
    .await
    .unwrap();
    let first = importers.last().unwrap().id + 1;
    let targets: Vec<i64> = (first..first + 5000).collect();
    // One user sends 50 imports: two are taken, the rest refused.
    let mut answers = Vec::new();
    for _ in 0..50 {
        answers.push(import(&app, &importers[0], &targets).await.0);
    }
    let taken = answers
        .iter()
        .filter(|s| **s == StatusCode::ACCEPTED)
        .count();
    assert_eq!(taken, 2, "{answers:?}");
    assert!(answers
        .iter()
        .all(|s| *s == StatusCode::ACCEPTED || *s == StatusCode::TOO_MANY_REQUESTS));
    // And 24 more users two each: 50 imports queued or running.
    for who in &importers[1..] {
        for half in targets.chunks(2500) {
            let (status, body) = import(&app, who, half).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        }
    }
    // Published behind 50 queued imports: the delivery is taken first.
    // (Its jobs and inboxes are read: a home shows the post at once
    // anyway. An inbox nobody holds in Redis is rebuilt when read.)
    let sent = std::time::Instant::now();
    let post = app.publish(&author, "behind the imports").await;
    let deliveries = "SELECT count(*) AS n FROM fanout_jobs WHERE kind = 'deliver'";
    let mut waiting = 1;
    for _ in 0..600 {
        waiting = count(&mut conn, deliveries).await;
        if waiting == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(waiting, 0, "the delivery is still queued");
    let took = sent.elapsed();
    assert!(took < Duration::from_secs(2), "the delivery took {took:?}");
    let keys = app.engine.redis().keys().clone();
    let mut redis = app.engine.redis().connection().await.unwrap();
    let mut held = 0;
    for f in &fans {
        if let Some((entries, _)) =
            crate::helpers::feed_list(&mut redis, &keys.inbox(UserId(f.id))).await
        {
            held += 1;
            assert_eq!(entries.first().map(|e| e.id), Some(post.id), "fan {}", f.id);
        }
    }
    assert!(held > 100, "only {held} inboxes are in Redis");
    // ...while most of the imports had not yet run.
    let open = count(
        &mut conn,
        "SELECT count(*) AS n FROM tasks WHERE kind = 'import_follows' \
         AND finished_at IS NULL",
    )
    .await;
    assert!(open >= 25, "only {open} imports were still open");
}

#[tokio::test]
async fn an_account_deleted_mid_import_leaves_no_list_behind() {
    let app = spawn_app().await;
    let held = app.create_user("held").await;
    let reader = app.create_user("reader").await;
    let mut conn = holding(&app, held.id).await;
    let mut list: Vec<i64> = vec![held.id];
    list.extend(10_000_000..10_005_000);
    let (status, task) = import(&app, &reader, &list).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{task}");
    let location = app.delete_account(&reader).await;
    conn.batch_execute("COMMIT").await.unwrap();
    app.job_done(&app.admin, &location).await;
    let left = format!(
        "SELECT (SELECT count(*) FROM import_chunks WHERE task_id = {0}) \
         + (SELECT count(*) FROM tasks WHERE id = {0} \
            AND (finished_at IS NULL OR targets IS NOT NULL)) AS n",
        task["id"]
    );
    assert_eq!(count(&mut conn, &left).await, 0);
}
