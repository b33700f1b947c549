//! Start-up configuration, layered with the `config` crate:
//! `config/default.toml`, then `config/{FEED_ENV}.toml`, then `FEED_…`
//! environment variables with `__` between section and field
//! (`FEED_SERVER__PORT=9090`, `FEED_REDIS__KEY_PREFIX=staging:`).
//!
//! These are the process's own settings. The admin-tunable feed values
//! (thresholds, caps) live in PostgreSQL: see [`crate::engine::policy::FeedSettings`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize, Serializer};

/// The JWT secret shipped in `config/default.toml`: accepted only while the
/// service binds a loopback address, and never when `auth.allow_dev_secret`
/// is false (the production profile).
pub const DEV_JWT_SECRET: &str = "feed-service-development-secret-not-for-deployment";

/// The shortest JWT secret accepted (HS256 wants 256 bits).
pub const MIN_SECRET_BYTES: usize = 32;

/// HS256 secrets printed in public places (this project's development
/// configuration, jwt.io's examples): a token signed with one of them can
/// be minted by anyone, so the production profile refuses each of them as
/// the current and as the previous secret.
pub const PUBLIC_SECRETS: &[&str] = &[DEV_JWT_SECRET, "a-string-secret-at-least-256-bits-long"];

/// The longest statement timeout: half the life of a Redis build mark
/// (`store::redis`), so a fill never completes a newer build.
pub const MAX_STATEMENT_TIMEOUT_MS: u64 = 15_000;

/// The longest active-mark interval: half the shortest inbox idle TTL an
/// admin may set (`engine::policy`), so reads keep a reader's inbox alive.
pub const MAX_ACTIVE_MARK_INTERVAL_SECS: u64 = 1800;

/// The shortest post-cache TTL (tombstones live as long).
pub const MIN_POST_CACHE_TTL_SECS: u64 = 60;

/// Multiplexed connections to a single Redis node when `redis.pool_size`
/// is unset.
pub const DEFAULT_REDIS_POOL: usize = 4;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub redis: RedisSettings,
    pub feed: EngineSettings,
    pub auth: AuthSettings,
    pub limits: LimitSettings,
    pub metrics: MetricsSettings,
    pub telemetry: TelemetrySettings,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to bind.
    pub host: String,
    /// Port to bind; 0 picks a free one (tests do).
    pub port: u16,
    /// HTTP worker threads; 0 means one per core.
    pub workers: usize,
    /// Seconds given to in-flight requests and fan-out batches on SIGTERM.
    pub shutdown_timeout_secs: u64,
    /// A client has this long to send a request's head (ms); then 408.
    pub request_head_timeout_ms: u64,
    /// A request has this long from its head to its response, its body
    /// included (s): a client sending its body slowly gets 408.
    pub request_timeout_secs: u64,
    /// An idle kept-alive connection is closed after this long (s).
    pub keep_alive_secs: u64,
    /// Open connections per worker thread at most; more wait to be accepted.
    pub max_connections: usize,
    /// Where clients reach the service (`https://feed.example.com`), for
    /// the URLs it writes into bodies (Mastodon's instance and streaming
    /// URLs, account pages). Empty: `http://` and the request's `Host`
    /// header; forwarded headers are never read for it.
    #[serde(default)]
    pub public_url: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// PostgreSQL URL of the service's database.
    #[serde(serialize_with = "url_redacted")]
    pub url: SecretString,
    /// Create the database named in `url` when it does not exist: for
    /// development (the production profile turns it off, so that a wrong URL
    /// fails instead of starting on an empty database).
    pub create_if_missing: bool,
    /// Connections in the pool.
    pub pool_size: usize,
    /// How long a request waits for a pooled connection (ms).
    pub pool_timeout_ms: u64,
    /// `statement_timeout` set on every connection (ms).
    pub statement_timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSettings {
    /// Redis URL of a single node (used when `cluster_urls` is empty).
    #[serde(serialize_with = "url_redacted")]
    pub url: SecretString,
    /// Redis Cluster seed nodes, comma-separated (`FEED_REDIS__CLUSTER_URLS`);
    /// when set, the service runs on the cluster and `url` is unused.
    #[serde(default, serialize_with = "url_redacted")]
    pub cluster_urls: SecretString,
    /// Prepended to every key; lets several deployments (or tests) share one
    /// Redis. No `{` or `}`: they would change the keys' hash tags.
    pub key_prefix: String,
    /// Connections to a single node (default [`DEFAULT_REDIS_POOL`]), each
    /// multiplexed: a call takes the next in turn and shares it with the
    /// calls in flight, so concurrent pages' commands travel together and
    /// Redis reads many of them at once. A cluster runs on one multiplexed
    /// connection, so setting it there is refused rather than ignored.
    #[serde(default)]
    pub pool_size: Option<usize>,
    /// Timeout for getting a connection and for each command (ms).
    pub timeout_ms: u64,
}

impl RedisSettings {
    /// Connections to a single node.
    pub fn single_pool_size(&self) -> usize {
        self.pool_size.unwrap_or(DEFAULT_REDIS_POOL)
    }

