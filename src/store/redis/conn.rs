//! The two topologies behind one connection type: a single Redis node or a
//! Redis Cluster. The store's calls go through [`Conn`] whichever runs; the
//! only thing they must know is [`Topology::groups`]: on a cluster, one
//! pipeline, transaction or script may only touch keys of one hash slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use deadpool::managed::{Manager, Object, PoolBuilder};
use deadpool_redis::{cluster, Config, Pool, Runtime};
use redis::aio::ConnectionLike;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{
    Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Script, ScriptInvocation, Value,
};
use secrecy::ExposeSecret;

use crate::error::{AppError, AppResult};
use crate::settings::RedisSettings;

/// Pooled connections to one node, or one connection to a cluster.
///
/// On a cluster every call of the process goes through one multiplexed
/// connection (cloned per call; it keeps one link per node and reconnects
/// by itself), taken once from deadpool's cluster pool: so a `WAIT` sent on
/// it covers every write the process made before ([`Conn::replicated`]).
#[derive(Clone)]
pub(super) enum Topology {
    Single(Pool),
    Cluster {
        pool: cluster::Pool,
        shared: Arc<Mutex<Option<cluster::ClusterConnection>>>,
    },
}

/// A connection of either topology.
pub enum Conn {
    /// A pooled connection to the single node.
    Single(deadpool_redis::Connection),
    /// A clone of the process's multiplexed cluster connection.
    Shared(cluster::ClusterConnection),
}

impl Conn {
    /// The multiplexed cluster connection to clone for concurrent calls;
    /// `None` on a single node, where calls share one pipeline instead.
    fn multiplexed(&self) -> Option<cluster::ClusterConnection> {
        match self {
            Conn::Single(_) => None,
            Conn::Shared(c) => Some(c.clone()),
        }
    }

    /// Waits (at most `timeout_ms`) until a replica of every master has
    /// every write this connection sent before; returns the fewest replicas
    /// that acknowledged on any master. On a single node: nothing to wait
    /// for.
    ///
    /// A master with no replica up is skipped: there is nothing to wait for
    /// (it cannot fail over), and a replica that rejoins resynchronises.
    pub async fn replicated(&mut self, timeout_ms: u64) -> RedisResult<Option<i64>> {
        let Some(conn) = self.multiplexed() else {
            return Ok(None);
        };
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(self).await?;
        let mut wait = redis::cmd("WAIT");
        wait.arg(1).arg(timeout_ms);
        let acked = futures::future::try_join_all(replicated_masters(&nodes).into_iter().map(
            |(host, port)| {
                let (mut conn, wait) = (conn.clone(), wait.clone());
                async move {
                    let routing =
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                    redis::from_redis_value::<i64>(conn.route_command(wait, routing).await?)
                        .map_err(redis::RedisError::from)
                }
            },
        ))
        .await?;
        Ok(acked.into_iter().min())
    }

    /// The nodes holding keys: `[None]` (this one) on a single node, each
    /// master's address on a cluster (from `CLUSTER NODES`).
    pub async fn masters(&mut self) -> RedisResult<Vec<Option<(String, u16)>>> {
        if self.multiplexed().is_none() {
            return Ok(vec![None]);
        }
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(self).await?;
        Ok(cluster_masters(&nodes).into_iter().map(Some).collect())
    }

