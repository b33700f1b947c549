//! The two topologies behind one connection type: a single Redis node or a
//! Redis Cluster. The store's calls go through [`Conn`] whichever runs; the
//! only thing they must know is `Topology::groups`: on a cluster, one
//! pipeline, transaction or script may only touch keys of one hash slot.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use deadpool::managed::{Manager, Object, PoolBuilder};
use deadpool_redis::{cluster, Config, Pool, Runtime};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Script, ScriptInvocation, Value,
};
use secrecy::ExposeSecret;

use super::links::{self, Links};
use super::nodes::{replicated_masters, slot, NodeCache, NodeMap};
use super::wire::Link;
use crate::error::{AppError, AppResult};
use crate::settings::RedisSettings;

/// Connections to one node, or one connection to a cluster, all
/// multiplexed: a call clones one and shares it with the calls in flight,
/// so the commands of concurrent calls travel together and Redis reads
/// many of them in one go (a connection a call takes for itself would cost
/// Redis a read and a write per call).
///
/// On a single node the calls take the `redis.pool_size` connections in
/// turn; each is taken once from deadpool's pool and replaced after a call
/// on it failed. On a cluster every call of the process goes through one multiplexed
/// connection (cloned per call; it keeps one link per node and reconnects
/// by itself), taken once from deadpool's cluster pool: so a `WAIT` sent on
/// it covers every write the process made before ([`Conn::replicated`]).
#[derive(Clone)]
pub(super) enum Topology {
    Single {
        pool: Pool,
        /// The multiplexed connections calls are spread over, in turn.
        lanes: Arc<[Mutex<Option<MultiplexedConnection>>]>,
        next: Arc<AtomicU64>,
        /// Links straight to the node, for reads.
        links: Option<Arc<Links>>,
    },
    Cluster {
        pool: cluster::Pool,
        shared: Arc<Mutex<Option<cluster::ClusterConnection>>>,
        nodes: Arc<NodeCache>,
        /// Links straight to the masters, for reads.
        links: Option<Arc<Links>>,
        /// Bumped whenever `shared` is dropped: a `WAIT` covers only the
        /// writes of its own connection, so one sent after a swap proves
        /// nothing of writes sent before it.
        generation: Arc<std::sync::atomic::AtomicU64>,
    },
}

/// A connection of either topology.
pub enum Conn {
    /// A clone of one of the process's multiplexed connections to the
    /// single node, with its links straight to the node and whether the
    /// calls made on it only read.
    Single(MultiplexedConnection, Option<Arc<Links>>, Use),
    /// A clone of the process's multiplexed cluster connection, with the
    /// process's last view of the cluster's nodes, its links straight to
    /// the masters, and whether the calls made on it only read.
    Shared(
        cluster::ClusterConnection,
        Arc<NodeCache>,
        Option<Arc<Links>>,
        Use,
    ),
}

/// What the calls on a cluster connection do.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Anything: they go through the cluster connection, which a `WAIT`
    /// covers.
    Any,
    /// They only read: a pipeline for one node goes on a link to it.
    Reads,
}

impl Conn {
    /// This connection, for calls that only read: a pipeline for one node
    /// goes straight to it on a link (`links.rs`).
    pub fn reads(self) -> Conn {
        self.to(Use::Reads)
    }

    /// This connection, for calls that do what `how` says.
    pub fn to(self, how: Use) -> Conn {
        match self {
            Conn::Shared(c, nodes, links, _) => Conn::Shared(c, nodes, links, how),
            Conn::Single(c, links, _) => Conn::Single(c, links, how),
        }
    }

    /// The links straight to the nodes, if this connection's calls only
    /// read.
    fn reading(&self) -> Option<Arc<Links>> {
        match self {
            Conn::Shared(_, _, links, Use::Reads) | Conn::Single(_, links, Use::Reads) => {
                links.clone()
            }
            _ => None,
        }
    }

    /// The multiplexed cluster connection to clone for concurrent calls;
    /// `None` on a single node, where calls share one pipeline instead.
    fn multiplexed(&self) -> Option<cluster::ClusterConnection> {
        match self {
            Conn::Single(..) => None,
            Conn::Shared(c, ..) => Some(c.clone()),
        }
    }

