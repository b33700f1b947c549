//! The Redis store: feed lists (inboxes, outboxes) and active fans.
//! Everything here is derived from PostgreSQL and may vanish at any time.

mod conn;
pub mod faults;
pub mod hints;
pub mod keys;
pub mod layout;
pub mod posts;
pub mod pubsub;
pub mod scripts;
pub mod state;
mod warm;

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use redis::{AsyncCommands, Value};

use crate::error::{AppError, AppResult, Message};
use crate::settings::RedisSettings;
use crate::types::{Entry, Range, SourceRead};

use conn::Topology;
pub use conn::{slot, Conn};
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

/// Entry writes one PUSH call may make: a push of many entries (a backfill, a
/// follow) goes to fewer keys per call, so that every call stays short.
const WRITES_PER_CALL: usize = 1000;

/// Which cluster connection writes went on (see [`RedisStore::replicated`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(test, derive(Default))]
pub struct WriteMark(u64);

/// Entry writes of a cluster fan-out's round (its "pipeline"), at most: a round
/// goes as one pipeline per master, so a master's share of a round spread
/// over three makes no more writes than a single node's pipeline.
const CLUSTER_WRITES_PER_ROUND: usize = CALLS_PER_PIPELINE * KEYS_PER_CALL * 3;

thread_local! {
    /// Whether this thread uses [`RedisStore`]'s connections apart.
    static APART: Cell<bool> = const { Cell::new(false) };
}

/// Active fans read per Redis call.
const FANS_PER_CALL: usize = 5000;

/// How long a feed list may stay in the building state before it expires.
const BUILD_TTL_SECS: u64 = 30;
const _: () = assert!(crate::settings::MAX_STATEMENT_TIMEOUT_MS * 2 <= BUILD_TTL_SECS * 1000);

#[derive(Clone)]
pub struct RedisStore {
    topology: Topology,
    /// The same Redis through connections of their own, for the threads
    /// that ask for them ([`RedisStore::own_connections_on_this_thread`]).
    apart: Topology,
    keys: Keys,
    timeout: Duration,
    faults: Arc<Faults>,
    /// Round trips made (tests count a page's with it).
    round_trips: Arc<AtomicU64>,
    /// Where this instance subscribes to hints (`pubsub.rs`).
    hints: pubsub::Source,
}

impl RedisStore {
    pub fn new(settings: &RedisSettings) -> AppResult<Self> {
        let timeout = Duration::from_millis(settings.timeout_ms);
        Ok(RedisStore {
            topology: Topology::new(settings, timeout)?,
            apart: Topology::new(settings, timeout)?,
            keys: Keys::new(settings.key_prefix.clone()),
            timeout,
            faults: Arc::new(Faults::default()),
            round_trips: Arc::new(AtomicU64::new(0)),
            hints: pubsub::Source::of(settings),
        })
    }

