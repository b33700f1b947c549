//! Live streams at scale: `--streams` readers hold `GET /api/v1/feed/stream`
//! open (followers of the mega big-V; the first ones follow the ordinary
//! author with the most followers too), then that
//! ordinary author and the mega big-V publish, a post every 200 ms, and
//! every event's delivery is timed: from the publish's answer to the
//! event's arrival.
//!
//! Premises, checked before anything is reported: every stream opened;
//! each post reached every open stream of its author's followers; Redis
//! carried one or two hints per post (`INFO commandstats`: `publish` or
//! `spublish` calls), not one per follower; and the service read each
//! post for its streams at most once per hint (`feed_stream_news_total`),
//! not once per stream. Goals: an event within a second of its publish
//! sent (p99), a publish answered within 5 ms (p99). The account gives the
//! CPU each delivered event cost the service, Redis and PostgreSQL, and the
//! service's own counts over the publishes (its `/metrics`): pages by
//! source and fallback reason, failed Redis and PostgreSQL calls, deferred
//! writes; a publish that fails reports them too.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use diesel_async::AsyncPgConnection;
use feed_service::testkit::Tokens;
use feed_service::types::UserId;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::cpu::Cpu;
use crate::redis_stats;
use crate::report::Latency;
use crate::seed::{self, bar, Layout};
use crate::target::Target;
use crate::Options;

type R<T> = Result<T, String>;

/// Streams opened at a time while the run sets up.
const OPENING: usize = 200;

/// Time between two posts of one author.
const EVERY: Duration = Duration::from_millis(200);

/// An event a stream received: the post's id, and when.
type Arrival = (i64, Instant);

/// Publish sent → event, p99, at most (a person expects a post within a
/// second).
pub const DELIVERY_P99_MS: f64 = 1000.0;

/// A publish's answer, p99, below this while the streams run.
pub const PUBLISH_P99_MS: f64 = 5.0;

/// The real-time priority (`SCHED_FIFO`) of the thread that publishes. It
/// stands for a client on a machine of its own: whatever else runs on the
/// same cores (the tool's own parsing of the streams' events, say) must not
/// delay its reading of an answer that has arrived, a delay of the tool
/// and not of the service. (Linux's scheduler lets a woken thread of the
/// usual class wait out the slice of the thread it finds running, some
/// milliseconds, however nice it is.) Taken if the system allows it
/// (root); the report says whether it was. The thread sends a request
/// every 200 ms: it takes next to nothing from the service.
const PUBLISHER_PRIORITY: i32 = 1;

/// One row of the streams' table: its label, latencies, and its goal (the
/// target, and whether it was met) if it has one.
pub type StreamRow = (String, Latency, Option<(String, bool)>);

