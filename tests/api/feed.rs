//! The invariants of docs/design.md, through the API.

use std::collections::HashSet;
use std::time::Duration;

use diesel_async::{AsyncConnection, RunQueryDsl};
use feed_service::engine::{Page, Stats};
use feed_service::types::Post;
use feed_service::types::{Cursor, PageRequest, PostId, UserId};
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{assert_unique, ids, newest_first, spawn_app, TestApp, TestUser};

const BASE: i64 = 1_700_000_000_000;

/// `n` posts spread round-robin over `authors`, ten per millisecond.
async fn tied_posts(app: &TestApp, authors: &[TestUser], n: usize, base: i64) -> Vec<Post> {
    let mut posts = Vec::with_capacity(n);
    for i in 0..n {
        let author = &authors[i % authors.len()];
        posts.push(
            app.publish_at(author, &format!("post {i}"), base + (i / 10) as i64)
                .await,
        );
    }
    posts
}

async fn follow_all(app: &TestApp, reader: &TestUser, authors: &[TestUser]) {
    for a in authors {
        app.follow(reader, a).await;
    }
}

#[tokio::test]
async fn exactly_once_with_ties_for_every_page_size() {
    let app = spawn_app().await;
    let authors = app.users("author", 4).await;
    let stranger = app.create_user("stranger").await;
    let pushed = app.create_user("pushed").await;
    let rebuilt = app.create_user("rebuilt").await;
    follow_all(&app, &pushed, &authors).await;
    follow_all(&app, &rebuilt, &authors).await;
    // `pushed` has an inbox before the posts: fan-out fills it.
    assert!(app.home(&pushed, 5).await.is_empty());
    let posts = tied_posts(&app, &authors, 120, BASE).await;
    tied_posts(&app, std::slice::from_ref(&stranger), 15, BASE).await;
    app.settle().await;
    let expected = newest_first(&posts);
    for size in 1..=7 {
        assert_eq!(
            app.home(&pushed, size).await,
            expected,
            "pushed, page size {size}"
        );
        assert_eq!(
            app.home(&rebuilt, size).await,
            expected,
            "rebuilt, page size {size}"
        );
    }
}

#[tokio::test]
async fn a_publish_is_in_every_follower_feed_when_it_returns() {
    let app = spawn_app().await;
    let author = app.create_user("author").await;
    let readers = app.users("reader", 20).await;
    for r in &readers {
        app.follow(r, &author).await;
        app.home(r, 5).await;
    }
    // No wait for the fan-out: readers pull the outbox while it is pending.
    let post = app.publish(&author, "now").await;
    for r in &readers {
        assert_eq!(app.home(r, 5).await, vec![post.id]);
    }
}

#[tokio::test]
async fn posts_published_between_pages_are_neither_repeated_nor_skipped() {
    let app = spawn_app().await;
    let authors = app.users("author", 3).await;
    let reader = app.create_user("reader").await;
    follow_all(&app, &reader, &authors).await;
    let before = tied_posts(&app, &authors, 45, BASE).await;
    app.settle().await;
    let mut published = Vec::new();
    let seen = app
        .scroll_with("/api/v1/feed", &reader.token, &[3, 1, 4], async |turn| {
            published.push(app.publish(&authors[turn % 3], "fresh").await);
        })
        .await;
    assert_eq!(ids(&seen), newest_first(&before));
    app.settle().await;
    let all: Vec<Post> = before.iter().chain(&published).cloned().collect();
    assert_eq!(app.home(&reader, 6).await, newest_first(&all));
}

