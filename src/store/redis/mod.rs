//! The Redis store: its connections, and its parts by concern (feed
//! lists, active fans, readers' state, cached posts).
//! Everything here is derived from PostgreSQL and may vanish at any time.

mod conn;
pub mod fans;
pub mod faults;
pub mod feeds;
pub mod hints;
pub mod keys;
pub mod layout;
mod links;
mod nodes;
pub mod places;
pub mod posts;
pub mod pubsub;
pub mod scripts;
pub mod state;
mod warm;
mod wire;

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{AsyncCommands, Value};

use crate::error::{AppError, AppResult, Message};
use crate::settings::RedisSettings;
use crate::types::{PostId, UserId};

pub use conn::Conn;
use conn::{Topology, Use};
pub use faults::{Fault, Faults};
pub use keys::Keys;
pub use nodes::slot;

/// Which cluster connection writes went on (see [`RedisStore::replicated`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(test, derive(Default))]
pub struct WriteMark(u64);

thread_local! {
    /// Whether this thread uses [`RedisStore`]'s connections apart.
    static APART: Cell<bool> = const { Cell::new(false) };
}

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
    /// Where each view last read its feed lists (`places.rs`).
    places: Arc<places::Places>,
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
            places: Arc::default(),
        })
    }

    /// The [`ReaderState`](state::ReaderState) part of the cache.
    pub fn state(&self) -> state::ReaderState<'_> {
        state::ReaderState(self)
    }

    /// The [`FeedLists`](feeds::FeedLists) part of the cache.
    pub fn feeds(&self) -> feeds::FeedLists<'_> {
        feeds::FeedLists(self)
    }

    /// The [`ActiveFans`](fans::ActiveFans) part of the cache.
    pub fn fans(&self) -> fans::ActiveFans<'_> {
        fans::ActiveFans(self)
    }

    /// The [`PostCache`](posts::PostCache) part of the cache.
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

    /// Calls this store sent again after a cluster node refused them (a
    /// slot that moved, a failover) or their read link failed.
    pub fn calls_resent(&self) -> u64 {
        self.topology().resent()
    }

    /// Cuts this store's read links to the nodes from the nodes' side, as
    /// a restart or a network cut would: the next reads on them fail and
    /// are sent again (tests).
    pub async fn cut_links(&self) {
        self.topology().cut_links().await;
    }

    /// Calls this store sent straight to a node on a read link.
    pub fn calls_on_links(&self) -> u64 {
        self.topology().sent_on_links()
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
    /// Where each view last read its feed lists (tests mislead them).
    pub fn places(&self) -> &places::Places {
        &self.places
    }

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
        if matches!(fault, Some(Fault::Refuse | Fault::CopyBehind)) {
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

    /// Sends, for every key, the commands `add` puts in a pipeline: one
    /// pipeline per slot group (`Topology::groups`), not atomic (on a
    /// cluster a master's groups travel together). Returns the replies in
    /// the keys' order.
    pub async fn query_per_slot(
        &self,
        keys: &[String],
        add: impl Fn(&mut redis::Pipeline, &str),
    ) -> AppResult<Vec<Value>> {
        self.per_slot(Use::Any, keys, add).await
    }

    /// [`Self::query_per_slot`] for commands that only read: on a cluster
    /// they go straight to the masters (`Conn::reads`).
    pub async fn read_per_slot(
        &self,
        keys: &[String],
        add: impl Fn(&mut redis::Pipeline, &str),
    ) -> AppResult<Vec<Value>> {
        self.per_slot(Use::Reads, keys, add).await
    }

    /// Sends `pipe`, whose commands only read keys of `key`'s slot, in one
    /// round trip (on a cluster straight to the master serving it), and
    /// returns its replies.
    async fn read_pipeline(&self, key: &str, pipe: redis::Pipeline) -> AppResult<Vec<Value>> {
        let at = slot(key.as_bytes());
        let mut replies = self
            .with_conn(|c| async move { c.reads().query_groups(vec![(at, pipe)]).await })
            .await?;
        Ok(replies.pop().unwrap_or_default())
    }

    async fn per_slot(
        &self,
        how: Use,
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
            .with_conn(|c| async move { c.to(how).query_groups(pipes).await })
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
            let mut values = reply.into_iter();
            for &i in group {
                for (j, v) in values.by_ref().take(per_key).enumerate() {
                    out[i * per_key + j] = Some(v);
                }
            }
        }
        Ok(out.into_iter().map(|v| v.unwrap_or(Value::Nil)).collect())
    }

    /// Runs a change's calls of `script`, one per copy of the marks, in one
    /// round trip per master (one call on a single node). Each call is
    /// atomic on its copy; a failure leaves the copies apart until the
    /// caller makes the change again (changes are idempotent).
    async fn every_copy(
        &self,
        script: &redis::Script,
        calls: &[(u16, redis::ScriptInvocation<'_>)],
    ) -> AppResult<()> {
        let behind = self.faults.take_copy_behind();
        let sent = &calls[usize::from(behind)..];
        self.with_conn(|mut c| async move {
            let _: Vec<i64> = c.invoke_all(script, sent).await?;
            Ok(())
        })
        .await?;
        match behind {
            false => Ok(()),
            true => Err(AppError::Unavailable {
                what: "Redis",
                source: "injected fault: a copy of the marks was not written".into(),
            }),
        }
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

    /// Runs `steps` in their order, each the commands of one or more
    /// slots (a pipeline per slot, with its slot), and returns their
    /// replies: on a single node as one transaction; on a cluster one
    /// transaction per slot, a step's sent at once (one pipeline per
    /// master, `Conn::transactions`) and the steps one after the other. A
    /// step that failed on a script Redis no longer knows (a restart, a
    /// flush, a failover) is sent again once `scripts` are loaded, so the
    /// steps must be safe to run twice; any other failure is the caller's.
    pub async fn in_order(
        &self,
        scripts: &[&redis::Script],
        steps: &[Vec<(u16, redis::Pipeline)>],
    ) -> AppResult<Vec<Value>> {
        let joined;
        let rounds = match self.is_cluster() {
            true => steps,
            false => {
                let mut all = redis::pipe();
                for cmd in steps.iter().flatten().flat_map(|(_, p)| p.cmd_iter()) {
                    all.add_command(cmd.clone());
                }
                joined = [vec![(0, all)]];
                &joined[..]
            }
        };
        let mut out = Vec::new();
        for round in rounds {
            let replies = self
                .with_conn(move |mut c| async move {
                    match c.transactions(round).await {
                        Err(e) if unknown_script(&e) => {
                            for script in scripts {
                                script.prepare_invoke().load_async(&mut c).await?;
                            }
                            c.transactions(round).await
                        }
                        done => done,
                    }
                })
                .await?;
            out.extend(replies.into_iter().flatten());
        }
        Ok(out)
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

    /// Deletes the feeds an older layout left (they are derived, so they
    /// are rebuilt when next read), once per Redis: sorted sets where feed
    /// lists now live, and lists being built without the mark at their
    /// head (a build so abandoned is done again on the next read). A marker
    /// key records the layout. Instances of the older
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
                let mut lists = Vec::new();
                for (key, kind) in chunk.iter().zip(types) {
                    match kind {
                        Value::SimpleString(kind) if kind == "zset" => old.push(key.clone()),
                        Value::SimpleString(kind) if kind == "list" => lists.push(key.clone()),
                        _ => {}
                    }
                }
                let ends = self
                    .read_per_slot(&lists, |pipe, key| {
                        pipe.cmd("LINDEX").arg(key).arg(0);
                        pipe.cmd("LINDEX").arg(key).arg(-1);
                    })
                    .await?;
                let inf = Value::BulkString(b"inf".to_vec());
                for (key, ends) in lists.into_iter().zip(ends.chunks(2)) {
                    if ends[1] == inf && ends[0] != inf {
                        old.push(key);
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

/// An id's Redis mapping: an argument, and a reply, as the number.
macro_rules! id_redis {
    ($($id:ident),*) => {$(
        impl redis::ToRedisArgs for $id {
            fn write_redis_args<W>(&self, out: &mut W)
            where
                W: ?Sized + redis::RedisWrite,
            {
                self.0.write_redis_args(out)
            }
        }

        impl redis::ToSingleRedisArg for $id {}

        impl redis::FromRedisValue for $id {
            fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
                i64::from_redis_value(v).map($id)
            }
        }
    )*};
}

id_redis!(UserId, PostId);

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