/// The streams' rows per author class, and the run's account (streams,
/// deliveries, hints, CPU per event). `service` is the service's process.
pub async fn streams(
    o: &Options,
    l: &Layout,
    pg: &mut AsyncPgConnection,
    (base, service): (&str, u32),
    keys: &Tokens,
    target: &Target,
) -> R<(Vec<StreamRow>, Value, Vec<String>)> {
    let author = seed::ordinary_author(pg, l, true).await?;
    let wanted = o.streams.min(o.mega_followers as usize);
    // The author's followers that follow the mega big-V too (the read
    // cohorts' readers do not), then more of the mega big-V's, up to
    // `wanted`: every stream's reader follows the mega big-V.
    let fans = seed::ids(
        pg,
        &format!(
            "SELECT f.follower_id AS n FROM follows f WHERE f.followee_id = {author} \
             AND EXISTS (SELECT 1 FROM follows m WHERE m.follower_id = f.follower_id \
                         AND m.followee_id = {mega}) \
             ORDER BY f.follower_id LIMIT {wanted}",
            mega = l.mega
        ),
    )
    .await?;
    let more = seed::ids(
        pg,
        &format!(
            "SELECT follower_id AS n FROM follows WHERE followee_id = {} \
             AND follower_id NOT IN (SELECT follower_id FROM follows WHERE followee_id = {author}) \
             ORDER BY follower_id LIMIT {}",
            l.mega,
            wanted - fans.len()
        ),
    )
    .await?;
    let mut readers = fans.clone();
    readers.extend(more);
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .map_err(|e| e.to_string())?;
    let (arrivals, mut arrived) = mpsc::unbounded_channel::<Arrival>();
    let (ready, mut opened) = mpsc::unbounded_channel::<bool>();
    let b = bar(readers.len() as u64, "streams opened");
    let mut tasks = Vec::with_capacity(readers.len());
    for chunk in readers.chunks(OPENING) {
        for &reader in chunk {
            let token = keys.user(UserId(reader), 3600).map_err(|e| e.chain())?;
            let (client, url) = (client.clone(), format!("{base}/api/v1/feed/stream"));
            let (arrivals, ready) = (arrivals.clone(), ready.clone());
            tasks.push(tokio::spawn(async move {
                listen(client, url, token, arrivals, ready).await
            }));
        }
        // Let this chunk open before the next.
        for _ in 0..chunk.len() {
            match tokio::time::timeout(Duration::from_secs(60), opened.recv()).await {
                Ok(Some(ok)) => {
                    if !ok {
                        b.finish();
                        return Err("a stream did not open".into());
                    }
                    b.inc(1);
                }
                _ => {
                    b.finish();
                    return Err("streams did not open within a minute".into());
                }
            }
        }
    }
    b.finish();
    drop(arrivals);
    let mega_followers = seed::count(
        pg,
        &format!(
            "SELECT follower_count AS n FROM users WHERE id = {}",
            l.mega
        ),
    )
    .await?;
    let author_followers = seed::count(
        pg,
        &format!("SELECT follower_count AS n FROM users WHERE id = {author}"),
    )
    .await?;
    let classes = [
        (
            author,
            fans.len(),
            target.label(&format!("stream delivery, {author_followers} followers")),
        ),
        (
            l.mega,
            readers.len(),
            target.label(&format!(
                "stream delivery, big-V of {mega_followers} followers"
            )),
        ),
    ];
    let mut authors = Vec::with_capacity(classes.len());
    for (class, (who, _, label)) in classes.iter().enumerate() {
        let token = keys.user(UserId(*who), 3600).map_err(|e| e.chain())?;
        authors.push((class, token, label.clone()));
    }
    let posts = o.stream_posts;
    let publish = publish_apart(base.to_string(), authors, posts, PUBLISHER_PRIORITY);
    let counted_before = counters(&client, base).await?;
    let cpu_before = Cpu::now(service);
    let (published, redis) = redis_stats::around(&target.store, target.name, publish).await?;
    let counted = since(&counted_before, &counters(&client, base).await?);
    let (published, publisher_real_time) =
        published.map_err(|e| format!("{e} (the service counted meanwhile: {counted})"))?;
    // Deliveries still on their way come in; then the streams close.
    let expected: usize = classes.iter().map(|(_, n, _)| n * posts).sum();
    let mut got: Vec<Arrival> = Vec::with_capacity(expected);
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < expected && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), arrived.recv()).await {
            Ok(Some(a)) => got.push(a),
            _ => break,
        }
    }
    // Per event, in microseconds (the publishes' own work included).
    let cpu = cpu_before.per(Cpu::now(service), got.len() as f64);
    let cpu_per_event_us = json!({
        "service": cpu.service * 1000.0, "redis": cpu.redis * 1000.0,
        "postgres": cpu.postgres * 1000.0, "tool": cpu.tool * 1000.0,
    });
    for t in tasks {
        t.abort();
    }
    let mut lat: Vec<Vec<f64>> = vec![Vec::new(); classes.len()];
    // From the publish sent: what a reader waits whatever the publish's
    // own answer took (which the herd of reads may delay).
    let mut from_sent: Vec<Vec<f64>> = vec![Vec::new(); classes.len()];
    let mut answers: Vec<Vec<f64>> = vec![Vec::new(); classes.len()];
    for &(class, sent, answered) in published.values() {
        answers[class].push(ms(answered - sent));
    }
    let mut delivered = vec![0usize; classes.len()];
    let mut early = 0;
    for (id, at) in got {
        let Some(&(class, sent, answered)) = published.get(&id) else {
            continue;
        };
        delivered[class] += 1;
        from_sent[class].push(ms(at.saturating_duration_since(sent)));
        match at.checked_duration_since(answered) {
            Some(d) => lat[class].push(ms(d)),
            // The event beat the publish's answer to the tool.
            None => {
                early += 1;
                lat[class].push(0.0);
            }
        }
    }
    let hints = redis.calls("publish") + redis.calls("spublish");
    // Each post is hinted by its publish; its delivery job hints it again
    // when it writes an outbox entry the publish could not (a deferred
    // write, an outbox rebuilt meanwhile): one or two per post, never one
    // per follower.
    let deferred = counted["feed_deferred_writes_total"]
        .as_f64()
        .unwrap_or(0.0) as u64;
    let mut failures = Vec::new();
    let mut rows = Vec::new();
    let mut account = Vec::new();
    for (class, (who, streams, label)) in classes.iter().enumerate() {
        let want = streams * posts;
        if delivered[class] < want {
            failures.push(format!(
                "{label}: {} of {want} events arrived ({streams} streams, {posts} posts)",
                delivered[class]
            ));
        }
        account.push(json!({
            "scenario": label, "author": who, "streams": streams, "posts": posts,
            "events_expected": want, "events_arrived": delivered[class],
        }));
        let seconds = posts as f64 * EVERY.as_secs_f64();
        let missing = want - delivered[class].min(want);
        rows.push((
            label.clone(),
            Latency::of(lat[class].clone(), missing, seconds),
            None,
        ));
        let sent = Latency::of(from_sent[class].clone(), missing, seconds);
        let met = sent.p99_ms <= DELIVERY_P99_MS && missing == 0;
        rows.push((
            format!("{label}, from the publish sent"),
            sent,
            Some((format!("p99 ≤ {DELIVERY_P99_MS} ms, every event"), met)),
        ));
        let answered = Latency::of(answers[class].clone(), 0, seconds);
        let met = answered.p99_ms < PUBLISH_P99_MS;
        rows.push((
            format!("{label}: its publish, {} streams open", readers.len()),
            answered,
            Some((format!("p99 < {PUBLISH_P99_MS} ms"), met)),
        ));
    }
    let posts_published = published.len() as u64;
    if hints < posts_published || hints > 2 * posts_published {
        failures.push(format!(
            "streams: Redis carried {hints} hints for {posts_published} posts \
             (one or two each expected; deferred writes: {deferred})"
        ));
    }
    // Each hint's post is read once for all the streams, never per stream.
    let news = counted["feed_stream_news_total"].as_f64().unwrap_or(0.0) as u64;
    if news > hints {
        failures.push(format!(
            "streams: the service read {news} posts for its streams on {hints} hints"
        ));
    }
    let account = json!({
        "streams_open": readers.len(),
        "hints": hints,
        "posts_read_for_the_streams": news,
        "cpu_per_event_us": cpu_per_event_us,
        "posts": published.len(),
        "deferred_writes": deferred,
        "events_before_the_publish_answer": early,
        "publisher_real_time": publisher_real_time,
        "service_counted": counted,
        "classes": account,
    });
    Ok((rows, account, failures))
}

