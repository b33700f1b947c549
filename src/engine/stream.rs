//! Live streams of home feeds: each new entry of a reader's home, pushed or
//! pulled, as it arrives, with its place in the feed (a `prev` cursor) as
//! the event's id.
//!
//! The feed is the log; the live channel is only a hint that something is
//! new. A stream holds a position in its reader's home and, whenever a
//! hint says one of the authors it shows posted, reads the page up from
//! there (a refresh, `min`) and sends each entry, oldest first, each with
//! the position right above it. A client that reconnects with the last id
//! it got (`Last-Event-ID`) resumes from that position: what it missed,
//! and nothing twice.
//!
//! Hints travel over Redis pub/sub ([`crate::store::redis::pubsub`]): an
//! author's channel carries its posts and deletions (one message per post,
//! whoever follows it, a big-V's too), a reader's channel the changes of
//! whom its home shows, one channel the hidden accounts. Each instance
//! subscribes, once, to the channels its open streams need: a reader with
//! no open stream costs nothing, and a post is one message however many
//! streams of however many instances it wakes.
//!
//! What a stream sends is what a client paging up with `prev` gets: a post
//! that enters the home below a stream's position (stamped by a clock that
//! lagged, or made visible after a later post was) is in the feed's pages
//! but not in the stream.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Semaphore;

use super::Engine;
use crate::error::{AppError, AppResult};
use crate::store::pg::models::Post;
use crate::store::redis::pubsub::{Hint, Subscriber};
use crate::types::{PageRequest, Prev};

/// Entries a stream reads per refresh page.
const REFRESH_PAGE: u32 = 100;

/// How soon a stream whose read failed reads again; each failure in a row
/// doubles it, up to [`RETRY_MAX`], and each reader waits its own share of
/// it more, so that streams failing together do not retry together.
const RETRY: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(8);

