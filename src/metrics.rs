//! Prometheus metrics, served at `GET /metrics` in the text format.
//!
//! One process-wide registry: counters and histograms are updated where the
//! work happens; the fan-out job gauges are read from PostgreSQL at scrape.

use std::sync::LazyLock;

use crate::types::{End, Fallback};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);

fn register<T: prometheus::core::Collector + Clone + 'static>(metric: T) -> T {
    // Registering twice only happens if a name is reused: a bug caught by tests.
    let _ = REGISTRY.register(Box::new(metric.clone()));
    metric
}

fn counter(name: &str, help: &str) -> IntCounter {
    register(IntCounter::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}")))
}

/// Requests by route pattern, method and status.
pub static HTTP_REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "http_requests_total",
                "HTTP requests by route, method and status",
            ),
            &["route", "method", "status"],
        )
        .expect("http_requests_total"),
    )
});

/// Request latency by route pattern and method.
pub static HTTP_LATENCY: LazyLock<HistogramVec> = LazyLock::new(|| {
    register(
        HistogramVec::new(
            HistogramOpts::new("http_request_duration_seconds", "HTTP request latency").buckets(
                vec![
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                ],
            ),
            &["route", "method"],
        )
        .expect("http_request_duration_seconds"),
    )
});

/// Fan-out jobs by state (read from PostgreSQL at scrape time).
pub static FANOUT_JOBS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register(
        IntGaugeVec::new(
            Opts::new("fanout_jobs", "Fan-out jobs: pending (waiting for a worker), running (leased, or waiting out a retry backoff), dead"),
            &["state"],
        )
        .expect("fanout_jobs"),
    )
});

/// Whether each store answered its last ping (1) or not (0), from the
/// same background refresh as the job gauges.
pub static STORE_UP: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register(
        IntGaugeVec::new(
            Opts::new(
                "store_up",
                "Whether the store (postgres, redis) answered the last ping: 1 yes, 0 no",
            ),
            &["store"],
        )
        .expect("store_up"),
    )
});

/// Records whether `store` answered its ping.
pub fn store_answered(store: &str, answered: bool) {
    STORE_UP.with_label_values(&[store]).set(answered.into());
}

/// Time from a publish's commit to the last inbox written for it.
pub static FANOUT_LAG: LazyLock<prometheus::Histogram> = LazyLock::new(|| {
    register(
        prometheus::Histogram::with_opts(
            HistogramOpts::new(
                "fanout_delivery_lag_seconds",
                "Publish commit to last inbox written",
            )
            .buckets(vec![
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                300.0,
            ]),
        )
        .expect("fanout_delivery_lag_seconds"),
    )
});

/// Entries added to inboxes by fan-out.
pub static INBOX_WRITES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "fanout_inbox_writes_total",
        "Entries added to inboxes by fan-out",
    )
});

pub static REDIS_ERRORS: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "redis_errors_total",
        "Failed Redis calls (errors and timeouts)",
    )
});

pub static REDIS_UNREPLICATED: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "redis_unreplicated_writes_total",
        "Redis Cluster writes acknowledged before a replica had them (WAIT timed out): a failover now could lose them",
    )
});

pub static REDIS_RESENT: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "redis_cluster_calls_resent_total",
        "Redis Cluster calls a master refused in a pipeline or script call of many slots (its map of the slots out of date: a resharding or failover) and that were resent alone",
    )
});

pub static REDIS_LINKS_FAILED: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "redis_read_links_failed_total",
        "Reads whose link straight to a Redis node failed (its connection, not Redis's answer: a node restarted, a network cut, no answer in time), sent again on the other connections",
    )
});

pub static PG_ERRORS: LazyLock<IntCounter> =
    LazyLock::new(|| counter("postgres_errors_total", "Failed PostgreSQL calls"));

/// Feed pages by where they were answered from, and why PostgreSQL.
pub static FEED_PAGES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "feed_pages_total",
                "Feed pages served, by source (redis, or postgres) and the reason for falling back to PostgreSQL",
            ),
            &["source", "reason"],
        )
        .expect("feed_pages_total"),
    )
});

/// Counts a page: from Redis (`None`) or from PostgreSQL, and why.
pub fn page_served(fallback: Option<Fallback>) {
    let labels = match fallback {
        None => ["redis", "none"],
        Some(reason) => ["postgres", reason.as_str()],
    };
    FEED_PAGES.with_label_values(&labels).inc();
}

/// Inboxes and outboxes rebuilt from PostgreSQL.
pub static REBUILDS: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "feed_rebuilds_total",
        "Inboxes and outboxes rebuilt from PostgreSQL",
    )
});