    /// The cluster's nodes: the cached view if it is fresh and `fresh` is
    /// not asked for, else a new `CLUSTER NODES`.
    async fn node_map(&mut self, fresh: bool) -> RedisResult<Arc<NodeMap>> {
        let cache = match self {
            Conn::Shared(_, cache, ..) => cache.clone(),
            Conn::Single(..) => Arc::default(),
        };
        if !fresh {
            if let Some(map) = cache.fresh() {
                return Ok(map);
            }
        }
        let text: String = redis::cmd("CLUSTER").arg("NODES").query_async(self).await?;
        let map = Arc::new(NodeMap::parse(text));
        cache.keep(map.clone());
        Ok(map)
    }

    /// Makes this process's map of the slots wrong, as after a resharding
    /// it has not seen, until a call finds it out (tests); nothing on a
    /// single node.
    pub async fn misroute_slots(&mut self) -> RedisResult<()> {
        if self.multiplexed().is_some() {
            self.node_map(true).await?;
            if let Conn::Shared(_, cache, ..) = self {
                cache.misroute();
            }
        }
        Ok(())
    }

    /// Counts calls sent again after a node refused them or their read
    /// link failed (on a cluster in `redis_cluster_calls_resent_total`
    /// too).
    fn count_resent(&self, n: u64) {
        match self {
            Conn::Shared(_, cache, ..) => {
                crate::metrics::REDIS_RESENT.inc_by(n);
                cache.resent.fetch_add(n, Ordering::Relaxed);
            }
            Conn::Single(_, Some(links), _) => links.count_resent(n),
            Conn::Single(_, None, _) => {}
        }
    }