#[tokio::test]
async fn promotion_demotion_and_threshold_changes_mid_scroll_lose_nothing() {
    let app = spawn_app().await;
    let star = app.create_user("star").await;
    let plain = app.create_user("plain").await;
    let reader = app.create_user("reader").await;
    let quiet = app.create_user("quiet").await;
    let fans = app.users("fan", 3).await;
    for u in [&reader, &quiet].into_iter().chain(&fans) {
        app.follow(u, &star).await;
        app.follow(u, &plain).await;
    }
    // `quiet` has an inbox but never reads again: never an active fan.
    app.home(&quiet, 5).await;
    let authors = [star.clone(), plain.clone()];
    let before = tied_posts(&app, &authors, 60, BASE).await;
    app.settle().await;
    let mut published = Vec::new();
    let seen = app
        .scroll_with("/api/v1/feed", &reader.token, &[2, 5, 3], async |turn| {
            match turn % 4 {
                // star (5 followers) and plain become big-V
                0 => {
                    app.set_settings(json!({"big_v_threshold": 5, "big_v_demote_threshold": 4}))
                        .await;
                }
                // a big-V publishes, then the thresholds move again
                1 => published.push(app.publish(&star, "as big-V").await),
                2 => {
                    app.set_settings(
                        json!({"big_v_threshold": 1000, "big_v_demote_threshold": 900}),
                    )
                    .await;
                }
                _ => {
                    // unfollow + follow moves the count across the thresholds
                    app.set_settings(json!({"big_v_threshold": 5, "big_v_demote_threshold": 1}))
                        .await;
                    app.unfollow(&fans[0], &star).await;
                    app.follow(&fans[0], &star).await;
                    published.push(app.publish(&plain, "ordinary").await);
                }
            }
        })
        .await;
    assert_unique(&ids(&seen));
    assert_eq!(ids(&seen), newest_first(&before));
    // Settle and demote everyone: the big-V posts must now be in inboxes.
    app.set_settings(json!({"big_v_threshold": 1000, "big_v_demote_threshold": 900}))
        .await;
    app.settle().await;
    assert_eq!(app.user(star.id).await["big_v"], false);
    let all: Vec<Post> = before.iter().chain(&published).cloned().collect();
    let expected = newest_first(&all);
    for u in [&reader, &quiet, &fans[1]] {
        assert_eq!(app.home(u, 7).await, expected, "user {}", u.id);
    }
    // And they are there for a quiet reader's inbox itself, not a rebuild.
    let inbox = app.engine.redis().keys().inbox(UserId(quiet.id));
    let members = feed_ids(&app, &inbox).await;
    for p in &published {
        assert!(
            members.contains(&p.id.to_string()),
            "post {} in {inbox}",
            p.id
        );
    }
}

#[tokio::test]
async fn losing_every_redis_key_mid_scroll_loses_nothing() {
    let app = spawn_app().await;
    app.set_settings(json!({"big_v_threshold": 3, "big_v_demote_threshold": 2}))
        .await;
    let authors = app.users("author", 3).await;
    let reader = app.create_user("reader").await;
    let extra = app.users("extra", 2).await;
    follow_all(&app, &reader, &authors).await;
    for e in &extra {
        app.follow(e, &authors[0]).await; // authors[0] becomes big-V
    }
    assert_eq!(app.user(authors[0].id).await["big_v"], true);
    let posts = tied_posts(&app, &authors, 70, BASE).await;
    app.settle().await;
    for sizes in [[4, 1, 6], [7, 2, 3]] {
        let seen = app
            .scroll_with("/api/v1/feed", &reader.token, &sizes, async |turn| {
                if turn % 2 == 0 {
                    app.engine.redis().delete_all().await.unwrap();
                }
            })
            .await;
        assert_eq!(ids(&seen), newest_first(&posts), "sizes {sizes:?}");
    }
}

