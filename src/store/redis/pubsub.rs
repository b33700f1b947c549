//! Hints between instances over Redis pub/sub: an author posted or deleted
//! a post, a reader's home changed, an account was hidden. Plain pub/sub on
//! one node; sharded pub/sub on a cluster (`SPUBLISH`, `SSUBSCRIBE`: a
//! channel lives on the master of its slot, so a hint crosses no other
//! node). A hint is only a hint: whoever gets one reads the feed itself,
//! and a hint lost (pub/sub delivers at most once) is made up for by the
//! `Lost` every subscriber is told of when its link breaks.

use std::sync::Arc;

use redis::{IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind, Value};
use secrecy::ExposeSecret;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::hints::Signal;
use super::RedisStore;
use crate::error::{AppError, AppResult};
use crate::settings::RedisSettings;

/// Where an instance's hints come from.
#[derive(Clone)]
pub(super) enum Source {
    Single(String),
    Cluster(Vec<String>),
}

impl Source {
    pub(super) fn of(settings: &RedisSettings) -> Self {
        let nodes = settings.cluster_nodes();
        if nodes.is_empty() {
            Source::Single(settings.url.expose_secret().to_string())
        } else {
            Source::Cluster(nodes)
        }
    }
}

/// What a subscriber receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// A message on a channel.
    Message { channel: String, payload: String },
    /// The link broke: hints may have been missed (a single node's
    /// subscriber must be opened again; a cluster's subscribes again by
    /// itself).
    Lost,
}

/// One instance's subscription to hints.
#[derive(Clone)]
pub struct Subscriber {
    conn: Arc<tokio::sync::Mutex<SubConn>>,
}

enum SubConn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

fn hint_of(push: PushInfo) -> Option<Hint> {
    match push.kind {
        PushKind::Message | PushKind::SMessage => {
            let mut data = push.data.into_iter();
            let text = |v: Option<Value>| match v {
                Some(Value::BulkString(b)) => String::from_utf8(b).ok(),
                Some(Value::SimpleString(s)) => Some(s),
                _ => None,
            };
            Some(Hint::Message {
                channel: text(data.next())?,
                payload: text(data.next())?,
            })
        }
        PushKind::Disconnection => Some(Hint::Lost),
        _ => None,
    }
}

fn broken(e: redis::RedisError) -> AppError {
    crate::metrics::REDIS_ERRORS.inc();
    AppError::Unavailable {
        what: "Redis",
        source: Box::new(e),
    }
}

impl RedisStore {
    /// Opens this instance's subscriber (a RESP3 connection of its own):
    /// the hints of the channels it subscribes to arrive on the receiver.
    pub async fn subscriber(&self) -> AppResult<(Subscriber, UnboundedReceiver<Hint>)> {
        let (push_tx, mut push_rx) = unbounded_channel::<PushInfo>();
        let (tx, rx) = unbounded_channel::<Hint>();
        let conn = match &self.hints {
            Source::Single(url) => {
                let info = url.as_str().into_connection_info().map_err(broken)?;
                let redis = info
                    .redis_settings()
                    .clone()
                    .set_protocol(ProtocolVersion::RESP3);
                let client = redis::Client::open(info.set_redis_settings(redis)).map_err(broken)?;
                let config = redis::AsyncConnectionConfig::new().set_push_sender(push_tx);
                let conn = tokio::time::timeout(
                    self.timeout,
                    client.get_multiplexed_async_connection_with_config(&config),
                )
                .await
                .map_err(|_| super::timed_out())?
                .map_err(broken)?;
                // Named, so that an operator (or a test) tells it apart in
                // `CLIENT LIST`.
                let mut named = conn.clone();
                let _: redis::RedisResult<()> = redis::cmd("CLIENT")
                    .arg("SETNAME")
                    .arg(self.subscriber_name())
                    .query_async(&mut named)
                    .await;
                SubConn::Single(conn)
            }
            Source::Cluster(nodes) => {
                let client = redis::cluster::ClusterClientBuilder::new(nodes.clone())
                    .use_protocol(ProtocolVersion::RESP3)
                    .push_sender(push_tx)
                    .build()
                    .map_err(broken)?;
                let conn = tokio::time::timeout(self.timeout, client.get_async_connection())
                    .await
                    .map_err(|_| super::timed_out())?
                    .map_err(broken)?;
                SubConn::Cluster(conn)
            }
        };
        tokio::spawn(async move {
            while let Some(push) = push_rx.recv().await {
                if let Some(hint) = hint_of(push) {
                    if tx.send(hint).is_err() {
                        return;
                    }
                }
            }
            let _ = tx.send(Hint::Lost);
        });
        Ok((
            Subscriber {
                conn: Arc::new(tokio::sync::Mutex::new(conn)),
            },
            rx,
        ))
    }