    /// Forgets the cached view of the nodes (a call found it out of date).
    fn forget_nodes(&self) {
        if let Conn::Shared(_, cache, ..) = self {
            cache.forget();
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
        // The masters of at most a second ago. A `WAIT` that fails on one of
        // them fails the whole (the caller redoes its writes; the map is
        // read again): a fresh map would leave out a master that just died,
        // and with it the writes it took that no replica has.
        let map = self.node_map(false).await?;
        wait_on(&conn, &map.text, timeout_ms).await
    }

    /// The nodes holding keys: `[None]` (this one) on a single node, each
    /// master's address on a cluster (from `CLUSTER NODES`).
    pub async fn masters(&mut self) -> RedisResult<Vec<Option<(String, u16)>>> {
        if self.multiplexed().is_none() {
            return Ok(vec![None]);
        }
        let map = self.node_map(true).await?;
        Ok(map.masters().iter().cloned().map(Some).collect())
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

    /// Sends one pipeline per group of keys (see `Topology::groups`),
    /// each with the slot of its keys, and returns their replies in order.
    /// On a single node there is one group and so one pipeline. On a
    /// cluster they go as one pipeline per master (`Conn::by_node`), so
    /// they must be neither transactions nor mark replies ignored.
    pub async fn query_groups(
        &mut self,
        pipes: Vec<(u16, Pipeline)>,
    ) -> RedisResult<Vec<Vec<Value>>> {
        let Some(base) = self.multiplexed() else {
            let mut out = Vec::with_capacity(pipes.len());
            for (_, pipe) in pipes {
                out.push(self.on_the_node(&pipe).await?);
            }
            return Ok(out);
        };
        debug_assert!(!pipes.iter().any(|(_, p)| p.is_transaction()));
        let slots: Vec<u16> = pipes.iter().map(|(s, _)| *s).collect();
        let pipes = &pipes;
        self.by_node(
            &base,
            &slots,
            |i, pipe| {
                for cmd in pipes[i].1.cmd_iter() {
                    pipe.add_command(cmd.clone());
                }
                pipes[i].1.len()
            },
            |i| {
                let mut conn = base.clone();
                async move { pipes[i].1.query_async(&mut conn).await }
            },
        )
        .await
    }

    /// A pipeline on the single node: on a link if its calls only read
    /// (sent again on the multiplexed connection if the link fails), else
    /// on the multiplexed connection.
    async fn on_the_node(&mut self, pipe: &Pipeline) -> RedisResult<Vec<Value>> {
        let on_link = |mut link: Link| async move { pipe.query_async(&mut link).await };
        if let Some(sent) = self.on_the_nodes_link(on_link).await {
            return sent;
        }
        pipe.query_async(self).await
    }

    /// `call` on this thread's link to the single node, if this
    /// connection's reads go on links; `None` if they do not, or if the
    /// link failed (counted: the caller sends the call again on the
    /// multiplexed connection).
    async fn on_the_nodes_link<T, F, Fut>(&self, call: F) -> Option<RedisResult<T>>
    where
        F: FnOnce(Link) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let links = self.reading()?;
        match links.send(links.seed(), call).await {
            Err(e) if links::failed(&e) => {
                self.count_resent(1);
                None
            }
            sent => Some(sent),
        }
    }

    /// Runs each pipeline, all of whose commands share its slot, as one
    /// transaction (`MULTI` … `EXEC`), and returns each one's results. On
    /// a single node they go one after the other (there is one group of
    /// keys there); on a cluster the transactions of a master's slots
    /// travel in one pipeline to it (`Conn::by_node`), and one a node
    /// refuses is sent again alone, as a transaction routed by its slot.
    /// An error among a transaction's results is returned as the call's.
    pub async fn transactions(
        &mut self,
        pipes: &[(u16, Pipeline)],
    ) -> RedisResult<Vec<Vec<Value>>> {
        let atomic = |pipe: &Pipeline| {
            let mut t = pipe.clone();
            t.atomic();
            t
        };
        let Some(base) = self.multiplexed() else {
            let mut out = Vec::with_capacity(pipes.len());
            for (_, pipe) in pipes {
                out.push(atomic(pipe).query_async(self).await?);
            }
            return Ok(out);
        };
        let slots: Vec<u16> = pipes.iter().map(|(s, _)| *s).collect();
        let replies = self
            .by_node(
                &base,
                &slots,
                |i, pipe| {
                    pipe.add_command(redis::cmd("MULTI"));
                    for cmd in pipes[i].1.cmd_iter() {
                        pipe.add_command(cmd.clone());
                    }
                    pipe.add_command(redis::cmd("EXEC"));
                    pipes[i].1.len() + 2
                },
                |i| {
                    let (mut conn, t) = (base.clone(), atomic(&pipes[i].1));
                    async move {
                        let results: Vec<Value> = t.query_async(&mut conn).await?;
                        Ok(vec![Value::Array(results)])
                    }
                },
            )
            .await?;
        // Each transaction's replies end with EXEC's: its results, of
        // which an error (a script the node does not know) is the call's.
        replies
            .into_iter()
            .map(|mut replies| match replies.pop() {
                Some(Value::Array(results)) => {
                    results.into_iter().map(Value::extract_error).collect()
                }
                other => Err(redis::RedisError::from((
                    redis::ErrorKind::Parse,
                    "a transaction answered other than its results",
                    format!("{other:?}"),
                ))),
            })
            .collect()
    }

    /// Runs script calls, each with the slot of its keys, by their hash:
    /// on a single node in one pipeline, sent again after loading the
    /// script if Redis no longer knows it (a restart, a flush); on a
    /// cluster in one pipeline per master (`Conn::by_node`), where a call
    /// a node does not know the script for is sent again alone, loading
    /// it. No call loads the script while Redis has it.
    pub async fn invoke_all<T: FromRedisValue>(
        &mut self,
        script: &Script,
        calls: &[(u16, ScriptInvocation<'_>)],
    ) -> RedisResult<Vec<T>> {
        let Some(base) = self.multiplexed() else {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for (_, call) in calls {
                pipe.invoke_script(call);
            }
            let mut replies: Vec<Value> = pipe.query_async(self).await?;
            if replies.iter().any(unknown_script) {
                script.prepare_invoke().load_async(self).await?;
                replies = pipe.query_async(self).await?;
            }
            return replies
                .into_iter()
                .map(|v| redis::from_redis_value(v.extract_error()?).map_err(Into::into))
                .collect();
        };
        let slots: Vec<u16> = calls.iter().map(|(s, _)| *s).collect();
        let replies = self
            .by_node(
                &base,
                &slots,
                |i, pipe| {
                    pipe.invoke_script(&calls[i].1);
                    1
                },
                |i| {
                    let mut conn = base.clone();
                    async move {
                        let value: Value = calls[i].1.invoke_async(&mut conn).await?;
                        Ok(vec![value])
                    }
                },
            )
            .await?;
        replies
            .into_iter()
            .flatten()
            .map(|v| redis::from_redis_value(v).map_err(redis::RedisError::from))
            .collect()
    }

    /// Runs `script` over `keys` with the same `args`, one call per node
    /// holding some of them: one call on a single node, one per master on
    /// a cluster, concurrently. A call declares its first key and passes
    /// the others after `args` (the script declares
    /// `allow-cross-slot-keys`, and answers one value per key, in order).
    /// A call a node does not know the script for is sent again after
    /// loading it. A group a node refuses (a slot that moved, a failover)
    /// is sent again one key per call, routed as any call (counted in
    /// `NodeCache::resent`), and the node map is read again.
    pub async fn invoke_by_node(
        &mut self,
        script: &Script,
        keys: &[String],
        args: &[String],
    ) -> RedisResult<Vec<Value>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let evalsha = |group: &[usize]| {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(script.get_hash())
                .arg(1)
                .arg(&keys[group[0]])
                .arg(args);
            for &i in &group[1..] {
                cmd.arg(&keys[i]);
            }
            cmd
        };
        let Some(base) = self.multiplexed() else {
            let all: Vec<usize> = (0..keys.len()).collect();
            let cmd = &evalsha(&all);
            let on_link = |mut link: Link| async move {
                loading(&mut link, script, |c| {
                    let cmd = cmd.clone();
                    Box::pin(async move { cmd.query_async(c).await })
                })
                .await
            };
            if let Some(sent) = self.on_the_nodes_link(on_link).await {
                return per_key(sent?, keys.len());
            }
            let reply = loading(self, script, |c| {
                let cmd = cmd.clone();
                Box::pin(async move { cmd.query_async(c).await })
            })
            .await?;
            return per_key(reply, keys.len());
        };
        let map = self.node_map(false).await?;
        let groups = grouped(keys.len(), |i| map.node_of(slot(keys[i].as_bytes())));
        let (base, reading, map) = (&base, &self.reading(), &map);
        let sends = groups.iter().map(|group| {
            let (mut conn, cmd) = (base.clone(), evalsha(group));
            let slot = slot(keys[group[0]].as_bytes());
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                slot,
                SlotAddr::Master,
            )));
            async move {
                let reply = match reading.as_ref().zip(map.master_of(slot)) {
                    Some((links, addr)) => {
                        let cmd = &cmd;
                        links
                            .send(addr, |mut link| async move {
                                loading(&mut link, script, |c| {
                                    let cmd = cmd.clone();
                                    Box::pin(async move { cmd.query_async(c).await })
                                })
                                .await
                            })
                            .await
                    }
                    None => {
                        loading(&mut conn, script, |c| {
                            let (cmd, route) = (cmd.clone(), route.clone());
                            Box::pin(async move { c.route_command(cmd, route).await })
                        })
                        .await
                    }
                };
                if let Ok(values) = reply.and_then(|v| per_key(v, group.len())) {
                    return Ok::<_, redis::RedisError>((values, false));
                }
                let alone = group.iter().map(|&i| {
                    let mut conn = base.clone();
                    async move {
                        let reply: Value = script
                            .key(&keys[i])
                            .arg(args)
                            .invoke_async(&mut conn)
                            .await?;
                        Ok::<_, redis::RedisError>(per_key(reply, 1)?.remove(0))
                    }
                });
                Ok((futures::future::try_join_all(alone).await?, true))
            }
        });
        let replies = futures::future::try_join_all(sends).await?;
        let mut out = vec![Value::Nil; keys.len()];
        let mut resent = 0;
        for (group, (values, alone)) in groups.iter().zip(replies) {
            resent += if alone { group.len() } else { 0 };
            for (&i, value) in group.iter().zip(values) {
                out[i] = value;
            }
        }
        if resent > 0 {
            self.count_resent(resent as u64);
            self.forget_nodes();
        }
        Ok(out)
    }

    /// Sends items (`add` puts item `i`'s commands, all of slot `slots[i]`,
    /// into a pipeline and returns how many) as one pipeline per master:
    /// a node runs a pipeline's commands one at a time, so
    /// commands of many slots may travel together, which saves the client
    /// and the nodes a request per item. Reads (`Conn::reads`) go on the
    /// master's link, the rest through the cluster connection. An item a node answers with an
    /// error (MOVED after a resharding, NOSCRIPT, TRYAGAIN, or a real
    /// error), or whose node's pipeline fails as a whole (a failover), is
    /// sent again alone by `alone`, routed as any call, and its answer
    /// stands; the node map is then read again, unless the only errors
    /// were scripts the node did not know yet. Before that, the client
    /// itself follows a MOVED by sending the whole pipeline again to the
    /// node named (up to its retry limit), so items may run more than once
    /// and must be safe to; a count they return is that of their last run.
    async fn by_node<A, F, Fut>(
        &mut self,
        base: &cluster::ClusterConnection,
        slots: &[u16],
        add: A,
        alone: F,
    ) -> RedisResult<Vec<Vec<Value>>>
    where
        A: Fn(usize, &mut Pipeline) -> usize,
        F: Fn(usize) -> Fut,
        Fut: Future<Output = RedisResult<Vec<Value>>>,
    {
        let map = self.node_map(false).await?;
        let groups = grouped(slots.len(), |i| map.node_of(slots[i]));
        let (add, alone, reading, map) = (&add, &alone, &self.reading(), &map);
        let sends = groups.iter().map(|group| async move {
            let mut pipe = redis::pipe();
            let lens: Vec<usize> = group.iter().map(|&i| add(i, &mut pipe)).collect();
            let total = pipe.len();
            let slot = slots[group[0]];
            let replies = match reading.as_ref().zip(map.master_of(slot)) {
                Some((links, addr)) => {
                    let pipe = &pipe;
                    links
                        .send(addr, |mut link| async move {
                            link.req_packed_commands(pipe, 0, total).await
                        })
                        .await
                }
                None => {
                    let route =
                        SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
                    base.clone().route_pipeline(pipe, 0, total, route).await
                }
            };
            let mut out = Vec::with_capacity(group.len());
            let mut again = Vec::new();
            let mut stale = false;
            match replies {
                Ok(values) if values.len() == total => {
                    let mut rest = values.into_iter();
                    for (k, &len) in lens.iter().enumerate() {
                        let chunk: Vec<Value> = rest.by_ref().take(len).collect();
                        let failed = |v: &Value| matches!(v, Value::ServerError(_));
                        if chunk.iter().any(failed) {
                            again.push(k);
                            stale |= chunk.iter().any(|v| failed(v) && !unknown_script(v));
                        }
                        out.push(chunk);
                    }
                }
                _ => {
                    again = (0..group.len()).collect();
                    out = vec![Vec::new(); group.len()];
                    stale = true;
                }
            }
            let retried =
                futures::future::try_join_all(again.iter().map(|&k| alone(group[k]))).await?;
            let resent = again.len();
            for (k, values) in again.into_iter().zip(retried) {
                out[k] = values;
            }
            Ok::<_, redis::RedisError>((out, stale, resent))
        });
        let replies = futures::future::try_join_all(sends).await?;
        let mut out: Vec<Vec<Value>> = vec![Vec::new(); slots.len()];
        let mut stale = false;
        let mut resent = 0;
        for (group, (values, retried, again)) in groups.iter().zip(replies) {
            stale |= retried;
            resent += again;
            for (&i, v) in group.iter().zip(values) {
                out[i] = v;
            }
        }
        self.count_resent(resent as u64);
        if stale {
            self.forget_nodes();
        }
        Ok(out)
    }
}

