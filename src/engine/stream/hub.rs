//! This instance's open streams: the limits on them, whom each view (a
//! reader's home, or one of its lists) shows, the hint channels they
//! need, and what each hint brings them (a post published is read once
//! here, for all of them).
//!
//! Every limit is checked and the stream registered in one critical
//! section, before anything is read ([`Hub::reserve`]): concurrent opens
//! cannot pass a limit together. Nothing the hub does while holding its
//! state awaits; the channels are subscribed to by one task, the keeper,
//! which brings the subscriptions to what the streams need, so that hints
//! keep flowing while a reader with thousands of follows subscribes.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{watch, Notify, OnceCell, Semaphore};

use super::mailbox::Mailbox;
use super::news::{hear, Heard, News};
use super::View;
use crate::engine::Engine;
use crate::error::{AppError, AppResult};
use crate::store::redis::hints::{author_of_channel, HiddenChange, Signal};
use crate::store::redis::pubsub::{Hint, Subscriber};
use crate::types::{Closing, ListId, UserId};

/// How long an opening stream waits for its channels to be subscribed.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(10);

/// Readers whose authors one query reads, after the hints' link broke.
const RELOAD_CHUNK: usize = 64;

/// Posts heard of read at once; the hints behind them wait, in order.
const READS_AHEAD: usize = 32;

