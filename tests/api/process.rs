//! The service binary as a child process: killed with SIGKILL or stopped
//! with SIGTERM in the middle of a fan-out to 200,000 followers.

use feed_service::types::{PostId, UserId};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use diesel::sql_types::BigInt;
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use feed_service::settings::Settings;
use feed_service::store::redis::RedisStore;
use reqwest::StatusCode;
use secrecy::ExposeSecret;
use serde_json::json;

use crate::helpers::{test_settings, Cleanup};

/// The service binary as a child process, killed when dropped.
pub struct Service {
    child: Child,
    pub port: u16,
}

impl Service {
    /// Stops it as an operator would (SIGTERM) and waits until it exited.
    pub async fn terminate(mut self) {
        let term = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "did not exit after SIGTERM");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The process's resident memory, in bytes (Linux).
    pub fn resident_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the service's /proc status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        kib * 1024
    }

    /// The descriptors the process holds open (Linux).
    pub fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .expect("the service's /proc fd")
            .count()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the binary with the test's database and key prefix, the given
/// extra environment and standard output, and waits until it answers.
pub async fn spawn_service(settings: &Settings, env: &[(&str, String)], stdout: Stdio) -> Service {
    let binary = Path::new(env!("CARGO_BIN_EXE_feed-service"));
    spawn_binary(binary, settings, env, stdout).await
}

/// [`spawn_service`] with the given build of the service's binary.
pub async fn spawn_binary(
    binary: &Path,
    settings: &Settings,
    env: &[(&str, String)],
    stdout: Stdio,
) -> Service {
    spawn_binary_on(free_port(), binary, settings, env, stdout).await
}

