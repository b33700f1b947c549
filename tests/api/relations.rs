//! Mutes and blocks, through the API.

use feed_service::types::{PostId, UserId};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::{error_code, ids, spawn_app, TestApp, TestUser};

async fn put(app: &TestApp, who: &TestUser, what: &str, target: i64) -> StatusCode {
    app.request(
        Method::PUT,
        &format!("/api/v1/users/{}/{what}/{target}", who.id),
        Some(&who.token),
        None,
    )
    .await
    .status()
}

async fn delete(app: &TestApp, who: &TestUser, what: &str, target: i64) -> StatusCode {
    app.request(
        Method::DELETE,
        &format!("/api/v1/users/{}/{what}/{target}", who.id),
        Some(&who.token),
        None,
    )
    .await
    .status()
}

/// The ids of a list of users (mutes or blocks), paged `size` at a time.
async fn listed(app: &TestApp, who: &TestUser, what: &str, size: u32) -> Vec<i64> {
    let path = format!("/api/v1/users/{}/{what}", who.id);
    let mut out = Vec::new();
    let mut query = format!("limit={size}");
    loop {
        let res = app
            .request(
                Method::GET,
                &format!("{path}?{query}"),
                Some(&who.token),
                None,
            )
            .await;
        assert_eq!(res.status(), StatusCode::OK);
        let page: Value = res.json().await.unwrap();
        out.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|u| u["id"].as_i64().unwrap()),
        );
        match &page["next"] {
            Value::Null => return out,
            n => query = format!("limit={size}&max={}&offset={}", n["max"], n["offset"]),
        }
    }
}

#[tokio::test]
async fn a_muted_author_leaves_the_feed_when_the_call_returns_and_comes_back_on_unmute() {
    let app = spawn_app().await;
    let reader = app.create_user("reader").await;
    let loud = app.create_user("loud").await;
    let quiet = app.create_user("quiet").await;
    app.follow(&reader, &loud).await;
    app.follow(&reader, &quiet).await;
    let mut posts = Vec::new();
    for i in 0..6 {
        let author = if i % 2 == 0 { &loud } else { &quiet };
        posts.push(app.publish(author, &format!("p{i}")).await);
    }
    app.settle().await;
    let all: Vec<PostId> = posts.iter().rev().map(|p| p.id).collect();
    assert_eq!(app.home(&reader, 4).await, all);
    // Muted mid-scroll: the next page and every read after have none of its posts.
    let (first, next) = app.page("/api/v1/feed", &reader.token, None, 2).await;
    assert_eq!(
        put(&app, &reader, "mutes", loud.id).await,
        StatusCode::NO_CONTENT
    );
    let (rest, _) = app.page("/api/v1/feed", &reader.token, next, 10).await;
    assert!(
        rest.iter().all(|p| p.author_id != UserId(loud.id)),
        "{:?}",
        ids(&rest)
    );
    assert_eq!(ids(&first).len() + rest.len(), 4);
    let quiet_posts: Vec<PostId> = posts
        .iter()
        .rev()
        .filter(|p| p.author_id == UserId(quiet.id))
        .map(|p| p.id)
        .collect();
    assert_eq!(app.home(&reader, 1).await, quiet_posts);
    // The same from PostgreSQL: Redis empty.
    app.engine.redis().delete_all().await.unwrap();
    assert_eq!(app.home(&reader, 2).await, quiet_posts);
    // A post while muted is not shown either; the follow stays.
    let while_muted = app.publish(&loud, "still here").await;
    assert_eq!(app.home(&reader, 10).await, quiet_posts);
    assert_eq!(app.user(reader.id).await["following_count"], 2);
    // Muting twice is the same; the list shows it.
    assert_eq!(
        put(&app, &reader, "mutes", loud.id).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(listed(&app, &reader, "mutes", 1).await, vec![loud.id]);
    // Unmuted: everything is back, the post made while muted too.
    assert_eq!(
        delete(&app, &reader, "mutes", loud.id).await,
        StatusCode::NO_CONTENT
    );
    let mut back = vec![while_muted.id];
    back.extend(&all);
    assert_eq!(app.home(&reader, 3).await, back);
    assert!(listed(&app, &reader, "mutes", 5).await.is_empty());
    // Oneself, no one, another's list: refused.
    assert_eq!(
        put(&app, &reader, "mutes", reader.id).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        put(&app, &reader, "mutes", 9_999).await,
        StatusCode::NOT_FOUND
    );
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/users/{}/mutes", reader.id),
            Some(&loud.token),
            None,
        )
        .await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::FORBIDDEN, "forbidden".into())
    );
}

