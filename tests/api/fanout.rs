//! Durable publish (invariant 4) and bounded reads (invariant 5).

use std::time::Duration;

use diesel::sql_types::BigInt;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use feed_service::domain::PostBody;
use feed_service::engine::fanout::Step;
use feed_service::engine::Engine;
use feed_service::settings::Settings;
use feed_service::startup::Application;
use feed_service::store::redis::Fault;
use feed_service::types::{Entry, PageRequest, PostId, UserId};
use serde_json::json;

use crate::helpers::{spawn_app, spawn_app_with, test_settings, Cleanup, T0};

#[tokio::test]
async fn a_fan_out_interrupted_mid_way_is_finished_by_another_instance() {
    let settings = test_settings();
    // The first instance publishes and "dies": its workers never run.
    let first = Application::build(&settings).await.unwrap();
    let engine = first.engine().clone();
    let _cleanup = Cleanup::of(&settings);
    let author = engine.pg().users().create_user("author").await.unwrap();
    let mut followers = Vec::new();
    for i in 0..120 {
        let f = engine
            .pg()
            .users()
            .create_user(&format!("f{i}"))
            .await
            .unwrap();
        engine.relations().follow(f.id, author.id).await.unwrap();
        // Each follower has an inbox for the fan-out to fill.
        engine
            .reads()
            .home_page(f.id, PageRequest::first(5))
            .await
            .unwrap();
        followers.push(f.id);
    }
    let post = engine
        .posts()
        .publish_at(author.id, &PostBody::parse("durable").unwrap(), T0 + 1_000)
        .await
        .unwrap();
    // It had claimed the job and delivered the first 60 when it died.
    let entry = [Entry::new(post.created_at_ms, post.id)];
    let keys = engine.redis().keys().clone();
    let done: Vec<(String, &[Entry])> = followers[..60]
        .iter()
        .map(|f| (keys.inbox(*f), &entry[..]))
        .collect();
    engine.redis().feeds().push(&done, 1000).await.unwrap();
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
            .reads()
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
    let mut redis = second.engine.redis().connection().await.unwrap();
    for f in &followers {
        let (entries, _) = crate::helpers::feed_list(&mut redis, &keys.inbox(*f))
            .await
            .expect("an inbox");
        assert!(
            entries.contains(&Entry::new(T0 + 1_000, post.id)),
            "follower {f}"
        );
    }
}