    /// The name of this instance's subscriber connection on a single node
    /// (`CLIENT LIST`): its key prefix and `hints`.
    pub fn subscriber_name(&self) -> String {
        format!("{}hints", self.keys().prefix()).replace(|c: char| !c.is_ascii_graphic(), "_")
    }

    /// Publishes a hint (one message, whoever listens; nothing if nobody
    /// does), bounded by the timeout.
    pub async fn hint(&self, signal: Signal) -> AppResult<()> {
        let (_, call) = self.hint_call(&signal);
        self.bounded(|mut c| async move {
            let _: i64 = call.query_async(&mut c).await?;
            Ok(())
        })
        .await
    }

    /// A hint as a pipeline's step, with its channel's slot: for the writes
    /// it tells of to end with ([`RedisStore::in_order`]).
    pub(super) fn hint_step(&self, signal: &Signal) -> (u16, redis::Pipeline) {
        let (slot, call) = self.hint_call(signal);
        let mut step = redis::pipe();
        step.add_command(call);
        (slot, step)
    }

    /// A hint's call and its channel's slot: `PUBLISH` on one node,
    /// `SPUBLISH` (to the master of the channel's slot) on a cluster.
    fn hint_call(&self, signal: &Signal) -> (u16, redis::Cmd) {
        let verb = if self.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        };
        let channel = signal.channel(self.keys());
        let mut call = redis::cmd(verb);
        call.arg(&channel).arg(signal.payload());
        (super::slot(channel.as_bytes()), call)
    }
}

/// Calls a cluster makes at once to (un)subscribe: one channel per call,
/// each to its slot's master.
const CONCURRENT_SUBSCRIBES: usize = 32;

/// Runs `call` for each channel, [`CONCURRENT_SUBSCRIBES`] at a time.
async fn each_concurrently<F, Fut>(channels: &[String], call: F) -> AppResult<()>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<()>>,
{
    use futures::StreamExt;
    let mut calls = futures::stream::iter(channels.iter().cloned().map(call))
        .buffer_unordered(CONCURRENT_SUBSCRIBES);
    while let Some(done) = calls.next().await {
        done.map_err(broken)?;
    }
    Ok(())
}

impl Subscriber {
    /// Subscribes to channels (sharded on a cluster, where one call names
    /// channels of one slot: each goes alone).
    pub async fn subscribe(&self, channels: &[String]) -> AppResult<()> {
        if channels.is_empty() {
            return Ok(());
        }
        match &mut *self.conn.lock().await {
            SubConn::Single(c) => c.subscribe(channels).await.map_err(broken),
            SubConn::Cluster(c) => {
                let c = c.clone();
                each_concurrently(channels, |channel| {
                    let mut c = c.clone();
                    async move { c.ssubscribe(channel).await }
                })
                .await
            }
        }
    }

    /// Leaves channels.
    pub async fn unsubscribe(&self, channels: &[String]) -> AppResult<()> {
        if channels.is_empty() {
            return Ok(());
        }
        match &mut *self.conn.lock().await {
            SubConn::Single(c) => c.unsubscribe(channels).await.map_err(broken),
            SubConn::Cluster(c) => {
                let c = c.clone();
                each_concurrently(channels, |channel| {
                    let mut c = c.clone();
                    async move { c.sunsubscribe(channel).await }
                })
                .await
            }
        }
    }
}