#[tokio::test]
async fn scrolling_past_the_caps_continues_to_the_first_post() {
    let app = spawn_app().await;
    app.set_settings(json!({"inbox_max_len": 10, "outbox_max_len": 10, "big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let authors = app.users("author", 5).await;
    let reader = app.create_user("reader").await;
    let other = app.create_user("other").await;
    follow_all(&app, &reader, &authors).await;
    app.follow(&other, &authors[0]).await; // authors[0] is big-V: pulled
    app.home(&reader, 3).await; // the inbox exists: fan-out fills and trims it
    let posts = tied_posts(&app, &authors, 300, BASE).await;
    app.settle().await;
    let expected = newest_first(&posts);
    for sizes in [vec![1, 3, 7], vec![5], vec![7, 2]] {
        let seen = app
            .scroll_with("/api/v1/feed", &reader.token, &sizes, async |_| {})
            .await;
        assert_eq!(ids(&seen), expected, "sizes {sizes:?}");
    }
    let held = feed_ids(&app, &app.engine.redis().keys().inbox(UserId(reader.id)))
        .await
        .len();
    assert!(held <= 11, "the inbox is trimmed to its cap, holds {held}");
}

#[tokio::test]
async fn deleted_posts_and_unfollowed_authors_vanish_once_the_call_returns() {
    let app = spawn_app().await;
    app.set_settings(json!({"big_v_threshold": 3, "big_v_demote_threshold": 2}))
        .await;
    let plain = app.create_user("plain").await;
    let star = app.create_user("star").await;
    let reader = app.create_user("reader").await;
    let fans = app.users("fan", 2).await;
    follow_all(&app, &reader, &[plain.clone(), star.clone()]).await;
    follow_all(&app, &fans[0], std::slice::from_ref(&star)).await;
    follow_all(&app, &fans[1], std::slice::from_ref(&star)).await;
    app.home(&reader, 5).await;
    let posts = tied_posts(&app, &[plain.clone(), star.clone()], 30, BASE).await;
    app.settle().await;
    // Delete one post of each; no waiting for the clean-up.
    let gone: HashSet<PostId> = [posts[4].id, posts[7].id].into();
    for p in [&posts[4], &posts[7]] {
        let owner = if p.author_id == UserId(plain.id) {
            &plain
        } else {
            &star
        };
        assert_eq!(
            app.delete_post(owner, p.id.0).await.status(),
            StatusCode::NO_CONTENT
        );
    }
    for size in [1, 4, 30] {
        let seen = app.home(&reader, size).await;
        assert!(
            seen.iter().all(|id| !gone.contains(id)),
            "deleted post shown"
        );
        assert_eq!(seen.len(), 28);
    }
    // Unfollow: none of that author's posts, at once.
    app.unfollow(&reader, &plain).await;
    let seen = app.home(&reader, 6).await;
    assert!(!seen.is_empty());
    assert!(posts
        .iter()
        .filter(|p| p.author_id == UserId(plain.id))
        .all(|p| !seen.contains(&p.id)));
    app.unfollow(&reader, &star).await;
    assert!(app.home(&reader, 6).await.is_empty());
}

#[tokio::test]
async fn following_brings_recent_posts_and_big_v_posts_reach_active_fans() {
    let app = spawn_app().await;
    app.set_settings(json!({"big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let star = app.create_user("star").await;
    let active = app.create_user("active").await;
    let idle = app.create_user("idle").await;
    let old = app.publish_at(&star, "before anyone followed", BASE).await;
    // Delivered first: while a delivery is in flight its author is pulled,
    // and a reader of a pulled author is marked as its active fan.
    app.settle().await;
    app.follow(&idle, &star).await;
    app.settle().await;
    app.home(&idle, 5).await; // inbox exists, but star was ordinary then
    app.follow(&active, &star).await;
    assert_eq!(app.user(star.id).await["big_v"], true);
    assert_eq!(app.home(&active, 5).await, vec![old.id]); // reads as a fan of a big-V
    app.settle().await;
    let post = app.publish(&star, "to active fans").await;
    app.settle().await;
    let keys = app.engine.redis().keys();
    assert!(feed_ids(&app, &keys.inbox(UserId(active.id)))
        .await
        .contains(&post.id.to_string()));
    assert!(!feed_ids(&app, &keys.inbox(UserId(idle.id)))
        .await
        .contains(&post.id.to_string()));
    // Both see it: the idle fan pulls the outbox.
    assert_eq!(app.home(&active, 5).await, vec![post.id, old.id]);
    assert_eq!(app.home(&idle, 5).await, vec![post.id, old.id]);
}

/// The ids of every entry of a feed list.
async fn feed_ids(app: &TestApp, key: &str) -> Vec<String> {
    let mut conn = app.engine.redis().connection().await.unwrap();
    let (entries, _) = crate::helpers::feed_list(&mut conn, key)
        .await
        .unwrap_or_default();
    entries.iter().map(|e| e.id.to_string()).collect()
}

#[tokio::test]
async fn next_carries_the_request_offset_through_a_run_of_equal_scores() {
    let app = spawn_app().await;
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    let mut posts = Vec::new();
    for i in 0..7 {
        posts.push(app.publish_at(&author, &format!("tie {i}"), BASE).await);
    }
    posts.push(app.publish_at(&author, "older", BASE - 1).await);
    app.settle().await;
    let order = newest_first(&posts);
    let (p1, n1) = app.page("/api/v1/feed", &reader.token, None, 3).await;
    assert_eq!(ids(&p1), order[..3]);
    assert_eq!(n1, Some((BASE, 3)));
    let (p2, n2) = app.page("/api/v1/feed", &reader.token, n1, 3).await;
    assert_eq!(ids(&p2), order[3..6]);
    assert_eq!(n2, Some((BASE, 6)));
    let (p3, n3) = app.page("/api/v1/feed", &reader.token, n2, 3).await;
    assert_eq!(ids(&p3), order[6..8]);
    assert_eq!(n3, None);
}

#[tokio::test]
async fn following_an_author_with_more_posts_than_the_cap_shows_every_post() {
    let app = spawn_app().await;
    app.set_settings(json!({"inbox_max_len": 10, "outbox_max_len": 10}))
        .await;
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    let mut posts = Vec::new();
    for i in 0..15 {
        posts.push(app.publish_at(&author, &format!("p{i}"), BASE + i).await);
    }
    // The reader's inbox exists (empty, complete) before the follow.
    assert!(app.home(&reader, 5).await.is_empty());
    app.follow(&reader, &author).await;
    app.settle().await;
    let expected = newest_first(&posts);
    for size in [1, 4, 20] {
        assert_eq!(app.home(&reader, size).await, expected, "page size {size}");
    }
}

#[tokio::test]
async fn a_demoted_big_v_s_posts_past_the_cap_reach_a_quiet_follower() {
    let app = spawn_app().await;
    app.set_settings(json!({"inbox_max_len": 10, "outbox_max_len": 10, "big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let star = app.create_user("star").await;
    let quiet = app.create_user("quiet").await;
    let fan = app.create_user("fan").await;
    app.follow(&quiet, &star).await;
    app.home(&quiet, 5).await; // an inbox, but never an active fan
    app.follow(&fan, &star).await;
    assert_eq!(app.user(star.id).await["big_v"], true);
    let mut posts = Vec::new();
    for i in 0..15 {
        posts.push(app.publish(&star, &format!("as big-V {i}")).await);
    }
    app.settle().await;
    app.set_settings(json!({"big_v_threshold": 100, "big_v_demote_threshold": 50}))
        .await;
    assert_eq!(app.user(star.id).await["big_v"], false);
    app.settle().await;
    let expected = newest_first(&posts);
    for size in [1, 3, 20] {
        assert_eq!(app.home(&quiet, size).await, expected, "page size {size}");
    }
}

#[tokio::test]
async fn a_big_v_post_stamped_by_a_lagging_clock_is_backfilled_on_demotion() {
    let app = spawn_app().await;
    app.set_settings(json!({"big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let star = app.create_user("star").await;
    let quiet = app.create_user("quiet").await;
    let fan = app.create_user("fan").await;
    app.follow(&quiet, &star).await;
    app.home(&quiet, 5).await;
    app.follow(&fan, &star).await;
    assert_eq!(app.user(star.id).await["big_v"], true);
    // Published as big-V, from an instance whose clock is a minute behind.
    let now = feed_service::engine::now_ms();
    let lagging = app.publish_at(&star, "late clock", now - 60_000).await;
    let current = app.publish(&star, "right clock").await;
    app.settle().await;
    app.set_settings(json!({"big_v_threshold": 100, "big_v_demote_threshold": 50}))
        .await;
    app.settle().await;
    assert_eq!(
        app.home(&quiet, 5).await,
        newest_first(&[lagging.clone(), current.clone()])
    );
    let members = feed_ids(&app, &app.engine.redis().keys().inbox(UserId(quiet.id))).await;
    assert!(members.contains(&lagging.id.to_string()), "{members:?}");
}

#[tokio::test]
async fn a_next_offset_past_ten_thousand_is_accepted_back() {
    let app = spawn_app().await;
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    app.settle().await;
    // A run of 10,150 posts in one millisecond, and one older post.
    let mut conn = diesel_async::AsyncPgConnection::establish(app.database_url())
        .await
        .unwrap();
    diesel::sql_query(
        "INSERT INTO posts (author_id, body, created_at_ms) \
         SELECT $1, 'tie', $2 FROM generate_series(1, 10150)",
    )
    .bind::<diesel::sql_types::BigInt, _>(author.id)
    .bind::<diesel::sql_types::BigInt, _>(BASE)
    .execute(&mut conn)
    .await
    .unwrap();
    let older = app.publish_at(&author, "older", BASE - 1).await;
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut largest = 0;
    loop {
        let (items, next) = app.page("/api/v1/feed", &reader.token, cursor, 100).await;
        seen.extend(ids(&items));
        match next {
            Some(c) => {
                largest = largest.max(c.1);
                cursor = Some(c);
            }
            None => break,
        }
    }
    assert!(largest > 10_000, "largest offset {largest}");
    assert_eq!(seen.len(), 10_151);
    assert_unique(&seen);
    assert_eq!(seen.last(), Some(&older.id));
    // An offset above 10,000 that no response could have given is refused.
    let res = app
        .request(
            reqwest::Method::GET,
            &format!("/api/v1/feed?max={}&offset=10001", BASE - 1),
            Some(&reader.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
}

/// Milliseconds to live of a key (-2: missing, -1: no TTL).
async fn pttl(app: &TestApp, key: &str) -> i64 {
    let mut conn = app.engine.redis().connection().await.unwrap();
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_idle_reader_s_inbox_expires_and_is_rebuilt_complete_on_return() {
    let app = spawn_app().await;
    let settings = app.set_settings(json!({"inbox_idle_ttl_secs": 3600})).await;
    assert_eq!(settings["inbox_idle_ttl_secs"], 3600);
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    let first = app.publish(&author, "before").await;
    app.settle().await;
    assert_eq!(app.home(&reader, 5).await, vec![first.id]);
    // Reading built the reader's keys with the admin's idle TTL.
    let keys = app.engine.redis().keys().clone();
    let (inbox, following) = (
        keys.inbox(UserId(reader.id)),
        keys.following(UserId(reader.id)),
    );
    let followees = keys.followees(UserId(reader.id));
    for key in [&inbox, &following, &followees] {
        let ttl = pttl(&app, key).await;
        assert!((3_500_000..=3_600_000).contains(&ttl), "{key}: {ttl} ms");
    }
    // The reader stays away until its keys expire (here: at once).
    let mut conn = app.engine.redis().connection().await.unwrap();
    for key in [&inbox, &following, &followees] {
        let _: i64 = redis::cmd("PEXPIRE")
            .arg(key)
            .arg(1)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Meanwhile a post is pushed: to no inbox, since it has expired.
    let second = app.publish(&author, "while away").await;
    app.settle().await;
    assert_eq!(pttl(&app, &inbox).await, -2, "no push recreates it");
    // On return the feed is complete, rebuilt from PostgreSQL, and the
    // rebuilt keys have the TTL again.
    assert_eq!(app.home(&reader, 5).await, vec![second.id, first.id]);
    for key in [&inbox, &following] {
        let ttl = pttl(&app, key).await;
        assert!((3_500_000..=3_600_000).contains(&ttl), "{key}: {ttl} ms");
    }
}

/// A page read straight from PostgreSQL, as a cold or Redis-less read gets it.
async fn pg_page(app: &TestApp, reader: &TestUser, req: PageRequest) -> Page {
    app.engine
        .reads()
        .page_from_pg(app.engine.reads().home_scope(UserId(reader.id)), &req)
        .await
        .expect("a page from PostgreSQL")
}

#[tokio::test]
async fn pages_from_postgresql_step_over_deleted_posts_with_redis_s_cursors() {
    // Arrange: three authors, posts ten to a millisecond, every third one
    // deleted (so deleted posts sit inside runs of equal scores), then a
    // long run of deleted posts between the two oldest live ones.
    let app = spawn_app().await;
    let authors = app.users("author", 3).await;
    let reader = app.create_user("reader").await;
    follow_all(&app, &reader, &authors).await;
    let oldest = app.publish_at(&authors[0], "oldest", BASE - 5_000).await;
    let mut run = Vec::new();
    for i in 0..600 {
        run.push(
            app.publish_at(&authors[i % 3], "gone", BASE - 4_000 + i as i64)
                .await,
        );
    }
    let posts = tied_posts(&app, &authors, 60, BASE).await;
    for p in run.iter().chain(posts.iter().step_by(3)) {
        app.engine
            .posts()
            .delete_post(p.id, Some(p.author_id))
            .await
            .expect("delete");
    }
    app.settle().await;
    let live: Vec<PostId> = posts
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(_, p)| p.id)
        .collect();

    // Act + assert: for every page size, PostgreSQL's pages and cursors are
    // Redis's, step by step, to the end.
    for size in [1, 2, 3, 7, 20] {
        let mut req = PageRequest::first(size);
        let mut seen = Vec::new();
        loop {
            let from_pg = pg_page(&app, &reader, req).await;
            let from_redis = app
                .engine
                .reads()
                .home_page(UserId(reader.id), req)
                .await
                .unwrap();
            assert_eq!(
                (ids(&from_pg.items), from_pg.next),
                (ids(&from_redis.items), from_redis.next),
                "page {req:?} of size {size}"
            );
            seen.extend(ids(&from_pg.items));
            match from_pg.next {
                Some(c) => req = PageRequest::after(c, size),
                None => break,
            }
        }
        let mut want = newest_first(
            &posts
                .iter()
                .filter(|p| live.contains(&p.id))
                .cloned()
                .collect::<Vec<_>>(),
        );
        want.push(oldest.id);
        assert_eq!(seen, want, "scroll of size {size}");
    }

    // The page that crosses the 600 deleted posts reads a window, not them.
    let stats = app.engine.stats();
    let rows = Stats::get(&stats.rows_read);
    let req = PageRequest::after(Cursor::counted(BASE, 10), 2);
    let page = pg_page(&app, &reader, req).await;
    assert_eq!(ids(&page.items), vec![oldest.id]);
    assert_eq!(page.next, None);
    let read = Stats::get(&stats.rows_read) - rows;
    assert!(read <= 20, "the page read {read} rows");
}

#[tokio::test]
async fn deleted_posts_leave_the_inboxes_and_the_outbox_once_their_jobs_have_run() {
    let app = spawn_app().await;
    app.set_settings(json!({"inbox_max_len": 6})).await;
    let author = app.create_user("author").await;
    let readers = app.users("reader", 3).await;
    for r in &readers {
        app.follow(r, &author).await;
        app.home(r, 5).await;
    }
    let author_page = format!("/api/v1/users/{}/posts", author.id);
    app.scroll(&author_page, &readers[0].token, 5).await;
    // Ten posts, every other one deleted (the inboxes of six held the six
    // newest, three of them deleted), then three more.
    let mut posts = Vec::new();
    for i in 0..10 {
        posts.push(app.publish(&author, &format!("post {i}")).await);
    }
    let deleted: Vec<PostId> = posts.iter().step_by(2).map(|p| p.id).collect();
    for id in &deleted {
        assert_eq!(
            app.delete_post(&author, id.0).await.status(),
            StatusCode::NO_CONTENT
        );
    }
    app.settle().await;
    for i in 10..13 {
        posts.push(app.publish(&author, &format!("post {i}")).await);
    }
    app.settle().await;
    let live: Vec<Post> = (posts.iter())
        .filter(|p| !deleted.contains(&p.id))
        .cloned()
        .collect();
    let live = newest_first(&live);

    // Every inbox holds its cap of live posts, the outbox all of them.
    let keys = app.engine.redis().keys().clone();
    let mut redis = app.engine.redis().connection().await.unwrap();
    let lists = (readers.iter())
        .map(|r| (keys.inbox(UserId(r.id)), 6))
        .chain([(keys.outbox(UserId(author.id)), live.len())]);
    for (key, len) in lists {
        let (entries, _) = crate::helpers::feed_list(&mut redis, &key)
            .await
            .unwrap_or_else(|| panic!("{key} exists"));
        let held: Vec<PostId> = entries.iter().map(|e| e.id).collect();
        assert_eq!(held, live[..len], "{key}");
    }
    // So a page of the newest five (and the sixth, for its `next`) comes
    // from Redis.
    let stats = app.engine.stats();
    let pg_pages = Stats::get(&stats.pg_pages);
    let (page, _) = app.page("/api/v1/feed", &readers[0].token, None, 5).await;
    assert_eq!(ids(&page), live[..5]);
    assert_eq!(
        Stats::get(&stats.pg_pages),
        pg_pages,
        "the page came from PostgreSQL"
    );
}

#[tokio::test]
async fn a_deleted_entry_left_in_an_inbox_costs_sql_once_when_its_tombstone_expired() {
    let app = spawn_app().await;
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    app.home(&reader, 5).await;
    let mut posts = Vec::new();
    for i in 0..10 {
        posts.push(app.publish(&author, &format!("post {i}")).await);
    }
    for p in posts.iter().step_by(2) {
        assert_eq!(
            app.delete_post(&author, p.id.0).await.status(),
            StatusCode::NO_CONTENT
        );
    }
    app.settle().await;
    // Entries a list still holds after their deletes (as one written by an
    // older release does), and the cached posts and tombstones run out of
    // time.
    let gone: Vec<feed_service::types::Entry> = posts
        .iter()
        .step_by(2)
        .map(|p| feed_service::types::Entry::new(p.created_at_ms, p.id))
        .collect();
    let inbox = app.engine.redis().keys().inbox(UserId(reader.id));
    app.engine
        .redis()
        .feeds()
        .push_same(&[inbox], &gone, 1000, None)
        .await
        .unwrap();
    let keys: Vec<String> = posts
        .iter()
        .map(|p| app.engine.redis().keys().post(p.id))
        .collect();
    app.engine.redis().delete_many(&keys).await.unwrap();

    let stats = app.engine.stats();
    let hydrations = Stats::get(&stats.hydrations);
    assert_eq!(app.home(&reader, 20).await.len(), 5);
    assert!(
        Stats::get(&stats.hydrations) > hydrations,
        "premise: nothing was read from PostgreSQL"
    );
    let hydrations = Stats::get(&stats.hydrations);
    assert_eq!(app.home(&reader, 20).await.len(), 5);
    assert_eq!(
        Stats::get(&stats.hydrations) - hydrations,
        0,
        "the second page over the deleted posts went to PostgreSQL again"
    );
}

/// A feed page as JSON: its items' ids, `next` and `prev`.
async fn page_json(
    app: &TestApp,
    token: &str,
    query: &str,
) -> (Vec<PostId>, serde_json::Value, serde_json::Value) {
    let res = app
        .request(
            reqwest::Method::GET,
            &format!("/api/v1/feed?{query}"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK, "{query}");
    let page: serde_json::Value = res.json().await.unwrap();
    let items = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| PostId(p["id"].as_i64().unwrap()))
        .collect();
    (items, page["next"].clone(), page["prev"].clone())
}

/// A cursor sent back whole: every field of `at` as a query parameter.
fn sent_back(at: &serde_json::Value, limit: u32) -> String {
    let mut query = format!("limit={limit}");
    for (k, v) in at.as_object().unwrap() {
        query.push_str(&format!("&{k}={v}"));
    }
    query
}

#[tokio::test]
async fn a_position_that_names_its_entry_pages_exactly_once_while_its_millisecond_fills() {
    let app = spawn_app().await;
    let (author, late) = (
        app.create_user("author").await,
        app.create_user("late").await,
    );
    let reader = app.create_user("reader").await;
    follow_all(&app, &reader, &[author.clone(), late.clone()]).await;
    let mut posts = Vec::new();
    for i in 0..6 {
        posts.push(app.publish_at(&author, &format!("tie {i}"), BASE).await);
    }
    posts.push(app.publish_at(&author, "older", BASE - 1).await);
    app.settle().await;
    let (first, next, prev) = page_json(&app, &reader.token, "limit=3").await;
    assert_eq!(first, newest_first(&posts)[..3]);
    // Both cursors name their entries.
    assert_eq!(next["id"].as_i64(), Some(first[2].0));
    assert_eq!(prev["id"].as_i64(), Some(first[0].0));
    // Posts of the position's own millisecond arrive late (a clock behind)
    // and one already passed is deleted.
    for i in 0..4 {
        posts.push(app.publish_at(&late, &format!("late {i}"), BASE).await);
    }
    assert_eq!(
        app.delete_post(&author, first[1].0).await.status(),
        StatusCode::NO_CONTENT
    );
    app.settle().await;
    let order: Vec<PostId> = newest_first(&posts)
        .into_iter()
        .filter(|id| *id != first[1])
        .collect();
    let at = order.iter().position(|id| *id == first[2]).unwrap();
    // The premise: late posts lie above the position, where a count moves.
    assert!(order[..at].iter().any(|id| !first.contains(id)));
    let counted = format!("limit=3&max={}&offset={}", next["max"], next["offset"]);
    let (by_count, _, _) = page_json(&app, &reader.token, &counted).await;
    assert_ne!(by_count, order[at + 1..at + 4], "a count stays put here");
    // By name: everything below the entry, each once, in order.
    let mut rest = Vec::new();
    let mut cursor = next;
    while !cursor.is_null() {
        let (items, next, _) = page_json(&app, &reader.token, &sent_back(&cursor, 2)).await;
        rest.extend(items);
        cursor = next;
    }
    assert_eq!(rest, order[at + 1..]);
    // Up from the first page's `prev` (its post deleted since or not):
    // what lies above its first item, the late posts, closest first.
    let above: Vec<PostId> = order[..order.iter().position(|id| *id == first[0]).unwrap()].to_vec();
    let (up, _, _) = page_json(&app, &reader.token, &sent_back(&prev, 100)).await;
    assert_eq!(up, above);
    // An id needs its score; ids are positive; account lists page by count.
    for bad in ["id=5", "max=1&id=0", "min=1&id=-3", "max=1&id=x"] {
        let res = app
            .request(
                reqwest::Method::GET,
                &format!("/api/v1/feed?{bad}"),
                Some(&reader.token),
                None,
            )
            .await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let mutes = format!("/api/v1/users/{}/mutes?max=1&id=3", reader.id);
    let res = app
        .request(reqwest::Method::GET, &mutes, Some(&reader.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
}