#[tokio::test]
async fn a_warm_page_makes_no_query_and_four_round_trips_whatever_the_follows() {
    let settings = test_settings();
    let app = spawn_app_with(settings.clone()).await;
    app.set_settings(json!({"big_v_threshold": 3, "big_v_demote_threshold": 2}))
        .await;
    // Two readers: one follows 50 accounts, the other 2,000; both follow
    // the same eight big-Vs (three followers each: on a cluster, some
    // master holds several of a page's sources) and 14 authors who post.
    let mut conn = AsyncPgConnection::establish(app.database_url())
        .await
        .unwrap();
    conn.batch_execute(
        "INSERT INTO users (username) SELECT 'u' || g FROM generate_series(1, 2003) g;
         -- 1: reads 50, 2: reads 2000, 3: the third fan; 4..11 big-Vs; 4..25 post
         INSERT INTO follows (follower_id, followee_id)
           SELECT 1, g FROM generate_series(4, 53) g
           UNION ALL SELECT 2, g FROM generate_series(4, 2003) g
           UNION ALL SELECT 3, g FROM generate_series(4, 11) g;
         UPDATE users u SET follower_count = c.n FROM
           (SELECT followee_id, count(*) AS n FROM follows GROUP BY 1) c
           WHERE u.id = c.followee_id;
         UPDATE users SET following_count = 50 WHERE id = 1;
         UPDATE users SET following_count = 2000 WHERE id = 2;
         UPDATE users SET following_count = 8 WHERE id = 3;
         UPDATE users SET big_v = TRUE, big_v_epoch = 1 WHERE id BETWEEN 4 AND 11;
         UPDATE posts SET pulled = TRUE WHERE author_id BETWEEN 4 AND 11;",
    )
    .await
    .unwrap();
    let body = PostBody::parse("p").unwrap();
    for author in 4..26 {
        for i in 0..3 {
            app.engine
                .posts()
                .publish_at(UserId(author), &body, T0 + 5_000 + author * 10 + i)
                .await
                .unwrap();
        }
    }
    app.settle().await;
    // The pages are read through an instance of their own whose background
    // work (settings reloads, gauges, fan-out workers) never runs: its
    // counters count the pages' work alone.
    let reads = Application::build(&settings).await.unwrap();
    let engine = reads.engine().clone();
    // On either topology: whom the reader follows, which of them are
    // pulled or hidden, the inbox and the outboxes (one pipeline per
    // master), then the posts (the same).
    let warm_trips = 4;
    for reader in [1, 2] {
        let req = PageRequest::first(20);
        // Cold: the reader's state, inbox, outboxes and posts are cached,
        // the bodies of two pages in this instance's memory.
        let cold = engine.reads().home_page(UserId(reader), req).await.unwrap();
        let next = PageRequest::after(cold.next.unwrap(), 20);
        let cold_next = engine
            .reads()
            .home_page(UserId(reader), next)
            .await
            .unwrap();
        // The active-fan mark it spawned lands first (a round trip of its own).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (sql, trips) = (engine.pg().queries(), engine.redis().round_trips());
        let resent = engine.redis().calls_resent();
        let warm = engine.reads().home_page(UserId(reader), req).await.unwrap();
        assert_eq!(warm, cold, "reader {reader}");
        assert_eq!(warm.items.len(), 20);
        assert_eq!(
            engine.pg().queries() - sql,
            0,
            "SQL of a warm page, reader {reader}"
        );
        assert_eq!(
            engine.redis().round_trips() - trips,
            warm_trips,
            "Redis round trips of a warm page, reader {reader}"
        );
        // And the next page too.
        let (sql, trips) = (engine.pg().queries(), engine.redis().round_trips());
        let page = engine
            .reads()
            .home_page(UserId(reader), next)
            .await
            .unwrap();
        assert_eq!(page, cold_next, "reader {reader}");
        assert_eq!(page.items.len(), 20);
        assert_eq!(engine.pg().queries() - sql, 0);
        assert_eq!(engine.redis().round_trips() - trips, warm_trips);
        // Each round trip was one call per node: none was refused and sent
        // again key by key.
        assert_eq!(engine.redis().calls_resent(), resent, "reader {reader}");
    }
}

