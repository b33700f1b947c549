//! Multiplexed connections straight to each master of a cluster, for
//! reads. A read's pipeline for one master goes out on that master's link
//! as it would to a single node, instead of through the cluster client's
//! routing task (one task and two channels fewer per call, and no one task
//! every call of the process queues on). Writes stay on the cluster
//! connection: a `WAIT` sent on it covers only the writes sent on it.
//!
//! Bounded by construction: `lanes` links per master the cluster names,
//! opened when first used and dropped when one fails or the topology is
//! reset. A read a link cannot carry (a link that fails, a MOVED after a
//! resharding) is sent again through the cluster connection, which
//! follows the cluster wherever it moved.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult,
};

/// A master's address.
pub(super) type Addr = (String, u16);

/// A master's links, by lane (`None`: not opened yet).
type Lanes = Vec<Option<MultiplexedConnection>>;

/// The process's links to the masters of its cluster.
pub struct Links {
    /// How to reach a node (credentials, database) but for its address.
    info: ConnectionInfo,
    config: AsyncConnectionConfig,
    lanes: usize,
    next: AtomicUsize,
    /// Calls sent on a link, for tests.
    sent: AtomicU64,
    open: Mutex<HashMap<Addr, Lanes>>,
}

impl Links {
    /// Links like `seed` (a seed node's URL), `lanes` per master, each
    /// call on them bounded by `timeout`.
    pub(super) fn new(seed: &str, lanes: usize, timeout: Duration) -> RedisResult<Links> {
        Ok(Links {
            info: seed.into_connection_info()?,
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout)),
            lanes: lanes.max(1),
            next: AtomicUsize::new(0),
            sent: AtomicU64::new(0),
            open: Mutex::default(),
        })
    }

    fn open(&self) -> MutexGuard<'_, HashMap<Addr, Lanes>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A link to the master at `addr`: the next of its lanes in turn,
    /// opened if it is not.
    async fn to(&self, addr: &Addr) -> RedisResult<MultiplexedConnection> {
        let lane = self.next.fetch_add(1, Ordering::Relaxed) % self.lanes;
        if let Some(link) = self.open().get(addr).and_then(|lanes| lanes[lane].clone()) {
            return Ok(link);
        }
        let info = self
            .info
            .clone()
            .set_addr(ConnectionAddr::Tcp(addr.0.clone(), addr.1));
        let link = redis::Client::open(info)?
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let mut open = self.open();
        let lanes = open
            .entry(addr.clone())
            .or_insert_with(|| vec![None; self.lanes]);
        Ok(lanes[lane].get_or_insert(link).clone())
    }

    /// Runs `call` on a link to the master at `addr`; if it fails, the
    /// links to that master are dropped (the next call opens anew).
    pub(super) async fn send<T, F, Fut>(&self, addr: &Addr, call: F) -> RedisResult<T>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let sent = match self.to(addr).await {
            Ok(link) => call(link).await,
            Err(e) => Err(e),
        };
        if sent.is_err() {
            self.open().remove(addr);
        }
        sent
    }

    /// Calls sent on links so far.
    pub(super) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Cuts every open link from its master's side, as a master's restart
    /// or a network cut would, leaving it in place for the next call on it
    /// to find dead (tests).
    pub(super) async fn cut(&self) {
        let open: Vec<MultiplexedConnection> =
            self.open().values().flatten().flatten().cloned().collect();
        for mut link in open {
            if let Ok(id) = redis::cmd("CLIENT")
                .arg("ID")
                .query_async::<i64>(&mut link)
                .await
            {
                let _: RedisResult<()> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("ID")
                    .arg(id)
                    .arg("SKIPME")
                    .arg("no")
                    .query_async(&mut link)
                    .await;
            }
        }
    }

    /// Drops every link.
    pub(super) fn clear(&self) {
        self.open().clear();
    }
}
