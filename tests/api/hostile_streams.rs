//! A hostile client's streams, against the service binary with its
//! resident memory measured before and after each: readers that open
//! streams and never read (replaying a large home from its bottom),
//! opens raced past the limits, malformed `Last-Event-ID`s, and WebSockets
//! that churn subscriptions or fall silent. Everything a client holds is
//! bounded, and a client that stops reading is cut.

use feed_service::types::UserId;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use feed_service::http::auth::JwtKeys;
use feed_service::settings::Settings;
use feed_service::store::redis::RedisStore;
use reqwest::StatusCode;
use secrecy::ExposeSecret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::helpers::{test_settings, Cleanup};
use crate::process::{spawn_service, Service};
use crate::stream::Events;

const MIB: u64 = 1024 * 1024;

/// Lets this process (and the service it starts) open as many files as
/// its hard limit allows: a thousand streams are two thousand sockets.
fn raise_open_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain calls on this process's limits with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// An author (user 1) with `posts` posts of `body` characters, followed by
/// `readers` readers (users 2 to readers + 1); Redis holds nothing of them
/// yet (homes are built when read). Returns the readers' tokens.
async fn seed(settings: &Settings, readers: i64, posts: i64, body: usize) -> Vec<String> {
    let url = settings.database.url.expose_secret().to_string();
    // Creating the database and its schema: the service does it; here a
    // store connection does it first.
    drop(
        feed_service::store::pg::PgStore::connect(&settings.database)
            .await
            .expect("the test database"),
    );
    let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
    let last = readers + 1;
    conn.batch_execute(&format!(
        "INSERT INTO users (id, username, follower_count) VALUES (1, 'author', {readers});
         INSERT INTO users (id, username, following_count)
           SELECT g, 'r' || g, 1 FROM generate_series(2, {last}) g;
         SELECT setval('users_id_seq', {last});
         INSERT INTO follows (follower_id, followee_id) SELECT g, 1 FROM generate_series(2, {last}) g;
         INSERT INTO posts (author_id, body, created_at_ms)
           SELECT 1, repeat('x', {body}), 1764500000000 + g FROM generate_series(1, {posts}) g;"
    ))
    .await
    .unwrap();
    let _ = RedisStore::new(&settings.redis).unwrap().delete_all().await;
    let keys = JwtKeys::from_settings(&settings.auth).unwrap();
    (2..=last)
        .map(|id| keys.mint(UserId(id), false, 3600).unwrap())
        .collect()
}

/// The service with the given extra settings (and quiet logs).
async fn service(settings: &Settings, extra: &[(&str, &str)]) -> Service {
    // Heartbeats every second: a stream whose client left is noticed at
    // its next write.
    let mut env: Vec<(&str, String)> = vec![
        ("FEED_TELEMETRY__LEVEL", "warn".to_string()),
        ("FEED_FEED__STREAM_HEARTBEAT_SECS", "1".to_string()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    spawn_service(settings, &env, Stdio::null()).await
}

/// A metric's value as the instance on `port` exports it.
async fn metric(port: u16, name: &str, labels: &str) -> f64 {
    crate::helpers::metric(&format!("http://127.0.0.1:{port}"), name, labels).await
}

/// Waits until a metric reaches `want`, or fails after `within`.
async fn metric_reaches(port: u16, name: &str, labels: &str, want: f64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let got = metric(port, name, labels).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}{{{labels}}} is {got}, not {want}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until no stream is open on the instance.
async fn no_stream_open(port: u16, within: Duration) {
    metric_reaches(port, "feed_streams_open", "", 0.0, within).await;
}

/// Says how far resident memory moved from `before` while `what` ran, and
/// fails if it grew by `budget` or more.
fn grew_less_than(svc: &Service, before: u64, budget: u64, what: &str) {
    let after = svc.resident_bytes();
    eprintln!(
        "{what}: resident {:.1} -> {:.1} MiB",
        mib(before),
        mib(after)
    );
    assert!(
        after < before + budget,
        "{what}: resident memory grew by {:.1} MiB",
        mib(after.saturating_sub(before))
    );
}

/// A connection whose client reads as little as the kernel lets it: a
/// receive buffer of 4 KiB, and nothing read past the response head.
async fn stalled(port: u16, request: &str) -> (String, TcpStream) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut stream = socket.connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut head))
        .await
        .expect("the response starts")
        .unwrap();
    (String::from_utf8_lossy(&head[..n]).into_owned(), stream)
}

