//! Live streams of home feeds and of lists: each new entry of a reader's
//! home (or of one of its lists), pushed or pulled, as it arrives, with its
//! place in the feed (a `prev` cursor) as the event's id. A list's stream
//! is a home's over other authors (its members', read again whenever the
//! list or the reader's mutes change).
//!
//! The feed is the log; the live channel is only a hint that something is
//! new. A stream holds a position in its reader's home and sends each entry
//! above it, oldest first, each with the position right above it. A post
//! one of its authors publishes is read once per instance when its hint
//! arrives and handed to every stream of it that shows the author, which
//! sends it without a read when a read up from its position (a refresh,
//! `min`) would send just that (`news.rs`); otherwise, and whenever some
//! other change may have brought entries, the stream reads the page up
//! from its position. A client that reconnects with the last id
//! it got (`Last-Event-ID`) resumes from that position: what it missed,
//! and nothing twice, up to the newest [`crate::settings::EngineSettings::stream_replay`]
//! entries (an older position is told where the replay starts instead).
//!
//! A stream that asks for them sends the reader's new notifications too,
//! read from PostgreSQL when a hint says one was written (and whenever
//! hints may have been lost), each once and in order.
//!
//! Hints travel over Redis pub/sub ([`crate::store::redis::pubsub`]): an
//! author's channel carries its posts and deletions (one message per post,
//! whoever follows it, a big-V's too), a reader's channel the changes of
//! whom its home shows, one channel the hidden accounts. Each instance
//! subscribes, once, to the channels its open streams need: a reader with
//! no open stream costs nothing, and a post is one message however many
//! streams of however many instances it wakes.
//!
//! Everything a stream holds is bounded: its events waiting for the client
//! (`buffer`), what the hub told it and it has not acted on yet
//! (`mailbox`), the profiles it keeps; a client that stops reading is
//! cut once an event waits longer than `feed.stream_stall_secs`.
//!
//! What a stream sends is what a client paging up with `prev` gets: a post
//! that enters the home below a stream's position (stamped by a clock that
//! lagged, or made visible after a later post was), or whose hint came
//! after that of a newer post the stream sent already, is in the feed's
//! pages but not in the stream.

mod buffer;
mod hub;
mod live;
mod mailbox;
mod news;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

pub use crate::types::End;
pub use buffer::{Events, BYTES as BUFFER_BYTES, EVENTS as BUFFER_EVENTS};
pub use mailbox::MAX_WAITING;

use super::notifications::Told;
use super::Engine;
use crate::error::AppResult;
use crate::store::pg::AccountRow;
use crate::types::Post;
use crate::types::{ListId, PageRequest, PostId, Prev, UserId};
use hub::Hub;
use live::{Live, Profiles, REFRESH_PAGE};

/// What a stream sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The stream is open at `at` (its first event). `gap`: the client's
    /// own position, when it lay below what a stream replays: what is
    /// between the two is in the feed (refresh pages from `gap` up to
    /// `at`), not in the stream.
    Open { at: Prev, gap: Option<Prev> },
    /// A new entry of the home, and the position right above it; with its
    /// author's profile when the stream asked for profiles.
    Post {
        post: Post,
        id: Prev,
        author: Option<Arc<AccountRow>>,
    },
    /// A post deleted: a client removes it. `at`: its time (always there
    /// on a stream that asked for profiles, unless the post is gone).
    Delete { id: PostId, at: Option<i64> },
    /// An author's posts leave the home (`reason`: `unfollow`, `mute`,
    /// `block`, `suspend`, `delete`): a client removes them.
    Remove {
        author: UserId,
        reason: &'static str,
    },
    /// A new notification of the reader (on a stream that asked for its
    /// own events), with the account it is from.
    Notification(Arc<Told>),
    /// The reader's filters changed (on a stream that asked for its own
    /// events): what comes next is matched against the new ones.
    FiltersChanged,
    /// Nothing new; the stream is alive.
    Heartbeat,
}

impl Event {
    /// Roughly what the event takes in memory, and written out: what the
    /// buffer counts.
    pub fn weight(&self) -> u32 {
        const BASE: usize = 96;
        let bytes = match self {
            Event::Post { post, author, .. } => {
                BASE * 2
                    + post.body.len()
                    + post.author_username.len()
                    + post.meta.as_ref().map_or(0, String::len)
                    + author
                        .as_ref()
                        .map_or(0, |a| BASE * 2 + a.username.len() * 2)
            }
            Event::Notification(told) => BASE * 4 + told.1.username.len() * 2,
            _ => BASE,
        };
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }
}

/// What a stream follows: a reader's home, or one of its lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct View {
    pub reader: UserId,
    pub list: Option<ListId>,
}

impl View {
    pub fn home(reader: UserId) -> Self {
        View { reader, list: None }
    }

    /// A page of what it follows.
    async fn page(self, engine: &Engine, req: PageRequest) -> AppResult<super::Page> {
        match self.list {
            None => engine.reads().home_page(self.reader, req).await,
            Some(list) => engine.lists().page(self.reader, list, req).await,
        }
    }
}

