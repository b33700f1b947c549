//! The Redis store: feed ZSETs (inboxes, outboxes) and active fans.
//! Everything here is derived from PostgreSQL and may vanish at any time.

pub mod faults;
pub mod keys;
pub mod scripts;
pub mod state;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::{Config, Pool, Runtime};
use futures::{StreamExt, TryStreamExt};
use redis::{AsyncCommands, Value};
use secrecy::ExposeSecret;

use crate::error::{AppError, AppResult, Message};
use crate::settings::RedisSettings;
use crate::types::{Entry, Range, SourceRead};

pub use faults::{Fault, Faults};
pub use keys::Keys;

/// PUSH calls sent together in one fan-out pipeline: Redis runs a client's
/// whole pipeline before serving anyone else, so pipelines of a few calls
/// keep publishes and reads from waiting behind a whole batch.
const CALLS_PER_PIPELINE: usize = 3;

/// Fan-out pipelines one push keeps in flight: Redis works on the next
/// while the reply of one travels back and the service builds the one
/// after, and a request's call still waits behind at most this many.
const PIPELINES_IN_FLIGHT: usize = 2;

/// Keys in one PUSH call of a fan-out, for a single entry: the call is paid
/// once per this many followers.
const KEYS_PER_CALL: usize = 100;

/// ZADDs one PUSH call may make: a push of many entries (a backfill, a
/// follow) goes to fewer keys per call, so that every call stays short.
const ZADDS_PER_CALL: usize = 1000;

/// Active fans read per Redis call.
const FANS_PER_CALL: usize = 5000;

/// How long a ZSET may stay in the building state before it expires.
const BUILD_TTL_SECS: u64 = 30;

#[derive(Clone)]
pub struct RedisStore {
    pool: Pool,
    keys: Keys,
    timeout: Duration,
    faults: Arc<Faults>,
    /// Round trips made (tests count a page's with it).
    round_trips: Arc<AtomicU64>,
}