    /// Whom readers follow, the pulled authors and the hidden accounts.
    pub fn state(&self) -> state::ReaderState<'_> {
        state::ReaderState(self)
    }

    /// Cached posts, and publishing one.
    pub fn posts(&self) -> posts::PostCache<'_> {
        posts::PostCache(self)
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// From now on, this thread's calls go through connections of their
    /// own, apart from every other thread's. A connection is driven by the
    /// runtime that opened it: the fan-out thread takes its own, so that it
    /// never waits on the request threads' runtimes (nor they on it, at its
    /// lower priority), and its last batches at shutdown do not hang on
    /// connections whose runtimes have already stopped. On a cluster a
    /// `WAIT` covers the writes of its own connection: the fan-out thread
    /// both writes its batches and waits for them on its own.
    pub fn own_connections_on_this_thread() {
        APART.with(|apart| apart.set(true));
    }

    /// The connections of the calling thread.
    fn topology(&self) -> &Topology {
        if APART.with(Cell::get) {
            &self.apart
        } else {
            &self.topology
        }
    }

    /// Round trips made so far by this store.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// Calls this store sent again one at a time after a cluster node
    /// refused them (a slot that moved, a failover).
    pub fn calls_resent(&self) -> u64 {
        self.topology().resent()
    }

    /// Whether this store runs on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.topology().is_cluster()
    }

    /// A pooled connection of whichever topology runs (tests and operators;
    /// on a cluster, every call must keep to one slot).
    pub async fn connection(&self) -> AppResult<Conn> {
        self.topology().get().await
    }

    /// Makes the map of which master serves which slot wrong until a call
    /// finds it out, as after a resharding (tests; nothing on one node).
    pub async fn misroute_slots(&self) -> AppResult<()> {
        self.bounded(|mut c| async move { c.misroute_slots().await })
            .await
    }

    /// Makes Redis forget every script it holds, on every node (tests: as
    /// after a restart, or a failover to a replica that never ran them).
    pub async fn forget_scripts(&self) -> AppResult<()> {
        self.with_conn(|mut c| async move {
            redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }

    /// Faults to inject into the next Redis calls (tests).
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Runs one Redis exchange (one round trip) on a pooled connection,
    /// bounded by the timeout.
    async fn with_conn<T, F, Fut>(&self, f: F) -> AppResult<T>
    where
        F: FnOnce(Conn) -> Fut,
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
        let result = self.bounded(f).await;
        if fault == Some(Fault::LoseReply) {
            // As after a real timeout, the cluster connection is replaced.
            self.topology().reset();
            return Err(timed_out());
        }
        result
    }

    /// One exchange bounded by the timeout, neither counted nor subject to
    /// injected faults (the store's own bookkeeping: scans).
    async fn bounded<T, F, Fut>(&self, f: F) -> AppResult<T>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let work = async {
            let conn = self.topology().get().await?;
            Ok::<T, AppError>(f(conn).await?)
        };
        let result = match tokio::time::timeout(self.timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(timed_out()),
        };
        if matches!(
            result,
            Err(AppError::TimedOut { .. } | AppError::Unavailable { .. })
        ) {
            self.topology().reset();
        }
        result
    }

    /// On a cluster, waits until a replica of every master holds every
    /// write this process made so far, so that a failover keeps them: the
    /// service calls it before it acknowledges a write or checkpoints a
    /// fan-out batch. If a replica does not answer in half the timeout (it
    /// is down, or far behind), the write stands unreplicated and is counted
    /// (`redis_unreplicated_writes_total`): availability first, since a
    /// master without a live replica cannot fail over anyway, and a replica
    /// that comes back resynchronises from it. A no-op on a single node.
    ///
    /// `since` is taken before the writes: if the process's cluster
    /// connection was replaced after it, the writes went on a connection a
    /// `WAIT` can no longer ask about, and the call fails (the caller redoes
    /// its writes, which are idempotent).
    pub async fn replicated(&self, since: WriteMark) -> AppResult<()> {
        if !self.is_cluster() {
            return Ok(());
        }
        let swapped = || AppError::Unavailable {
            what: "Redis",
            source: "the cluster connection was replaced after the writes: their replication \
                     cannot be confirmed"
                .into(),
        };
        if self.topology().generation() != since.0 {
            return Err(swapped());
        }
        let wait_ms = (self.timeout.as_millis() as u64 / 2).max(1);
        let acked = self
            .with_conn(|mut c| async move { c.replicated(wait_ms).await })
            .await?;
        if self.topology().generation() != since.0 {
            return Err(swapped());
        }
        if acked == Some(0) {
            crate::metrics::REDIS_UNREPLICATED.inc();
            tracing::warn!("a Redis write is not on any replica yet: a failover now could lose it");
        }
        Ok(())
    }

    /// Marks the writes about to be made, for [`Self::replicated`].
    pub fn write_mark(&self) -> WriteMark {
        WriteMark(self.topology().generation())
    }

    pub async fn ping(&self) -> AppResult<()> {
        self.with_conn(|mut c| async move {
            let _: String = redis::cmd("PING").query_async(&mut c).await?;
            Ok(())
        })
        .await
    }

    /// Reads `fetch` entries of each feed from `max` down (and the rest of
    /// a run of equal scores the limit cuts), each floor with its range at
    /// one moment: one [`scripts::SOURCES`] call per node holding some
    /// (one round trip, one call on a single node).
    pub async fn ranges(
        &self,
        keys: &[String],
        max: Option<i64>,
        fetch: usize,
    ) -> AppResult<Vec<Range>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let max = max.map_or_else(|| "+inf".to_string(), |m| m.to_string());
        let args = [max, fetch.to_string(), scripts::TIES.to_string()];
        let replies = self
            .with_conn(
                |mut c| async move { c.invoke_by_node(&scripts::SOURCES, keys, &args).await },
            )
            .await?;
        keys.iter()
            .zip(&replies)
            .map(|(key, reply)| match reply {
                Value::Array(parts) if parts.len() == 3 => {
                    source_of(key, &parts[0], &parts[1], &parts[2])
                }
                other => Err(AppError::internal(
                    format!("reading {key}"),
                    Message(format!("{other:?}")),
                )),
            })
            .collect()
    }

    /// Sends, for every key, the commands `add` puts in a pipeline: one
    /// pipeline per slot group (`Topology::groups`), not atomic (on a
    /// cluster a master's groups travel together). Returns the replies in
    /// the keys' order.
    pub async fn query_per_slot(
        &self,
        keys: &[String],
        add: impl Fn(&mut redis::Pipeline, &str),
    ) -> AppResult<Vec<Value>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let groups = self.topology().groups(keys);
        let pipes: Vec<(u16, redis::Pipeline)> = groups
            .iter()
            .map(|group| {
                let mut pipe = redis::pipe();
                for &i in group {
                    add(&mut pipe, &keys[i]);
                }
                (slot(keys[group[0]].as_bytes()), pipe)
            })
            .collect();
        let replies = self
            .with_conn(|mut c| async move { c.query_groups(pipes).await })
            .await?;
        let per_key = replies.iter().map(Vec::len).sum::<usize>() / keys.len();
        let mut out: Vec<Option<Value>> = vec![None; keys.len() * per_key];
        for (group, reply) in groups.iter().zip(replies) {
            if reply.len() != group.len() * per_key {
                return Err(AppError::internal(
                    "a pipeline",
                    Message(format!("{} replies for {} keys", reply.len(), group.len())),
                ));
            }
            for (&i, values) in group.iter().zip(reply.chunks(per_key.max(1))) {
                for (j, v) in values.iter().enumerate() {
                    out[i * per_key + j] = Some(v.clone());
                }
            }
        }
        Ok(out.into_iter().map(|v| v.unwrap_or(Value::Nil)).collect())
    }

    /// Starts building a missing feed list; true if this caller must fill it.
    pub async fn begin_build(&self, key: &str) -> AppResult<bool> {
        self.begin(&scripts::BEGIN, &[key]).await
    }

    /// Runs a begin script (`BEGIN`, `BEGIN_STATE`) on `key`: true if this
    /// caller created the key in the building state and must fill it.
    async fn begin(&self, script: &redis::Script, keys: &[&str]) -> AppResult<bool> {
        let started: i64 = self
            .with_conn(|mut c| async move {
                let mut inv = script.prepare_invoke();
                for key in keys {
                    inv.key(*key);
                }
                inv.arg(BUILD_TTL_SECS).invoke_async(&mut c).await
            })
            .await?;
        Ok(started == 1)
    }

    /// Completes a build with the newest entries read from PostgreSQL.
    /// `floor`: `None` when they are all there are; `idle_ttl_secs`: the
    /// key's TTL (an inbox's; 0 for none). False if the key was no longer
    /// building (it vanished, or a cut push abandoned the build).
    pub async fn fill(
        &self,
        key: &str,
        cap: i64,
        floor: Option<i64>,
        entries: &[Entry],
        idle_ttl_secs: u64,
    ) -> AppResult<bool> {
        let floor = floor.map_or_else(|| "-inf".to_string(), |f| f.to_string());
        self.with_conn(|mut c| async move {
            let mut inv = scripts::FILL.key(key);
            inv.arg(cap).arg(&floor).arg(idle_ttl_secs);
            for e in entries {
                inv.arg(e.score).arg(e.id);
            }
            let filled: i64 = inv.invoke_async(&mut c).await?;
            Ok(filled == 1)
        })
        .await
    }

    /// Pushes each target's entries into its feed list if it exists, one
    /// pipeline for all (scripts.rs, clauses 3 and 4). Returns how many
    /// entries were added.
    pub async fn push(&self, targets: &[(String, &[Entry])], cap: i64) -> AppResult<i64> {
        if targets.is_empty() {
            return Ok(0);
        }
        let calls: Vec<_> = targets
            .iter()
            .map(|(key, entries)| {
                let call = push_call(std::slice::from_ref(key), entries, cap, None);
                (slot(key.as_bytes()), call)
            })
            .collect();
        self.with_conn(|mut c| async move {
            let added: Vec<i64> = c.invoke_all(&scripts::PUSH, &calls).await?;
            Ok(added.iter().sum())
        })
        .await
    }

    /// Runs `steps` (each the commands of one slot) in their order, and
    /// returns their replies: on a single node as one transaction, on a
    /// cluster one transaction per step, one after the other. A
    /// transaction that failed on a script Redis no longer knows (a
    /// restart, a flush, a failover) is sent again once `scripts` are
    /// loaded, so the steps must be safe to run twice; any other failure
    /// is the caller's.
    pub async fn in_order(
        &self,
        scripts: &[&redis::Script],
        steps: &[redis::Pipeline],
    ) -> AppResult<Vec<Value>> {
        let transaction = |steps: &[redis::Pipeline]| {
            let mut all = redis::pipe();
            all.atomic();
            for cmd in steps.iter().flat_map(|s| s.cmd_iter()) {
                all.add_command(cmd.clone());
            }
            all
        };
        let transactions: Vec<redis::Pipeline> = match self.is_cluster() {
            true => steps.chunks(1).map(transaction).collect(),
            false => vec![transaction(steps)],
        };
        let mut out = Vec::new();
        for t in &transactions {
            let replies: Vec<Value> = self
                .with_conn(|mut c| async move {
                    match t.query_async(&mut c).await {
                        Err(e) if unknown_script(&e) => {
                            for script in scripts {
                                script.prepare_invoke().load_async(&mut c).await?;
                            }
                            t.query_async(&mut c).await
                        }
                        done => done,
                    }
                })
                .await?;
            out.extend(replies);
        }
        Ok(out)
    }

    /// Pushes the same entries into many feed lists (fan-out): PUSH calls of as
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
        let group = (WRITES_PER_CALL / entries.len()).clamp(1, KEYS_PER_CALL);
        // One call's keys share a slot: on a cluster, grouped by slot (a
        // batch's followers, read in id order, share their block's slot:
        // keys.rs).
        let calls: Vec<Vec<String>> = self
            .topology()
            .groups(keys)
            .iter()
            .flat_map(|g| {
                g.chunks(group)
                    .map(|c| c.iter().map(|&i| keys[i].clone()).collect())
            })
            .collect();
        let rounds: Vec<&[Vec<String>]> = if self.topology().is_cluster() {
            // A round holds as many writes as a single node's pipeline, for
            // each master.
            by_weight(&calls, CLUSTER_WRITES_PER_ROUND, |c| {
                c.len() * entries.len()
            })
        } else {
            calls.chunks(CALLS_PER_PIPELINE).collect()
        };
        let pipelines: Vec<_> = rounds
            .into_iter()
            .map(|calls| self.push_pipeline(calls, entries, cap, cut))
            .collect();
        let counts: Vec<i64> = futures::stream::iter(pipelines)
            .buffer_unordered(PIPELINES_IN_FLIGHT)
            .try_collect()
            .await?;
        Ok(counts.iter().sum())
    }

    /// One fan-out pipeline: a PUSH call for each group of keys.
    async fn push_pipeline(
        &self,
        calls: &[Vec<String>],
        entries: &[Entry],
        cap: i64,
        cut: Option<i64>,
    ) -> AppResult<i64> {
        let calls: Vec<_> = calls
            .iter()
            .map(|keys| (slot(keys[0].as_bytes()), push_call(keys, entries, cap, cut)))
            .collect();
        self.with_conn(|mut c| async move {
            // Every pipeline loads the script, for a Redis that restarted or
            // flushed its scripts (they run concurrently, so any may be the
            // first).
            let counts: Vec<i64> = c.invoke_all(&scripts::PUSH, &calls).await?;
            Ok(counts.iter().sum::<i64>())
        })
        .await
    }

    /// Removes entries from feed lists, one pipeline for all keys.
    pub async fn remove(&self, keys: &[String], entries: &[Entry]) -> AppResult<()> {
        if keys.is_empty() || entries.is_empty() {
            return Ok(());
        }
        let packed: Vec<Vec<u8>> = entries.iter().map(layout::pack).collect();
        self.query_per_slot(keys, |pipe, key| {
            for e in &packed {
                pipe.lrem(key, 1, e);
            }
        })
        .await?;
        Ok(())
    }

    pub async fn delete(&self, key: &str) -> AppResult<()> {
        self.delete_many(&[key.to_string()]).await
    }

    /// Deletes keys (they are rebuilt from PostgreSQL when next read).
    pub async fn delete_many(&self, keys: &[String]) -> AppResult<()> {
        self.query_per_slot(keys, |pipe, key| {
            pipe.del(key);
        })
        .await?;
        Ok(())
    }

    /// Notes a read by `reader`, at most once per `interval_secs` (a marker
    /// key rate-limits it): its inbox and copy of whom it follows get the
    /// idle TTL again (scripts.rs, clause 11), and it is recorded as an
    /// active fan of `authors`. An active-fans set keeps only the fans of
    /// the last `active_window_secs` and expires that long after its last
    /// fan (an author pulled only while a delivery was in flight leaves
    /// nothing behind). Returns whether it did.
    pub async fn touch_reader(
        &self,
        reader: i64,
        authors: &[i64],
        now_ms: i64,
        interval_secs: u64,
        (idle_ttl_secs, active_window_secs): (u64, u64),
    ) -> AppResult<bool> {
        let mark = self.keys.active_mark(reader);
        let inbox = self.keys.inbox(reader);
        let following = self.keys.following(reader);
        let followees = self.keys.followees(reader);
        let touched: i64 = self
            .with_conn(|mut c| async move {
                scripts::TOUCH
                    .key(&mark)
                    .key(&inbox)
                    .key(&following)
                    .key(&followees)
                    .arg(now_ms)
                    .arg(interval_secs.max(1))
                    .arg(idle_ttl_secs)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        if touched == 0 {
            return Ok(false);
        }
        let fans: Vec<String> = authors.iter().map(|a| self.keys.active_fans(*a)).collect();
        let window = active_window_secs.max(1);
        let stale = format!("({}", now_ms - window as i64 * 1000);
        self.query_per_slot(&fans, |pipe, key| {
            pipe.zadd(key, reader, now_ms)
                .zrembyscore(key, "-inf", &stale)
                .expire(key, window as i64);
        })
        .await?;
        Ok(true)
    }

    /// Active fans of `author` seen at or after `since_ms`, ascending by id;
    /// older entries are dropped first. The rest is read by rank in pages of
    /// `FANS_PER_CALL`: one reply of a big-V's hundred thousand fans held
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

    /// Deletes the feeds an older layout left (sorted sets where feed lists
    /// now live; they are derived, so they are rebuilt when next read), once
    /// per Redis: a marker key records the layout. Instances of the older
    /// layout must be stopped first: both cannot share one Redis. Returns
    /// how many keys it deleted.
    pub async fn adopt_layout(&self) -> AppResult<u64> {
        let marker = self.keys.layout();
        let marker = &marker;
        let current: Option<String> = self
            .bounded(|mut c| async move { c.get(marker).await })
            .await?;
        if current.as_deref() == Some(layout::NAME) {
            return Ok(0);
        }
        let mut old = Vec::new();
        for pattern in self.keys.feed_patterns() {
            let keys = self.scan(&pattern).await?;
            for chunk in keys.chunks(1000) {
                let types = self
                    .query_per_slot(chunk, |pipe, key| {
                        pipe.cmd("TYPE").arg(key);
                    })
                    .await?;
                for (key, kind) in chunk.iter().zip(types) {
                    if kind == Value::SimpleString("zset".into()) {
                        old.push(key.clone());
                    }
                }
            }
        }
        for chunk in old.chunks(1000) {
            self.query_per_slot(chunk, |pipe, key| {
                pipe.unlink(key);
            })
            .await?;
        }
        self.bounded(|mut c| async move { c.set::<_, _, ()>(marker, layout::NAME).await })
            .await?;
        Ok(old.len() as u64)
    }

    /// Deletes every key of this store's prefix (tests and operators).
    pub async fn delete_all(&self) -> AppResult<u64> {
        // A second try: on a cluster, the first call from a runtime other
        // than the one driving the process's connection (a clean-up thread)
        // may time out, and the retry opens a connection of its own.
        let keys = match self.scan(&self.keys.pattern()).await {
            Ok(keys) => keys,
            Err(_) => self.scan(&self.keys.pattern()).await?,
        };
        let mut deleted = 0u64;
        for chunk in keys.chunks(1000) {
            let replies = self
                .query_per_slot(chunk, |pipe, key| {
                    pipe.unlink(key);
                })
                .await?;
            deleted += replies.iter().filter(|v| **v == Value::Int(1)).count() as u64;
        }
        Ok(deleted)
    }

    /// Every key matching `pattern`: a SCAN of the node, or of every master
    /// of the cluster; each step bounded by the timeout.
    pub async fn scan(&self, pattern: &str) -> AppResult<Vec<String>> {
        let masters = self
            .bounded(|mut c| async move { c.masters().await })
            .await?;
        let mut found = Vec::new();
        for node in masters {
            let mut cursor: u64 = 0;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000);
                let (node, scan) = (&node, &scan);
                let (next, keys): (u64, Vec<String>) = self
                    .bounded(|mut c| async move { c.query_on(node.as_ref(), scan).await })
                    .await?;
                found.extend(keys);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        found.sort_unstable();
        found.dedup();
        Ok(found)
    }
}

/// One feed's floor (its sentinel), cut and entries (packed: a list, or
/// one string of 9-byte entries end to end), as read together (clause 6).
pub(super) fn source_of(
    key: &str,
    floor: &Value,
    cut: &Value,
    entries: &Value,
) -> AppResult<Range> {
    let bad = |e: redis::ParsingError| AppError::internal(format!("reading {key}"), e);
    let floor: Option<String> = redis::from_redis_value_ref(floor).map_err(bad)?;
    let floor = match floor.as_deref() {
        None | Some("") => return Ok(Range::Missing),
        Some("inf") | Some("+inf") => return Ok(Range::Building),
        Some("-inf") => None,
        Some(text) => Some(parse_score(text)?),
    };
    let unpack = |bytes: &[u8]| {
        layout::unpack(bytes).ok_or_else(|| {
            AppError::internal(
                format!("reading {key}"),
                Message(format!("{} bytes are not an entry", bytes.len())),
            )
        })
    };
    let entries = match entries {
        // Entries of 9 bytes each, end to end.
        Value::BulkString(packed) if packed.len() % 9 == 0 => packed
            .chunks(9)
            .map(unpack)
            .collect::<AppResult<Vec<Entry>>>()?,
        list => {
            let raw: Vec<Vec<u8>> = redis::from_redis_value_ref(list).map_err(bad)?;
            raw.iter()
                .map(|b| unpack(b))
                .collect::<AppResult<Vec<Entry>>>()?
        }
    };
    let cut: String = redis::from_redis_value_ref(cut).map_err(bad)?;
    let cut = match cut.as_str() {
        "" => None,
        t => Some(parse_score(t)?),
    };
    Ok(Range::Read(SourceRead {
        entries,
        floor,
        cut,
    }))
}

/// `items` cut into runs of at most `budget` in weight (a run holds at least
/// one item).
fn by_weight<T>(items: &[T], budget: usize, weight: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut runs = Vec::new();
    let (mut start, mut held) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let w = weight(item);
        if i > start && held + w > budget {
            runs.push(&items[start..i]);
            (start, held) = (i, 0);
        }
        held += w;
    }
    if start < items.len() {
        runs.push(&items[start..]);
    }
    runs
}

/// One PUSH call: `keys` get `entries` (scripts.rs, clause 3).
pub(super) fn push_call(
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

/// A reply that does not parse as `what`: an internal error naming it.
pub(super) fn bad<E: Into<crate::error::BoxError>>(what: &str) -> impl FnOnce(E) -> AppError + '_ {
    move |e| AppError::internal(format!("reading {what}"), e)
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

/// Whether a call (or a command of its transaction) named a script Redis
/// does not hold.
fn unknown_script(err: &redis::RedisError) -> bool {
    use redis::ServerErrorKind::NoScript;
    err.kind() == redis::ErrorKind::Server(NoScript)
        || err
            .clone()
            .into_server_errors()
            .is_some_and(|errs| errs.iter().any(|(_, e)| e.kind() == Some(NoScript)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_hold_their_weight_and_every_item_once() {
        let items = [40, 70, 10, 100, 5, 5, 300];
        let runs = by_weight(&items, 100, |&w| w);
        assert_eq!(
            runs,
            [&[40][..], &[70, 10], &[100], &[5, 5], &[300]].to_vec()
        );
        assert!(by_weight(&[] as &[usize], 100, |&w| w).is_empty());
    }
}
