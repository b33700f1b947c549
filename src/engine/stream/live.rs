//! One open stream: a position in its reader's home, read up from
//! whenever the hub says something may be new, each entry sent oldest
//! first with the position right above it; a post the hub heard of is sent
//! without a read when that is what the read would send ([`super::news`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::buffer::{Sender, Unsent};
use super::mailbox::{Mailbox, Pending};
use super::news::{tied, News};
use super::{Event, View};
use crate::engine::{Engine, Stats};
use crate::error::AppError;
use crate::store::pg::{AccountRow, IdRange, NotificationFilter};
use crate::types::{End, PageRequest, PostId, Prev, UserId};

/// Entries a stream reads per refresh page.
pub(super) const REFRESH_PAGE: u32 = 100;

/// Notifications a stream reads at a time.
const NOTICES_PAGE: u32 = 40;

/// How soon a stream whose read failed reads again; each failure in a row
/// doubles it, up to [`RETRY_MAX`], and each reader waits its own share of
/// it more, so that streams failing together do not retry together.
const RETRY: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(8);

/// How long a stream reuses an author's profile before reading it again,
/// and how many it keeps.
const PROFILE_TTL: Duration = Duration::from_secs(30);
const PROFILES_KEPT: usize = 64;

/// The wait before a stream's read is tried again, after `failures` in a
/// row (at least one): [`RETRY`] doubled per earlier failure, capped, plus
/// up to half of it again, chosen by the reader (a spread, not a secret).
pub(super) fn retry_after(failures: u32, reader: UserId) -> Duration {
    let base = RETRY
        .saturating_mul(1 << failures.saturating_sub(1).min(8))
        .min(RETRY_MAX);
    let share = (reader.0 as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54; // 0..1024
    base + base / 2 * share as u32 / 1024
}

/// Sleeps until `at` (never, for none).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl From<Unsent> for End {
    fn from(unsent: Unsent) -> Self {
        match unsent {
            Unsent::Gone => End::ClientGone,
            Unsent::Stalled => End::Stalled,
        }
    }
}

/// Authors' profiles a stream that asked for them keeps, with when each
/// was read.
#[derive(Default)]
pub(super) struct Profiles(HashMap<UserId, (Instant, Arc<AccountRow>)>);

pub(super) struct Live {
    pub engine: Engine,
    /// The instance's turns to read.
    pub reads: Arc<Semaphore>,
    /// What it follows: its reader's home, or one of its lists.
    pub view: View,
    /// Its position: everything up to here has been sent.
    pub at: Prev,
    /// Its reads that failed in a row, and when it reads again
    /// ([`retry_after`] them).
    pub failures: u32,
    pub retry_at: Option<tokio::time::Instant>,
    pub out: Sender,
    pub mailbox: Arc<Mailbox>,
    /// How long an event may wait for room.
    pub stall: Duration,
    /// Set when the stream sends its posts' authors' profiles.
    pub profiles: Option<Profiles>,
    /// Deletions whose time must be read before they are told.
    pub untimed: Vec<PostId>,
    /// Whether everything above the position as of the last read was sent
    /// (only then is a post heard of sent without a read).
    pub caught_up: bool,
    /// The id of the newest notification sent, or of the newest there was
    /// when the stream opened; `None` when the stream sends none.
    pub notices: Option<i64>,
}

impl Live {
    /// Runs the stream until it ends: `open` (with the client's position
    /// it skipped, if any), what is above the position, then what comes.
    pub(super) async fn run(mut self, heartbeat: Duration, gap: Option<Prev>) -> End {
        match self.go(heartbeat, gap).await {
            Ok(()) => End::ClientGone,
            Err(end) => end,
        }
    }

    async fn go(&mut self, heartbeat: Duration, gap: Option<Prev>) -> Result<(), End> {
        self.send(Event::Open { at: self.at, gap }).await?;
        self.catch_up().await?;
        loop {
            let retry_at = self.retry_at;
            let pending = tokio::select! {
                p = self.mailbox.take() => p,
                _ = tokio::time::sleep(heartbeat) => {
                    self.send(Event::Heartbeat).await?;
                    continue;
                }
                // A read that failed is tried again soon, hint or not.
                _ = sleep_until(retry_at), if retry_at.is_some() => Pending {
                    read: true,
                    ..Pending::default()
                },
                _ = self.out.closed() => return Ok(()),
            };
            self.act(pending).await?;
        }
    }