    /// Runs a command on one node (`None`: wherever it routes).
    pub async fn query_on<T: FromRedisValue>(
        &mut self,
        node: Option<&(String, u16)>,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        let (Some((host, port)), Some(mut conn)) = (node, self.multiplexed()) else {
            return cmd.query_async(self).await;
        };
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: host.clone(),
            port: *port,
        });
        let value = conn.route_command(cmd.clone(), routing).await?;
        Ok(redis::from_redis_value(value)?)
    }

    /// Sends one pipeline per group of keys (see [`Topology::groups`]) and
    /// returns their replies in order: on a single node there is one group
    /// and so one pipeline; on a cluster the pipelines go concurrently, one
    /// per slot, over the multiplexed connection.
    pub async fn query_groups(&mut self, pipes: Vec<Pipeline>) -> RedisResult<Vec<Vec<Value>>> {
        match self.multiplexed() {
            None => {
                let mut out = Vec::with_capacity(pipes.len());
                for pipe in pipes {
                    out.push(pipe.query_async(self).await?);
                }
                Ok(out)
            }
            Some(base) => {
                futures::future::try_join_all(pipes.into_iter().map(|pipe| {
                    let mut conn = base.clone();
                    async move { pipe.query_async(&mut conn).await }
                }))
                .await
            }
        }
    }

    /// Runs script calls: on a single node in one pipeline (the script
    /// loaded first, for a Redis that restarted or flushed its scripts); on
    /// a cluster concurrently, each call loading the script on its node if
    /// that node answers NOSCRIPT (after a failover or a flush). Every call
    /// must keep to one slot.
    pub async fn invoke_all<T: FromRedisValue>(
        &mut self,
        script: &Script,
        calls: &[ScriptInvocation<'_>],
    ) -> RedisResult<Vec<T>> {
        match self.multiplexed() {
            None => {
                let mut pipe = redis::pipe();
                pipe.load_script(script).ignore();
                for call in calls {
                    pipe.invoke_script(call);
                }
                pipe.query_async(self).await
            }
            Some(base) => {
                futures::future::try_join_all(calls.iter().map(|call| {
                    let mut conn = base.clone();
                    async move { call.invoke_async(&mut conn).await }
                }))
                .await
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Shared(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Shared(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Shared(c) => c.get_db(),
        }
    }
}

impl Topology {
    pub(super) fn new(settings: &RedisSettings, timeout: Duration) -> AppResult<Self> {
        let nodes = settings.cluster_nodes();
        if nodes.is_empty() {
            let builder = Config::from_url(settings.url.expose_secret())
                .builder()
                .map_err(|e| AppError::internal("redis.url", e))?;
            let pool = bounded(builder, settings.pool_size, timeout)
                .build()
                .map_err(|e| AppError::internal("building the Redis pool", e))?;
            return Ok(Topology::Single(pool));
        }
        let builder = cluster::Config::from_urls(nodes)
            .builder()
            .map_err(|e| AppError::internal("redis.cluster_urls", e))?;
        let pool = bounded(builder, settings.pool_size, timeout)
            .build()
            .map_err(|e| AppError::internal("building the Redis Cluster pool", e))?;
        Ok(Topology::Cluster {
            pool,
            shared: Arc::new(Mutex::new(None)),
        })
    }

    pub(super) async fn get(&self) -> AppResult<Conn> {
        match self {
            Topology::Single(p) => Ok(Conn::Single(p.get().await?)),
            Topology::Cluster { pool, shared } => {
                if let Some(c) = lock(shared).as_ref() {
                    return Ok(Conn::Shared(c.clone()));
                }
                let object = pool.get().await.map_err(|e| {
                    crate::metrics::REDIS_ERRORS.inc();
                    AppError::Unavailable {
                        what: "Redis",
                        source: e.into(),
                    }
                })?;
                let mut slot = lock(shared);
                let conn = slot.get_or_insert_with(|| cluster::Connection::take(object));
                Ok(Conn::Shared(conn.clone()))
            }
        }
    }

    /// Drops the process's cluster connection after a call on it failed:
    /// the next call opens a new one, with a fresh map of the slots. (A
    /// connection caught in a failover has been seen to time out every call
    /// for good, its map still pointing at the dead master.)
    pub(super) fn reset(&self) {
        if let Topology::Cluster { shared, .. } = self {
            lock(shared).take();
        }
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Topology::Cluster { .. })
    }

    /// Splits `keys` (by index) into the groups that may share one call:
    /// all of them on a single node, one group per hash slot on a cluster.
    /// Groups keep the keys' order and come in order of first appearance.
    pub(super) fn groups<S: AsRef<str>>(&self, keys: &[S]) -> Vec<Vec<usize>> {
        if keys.is_empty() {
            return Vec::new();
        }
        if !self.is_cluster() {
            return vec![(0..keys.len()).collect()];
        }
        let mut at: HashMap<u16, usize> = HashMap::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let g = *at.entry(slot(key.as_ref().as_bytes())).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(i);
        }
        groups
    }
}

/// A pool of `size` connections, every wait on it bounded by `timeout`.
fn bounded<M, W>(builder: PoolBuilder<M, W>, size: usize, timeout: Duration) -> PoolBuilder<M, W>
where
    M: Manager,
    W: From<Object<M>>,
{
    builder
        .max_size(size)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
        .recycle_timeout(Some(timeout))
        .runtime(Runtime::Tokio1)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One node of a `CLUSTER NODES` reply
/// (`<id> <ip:port@cport[,hostname]> <flags> <master id or -> ...`).
struct Node<'a> {
    id: &'a str,
    addr: (String, u16),
    master: bool,
    replica_of: Option<&'a str>,
}

fn cluster_nodes(nodes: &str) -> Vec<Node<'_>> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (id, addr, flags, of) = (
                fields.next()?,
                fields.next()?,
                fields.next()?,
                fields.next()?,
            );
            let flags: Vec<&str> = flags.split(',').collect();
            if flags
                .iter()
                .any(|f| f.starts_with("fail") || *f == "handshake")
            {
                return None;
            }
            let addr = addr.split(['@', ',']).next()?;
            let (host, port) = addr.rsplit_once(':')?;
            Some(Node {
                id,
                addr: (host.to_string(), port.parse().ok()?),
                master: flags.contains(&"master"),
                replica_of: (flags.contains(&"slave") && of != "-").then_some(of),
            })
        })
        .collect()
}

/// The masters that are up, from a `CLUSTER NODES` reply.
fn cluster_masters(nodes: &str) -> Vec<(String, u16)> {
    cluster_nodes(nodes)
        .into_iter()
        .filter(|n| n.master)
        .map(|n| n.addr)
        .collect()
}

/// The masters that are up with a replica up, from a `CLUSTER NODES` reply.
fn replicated_masters(nodes: &str) -> Vec<(String, u16)> {
    let all = cluster_nodes(nodes);
    all.iter()
        .filter(|m| m.master && all.iter().any(|r| r.replica_of == Some(m.id)))
        .map(|m| m.addr.clone())
        .collect()
}

/// The Redis Cluster hash slot of a key: CRC16 (XMODEM) of its hash tag
/// (the part between the first `{` and the next `}`, if not empty) or of
/// the whole key, modulo 16384.
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag_as_redis_computes_them() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"feed:feed:{42}"), slot(b"feed:following:{42}"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn the_masters_up_are_read_from_cluster_nodes() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002 master - 0 1 2 connected 5461-10922
c3 127.0.0.1:7003@17003 master,fail - 0 1 3 connected
d4 127.0.0.1:7004@17004,node4 slave a1 0 1 1 connected
e5 127.0.0.1:7005@17005 master - 0 1 5 connected 10923-16383
";
        assert_eq!(
            cluster_masters(nodes),
            [
                ("127.0.0.1".to_string(), 7001),
                ("127.0.0.1".to_string(), 7002),
                ("127.0.0.1".to_string(), 7005)
            ]
        );
        assert_eq!(replicated_masters(nodes), [("127.0.0.1".to_string(), 7001)]);
    }
}
