//! The Redis a part of the run measures: the single node of the service's
//! settings, or a Redis Cluster (`--redis-cluster`). Both are reached
//! through the service's own store, so every call the tool makes keeps to
//! one slot; both are measured against `redis-benchmark` on the same
//! Redis, in the same run.

use std::process::{Command, Stdio};

use feed_service::settings::Settings;
use feed_service::testkit::FeedRedis;
use redis::Value;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value as Json};

use crate::redis_stats;
use crate::seed::bar;

type R<T> = Result<T, String>;

/// The tool's own calls may be large (10,000 keys at once): a generous
/// timeout, which is not the service's.
const TOOL_TIMEOUT_MS: u64 = 60_000;

pub struct Target {
    /// "single node" or "cluster".
    pub name: &'static str,
    pub store: FeedRedis,
    /// `FEED_REDIS__CLUSTER_URLS` for the service; empty on a single node.
    cluster_urls: String,
    /// Where `redis-benchmark` connects (a seed node on a cluster).
    host: String,
    port: u16,
}

impl Target {
    /// The single node of `settings`.
    pub fn single(settings: &Settings, prefix: &str) -> R<Self> {
        let url = settings.redis.url.expose_secret().to_string();
        Self::new(settings, prefix, "single node", &url, String::new())
    }

    /// The cluster whose seed nodes are `urls` (comma-separated).
    pub fn cluster(settings: &Settings, prefix: &str, urls: &str) -> R<Self> {
        let first = urls.split(',').map(str::trim).find(|u| !u.is_empty());
        let first = first.ok_or("--redis-cluster: no URL given")?;
        Self::new(settings, prefix, "cluster", first, urls.to_string())
    }

    fn new(
        settings: &Settings,
        prefix: &str,
        name: &'static str,
        url: &str,
        cluster_urls: String,
    ) -> R<Self> {
        let mut redis = settings.redis.clone();
        redis.key_prefix = prefix.to_string();
        redis.timeout_ms = TOOL_TIMEOUT_MS;
        redis.cluster_urls = SecretString::from(cluster_urls.clone());
        let store = FeedRedis::new(&redis).map_err(|e| format!("{name}: {}", e.chain()))?;
        let info = redis::Client::open(url)
            .map_err(|e| format!("{name}: {e}"))?
            .get_connection_info()
            .addr()
            .clone();
        let (host, port) = match info {
            redis::ConnectionAddr::Tcp(host, port) => (host, port),
            other => {
                return Err(format!(
                    "redis-benchmark needs a TCP address, not {other:?}"
                ))
            }
        };
        Ok(Target {
            name,
            store,
            cluster_urls,
            host,
            port,
        })
    }

    pub fn is_cluster(&self) -> bool {
        self.store.is_cluster()
    }

    /// A scenario's label: as is on the single node, marked on a cluster.
    pub fn label(&self, scenario: &str) -> String {
        if self.is_cluster() {
            format!("{scenario}, cluster")
        } else {
            scenario.to_string()
        }
    }

    /// The service's environment for this Redis.
    pub fn service_env(&self) -> Vec<(&'static str, String)> {
        vec![("FEED_REDIS__CLUSTER_URLS", self.cluster_urls.clone())]
    }

    /// Deletes every key of the run's prefix that matches `pattern`.
    pub async fn delete(&self, pattern: &str) -> R<()> {
        let keys = self.store.scan(pattern).await.map_err(|e| e.chain())?;
        // UNLINK, not the store's DEL: a baseline's sorted set of a million
        // members would hold Redis past the store's timeout.
        for chunk in keys.chunks(10_000) {
            self.query(chunk, |pipe, key| {
                pipe.unlink(key);
            })
            .await?;
        }
        Ok(())
    }

    /// One command (or more) per key, grouped by slot: one pipeline on a
    /// single node, one per slot on a cluster, sent concurrently.
    pub async fn query(
        &self,
        keys: &[String],
        add: impl Fn(&mut redis::Pipeline, &str),
    ) -> R<Vec<Value>> {
        self.store
            .query_per_slot(keys, add)
            .await
            .map_err(|e| format!("{}: {}", self.name, e.chain()))
    }

