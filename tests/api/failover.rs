//! A Redis Cluster master killed (SIGKILL) in the middle of a fan-out to
//! 100,000 inboxes and of readers' scrolls: its replica takes over, and
//! nothing is lost or repeated.

use feed_service::types::{PostId, Scope, UserId};

/// The view the feed reads here are of.
const VIEW: Scope = Scope::Author(UserId(0));
use std::process::Command;
use std::time::{Duration, Instant};

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use feed_service::store::redis::slot;
use secrecy::{ExposeSecret, SecretString};

use crate::helpers::{ids, spawn_app_with, test_settings, TestApp, TestUser};
use crate::process::{delivered_of, seed};

const FOLLOWERS: i64 = 100_000;
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/redis-cluster");

/// A 3-master, 3-replica cluster of the test's own, removed when dropped.
struct Cluster {
    dir: std::path::PathBuf,
    urls: String,
}

impl Cluster {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("feed-failover-{}", uuid::Uuid::new_v4()));
        let out = Command::new("bash")
            .arg(SCRIPT)
            .arg("start")
            .arg(&dir)
            .output()
            .expect("the cluster script runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let urls = String::from_utf8(out.stdout).unwrap().trim().to_string();
        Cluster { dir, urls }
    }

    fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    fn ports(&self) -> Vec<u16> {
        std::fs::read_to_string(self.dir.join("ports"))
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect()
    }

    /// The port of the master serving `key`, as a live node sees it.
    fn master_of(&self, key: &str) -> u16 {
        let s = slot(key.as_bytes());
        let nodes = self.cli(self.ports()[0], &["cluster", "nodes"]);
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            for range in &f[8..] {
                let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                if let (Ok(lo), Ok(hi)) = (lo.parse::<u16>(), hi.parse::<u16>()) {
                    if (lo..=hi).contains(&s) {
                        let addr = f[1].split('@').next().unwrap();
                        return addr.rsplit_once(':').unwrap().1.parse().unwrap();
                    }
                }
            }
        }
        panic!("no master serves slot {s}")
    }

    /// The port of the replica of the master at `port`.
    fn replica_of(&self, port: u16) -> u16 {
        let id = self.cli(port, &["cluster", "myid"]).trim().to_string();
        let nodes = self.cli(port, &["cluster", "nodes"]);
        let line = nodes
            .lines()
            .find(|l| l.split_whitespace().nth(3) == Some(id.as_str()))
            .expect("a replica");
        let addr = line
            .split_whitespace()
            .nth(1)
            .unwrap()
            .split('@')
            .next()
            .unwrap();
        addr.rsplit_once(':').unwrap().1.parse().unwrap()
    }

    fn signal(&self, port: u16, signal: &str) {
        let pid = std::fs::read_to_string(self.dir.join(format!("redis-{port}.pid"))).unwrap();
        let status = Command::new("kill")
            .args([signal, pid.trim()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn kill(&self, port: u16) {
        self.signal(port, "-KILL");
    }

    /// Waits until every live node reports the cluster healthy again.
    async fn wait_ok(&self, dead: u16) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let healthy = self.ports().into_iter().filter(|p| *p != dead).all(|p| {
                self.cli(p, &["cluster", "info"])
                    .contains("cluster_state:ok")
            });
            if healthy && self.master_of("x") != dead {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not fail over");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(SCRIPT)
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

/// One number from the jobs table (`n`).
async fn jobs(url: &str, sql: &str) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = AsyncPgConnection::establish(url).await.unwrap();
    let rows: Vec<N> = diesel::sql_query(sql).load(&mut conn).await.unwrap();
    rows[0].n
}

/// The jobs left: their attempts, checkpoints and last errors.
async fn job_state(url: &str) -> String {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        job: String,
    }
    let mut conn = AsyncPgConnection::establish(url).await.unwrap();
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT format('%s job %s: %s attempts, checkpoint %s, last error %s', \
            kind, id, attempts, checkpoint, coalesce(last_error, 'none')) AS job \
         FROM fanout_jobs ORDER BY id",
    )
    .load(&mut conn)
    .await
    .unwrap();
    rows.into_iter()
        .map(|r| r.job)
        .collect::<Vec<_>>()
        .join("; ")
}

async fn jobs_left(url: &str) -> i64 {
    jobs(url, "SELECT count(*) AS n FROM fanout_jobs").await
}

async fn checkpoint(url: &str) -> i64 {
    jobs(
        url,
        "SELECT coalesce(max(checkpoint), 0) AS n FROM fanout_jobs",
    )
    .await
}

async fn home(app: &TestApp, reader: &TestUser, size: u32) -> Vec<PostId> {
    ids(&app.scroll("/api/v1/feed", &reader.token, size).await)
}

#[tokio::test]
async fn a_master_killed_mid_fan_out_and_mid_scroll_loses_and_repeats_nothing() {
    let cluster = Cluster::start();
    let mut settings = test_settings();
    settings.redis.cluster_urls = SecretString::from(cluster.urls.clone());
    settings.feed.fanout_batch_size = 1000;
    let url = settings.database.url.expose_secret().to_string();
    let app = spawn_app_with(settings.clone()).await;
    let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
    // Author 1 with 100,000 followers (2..), each inbox built and empty.
    seed(&settings, &mut conn, FOLLOWERS).await;
    drop(conn);
    // Five of them also follow a second author with 40 posts.
    let other = app.create_user("other").await;
    let readers: Vec<TestUser> = (2..7)
        .map(|id| TestUser {
            id,
            token: app.keys.mint(UserId(id), false, 3600).unwrap(),
        })
        .collect();
    for r in &readers {
        app.follow(r, &other).await;
    }
    let mut expected = Vec::new();
    for i in 0..40 {
        expected.insert(0, app.publish(&other, &format!("older {i}")).await.id);
    }
    app.settle().await;
    let author = TestUser {
        id: 1,
        token: app.keys.mint(UserId(1), false, 3600).unwrap(),
    };
    let post = app.publish(&author, "to a hundred thousand").await;
    expected.insert(0, post.id);

    // Mid fan-out, the master of the first reader's inbox dies.
    let deadline = Instant::now() + Duration::from_secs(120);
    while checkpoint(&url).await == 0 {
        assert!(Instant::now() < deadline, "the fan-out did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let victim = cluster.master_of(&app.engine.redis().keys().inbox(UserId(readers[0].id)));
    cluster.kill(victim);
    // Readers scroll while it fails over (pages fall back to PostgreSQL
    // while the slots are down), and new posts keep coming.
    let scrolls = readers.iter().map(|r| home(&app, r, 7));
    let more = async {
        let mut during = Vec::new();
        for i in 0..5 {
            during.insert(0, app.publish(&other, &format!("during {i}")).await.id);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        during
    };
    let (seen, during) = futures::future::join(futures::future::join_all(scrolls), more).await;
    // Each scroll: every post older than it once, newest first (posts
    // published while it ran show only if they came before its first page).
    for (r, seen) in readers.iter().zip(&seen) {
        let (fresh, old) = seen.split_at(seen.len().saturating_sub(expected.len()));
        assert_eq!(old, &expected[..], "reader {}", r.id);
        assert_eq!(
            fresh,
            &during[during.len() - fresh.len()..],
            "reader {}",
            r.id
        );
    }
    cluster.wait_ok(victim).await;

    // The fan-out finishes: every inbox holds the post, once.
    let deadline = Instant::now() + Duration::from_secs(240);
    while jobs_left(&url).await > 0 {
        if Instant::now() >= deadline {
            panic!("the fan-out did not finish: {}", job_state(&url).await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let d = delivered_of(&settings, FOLLOWERS, post.id.0, 1).await;
    assert_eq!(
        (d.with_post, d.gone),
        (FOLLOWERS, 0),
        "inboxes holding the post, and inboxes gone: every inbox holds it \
         (one that exists without it lost a push; one gone was dropped)"
    );
    // And after the failover every feed is complete.
    let all: Vec<PostId> = during.iter().chain(&expected).copied().collect();
    for r in &readers {
        assert_eq!(home(&app, r, 9).await, all, "reader {}", r.id);
    }
}

#[tokio::test]
async fn a_write_waits_for_a_replica_and_one_that_cannot_is_counted() {
    let cluster = Cluster::start();
    let mut settings = test_settings();
    settings.redis.cluster_urls = SecretString::from(cluster.urls.clone());
    let app = spawn_app_with(settings).await;
    let author = app.create_user("author").await;
    app.publish(&author, "replicated").await;
    let unreplicated = || feed_service::metrics::REDIS_UNREPLICATED.get();
    // The replica of the author's outbox stops (SIGSTOP): the next publish
    // waits for it, in vain, and is counted, but still succeeds.
    let master = cluster.master_of(&app.engine.redis().keys().outbox(UserId(author.id)));
    let replica = cluster.replica_of(master);
    let before = unreplicated();
    cluster.signal(replica, "-STOP");
    let post = app.publish(&author, "not on a replica yet").await;
    cluster.signal(replica, "-CONT");
    assert!(unreplicated() > before, "the unreplicated write is counted");
    let (items, _) = app
        .page(
            &format!("/api/v1/users/{}/posts", author.id),
            &app.admin,
            None,
            5,
        )
        .await;
    assert_eq!(items[0].id, post.id);
}

/// A cluster of its own, a store on it, and `n` complete empty inboxes of
/// readers in 30 blocks of ids (keys.rs), so on every master.
async fn empty_inboxes(n: i64) -> (Cluster, feed_service::store::redis::RedisStore, Vec<String>) {
    let cluster = Cluster::start();
    let mut settings = test_settings();
    settings.redis.cluster_urls = SecretString::from(cluster.urls.clone());
    let redis = feed_service::store::redis::RedisStore::new(&settings.redis).unwrap();
    let block = feed_service::store::redis::keys::READER_BLOCK;
    let inboxes: Vec<String> = (1..=n)
        .map(|i| redis.keys().inbox(UserId((i % 30) * block + i)))
        .collect();
    redis
        .query_per_slot(&inboxes, |pipe, key| {
            pipe.rpush(key, "-inf");
        })
        .await
        .unwrap();
    (cluster, redis, inboxes)
}

#[tokio::test]
async fn calls_sent_to_a_master_that_no_longer_serves_their_slot_are_resent_and_land() {
    // 300 readers in 30 blocks of ids (keys.rs), so on every master, ten
    // to a PUSH call.
    let (_cluster, redis, inboxes) = empty_inboxes(300).await;
    let resent = || feed_service::metrics::REDIS_RESENT.get();
    // The process believes one master serves every slot, as after a
    // resharding it has not seen: a fan-out's per-master pipeline reaches
    // the wrong master for most of its calls.
    let before = resent();
    redis.misroute_slots().await.unwrap();
    let entry = feed_service::types::Entry::new(1_700_000_000_000, PostId(42));
    // (Its count is of the calls' last runs: the client first redirects a
    // refused pipeline whole, so some calls run more than once.)
    redis
        .feeds()
        .push_same(&inboxes, &[entry], 1000, None)
        .await
        .unwrap();
    assert!(resent() > before, "the refused calls were resent");
    // Every inbox holds the entry and its sentinel, read through a wrong
    // map too.
    redis.misroute_slots().await.unwrap();
    let replies = redis
        .query_per_slot(&inboxes, |pipe, key| {
            pipe.lrange(key, 0, -1);
        })
        .await
        .unwrap();
    for (key, reply) in inboxes.iter().zip(&replies) {
        let feed = crate::helpers::feed_from(reply);
        assert_eq!(feed, Some((vec![entry], "-inf".to_string())), "{key}");
    }
}

#[tokio::test]
async fn reads_go_straight_to_the_masters_and_land_after_their_links_die_or_the_slots_move() {
    let (cluster, redis, inboxes) = empty_inboxes(90).await;
    let entries: Vec<_> = (0..3)
        .map(|i| feed_service::types::Entry::new(1_700_000_000_000 + i, PostId(40 + i)))
        .collect();
    redis
        .feeds()
        .push_same(&inboxes, &entries, 1000, None)
        .await
        .unwrap();
    // From the top and below a cursor, every window holds what was pushed.
    let read_all = || async {
        let newest: Vec<PostId> = entries.iter().rev().map(|e| e.id).collect();
        for (max, want) in [(None, &newest[..]), (Some(1_700_000_000_001), &newest[1..])] {
            let ranges = redis.feeds().ranges(VIEW, &inboxes, max, 5).await.unwrap();
            for (key, range) in inboxes.iter().zip(ranges) {
                let feed_service::types::Range::Read(read) = range else {
                    panic!("{key}: {range:?}");
                };
                let ids: Vec<PostId> = read.entries.iter().map(|e| e.id).collect();
                assert_eq!(ids, want, "{key} below {max:?}");
            }
        }
    };
    let on_links = redis.calls_on_links();
    read_all().await;
    assert!(
        redis.calls_on_links() >= on_links + 6,
        "both reads went to each of the three masters on its link"
    );
    // Every client of every master is cut off (the links among them): the
    // next reads are sent again through the cluster connection, or on new
    // links, and land.
    for port in cluster.ports() {
        cluster.cli(port, &["CLIENT", "KILL", "TYPE", "normal"]);
    }
    let mut landed = false;
    for _ in 0..20 {
        if redis.feeds().ranges(VIEW, &inboxes, None, 5).await.is_ok() {
            landed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(landed, "reads land again after the connections died");
    read_all().await;
    // Links cut from the masters' side alone: the reads on them fail, are
    // resent through the cluster connection, and land.
    let resent = redis.calls_resent();
    redis.cut_links().await;
    read_all().await;
    assert!(
        redis.calls_resent() > resent,
        "the reads on cut links were resent"
    );
    // Through a map on which one master serves every slot, the reads are
    // refused by the other two, resent, and land.
    let resent = redis.calls_resent();
    redis.misroute_slots().await.unwrap();
    read_all().await;
    assert!(
        redis.calls_resent() > resent,
        "the refused reads were resent"
    );
}