impl RedisStore {
    pub fn new(settings: &RedisSettings) -> AppResult<Self> {
        let timeout = Duration::from_millis(settings.timeout_ms);
        let pool = Config::from_url(settings.url.expose_secret())
            .builder()
            .map_err(|e| AppError::internal("redis.url", e))?
            .max_size(settings.pool_size)
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .recycle_timeout(Some(timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| AppError::internal("building the Redis pool", e))?;
        Ok(RedisStore {
            pool,
            keys: Keys::new(settings.key_prefix.clone()),
            timeout,
            faults: Arc::new(Faults::default()),
            round_trips: Arc::new(AtomicU64::new(0)),
        })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Round trips made so far by this store.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// Faults to inject into the next Redis calls (tests).
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Runs one Redis exchange (one round trip) on a pooled connection,
    /// bounded by the timeout.
    async fn with_conn<T, F, Fut>(&self, f: F) -> AppResult<T>
    where
        F: FnOnce(deadpool_redis::Connection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let fault = self.faults.take();
        if fault == Some(Fault::Refuse) {
            crate::metrics::REDIS_ERRORS.inc();
            return Err(AppError::Unavailable {
                what: "Redis",
                source: "injected fault: connection refused".into(),
            });
        }
        let work = async {
            let conn = self.pool.get().await?;
            Ok::<T, AppError>(f(conn).await?)
        };
        let result = match tokio::time::timeout(self.timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(timed_out()),
        };
        if fault == Some(Fault::LoseReply) {
            return Err(timed_out());
        }
        result
    }

    pub async fn ping(&self) -> AppResult<()> {
        self.with_conn(|mut c| async move {
            let _: String = redis::cmd("PING").query_async(&mut c).await?;
            Ok(())
        })
        .await
    }

    /// Reads `fetch` entries of each ZSET from `max` down: one MULTI/EXEC
    /// for all of them (one round trip, and every floor agrees with its
    /// range). On Redis Cluster this would have to be one per slot.
    pub async fn ranges(
        &self,
        keys: &[String],
        max: Option<i64>,
        fetch: usize,
    ) -> AppResult<Vec<Range>> {
        let max_arg = max.map_or_else(|| "+inf".to_string(), |m| m.to_string());
        let mut pipe = redis::pipe();
        pipe.atomic();
        for key in keys {
            pipe.zscore(key, "").zrevrangebyscore_limit_withscores(
                key,
                &max_arg,
                "-inf",
                0,
                fetch as isize + 1,
            );
        }
        let replies: Vec<Value> = self
            .with_conn(|mut c| async move { pipe.query_async(&mut c).await })
            .await?;
        if replies.len() != 2 * keys.len() {
            return Err(AppError::internal(
                "range read",
                Message(format!("{} replies for {} keys", replies.len(), keys.len())),
            ));
        }
        keys.iter()
            .zip(replies.chunks(2))
            .map(|(key, pair)| range_of(key, &pair[0], &pair[1], fetch))
            .collect()
    }

    /// Starts building a missing ZSET; true if this caller must fill it.
    pub async fn begin_build(&self, key: &str) -> AppResult<bool> {
        self.begin(&scripts::BEGIN, key).await
    }

    /// Runs a begin script (`BEGIN`, `BEGIN_STATE`) on `key`: true if this
    /// caller created the key in the building state and must fill it.
    async fn begin(&self, script: &redis::Script, key: &str) -> AppResult<bool> {
        let started: i64 = self
            .with_conn(|mut c| async move {
                script
                    .key(key)
                    .arg(BUILD_TTL_SECS)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok(started == 1)
    }

    /// Completes a build with the newest entries read from PostgreSQL.
    /// `floor`: `None` when they are all there are. False if the key was no
    /// longer building (it vanished, or a cut push abandoned the build).
    pub async fn fill(
        &self,
        key: &str,
        cap: i64,
        floor: Option<i64>,
        entries: &[Entry],
    ) -> AppResult<bool> {
        let floor = floor.map_or_else(|| "-inf".to_string(), |f| f.to_string());
        self.with_conn(|mut c| async move {
            let mut inv = scripts::FILL.key(key);
            inv.arg(cap).arg(&floor);
            for e in entries {
                inv.arg(e.score).arg(e.id);
            }
            let filled: i64 = inv.invoke_async(&mut c).await?;
            Ok(filled == 1)
        })
        .await
    }

    /// Pushes each target's entries into its ZSET if it exists, one
    /// pipeline for all (scripts.rs, clauses 3 and 4). Returns how many
    /// entries were added.
    pub async fn push(&self, targets: &[(String, &[Entry])], cap: i64) -> AppResult<i64> {
        if targets.is_empty() {
            return Ok(0);
        }
        self.with_conn(|mut c| async move {
            let mut pipe = redis::pipe();
            pipe.load_script(&scripts::PUSH).ignore();
            for (key, entries) in targets {
                pipe.invoke_script(&push_call(std::slice::from_ref(key), entries, cap, None));
            }
            let added: Vec<i64> = pipe.query_async(&mut c).await?;
            Ok(added.iter().sum())
        })
        .await
    }

    /// Pushes the same entries into many ZSETs (fan-out): PUSH calls of as
    /// many keys as keep a call short, a few calls per pipeline, each
    /// pipeline bounded by the timeout. `cut`: the entries are the newest of
    /// a longer list, and this is their lowest score (clause 3). Returns how
    /// many entries were added.
    pub async fn push_same(
        &self,
        keys: &[String],
        entries: &[Entry],
        cap: i64,
        cut: Option<i64>,
    ) -> AppResult<i64> {
        if keys.is_empty() || entries.is_empty() {
            return Ok(0);
        }
        let group = (ZADDS_PER_CALL / entries.len()).clamp(1, KEYS_PER_CALL);
        let pipelines: Vec<_> = keys
            .chunks(group * CALLS_PER_PIPELINE)
            .map(|calls| self.push_pipeline(calls, group, entries, cap, cut))
            .collect();
        let counts: Vec<i64> = futures::stream::iter(pipelines)
            .buffer_unordered(PIPELINES_IN_FLIGHT)
            .try_collect()
            .await?;
        Ok(counts.iter().sum())
    }

    /// One fan-out pipeline: PUSH calls of `group` keys each.
    async fn push_pipeline(
        &self,
        calls: &[String],
        group: usize,
        entries: &[Entry],
        cap: i64,
        cut: Option<i64>,
    ) -> AppResult<i64> {
        self.with_conn(|mut c| async move {
            let mut pipe = redis::pipe();
            // Every pipeline, for a Redis that restarted or flushed its
            // scripts (they run concurrently, so any may be the first).
            pipe.load_script(&scripts::PUSH).ignore();
            for chunk in calls.chunks(group) {
                pipe.invoke_script(&push_call(chunk, entries, cap, cut));
            }
            let counts: Vec<i64> = pipe.query_async(&mut c).await?;
            Ok(counts.iter().sum::<i64>())
        })
        .await
    }

    /// Removes posts from feed ZSETs, one pipeline for all keys.
    pub async fn remove(&self, keys: &[String], ids: &[i64]) -> AppResult<()> {
        if keys.is_empty() || ids.is_empty() {
            return Ok(());
        }
        self.with_conn(|mut c| async move {
            let mut pipe = redis::pipe();
            for key in keys {
                pipe.zrem(key, ids).ignore();
            }
            let _: () = pipe.query_async(&mut c).await?;
            Ok(())
        })
        .await
    }

    pub async fn delete(&self, key: &str) -> AppResult<()> {
        self.delete_many(&[key.to_string()]).await
    }

    /// Deletes keys (they are rebuilt from PostgreSQL when next read).
    pub async fn delete_many(&self, keys: &[String]) -> AppResult<()> {
        if keys.is_empty() {
            return Ok(());
        }
        self.with_conn(|mut c| async move {
            let _: i64 = c.del(keys).await?;
            Ok(())
        })
        .await
    }

    /// Records `reader` as an active fan of `authors`, at most once per
    /// `interval_secs` (a marker key rate-limits it). Returns whether it did.
    pub async fn record_active_fan(
        &self,
        reader: i64,
        authors: &[i64],
        now_ms: i64,
        interval_secs: u64,
    ) -> AppResult<bool> {
        if authors.is_empty() {
            return Ok(false);
        }
        let mark = self.keys.active_mark(reader);
        let fans: Vec<String> = authors.iter().map(|a| self.keys.active_fans(*a)).collect();
        self.with_conn(|mut c| async move {
            let set: Value = redis::cmd("SET")
                .arg(&mark)
                .arg(now_ms)
                .arg("NX")
                .arg("EX")
                .arg(interval_secs.max(1))
                .query_async(&mut c)
                .await?;
            if set == Value::Nil {
                return Ok(false);
            }
            let mut pipe = redis::pipe();
            for key in &fans {
                pipe.zadd(key, reader, now_ms).ignore();
            }
            let _: () = pipe.query_async(&mut c).await?;
            Ok(true)
        })
        .await
    }

    /// Active fans of `author` seen at or after `since_ms`, ascending by id;
    /// older entries are dropped first. The rest is read by rank in pages of
    /// [`FANS_PER_CALL`]: one reply of a big-V's hundred thousand fans held
    /// Redis for 15 to 20 ms, and every request with it; a page takes well
    /// under one. (A fan that leaves mid-read, by unfollowing, may shift
    /// another past a page boundary: that one misses a push, not the post,
    /// which every follower of a big-V also pulls from its outbox.)
    pub async fn active_fans(&self, author: i64, since_ms: i64) -> AppResult<Vec<i64>> {
        let key = self.keys.active_fans(author);
        let key = &key;
        self.with_conn(|mut c| async move {
            let _: i64 = c.zrembyscore(key, "-inf", format!("({since_ms}")).await?;
            Ok(())
        })
        .await?;
        let mut fans = Vec::new();
        loop {
            let start = fans.len() as isize;
            let page: Vec<i64> = self
                .with_conn(|mut c| async move {
                    c.zrange(key, start, start + FANS_PER_CALL as isize - 1)
                        .await
                })
                .await?;
            let last = page.len() < FANS_PER_CALL;
            fans.extend(page);
            if last {
                break;
            }
        }
        fans.sort_unstable();
        fans.dedup();
        Ok(fans)
    }

    pub async fn forget_active_fan(&self, author: i64, reader: i64) -> AppResult<()> {
        let key = self.keys.active_fans(author);
        self.with_conn(|mut c| async move {
            let _: i64 = c.zrem(&key, reader).await?;
            Ok(())
        })
        .await
    }

    /// Deletes every key of this store's prefix (tests and operators).
    pub async fn delete_all(&self) -> AppResult<u64> {
        let pattern = self.keys.pattern();
        let mut conn = self.pool.get().await?;
        let mut cursor: u64 = 0;
        let mut deleted = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            if !keys.is_empty() {
                let n: u64 = conn.del(&keys).await?;
                deleted += n;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }
}

/// One ZSET's floor (the sentinel's score) and range, as read together.
fn range_of(key: &str, floor: &Value, range: &Value, fetch: usize) -> AppResult<Range> {
    let bad = |e: redis::ParsingError| AppError::internal(format!("reading {key}"), e);
    let floor: Option<String> = redis::from_redis_value_ref(floor).map_err(bad)?;
    let floor = match floor.as_deref() {
        None => return Ok(Range::Missing),
        Some("inf") | Some("+inf") => return Ok(Range::Building),
        Some("-inf") => None,
        Some(text) => Some(parse_score(text)?),
    };
    let raw: Vec<(String, f64)> = redis::from_redis_value_ref(range).map_err(bad)?;
    let mut reached_sentinel = false;
    let mut entries = Vec::with_capacity(raw.len());
    for (member, score) in &raw {
        if member.is_empty() {
            reached_sentinel = true;
            continue;
        }
        let id = member
            .parse::<i64>()
            .map_err(|e| AppError::internal(format!("bad member {member:?} in {key}"), e))?;
        entries.push(Entry::new(*score as i64, id));
    }
    Ok(Range::Read(SourceRead {
        truncated: !reached_sentinel && raw.len() > fetch,
        entries,
        floor,
    }))
}

/// One PUSH call: `keys` get `entries` (scripts.rs, clause 3).
fn push_call(
    keys: &[String],
    entries: &[Entry],
    cap: i64,
    cut: Option<i64>,
) -> redis::ScriptInvocation<'static> {
    let mut inv = scripts::PUSH.prepare_invoke();
    for key in keys {
        inv.key(key);
    }
    inv.arg(cap)
        .arg(cut.map_or_else(String::new, |c| c.to_string()));
    for e in entries {
        inv.arg(e.score).arg(e.id);
    }
    inv
}

fn timed_out() -> AppError {
    crate::metrics::REDIS_ERRORS.inc();
    AppError::TimedOut { what: "Redis" }
}

fn parse_score(text: &str) -> AppResult<i64> {
    text.parse::<f64>()
        .map(|f| f as i64)
        .map_err(|e| AppError::internal(format!("bad score {text:?}"), e))
}
