//! Suspended and deleted accounts, through the API.

use feed_service::types::UserId;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{error_code, ids, spawn_app, TestApp, TestUser};

async fn admin_post(app: &TestApp, path: &str) -> (StatusCode, Value) {
    let res = app
        .request(Method::POST, path, Some(&app.admin), None)
        .await;
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Publishes as `who` and answers the status.
async fn try_publish(app: &TestApp, who: &TestUser) -> StatusCode {
    app.request(
        Method::POST,
        "/api/v1/posts",
        Some(&who.token),
        Some(json!({"body": "anything"})),
    )
    .await
    .status()
}

#[tokio::test]
async fn a_suspended_account_s_posts_leave_every_feed_at_once_and_come_back() {
    let app = spawn_app().await;
    app.set_settings(json!({"big_v_threshold": 3, "big_v_demote_threshold": 2}))
        .await;
    let spammer = app.create_user("spammer").await;
    let star = app.create_user("star").await;
    let readers = app.users("reader", 3).await;
    for r in &readers {
        app.follow(r, &spammer).await;
        app.follow(r, &star).await;
    }
    // The star is a big-V (pulled); the spammer's posts are pushed.
    assert_eq!(app.user(star.id).await["big_v"], true);
    let spam = app.publish(&spammer, "buy now").await;
    let shine = app.publish(&star, "hello").await;
    app.settle().await;
    let r = &readers[0];
    assert_eq!(app.home(r, 5).await, vec![shine.id, spam.id]);
    // Suspended mid-scroll: gone from homes (pushed or pulled), from its
    // page and its posts, at once and with no fan-out.
    let (first, next) = app.page("/api/v1/feed", &r.token, None, 1).await;
    assert_eq!(ids(&first), vec![shine.id]);
    for who in [&spammer, &star] {
        let (status, user) =
            admin_post(&app, &format!("/api/v1/admin/users/{}/suspend", who.id)).await;
        assert_eq!(
            (status, user["status"].as_str()),
            (StatusCode::OK, Some("suspended"))
        );
    }
    let (rest, _) = app.page("/api/v1/feed", &r.token, next, 5).await;
    assert!(rest.is_empty());
    for reader in &readers {
        assert!(app.home(reader, 5).await.is_empty());
    }
    let (items, _) = app
        .page(
            &format!("/api/v1/users/{}/posts", spammer.id),
            &r.token,
            None,
            5,
        )
        .await;
    assert!(items.is_empty());
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/posts/{}", spam.id),
            Some(&r.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    // The same when Redis has lost everything (from PostgreSQL, and
    // rebuilt).
    app.engine.redis().delete_all().await.unwrap();
    assert!(app.home(r, 5).await.is_empty());
    assert!(app.home(r, 5).await.is_empty());
    // A suspended account may not post, follow, mute or block; it is
    // not followed either.
    assert_eq!(try_publish(&app, &spammer).await, StatusCode::FORBIDDEN);
    for what in ["following", "mutes", "blocks"] {
        let res = app
            .request(
                Method::PUT,
                &format!("/api/v1/users/{}/{what}/{}", spammer.id, star.id),
                Some(&spammer.token),
                None,
            )
            .await;
        assert_eq!(res.status(), StatusCode::FORBIDDEN, "{what}");
    }
    let newcomer = app.create_user("newcomer").await;
    let res = app
        .request(
            Method::PUT,
            &format!("/api/v1/users/{}/following/{}", newcomer.id, spammer.id),
            Some(&newcomer.token),
            None,
        )
        .await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable".into())
    );
    // Lifted: everything is back, follows and counts untouched.
    for who in [&spammer, &star] {
        let (status, user) =
            admin_post(&app, &format!("/api/v1/admin/users/{}/unsuspend", who.id)).await;
        assert_eq!(
            (status, user["status"].as_str()),
            (StatusCode::OK, Some("active"))
        );
    }
    assert_eq!(app.home(r, 1).await, vec![shine.id, spam.id]);
    assert_eq!(app.user(spammer.id).await["follower_count"], 3);
    // Only an admin suspends; an unknown account is not found.
    let res = app
        .request(
            Method::POST,
            &format!("/api/v1/admin/users/{}/suspend", star.id),
            Some(&r.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        admin_post(&app, "/api/v1/admin/users/999999/suspend")
            .await
            .0,
        StatusCode::NOT_FOUND
    );
}

/// Waits for a job to end; its last state.
#[tokio::test]
async fn a_deleted_account_leaves_no_post_no_follow_and_no_key_behind() {
    let app = spawn_app().await;
    let leaving = app.create_user("leaving").await;
    let friends = app.users("friend", 120).await;
    let other = app.create_user("other").await;
    // 120 follow it (more than a batch), it follows 60, 70 posts.
    for (i, f) in friends.iter().enumerate() {
        app.follow(f, &leaving).await;
        if i < 60 {
            app.follow(&leaving, f).await;
        }
    }
    app.follow(&friends[0], &other).await;
    let mut posts = Vec::new();
    for i in 0..70 {
        posts.push(app.publish(&leaving, &format!("p{i}")).await.id);
    }
    let kept = app.publish(&other, "stays").await;
    app.settle().await;
    let reader = &friends[0];
    let (first, next) = app.page("/api/v1/feed", &reader.token, None, 3).await;
    assert!(first.iter().any(|p| p.author_id == UserId(leaving.id)));
    // Deleted mid-scroll, by itself: 202 with its job.
    let res = app
        .request(
            Method::DELETE,
            &format!("/api/v1/users/{}", leaving.id),
            Some(&leaving.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let location = res.headers()["location"].to_str().unwrap().to_string();
    let job: Value = res.json().await.unwrap();
    assert_eq!(location, format!("/api/v1/jobs/{}", job["id"]));
    assert_eq!(job["kind"], "delete_account");
    assert_eq!(job["total"], 120 + 60 + 70);
    // Feeds never show its posts again, from the call on.
    let (rest, _) = app.page("/api/v1/feed", &reader.token, next, 100).await;
    assert!(rest.iter().all(|p| p.author_id != UserId(leaving.id)));
    // Another user may not watch its job; it and an admin may.
    let res = app
        .request(Method::GET, &location, Some(&other.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let done = app.job_done(&leaving.token, &location).await;
    assert_eq!(done["done"], done["total"]);
    assert!(done["finished_at_ms"].is_i64());
    let again = app.job_done(&app.admin, &location).await;
    assert_eq!(again["id"], job["id"]);
    // A repeated call answers the same job.
    let res = app
        .request(
            Method::DELETE,
            &format!("/api/v1/users/{}", leaving.id),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let repeat: Value = res.json().await.unwrap();
    assert_eq!(repeat["id"], job["id"]);
    // The account, its follows either way, its posts: gone.
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/users/{}", leaving.id),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    for (i, f) in friends.iter().enumerate() {
        let u = app.user(f.id).await;
        let following = if i == 0 { 1 } else { 0 };
        assert_eq!(
            (u["following_count"].as_i64(), u["follower_count"].as_i64()),
            (Some(following), Some(0)),
            "friend {i}"
        );
    }
    assert_eq!(app.home(reader, 50).await, vec![kept.id]);
    for id in [posts[0], posts[69]] {
        let res = app
            .request(
                Method::GET,
                &format!("/api/v1/posts/{id}"),
                Some(&app.admin),
                None,
            )
            .await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
    }
    // Its token reads nothing and writes nothing.
    assert_eq!(try_publish(&app, &leaving).await, StatusCode::NOT_FOUND);
    let res = app
        .request(Method::GET, "/api/v1/feed", Some(&leaving.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    // Redis holds no key of it, and no inbox entry of its posts.
    let keys = app.engine.redis().keys().clone();
    let mut conn = app.engine.redis().connection().await.unwrap();
    let mut owned = vec![
        keys.inbox(UserId(leaving.id)),
        keys.outbox(UserId(leaving.id)),
        keys.following(UserId(leaving.id)),
        keys.followees(UserId(leaving.id)),
        keys.active_fans(UserId(leaving.id)),
        keys.active_mark(UserId(leaving.id)),
    ];
    owned.extend(posts.iter().map(|p| keys.post(*p)));
    for key in owned {
        let n: i64 = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(n, 0, "{key}");
    }
    for copy in keys.mark_copies() {
        let hidden: Vec<String> = redis::cmd("SMEMBERS")
            .arg(keys.hidden(copy))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!hidden.contains(&leaving.id.to_string()), "{hidden:?}");
    }
    for f in &friends {
        if let Some((entries, _)) =
            crate::helpers::feed_list(&mut conn, &keys.inbox(UserId(f.id))).await
        {
            assert!(
                entries.iter().all(|e| !posts.contains(&e.id)),
                "friend {}",
                f.id
            );
        }
    }
    // And PostgreSQL no row.
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut pg = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(
        app.database_url(),
    )
    .await
    .unwrap();
    let left: N = diesel_async::RunQueryDsl::get_result(
        diesel::sql_query(format!(
            "SELECT (SELECT count(*) FROM posts WHERE author_id = {0}) \
               + (SELECT count(*) FROM follows WHERE follower_id = {0} OR followee_id = {0}) \
               + (SELECT count(*) FROM users WHERE id = {0}) \
               + (SELECT count(*) FROM fanout_jobs WHERE author_id = {0}) AS n",
            leaving.id
        )),
        &mut pg,
    )
    .await
    .unwrap();
    assert_eq!(left.n, 0);
}

#[tokio::test]
async fn only_the_user_itself_or_an_admin_deletes_an_account() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    let res = app
        .request(
            Method::DELETE,
            &format!("/api/v1/users/{}", alice.id),
            Some(&bob.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let res = app
        .request(
            Method::DELETE,
            "/api/v1/users/987654",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert_eq!(app.user(alice.id).await["status"], "active");
    let res = app
        .request(Method::GET, "/api/v1/jobs/987654", Some(&app.admin), None)
        .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_deleted_account_s_token_finds_nothing_but_its_own_deletion() {
    let app = spawn_app().await;
    let gone = app.create_user("gone").await;
    let other = app.create_user("other").await;
    app.follow(&gone, &other).await;
    let theirs = app.publish(&other, "stays").await;
    // A publish with an idempotency key, whose replay must not answer.
    let publish = |key: &'static str| {
        app.client
            .post(app.url("/api/v1/posts"))
            .bearer_auth(&gone.token)
            .header("idempotency-key", key)
            .json(&json!({ "body": "mine" }))
            .send()
    };
    assert_eq!(publish("k-1").await.unwrap().status(), StatusCode::CREATED);
    let res = app
        .request(
            Method::DELETE,
            &format!("/api/v1/users/{}", gone.id),
            Some(&gone.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let location = res.headers()["location"].to_str().unwrap().to_string();
    // From the call on, every route of the API answers 404 to its token:
    // other users, their posts and pages, the Mastodon routes, a replay.
    let (o, p) = (other.id, theirs.id);
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/accounts/{o}/statuses"),
            Some(&other.token),
            None,
        )
        .await;
    let statuses: Value = res.json().await.unwrap();
    let status = statuses[0]["id"].as_str().unwrap().to_string();
    let routes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/api/v1/users/{o}"), None),
        (Method::GET, format!("/api/v1/users/{o}/posts"), None),
        (Method::GET, format!("/api/v1/posts/{p}"), None),
        (Method::GET, "/api/v1/feed".into(), None),
        (
            Method::GET,
            format!("/api/v1/users/{}/mutes", gone.id),
            None,
        ),
        (
            Method::PUT,
            format!("/api/v1/users/{}/following/{o}", gone.id),
            None,
        ),
        (
            Method::PUT,
            format!("/api/v1/users/{}/mutes/{o}", gone.id),
            None,
        ),
        (
            Method::PUT,
            format!("/api/v1/users/{}/blocks/{o}", gone.id),
            None,
        ),
        (
            Method::POST,
            "/api/v1/posts".into(),
            Some(json!({ "body": "x" })),
        ),
        (
            Method::GET,
            "/api/v1/accounts/verify_credentials".into(),
            None,
        ),
        (Method::GET, format!("/api/v1/accounts/{o}"), None),
        (Method::GET, format!("/api/v1/accounts/{o}/statuses"), None),
        (Method::GET, format!("/api/v1/accounts/{o}/followers"), None),
        (
            Method::GET,
            format!("/api/v1/accounts/relationships?id[]={o}"),
            None,
        ),
        (
            Method::GET,
            "/api/v1/accounts/lookup?acct=other".into(),
            None,
        ),
        (Method::GET, format!("/api/v1/statuses/{status}"), None),
        (Method::GET, "/api/v1/timelines/home".into(), None),
        (
            Method::POST,
            "/api/v1/statuses".into(),
            Some(json!({ "status": "x" })),
        ),
    ];
    for (method, path, body) in routes {
        let res = app
            .request(method.clone(), &path, Some(&gone.token), body)
            .await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{method} {path}");
    }
    assert_eq!(
        publish("k-1").await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    // Its own deletion stays in reach: the job, and the call repeated.
    let res = app
        .request(Method::GET, &location, Some(&gone.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = app
        .request(
            Method::DELETE,
            &format!("/api/v1/users/{}", gone.id),
            Some(&gone.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    // The other user still reads what it wrote.
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/posts/{p}"),
            Some(&other.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
}