    /// Runs `redis-benchmark -q` with `args` (with `--cluster` on a
    /// cluster, where it gives each node's clients keys of that node's
    /// slots in place of `{tag}`) and returns its requests per second.
    fn benchmark(&self, args: &[&str], label: &str) -> R<f64> {
        let b = bar(1, &self.label(label));
        let mut cmd = Command::new("redis-benchmark");
        if self.is_cluster() {
            cmd.arg("--cluster");
        }
        let out = cmd
            .arg("-h")
            .arg(&self.host)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-q")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("redis-benchmark (Debian's redis-tools): {e}"))?;
        b.finish();
        let text = String::from_utf8_lossy(&out.stdout);
        // `-q` prints "<command>: <n> requests per second, p50=…", the line
        // rewritten with carriage returns while it runs.
        text.rsplit(['\r', '\n'])
            .filter_map(|line| {
                let (_, rest) = line.rsplit_once(": ")?;
                rest.split(" requests per second")
                    .next()?
                    .trim()
                    .parse()
                    .ok()
            })
            .next()
            .ok_or_else(|| format!("redis-benchmark {args:?} printed no rate: {text}"))
    }

    /// The fan-out baseline: a million pipelined `LPUSH`es (`-P 64`, 50
    /// clients) of new members into 1,000 lists of the run's prefix (on a
    /// cluster, a thousand per master), which so grow to about the inbox
    /// cap: the plain write of a new member into the feed layout, with none
    /// of the checks an inbox push makes (order, floor, duplicates, trim).
    pub async fn lpush_baseline(&self) -> R<f64> {
        let prefix = self.store.prefix().to_string();
        let key = format!("{prefix}bench:list:{{tag}}:__rand_int__");
        let rate = self.benchmark(
            &[
                "-P",
                "64",
                "-n",
                "1000000",
                "-r",
                "1000",
                "LPUSH",
                &key,
                "__rand_int__",
            ],
            "baseline: redis-benchmark -P 64 LPUSH",
        )?;
        self.delete(&format!("{prefix}bench:*")).await?;
        Ok(rate)
    }

    /// The fan-out's yardstick, the layout it replaced (and Mastodon's):
    /// half a million pipelined `ZADD`s (`-P 64`, 50 clients) of new
    /// members into 1,000 sorted sets of the run's prefix (on a cluster, a
    /// thousand per master) that redis-benchmark itself fills first to
    /// about 865 members each (so they hold about 865 to 1,365 while it
    /// runs, 1,100 on average). Every call writes: its member is two random
    /// numbers, one of a million a set.
    pub async fn zadd_baseline(&self) -> R<f64> {
        let prefix = self.store.prefix().to_string();
        let key = format!("{prefix}bench:zset:{{tag}}:__rand_int__");
        let zadd = |n: &'static str, member: &str, label: &str| {
            let args = [
                "-P",
                "64",
                "-n",
                n,
                "-r",
                "1000",
                "ZADD",
                &key,
                "__rand_int__",
                member,
            ];
            self.benchmark(&args, label)
        };
        zadd(
            "2000000",
            "__rand_int__",
            "baseline: filling the sorted sets",
        )?;
        let rate = zadd(
            "500000",
            "__rand_int__:__rand_int__",
            "baseline: redis-benchmark -P 64 ZADD",
        )?;
        self.delete(&format!("{prefix}bench:*")).await?;
        Ok(rate)
    }

    /// The read baseline: `ZREVRANGEBYSCORE key +inf -inf LIMIT 0 20` (50
    /// clients) on sorted sets of about 1,000 members, which
    /// redis-benchmark itself fills first (on a cluster, one per master):
    /// its rate, and Redis's CPU per range read (`INFO cpu` around the run,
    /// divided by the `ZREVRANGEBYSCORE` calls `INFO commandstats` counts),
    /// the unit of a page's Redis budget.
    pub async fn zrev_baseline(&self) -> R<ReadBaseline> {
        let prefix = self.store.prefix().to_string();
        let key = format!("{prefix}bench:zrev:{{tag}}");
        self.benchmark(
            &[
                "-P",
                "64",
                "-n",
                "30000",
                "-r",
                "1000",
                "ZADD",
                &key,
                "__rand_int__",
                "__rand_int__",
            ],
            "baseline: filling the read baseline's sets",
        )?;
        let read = async {
            self.benchmark(
                &[
                    "-c",
                    "50",
                    "-n",
                    "200000",
                    "ZREVRANGEBYSCORE",
                    &key,
                    "+inf",
                    "-inf",
                    "LIMIT",
                    "0",
                    "20",
                ],
                "baseline: redis-benchmark ZREVRANGEBYSCORE",
            )
        };
        let (per_sec, stats) = redis_stats::around(&self.store, self.name, read).await?;
        self.delete(&format!("{prefix}bench:*")).await?;
        let reads = stats.calls("zrevrangebyscore").max(1) as f64;
        Ok(ReadBaseline {
            per_sec: per_sec?,
            cpu_usec_per_read: stats.cpu_usec / reads,
        })
    }
}

/// The fan-out's baselines: pipelined `ZADD`s of new members (its
/// yardstick) and `LPUSH`es, per second.
#[derive(Debug, Clone, Copy)]
pub struct WriteBaselines {
    pub zadd: f64,
    pub lpush: f64,
}

/// One run of the read baseline.
#[derive(Debug, Clone, Copy)]
pub struct ReadBaseline {
    /// `ZREVRANGEBYSCORE` calls per second.
    pub per_sec: f64,
    /// Redis CPU microseconds per call (user + system, all nodes).
    pub cpu_usec_per_read: f64,
}

impl ReadBaseline {
    /// The mean of two runs (before and after the reads).
    pub fn mean(a: ReadBaseline, b: ReadBaseline) -> ReadBaseline {
        ReadBaseline {
            per_sec: (a.per_sec + b.per_sec) / 2.0,
            cpu_usec_per_read: (a.cpu_usec_per_read + b.cpu_usec_per_read) / 2.0,
        }
    }
}

/// The baselines of one Redis, as the report shows them.
pub fn baselines(writes: WriteBaselines, before: ReadBaseline, after: ReadBaseline) -> Json {
    let mean = ReadBaseline::mean(before, after);
    json!({
        "zadd_pipelined_per_sec": writes.zadd,
        "lpush_pipelined_per_sec": writes.lpush,
        "zrevrangebyscore_per_sec_before_reads": before.per_sec,
        "zrevrangebyscore_per_sec_after_reads": after.per_sec,
        "zrevrangebyscore_per_sec": mean.per_sec,
        "zrevrangebyscore_redis_cpu_usec_per_read_before_reads": before.cpu_usec_per_read,
        "zrevrangebyscore_redis_cpu_usec_per_read_after_reads": after.cpu_usec_per_read,
        "zrevrangebyscore_redis_cpu_usec_per_read": mean.cpu_usec_per_read,
    })
}