/// [`spawn_binary`] listening on `port` (a restarted instance's).
pub async fn spawn_binary_on(
    port: u16,
    binary: &Path,
    settings: &Settings,
    env: &[(&str, String)],
    stdout: Stdio,
) -> Service {
    let mut command = Command::new(binary);
    command
        .env("FEED_SERVER__PORT", port.to_string())
        .env("FEED_DATABASE__URL", settings.database.url.expose_secret())
        .env("FEED_REDIS__URL", settings.redis.url.expose_secret())
        .env("FEED_REDIS__KEY_PREFIX", &settings.redis.key_prefix)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(stdout);
    for (name, value) in env {
        command.env(name, value);
    }
    // Service's Drop kills and waits for it.
    #[allow(clippy::zombie_processes)]
    let child = command.spawn().expect("the service binary starts");
    let service = Service { child, port };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(res) = client
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
        {
            if res.status() == StatusCode::OK {
                return service;
            }
        }
        assert!(Instant::now() < deadline, "the service did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts the binary for a fan-out test.
/// A service with fan-out batches of `batch` and leases of `lease_secs`.
async fn start(settings: &Settings, batch: i64, lease_secs: u64) -> Service {
    let env = [
        ("FEED_FEED__FANOUT_BATCH_SIZE", batch.to_string()),
        ("FEED_FEED__FANOUT_LEASE_SECS", lease_secs.to_string()),
        ("FEED_FEED__FANOUT_WORKERS", "2".to_string()),
        ("FEED_TELEMETRY__LEVEL", "warn".to_string()),
    ];
    spawn_service(settings, &env, Stdio::null()).await
}

#[derive(QueryableByName)]
struct Progress {
    #[diesel(sql_type = BigInt)]
    checkpoint: i64,
    #[diesel(sql_type = BigInt)]
    released: i64,
}

/// The push job's checkpoint and whether its lease is released (or None when done).
async fn progress(conn: &mut AsyncPgConnection) -> Option<(i64, bool)> {
    let rows: Vec<Progress> = diesel::sql_query(
        "SELECT checkpoint, (CASE WHEN lease_until = '-infinity' THEN 1 ELSE 0 END)::int8 AS released \
         FROM fanout_jobs WHERE kind = 'deliver'",
    )
    .load(conn)
    .await
    .unwrap();
    rows.into_iter()
        .next()
        .map(|p| (p.checkpoint, p.released == 1))
}

/// An author with `n` followers (ids 2..=n+1), each with an (empty) inbox,
/// and thresholds that keep the author ordinary: a pure push.
pub async fn seed(settings: &Settings, conn: &mut AsyncPgConnection, n: i64) {
    conn.batch_execute(&format!(
        "UPDATE settings SET big_v_threshold = 100000000, big_v_demote_threshold = 90000000;
         INSERT INTO users (id, username) VALUES (1, 'author');
         INSERT INTO users (id, username, following_count)
           SELECT g, 'f' || g, 1 FROM generate_series(2, {last}) g;
         SELECT setval('users_id_seq', {last});
         INSERT INTO follows (follower_id, followee_id) SELECT g, 1 FROM generate_series(2, {last}) g;
         UPDATE users SET follower_count = {n} WHERE id = 1;",
        last = n + 1
    ))
    .await
    .unwrap();
    // Every follower has read its feed once: its inbox exists (complete, empty).
    let redis = bulk_store(settings);
    for (from, to) in chunks(n) {
        let keys: Vec<String> = (from..=to).map(|i| redis.keys().inbox(UserId(i))).collect();
        redis
            .query_per_slot(&keys, |pipe, key| {
                pipe.rpush(key, "-inf");
            })
            .await
            .unwrap();
    }
}

/// A store for the tests' bulk reads and writes of inboxes (on a cluster,
/// 10,000 keys are thousands of pipelines, one per slot: more than the
/// service's timeout allows one call).
fn bulk_store(settings: &Settings) -> RedisStore {
    let mut redis = settings.redis.clone();
    redis.timeout_ms = 60_000;
    RedisStore::new(&redis).unwrap()
}

/// Follower id ranges of 10,000 (each pipeline stays short).
fn chunks(n: i64) -> Vec<(i64, i64)> {
    (0..(n + 9_999) / 10_000)
        .map(|c| (2 + c * 10_000, (2 + c * 10_000 + 9_999).min(n + 1)))
        .collect()
}

/// How many followers' inboxes hold `post`, and how many hold anything else.
async fn delivered(settings: &Settings, n: i64, post: i64) -> (i64, i64) {
    let d = delivered_of(settings, n, post, 1).await;
    (d.with_post, d.other)
}

/// What the followers' inboxes hold.
#[derive(Debug, PartialEq)]
pub struct Delivered {
    /// Inboxes holding the post.
    pub with_post: i64,
    /// Inboxes holding other than the expected posts and the sentinel.
    pub other: i64,
    /// Inboxes that no longer exist (expired, dropped or never built), as
    /// opposed to existing without the post.
    pub gone: i64,
}

/// What the followers' inboxes hold, `post` among `posts` posts expected.
pub async fn delivered_of(settings: &Settings, n: i64, post: i64, posts: i64) -> Delivered {
    let redis = bulk_store(settings);
    let mut d = Delivered {
        with_post: 0,
        other: 0,
        gone: 0,
    };
    for (from, to) in chunks(n) {
        let keys: Vec<String> = (from..=to).map(|i| redis.keys().inbox(UserId(i))).collect();
        let replies = redis
            .query_per_slot(&keys, |pipe, key| {
                pipe.lrange(key, 0, -1);
            })
            .await
            .unwrap();
        for (key, reply) in keys.iter().zip(&replies) {
            if let Some(why) = crate::helpers::sentinel_missing(reply) {
                let slot = feed_service::store::redis::slot(key.as_bytes());
                panic!("the inbox {key} (slot {slot}) has lost its sentinel: {why}");
            }
            // A feed list always holds its sentinel: none is no key.
            let Some((entries, _)) = crate::helpers::feed_from(reply) else {
                d.gone += 1;
                d.other += 1;
                continue;
            };
            if entries.iter().any(|e| e.id == PostId(post)) {
                d.with_post += 1;
            }
            if entries.len() as i64 != posts {
                d.other += 1;
            }
        }
    }
    d
}

async fn publish(settings: &Settings, port: u16) -> i64 {
    let keys =
        feed_service::http::auth::JwtKeys::new(settings.auth.jwt_secret.expose_secret().as_bytes())
            .unwrap();
    let res = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/api/v1/posts"))
        .bearer_auth(keys.mint(UserId(1), false, 600).unwrap())
        .json(&json!({"body": "to two hundred thousand"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    res.json::<serde_json::Value>().await.unwrap()["id"]
        .as_i64()
        .unwrap()
}

/// Waits until the push job has checkpointed at least one batch.
async fn wait_mid_way(conn: &mut AsyncPgConnection) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match progress(conn).await {
            Some((checkpoint, _)) if checkpoint > 0 => return checkpoint,
            Some(_) => {}
            None => panic!("the fan-out finished before it could be interrupted"),
        }
        assert!(Instant::now() < deadline, "the fan-out did not start");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn wait_done(conn: &mut AsyncPgConnection) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while progress(conn).await.is_some() {
        assert!(Instant::now() < deadline, "the fan-out did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const FOLLOWERS: i64 = 200_000;

#[tokio::test]
async fn sigkill_mid_fan_out_then_restart_delivers_to_every_follower_once() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    // A short lease: the next instance resumes soon after the kill.
    let mut first = start(&settings, 200, 2).await;
    let mut conn = AsyncPgConnection::establish(settings.database.url.expose_secret())
        .await
        .unwrap();
    seed(&settings, &mut conn, FOLLOWERS).await;
    let post = publish(&settings, first.port).await;
    wait_mid_way(&mut conn).await;
    first.child.kill().unwrap(); // SIGKILL
    first.child.wait().unwrap();
    drop(first);
    let (checkpoint, _) = progress(&mut conn)
        .await
        .expect("the job survives the crash");
    assert!(
        checkpoint < FOLLOWERS + 1,
        "killed mid-way, at follower {checkpoint}"
    );
    let (partial, _) = delivered(&settings, FOLLOWERS, post).await;
    assert!(
        partial < FOLLOWERS,
        "some inboxes still wait: {partial} delivered"
    );

    let second = start(&settings, 1000, 2).await;
    wait_done(&mut conn).await;
    let (with_post, other) = delivered(&settings, FOLLOWERS, post).await;
    assert_eq!(with_post, FOLLOWERS, "every inbox holds the post");
    assert_eq!(
        other, 0,
        "every inbox holds exactly the post and its sentinel"
    );
    drop(second);
}

#[tokio::test]
async fn sigterm_mid_fan_out_checkpoints_releases_and_exits_zero() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let n = 100_000;
    // A long lease: only the release lets the next instance resume at
    // once, and a slow batch on a busy machine does not lose it.
    let mut first = start(&settings, 200, 60).await;
    let mut conn = AsyncPgConnection::establish(settings.database.url.expose_secret())
        .await
        .unwrap();
    seed(&settings, &mut conn, n).await;
    let post = publish(&settings, first.port).await;
    wait_mid_way(&mut conn).await;
    let stopped_at = Instant::now();
    let term = Command::new("kill")
        .args(["-TERM", &first.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = loop {
        if let Some(status) = first.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopped_at.elapsed() < Duration::from_secs(30),
            "did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit status {status}");
    // Stopped between batches: checkpointed and released for others (or,
    // if it was on its last batch, finished).
    if let Some((checkpoint, released)) = progress(&mut conn).await {
        assert!(checkpoint > 0);
        assert!(released, "the lease is released");
    }
    let second = start(&settings, 1000, 2).await;
    wait_done(&mut conn).await;
    assert_eq!(delivered(&settings, n, post).await, (n, 0));
    drop(second);
}

#[tokio::test]
async fn what_a_client_sends_wrong_is_not_logged_as_an_error() {
    use std::io::{Read, Write};
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let log_path = std::env::temp_dir().join(format!("feed-log-{}.jsonl", free_port()));
    let log = std::fs::File::create(&log_path).unwrap();
    let env = [
        ("FEED_TELEMETRY__FORMAT", "json".to_string()),
        ("FEED_TELEMETRY__LEVEL", "info".to_string()),
    ];
    let service = spawn_service(&settings, &env, Stdio::from(log)).await;
    let port = service.port;
    let client = reqwest::Client::new();
    for garbage in [
        "NOT HTTP AT ALL\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nBroken header line\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: many\r\n\r\n",
        "POST /api/v1/posts HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc",
        "GET /\u{0}\u{1} HTTP/9.9\r\n\r\n",
    ] {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let _ = stream.write_all(garbage.as_bytes());
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
    }
    // And a request the service itself refuses: logged, but not as an error.
    let res = client
        .get(format!("http://127.0.0.1:{port}/api/v1/feed"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(service);
    let text = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&log_path);
    assert!(text.contains("feed service listening"), "{text}");
    assert!(text.contains("\"status\":401"), "{text}");
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("\"level\":\"ERROR\""))
        .collect();
    assert!(
        errors.is_empty(),
        "client mistakes logged as errors: {errors:#?}"
    );
}

#[test]
fn the_development_secret_does_not_start_on_a_public_address() {
    let out = Command::new(env!("CARGO_BIN_EXE_feed-service"))
        .env("FEED_SERVER__HOST", "0.0.0.0")
        .env_remove("FEED_AUTH__JWT_SECRET")
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("auth.jwt_secret"), "{err}");
    // A real secret of 32 bytes or more is fine there (checked, not run).
    let out = Command::new(env!("CARGO_BIN_EXE_feed-service"))
        .args(["token", "--user", "7"])
        .env("FEED_SERVER__HOST", "0.0.0.0")
        .env("FEED_AUTH__JWT_SECRET", "x".repeat(32))
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_feed-service"))
        .args(["token", "--user", "7"])
        .env("FEED_AUTH__JWT_SECRET", "x".repeat(31))
        .output()
        .expect("the binary runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("32 bytes"));
}

#[derive(QueryableByName)]
struct Holder {
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    instance: Option<i64>,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    attempts: i32,
}

/// The instance holding the delivery and its attempts, while it exists.
async fn holder(conn: &mut AsyncPgConnection) -> Option<(Option<i64>, i32)> {
    let rows: Vec<Holder> =
        diesel::sql_query("SELECT instance, attempts FROM fanout_jobs WHERE kind = 'deliver'")
            .load(conn)
            .await
            .unwrap();
    rows.into_iter().next().map(|h| (h.instance, h.attempts))
}

#[tokio::test]
async fn a_killed_instances_fan_out_is_resumed_by_another_within_2_s() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    // Leases far longer than the takeover: only the heartbeats can explain
    // it. Small batches: the fan-out outlasts the seconds before the kill
    // on a fast machine too.
    let mut first = start(&settings, 25, 60).await;
    let mut conn = AsyncPgConnection::establish(settings.database.url.expose_secret())
        .await
        .unwrap();
    seed(&settings, &mut conn, FOLLOWERS).await;
    let post = publish(&settings, first.port).await;
    wait_mid_way(&mut conn).await;
    let (held_by, attempts) = holder(&mut conn).await.expect("the job runs");
    assert_eq!(attempts, 1);
    // A second instance, alive beside the first: it does not take the job
    // while the first is alive.
    let second = start(&settings, 200, 60).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    if let Some(now) = holder(&mut conn).await {
        assert_eq!(now, (held_by, 1), "taken from a live instance");
    }
    first.child.kill().unwrap(); // SIGKILL
    let killed_at = Instant::now();
    first.child.wait().unwrap();
    drop(first);
    let resumed = loop {
        match holder(&mut conn).await {
            Some((by, _)) if by != held_by => break killed_at.elapsed(),
            Some(_) => {}
            None => panic!("the fan-out finished before the kill"),
        }
        assert!(killed_at.elapsed() < Duration::from_secs(30), "not resumed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    eprintln!("resumed {resumed:?} after the kill");
    assert!(
        resumed < Duration::from_secs(2),
        "resumed {resumed:?} after the kill"
    );
    assert_eq!(
        holder(&mut conn).await.map(|h| h.1),
        Some(1),
        "a takeover is no attempt"
    );
    wait_done(&mut conn).await;
    assert_eq!(delivered(&settings, FOLLOWERS, post).await, (FOLLOWERS, 0));
    drop(second);
}