pub(super) struct Hub {
    pub engine: Engine,
    /// Itself, for the tasks it starts.
    me: Weak<Hub>,
    /// Turns to read: at most `feed.stream_reads` stream reads at once.
    pub reads: Arc<Semaphore>,
    state: Mutex<State>,
    next_id: AtomicU64,
    /// Wakes the keeper: the channels wanted changed.
    keeper: Notify,
    /// What the subscriptions match: the generation of the channels
    /// wanted, and whether the link is up.
    synced: watch::Sender<Synced>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Synced {
    generation: u64,
    linked: bool,
}

#[derive(Default)]
struct State {
    readers: HashMap<View, Reader>,
    /// The local views that show each author.
    fans: HashMap<UserId, HashSet<View>>,
    /// Each user's streams here, and its lists among their views (its
    /// channel is wanted while it has a stream).
    users: HashMap<UserId, Held>,
    /// Streams open per client address.
    addresses: HashMap<IpAddr, usize>,
    open: usize,
    /// Open streams that send their posts' authors' profiles.
    with_profiles: usize,
    /// Channels the open streams need.
    channels: HashSet<String>,
    /// Channels wanted or not since the keeper last looked.
    changed: HashSet<String>,
    /// Counts the changes of `channels`.
    generation: u64,
}

/// A user's streams here.
#[derive(Default)]
struct Held {
    streams: usize,
    lists: HashSet<ListId>,
}

struct Reader {
    /// The authors its view shows (a home: itself too, with its own
    /// posts; a list: its members but those muted).
    authors: HashSet<UserId>,
    streams: Vec<Open>,
    /// Its authors read and their channels subscribed to, once for all
    /// its streams.
    loaded: Arc<OnceCell<()>>,
    /// While its authors are being read (none otherwise): what hints said
    /// of them meanwhile, newer than the records read, so they win (a
    /// home's; a list's authors are read again instead).
    heard: Option<HashMap<UserId, bool>>,
    /// A list's authors are being read again, and (`again`) must be read
    /// once more after that.
    reloading: bool,
    again: bool,
    /// A change of its list was heard and its authors are not read again
    /// yet: a post heard of is read from the list (whose members the
    /// records hold), never sent as heard.
    stale: bool,
}

impl Reader {
    /// The authors `read` from the records, as hints `heard` while they
    /// were read changed them.
    fn merged(read: HashSet<UserId>, heard: HashMap<UserId, bool>) -> HashSet<UserId> {
        read.into_iter()
            .filter(|a| heard.get(a) != Some(&false))
            .chain(heard.iter().filter(|(_, s)| **s).map(|(a, _)| *a))
            .collect()
    }
}

/// One open stream, as the hub holds it.
struct Open {
    id: u64,
    address: Option<IpAddr>,
    profiles: bool,
    mailbox: Arc<Mailbox>,
}

/// An open stream's place in the hub; dropping it closes the stream there.
pub(super) struct Slot {
    hub: Arc<Hub>,
    view: View,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.hub.leave(self.view, self.id);
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    match m.lock() {
        Ok(s) => s,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl State {
    fn want(&mut self, channel: String) {
        if self.channels.insert(channel.clone()) {
            self.changed.insert(channel);
            self.generation += 1;
        }
    }

    fn unwant(&mut self, channel: &str) {
        if self.channels.remove(channel) {
            self.changed.insert(channel.to_string());
            self.generation += 1;
        }
    }

    fn mailboxes(&self) -> impl Iterator<Item = &Arc<Mailbox>> {
        self.readers
            .values()
            .flat_map(|r| r.streams.iter().map(|h| &h.mailbox))
    }
}

impl Hub {
    pub fn new(engine: Engine) -> Arc<Self> {
        let mut state = State::default();
        state.want(engine.redis().keys().hidden_channel());
        Arc::new_cyclic(|me| Hub {
            reads: Arc::new(Semaphore::new(engine.tuning().stream_reads)),
            engine,
            me: me.clone(),
            state: Mutex::new(state),
            next_id: AtomicU64::new(1),
            keeper: Notify::new(),
            synced: watch::Sender::new(Synced::default()),
        })
    }

    pub fn open(&self) -> usize {
        lock(&self.state).open
    }

    /// A turn to read (see [`Hub::reads`]), held while the read runs.
    pub async fn turn(&self) -> AppResult<tokio::sync::SemaphorePermit<'_>> {
        self.reads
            .acquire()
            .await
            .map_err(|_| AppError::internal("stream reads", crate::error::Message("closed".into())))
    }

    /// Registers a stream of `view` from `address` if every limit allows
    /// one more, in one critical section; nothing is read.
    pub fn reserve(
        self: &Arc<Self>,
        view: View,
        address: Option<IpAddr>,
        profiles: bool,
    ) -> AppResult<(Slot, Arc<Mailbox>)> {
        let reader = view.reader;
        let tuning = self.engine.tuning();
        let mut state = lock(&self.state);
        if state.open >= tuning.streams_per_instance {
            return Err(AppError::Overloaded {
                message: format!(
                    "this instance holds {} streams, its most: retry on another",
                    state.open
                ),
                retry_after_secs: 5,
            });
        }
        let held = state.users.get(&reader).map_or(0, |h| h.streams);
        if held >= tuning.streams_per_user {
            return Err(AppError::RateLimited {
                message: format!(
                    "user {reader} holds {held} streams already, the most allowed \
                     (feed.streams_per_user)"
                ),
                retry_after_secs: 5,
            });
        }
        let per_address = tuning.streams_per_address;
        if let Some(a) = address {
            let from_there = state.addresses.get(&a).copied().unwrap_or(0);
            if per_address > 0 && from_there >= per_address {
                return Err(AppError::RateLimited {
                    message: format!(
                        "{from_there} streams are open from this address, the most allowed \
                         (feed.streams_per_address; behind a proxy, set \
                         limits.trusted_proxy_header)"
                    ),
                    retry_after_secs: 5,
                });
            }
            *state.addresses.entry(a).or_default() += 1;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mailbox = Arc::new(Mailbox::default());
        state
            .readers
            .entry(view)
            .or_insert_with(|| Reader {
                authors: HashSet::new(),
                streams: Vec::new(),
                loaded: Arc::new(OnceCell::new()),
                heard: view.list.is_none().then(HashMap::new),
                reloading: false,
                again: false,
                stale: false,
            })
            .streams
            .push(Open {
                id,
                address,
                profiles,
                mailbox: mailbox.clone(),
            });
        let user = state.users.entry(reader).or_default();
        user.streams += 1;
        user.lists.extend(view.list);
        state.open += 1;
        state.with_profiles += usize::from(profiles);
        crate::metrics::STREAMS_OPEN.set(state.open as i64);
        let slot = Slot {
            hub: self.clone(),
            view,
            id,
        };
        Ok((slot, mailbox))
    }

    /// Reads the authors `view` shows and subscribes to their channels,
    /// once for all its streams (a stream opening meanwhile waits for
    /// it); returns once the subscriptions took, so that a position read
    /// afterwards misses no hint.
    pub async fn load(&self, view: View) -> AppResult<()> {
        let reader = view.reader;
        let Some(loaded) = lock(&self.state)
            .readers
            .get(&view)
            .map(|r| r.loaded.clone())
        else {
            return Err(AppError::NotFound(format!("user {reader} has no stream")));
        };
        loaded
            .get_or_try_init(|| async {
                let authors = self.authors_of(view).await?;
                let generation = {
                    let mut state = lock(&self.state);
                    let state = &mut *state;
                    let Some(r) = state.readers.get_mut(&view) else {
                        return Ok(());
                    };
                    if !Arc::ptr_eq(&r.loaded, &loaded) {
                        return Ok(());
                    }
                    let keys = self.engine.redis().keys();
                    // Merged with what hints said meanwhile, which is newer:
                    // an author too many would bring posts its home does
                    // not show, one too few would miss its posts.
                    let shown = Reader::merged(authors, r.heard.take().unwrap_or_default());
                    for &a in &shown {
                        r.authors.insert(a);
                    }
                    // A list changed while it was read: read again.
                    let stale = view.list.is_some() && std::mem::take(&mut r.again);
                    for a in shown {
                        state.fans.entry(a).or_default().insert(view);
                        state.want(keys.author_channel(a));
                    }
                    state.want(keys.reader_channel(reader));
                    (state.generation, stale)
                };
                self.keeper.notify_one();
                self.synced_to(generation.0).await?;
                if generation.1 {
                    if let Some(hub) = self.me.upgrade() {
                        tokio::spawn(async move { hub.reload_list(view).await });
                    }
                }
                Ok::<(), AppError>(())
            })
            .await
            .map(|_| ())
    }

    /// Waits until the subscriptions match `generation` of the channels.
    async fn synced_to(&self, generation: u64) -> AppResult<()> {
        let not_linked = || AppError::Unavailable {
            what: "Redis",
            source: "this instance is not connected to its hints".into(),
        };
        let mut synced = self.synced.subscribe();
        let waited = tokio::time::timeout(
            SUBSCRIBE_WAIT,
            synced.wait_for(|s| !s.linked || s.generation >= generation),
        )
        .await;
        match waited {
            Ok(Ok(s)) if s.linked => Ok(()),
            Ok(_) => Err(not_linked()),
            Err(_) => Err(AppError::TimedOut {
                what: "Redis hint subscriptions",
            }),
        }
    }

    /// The authors `view` shows, from the records (not found for a list
    /// that is gone).
    async fn authors_of(&self, view: View) -> AppResult<HashSet<UserId>> {
        let reader = view.reader;
        if let Some(list) = view.list {
            let members = self.engine.pg().lists().authors(reader, list).await?;
            return Ok(members.into_iter().collect());
        }
        let (_, followees) = self.engine.pg().posts().following_state(reader).await?;
        let mut authors: HashSet<UserId> = followees.into_iter().collect();
        if self.engine.settings().home_includes_own_posts {
            authors.insert(reader);
        }
        Ok(authors)
    }

    /// A stream leaves: its view's channels go when it was the last, its
    /// reader's when it was its reader's last.
    fn leave(&self, view: View, id: u64) {
        let keys = self.engine.redis().keys();
        let reader = view.reader;
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let Some(r) = state.readers.get_mut(&view) else {
            return;
        };
        let Some(at) = r.streams.iter().position(|h| h.id == id) else {
            return;
        };
        let Open {
            address, profiles, ..
        } = r.streams.swap_remove(at);
        let last_of_view = r.streams.is_empty();
        let last_of_user = state.users.get_mut(&reader).is_some_and(|u| {
            u.streams = u.streams.saturating_sub(1);
            if last_of_view {
                if let Some(list) = view.list {
                    u.lists.remove(&list);
                }
            }
            u.streams == 0
        });
        if last_of_user {
            state.users.remove(&reader);
            state.unwant(&keys.reader_channel(reader));
        }
        state.open = state.open.saturating_sub(1);
        state.with_profiles = state.with_profiles.saturating_sub(usize::from(profiles));
        crate::metrics::STREAMS_OPEN.set(state.open as i64);
        if let Some(a) = address {
            if let Some(n) = state.addresses.get_mut(&a) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    state.addresses.remove(&a);
                }
            }
        }
        if !last_of_view {
            if last_of_user {
                drop(guard);
                self.keeper.notify_one();
            }
            return;
        }
        let Some(r) = state.readers.remove(&view) else {
            return;
        };
        for a in r.authors {
            if let Some(fans) = state.fans.get_mut(&a) {
                fans.remove(&view);
                if fans.is_empty() {
                    state.fans.remove(&a);
                    state.unwant(&keys.author_channel(a));
                }
            }
        }
        drop(guard);
        self.keeper.notify_one();
    }