/// A stream to open.
#[derive(Debug, Clone, Copy)]
pub struct Opening {
    pub reader: UserId,
    /// One of the reader's lists, instead of its home.
    pub list: Option<ListId>,
    /// The client's last event id: resume after it.
    pub from: Option<Prev>,
    /// The client's address, for the per-address limit.
    pub address: Option<IpAddr>,
    /// Whether posts come with their authors' profiles (and deletions with
    /// their time), read under the stream's turn like its page.
    pub profiles: bool,
    /// Whether the reader's own events come too, as on Mastodon's user
    /// stream: its new notifications (those written after the stream
    /// opened, each once, in order; live only: a client reads what it
    /// missed from its notifications) and its filters changing.
    pub own_events: bool,
}

impl Opening {
    /// A stream of `reader`'s home from its top now.
    pub fn of(reader: UserId) -> Self {
        Opening {
            reader,
            list: None,
            from: None,
            address: None,
            profiles: false,
            own_events: false,
        }
    }
}

/// How the service ends a stream's connection when it ends the stream
/// itself (a client that stopped reading is not polled by the server any
/// more: only cutting its connection lets it go).
pub type Cut = Box<dyn FnOnce() + Send + 'static>;

/// This instance's open streams and the hints they listen to.
#[derive(Clone)]
pub struct Streams {
    hub: Arc<Hub>,
}

impl Streams {
    pub fn new(engine: Engine) -> Self {
        Streams {
            hub: Hub::new(engine),
        }
    }

    /// Streams open on this instance.
    pub fn open(&self) -> usize {
        self.hub.open()
    }

    /// Every open stream reads from its position again (as after hints
    /// were lost): operators, and tests that must know a stream has sent
    /// all it can.
    pub fn refresh_all(&self) {
        self.hub.read_all();
    }

    /// Ends every open stream (the process stops: clients reconnect to
    /// another instance, from their last event).
    pub fn close_all(&self) {
        self.hub.close_all();
    }

    /// Opens a stream. Refused past the limits before anything is read:
    /// per user and per address (429), per instance (503); then 404 for
    /// no account (or one being deleted) or no such list of it, 400 for a
    /// position the service never gave. `cut` ends the client's connection
    /// when the service ends the stream.
    pub async fn follow(&self, opening: Opening, cut: Option<Cut>) -> AppResult<Events> {
        let hub = &self.hub;
        let reader = opening.reader;
        let view = View {
            reader,
            list: opening.list,
        };
        let (slot, mailbox) = hub.reserve(view, opening.address, opening.profiles)?;
        hub.engine.user(reader).await?;
        hub.load(view).await?;
        let notices = match opening.own_events {
            true => Some(hub.engine.notifications().newest_id(reader).await?),
            false => None,
        };
        let (at, gap) = self.start(view, opening.from).await?;
        let tuning = hub.engine.tuning();
        let heartbeat = Duration::from_secs(tuning.stream_heartbeat_secs);
        let (out, events) = buffer::buffer();
        let live = Live {
            engine: hub.engine.clone(),
            reads: hub.reads.clone(),
            view,
            at,
            failures: 0,
            retry_at: None,
            out,
            mailbox,
            stall: Duration::from_secs(tuning.stream_stall_secs),
            profiles: opening.profiles.then(Profiles::default),
            untimed: Vec::new(),
            caught_up: false,
            notices,
        };
        tokio::spawn(async move {
            let end = live.run(heartbeat, gap).await;
            drop(slot);
            crate::metrics::stream_ended(end);
            if end.by_service() {
                if let Some(cut) = cut {
                    cut();
                }
            }
        });
        Ok(events)
    }

    /// Where a stream starts: the top of the home now, or the client's
    /// position if it is among the newest `feed.stream_replay` entries,
    /// else below the oldest of them (with the client's position as the
    /// gap). A position whose offset the service never gave is refused.
    async fn start(&self, view: View, from: Option<Prev>) -> AppResult<(Prev, Option<Prev>)> {
        let engine = &self.hub.engine;
        let _turn = self.hub.turn().await?;
        let Some(from) = from else {
            let top = view.page(engine, PageRequest::first(1)).await?;
            return Ok((top.prev, None));
        };
        if from.offset > PageRequest::MAX_OFFSET {
            view.page(engine, PageRequest::before(from, 1)).await?;
        }
        let replay = engine.tuning().stream_replay;
        let mut req = PageRequest::first(REFRESH_PAGE);
        let mut newer = 0;
        loop {
            let page = view.page(engine, req).await?;
            for post in &page.items {
                if post.created_at_ms <= from.min {
                    return Ok((from, None));
                }
                newer += 1;
                if newer >= replay {
                    let floor = Prev::counted(post.created_at_ms, 0);
                    return Ok((floor, Some(from)));
                }
            }
            match page.next {
                Some(next) if !page.items.is_empty() => {
                    req = PageRequest::after(next, REFRESH_PAGE)
                }
                _ => return Ok((from, None)),
            }
        }
    }

    /// Listens to hints until aborted: subscribes to what the open streams
    /// need, and tells them what each hint concerns.
    pub async fn listen_forever(&self) {
        self.hub.listen_forever().await
    }
}