#[tokio::test]
async fn a_block_removes_both_follows_refuses_new_ones_and_hides_everything_both_ways() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let troll = app.create_user("troll").await;
    let other = app.create_user("other").await;
    app.follow(&alice, &troll).await;
    app.follow(&troll, &alice).await;
    app.follow(&alice, &other).await;
    let by_troll = app.publish(&troll, "hi").await;
    let by_alice = app.publish(&alice, "hello").await;
    let by_other = app.publish(&other, "hey").await;
    app.settle().await;
    assert_eq!(
        app.home(&alice, 10).await,
        vec![by_other.id, by_alice.id, by_troll.id]
    );
    assert_eq!(
        put(&app, &alice, "blocks", troll.id).await,
        StatusCode::NO_CONTENT
    );
    // Both follows went, with their counts.
    for (who, following, followers) in [(&alice, 1, 0), (&troll, 0, 0)] {
        let u = app.user(who.id).await;
        assert_eq!(
            (u["following_count"].as_i64(), u["follower_count"].as_i64()),
            (Some(following), Some(followers)),
            "user {}",
            who.id
        );
    }
    // Neither home shows the other's posts.
    assert_eq!(app.home(&alice, 10).await, vec![by_other.id, by_alice.id]);
    assert_eq!(app.home(&troll, 10).await, vec![by_troll.id]);
    // A follow either way is refused, and changes nothing.
    for (who, whom) in [(&alice, &troll), (&troll, &alice)] {
        let res = app
            .request(
                Method::PUT,
                &format!("/api/v1/users/{}/following/{}", who.id, whom.id),
                Some(&who.token),
                None,
            )
            .await;
        assert_eq!(
            error_code(res).await,
            (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable".into())
        );
    }
    assert_eq!(app.user(alice.id).await["following_count"], 1);
    // Nothing of the other: its page is empty, its posts not found.
    for (who, whom, post) in [(&alice, &troll, by_troll.id), (&troll, &alice, by_alice.id)] {
        let (items, next) = app
            .page(
                &format!("/api/v1/users/{}/posts", whom.id),
                &who.token,
                None,
                10,
            )
            .await;
        assert!(items.is_empty() && next.is_none());
        let res = app
            .request(
                Method::GET,
                &format!("/api/v1/posts/{post}"),
                Some(&who.token),
                None,
            )
            .await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
    }
    // Others still see both.
    let (items, _) = app
        .page(
            &format!("/api/v1/users/{}/posts", troll.id),
            &other.token,
            None,
            10,
        )
        .await;
    assert_eq!(ids(&items), vec![by_troll.id]);
    assert_eq!(listed(&app, &alice, "blocks", 10).await, vec![troll.id]);
    assert!(listed(&app, &troll, "blocks", 10).await.is_empty());
    // Unblocked: follows are allowed again (none came back by itself).
    assert_eq!(
        delete(&app, &alice, "blocks", troll.id).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(app.home(&alice, 10).await, vec![by_other.id, by_alice.id]);
    app.follow(&troll, &alice).await;
    assert_eq!(app.home(&troll, 10).await, vec![by_alice.id, by_troll.id]);
}

#[tokio::test]
async fn lists_page_newest_first_with_the_feed_cursor() {
    let app = spawn_app().await;
    let reader = app.create_user("reader").await;
    let others = app.users("other", 7).await;
    for o in &others {
        assert_eq!(
            put(&app, &reader, "mutes", o.id).await,
            StatusCode::NO_CONTENT
        );
    }
    // Three of them made in one millisecond: the ids' text breaks ties.
    let mut conn = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(
        app.database_url(),
    )
    .await
    .unwrap();
    diesel_async::SimpleAsyncConnection::batch_execute(
        &mut conn,
        &format!(
            "UPDATE mutes SET created_at_ms = 1764500000000 WHERE muted_id IN ({}, {}, {})",
            others[1].id, others[2].id, others[5].id
        ),
    )
    .await
    .unwrap();
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        muted_id: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        created_at_ms: i64,
    }
    let mut rows: Vec<Row> = diesel_async::RunQueryDsl::load(
        diesel::sql_query("SELECT muted_id, created_at_ms FROM mutes"),
        &mut conn,
    )
    .await
    .unwrap();
    rows.sort_by(|a, b| {
        b.created_at_ms
            .cmp(&a.created_at_ms)
            .then_with(|| b.muted_id.to_string().cmp(&a.muted_id.to_string()))
    });
    let want: Vec<i64> = rows.iter().map(|r| r.muted_id).collect();
    for size in [1, 2, 3, 100] {
        assert_eq!(
            listed(&app, &reader, "mutes", size).await,
            want,
            "size {size}"
        );
    }
}

#[tokio::test]
async fn follows_mutes_and_blocks_of_a_deleted_account_answer_404_and_leave_no_count() {
    let app = spawn_app().await;
    let leaving = app.create_user("leaving").await;
    let fans = app.users("fan", 40).await;
    for f in &fans[..10] {
        app.follow(f, &leaving).await;
    }
    // Follows racing with the deletion: each lands before it (and is
    // undone by the purge) or after it (404); none is left behind.
    let (app, leaving) = (&app, &leaving);
    let racing = fans.iter().map(|f| async move {
        let path = format!("/api/v1/users/{}/following/{}", f.id, leaving.id);
        app.request(Method::PUT, &path, Some(&f.token), None).await
    });
    let own = format!("/api/v1/users/{}", leaving.id);
    let deletion = app.request(Method::DELETE, &own, Some(&leaving.token), None);
    let (answers, deleted) = tokio::join!(futures::future::join_all(racing), deletion);
    assert_eq!(deleted.status(), StatusCode::ACCEPTED);
    for res in answers {
        let status = res.status();
        assert!(
            status == StatusCode::NO_CONTENT || status == StatusCode::NOT_FOUND,
            "a follow racing a deletion answered {status}"
        );
    }
    // After it, every relation to it is 404, never a 500.
    for what in ["following", "mutes", "blocks"] {
        assert_eq!(
            put(app, &fans[0], what, leaving.id).await,
            StatusCode::NOT_FOUND,
            "{what}"
        );
    }
    // Once its purge is done, nobody follows it, and the counts say so.
    let location = format!(
        "/api/v1/jobs/{}",
        deleted.json::<Value>().await.unwrap()["id"]
    );
    app.job_done(&app.admin, &location).await;
    for f in &fans {
        assert_eq!(app.user(f.id).await["following_count"], 0, "fan {}", f.id);
    }
}