/// Items `0..n` in groups of equal `key`, each group in the items' order,
/// the groups in order of first appearance.
fn grouped<K: std::hash::Hash + Eq>(n: usize, key: impl Fn(usize) -> K) -> Vec<Vec<usize>> {
    let mut at: HashMap<K, usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for i in 0..n {
        let g = *at.entry(key(i)).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(i);
    }
    groups
}

/// The reply of a call of `script` that `send` makes on `conn`, made once
/// more after loading the script there if the node did not know it.
async fn loading<C, F>(conn: &mut C, script: &Script, send: F) -> RedisResult<Value>
where
    C: ConnectionLike + Send,
    F: for<'c> Fn(&'c mut C) -> futures::future::BoxFuture<'c, RedisResult<Value>>,
{
    let reply = send(conn).await.and_then(Value::extract_error);
    if !reply.as_ref().is_err_and(super::unknown_script) {
        return reply;
    }
    script.prepare_invoke().load_async(&mut *conn).await?;
    send(conn).await.and_then(Value::extract_error)
}

/// A script's reply of one value per key, for `n` keys.
fn per_key(reply: Value, n: usize) -> RedisResult<Vec<Value>> {
    match reply {
        Value::Array(values) if values.len() == n => Ok(values),
        other => Err(redis::RedisError::from((
            redis::ErrorKind::Parse,
            "a script answered other than one value per key",
            format!("{other:?}"),
        ))),
    }
}

