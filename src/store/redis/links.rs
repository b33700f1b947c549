//! Connections straight to each node that holds keys, for reads: to each
//! master of a cluster, or to the single node. A read's pipeline for one
//! node goes out on a [`Link`] to it, instead of through redis-rs's
//! connections (on a cluster, through the cluster client's routing task
//! every call of the process queues on). Writes stay on redis-rs's
//! connections: a `WAIT` sent on the cluster connection covers only the
//! writes sent on it.
//!
//! Bounded by construction: one link per node per thread of the runtime
//! (a thread's reads share it, and its task runs on that thread), opened
//! when first used and dropped when one fails or the topology is reset. A
//! read a link cannot carry (a link that fails, a MOVED after a resharding)
//! is sent again through redis-rs's connection, which follows the cluster
//! wherever it moved.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, RedisError, RedisFuture,
    RedisResult, Value,
};

use super::wire::Link;

/// A node's address.
pub(super) type Addr = (String, u16);

/// Whether an error is a link's failure (its connection, not the node's
/// answer): the call may be sent again on another connection.
pub(super) fn failed(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout()
}

/// The process's links to the nodes it reads from.
pub struct Links {
    /// How to reach a node (credentials, database) but for its address.
    info: ConnectionInfo,
    /// The seed node's address: on a single node, the node.
    seed: Addr,
    timeout: Duration,
    /// Calls sent on a link, for tests.
    sent: AtomicU64,
    /// Calls sent again on other connections after their link failed (on
    /// a single node; a cluster counts its own).
    resent: AtomicU64,
    /// Each thread's links, by node.
    open: Mutex<HashMap<ThreadId, HashMap<Addr, Link>>>,
}

impl Links {
    /// Links like `seed` (a node's URL), each call on them bounded by
    /// `timeout`. `None` if the seed is not reached over plain TCP (TLS, a
    /// Unix socket): its reads then stay on redis-rs's connections.
    pub(super) fn new(seed: &str, timeout: Duration) -> RedisResult<Option<Links>> {
        let info = seed.into_connection_info()?;
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return Ok(None);
        };
        Ok(Some(Links {
            seed: (host.clone(), *port),
            info,
            timeout,
            sent: AtomicU64::new(0),
            resent: AtomicU64::new(0),
            open: Mutex::default(),
        }))
    }

    /// The address of the seed node: on a single node, the node.
    pub(super) fn seed(&self) -> &Addr {
        &self.seed
    }

    fn open(&self) -> MutexGuard<'_, HashMap<ThreadId, HashMap<Addr, Link>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This thread's link to the node at `addr`, opened if it is not.
    async fn to(&self, addr: &Addr) -> RedisResult<Link> {
        let thread = std::thread::current().id();
        let open = (self.open().get(&thread))
            .and_then(|links| links.get(addr))
            .filter(|l| !l.is_closed())
            .cloned();
        if let Some(link) = open {
            return Ok(link);
        }
        let link = Link::open(&addr.0, addr.1, &self.info, self.timeout).await?;
        let mut open = self.open();
        open.entry(thread)
            .or_default()
            .insert(addr.clone(), link.clone());
        Ok(link)
    }

    /// Runs `call` on this thread's link to the node at `addr`. If the link
    /// fails (not the node's answer: its connection), every link to that
    /// node is dropped (the next calls open anew).
    pub(super) async fn send<T, F, Fut>(&self, addr: &Addr, call: F) -> RedisResult<T>
    where
        F: FnOnce(Link) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let sent = match self.to(addr).await {
            Ok(link) => call(link).await,
            Err(e) => Err(e),
        };
        if sent.as_ref().is_err_and(failed) {
            crate::metrics::REDIS_LINKS_FAILED.inc();
            for links in self.open().values_mut() {
                links.remove(addr);
            }
        }
        sent
    }

    /// Calls sent on links so far.
    pub(super) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Counts `n` calls sent again after their link failed.
    pub(super) fn count_resent(&self, n: u64) {
        self.resent.fetch_add(n, Ordering::Relaxed);
    }

    /// Calls sent again after their link failed (on a single node).
    pub(super) fn resent(&self) -> u64 {
        self.resent.load(Ordering::Relaxed)
    }

    /// Cuts every open link from its node's side, as a node's restart or a
    /// network cut would, leaving it in place for the next call on it to
    /// find dead (tests): each is killed from a connection of its own, so
    /// that its task, waiting for calls, does not see it yet.
    pub(super) async fn cut(&self) {
        let open: Vec<(Addr, Link)> = (self.open().values())
            .flat_map(|links| links.iter())
            .map(|(addr, link)| (addr.clone(), link.clone()))
            .collect();
        for (addr, mut link) in open {
            let id = redis::cmd("CLIENT")
                .arg("ID")
                .query_async::<i64>(&mut link)
                .await;
            let killer = Link::open(&addr.0, addr.1, &self.info, self.timeout).await;
            let (Ok(id), Ok(mut killer)) = (id, killer) else {
                continue;
            };
            let kill = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).clone();
            let _: RedisResult<i64> = kill.query_async(&mut killer).await;
        }
    }

    /// Drops every link.
    pub(super) fn clear(&self) {
        self.open().clear();
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut replies = self.call(cmd.get_packed_command(), 1).await?;
            Ok(replies.pop().unwrap_or(Value::Nil))
        })
    }

    /// A pipeline's `count` replies from its `offset`th (a transaction's
    /// replies start with `MULTI`'s and each command's `QUEUED`).
    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut replies = self
                .call(pipeline.get_packed_pipeline(), offset + count)
                .await?;
            Ok(replies.split_off(offset))
        })
    }

    fn get_db(&self) -> i64 {
        self.db()
    }
}