    /// Tells every stream something.
    fn tell_all(&self, tell: impl Fn(&Mailbox)) {
        let state = lock(&self.state);
        for m in state.mailboxes() {
            tell(m);
        }
    }

    /// Every stream reads its feed and its notifications again, and tells
    /// its client to read its filters again (their hints may have been
    /// lost too).
    pub fn read_all(&self) {
        self.tell_all(|m| {
            m.read();
            m.notified();
            m.filters_changed();
        });
    }

    pub fn close_all(&self) {
        self.tell_all(|m| m.close(Closing::Shutdown));
    }

    /// The views of `reader` open here: its home's, its lists'.
    fn views_of(state: &State, reader: UserId) -> Vec<View> {
        let Some(held) = state.users.get(&reader) else {
            return Vec::new();
        };
        let lists = held.lists.iter().map(|l| Some(*l));
        (std::iter::once(None).chain(lists))
            .map(|list| View { reader, list })
            .filter(|v| state.readers.contains_key(v))
            .collect()
    }

    /// Tells every stream of `reader` (of its home and of its lists).
    fn tell_reader(&self, reader: UserId, tell: impl Fn(&Mailbox)) {
        let state = lock(&self.state);
        for view in Self::views_of(&state, reader) {
            self.tell_view(&state, view, &tell);
        }
    }

