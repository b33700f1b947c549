//! Durable publish (invariant 4) and bounded reads (invariant 5).

use std::time::Duration;

use diesel::sql_types::BigInt;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use feed_service::domain::PostBody;
use feed_service::engine::Stats;
use feed_service::startup::Application;
use feed_service::types::{Entry, PageRequest};
use serde_json::json;

use crate::helpers::{ids, spawn_app, spawn_app_with, test_settings, Cleanup};

#[tokio::test]
async fn a_fan_out_interrupted_mid_way_is_finished_by_another_instance() {
    let settings = test_settings();
    // The first instance publishes and "dies": its workers never run.
    let first = Application::build(&settings).await.unwrap();
    let engine = first.engine().clone();
    let _cleanup = Cleanup::of(&settings);
    let author = engine.pg().create_user("author").await.unwrap();
    let mut followers = Vec::new();
    for i in 0..120 {
        let f = engine.pg().create_user(&format!("f{i}")).await.unwrap();
        engine.follow(f.id, author.id).await.unwrap();
        // Each follower has an inbox for the fan-out to fill.
        engine.home_page(f.id, PageRequest::first(5)).await.unwrap();
        followers.push(f.id);
    }
    let post = engine
        .publish_at(author.id, &PostBody::parse("durable").unwrap(), 1_000)
        .await
        .unwrap();
    // It had claimed the job and delivered the first 60 when it died.
    let entry = [Entry::new(post.created_at_ms, post.id)];
    let keys = engine.redis().keys().clone();
    let done: Vec<(String, &[Entry])> = followers[..60]
        .iter()
        .map(|f| (keys.inbox(*f), &entry[..]))
        .collect();
    engine.redis().push(&done, 1000).await.unwrap();
    let url = secrecy::ExposeSecret::expose_secret(&settings.database.url).to_string();
    let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
    let claimed = diesel::sql_query(
        "UPDATE fanout_jobs SET checkpoint = $1, attempts = 1, \
         lease_until = now() + interval '1 second' WHERE post_id = $2",
    )
    .bind::<BigInt, _>(followers[59])
    .bind::<BigInt, _>(post.id)
    .execute(&mut conn)
    .await
    .unwrap();
    assert_eq!(claimed, 1);
    drop(first);

    // A new instance takes the job over once the lease expires.
    let second = spawn_app_with(settings).await;
    second.settle().await;
    for f in &followers {
        let inbox = keys.inbox(*f);
        let page = second
            .engine
            .home_page(*f, PageRequest::first(5))
            .await
            .unwrap();
        assert_eq!(
            page.items.iter().map(|p| p.id).collect::<Vec<_>>(),
            vec![post.id],
            "{inbox}"
        );
    }
    // Delivered by pushes, not by pulling: no job is left, and every inbox holds it.
    let mut redis = redis::Client::open(second.redis_url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for f in &followers {
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(keys.inbox(*f))
            .arg(post.id)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(score, Some(1_000.0), "follower {f}");
    }
}

#[tokio::test]
async fn a_page_costs_one_range_read_per_source_and_one_hydration() {
    let app = spawn_app().await;
    app.set_settings(json!({"big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let reader = app.create_user("reader").await;
    let other = app.create_user("other").await;
    let plain = app.users("plain", 3).await;
    let stars = app.users("star", 2).await;
    for a in plain.iter().chain(&stars) {
        app.follow(&reader, a).await;
    }
    for s in &stars {
        app.follow(&other, s).await;
    }
    for (i, a) in plain.iter().chain(&stars).enumerate() {
        for j in 0..10 {
            app.publish_at(a, "p", 5_000 + (i * 10 + j) as i64).await;
        }
    }
    app.settle().await;
    app.home(&reader, 10).await; // warm: inbox and outboxes exist
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stats = app.engine.stats();
    let (r0, h0, p0) = (
        Stats::get(&stats.range_reads),
        Stats::get(&stats.hydrations),
        Stats::get(&stats.pg_pages),
    );
    let (items, next) = app.page("/api/v1/feed", &reader.token, None, 20).await;
    assert_eq!(items.len(), 20);
    assert!(next.is_some());
    // inbox + two big-V outboxes, read once each; one hydration; no PostgreSQL page.
    assert_eq!(Stats::get(&stats.range_reads) - r0, 3);
    assert_eq!(Stats::get(&stats.hydrations) - h0, 1);
    assert_eq!(Stats::get(&stats.pg_pages) - p0, 0);
    assert_eq!(ids(&items).len(), 20);
}

#[tokio::test]
async fn with_fan_out_stalled_every_feed_is_still_complete() {
    // An instance whose workers never run: every delivery stays pending.
    let settings = test_settings();
    let app = Application::build(&settings).await.unwrap();
    let engine = app.engine().clone();
    let _cleanup = Cleanup::of(&settings);
    let star = engine.pg().create_user("star").await.unwrap();
    let mut readers = Vec::new();
    for name in ["reader", "quiet", "fan"] {
        let r = engine.pg().create_user(name).await.unwrap();
        engine.follow(r.id, star.id).await.unwrap();
        engine.home_page(r.id, PageRequest::first(5)).await.unwrap();
        readers.push(r.id);
    }
    let body = PostBody::parse("p").unwrap();
    let mut posts = Vec::new();
    // Ordinary: push jobs pending.
    for i in 0..4 {
        posts.push(
            engine
                .publish_at(star.id, &body, 10_000 + i)
                .await
                .unwrap()
                .id,
        );
    }
    // Big-V: only its outbox holds these.
    let patch = |t: i64, d: i64| feed_service::engine::SettingsPatch {
        big_v_threshold: Some(t),
        big_v_demote_threshold: Some(d),
        ..Default::default()
    };
    engine.update_settings(&patch(2, 1)).await.unwrap();
    for i in 4..8 {
        posts.push(
            engine
                .publish_at(star.id, &body, 10_000 + i)
                .await
                .unwrap()
                .id,
        );
    }
    // Demoted: the backfill is pending too.
    engine.update_settings(&patch(100, 50)).await.unwrap();
    assert!(!engine.user(star.id).await.unwrap().big_v);
    posts.reverse();
    for r in &readers {
        let page = engine.home_page(*r, PageRequest::first(20)).await.unwrap();
        assert_eq!(
            page.items.iter().map(|p| p.id).collect::<Vec<_>>(),
            posts,
            "reader {r}"
        );
    }
}