/// One stream: sends `true` on `ready` once open (`false` if it could not
/// open), then each post event's id and arrival time.
async fn listen(
    client: reqwest::Client,
    url: String,
    token: String,
    arrivals: mpsc::UnboundedSender<Arrival>,
    ready: mpsc::UnboundedSender<bool>,
) {
    let res = match client.get(&url).bearer_auth(&token).send().await {
        Ok(res) if res.status().is_success() => res,
        _ => {
            let _ = ready.send(false);
            return;
        }
    };
    let mut body = res.bytes_stream();
    let mut buf = String::new();
    let mut open = false;
    while let Some(Ok(chunk)) = body.next().await {
        let now = Instant::now();
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let event = block.lines().find_map(|l| l.strip_prefix("event: "));
            match event {
                Some("open") if !open => {
                    open = true;
                    let _ = ready.send(true);
                }
                Some("post") => {
                    let id = block
                        .lines()
                        .find_map(|l| l.strip_prefix("data: "))
                        .and_then(|d| serde_json::from_str::<Value>(d).ok())
                        .and_then(|v| v["id"].as_i64());
                    if let Some(id) = id {
                        let _ = arrivals.send((id, now));
                    }
                }
                _ => {}
            }
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Publishes `posts` posts for each author (its class, token and label),
/// one every [`EVERY`], from a thread and runtime of their own, at real-time
/// `priority` if the system allows it, as a client apart from the streams'
/// readers would: its answers are timed without waiting behind the tool's
/// own parsing of the streams' events. Per post: its author's class, when
/// its publish was sent and when its answer came; and whether the thread
/// ran at that priority.
async fn publish_apart(
    base: String,
    authors: Vec<(usize, String, String)>,
    posts: usize,
    priority: i32,
) -> R<(HashMap<i64, (usize, Instant, Instant)>, bool)> {
    let run = async move {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .map_err(|e| e.to_string())?;
        let mut published = HashMap::new();
        for (class, token, label) in &authors {
            let b = bar(posts as u64, label);
            for _ in 0..posts {
                let sent = Instant::now();
                let res = client
                    .post(format!("{base}/api/v1/posts"))
                    .bearer_auth(token)
                    .json(&json!({"body": "stream probe"}))
                    .send()
                    .await
                    .map_err(|e| format!("publishing: {e}"))?;
                let at = Instant::now();
                let post: Value = res.json().await.map_err(|e| format!("publishing: {e}"))?;
                let id = post["id"]
                    .as_i64()
                    .ok_or_else(|| format!("a publish answered {post}"))?;
                published.insert(id, (*class, sent, at));
                b.inc(1);
                tokio::time::sleep(EVERY).await;
            }
            b.finish();
        }
        R::Ok(published)
    };
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let real_time = run_in_real_time(priority);
        let out = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
            .and_then(|rt| rt.block_on(run))
            .map(|published| (published, real_time));
        let _ = done.send(out);
    });
    result
        .await
        .map_err(|_| "the publishing thread ended without an answer".to_string())?
}