    /// The cluster's seed node URLs; empty for a single node.
    pub fn cluster_nodes(&self) -> Vec<String> {
        self.cluster_urls
            .expose_secret()
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// Tuning of the feed engine that is not admin-tunable at run time.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// Followers per keyset page in fan-out, checkpointed once (its pushes
    /// go out in short pipelines, two in flight).
    pub fanout_batch_size: i64,
    /// Concurrent fan-out workers in this process.
    pub fanout_workers: usize,
    /// Niceness of the thread that runs the fan-out (0 to 19; Linux): when
    /// the cores are busy, the request threads go first.
    pub fanout_nice: i32,
    /// A worker's lease on a job (s); another instance takes over after it.
    pub fanout_lease_secs: u64,
    /// Attempts before a job is parked as dead.
    pub fanout_max_attempts: i32,
    /// A reader is recorded as an active fan at most once per this many seconds.
    pub active_mark_interval_secs: u64,
    /// How often each instance reloads the admin settings (ms).
    pub settings_refresh_ms: u64,
    /// How long a post stays in the Redis post cache (s); a page with a
    /// post no longer cached reads it from PostgreSQL.
    pub post_cache_ttl_secs: u64,
    /// Posts kept in each instance's own cache of bodies (immutable, so
    /// every instance's copy stays true; deletions are read from Redis).
    pub body_cache_posts: usize,
    /// Bytes of bodies and usernames that cache holds at most (the oldest
    /// leave first).
    pub body_cache_bytes: usize,
    /// Open live streams (`GET /api/v1/feed/stream`) one user may hold on
    /// this instance; one more answers 429.
    pub streams_per_user: usize,
    /// Open live streams this instance holds at most; one more answers 503.
    pub streams_per_instance: usize,
    /// Seconds between a stream's heartbeats (a comment line), which keep
    /// proxies from closing an idle stream and tell a client it is alive.
    pub stream_heartbeat_secs: u64,
    /// Stream reads this instance runs at once; the rest wait their turn.
    /// One big-V post wakes every stream of its fans together: unbounded,
    /// their reads outwait Redis's timeout, fall back to PostgreSQL and hold
    /// the connections a publish needs. Keep it below `database.pool_size`
    /// (`streams_per_instance` takes turns away).
    pub stream_reads: usize,
    /// Open live streams (of any kind) from one client address on this
    /// instance (its /64 for IPv6, as `limits.trusted_proxy_header`
    /// places it); one more answers 429. 0: no limit.
    pub streams_per_address: usize,
    /// A stream whose client has taken nothing for this many seconds while
    /// an event waited for room (its buffer full: the client stopped
    /// reading) is cut; the client reconnects with its last event id.
    pub stream_stall_secs: u64,
    /// Entries a stream resumed from a client's last event id replays at
    /// most: from an older position it starts below the newest this many
    /// and says where (the rest is in the feed's pages).
    pub stream_replay: usize,
    /// Mastodon streaming WebSockets one user may hold on this instance;
    /// one more is refused (429).
    pub websockets_per_user: usize,
    /// A WebSocket whose client sent nothing (a pong included: the service
    /// pings every `stream_heartbeat_secs`) for this many seconds is closed.
    pub websocket_idle_secs: u64,
    /// Follow imports one user may have running or queued at once; one
    /// more answers 429.
    pub imports_per_user: usize,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// HS256 secret shared with the app servers that mint tokens (at least
    /// 32 bytes). New tokens are signed with it.
    #[serde(serialize_with = "redacted")]
    pub jwt_secret: SecretString,
    /// The secret being rotated out: tokens signed with it are still
    /// accepted. Empty: none.
    #[serde(default, serialize_with = "maybe_redacted")]
    pub previous_jwt_secret: Option<SecretString>,
    /// Whether the development secret is accepted (with a warning, and only
    /// on a loopback address).
    pub allow_dev_secret: bool,
    /// Clock skew tolerated on `exp` and `nbf` (seconds).
    pub leeway_secs: u64,
    /// Required `iss` of tokens. Empty: not checked.
    #[serde(default)]
    pub issuer: String,
    /// Required `aud` of tokens. Empty: not checked.
    #[serde(default)]
    pub audience: String,
}

/// Request-rate limits: token buckets refilled at a rate, with a burst.
impl AuthSettings {
    /// The secret being rotated out, if one is set.
    pub fn previous_secret(&self) -> Option<&str> {
        self.previous_jwt_secret
            .as_ref()
            .map(|s| s.expose_secret())
            .filter(|s| !s.is_empty())
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSettings {
    /// Per-user limits (a user is a token's `sub`; admin tokens are exempt).
    pub enabled: bool,
    /// Reads (GET) per second and burst, per user.
    pub user_reads_per_sec: u32,
    pub user_read_burst: u32,
    /// Writes (POST, PUT, DELETE) per second and burst, per user.
    pub user_writes_per_sec: u32,
    pub user_write_burst: u32,
    /// Requests per second per client address; 0 turns the per-address
    /// limit off (behind a proxy every client shares one address).
    pub ip_per_sec: u32,
    pub ip_burst: u32,
    /// Header holding the client address as set by a trusted proxy (for
    /// example `x-forwarded-for`: its last address is used). Empty: the
    /// peer address.
    #[serde(default)]
    pub trusted_proxy_header: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSettings {
    /// Port of a listener that serves only `/metrics` (on `server.host`);
    /// 0 serves it on the main port.
    pub port: u16,
    /// If set, `/metrics` requires `Authorization: Bearer <token>`.
    #[serde(default, serialize_with = "maybe_redacted")]
    pub token: Option<SecretString>,
    /// How often the gauges read from PostgreSQL are refreshed (ms); a
    /// scrape itself makes no query.
    pub refresh_ms: u64,
}

impl MetricsSettings {
    /// The bearer token `/metrics` requires, if one is set.
    pub fn token(&self) -> Option<&str> {
        self.token
            .as_ref()
            .map(|s| s.expose_secret())
            .filter(|s| !s.is_empty())
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    /// `tracing` filter, e.g. `info` or `feed_service=debug,info`; `RUST_LOG` wins.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("configuration: {0}")]
    Load(#[from] config::ConfigError),
    #[error("configuration: {setting}: {problem}")]
    Invalid {
        setting: &'static str,
        problem: String,
    },
}

/// A secret as `config check` prints it.
const REDACTED: &str = "[redacted]";

fn redacted<S: Serializer>(_: &SecretString, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(REDACTED)
}

fn maybe_redacted<S: Serializer>(v: &Option<SecretString>, s: S) -> Result<S::Ok, S::Error> {
    match v
        .as_ref()
        .map(|v| v.expose_secret())
        .filter(|v| !v.is_empty())
    {
        Some(_) => s.serialize_str(REDACTED),
        None => s.serialize_none(),
    }
}

/// URLs with their passwords (`user:password@`) redacted, the rest shown.
fn url_redacted<S: Serializer>(v: &SecretString, s: S) -> Result<S::Ok, S::Error> {
    let shown: Vec<String> = v
        .expose_secret()
        .split(',')
        .map(|url| match (url.find("://"), url.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme + 3 && url[scheme + 3..at].contains(':') => {
                let user = url[scheme + 3..at].split(':').next().unwrap_or_default();
                format!("{}{user}:{REDACTED}{}", &url[..scheme + 3], &url[at..])
            }
            _ => url.to_string(),
        })
        .collect();
    s.serialize_str(&shown.join(","))
}

/// `value` of `setting` within `lo..=hi`.
fn within(setting: &'static str, value: u64, lo: u64, hi: u64) -> Result<(), SettingsError> {
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(invalid(
            setting,
            format!("must be from {lo} to {hi}, got {value}"),
        ))
    }
}

fn invalid(setting: &'static str, problem: impl Into<String>) -> SettingsError {
    SettingsError::Invalid {
        setting,
        problem: problem.into(),
    }
}

impl Settings {
    /// Loads from `FEED_CONFIG_DIR` (default `./config`, else the crate's own
    /// `config/`), the `FEED_ENV` overlay and the process environment.
    pub fn load() -> Result<Self, SettingsError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        Self::load_from(&config_dir(&env), &env)
    }

    /// [`Self::load`] with `overrides` (`FEED_…` names, as the command
    /// line's options give them) over the process environment.
    pub fn load_overriding(overrides: HashMap<String, String>) -> Result<Self, SettingsError> {
        let mut env: HashMap<String, String> = std::env::vars().collect();
        env.extend(overrides);
        Self::load_from(&config_dir(&env), &env)
    }

    /// Loads with an explicit directory and environment (used by tests).
    pub fn load_from(dir: &Path, env: &HashMap<String, String>) -> Result<Self, SettingsError> {
        let mut builder = config::Config::builder()
            .add_source(config::File::from(dir.join("default.toml")).required(true));
        if let Some(profile) = env.get("FEED_ENV").filter(|p| !p.is_empty()) {
            if !profile
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(invalid(
                    "FEED_ENV",
                    format!("{profile:?} is not a profile name"),
                ));
            }
            let file = dir.join(format!("{profile}.toml"));
            if !file.exists() {
                return Err(invalid(
                    "FEED_ENV",
                    format!("no configuration file {}", file.display()),
                ));
            }
            builder = builder.add_source(config::File::from(file).required(true));
        }
        // FEED_ENV and FEED_CONFIG_DIR choose files; they are not settings.
        let overrides: HashMap<String, String> = env
            .iter()
            .filter(|(k, _)| k.starts_with("FEED_") && *k != "FEED_ENV" && *k != "FEED_CONFIG_DIR")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        builder = builder.add_source(
            config::Environment::with_prefix("FEED")
                .prefix_separator("_")
                .separator("__")
                .try_parsing(true)
                .source(Some(overrides)),
        );
        let settings: Settings = builder.build()?.try_deserialize()?;
        settings.validate()?;
        Ok(settings)
    }

    /// Every setting's range or rule; the error names the first one broken.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let (srv, db, redis, feed) = (&self.server, &self.database, &self.redis, &self.feed);
        if srv.host.trim().is_empty() {
            return Err(invalid("server.host", "must not be empty"));
        }
        within("server.workers", srv.workers as u64, 0, 1024)?;
        within(
            "server.shutdown_timeout_secs",
            srv.shutdown_timeout_secs,
            1,
            3600,
        )?;
        within(
            "server.request_head_timeout_ms",
            srv.request_head_timeout_ms,
            100,
            60_000,
        )?;
        within(
            "server.request_timeout_secs",
            srv.request_timeout_secs,
            1,
            600,
        )?;
        within("server.keep_alive_secs", srv.keep_alive_secs, 1, 3600)?;
        let connections = srv.max_connections as u64;
        within("server.max_connections", connections, 1, 1_000_000)?;
        if !srv.public_url.is_empty() && public_origin(&srv.public_url).is_none() {
            return Err(invalid(
                "server.public_url",
                "must be http:// or https:// and a host (with an optional port), nothing else",
            ));
        }
        if db.url.expose_secret().trim().is_empty() {
            return Err(invalid("database.url", "must not be empty"));
        }
        if !db.url.expose_secret().starts_with("postgres") {
            return Err(invalid("database.url", "must be a postgres:// URL"));
        }
        within("database.pool_size", db.pool_size as u64, 1, 1000)?;
        within("database.pool_timeout_ms", db.pool_timeout_ms, 1, 60_000)?;
        // A fill's snapshot must not outlive the build it completes.
        within(
            "database.statement_timeout_ms",
            db.statement_timeout_ms,
            1,
            MAX_STATEMENT_TIMEOUT_MS,
        )?;
        if !redis.url.expose_secret().starts_with("redis") {
            return Err(invalid("redis.url", "must be a redis:// URL"));
        }
        let cluster = redis.cluster_nodes();
        if cluster.iter().any(|url| !url.starts_with("redis")) {
            return Err(invalid(
                "redis.cluster_urls",
                "must be a comma-separated list of redis:// URLs",
            ));
        }
        match redis.pool_size {
            Some(_) if !cluster.is_empty() => {
                return Err(invalid(
                    "redis.pool_size",
                    "applies to a single node only: a cluster runs on one multiplexed \
                     connection; leave it unset",
                ))
            }
            Some(n) => within("redis.pool_size", n as u64, 1, 1000)?,
            None => {}
        }
        if redis.key_prefix.contains(['{', '}']) {
            return Err(invalid(
                "redis.key_prefix",
                "must not contain `{` or `}` (they would change the keys' cluster hash tags)",
            ));
        }
        within("redis.timeout_ms", redis.timeout_ms, 1, 60_000)?;
        let batch = u64::try_from(feed.fanout_batch_size).unwrap_or(0);
        within("feed.fanout_batch_size", batch, 1, 100_000)?;
        within("feed.fanout_workers", feed.fanout_workers as u64, 1, 64)?;
        if !(0..=19).contains(&feed.fanout_nice) {
            return Err(invalid("feed.fanout_nice", "must be from 0 to 19"));
        }
        // Below a few seconds workers take over leases that are alive.
        within("feed.fanout_lease_secs", feed.fanout_lease_secs, 2, 3600)?;
        if !(1..=1000).contains(&feed.fanout_max_attempts) {
            return Err(invalid(
                "feed.fanout_max_attempts",
                "must be from 1 to 1000",
            ));
        }
        // A reader who reads must be touched well before its inbox expires.
        within(
            "feed.active_mark_interval_secs",
            feed.active_mark_interval_secs,
            1,
            MAX_ACTIVE_MARK_INTERVAL_SECS,
        )?;
        within(
            "feed.settings_refresh_ms",
            feed.settings_refresh_ms,
            1,
            1000,
        )?;
        // Tombstones live as long as the cache: `EXPIRE 0` would delete them.
        within(
            "feed.post_cache_ttl_secs",
            feed.post_cache_ttl_secs,
            MIN_POST_CACHE_TTL_SECS,
            366 * 24 * 3600,
        )?;
        within(
            "feed.body_cache_posts",
            feed.body_cache_posts as u64,
            0,
            10_000_000,
        )?;
        let bytes = feed.body_cache_bytes as u64;
        within("feed.body_cache_bytes", bytes, 0, 1 << 40)?;
        within(
            "feed.streams_per_user",
            feed.streams_per_user as u64,
            1,
            1000,
        )?;
        within(
            "feed.streams_per_instance",
            feed.streams_per_instance as u64,
            1,
            1_000_000,
        )?;
        within(
            "feed.stream_heartbeat_secs",
            feed.stream_heartbeat_secs,
            1,
            3600,
        )?;
        within("feed.stream_reads", feed.stream_reads as u64, 1, 1_000_000)?;
        let per_address = feed.streams_per_address as u64;
        within("feed.streams_per_address", per_address, 0, 1_000_000)?;
        within("feed.stream_stall_secs", feed.stream_stall_secs, 1, 3600)?;
        within("feed.stream_replay", feed.stream_replay as u64, 1, 100_000)?;
        let sockets = feed.websockets_per_user as u64;
        within("feed.websockets_per_user", sockets, 1, 1000)?;
        if feed.websocket_idle_secs <= feed.stream_heartbeat_secs || feed.websocket_idle_secs > 3600
        {
            return Err(invalid(
                "feed.websocket_idle_secs",
                "must be above feed.stream_heartbeat_secs (a ping's period) and at most 3600",
            ));
        }
        within(
            "feed.imports_per_user",
            feed.imports_per_user as u64,
            1,
            1000,
        )?;
        self.validate_secrets()?;
        if !matches!(self.telemetry.format.as_str(), "text" | "json") {
            return Err(invalid(
                "telemetry.format",
                format!("must be text or json, got {:?}", self.telemetry.format),
            ));
        }
        within("auth.leeway_secs", self.auth.leeway_secs, 0, 600)?;
        let l = &self.limits;
        for (name, rate, burst) in [
            (
                "limits.user_reads_per_sec",
                l.user_reads_per_sec,
                l.user_read_burst,
            ),
            (
                "limits.user_writes_per_sec",
                l.user_writes_per_sec,
                l.user_write_burst,
            ),
        ] {
            if l.enabled && (rate == 0 || burst == 0) {
                return Err(invalid(name, "rate and burst must be at least 1"));
            }
        }
        if l.ip_per_sec > 0 && l.ip_burst == 0 {
            return Err(invalid("limits.ip_burst", "must be at least 1"));
        }
        let header = &l.trusted_proxy_header;
        if !header.is_empty()
            && actix_web::http::header::HeaderName::try_from(header.as_str()).is_err()
        {
            return Err(invalid(
                "limits.trusted_proxy_header",
                "must be a header name",
            ));
        }
        within("metrics.refresh_ms", self.metrics.refresh_ms, 1, 3_600_000)?;
        if self.metrics.port != 0 && self.metrics.port == srv.port {
            return Err(invalid(
                "metrics.port",
                "must differ from server.port (or be 0)",
            ));
        }
        if let Some(token) = self.metrics.token() {
            if token.len() < 16 {
                return Err(invalid("metrics.token", "must be at least 16 bytes"));
            }
        }
        if tracing_subscriber::EnvFilter::try_new(&self.telemetry.level).is_err() {
            return Err(invalid(
                "telemetry.level",
                "must be a tracing filter (e.g. info)",
            ));
        }
        if !matches!(self.telemetry.format.as_str(), "text" | "json") {
            return Err(invalid("telemetry.format", "must be \"text\" or \"json\""));
        }
        Ok(())
    }

    /// The current and the previous JWT secret: long enough, and no public
    /// one where the profile refuses them (the development secret only on a
    /// loopback address). Where the profile refuses the development secret
    /// (production), every secret and token set must also be one no one
    /// could guess: not empty, no placeholder, not a pattern.
    fn validate_secrets(&self) -> Result<(), SettingsError> {
        if !self.auth.allow_dev_secret {
            for (name, value, make) in [
                (
                    "auth.jwt_secret",
                    Some(self.auth.jwt_secret.expose_secret()),
                    "openssl rand -base64 48",
                ),
                (
                    "auth.previous_jwt_secret",
                    self.auth.previous_secret(),
                    "openssl rand -base64 48",
                ),
                (
                    "metrics.token",
                    self.metrics.token.as_ref().map(|t| t.expose_secret()),
                    "openssl rand -base64 24",
                ),
            ] {
                let Some(value) = value else { continue };
                if let Some(why) = guessable(value) {
                    return Err(invalid(
                        name,
                        format!("{why}: this profile refuses it; make one with `{make}`"),
                    ));
                }
            }
        }
        let current = Some(self.auth.jwt_secret.expose_secret());
        for (name, secret) in [
            ("auth.jwt_secret", current),
            ("auth.previous_jwt_secret", self.auth.previous_secret()),
        ] {
            let Some(secret) = secret else { continue };
            if secret.len() < MIN_SECRET_BYTES {
                return Err(invalid(
                    name,
                    format!("must be at least {MIN_SECRET_BYTES} bytes"),
                ));
            }
            let public = PUBLIC_SECRETS.contains(&secret);
            let dev = secret == DEV_JWT_SECRET;
            if public && !(dev && self.auth.allow_dev_secret) {
                return Err(invalid(
                    name,
                    "a publicly known secret is refused in this profile: anyone could sign \
                     tokens with it; use at least 32 random bytes",
                ));
            }
            if dev && !is_loopback(&self.server.host) {
                return Err(invalid(
                    name,
                    format!(
                        "the development secret is accepted only on a loopback address, and \
                         server.host is {:?}: set FEED_AUTH__JWT_SECRET",
                        self.server.host
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether the development JWT secret is in use (start-up logs a warning).
    pub fn uses_dev_secret(&self) -> bool {
        self.auth.jwt_secret.expose_secret() == DEV_JWT_SECRET
    }
}

/// Words that make a secret read like a placeholder (or a guess), looked
/// for in its letters and digits, lower-cased.
/// (None shorter than five characters: a random secret would contain one
/// too often.)
const PLACEHOLDER_WORDS: &[&str] = &[
    "replace",
    "change",
    "example",
    "placeholder",
    "secret",
    "password",
    "passwd",
    "sample",
    "default",
    "dummy",
    "insert",
    "yourtoken",
    "yourkey",
    "fixme",
    "qwerty",
    "letmein",
    "12345",
];

/// Why `secret` could be guessed, if it could: empty, a placeholder's
/// words, too few different characters for its length, or a pattern (runs
/// of one character, or of neighbours such as `abcd`). A random string
/// (`openssl rand -base64 48`, or `-hex 32`) passes.
pub fn guessable(secret: &str) -> Option<String> {
    if secret.trim().is_empty() {
        return Some("is empty".into());
    }
    let letters: String = secret
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if let Some(word) = PLACEHOLDER_WORDS.iter().find(|w| letters.contains(*w)) {
        return Some(format!("reads like a placeholder (it says {word:?})"));
    }
    let bytes = secret.as_bytes();
    let mut counts = [0usize; 256];
    for &b in bytes {
        counts[b as usize] += 1;
    }
    let n = bytes.len() as f64;
    let entropy: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum();
    if entropy < 3.0 {
        return Some(format!(
            "repeats too few characters ({entropy:.1} bits per character)"
        ));
    }
    let neighbours = bytes
        .windows(2)
        .filter(|w| w[0].abs_diff(w[1]) <= 1)
        .count();
    if neighbours * 2 >= bytes.len().saturating_sub(1).max(1) {
        return Some("is a pattern (runs of one character or of neighbours)".into());
    }
    None
}

/// Whether `host` names a loopback address.
pub fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn config_dir(env: &HashMap<String, String>) -> PathBuf {
    if let Some(dir) = env.get("FEED_CONFIG_DIR") {
        return PathBuf::from(dir);
    }
    let local = PathBuf::from("config");
    if local.join("default.toml").exists() {
        local
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config")
    }
}

/// `public_url` as the origin URLs are built from (`scheme://host[:port]`,
/// one trailing slash allowed), or `None` when it is not one.
pub fn public_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let host = rest.strip_suffix('/').unwrap_or(rest);
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-.:[]".contains(c);
    (!host.is_empty() && host.chars().all(allowed)).then(|| format!("{scheme}://{host}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config")
    }

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_load_and_use_the_dev_secret() {
        let s = Settings::load_from(&dir(), &env(&[])).unwrap();
        assert_eq!(s.server.host, "127.0.0.1");
        assert_eq!(s.server.port, 8080);
        assert!(s.uses_dev_secret());
    }

    #[test]
    fn environment_overrides_nested_settings() {
        let s = Settings::load_from(
            &dir(),
            &env(&[
                ("FEED_SERVER__HOST", "0.0.0.0"),
                ("FEED_SERVER__PORT", "9191"),
                ("FEED_DATABASE__URL", "postgres://x@h/db"),
                ("FEED_REDIS__URL", "redis://h:1/"),
                ("FEED_REDIS__KEY_PREFIX", "abc:"),
                ("FEED_AUTH__JWT_SECRET", "0123456789abcdef0123456789abcdef"),
            ]),
        )
        .unwrap();
        assert_eq!(s.server.host, "0.0.0.0");
        assert_eq!(s.server.port, 9191);
        assert_eq!(s.database.url.expose_secret(), "postgres://x@h/db");
        assert_eq!(s.redis.url.expose_secret(), "redis://h:1/");
        assert_eq!(s.redis.key_prefix, "abc:");
        assert!(!s.uses_dev_secret());
    }

    #[test]
    fn production_refuses_the_dev_secret_and_names_the_setting() {
        let err = Settings::load_from(&dir(), &env(&[("FEED_ENV", "production")])).unwrap_err();
        assert!(err.to_string().contains("auth.jwt_secret"), "{err}");
        let ok = Settings::load_from(
            &dir(),
            &env(&[("FEED_ENV", "production"), ("FEED_AUTH__JWT_SECRET", REAL)]),
        );
        assert!(ok.is_ok(), "{ok:?}");
    }

    #[test]
    fn bad_values_name_the_setting() {
        let err =
            Settings::load_from(&dir(), &env(&[("FEED_SERVER__PORT", "eighty")])).unwrap_err();
        assert!(err.to_string().contains("port"), "{err}");
        let err = Settings::load_from(&dir(), &env(&[("FEED_SERVER__NOPE", "1")])).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let err =
            Settings::load_from(&dir(), &env(&[("FEED_REDIS__URL", "http://x")])).unwrap_err();
        assert!(err.to_string().contains("redis.url"), "{err}");
        let err = Settings::load_from(&dir(), &env(&[("FEED_ENV", "nowhere")])).unwrap_err();
        assert!(err.to_string().contains("FEED_ENV"), "{err}");
    }

    #[test]
    fn a_cluster_is_a_comma_separated_list_and_braces_in_the_prefix_are_refused() {
        let s = Settings::load_from(
            &dir(),
            &env(&[(
                "FEED_REDIS__CLUSTER_URLS",
                "redis://127.0.0.1:7001, redis://127.0.0.1:7002,",
            )]),
        )
        .unwrap();
        assert_eq!(
            s.redis.cluster_nodes(),
            ["redis://127.0.0.1:7001", "redis://127.0.0.1:7002"]
        );
        let single = Settings::load_from(&dir(), &env(&[])).unwrap();
        assert!(single.redis.cluster_nodes().is_empty());
        let err = Settings::load_from(&dir(), &env(&[("FEED_REDIS__CLUSTER_URLS", "h:1,h:2")]))
            .unwrap_err();
        assert!(err.to_string().contains("redis.cluster_urls"), "{err}");
        for prefix in ["{app}:", "app}:", "a{"] {
            let err = Settings::load_from(&dir(), &env(&[("FEED_REDIS__KEY_PREFIX", prefix)]))
                .unwrap_err();
            assert!(
                err.to_string().contains("redis.key_prefix"),
                "{prefix}: {err}"
            );
        }
    }

    #[test]
    fn the_dev_secret_works_only_on_loopback_and_secrets_are_long() {
        assert!(Settings::load_from(&dir(), &env(&[("FEED_SERVER__HOST", "::1")])).is_ok());
        let err =
            Settings::load_from(&dir(), &env(&[("FEED_SERVER__HOST", "0.0.0.0")])).unwrap_err();
        assert!(err.to_string().contains("auth.jwt_secret"), "{err}");
        let err = Settings::load_from(
            &dir(),
            &env(&[("FEED_AUTH__JWT_SECRET", "thirty-one-bytes-long-secret-xx")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("32 bytes"), "{err}");
        assert!(Settings::load_from(
            &dir(),
            &env(&[
                ("FEED_SERVER__HOST", "10.0.0.5"),
                (
                    "FEED_AUTH__JWT_SECRET",
                    "a-real-secret-of-thirty-two-bytes-or-more"
                ),
            ]),
        )
        .is_ok());
        assert!(is_loopback("127.0.0.1") && is_loopback("localhost") && is_loopback("[::1]"));
        assert!(!is_loopback("0.0.0.0") && !is_loopback("example.com"));
    }

    const REAL: &str = "q3Vt9ZrKx1Lm8PwYb4NcHd7JfGs2Ua6E";

    #[test]
    fn production_refuses_every_public_secret_current_or_previous() {
        for public in PUBLIC_SECRETS {
            for (var, name, current) in [
                ("FEED_AUTH__JWT_SECRET", "auth.jwt_secret", *public),
                (
                    "FEED_AUTH__PREVIOUS_JWT_SECRET",
                    "auth.previous_jwt_secret",
                    REAL,
                ),
            ] {
                let mut vars = vec![
                    ("FEED_ENV", "production"),
                    ("FEED_AUTH__JWT_SECRET", current),
                ];
                if var != "FEED_AUTH__JWT_SECRET" {
                    vars.push((var, public));
                }
                let err = Settings::load_from(&dir(), &env(&vars)).unwrap_err();
                assert!(err.to_string().contains(name), "{public} as {name}: {err}");
            }
        }
        // The development secret as the previous one is refused off loopback too.
        let err = Settings::load_from(
            &dir(),
            &env(&[
                ("FEED_SERVER__HOST", "0.0.0.0"),
                ("FEED_AUTH__JWT_SECRET", REAL),
                ("FEED_AUTH__PREVIOUS_JWT_SECRET", DEV_JWT_SECRET),
            ]),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("auth.previous_jwt_secret"),
            "{err}"
        );
    }

    #[test]
    fn production_refuses_placeholders_and_guessable_secrets_and_tokens() {
        let shipped = [
            "replace-with-48-random-bytes-of-openssl-rand-base64",
            "replace-with-a-random-metrics-token",
            "CHANGE_ME_CHANGE_ME_CHANGE_ME_CHANGE_ME",
            "your-secret-here-at-least-32-bytes-long",
            "example-example-example-example-example",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "abcdefghijklmnopqrstuvwxyzabcdefghij",
            "abababababababababababababababababab",
            "0123456789012345678901234567890123",
            "   ",
            "",
        ];
        for bad in shipped {
            assert!(guessable(bad).is_some(), "{bad:?} passes");
            for (var, name) in [
                ("FEED_AUTH__JWT_SECRET", "auth.jwt_secret"),
                ("FEED_AUTH__PREVIOUS_JWT_SECRET", "auth.previous_jwt_secret"),
                ("FEED_METRICS__TOKEN", "metrics.token"),
            ] {
                if bad.is_empty() && name == "auth.previous_jwt_secret" {
                    continue; // empty: no previous secret
                }
                let mut vars = vec![("FEED_ENV", "production"), ("FEED_AUTH__JWT_SECRET", REAL)];
                vars.retain(|(v, _)| *v != var);
                vars.push((var, bad));
                let err = Settings::load_from(&dir(), &env(&vars)).unwrap_err();
                assert!(err.to_string().contains(name), "{bad:?} as {name}: {err}");
            }
        }
        // What the commands the messages name make passes, many times over.
        for seed in 0..200u64 {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let base64: String = (0..64)
                .map(|_| B64[(next() % 64) as usize] as char)
                .collect();
            let hex: String = (0..64)
                .map(|_| b"0123456789abcdef"[(next() % 16) as usize] as char)
                .collect();
            let short: String = (0..32)
                .map(|_| B64[(next() % 64) as usize] as char)
                .collect();
            for good in [base64, hex, short] {
                assert_eq!(guessable(&good), None, "{good}");
            }
        }
        // Outside production, a token is only checked for length.
        assert!(Settings::load_from(
            &dir(),
            &env(&[("FEED_METRICS__TOKEN", "replace-with-a-random-metrics-token")])
        )
        .is_ok());
    }

    #[test]
    fn settings_that_would_break_the_service_quietly_are_refused_by_name() {
        for (var, value, name) in [
            (
                "FEED_FEED__FANOUT_LEASE_SECS",
                "0",
                "feed.fanout_lease_secs",
            ),
            (
                "FEED_DATABASE__STATEMENT_TIMEOUT_MS",
                "0",
                "database.statement_timeout_ms",
            ),
            (
                "FEED_DATABASE__STATEMENT_TIMEOUT_MS",
                "30000",
                "database.statement_timeout_ms",
            ),
            (
                "FEED_FEED__POST_CACHE_TTL_SECS",
                "0",
                "feed.post_cache_ttl_secs",
            ),
            (
                "FEED_FEED__ACTIVE_MARK_INTERVAL_SECS",
                "3600",
                "feed.active_mark_interval_secs",
            ),
            (
                "FEED_FEED__FANOUT_BATCH_SIZE",
                "-1",
                "feed.fanout_batch_size",
            ),
            ("FEED_FEED__FANOUT_WORKERS", "0", "feed.fanout_workers"),
            (
                "FEED_FEED__FANOUT_MAX_ATTEMPTS",
                "0",
                "feed.fanout_max_attempts",
            ),
            ("FEED_DATABASE__POOL_SIZE", "0", "database.pool_size"),
            (
                "FEED_DATABASE__POOL_TIMEOUT_MS",
                "0",
                "database.pool_timeout_ms",
            ),
            ("FEED_REDIS__POOL_SIZE", "0", "redis.pool_size"),
            ("FEED_REDIS__TIMEOUT_MS", "0", "redis.timeout_ms"),
            (
                "FEED_SERVER__SHUTDOWN_TIMEOUT_SECS",
                "0",
                "server.shutdown_timeout_secs",
            ),
            ("FEED_AUTH__LEEWAY_SECS", "601", "auth.leeway_secs"),
            (
                "FEED_LIMITS__TRUSTED_PROXY_HEADER",
                "x forwarded",
                "limits.trusted_proxy_header",
            ),
            ("FEED_METRICS__PORT", "8080", "metrics.port"),
            ("FEED_METRICS__TOKEN", "short", "metrics.token"),
            (
                "FEED_SERVER__PUBLIC_URL",
                "ftp://x.example",
                "server.public_url",
            ),
            (
                "FEED_SERVER__PUBLIC_URL",
                "https://x.example/feed",
                "server.public_url",
            ),
            ("FEED_TELEMETRY__LEVEL", "info,[", "telemetry.level"),
        ] {
            let err = Settings::load_from(&dir(), &env(&[(var, value)])).unwrap_err();
            assert!(err.to_string().contains(name), "{var}={value}: {err}");
        }
        // A cluster multiplexes one connection: a pool size there is refused.
        let cluster = ("FEED_REDIS__CLUSTER_URLS", "redis://127.0.0.1:7001");
        assert!(Settings::load_from(&dir(), &env(&[cluster])).is_ok());
        let err = Settings::load_from(&dir(), &env(&[cluster, ("FEED_REDIS__POOL_SIZE", "8")]))
            .unwrap_err();
        assert!(err.to_string().contains("redis.pool_size"), "{err}");
    }

    #[test]
    fn the_printed_configuration_redacts_every_secret() {
        let s = Settings::load_from(
            &dir(),
            &env(&[
                (
                    "FEED_DATABASE__URL",
                    "postgres://app:pg-password@db:5432/feed",
                ),
                ("FEED_REDIS__URL", "redis://:redis-password@cache:6379/"),
                ("FEED_AUTH__PREVIOUS_JWT_SECRET", REAL),
                ("FEED_METRICS__TOKEN", "a-metrics-token-of-some-length"),
            ]),
        )
        .unwrap();
        let text = serde_json::to_string(&s).unwrap();
        for secret in [
            DEV_JWT_SECRET,
            REAL,
            "pg-password",
            "redis-password",
            "a-metrics-token",
        ] {
            assert!(!text.contains(secret), "{secret} printed: {text}");
        }
        assert!(
            text.contains("postgres://app:[redacted]@db:5432/feed"),
            "{text}"
        );
        assert!(text.contains("\"fanout_lease_secs\":30"), "{text}");
    }
}
