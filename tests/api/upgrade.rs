//! Derived state never disagrees with PostgreSQL: a user PostgreSQL says is
//! big-V is pulled by its followers, whatever its big-V epoch, after an
//! upgrade from a schema that had no epochs and when flagged by hand; feeds
//! an older release left in Redis in another layout are dropped and
//! rebuilt.

use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use diesel_migrations::MigrationHarness;
use feed_service::store::pg::{ensure_database, MIGRATIONS};
use feed_service::store::redis::layout;
use feed_service::types::{Entry, PostId, UserId};
use secrecy::ExposeSecret;

use crate::helpers::{ids, spawn_app, spawn_app_with, test_settings, Cleanup, TestUser};

/// Runs the first `n` embedded migrations only, as an older release did.
async fn migrate_to(url: &str, n: usize) {
    ensure_database(url).await.expect("the database is created");
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let mut conn =
            <AsyncConnectionWrapper<AsyncPgConnection> as diesel::Connection>::establish(&url)
                .expect("PostgreSQL");
        for _ in 0..n {
            conn.run_next_migration(MIGRATIONS)
                .expect("an old migration runs");
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn big_vs_of_a_database_from_before_epochs_are_pulled_after_the_upgrade() {
    // Arrange: a database at migration 2 holding a big-V (threshold 3) and
    // its five followers, as that release left it.
    let settings = test_settings();
    let url = settings.database.url.expose_secret().to_string();
    let _cleanup = Cleanup::of(&settings);
    migrate_to(&url, 2).await;
    let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
    conn.batch_execute(
        "UPDATE settings SET big_v_threshold = 3, big_v_demote_threshold = 2; \
         INSERT INTO users (id, username, follower_count, big_v) VALUES (1, 'star', 5, TRUE); \
         INSERT INTO users (id, username, following_count) \
           SELECT g, 'fan' || g, 1 FROM generate_series(2, 6) g; \
         INSERT INTO follows (follower_id, followee_id) SELECT g, 1 FROM generate_series(2, 6) g; \
         SELECT setval('users_id_seq', 6);",
    )
    .await
    .unwrap();

    // Act: today's binary starts on it (the remaining migrations run); a
    // follower reads its (empty) feed, building its state, then the big-V
    // posts.
    let app = spawn_app_with(settings).await;
    let user = |id: i64| TestUser {
        id,
        token: app.keys.mint(UserId(id), false, 3600).unwrap(),
    };
    let (star, first, second) = (user(1), user(2), user(3));
    assert!(app.home(&first, 20).await.is_empty());
    let post = app.publish(&star, "after the upgrade").await;
    app.settle().await;

    // Assert: the big-V has an epoch, and both the follower whose state was
    // built before the post and one built after see it.
    assert_eq!(
        app.user(1).await["big_v"],
        true,
        "the author is still big-V"
    );
    assert_eq!(app.home(&first, 20).await, vec![post.id]);
    assert_eq!(app.home(&second, 20).await, vec![post.id]);
    let epochs: Vec<i64> = {
        use diesel_async::RunQueryDsl;
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            big_v_epoch: i64,
        }
        diesel::sql_query("SELECT big_v_epoch FROM users WHERE big_v ORDER BY id")
            .load::<Row>(&mut conn)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.big_v_epoch)
            .collect()
    };
    assert_eq!(epochs, vec![1], "the upgrade gave the big-V an epoch");
}

#[tokio::test]
async fn a_big_v_flagged_by_sql_is_pulled_by_its_followers() {
    // Arrange: an author and two followers; the author is made big-V by
    // hand (no promotion, so its epoch stays 0) and Redis forgets
    // everything derived.
    let app = spawn_app().await;
    let author = app.create_user("hand_flagged").await;
    let readers = app.users("reader", 2).await;
    for r in &readers {
        app.follow(r, &author).await;
    }
    app.settle().await;
    let mut conn = AsyncPgConnection::establish(app.database_url())
        .await
        .unwrap();
    conn.batch_execute(&format!(
        "UPDATE users SET big_v = TRUE WHERE id = {}",
        author.id
    ))
    .await
    .unwrap();
    app.engine.redis().delete_all().await.unwrap();
    assert!(app.home(&readers[0], 20).await.is_empty());

    // Act: the big-V posts (to its active fans only, whom nobody is yet).
    let posts = vec![
        app.publish(&author, "one").await,
        app.publish(&author, "two").await,
    ];
    app.settle().await;

    // Assert: both followers scroll to both posts, newest first.
    let want: Vec<PostId> = ids(&posts).into_iter().rev().collect();
    for r in &readers {
        assert_eq!(app.home(r, 1).await, want);
    }
}