    async fn act(&mut self, pending: Pending) -> Result<(), End> {
        if let Some(why) = pending.closing {
            return Err(End::Closed(why));
        }
        if pending.overflowed {
            return Err(End::Overflowed);
        }
        let news: Vec<Arc<News>> = pending
            .news
            .into_iter()
            .filter(|n| {
                !pending.deleted.contains_key(&n.id())
                    && !pending.removed.contains_key(&n.post.author_id.0)
            })
            .collect();
        for (id, at) in pending.deleted {
            match at {
                Some(at) => self.send(Event::Delete { id, at: Some(at) }).await?,
                None if self.profiles.is_some() => self.untimed.push(id),
                None => self.send(Event::Delete { id, at: None }).await?,
            }
        }
        for (author, reason) in pending.removed {
            self.send(Event::Remove {
                author: UserId(author),
                reason,
            })
            .await?;
        }
        if pending.filters_changed && self.notices.is_some() {
            self.send(Event::FiltersChanged).await?;
        }
        if pending.notified {
            self.notify().await?;
        }
        if pending.read || !self.untimed.is_empty() || (!news.is_empty() && !self.caught_up) {
            self.catch_up().await?;
        } else if !news.is_empty() {
            self.deliver(news).await?;
        }
        Ok(())
    }

    /// Sends the posts heard of that are above the position, oldest first,
    /// without a read; reads instead where a read could send otherwise (a
    /// tie, a stream that wants a profile not read with the post), and
    /// once the client has made room when it has none.
    async fn deliver(&mut self, news: Vec<Arc<News>>) -> Result<(), End> {
        let mut news: Vec<Arc<News>> = news.into_iter().filter(|n| n.above(&self.at)).collect();
        news.sort_by_key(|n| (n.score(), n.id()));
        news.dedup_by_key(|n| n.id());
        let unprofiled = self.profiles.is_some() && news.iter().any(|n| n.author.is_none());
        if tied(&news, &self.at) || unprofiled {
            return self.catch_up().await;
        }
        for n in news {
            let id = n.mark();
            let author = match (&self.profiles, &n.author) {
                (Some(_), Some(None)) => {
                    // Its author left: the post left the home.
                    self.at = id;
                    continue;
                }
                (Some(_), Some(Some(row))) => Some(row.clone()),
                _ => None,
            };
            let post = n.post.clone();
            if !self.out.try_send(Event::Post { post, id, author })? {
                self.caught_up = false;
                self.out.room(self.stall).await.map_err(End::from)?;
                return self.catch_up().await;
            }
            self.at = id;
            Stats::bump(&self.engine.stats().stream_posts_heard, 1);
            crate::metrics::stream_post_sent(true);
        }
        Ok(())
    }