/// `WAIT 1 timeout_ms` on every master of `nodes` (a `CLUSTER NODES`
/// reply) that has a replica up; the fewest replicas that acknowledged.
fn unknown_script(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoScript))
}

async fn wait_on(
    conn: &cluster::ClusterConnection,
    nodes: &str,
    timeout_ms: u64,
) -> RedisResult<Option<i64>> {
    let mut wait = redis::cmd("WAIT");
    wait.arg(1).arg(timeout_ms);
    let acked =
        futures::future::try_join_all(replicated_masters(nodes).into_iter().map(|(host, port)| {
            let (mut conn, wait) = (conn.clone(), wait.clone());
            async move {
                let routing =
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                redis::from_redis_value::<i64>(conn.route_command(wait, routing).await?)
                    .map_err(redis::RedisError::from)
            }
        }))
        .await?;
    Ok(acked.into_iter().min())
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c, ..) => c.req_packed_command(cmd),
            Conn::Shared(c, ..) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c, ..) => c.req_packed_commands(pipeline, offset, count),
            Conn::Shared(c, ..) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c, ..) => c.get_db(),
            Conn::Shared(c, ..) => c.get_db(),
        }
    }
}

/// Connections of the cluster pool: the process uses one (multiplexed).
const CLUSTER_POOL: usize = 2;