/// A stream request of the home, raw.
fn stream_request(token: &str, last: Option<&str>) -> String {
    let last = last.map_or(String::new(), |l| format!("Last-Event-ID: {l}\r\n"));
    format!(
        "GET /api/v1/feed/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n{last}\r\n"
    )
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

#[tokio::test]
async fn stalled_streams_replaying_a_large_home_are_bounded_and_cut() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let tokens = seed(&settings, 4, 30_000, 140).await;
    let svc = service(&settings, &[("FEED_FEED__STREAM_STALL_SECS", "8")]).await;
    let base = format!("http://127.0.0.1:{}", svc.port);

    // A client that reads, resuming from the bottom of the home: the
    // replay is the newest `stream_replay` (500) entries, and `open` says
    // where it starts and which position it skipped.
    let (status, events) = Events::open(&base, &tokens[0], Some("0:0")).await;
    assert_eq!(status, StatusCode::OK);
    let mut events = events.unwrap();
    let open = events.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(open.event, "open");
    assert_eq!(open.data["gap"], serde_json::json!({"min": 0, "offset": 0}));
    let mut replayed = 0;
    while let Some(e) = events.next(Duration::from_secs(2)).await {
        assert_eq!(e.event, "post");
        replayed += 1;
    }
    assert_eq!(replayed, 500, "the replay is bounded");
    drop(events);
    no_stream_open(svc.port, Duration::from_secs(5)).await;

    let before = svc.resident_bytes();
    let mut held = Vec::new();
    for token in &tokens {
        for _ in 0..8 {
            let (head, conn) = stalled(svc.port, &stream_request(token, Some("0:0"))).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            held.push(conn);
        }
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stalled_rss = svc.resident_bytes();
    eprintln!(
        "32 stalled streams replaying a 30,000-post home: resident {:.1} -> {:.1} MiB",
        mib(before),
        mib(stalled_rss)
    );
    assert_eq!(metric(svc.port, "feed_streams_open", "").await, 32.0);
    assert!(
        stalled_rss < before + 32 * MIB,
        "resident memory grew by {:.1} MiB",
        mib(stalled_rss.saturating_sub(before))
    );

    // Past the stall time every one of them is cut, its connection closed.
    no_stream_open(svc.port, Duration::from_secs(20)).await;
    assert_eq!(
        metric(svc.port, "feed_streams_ended_total", "reason=\"stalled\"").await,
        32.0
    );
    for mut conn in held {
        let mut sink = vec![0u8; 1 << 16];
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match conn.read(&mut sink).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "a cut stream's connection is closed");
    }
}

/// What one stalled stream may hold in the process at most (docs/security.md,
/// "Memory a client can hold"): its buffer of events (32 KiB), the server's write
/// buffer of its connection, its task and its place in the hub.
const BUDGET_PER_STALLED_STREAM: u64 = 128 * 1024;

#[tokio::test]
async fn a_thousand_stalled_streams_stay_within_the_instance_budget() {
    raise_open_files();
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    // Posts of 2,000 characters: each stream's replay fills every buffer.
    let tokens = seed(&settings, 125, 600, 2000).await;
    let svc = service(
        &settings,
        &[
            ("FEED_FEED__STREAM_STALL_SECS", "120"),
            ("FEED_LIMITS__ENABLED", "false"),
        ],
    )
    .await;
    // Warm: pools and caches at their working size.
    for token in &tokens[..8] {
        let (_, conn) = stalled(svc.port, &stream_request(token, Some("0:0"))).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(conn);
    }
    no_stream_open(svc.port, Duration::from_secs(10)).await;
    let before = svc.resident_bytes();
    let files_before = svc.open_files();
    let mut held = Vec::new();
    for token in &tokens {
        for _ in 0..8 {
            let (head, conn) = stalled(svc.port, &stream_request(token, Some("0:0"))).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            held.push(conn);
        }
    }
    assert_eq!(held.len(), 1000);
    // Every replay has filled what it can.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = svc.resident_bytes();
    let budget = 1000 * BUDGET_PER_STALLED_STREAM;
    eprintln!(
        "1,000 stalled streams of 125 users: resident {:.1} -> {:.1} MiB (budget {:.1} MiB)",
        mib(before),
        mib(after),
        mib(budget)
    );
    assert_eq!(metric(svc.port, "feed_streams_open", "").await, 1000.0);
    // One descriptor per stream, its connection's: 10,000 streams fit a
    // limit of 20,000 open files.
    let files = svc.open_files() - files_before;
    assert!(files <= 1020, "1,000 streams hold {files} descriptors");
    assert!(
        after < before + budget,
        "1,000 stalled streams grew resident memory by {:.1} MiB",
        mib(after.saturating_sub(before))
    );
}

