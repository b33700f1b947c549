//! Redis's own account of a run: `CONFIG RESETSTAT` just before it, `INFO
//! commandstats` just after, and `INFO cpu` on both sides (`RESETSTAT`
//! leaves the CPU counters), on every node that holds keys: the single
//! node, or each master of a cluster (as the store finds them with
//! `CLUSTER NODES`), summed. Commands run inside scripts count as Redis
//! counts them: each call of a script's `redis.call` as a call of that
//! command, besides the `EVALSHA` itself.
//!
//! Redis counts every client's commands: anything else using the same
//! Redis during the run (another test suite, say) shows in the figures.

use std::collections::BTreeMap;
use std::future::Future;

use feed_service::testkit::{Connection, FeedRedis, Master};
use serde::Serialize;

type R<T> = Result<T, String>;

/// Calls of one command, and the microseconds Redis spent in them.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Command {
    pub calls: u64,
    pub usec: u64,
}

/// What Redis did during a run, summed over its nodes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Nodes measured (1 on a single node; the masters of a cluster).
    pub nodes: usize,
    /// Per command, by the name `INFO commandstats` gives it
    /// (`zrevrangebyscore`, `evalsha`, `cluster|nodes`, …). The tool's own
    /// `INFO` and `CONFIG` calls are left out.
    pub commands: BTreeMap<String, Command>,
    /// CPU time Redis used (user + system, every thread), microseconds.
    pub cpu_usec: f64,
}

impl Stats {
    pub fn calls(&self, command: &str) -> u64 {
        self.commands.get(command).map_or(0, |c| c.calls)
    }

    pub fn usec(&self, command: &str) -> u64 {
        self.commands.get(command).map_or(0, |c| c.usec)
    }

    pub fn total_calls(&self) -> u64 {
        self.commands.values().map(|c| c.calls).sum()
    }
}

/// Runs `run` between a reset of the command statistics of `store`'s Redis
/// (`name` in errors) and their reading; returns its output and what Redis
/// did meanwhile.
pub async fn around<T>(
    store: &FeedRedis,
    name: &str,
    run: impl Future<Output = T>,
) -> R<(T, Stats)> {
    let mut conn = connection(store, name).await?;
    let nodes = conn.masters().await.map_err(|e| format!("{name}: {e}"))?;
    for node in &nodes {
        query::<()>(&mut conn, node, redis::cmd("CONFIG").arg("RESETSTAT")).await?;
    }
    let before = cpu_secs(&mut conn, &nodes).await?;
    drop(conn);
    let out = run.await;
    let mut conn = connection(store, name).await?;
    let mut commands = BTreeMap::new();
    for node in &nodes {
        let text: String = query(&mut conn, node, redis::cmd("INFO").arg("commandstats")).await?;
        add_commandstats(&text, &mut commands);
    }
    let after = cpu_secs(&mut conn, &nodes).await?;
    Ok((
        out,
        Stats {
            nodes: nodes.len(),
            commands,
            cpu_usec: (after - before).max(0.0) * 1e6,
        },
    ))
}

/// A node of [`Connection::masters`]: `None` is the single node.
type Node = Master;

async fn connection(store: &FeedRedis, name: &str) -> R<Connection> {
    store
        .connection()
        .await
        .map_err(|e| format!("{name}: {}", e.chain()))
}

async fn query<T: redis::FromRedisValue>(
    conn: &mut Connection,
    node: &Node,
    cmd: &redis::Cmd,
) -> R<T> {
    conn.query_on(node, cmd)
        .await
        .map_err(|e| format!("Redis {node:?}: {e}"))
}

/// `used_cpu_user + used_cpu_sys` of every node, seconds.
async fn cpu_secs(conn: &mut Connection, nodes: &[Node]) -> R<f64> {
    let mut secs = 0.0;
    for node in nodes {
        let text: String = query(conn, node, redis::cmd("INFO").arg("cpu")).await?;
        secs += info_fields(&text)
            .filter(|(k, _)| *k == "used_cpu_user" || *k == "used_cpu_sys")
            .filter_map(|(_, v)| v.parse::<f64>().ok())
            .sum::<f64>();
    }
    Ok(secs)
}

/// `key:value` lines of an `INFO` reply.
fn info_fields(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim().split_once(':'))
}

/// Adds the lines `cmdstat_<name>:calls=…,usec=…,…` of `text` to `into`.
fn add_commandstats(text: &str, into: &mut BTreeMap<String, Command>) {
    for (key, value) in info_fields(text) {
        let Some(name) = key.strip_prefix("cmdstat_") else {
            continue;
        };
        if name == "info" || name.starts_with("config") {
            continue;
        }
        let field = |f: &str| {
            value
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == f)
                .and_then(|(_, v)| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let c = into.entry(name.to_string()).or_default();
        c.calls += field("calls");
        c.usec += field("usec");
    }
}

/// `redis_version` of `INFO server` on the first node of `store`'s Redis.
pub async fn version(store: &FeedRedis, name: &str) -> R<String> {
    let mut conn = connection(store, name).await?;
    let nodes = conn.masters().await.map_err(|e| format!("{name}: {e}"))?;
    let node = nodes.first().cloned().unwrap_or(None);
    let text: String = query(&mut conn, &node, redis::cmd("INFO").arg("server")).await?;
    let version = info_fields(&text).find(|(k, _)| *k == "redis_version");
    Ok(version.map_or("unknown".into(), |(_, v)| v.to_string()))
}