#[tokio::test]
async fn feeds_left_in_an_older_layout_are_dropped_at_startup_and_rebuilt() {
    // Arrange: a reader's inbox and its author's outbox as the sorted-set
    // layout held them (a sentinel member "" scored at the floor); a second
    // reader's inbox being built as the first list layout held it (entries,
    // then the sentinel `inf`, no mark at its head); a third's built in
    // that layout, which the current one reads as it is; and no layout
    // recorded, as an older release left Redis.
    let settings = test_settings();
    let first = spawn_app_with(settings.clone()).await;
    let author = first.create_user("author").await;
    let reader = first.create_user("reader").await;
    let building = first.create_user("building").await;
    let built = first.create_user("built").await;
    for r in [&reader, &building, &built] {
        first.follow(r, &author).await;
    }
    let posts = vec![
        first.publish(&author, "one").await,
        first.publish(&author, "two").await,
    ];
    first.settle().await;
    let redis = first.engine.redis();
    let keys = redis.keys().clone();
    let (inbox, outbox) = (
        keys.inbox(UserId(reader.id)),
        keys.outbox(UserId(author.id)),
    );
    let mut conn = redis.connection().await.unwrap();
    for key in [&inbox, &outbox] {
        let mut old = redis::pipe();
        old.atomic().del(key).zadd(key, "", "-inf");
        for p in &posts {
            old.zadd(key, p.id, p.created_at_ms);
        }
        let _: () = old.query_async(&mut conn).await.unwrap();
    }
    let list = |floor: &str| -> Vec<Vec<u8>> {
        let mut list: Vec<Vec<u8>> = posts
            .iter()
            .rev()
            .map(|p| layout::pack(&Entry::new(p.created_at_ms, p.id)))
            .collect();
        list.push(floor.as_bytes().to_vec());
        list
    };
    let (unmarked, kept) = (
        keys.inbox(UserId(building.id)),
        keys.inbox(UserId(built.id)),
    );
    for (key, floor) in [(&unmarked, "inf"), (&kept, "-inf")] {
        let mut old = redis::pipe();
        old.atomic().del(key).rpush(key, list(floor));
        let _: () = old.query_async(&mut conn).await.unwrap();
    }
    let _: () = redis::cmd("DEL")
        .arg(keys.layout())
        .query_async(&mut conn)
        .await
        .unwrap();

    // Act: today's binary starts on that Redis.
    let second = spawn_app_with(settings).await;

    // Assert: the old feeds and the unmarked build are gone, the built
    // list is kept, the layout is recorded, and every reader scrolls both
    // posts from feeds in the new layout.
    async fn kind(conn: &mut feed_service::store::redis::Conn, key: &str) -> String {
        redis::cmd("TYPE").arg(key).query_async(conn).await.unwrap()
    }
    assert_eq!(kind(&mut conn, &inbox).await, "none");
    assert_eq!(kind(&mut conn, &outbox).await, "none");
    assert_eq!(kind(&mut conn, &unmarked).await, "none");
    let held: Vec<Vec<u8>> = redis::cmd("LRANGE")
        .arg(&kept)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(held, list("-inf"));
    let recorded: String = redis::cmd("GET")
        .arg(keys.layout())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(recorded, feed_service::store::redis::layout::NAME);
    let want: Vec<PostId> = ids(&posts).into_iter().rev().collect();
    for r in [&reader, &building, &built] {
        assert_eq!(second.home(r, 1).await, want);
    }
    let own = second
        .scroll(
            &format!("/api/v1/users/{}/posts", author.id),
            &reader.token,
            1,
        )
        .await;
    assert_eq!(ids(&own), want);
    assert_eq!(kind(&mut conn, &inbox).await, "list");
}