#[tokio::test]
async fn with_fan_out_stalled_every_feed_is_still_complete() {
    // An instance whose workers never run: every delivery stays pending.
    let settings = test_settings();
    let app = Application::build(&settings).await.unwrap();
    let engine = app.engine().clone();
    let _cleanup = Cleanup::of(&settings);
    let star = engine.pg().users().create_user("star").await.unwrap();
    let mut readers = Vec::new();
    for name in ["reader", "quiet", "fan"] {
        let r = engine.pg().users().create_user(name).await.unwrap();
        engine.relations().follow(r.id, star.id).await.unwrap();
        engine
            .reads()
            .home_page(r.id, PageRequest::first(5))
            .await
            .unwrap();
        readers.push(r.id);
    }
    let body = PostBody::parse("p").unwrap();
    let mut posts = Vec::new();
    // Ordinary: push jobs pending.
    for i in 0..4 {
        posts.push(
            engine
                .posts()
                .publish_at(star.id, &body, T0 + 10_000 + i)
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
                .posts()
                .publish_at(star.id, &body, T0 + 10_000 + i)
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
        let page = engine
            .reads()
            .home_page(*r, PageRequest::first(20))
            .await
            .unwrap();
        assert_eq!(
            page.items.iter().map(|p| p.id).collect::<Vec<_>>(),
            posts,
            "reader {r}"
        );
    }
}

/// An instance whose workers never run: the test drives its jobs.
async fn idle_instance() -> (Engine, Settings, Cleanup) {
    let settings = test_settings();
    let app = Application::build(&settings).await.unwrap();
    let cleanup = Cleanup::of(&settings);
    (app.engine().clone(), settings, cleanup)
}

/// Runs every claimable job to its end, as one worker would.
async fn run_all(engine: &Engine) {
    while let Some(mut lease) = engine.fanout().claim(0).await.unwrap() {
        while engine.fanout().step(&mut lease, true).await.unwrap() == Step::More {}
    }
}

/// An author and `n` followers, each with an inbox; every job run.
async fn author_with_followers(engine: &Engine, n: usize) -> (i64, Vec<UserId>) {
    let author = engine.pg().users().create_user("author").await.unwrap().id;
    let mut followers = Vec::new();
    for i in 0..n {
        let f = engine
            .pg()
            .users()
            .create_user(&format!("f{i}"))
            .await
            .unwrap()
            .id;
        engine.relations().follow(f, author).await.unwrap();
        home(engine, f.0).await;
        followers.push(f);
    }
    run_all(engine).await;
    (author.0, followers)
}

async fn home(engine: &Engine, reader: i64) -> Vec<PostId> {
    let page = engine
        .reads()
        .home_page(UserId(reader), PageRequest::first(100))
        .await
        .unwrap();
    page.items.iter().map(|p| p.id).collect()
}

#[tokio::test]
async fn an_unfollow_job_finishes_before_a_later_follow_of_the_same_pair_runs() {
    let (engine, _settings, _cleanup) = idle_instance().await;
    let author = engine.pg().users().create_user("author").await.unwrap().id;
    let reader = engine.pg().users().create_user("reader").await.unwrap().id;
    let body = PostBody::parse("p").unwrap();
    let mut posts = Vec::new();
    for i in 0..3 {
        posts.push(
            engine
                .posts()
                .publish_at(author, &body, T0 + 1_000 + i)
                .await
                .unwrap()
                .id,
        );
    }
    posts.reverse();
    engine.relations().follow(reader, author).await.unwrap();
    home(&engine, reader.0).await; // the reader has an inbox
    run_all(&engine).await;
    // Unfollow while Redis refuses every call: the call fails (503), its
    // job stays, and a worker takes it. The reader follows again, Redis
    // still refusing: that job stays too.
    let faults = engine.redis().faults();
    faults.arm(1000, Fault::Refuse);
    assert!(engine.relations().unfollow(reader, author).await.is_err());
    faults.disarm();
    let mut removal = engine
        .fanout()
        .claim(0)
        .await
        .unwrap()
        .expect("the unfollow job");
    faults.arm(1000, Fault::Refuse);
    assert!(engine.relations().follow(reader, author).await.is_err());
    faults.disarm();
    // Another worker may not run the follow before the unfollow is done.
    assert!(engine.fanout().claim(0).await.unwrap().is_none());
    assert_eq!(home(&engine, reader.0).await, posts, "pulled meanwhile");
    assert_eq!(
        engine.fanout().step(&mut removal, true).await.unwrap(),
        Step::Done
    );
    run_all(&engine).await;
    assert_eq!(engine.pg().jobs().pending_jobs().await.unwrap(), 0);
    assert_eq!(home(&engine, reader.0).await, posts);
    let inbox = engine.redis().keys().inbox(reader);
    assert_eq!(members(&engine, &inbox).await.len(), 3, "{inbox}");
}

/// A connection to the engine's Redis (a node or a cluster).
async fn redis_conn(engine: &Engine) -> feed_service::store::redis::Conn {
    engine.redis().connection().await.unwrap()
}

/// The ids of every entry of a feed list.
async fn members(engine: &Engine, key: &str) -> Vec<String> {
    let mut conn = redis_conn(engine).await;
    let (entries, _) = crate::helpers::feed_list(&mut conn, key)
        .await
        .unwrap_or_default();
    entries.iter().map(|e| e.id.to_string()).collect()
}

#[tokio::test]
async fn a_backfill_too_big_for_one_redis_call_is_split_and_finishes() {
    // A Redis call may take 300 ms. A demoted author's 1,000 posts to a
    // batch of 200 inboxes are 200,000 entry writes, each finding its place
    // in a list: far more than one call can make in that time. (A pipeline
    // waits behind the other one in flight, and a loaded machine's Redis
    // shares its cores with the whole suite: 300 ms leaves room for that.)
    let mut settings = test_settings();
    settings.redis.timeout_ms = 300;
    settings.feed.fanout_batch_size = 200;
    let app = spawn_app_with(settings).await;
    app.set_settings(json!({"big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let star = app.create_user("star").await;
    let fans = app.users("fan", 200).await;
    for f in &fans {
        app.follow(f, &star).await;
        app.home(f, 1).await;
    }
    let mut conn = AsyncPgConnection::establish(app.database_url())
        .await
        .unwrap();
    diesel::sql_query(
        "INSERT INTO posts (author_id, body, created_at_ms, pulled) \
         SELECT $1, 'p', 1764500005000 + g, TRUE FROM generate_series(1, 1000) g",
    )
    .bind::<BigInt, _>(star.id)
    .execute(&mut conn)
    .await
    .unwrap();
    app.settle().await;
    app.set_settings(json!({"big_v_threshold": 1000, "big_v_demote_threshold": 900}))
        .await;
    app.settle().await;
    let (items, _) = app.page("/api/v1/feed", &fans[7].token, None, 3).await;
    assert_eq!(items.len(), 3);
    // Delivered into the inboxes, not dropped for a rebuild.
    let inbox = app.engine.redis().keys().inbox(UserId(fans[7].id));
    assert_eq!(members(&app.engine, &inbox).await.len(), 1000);
}

#[tokio::test]
async fn a_job_whose_batches_keep_timing_out_counts_them_and_gives_up_losing_nothing() {
    let (engine, _settings, _cleanup) = idle_instance().await;
    let (author, readers) = author_with_followers(&engine, 4).await;
    let post = engine
        .posts()
        .publish_at(
            UserId(author),
            &PostBody::parse("slow").unwrap(),
            T0 + 9_000,
        )
        .await
        .unwrap();
    let max = engine.tuning().fanout_max_attempts;
    let url = secrecy::ExposeSecret::expose_secret(&_settings.database.url).to_string();
    let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
    for attempt in 1..=max {
        let mut lease = engine
            .fanout()
            .claim(0)
            .await
            .unwrap()
            .expect("the deliver job");
        assert_eq!(lease.job.attempts, attempt, "timeouts are counted");
        // Redis runs the batch but its reply is lost: a timeout, while
        // Redis itself answers.
        engine.redis().faults().arm(1, Fault::LoseReply);
        let err = engine.fanout().step(&mut lease, true).await.unwrap_err();
        engine.fanout().fail(lease, &err).await;
        diesel::sql_query("UPDATE fanout_jobs SET lease_until = '-infinity'")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    // It gave up: no job left, so nobody pulls the author any more...
    assert_eq!(engine.pg().jobs().pending_jobs().await.unwrap(), 0);
    for r in &readers {
        // ...and every reader still gets the post.
        assert_eq!(home(&engine, r.0).await, vec![post.id], "reader {r}");
    }
}

/// A job parked as dead: its kind and why.
#[derive(diesel::QueryableByName)]
struct Dead {
    #[diesel(sql_type = diesel::sql_types::Text)]
    kind: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    last_error: String,
}

/// The jobs parked as dead, by kind.
async fn dead_jobs(conn: &mut AsyncPgConnection) -> Vec<Dead> {
    diesel::sql_query("SELECT kind, last_error FROM fanout_jobs WHERE dead ORDER BY kind")
        .load(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_job_of_an_unknown_kind_is_parked_dead_with_its_reason() {
    let app = spawn_app().await;
    let mut conn = AsyncPgConnection::establish(app.database_url())
        .await
        .unwrap();
    // A newer binary's kind, which this one does not know.
    conn.batch_execute(
        "ALTER TABLE fanout_jobs DROP CONSTRAINT fanout_jobs_kind_check; \
         INSERT INTO fanout_jobs (kind, author_id, created_at_ms) VALUES ('reshuffle', 1, 0)",
    )
    .await
    .unwrap();
    // Other work goes on.
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    app.settle().await;
    let dead = dead_jobs(&mut conn).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].kind, "reshuffle");
    assert!(
        dead[0].last_error.contains("unknown"),
        "{}",
        dead[0].last_error
    );
    // The gauge, refreshed in the background, shows it.
    let mut shown = false;
    for _ in 0..50 {
        let res = app
            .request(reqwest::Method::GET, "/metrics", None, None)
            .await;
        if res
            .text()
            .await
            .unwrap()
            .contains(r#"fanout_jobs{state="dead"} 1"#)
        {
            shown = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(shown, "fanout_jobs{{state=\"dead\"}} 1 in /metrics");
}

#[tokio::test]
async fn a_job_lacking_what_its_kind_needs_is_parked_dead_with_its_reason() {
    let app = spawn_app().await;
    let mut conn = AsyncPgConnection::establish(app.database_url())
        .await
        .unwrap();
    // A delivery without its post, and a follow without its reader, as a
    // hand-written row would be.
    conn.batch_execute(
        "INSERT INTO fanout_jobs (kind, author_id, created_at_ms) VALUES ('deliver', 1, 0); \
         INSERT INTO fanout_jobs (kind, author_id, created_at_ms, epoch) VALUES ('follow', 1, 0, 1)",
    )
    .await
    .unwrap();
    // Other work goes on.
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    let post = app.publish(&author, "still delivered").await;
    app.settle().await;
    let mut dead = dead_jobs(&mut conn).await;
    assert_eq!(dead.len(), 2);
    let follow = dead.pop().unwrap();
    let deliver = dead.pop().unwrap();
    assert_eq!(deliver.kind, "deliver");
    assert!(
        deliver.last_error.contains("lacking its post"),
        "{}",
        deliver.last_error
    );
    assert_eq!(follow.kind, "follow");
    assert!(
        follow.last_error.contains("lacking its reader"),
        "{}",
        follow.last_error
    );
    assert_eq!(app.home(&reader, 20).await, vec![post.id]);
}

#[tokio::test]
async fn the_jobs_table_is_vacuumed_once_its_dead_rows_pile_up() {
    #[derive(diesel::QueryableByName)]
    struct Stat {
        #[diesel(sql_type = BigInt)]
        dead: i64,
        #[diesel(sql_type = BigInt)]
        vacuums: i64,
    }
    async fn stat(pg: &mut AsyncPgConnection) -> Stat {
        diesel::sql_query(
            "SELECT n_dead_tup AS dead, vacuum_count + autovacuum_count AS vacuums \
             FROM pg_stat_user_tables WHERE relname = 'fanout_jobs'",
        )
        .get_result(pg)
        .await
        .unwrap()
    }
    let settings = test_settings();
    let url = secrecy::ExposeSecret::expose_secret(&settings.database.url).to_string();
    let _app = spawn_app_with(settings).await;
    let mut pg = AsyncPgConnection::establish(&url).await.unwrap();
    let before = stat(&mut pg).await.vacuums;
    // Jobs inserted and deleted, as publishing at a high rate leaves them
    // (one transaction, so no worker sees them).
    pg.batch_execute(
        "INSERT INTO fanout_jobs (kind, author_id, post_id, created_at_ms) \
         SELECT 'retract', 1, g, 0 FROM generate_series(1, 5000) g; \
         DELETE FROM fanout_jobs WHERE kind = 'retract' AND author_id = 1",
    )
    .await
    .unwrap();
    // Whether or not autovacuum runs (it is off on some servers, and wakes
    // once a minute), the service vacuums the table within seconds.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = stat(&mut pg).await;
        if now.vacuums > before && now.dead < 2000 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not vacuumed: {} dead rows, {} vacuums",
            now.dead,
            now.vacuums
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_big_v_with_thousands_of_active_fans_reads_them_in_pages_each_once() {
    let (engine, _settings, _cleanup) = idle_instance().await;
    let star = engine.pg().users().create_user("star").await.unwrap().id;
    let keys = engine.redis().keys().clone();
    let mut conn = redis_conn(&engine).await;
    // 11,000 fans seen lately (more than two pages of a Redis call) and
    // 1,540 seen too long ago; ids and times unordered.
    let now = feed_service::engine::now_ms();
    let mut pipe = redis::pipe();
    for i in 0..12_540i64 {
        let fan = 1_000_000 + (i * 7_919) % 12_540;
        let seen = if fan % 57 < 7 {
            now - 10_000_000_000
        } else {
            now - i
        };
        pipe.zadd(keys.active_fans(star), fan, seen).ignore();
    }
    let _: () = pipe.query_async(&mut conn).await.unwrap();
    let fans = engine
        .redis()
        .fans()
        .active_fans(star, now - 1_000_000)
        .await
        .unwrap();
    let expected: Vec<UserId> = (1_000_000..1_012_540)
        .filter(|f| f % 57 >= 7)
        .map(UserId)
        .collect();
    assert_eq!(fans.len(), expected.len());
    assert_eq!(
        fans, expected,
        "ascending, each once, the stale ones left out"
    );
    let left: i64 = redis::cmd("ZCARD")
        .arg(keys.active_fans(star))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left as usize, expected.len(), "the stale fans are dropped");
}

#[tokio::test]
async fn a_fan_out_of_many_batches_reaches_every_follower_once_through_crashes_and_new_follows() {
    // Batches of 50: each next page is read while the one before is pushed.
    let mut settings = test_settings();
    settings.feed.fanout_batch_size = 50;
    let app = Application::build(&settings).await.unwrap();
    let engine = app.engine().clone();
    let _cleanup = Cleanup::of(&settings);
    let (author, mut followers) = author_with_followers(&engine, 230).await;
    let post = engine
        .posts()
        .publish_at(UserId(author), &PostBody::parse("p").unwrap(), T0 + 9_000)
        .await
        .unwrap();
    let mut lease = engine
        .fanout()
        .claim(0)
        .await
        .unwrap()
        .expect("the delivery");
    assert_eq!(
        engine.fanout().step(&mut lease, true).await.unwrap(),
        Step::More
    );
    // A worker dies after pushing a batch, before its checkpoint; new
    // followers arrive (ids past every page read so far) meanwhile.
    assert_eq!(
        engine.fanout().step(&mut lease, false).await.unwrap(),
        Step::More
    );
    drop(lease);
    for i in 0..3 {
        let f = engine
            .pg()
            .users()
            .create_user(&format!("late{i}"))
            .await
            .unwrap()
            .id;
        engine.relations().follow(f, UserId(author)).await.unwrap();
        home(&engine, f.0).await;
        followers.push(f);
    }
    let url = secrecy::ExposeSecret::expose_secret(&settings.database.url).to_string();
    let mut pg = AsyncPgConnection::establish(&url).await.unwrap();
    pg.batch_execute("UPDATE fanout_jobs SET lease_until = '-infinity'")
        .await
        .unwrap();
    run_all(&engine).await;
    assert_eq!(engine.pg().jobs().pending_jobs().await.unwrap(), 0);
    for f in &followers {
        let inbox = engine.redis().keys().inbox(*f);
        assert_eq!(
            members(&engine, &inbox).await,
            vec![post.id.to_string()],
            "{inbox}"
        );
        assert_eq!(home(&engine, f.0).await, vec![post.id], "follower {f}");
    }
}

#[tokio::test]
async fn a_delivery_left_among_the_pulled_authors_is_swept_once_done() {
    use feed_service::store::redis::state::PulledChange;
    let app = spawn_app().await;
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    app.home(&reader, 5).await;
    let post = app.publish(&author, "delivered").await;
    app.settle().await;
    let redis = app.engine.redis();
    // A `done` that failed leaves the delivery behind: every reader of the
    // author would pull its outbox for good.
    redis
        .state()
        .pulled_change(UserId(author.id), PulledChange::Add(PostId(post.id.0)))
        .await
        .unwrap();
    assert_eq!(
        redis.state().pulled_in_flight().await.unwrap(),
        vec![(UserId(author.id), vec![post.id])]
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !redis.state().pulled_in_flight().await.unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the delivery stays pulled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(app.home(&reader, 5).await, vec![post.id]);
}

#[tokio::test]
async fn background_work_stops_once_no_one_is_left_to_stop_it() {
    // A server task cancelled without a shutdown drops the sender: the
    // workers must end, not poll a closed channel forever.
    let app = spawn_app().await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let engine = app.engine.clone();
    let background = tokio::spawn(async move { engine.fanout().run_background(stopped).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !background.is_finished(),
        "the workers run while told nothing"
    );
    drop(stop);
    tokio::time::timeout(Duration::from_secs(5), background)
        .await
        .expect("the workers stop once their sender is gone")
        .expect("no worker panicked");
}