    /// Tells every stream of `view`.
    fn tell_view(&self, state: &State, view: View, tell: &impl Fn(&Mailbox)) {
        if let Some(r) = state.readers.get(&view) {
            for h in &r.streams {
                tell(&h.mailbox);
            }
        }
    }

    /// Tells every stream whose home shows `author`.
    fn tell_fans(&self, author: UserId, tell: impl Fn(&Mailbox)) {
        self.tell_fans_but(author, None, |m, _| tell(m));
    }

    /// Tells every stream whose view shows `author`, but `skipped`'s home,
    /// and whether its view's authors are stale.
    fn tell_fans_but(
        &self,
        author: UserId,
        skipped: Option<UserId>,
        tell: impl Fn(&Mailbox, bool),
    ) {
        let state = lock(&self.state);
        let Some(fans) = state.fans.get(&author) else {
            return;
        };
        let home_of = |v: &View| v.list.is_none().then_some(v.reader);
        for view in fans
            .iter()
            .filter(|v| skipped.is_none() || home_of(v) != skipped)
        {
            if let Some(r) = state.readers.get(view) {
                for h in &r.streams {
                    tell(&h.mailbox, r.stale);
                }
            }
        }
    }

    /// Hands a post heard of to every stream whose home shows its author
    /// (its own home only while homes show their own posts); a stream of
    /// a list whose change is not applied yet reads instead.
    fn tell_news(&self, news: Arc<News>) {
        let author = news.post.author_id;
        let own = self.engine.settings().home_includes_own_posts;
        let skipped = (!own).then_some(author);
        self.tell_fans_but(author, skipped, |m, stale| match stale {
            true => m.read(),
            false => m.heard(news.clone()),
        });
    }

    /// Whether a post of `author` needs reading here, and with its
    /// author's profile: some stream here shows the author.
    fn wanted(&self, author: UserId) -> Option<bool> {
        let state = lock(&self.state);
        state
            .fans
            .get(&author)
            .is_some_and(|f| !f.is_empty())
            .then_some(state.with_profiles > 0)
    }

