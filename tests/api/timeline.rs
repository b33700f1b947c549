//! A home timeline as social apps show it: one's own posts at home, and
//! pull-to-refresh.

use feed_service::types::{Post, PostId, UserId};
use serde_json::json;

use crate::helpers::{assert_unique, ids, newest_first, spawn_app, T0};

#[tokio::test]
async fn a_reader_sees_its_own_posts_at_home_unless_an_admin_turns_it_off() {
    let app = spawn_app().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    app.follow(&alice, &bob).await;
    // A new user posts "hello": its home shows it at once.
    let hello = app.publish(&alice, "hello").await;
    assert_eq!(app.home(&alice, 10).await, vec![hello.id]);
    let from_bob = app.publish(&bob, "hi alice").await;
    assert_eq!(app.home(&alice, 10).await, vec![from_bob.id, hello.id]);
    // And once its fan-out is done, from its own inbox.
    app.settle().await;
    assert_eq!(app.home(&alice, 1).await, vec![from_bob.id, hello.id]);
    // Bob's home shows his post, not Alice's (he does not follow her).
    assert_eq!(app.home(&bob, 10).await, vec![from_bob.id]);

    // Turned off: homes show only whom their readers follow.
    let settings = app
        .set_settings(json!({"home_includes_own_posts": false}))
        .await;
    assert_eq!(settings["home_includes_own_posts"], false);
    assert_eq!(app.home(&alice, 10).await, vec![from_bob.id]);
    assert!(app.home(&bob, 10).await.is_empty());
    // The same from PostgreSQL, with Redis empty.
    app.engine.redis().delete_all().await.unwrap();
    assert_eq!(app.home(&alice, 10).await, vec![from_bob.id]);

    // On again: every own post is back, nothing to rebuild.
    app.set_settings(json!({"home_includes_own_posts": true}))
        .await;
    assert_eq!(app.home(&alice, 1).await, vec![from_bob.id, hello.id]);
    assert_eq!(app.home(&bob, 1).await, vec![from_bob.id]);
}

