//! The two topologies behind one connection type: a single Redis node or a
//! Redis Cluster. The store's calls go through [`Conn`] whichever runs; the
//! only thing they must know is [`Topology::groups`]: on a cluster, one
//! pipeline, transaction or script may only touch keys of one hash slot.

use std::collections::HashMap;
use std::time::Duration;

use deadpool_redis::{cluster, Config, Pool, Runtime};
use redis::aio::ConnectionLike;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{
    Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Script, ScriptInvocation, Value,
};
use secrecy::ExposeSecret;

use crate::error::{AppError, AppResult};
use crate::settings::RedisSettings;

/// Pooled connections to one node, or to a cluster.
#[derive(Clone)]
pub(super) enum Topology {
    Single(Pool),
    Cluster(cluster::Pool),
}

/// A pooled connection of either topology.
pub enum Conn {
    Single(deadpool_redis::Connection),
    Cluster(cluster::Connection),
    /// A clone of a pooled cluster connection (it is multiplexed), for
    /// calls sent concurrently.
    Shared(cluster::ClusterConnection),
}

impl Conn {
    /// The multiplexed cluster connection to clone for concurrent calls;
    /// `None` on a single node, where calls share one pipeline instead.
    fn multiplexed(&self) -> Option<cluster::ClusterConnection> {
        match self {
            Conn::Single(_) => None,
            Conn::Cluster(c) => Some((**c).clone()),
            Conn::Shared(c) => Some(c.clone()),
        }
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
            Conn::Cluster(c) => c.req_packed_command(cmd),
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
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Shared(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Shared(c) => c.get_db(),
        }
    }
}

impl Topology {
    pub(super) fn new(settings: &RedisSettings, timeout: Duration) -> AppResult<Self> {
        let nodes = settings.cluster_nodes();
        if nodes.is_empty() {
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
            return Ok(Topology::Single(pool));
        }
        let pool = cluster::Config::from_urls(nodes)
            .builder()
            .map_err(|e| AppError::internal("redis.cluster_urls", e))?
            .max_size(settings.pool_size)
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .recycle_timeout(Some(timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| AppError::internal("building the Redis Cluster pool", e))?;
        Ok(Topology::Cluster(pool))
    }

    pub(super) async fn get(&self) -> AppResult<Conn> {
        Ok(match self {
            Topology::Single(p) => Conn::Single(p.get().await?),
            Topology::Cluster(p) => {
                Conn::Cluster(p.get().await.map_err(|e| AppError::Unavailable {
                    what: "Redis",
                    source: e.into(),
                })?)
            }
        })
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Topology::Cluster(_))
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

/// The masters that are up, from a `CLUSTER NODES` reply
/// (`<id> <ip:port@cport[,hostname]> <flags> ...`).
fn cluster_masters(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, addr, flags) = (fields.next()?, fields.next()?, fields.next()?);
            let flags: Vec<&str> = flags.split(',').collect();
            if !flags.contains(&"master") || flags.iter().any(|f| f.starts_with("fail")) {
                return None;
            }
            let addr = addr.split(['@', ',']).next()?;
            let (host, port) = addr.rsplit_once(':')?;
            Some((host.to_string(), port.parse().ok()?))
        })
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
    }
}