    /// Sends every entry above the position, oldest first (and the
    /// deletions whose time was missing). A page is sent while its client
    /// makes room; when the buffer is full, the rest of the page is let go
    /// (a stalled stream holds no page) and read again once half the
    /// buffer is free.
    async fn catch_up(&mut self) -> Result<(), End> {
        'pages: loop {
            let req = PageRequest::before(self.at, REFRESH_PAGE);
            let reads = self.reads.clone();
            let turn = reads.acquire().await.map_err(|_| End::Refused)?;
            // (Boxed: an idle stream's task does not carry the read's state.)
            let read = Box::pin(self.read(req)).await;
            drop(turn);
            self.caught_up = false;
            let (page, deletions) = match read {
                Ok(read) => read,
                Err(AppError::NotFound(_) | AppError::BadRequest(_)) => return Err(End::Refused),
                Err(e) => {
                    tracing::debug!(error = %e.chain(), reader = %self.view.reader, "a stream could not read");
                    self.failures = self.failures.saturating_add(1);
                    let wait = retry_after(self.failures, self.view.reader);
                    self.retry_at = Some(tokio::time::Instant::now() + wait);
                    return Ok(());
                }
            };
            (self.failures, self.retry_at) = (0, None);
            for (id, at) in deletions {
                self.send(Event::Delete { id, at }).await?;
            }
            let full = page.items.len() == REFRESH_PAGE as usize;
            let mut blocked = false;
            for (post, id) in page.items.into_iter().zip(page.marks).rev() {
                let author = match &self.profiles {
                    None => None,
                    Some(p) => match p.fresh(post.author_id) {
                        Some(row) => Some(row),
                        // Its author left meanwhile: the post left the home.
                        None => {
                            self.at = id;
                            continue;
                        }
                    },
                };
                if self.out.try_send(Event::Post { post, id, author })? {
                    self.at = id;
                    crate::metrics::stream_post_sent(false);
                } else {
                    blocked = true;
                    break;
                }
            }
            if blocked {
                // (The rest of the page is gone with the loop.)
                self.out.room(self.stall).await.map_err(End::from)?;
                continue 'pages;
            }
            if !full {
                self.caught_up = true;
                return Ok(());
            }
        }
    }

    /// Sends the reader's notifications newer than the newest sent, oldest
    /// first. One that cannot be read now is left to the next hint (or to
    /// the client's read of its notifications).
    async fn notify(&mut self) -> Result<(), End> {
        while let Some(above) = self.notices {
            let range = IdRange {
                below: None,
                above: Some(above),
                closest: true,
            };
            let reads = self.reads.clone();
            let turn = reads.acquire().await.map_err(|_| End::Refused)?;
            let read = self
                .engine
                .notifications()
                .page(
                    self.view.reader,
                    range,
                    &NotificationFilter::default(),
                    NOTICES_PAGE,
                )
                .await;
            drop(turn);
            let told = match read {
                Ok(told) => told,
                Err(e) => {
                    tracing::debug!(error = %e.chain(), reader = %self.view.reader, "a stream could not read notifications");
                    return Ok(());
                }
            };
            let full = told.len() == NOTICES_PAGE as usize;
            // (A page comes newest first.)
            for t in told.into_iter().rev() {
                let id = t.0.id;
                self.send(Event::Notification(Arc::new(t))).await?;
                self.notices = Some(id);
            }
            if !full {
                break;
            }
        }
        Ok(())
    }

    /// One page up from the position, with the profiles its posts need and
    /// the times of the deletions waiting for them, all under one turn: a
    /// read that fails in any part fails whole and is tried again.
    async fn read(
        &mut self,
        req: PageRequest,
    ) -> Result<(crate::engine::Page, Vec<(PostId, Option<i64>)>), AppError> {
        let page = self.view.page(&self.engine, req).await?;
        let mut deletions = Vec::new();
        if let Some(profiles) = self.profiles.as_mut() {
            let authors: Vec<UserId> = page.items.iter().map(|p| p.author_id).collect();
            profiles.refresh(&self.engine, &authors).await?;
            for &id in &self.untimed {
                deletions.push((id, self.engine.profiles().post_time(id).await?));
            }
            self.untimed.clear();
        }
        Ok((page, deletions))
    }

    async fn send(&self, event: Event) -> Result<(), End> {
        self.out.send(event, self.stall).await.map_err(End::from)
    }
}

impl Profiles {
    /// Reads the profiles of `authors` not read within [`PROFILE_TTL`].
    async fn refresh(&mut self, engine: &Engine, authors: &[UserId]) -> Result<(), AppError> {
        let stale: Vec<UserId> = authors
            .iter()
            .copied()
            .filter(|a| {
                self.0
                    .get(a)
                    .is_none_or(|(at, _)| at.elapsed() >= PROFILE_TTL)
            })
            .collect();
        if stale.is_empty() {
            return Ok(());
        }
        let rows = engine.profiles().profiles(&stale).await?;
        if self.0.len() + rows.len() > PROFILES_KEPT {
            // Room for this page's authors (a page may name more than are
            // kept: they stay until the next page's).
            self.0.retain(|a, _| authors.contains(a));
        }
        let now = Instant::now();
        for a in stale {
            self.0.remove(&a);
        }
        for row in rows {
            self.0.insert(row.id, (now, Arc::new(row)));
        }
        Ok(())
    }

    /// An author's profile as last read (none: not an active account).
    fn fresh(&self, author: UserId) -> Option<Arc<AccountRow>> {
        self.0.get(&author).map(|(_, row)| row.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn retries_back_off_to_a_cap_and_spread_readers_over_half_of_it() {
        assert!(retry_after(1, UserId(1)) >= RETRY && retry_after(1, UserId(1)) <= RETRY * 3 / 2);
        assert!(retry_after(2, UserId(1)) >= RETRY * 2);
        for failures in [7, 8, 50, u32::MAX] {
            let wait = retry_after(failures, UserId(12345));
            assert!(wait >= RETRY_MAX && wait <= RETRY_MAX * 3 / 2, "{wait:?}");
        }
        let waits: HashSet<Duration> = (1..200)
            .map(|reader| retry_after(3, UserId(reader)))
            .collect();
        assert!(waits.len() > 100, "readers retry apart: {}", waits.len());
    }
}