impl Topology {
    pub(super) fn new(settings: &RedisSettings, timeout: Duration) -> AppResult<Self> {
        let nodes = settings.cluster_nodes();
        if nodes.is_empty() {
            let builder = Config::from_url(settings.url.expose_secret())
                .builder()
                .map_err(|e| AppError::internal("redis.url", e))?;
            let pool = bounded(builder, settings.single_pool_size(), timeout)
                .build()
                .map_err(|e| AppError::internal("building the Redis pool", e))?;
            let lanes = (0..settings.single_pool_size())
                .map(|_| Mutex::new(None))
                .collect();
            let links = Links::new(settings.url.expose_secret(), timeout)
                .map_err(|e| AppError::internal("redis.url", e))?;
            return Ok(Topology::Single {
                pool,
                lanes,
                next: Arc::default(),
                links: links.map(Arc::new),
            });
        }
        let links = Links::new(&nodes[0], timeout)
            .map_err(|e| AppError::internal("redis.cluster_urls", e))?;
        let builder = cluster::Config::from_urls(nodes)
            .builder()
            .map_err(|e| AppError::internal("redis.cluster_urls", e))?;
        // One connection at a time is taken from it (and replaced when it fails).
        let pool = bounded(builder, CLUSTER_POOL, timeout)
            .build()
            .map_err(|e| AppError::internal("building the Redis Cluster pool", e))?;
        Ok(Topology::Cluster {
            pool,
            shared: Arc::new(Mutex::new(None)),
            nodes: Arc::default(),
            links: links.map(Arc::new),
            generation: Arc::default(),
        })
    }