#[tokio::test]
async fn concurrent_opens_never_pass_a_limit() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let tokens = seed(&settings, 3, 10, 10).await;
    let svc = service(
        &settings,
        &[
            ("FEED_FEED__STREAMS_PER_USER", "8"),
            ("FEED_FEED__STREAMS_PER_ADDRESS", "12"),
            ("FEED_LIMITS__ENABLED", "false"),
        ],
    )
    .await;
    let base = format!("http://127.0.0.1:{}", svc.port);
    let before = svc.resident_bytes();
    let open_many = |token: String, n: usize| {
        let base = base.clone();
        async move {
            let opens = (0..n).map(|_| {
                let (base, token) = (base.clone(), token.clone());
                async move { Events::open(&base, &token, None).await }
            });
            futures::future::join_all(opens).await
        }
    };
    // One user, 100 opens at once: exactly its 8.
    let first = open_many(tokens[0].clone(), 100).await;
    let ok = first.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    let refused = first
        .iter()
        .filter(|(s, _)| *s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((ok, refused), (8, 92));
    // Another user from the same address: only what the address has left.
    let second = open_many(tokens[1].clone(), 100).await;
    let ok = second.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    assert_eq!(ok, 4, "12 streams per address");
    assert_eq!(metric(svc.port, "feed_streams_open", "").await, 12.0);
    drop(first);
    drop(second);
    no_stream_open(svc.port, Duration::from_secs(5)).await;
    grew_less_than(&svc, before, 16 * MIB, "200 concurrent opens");
}

#[tokio::test]
async fn malformed_or_impossible_last_event_ids_are_refused_and_hold_nothing() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let tokens = seed(&settings, 1, 10, 10).await;
    let svc = service(&settings, &[("FEED_LIMITS__ENABLED", "false")]).await;
    let client = reqwest::Client::new();
    let before = svc.resident_bytes();
    let ids = [
        "x",
        "1",
        "1:",
        ":1",
        "-1:0",
        "1:-1",
        "1:4294967296",
        "1:1:0",
        "1:1:-1",
        "1:1:x",
        "1:1:1:1",
        "１:1",
        "1764500000005:10001",
        "1764500000005:4000000000",
    ];
    for round in 0..20 {
        for id in ids {
            let res = client
                .get(format!("http://127.0.0.1:{}/api/v1/feed/stream", svc.port))
                .bearer_auth(&tokens[0])
                .header("last-event-id", id)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{id:?}");
            let body: serde_json::Value = res.json().await.unwrap();
            assert_eq!(body["error"]["code"], "bad_request", "{id:?}");
            if round == 0 {
                eprintln!("Last-Event-ID {id:?}: {}", body["error"]["message"]);
            }
        }
    }
    assert_eq!(metric(svc.port, "feed_streams_open", "").await, 0.0);
    grew_less_than(&svc, before, 8 * MIB, "220 refused opens");
}

/// A minimal WebSocket client over a raw connection (what a hostile client
/// writes: masked text frames, no answer to pings unless asked).
struct RawSocket {
    conn: TcpStream,
}

impl RawSocket {
    /// The upgrade, with `token`; the status line of the answer.
    async fn open(port: u16, token: &str) -> (String, RawSocket) {
        let request = format!(
            "GET /api/v1/streaming HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n"
        );
        let mut conn = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if conn.read(&mut byte).await.unwrap_or(0) == 0 {
                break;
            }
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let status = head.lines().next().unwrap_or_default().to_string();
        (status, RawSocket { conn })
    }