/// Writes committed whose Redis update was left to their fan-out job.
pub static DEFERRED_WRITES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "feed_deferred_writes_total",
        "Writes committed whose Redis update was left to their job",
    )
});

/// Live streams open on this instance.
pub static STREAMS_OPEN: LazyLock<IntGauge> = LazyLock::new(|| {
    register(
        IntGauge::new("feed_streams_open", "Live streams open on this instance")
            .expect("feed_streams_open"),
    )
});

/// Live streams ended, by why.
pub static STREAMS_ENDED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "feed_streams_ended_total",
                "Live streams ended, by reason: client_gone, or ended by the service (stalled: its client stopped reading; shutdown; account_gone; refused; overflowed)",
            ),
            &["reason"],
        )
        .expect("feed_streams_ended_total"),
    )
});

/// Posts read once for this instance's live streams.
pub static STREAM_NEWS: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "feed_stream_news_total",
        "Posts read once for this instance's live streams, whatever number of streams they went to",
    )
});

/// Posts live streams sent, by how.
pub static STREAM_POSTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "feed_stream_posts_total",
                "Posts live streams sent, by how: heard (as read once for the instance's streams) or read (from a page the stream read)",
            ),
            &["how"],
        )
        .expect("feed_stream_posts_total"),
    )
});

/// Feed list windows pages read, by how.
pub static FEED_WINDOWS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "feed_windows_total",
                "Feed list windows pages read, by how: top (a first page's), guessed (below a cursor, at the place the view last left the list) or searched (below a cursor, its place found by a script)",
            ),
            &["how"],
        )
        .expect("feed_windows_total"),
    )
});

/// How a page read a feed list's window.
#[derive(Debug, Clone, Copy)]
pub enum WindowRead {
    Top,
    Guessed,
    Searched,
}

impl WindowRead {
    const ALL: [WindowRead; 3] = [WindowRead::Top, WindowRead::Guessed, WindowRead::Searched];

    fn as_str(self) -> &'static str {
        match self {
            WindowRead::Top => "top",
            WindowRead::Guessed => "guessed",
            WindowRead::Searched => "searched",
        }
    }
}

/// Counts `n` windows read `how`.
pub fn windows_read(how: WindowRead, n: usize) {
    if n > 0 {
        FEED_WINDOWS
            .with_label_values(&[how.as_str()])
            .inc_by(n as u64);
    }
}

/// Windows read `how` so far by this process (tests).
pub fn windows_so_far(how: WindowRead) -> u64 {
    FEED_WINDOWS.with_label_values(&[how.as_str()]).get()
}

/// Counts a post a stream sent: `heard` or from a page read.
pub fn stream_post_sent(heard: bool) {
    STREAM_POSTS
        .with_label_values(&[if heard { "heard" } else { "read" }])
        .inc();
}

/// Counts a stream's end.
pub fn stream_ended(end: End) {
    STREAMS_ENDED.with_label_values(&[end.as_str()]).inc();
}

/// The registry in the Prometheus text format.
pub fn render() -> String {
    // Touch every metric so that each is exposed from the first scrape.
    LazyLock::force(&HTTP_REQUESTS);
    LazyLock::force(&HTTP_LATENCY);
    LazyLock::force(&FANOUT_JOBS);
    LazyLock::force(&STORE_UP);
    LazyLock::force(&FANOUT_LAG);
    LazyLock::force(&INBOX_WRITES);
    LazyLock::force(&REDIS_ERRORS);
    LazyLock::force(&PG_ERRORS);
    LazyLock::force(&REDIS_UNREPLICATED);
    LazyLock::force(&REDIS_RESENT);
    LazyLock::force(&REDIS_LINKS_FAILED);
    FEED_PAGES.with_label_values(&["redis", "none"]);
    for reason in Fallback::ALL {
        FEED_PAGES.with_label_values(&["postgres", reason.as_str()]);
    }
    LazyLock::force(&REBUILDS);
    LazyLock::force(&DEFERRED_WRITES);
    LazyLock::force(&STREAMS_OPEN);
    LazyLock::force(&STREAM_NEWS);
    for how in WindowRead::ALL {
        FEED_WINDOWS.with_label_values(&[how.as_str()]);
    }
    STREAM_POSTS.with_label_values(&["heard"]);
    STREAM_POSTS.with_label_values(&["read"]);
    for end in End::ALL {
        STREAMS_ENDED.with_label_values(&[end.as_str()]);
    }
    let mut out = Vec::new();
    let _ = TextEncoder::new().encode(&REGISTRY.gather(), &mut out);
    String::from_utf8(out).unwrap_or_default()
}