    pub(super) async fn get(&self) -> AppResult<Conn> {
        match self {
            Topology::Single {
                pool,
                lanes,
                next,
                links,
            } => {
                let conn =
                    |c: &MultiplexedConnection| Conn::Single(c.clone(), links.clone(), Use::Any);
                let lane = &lanes[next.fetch_add(1, Ordering::Relaxed) as usize % lanes.len()];
                if let Some(c) = lock(lane).as_ref() {
                    return Ok(conn(c));
                }
                let object = pool.get().await?;
                let mut slot = lock(lane);
                Ok(conn(slot.get_or_insert_with(|| {
                    deadpool_redis::Connection::take(object)
                })))
            }
            Topology::Cluster {
                pool,
                shared,
                nodes,
                links,
                ..
            } => {
                let conn = |c: &cluster::ClusterConnection| {
                    Conn::Shared(c.clone(), nodes.clone(), links.clone(), Use::Any)
                };
                if let Some(c) = lock(shared).as_ref() {
                    return Ok(conn(c));
                }
                let object = pool.get().await.map_err(|e| {
                    crate::metrics::REDIS_ERRORS.inc();
                    AppError::Unavailable {
                        what: "Redis",
                        source: e.into(),
                    }
                })?;
                let mut slot = lock(shared);
                Ok(conn(
                    slot.get_or_insert_with(|| cluster::Connection::take(object)),
                ))
            }
        }
    }

    /// Drops the process's connections after a call on one failed: the next
    /// calls open new ones (on a cluster with a fresh map of the slots). (A
    /// connection caught in a failover has been seen to time out every call
    /// for good, its map still pointing at the dead master.)
    pub(super) fn reset(&self) {
        if let Some(links) = self.links() {
            links.clear();
        }
        if let Topology::Single { lanes, .. } = self {
            for lane in lanes.iter() {
                lock(lane).take();
            }
        }
        if let Topology::Cluster {
            shared,
            nodes,
            generation,
            ..
        } = self
        {
            let mut slot = lock(shared);
            slot.take();
            generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(slot);
            nodes.forget();
        }
    }

    /// Calls sent again after a node refused them (a slot that moved, a
    /// failover) or their read link failed.
    pub(super) fn resent(&self) -> u64 {
        match self {
            Topology::Single { links, .. } => links.as_ref().map_or(0, |l| l.resent()),
            Topology::Cluster { nodes, .. } => nodes.resent.load(Ordering::Relaxed),
        }
    }

    /// The links straight to the nodes, for reads (none if the nodes are
    /// not reached over plain TCP).
    fn links(&self) -> Option<&Arc<Links>> {
        match self {
            Topology::Single { links, .. } | Topology::Cluster { links, .. } => links.as_ref(),
        }
    }

    /// Cuts the links to the nodes from the nodes' side (tests).
    pub(super) async fn cut_links(&self) {
        if let Some(links) = self.links() {
            links.cut().await;
        }
    }

    /// Calls sent straight to a node on a link.
    pub(super) fn sent_on_links(&self) -> u64 {
        self.links().map_or(0, |links| links.sent())
    }

    /// How many times the cluster connection has been replaced (0 on a
    /// single node, where every write is acknowledged by its own call).
    pub(super) fn generation(&self) -> u64 {
        match self {
            Topology::Single { .. } => 0,
            Topology::Cluster { generation, .. } => {
                generation.load(std::sync::atomic::Ordering::SeqCst)
            }
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
        grouped(keys.len(), |i| slot(keys[i].as_ref().as_bytes()))
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