    /// Sends a text frame (masked, as a client must).
    async fn text(&mut self, text: &str) -> std::io::Result<()> {
        let payload = text.as_bytes();
        let mut frame = vec![0x81u8];
        if payload.len() < 126 {
            frame.push(0x80 | payload.len() as u8);
        } else {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        }
        frame.extend_from_slice(&[0, 0, 0, 0]);
        frame.extend_from_slice(payload);
        self.conn.write_all(&frame).await
    }

    /// Reads frames until the server closes (a close frame or the end of
    /// the connection), within `wait`; the close code if one came.
    async fn closed_within(&mut self, wait: Duration) -> Option<Option<u16>> {
        tokio::time::timeout(wait, async {
            loop {
                let mut head = [0u8; 2];
                if self.conn.read_exact(&mut head).await.is_err() {
                    return None;
                }
                let mut len = u64::from(head[1] & 0x7f);
                if len == 126 {
                    let mut b = [0u8; 2];
                    self.conn.read_exact(&mut b).await.ok()?;
                    len = u64::from(u16::from_be_bytes(b));
                } else if len == 127 {
                    let mut b = [0u8; 8];
                    self.conn.read_exact(&mut b).await.ok()?;
                    len = u64::from_be_bytes(b);
                }
                let mut payload = vec![0u8; len as usize];
                self.conn.read_exact(&mut payload).await.ok()?;
                if head[0] & 0x0f == 0x8 {
                    return payload.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]]));
                }
            }
        })
        .await
        .ok()
    }
}

#[tokio::test]
async fn websockets_are_limited_per_user_churn_is_charged_and_silence_closes_them() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let tokens = seed(&settings, 2, 10, 10).await;
    let svc = service(
        &settings,
        &[
            ("FEED_FEED__WEBSOCKETS_PER_USER", "8"),
            ("FEED_FEED__WEBSOCKET_IDLE_SECS", "3"),
            ("FEED_LIMITS__USER_READS_PER_SEC", "20"),
            ("FEED_LIMITS__USER_READ_BURST", "100"),
        ],
    )
    .await;
    let before = svc.resident_bytes();

    // Eight sockets per user; the ninth is refused before any query.
    let mut sockets = Vec::new();
    for _ in 0..8 {
        let (status, socket) = RawSocket::open(svc.port, &tokens[0]).await;
        assert!(status.contains("101"), "{status}");
        sockets.push(socket);
    }
    let (status, _) = RawSocket::open(svc.port, &tokens[0]).await;
    assert!(status.contains("429"), "the ninth socket: {status}");

    // Silent sockets (no pong to the pings) are closed after the idle time.
    for s in &mut sockets {
        let closed = s.closed_within(Duration::from_secs(10)).await;
        assert_eq!(closed, Some(Some(1001)), "a silent socket goes away");
    }
    drop(sockets);

    // Subscribe and unsubscribe at wire speed: each message is charged, and
    // past the budget the socket is closed (policy), having opened at most
    // as many streams as the budget allowed.
    let (status, mut churn) = RawSocket::open(svc.port, &tokens[1]).await;
    assert!(status.contains("101"), "{status}");
    let mut sent = 0;
    for _ in 0..2000 {
        let ok = churn
            .text(r#"{"type":"subscribe","stream":"user"}"#)
            .await
            .is_ok()
            && churn
                .text(r#"{"type":"unsubscribe","stream":"user"}"#)
                .await
                .is_ok();
        if !ok {
            break;
        }
        sent += 2;
    }
    let closed = churn.closed_within(Duration::from_secs(10)).await;
    assert_eq!(
        closed,
        Some(Some(1008)),
        "churn past the budget closes the socket ({sent} sent)"
    );
    let opened = metric(svc.port, "feed_streams_ended_total", "").await;
    assert!(opened <= 110.0, "{opened} streams were opened by the churn");
    no_stream_open(svc.port, Duration::from_secs(5)).await;
    grew_less_than(
        &svc,
        before,
        16 * MIB,
        "websocket limits, silence and churn",
    );
}