/// The service's counters the account reports (`/metrics`), each series
/// by its name and labels.
const COUNTED: [&str; 7] = [
    "feed_pages_total",
    "feed_stream_news_total",
    "feed_stream_posts_total",
    "feed_deferred_writes_total",
    "redis_errors_total",
    "postgres_errors_total",
    // The publishes' latency inside the service, beside the tool's own.
    "http_request_duration_seconds_bucket{method=\"POST\",route=\"/api/v1/posts\"",
];

/// Runs the calling thread at real-time `priority` (`SCHED_FIFO`); false
/// if the system refused.
fn run_in_real_time(priority: i32) -> bool {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: a plain system call on the calling thread, with a parameter
    // that lives through it.
    unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) == 0 }
}

/// The service's [`COUNTED`] series now.
pub async fn counters(client: &reqwest::Client, base: &str) -> R<BTreeMap<String, f64>> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .map_err(|e| format!("reading /metrics: {e}"))?
        .text()
        .await
        .map_err(|e| format!("reading /metrics: {e}"))?;
    let series: BTreeMap<String, f64> = text
        .lines()
        .filter(|l| COUNTED.iter().any(|name| l.starts_with(name)))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.trim().parse().ok()?))
        })
        .collect();
    if !series.contains_key("feed_deferred_writes_total") {
        return Err("/metrics has no feed_deferred_writes_total".into());
    }
    Ok(series)
}

/// What each series counted from `before` to `after` (those that moved,
/// and the deferred writes always).
fn since(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> Value {
    let moved: serde_json::Map<String, Value> = after
        .iter()
        .map(|(series, v)| (series, v - before.get(series).copied().unwrap_or(0.0)))
        .filter(|(series, d)| {
            *d != 0.0
                || ["feed_deferred_writes_total", "feed_stream_news_total"]
                    .contains(&series.as_str())
        })
        .map(|(series, d)| (series.clone(), json!(d)))
        .collect();
    Value::Object(moved)
}