    /// `reader`'s home shows `author` from now on (`shown`), or not: its
    /// fans and channels follow, and its streams are told of a removal.
    /// Its lists' authors are read again (a mute, an unfollow, a block
    /// change them too).
    fn shown(&self, reader: UserId, author: UserId, shown: bool, reason: &'static str) {
        self.lists_changed(reader);
        let channel = || self.engine.redis().keys().author_channel(author);
        let home = View { reader, list: None };
        {
            let mut state = lock(&self.state);
            let state = &mut *state;
            let Some(r) = state.readers.get_mut(&home) else {
                return;
            };
            if let Some(heard) = r.heard.as_mut() {
                heard.insert(author, shown);
            }
            if shown {
                if !r.authors.insert(author) {
                    return;
                }
                state.fans.entry(author).or_default().insert(home);
                state.want(channel());
            } else {
                if !r.authors.remove(&author) {
                    return;
                }
                let empty = state.fans.get_mut(&author).is_some_and(|f| {
                    f.remove(&home);
                    f.is_empty()
                });
                if empty {
                    state.fans.remove(&author);
                    state.unwant(&channel());
                }
            }
        }
        self.keeper.notify_one();
        let state = lock(&self.state);
        if shown {
            // Its posts joined the home (a follow's copies, an unmute):
            // what lies above a position comes from a read.
            self.tell_view(&state, home, &Mailbox::read);
        } else {
            self.tell_view(&state, home, &|m: &Mailbox| m.removed(author, reason));
        }
    }

    /// `reader`'s lists may show other authors now: each of its list views
    /// here reads its authors again.
    pub fn lists_changed(&self, reader: UserId) {
        let views = {
            let mut state = lock(&self.state);
            let views = Self::views_of(&state, reader);
            let views: Vec<View> = views.into_iter().filter(|v| v.list.is_some()).collect();
            // Until read again, their posts come from reads (in the order
            // of the hints: a post heard after the change is not sent as
            // heard to a list it may have left).
            for v in &views {
                if let Some(r) = state.readers.get_mut(v) {
                    r.stale = true;
                }
            }
            views
        };
        for view in views {
            if let Some(hub) = self.me.upgrade() {
                tokio::spawn(async move { hub.reload_list(view).await });
            }
        }
    }

    /// Reads a list view's authors again, and its streams read from their
    /// positions (with a removal for each author that left) once the
    /// channels match. One read at a time per view: a change heard while
    /// one runs reads once more after it. A list gone ends its streams.
    async fn reload_list(&self, view: View) {
        {
            let mut state = lock(&self.state);
            let Some(r) = state.readers.get_mut(&view) else {
                return;
            };
            // (One being loaded reads again once loaded.)
            if r.reloading || r.loaded.get().is_none() {
                r.again = true;
                return;
            }
            r.reloading = true;
        }
        loop {
            let read = self.authors_of(view).await;
            let keys = self.engine.redis().keys();
            let (generation, gone, again) = {
                let mut guard = lock(&self.state);
                let state = &mut *guard;
                if let Err(AppError::NotFound(_)) = read {
                    self.tell_view(state, view, &|m: &Mailbox| m.close(Closing::ListGone));
                    return;
                }
                let Some(r) = state.readers.get_mut(&view) else {
                    return;
                };
                let again = std::mem::take(&mut r.again);
                r.reloading = again;
                // (Authors read after the last change heard: hints route
                // its posts right again.)
                r.stale = again;
                let authors = match read {
                    Ok(authors) => authors,
                    Err(e) => {
                        // Left as they were, and stale: its streams read
                        // until the next change (or the next link) reads
                        // them again.
                        tracing::debug!(error = %e.chain(), "a list's authors were not read again");
                        r.stale = true;
                        r.authors.clone()
                    }
                };
                let gone: Vec<UserId> = r.authors.difference(&authors).copied().collect();
                let new: Vec<UserId> = authors.difference(&r.authors).copied().collect();
                r.authors = authors;
                for a in &gone {
                    let empty = state.fans.get_mut(a).is_some_and(|f| {
                        f.remove(&view);
                        f.is_empty()
                    });
                    if empty {
                        state.fans.remove(a);
                        state.unwant(&keys.author_channel(*a));
                    }
                }
                for a in new {
                    state.fans.entry(a).or_default().insert(view);
                    state.want(keys.author_channel(a));
                }
                (state.generation, gone, again)
            };
            self.keeper.notify_one();
            if let Err(e) = self.synced_to(generation).await {
                tracing::debug!(error = %e.chain(), "a list's channels lag: its streams read on the next link");
            }
            {
                let state = lock(&self.state);
                for a in gone {
                    self.tell_view(&state, view, &|m: &Mailbox| m.removed(a, "list"));
                }
                self.tell_view(&state, view, &Mailbox::read);
            }
            if !again {
                return;
            }
        }
    }