#[tokio::test]
async fn a_big_v_sees_its_own_posts_pulled_from_its_outbox() {
    let app = spawn_app().await;
    app.set_settings(json!({"big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let star = app.create_user("star").await;
    let fans = app.users("fan", 2).await;
    for f in &fans {
        app.follow(f, &star).await;
    }
    assert_eq!(app.user(star.id).await["big_v"], true);
    let first = app.publish(&star, "one").await;
    app.settle().await;
    // A big-V's post reaches only active fans' inboxes: the star has not
    // read yet, so its own inbox lacks it, and its home pulls its outbox.
    let mut conn = app.engine.redis().connection().await.unwrap();
    let inbox = app.engine.redis().keys().inbox(UserId(star.id));
    let held = crate::helpers::feed_list(&mut conn, &inbox).await;
    assert!(held.is_none_or(|(entries, _)| entries.iter().all(|e| e.id != first.id)));
    assert_eq!(app.home(&star, 10).await, vec![first.id]);
    let second = app.publish(&star, "two").await;
    assert_eq!(
        ids(&app.scroll("/api/v1/feed", &star.token, 1).await),
        vec![second.id, first.id]
    );
    // Demoted: its big-V posts are backfilled into its own inbox too.
    app.unfollow(&fans[0], &star).await;
    app.unfollow(&fans[1], &star).await;
    app.settle().await;
    let (entries, _) = crate::helpers::feed_list(&mut conn, &inbox)
        .await
        .expect("an inbox");
    let held: Vec<PostId> = entries.iter().map(|e| e.id).collect();
    assert!(
        held.contains(&first.id) && held.contains(&second.id),
        "{held:?}"
    );
    assert_eq!(app.home(&star, 10).await, vec![second.id, first.id]);
}

/// Pages up from `prev` until nothing newer is left, publishing `arrivals`
/// before each refresh: returns what the refreshes showed, in the order a
/// client lays it out (each page above the ones before).
async fn refresh_to_top(
    app: &crate::helpers::TestApp,
    path: &str,
    token: &str,
    mut prev: (i64, i64),
    limit: u32,
    mut arrivals: impl AsyncFnMut(usize) -> usize,
) -> Vec<Post> {
    let mut shown: Vec<Post> = Vec::new();
    for turn in 0.. {
        assert!(turn < 1000, "the refreshes never reach the top");
        let published = arrivals(turn).await;
        let (items, up) = app.refresh(path, token, prev, limit).await;
        assert!(items.len() <= limit as usize);
        if items.is_empty() {
            assert_eq!(up, prev, "an empty refresh keeps its position");
            if published == 0 {
                return shown;
            }
        }
        shown.splice(0..0, items);
        prev = up;
    }
    unreachable!()
}

#[tokio::test]
async fn refreshing_with_prev_reaches_the_top_exactly_once_while_posts_keep_arriving() {
    let app = spawn_app().await;
    let authors = app.users("author", 3).await;
    let reader = app.create_user("reader").await;
    for a in &authors {
        app.follow(&reader, a).await;
    }
    // Three posts in every millisecond.
    let mut all = Vec::new();
    for i in 0..30 {
        let at = T0 + i / 3;
        all.push(
            app.publish_at(&authors[i as usize % 3], &format!("p{i}"), at)
                .await,
        );
    }
    // The reader's first page, then down to the end with `next`.
    let (first, next, prev) = app
        .page_with("/api/v1/feed", &reader.token, "limit=4")
        .await;
    // Above the newest post: the three of its millisecond, from it down.
    assert_eq!(prev, (first[0].created_at_ms, 3));
    let mut seen: Vec<Post> = first.clone();
    let mut cursor = next;
    while let Some(c) = cursor {
        let (items, next) = app.page("/api/v1/feed", &reader.token, Some(c), 4).await;
        seen.extend(items);
        cursor = next;
    }
    // Then up with `prev`, two at a time, while posts keep arriving: some
    // in the millisecond of the newest post the reader has (a new id sorts
    // first in it), some later; none arrive after the tenth refresh.
    let top = first[0].created_at_ms;
    let mut arrived = Vec::new();
    let up = refresh_to_top(&app, "/api/v1/feed", &reader.token, prev, 2, async |turn| {
        if turn >= 10 {
            return 0;
        }
        let at = if turn < 3 { top } else { top + turn as i64 };
        for k in 0..2 {
            let p = app
                .publish_at(&authors[(turn + k) % 3], &format!("new {turn} {k}"), at)
                .await;
            arrived.push(p);
        }
        2
    })
    .await;
    assert_eq!(arrived.len(), 20);
    all.extend(arrived);
    let mut shown = up.clone();
    shown.extend(seen);
    assert_unique(&ids(&shown));
    assert_eq!(ids(&shown), newest_first(&all), "every post once, in order");
    // The same up the reader's own page of an author.
    let author = &authors[0];
    let path = format!("/api/v1/users/{}/posts", author.id);
    let (items, _, prev) = app.page_with(&path, &reader.token, "limit=1").await;
    let before_first = newest_first(&all)
        .into_iter()
        .filter(|id| {
            all.iter()
                .any(|p| p.id == *id && p.author_id == UserId(author.id))
        })
        .collect::<Vec<_>>();
    let up = refresh_to_top(&app, &path, &reader.token, prev, 3, async |_| 0).await;
    assert!(
        up.is_empty(),
        "nothing is newer than an author's newest post"
    );
    assert_eq!(items[0].id, before_first[0]);
    // From the bottom of the author's page up to the top: everything once.
    let up = refresh_to_top(&app, &path, &reader.token, (0, 0), 3, async |_| 0).await;
    assert_eq!(ids(&up), before_first);
}

#[tokio::test]
async fn a_refresh_answers_the_entries_closest_to_its_position_not_the_newest() {
    let app = spawn_app().await;
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    let old = app.publish_at(&author, "old", T0).await;
    let (_, _, prev) = app
        .page_with("/api/v1/feed", &reader.token, "limit=10")
        .await;
    assert_eq!(prev, (T0, 1));
    let mut newer = Vec::new();
    for i in 1..=6 {
        newer.push(app.publish_at(&author, &format!("n{i}"), T0 + i).await);
    }
    // The two just above the position, newest first; `prev` above them.
    let (items, up) = app.refresh("/api/v1/feed", &reader.token, prev, 2).await;
    assert_eq!(ids(&items), vec![newer[1].id, newer[0].id]);
    assert_eq!(up, (T0 + 2, 1));
    // Its `next` is below its last item: the old post, and no further.
    let (items, next, _) = app
        .page_with(
            "/api/v1/feed",
            &reader.token,
            &format!("min={}&offset={}&limit=2", prev.0, prev.1),
        )
        .await;
    assert_eq!(next, Some((T0 + 1, 1)));
    let (older, _) = app.page("/api/v1/feed", &reader.token, next, 5).await;
    assert_eq!(ids(&older), vec![old.id]);
    assert_eq!(items.len(), 2);
    // The same pages from PostgreSQL, with Redis empty.
    app.engine.redis().delete_all().await.unwrap();
    let (again, up_again) = app.refresh("/api/v1/feed", &reader.token, prev, 2).await;
    assert_eq!(
        (ids(&again), up_again),
        (vec![newer[1].id, newer[0].id], up)
    );
}

#[tokio::test]
async fn refresh_cursors_are_validated() {
    let app = spawn_app().await;
    let reader = app.create_user("reader").await;
    for query in [
        "min=-1",
        "min=x",
        "min=5&max=5",
        "offset=2",
        "min=5&offset=-1",
        "min=5&limit=0",
    ] {
        let res = app
            .request(
                reqwest::Method::GET,
                &format!("/api/v1/feed?{query}"),
                Some(&reader.token),
                None,
            )
            .await;
        let (status, code) = crate::helpers::error_code(res).await;
        assert_eq!(
            (status, code.as_str()),
            (reqwest::StatusCode::BAD_REQUEST, "bad_request"),
            "{query}"
        );
    }
    // An empty feed: the first page's prev is the bottom, and a refresh
    // from it is empty and stays there.
    let (items, next, prev) = app.page_with("/api/v1/feed", &reader.token, "").await;
    assert!(items.is_empty() && next.is_none());
    assert_eq!(prev, (0, 0));
    let (items, up) = app.refresh("/api/v1/feed", &reader.token, prev, 5).await;
    assert!(items.is_empty());
    assert_eq!(up, (0, 0));
}