/// The wait before a stream's read is tried again, after `failures` in a
/// row (at least one): [`RETRY`] doubled per earlier failure, capped, plus
/// up to half of it again, chosen by the reader (a spread, not a secret).
fn retry_after(failures: u32, reader: i64) -> Duration {
    let base = RETRY
        .saturating_mul(1 << failures.saturating_sub(1).min(8))
        .min(RETRY_MAX);
    let share = (reader as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54; // 0..1024
    base + base / 2 * share as u32 / 1024
}

/// Sleeps until `at` (never, for none).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What a stream sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The stream is open at this position (its first event).
    Open(Prev),
    /// A new entry of the home, and the position right above it.
    Post { post: Post, id: Prev },
    /// A post deleted: a client removes it.
    Delete(i64),
    /// An author's posts leave the home (`reason`: `unfollow`, `mute`,
    /// `block`, `suspend`, `delete`): a client removes them.
    Remove { author: i64, reason: &'static str },
    /// Nothing new; the stream is alive.
    Heartbeat,
}

/// What the hub tells one stream.
#[derive(Debug, Clone)]
enum Signal {
    /// Something may be new: read from the position.
    Refresh,
    /// An author the home shows posted.
    Posted,
    Deleted(i64),
    Removed {
        author: i64,
        reason: &'static str,
    },
}

/// This instance's open streams and the hints they listen to.
#[derive(Clone)]
pub struct Streams {
    hub: Arc<Hub>,
}

struct Hub {
    engine: Engine,
    /// Turns to read: at most `feed.stream_reads` stream reads at once.
    reads: Arc<Semaphore>,
    subscriber: tokio::sync::Mutex<Option<Subscriber>>,
    state: Mutex<State>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct State {
    readers: HashMap<i64, Reader>,
    /// The local readers whose homes show each author.
    fans: HashMap<i64, HashSet<i64>>,
    /// Channels subscribed to.
    channels: HashSet<String>,
    open: usize,
}

struct Reader {
    /// The authors its home shows (itself, with its own posts).
    authors: HashSet<i64>,
    streams: Vec<(u64, UnboundedSender<Signal>)>,
}

/// An open stream's place in the hub; leaving it closes the stream there.
struct Slot {
    hub: Arc<Hub>,
    reader: i64,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let hub = self.hub.clone();
        let (reader, id) = (self.reader, self.id);
        let gone = hub.leave(reader, id);
        if !gone.is_empty() {
            tokio::spawn(async move { hub.unsubscribe(gone).await });
        }
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    match m.lock() {
        Ok(s) => s,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Streams {
    pub fn new(engine: Engine) -> Self {
        Streams {
            hub: Arc::new(Hub {
                reads: Arc::new(Semaphore::new(engine.tuning().stream_reads)),
                engine,
                subscriber: tokio::sync::Mutex::new(None),
                state: Mutex::new(State::default()),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    /// Streams open on this instance.
    pub fn open(&self) -> usize {
        lock(&self.hub.state).open
    }

    /// Every open stream reads from its position again (as after hints
    /// were lost): operators, and tests that must know a stream has sent
    /// all it can.
    pub fn refresh_all(&self) {
        let state = lock(&self.hub.state);
        for r in state.readers.values() {
            for (_, tx) in &r.streams {
                let _ = tx.send(Signal::Refresh);
            }
        }
    }

    /// Ends every open stream (the process stops: clients reconnect to
    /// another instance, from their last event).
    pub fn close_all(&self) {
        let mut state = lock(&self.hub.state);
        for r in state.readers.values_mut() {
            r.streams.clear();
        }
    }

    /// Opens a stream of `reader`'s home from `from` (a client's last event
    /// id), or from its top now. Refused past the limits: per user (429),
    /// per instance (503).
    pub async fn follow(
        &self,
        reader: i64,
        from: Option<Prev>,
    ) -> AppResult<UnboundedReceiver<Event>> {
        let engine = &self.hub.engine;
        let tuning = engine.tuning();
        let signals = self.hub.join(reader, tuning).await?;
        let (slot, signals) = signals;
        let from = match from {
            Some(p) => p,
            None => {
                let _turn = self.hub.turn().await?;
                engine.home_page(reader, PageRequest::first(1)).await?.prev
            }
        };
        let (out, events) = unbounded_channel();
        let heartbeat = Duration::from_secs(tuning.stream_heartbeat_secs);
        let engine = engine.clone();
        let reads = self.hub.reads.clone();
        tokio::spawn(async move {
            let mut stream = Live {
                engine,
                reads,
                reader,
                at: from,
                failures: 0,
                retry_at: None,
                out,
            };
            stream.run(signals, heartbeat).await;
            drop(slot);
        });
        Ok(events)
    }

    /// Listens to hints until aborted: subscribes to what the open streams
    /// need, and tells them what each hint concerns.
    pub async fn listen_forever(&self) {
        loop {
            let hints = match self.hub.connect().await {
                Ok(hints) => hints,
                Err(e) => {
                    tracing::warn!(error = %e.chain(), "cannot subscribe to hints yet");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            self.hub.dispatch(hints).await;
            // The link broke: hints may have been missed.
            *self.hub.subscriber.lock().await = None;
            self.hub.refresh_all().await;
        }
    }
}

impl Hub {
    /// A turn to read (see [`Hub::reads`]), held while the read runs.
    async fn turn(&self) -> AppResult<tokio::sync::SemaphorePermit<'_>> {
        self.reads
            .acquire()
            .await
            .map_err(|_| AppError::internal("stream reads", crate::error::Message("closed".into())))
    }

    /// Opens the subscriber and subscribes to every channel the open
    /// streams need (again, after a broken link).
    async fn connect(&self) -> AppResult<UnboundedReceiver<Hint>> {
        let redis = self.engine.redis();
        let (subscriber, hints) = redis.subscriber().await?;
        let mut channels: Vec<String> = lock(&self.state).channels.iter().cloned().collect();
        channels.push(redis.keys().hidden_channel());
        subscriber.subscribe(&channels).await?;
        *self.subscriber.lock().await = Some(subscriber);
        Ok(hints)
    }

    /// Subscribes to channels; fails while the subscriber is not
    /// connected (it subscribes to every registered channel when it is).
    async fn subscribe(&self, channels: &[String]) -> AppResult<()> {
        if channels.is_empty() {
            return Ok(());
        }
        match self.subscriber.lock().await.as_ref() {
            Some(s) => s.subscribe(channels).await,
            None => Err(AppError::Unavailable {
                what: "Redis",
                source: "this instance is not connected to its hints yet".into(),
            }),
        }
    }

    /// Leaves the channels no stream has registered again meanwhile.
    async fn unsubscribe(&self, channels: Vec<String>) {
        let subscriber = self.subscriber.lock().await;
        let Some(s) = subscriber.as_ref() else {
            return;
        };
        let unused: Vec<String> = {
            let state = lock(&self.state);
            channels
                .into_iter()
                .filter(|c| !state.channels.contains(c))
                .collect()
        };
        if let Err(e) = s.unsubscribe(&unused).await {
            tracing::debug!(error = %e.chain(), "could not leave channels");
        }
    }

    /// A stream of `reader` joins: the authors its home shows are read
    /// (for its first stream) and their channels subscribed to.
    async fn join(
        self: &Arc<Self>,
        reader: i64,
        tuning: &crate::settings::EngineSettings,
    ) -> AppResult<(Slot, UnboundedReceiver<Signal>)> {
        {
            let state = lock(&self.state);
            if state.open >= tuning.streams_per_instance {
                return Err(AppError::Overloaded {
                    message: format!(
                        "this instance holds {} streams, its most: retry on another",
                        state.open
                    ),
                    retry_after_secs: 5,
                });
            }
            if state
                .readers
                .get(&reader)
                .is_some_and(|r| r.streams.len() >= tuning.streams_per_user)
            {
                return Err(AppError::RateLimited {
                    message: format!(
                        "user {reader} holds {} streams already, the most allowed",
                        tuning.streams_per_user
                    ),
                    retry_after_secs: 5,
                });
            }
        }
        let keys = self.engine.redis().keys();
        let known = lock(&self.state).readers.contains_key(&reader);
        let authors = if known {
            None
        } else {
            Some(self.authors_of(reader).await?)
        };
        let mut channels = Vec::new();
        let (tx, rx) = unbounded_channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut state = lock(&self.state);
            let state = &mut *state;
            if !state.readers.contains_key(&reader) {
                let authors = authors.unwrap_or_default();
                for &a in &authors {
                    state.fans.entry(a).or_default().insert(reader);
                    channels.push(keys.author_channel(a));
                }
                channels.push(keys.reader_channel(reader));
                state.channels.extend(channels.iter().cloned());
                state.readers.insert(
                    reader,
                    Reader {
                        authors,
                        streams: Vec::new(),
                    },
                );
            }
            if let Some(r) = state.readers.get_mut(&reader) {
                r.streams.push((id, tx));
            }
            state.open += 1;
        }
        // Registered first, then subscribed (a channel left meanwhile by
        // the last stream of another reader is not unsubscribed once it is
        // registered again); the stream reads its position after this, so
        // a hint sent before the subscription took finds nothing unread.
        if let Err(e) = self.subscribe(&channels).await {
            let gone = self.leave(reader, id);
            self.unsubscribe(gone).await;
            return Err(e);
        }
        Ok((
            Slot {
                hub: self.clone(),
                reader,
                id,
            },
            rx,
        ))
    }

    /// The authors `reader`'s home shows, from the records.
    async fn authors_of(&self, reader: i64) -> AppResult<HashSet<i64>> {
        let (_, followees) = self.engine.pg().following_state(reader).await?;
        let mut authors: HashSet<i64> = followees.into_iter().collect();
        if self.engine.settings().home_includes_own_posts {
            authors.insert(reader);
        }
        Ok(authors)
    }

    /// A stream leaves; returns the channels no open stream needs now.
    fn leave(&self, reader: i64, id: u64) -> Vec<String> {
        let mut state = lock(&self.state);
        let state = &mut *state;
        state.open = state.open.saturating_sub(1);
        let Some(r) = state.readers.get_mut(&reader) else {
            return Vec::new();
        };
        r.streams.retain(|(s, _)| *s != id);
        if !r.streams.is_empty() {
            return Vec::new();
        }
        let keys = self.engine.redis().keys();
        let mut gone = vec![keys.reader_channel(reader)];
        if let Some(r) = state.readers.remove(&reader) {
            for a in r.authors {
                if let Some(fans) = state.fans.get_mut(&a) {
                    fans.remove(&reader);
                    if fans.is_empty() {
                        state.fans.remove(&a);
                        gone.push(keys.author_channel(a));
                    }
                }
            }
        }
        for c in &gone {
            state.channels.remove(c);
        }
        gone
    }

    /// Every open stream reads again (after hints may have been missed),
    /// and every reader's authors are read again.
    async fn refresh_all(&self) {
        let readers: Vec<i64> = lock(&self.state).readers.keys().copied().collect();
        for reader in readers {
            if let Ok(authors) = self.authors_of(reader).await {
                let gone: Vec<i64> = {
                    let state = lock(&self.state);
                    state
                        .readers
                        .get(&reader)
                        .map(|r| r.authors.difference(&authors).copied().collect())
                        .unwrap_or_default()
                };
                for a in gone {
                    self.shown(reader, a, false, "unfollow").await;
                }
                for a in authors {
                    self.shown(reader, a, true, "").await;
                }
            }
            self.tell_reader(reader, Signal::Refresh);
        }
    }

    /// Tells every stream of `reader`.
    fn tell_reader(&self, reader: i64, signal: Signal) {
        let state = lock(&self.state);
        if let Some(r) = state.readers.get(&reader) {
            for (_, tx) in &r.streams {
                let _ = tx.send(signal.clone());
            }
        }
    }

    /// Tells every stream whose home shows `author`.
    fn tell_fans(&self, author: i64, signal: Signal) {
        let state = lock(&self.state);
        let Some(fans) = state.fans.get(&author) else {
            return;
        };
        for reader in fans {
            if let Some(r) = state.readers.get(reader) {
                for (_, tx) in &r.streams {
                    let _ = tx.send(signal.clone());
                }
            }
        }
    }

    /// `reader`'s home shows `author` from now on (`shown`), or not: its
    /// fans and channels follow, and its streams are told of a removal.
    async fn shown(&self, reader: i64, author: i64, shown: bool, reason: &'static str) {
        let keys = self.engine.redis().keys();
        let channel = keys.author_channel(author);
        let (subscribe, unsubscribe) = {
            let mut state = lock(&self.state);
            let state = &mut *state;
            let Some(r) = state.readers.get_mut(&reader) else {
                return;
            };
            if shown {
                if !r.authors.insert(author) {
                    return;
                }
                state.fans.entry(author).or_default().insert(reader);
                (state.channels.insert(channel.clone()), false)
            } else {
                if !r.authors.remove(&author) {
                    return;
                }
                let empty = state.fans.get_mut(&author).is_some_and(|f| {
                    f.remove(&reader);
                    f.is_empty()
                });
                if empty {
                    state.fans.remove(&author);
                    state.channels.remove(&channel);
                }
                (false, empty)
            }
        };
        if !shown {
            self.tell_reader(reader, Signal::Removed { author, reason });
        }
        if subscribe {
            if let Err(e) = self.subscribe(std::slice::from_ref(&channel)).await {
                tracing::warn!(error = %e.chain(), "could not subscribe to an author's hints");
            }
        } else if unsubscribe {
            self.unsubscribe(vec![channel]).await;
        }
    }

    /// Tells the streams what each hint concerns, until the link breaks.
    async fn dispatch(&self, mut hints: UnboundedReceiver<Hint>) {
        let keys = self.engine.redis().keys().clone();
        let prefix = format!("{}hints:", keys.prefix());
        while let Some(hint) = hints.recv().await {
            let (channel, payload) = match hint {
                Hint::Lost => return,
                Hint::Message { channel, payload } => (channel, payload),
            };
            let Some(name) = channel.strip_prefix(&prefix) else {
                continue;
            };
            let (op, rest) = payload.split_once(':').unwrap_or((payload.as_str(), ""));
            let mut args = rest.split(':').map(|x| x.parse::<i64>());
            let first = args.next().and_then(Result::ok);
            if name == "{pulled}" {
                // The hidden accounts.
                match (op, first) {
                    ("h", Some(a)) => self.tell_fans(
                        a,
                        Signal::Removed {
                            author: a,
                            reason: "suspend",
                        },
                    ),
                    ("x", Some(a)) => self.tell_fans(
                        a,
                        Signal::Removed {
                            author: a,
                            reason: "delete",
                        },
                    ),
                    ("s", Some(a)) => self.tell_fans(a, Signal::Refresh),
                    _ => {}
                }
            } else if let Some(reader) = name
                .strip_prefix("{r")
                .and_then(|r| r.split_once('}'))
                .and_then(|(_, id)| id.parse::<i64>().ok())
            {
                // What a reader's home shows.
                match (op, first) {
                    ("f", Some(a)) => self.shown(reader, a, true, "").await,
                    ("u", Some(a)) => self.shown(reader, a, false, "unfollow").await,
                    ("m", Some(a)) => self.shown(reader, a, false, "mute").await,
                    ("b", Some(a)) => self.shown(reader, a, false, "block").await,
                    _ => {}
                }
            } else if let Some(author) = name
                .strip_prefix('{')
                .and_then(|a| a.strip_suffix('}'))
                .and_then(|a| a.parse::<i64>().ok())
            {
                // An author's posts.
                let second = args.next().and_then(Result::ok);
                match (op, first, second) {
                    ("p", Some(_), Some(_)) => self.tell_fans(author, Signal::Posted),
                    ("d", Some(id), _) => self.tell_fans(author, Signal::Deleted(id)),
                    _ => {}
                }
            }
        }
    }
}

/// One open stream.
struct Live {
    engine: Engine,
    /// The instance's turns to read ([`Hub::reads`]).
    reads: Arc<Semaphore>,
    reader: i64,
    /// Its position: everything up to here has been sent.
    at: Prev,
    /// Its reads that failed in a row, and when it reads again
    /// ([`retry_after`] them).
    failures: u32,
    retry_at: Option<tokio::time::Instant>,
    out: UnboundedSender<Event>,
}

impl Live {
    async fn run(&mut self, mut signals: UnboundedReceiver<Signal>, heartbeat: Duration) {
        if self.out.send(Event::Open(self.at)).is_err() {
            return;
        }
        if self.catch_up().await.is_err() {
            return;
        }
        loop {
            let retry_at = self.retry_at;
            let signal = tokio::select! {
                s = signals.recv() => s,
                _ = tokio::time::sleep(heartbeat) => {
                    if self.out.send(Event::Heartbeat).is_err() {
                        return;
                    }
                    continue;
                }
                // A read that failed is tried again soon, hint or not.
                _ = sleep_until(retry_at), if retry_at.is_some() => Some(Signal::Refresh),
                _ = self.out.closed() => return,
            };
            let Some(first) = signal else {
                return;
            };
            // A burst of signals costs one read.
            let mut batch = vec![first];
            while let Ok(s) = signals.try_recv() {
                batch.push(s);
            }
            if self.handle(batch).await.is_err() {
                return;
            }
        }
    }

    async fn handle(&mut self, batch: Vec<Signal>) -> Result<(), ()> {
        let mut read = false;
        for signal in batch {
            match signal {
                Signal::Refresh | Signal::Posted => read = true,
                Signal::Deleted(id) => self.send(Event::Delete(id))?,
                Signal::Removed { author, reason } => {
                    self.send(Event::Remove { author, reason })?
                }
            }
        }
        if read {
            self.catch_up().await?;
        }
        Ok(())
    }

    /// Sends every entry above the position, oldest first.
    async fn catch_up(&mut self) -> Result<(), ()> {
        loop {
            let req = PageRequest::before(self.at, REFRESH_PAGE);
            let turn = self.reads.acquire().await.map_err(|_| ())?;
            let read = self.engine.home_page(self.reader, req).await;
            drop(turn);
            let page = match read {
                Ok(page) => page,
                Err(e) => {
                    tracing::debug!(error = %e.chain(), reader = self.reader, "a stream could not read");
                    self.failures = self.failures.saturating_add(1);
                    let wait = retry_after(self.failures, self.reader);
                    self.retry_at = Some(tokio::time::Instant::now() + wait);
                    return Ok(());
                }
            };
            (self.failures, self.retry_at) = (0, None);
            let full = page.items.len() == REFRESH_PAGE as usize;
            for (post, id) in page.items.into_iter().zip(page.marks).rev() {
                self.send(Event::Post { post, id })?;
                self.at = id;
            }
            if !full {
                return Ok(());
            }
        }
    }

    fn send(&self, event: Event) -> Result<(), ()> {
        self.out.send(event).map_err(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_a_cap_and_spread_readers_over_half_of_it() {
        assert!(retry_after(1, 1) >= RETRY && retry_after(1, 1) <= RETRY * 3 / 2);
        assert!(retry_after(2, 1) >= RETRY * 2);
        for failures in [7, 8, 50, u32::MAX] {
            let wait = retry_after(failures, 12345);
            assert!(wait >= RETRY_MAX && wait <= RETRY_MAX * 3 / 2, "{wait:?}");
        }
        let waits: HashSet<Duration> = (1..200).map(|reader| retry_after(3, reader)).collect();
        assert!(waits.len() > 100, "readers retry apart: {}", waits.len());
    }
}