    /// Listens to hints until aborted: opens the subscriber, subscribes to
    /// everything wanted, and runs the keeper beside the dispatch until
    /// the link breaks; then every stream reads again (hints may have been
    /// missed) and the readers' authors are read again, in the background.
    pub async fn listen_forever(self: &Arc<Self>) {
        let mut first = true;
        loop {
            let (subscriber, hints) = match self.engine.redis().subscriber().await {
                Ok(link) => link,
                Err(e) => {
                    tracing::warn!(error = %e.chain(), "cannot subscribe to hints yet");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            {
                let mut state = lock(&self.state);
                let state = &mut *state;
                state.changed = state.channels.clone();
                state.generation += 1;
            }
            // Linked: an opening stream waits for the keeper's first round.
            self.synced.send_modify(|s| s.linked = true);
            if !first {
                self.read_all();
                let hub = self.clone();
                tokio::spawn(async move { hub.reload_authors().await });
            }
            first = false;
            tokio::select! {
                _ = self.dispatch(hints) => {}
                _ = self.keep(&subscriber) => {}
            }
            self.synced.send_modify(|s| s.linked = false);
            self.read_all();
        }
    }

    /// Brings the subscriptions to the channels wanted, whenever they
    /// change; returns when the link fails.
    async fn keep(&self, subscriber: &Subscriber) {
        loop {
            let (generation, on, off) = {
                let mut state = lock(&self.state);
                let changed = std::mem::take(&mut state.changed);
                let (on, off): (Vec<String>, Vec<String>) = changed
                    .into_iter()
                    .partition(|c| state.channels.contains(c));
                (state.generation, on, off)
            };
            let applied = async {
                subscriber.unsubscribe(&off).await?;
                subscriber.subscribe(&on).await
            };
            if let Err(e) = applied.await {
                tracing::warn!(error = %e.chain(), "hint subscriptions failed: reconnecting");
                let mut state = lock(&self.state);
                state.changed.extend(on);
                state.changed.extend(off);
                return;
            }
            self.synced.send_replace(Synced {
                generation,
                linked: true,
            });
            // An author's posts published before its channel took reached
            // no stream here: the homes that show it read again.
            for author in on
                .iter()
                .filter_map(|c| author_of_channel(self.engine.redis().keys(), c))
            {
                self.tell_fans(UserId(author), Mailbox::read);
            }
            self.keeper.notified().await;
        }
    }

    /// Reads every local view's authors again (hints of follows may have
    /// been missed): homes a chunk of readers per query, lists one by one.
    async fn reload_authors(&self) {
        let (homes, lists): (Vec<View>, Vec<View>) =
            (lock(&self.state).readers.keys()).partition(|v| v.list.is_none());
        for view in lists {
            if let Some(hub) = self.me.upgrade() {
                tokio::spawn(async move { hub.reload_list(view).await });
            }
        }
        let readers: Vec<UserId> = homes.iter().map(|v| v.reader).collect();
        let own = self.engine.settings().home_includes_own_posts;
        let chunks = futures::stream::iter(readers.chunks(RELOAD_CHUNK).map(<[UserId]>::to_vec))
            .map(|chunk| async move {
                self.hear_while_read(&chunk);
                let read = self.engine.pg().posts().followees_of_many(&chunk).await;
                (chunk, read)
            })
            .buffer_unordered(2);
        futures::pin_mut!(chunks);
        while let Some((chunk, read)) = chunks.next().await {
            let heard: Vec<HashMap<UserId, bool>> = {
                let mut state = lock(&self.state);
                chunk
                    .iter()
                    .map(|reader| {
                        state
                            .readers
                            .get_mut(&View::home(*reader))
                            .and_then(|r| r.heard.take())
                            .unwrap_or_default()
                    })
                    .collect()
            };
            let Ok(mut followees) = read else {
                // Left as they were: the next break reads them again.
                continue;
            };
            for (reader, heard) in chunk.into_iter().zip(heard) {
                let mut read: HashSet<UserId> = followees
                    .remove(&reader)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                if own {
                    read.insert(reader);
                }
                let authors = Reader::merged(read, heard);
                let gone: Vec<UserId> = lock(&self.state)
                    .readers
                    .get(&View::home(reader))
                    .map(|r| r.authors.difference(&authors).copied().collect())
                    .unwrap_or_default();
                for a in gone {
                    self.shown(reader, a, false, "unfollow");
                }
                for a in authors {
                    self.shown(reader, a, true, "");
                }
                self.tell_reader(reader, Mailbox::read);
            }
        }
    }

    /// Notes what hints say of `readers`' authors from now until their
    /// authors read from the records are applied.
    fn hear_while_read(&self, readers: &[UserId]) {
        let mut state = lock(&self.state);
        for reader in readers {
            if let Some(r) = state.readers.get_mut(&View::home(*reader)) {
                r.heard.get_or_insert_with(HashMap::new);
            }
        }
    }

    /// Tells the streams what each hint concerns, in the order the hints
    /// came, until the link breaks. A post published is read first, for
    /// all the streams here at once (a few posts at a time, see
    /// [`READS_AHEAD`]); nothing else waits for Redis or PostgreSQL.
    async fn dispatch(&self, mut hints: tokio::sync::mpsc::UnboundedReceiver<Hint>) {
        let keys = self.engine.redis().keys();
        let mut reading = futures::stream::FuturesOrdered::new();
        loop {
            tokio::select! {
                biased;
                Some((signal, heard)) = reading.next(), if !reading.is_empty() => {
                    self.tell(signal, heard);
                }
                hint = hints.recv(), if reading.len() < READS_AHEAD => match hint {
                    None | Some(Hint::Lost) => return,
                    Some(Hint::Message { channel, payload }) => {
                        reading.push_back(self.read_news(Signal::parse(keys, &channel, &payload)));
                    }
                },
            }
        }
    }

    /// The post a hint says was published, read if a stream here shows
    /// its author, and told once its publish has answered if it is one of
    /// this instance's (see [`Engine::answered`]).
    async fn read_news(&self, signal: Option<Signal>) -> (Option<Signal>, Option<Heard>) {
        let hinted = tokio::time::Instant::now();
        let heard = match signal {
            Some(Signal::Published { author, post, .. }) => match self.wanted(author) {
                Some(profiles) => {
                    let heard = hear(&self.engine, author, post, profiles).await;
                    self.engine.answered(post, hinted).await;
                    Some(heard)
                }
                None => None,
            },
            _ => None,
        };
        (signal, heard)
    }

    /// Tells the streams what a hint concerns.
    fn tell(&self, signal: Option<Signal>, heard: Option<Heard>) {
        match signal {
            Some(Signal::Published { author, .. }) => match heard {
                Some(Heard::News(news)) => self.tell_news(news),
                Some(Heard::Unread) => self.tell_fans(author, Mailbox::read),
                Some(Heard::Nothing) | None => {}
            },
            Some(Signal::Deleted {
                author,
                post,
                score,
            }) => self.tell_fans(author, |m| m.deleted(post, score)),
            Some(Signal::Shown {
                reader,
                author,
                change,
            }) => self.shown(reader, author, change.shows(), change.reason()),
            Some(Signal::Notified { user, .. }) => self.tell_reader(user, Mailbox::notified),
            Some(Signal::FiltersChanged { user }) => {
                self.tell_reader(user, Mailbox::filters_changed)
            }
            Some(Signal::ListsChanged { user }) => self.lists_changed(user),
            Some(Signal::Hidden { account, change }) => self.hidden(account, change),
            None => {}
        }
    }

    /// An account's posts left every feed (its own streams end too when
    /// it is deleted), or came back.
    fn hidden(&self, a: UserId, change: HiddenChange) {
        match change {
            HiddenChange::Suspended => self.tell_fans(a, |m| m.removed(a, "suspend")),
            HiddenChange::Deleted => {
                self.engine.account_gone(a);
                self.tell_fans(a, |m| m.removed(a, "delete"));
                self.tell_reader(a, |m| m.close(Closing::AccountGone));
            }
            HiddenChange::Restored => self.tell_fans(a, Mailbox::read),
        }
    }
}
