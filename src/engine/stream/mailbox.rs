//! What the hub has told one stream and the stream has not yet acted on,
//! coalesced: any number of hints that something is new are one read
//! (of the feed, or of the notifications);
//! posts heard of, deletions and removals wait by id, at most
//! [`MAX_WAITING`] of each (more posts are one read instead). Telling
//! never blocks the hub, whatever the stream is doing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::news::News;
use crate::types::{Closing, PostId, UserId};

/// Deletions and removals a stream may have waiting; past it the stream
/// ends (its client reconnects and reads the feed again).
pub const MAX_WAITING: usize = 1024;

/// What a stream has to act on.
#[derive(Debug, Default)]
pub struct Pending {
    /// Read from the position: something may be new.
    pub read: bool,
    /// New posts, read already, to send without reading (none while
    /// `read` is set: the read brings them).
    pub news: Vec<Arc<News>>,
    /// Deleted posts, with their time when the hint carried it.
    pub deleted: BTreeMap<PostId, Option<i64>>,
    /// Authors whose posts left the home, with why.
    pub removed: BTreeMap<i64, &'static str>,
    /// The reader has new notifications.
    pub notified: bool,
    /// The reader's filters changed.
    pub filters_changed: bool,
    /// More deletions and removals came than wait at most.
    pub overflowed: bool,
    pub closing: Option<Closing>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        !self.read
            && self.news.is_empty()
            && self.deleted.is_empty()
            && self.removed.is_empty()
            && !self.notified
            && !self.filters_changed
            && !self.overflowed
            && self.closing.is_none()
    }
}

/// One stream's mailbox.
#[derive(Debug, Default)]
pub struct Mailbox {
    pending: Mutex<Pending>,
    wake: Notify,
}

impl Mailbox {
    fn with<R>(&self, f: impl FnOnce(&mut Pending) -> R) -> R {
        let r = {
            let mut pending = match self.pending.lock() {
                Ok(p) => p,
                Err(poisoned) => poisoned.into_inner(),
            };
            f(&mut pending)
        };
        self.wake.notify_one();
        r
    }

    /// Something may be new.
    pub fn read(&self) {
        self.with(|p| {
            p.read = true;
            p.news.clear();
        });
    }

    /// A new post, read already.
    pub fn heard(&self, news: Arc<News>) {
        self.with(|p| {
            if !p.read && p.news.len() < MAX_WAITING {
                p.news.push(news);
            } else {
                p.read = true;
                p.news.clear();
            }
        });
    }

    pub fn deleted(&self, post: PostId, at: Option<i64>) {
        self.with(|p| {
            if p.deleted.len() + p.removed.len() >= MAX_WAITING {
                p.overflowed = true;
            } else {
                let known = p.deleted.entry(post).or_default();
                *known = known.or(at);
            }
        });
    }

    pub fn removed(&self, author: UserId, reason: &'static str) {
        self.with(|p| {
            if p.deleted.len() + p.removed.len() >= MAX_WAITING {
                p.overflowed = true;
            } else {
                p.removed.insert(author.0, reason);
            }
        });
    }

    /// The reader has new notifications.
    pub fn notified(&self) {
        self.with(|p| p.notified = true);
    }

    /// The reader's filters changed.
    pub fn filters_changed(&self) {
        self.with(|p| p.filters_changed = true);
    }

    pub fn close(&self, why: Closing) {
        self.with(|p| {
            p.closing.get_or_insert(why);
        });
    }

    /// Waits until something was posted, and takes it all.
    pub async fn take(&self) -> Pending {
        loop {
            self.wake.notified().await;
            let pending = self.take_now();
            if !pending.is_empty() {
                return pending;
            }
        }
    }

    /// Takes what is waiting (perhaps nothing).
    pub fn take_now(&self) -> Pending {
        let mut pending = match self.pending.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        std::mem::take(&mut *pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hints_coalesce_and_what_waits_is_bounded() {
        let m = Mailbox::default();
        for _ in 0..10_000 {
            m.read();
        }
        m.deleted(PostId(7), None);
        m.deleted(PostId(7), Some(1000));
        let p = m.take().await;
        assert!(p.read);
        assert_eq!(
            p.deleted.into_iter().collect::<Vec<_>>(),
            vec![(PostId(7), Some(1000))]
        );
        for id in 0..(MAX_WAITING as i64 + 5) {
            m.deleted(PostId(id), None);
        }
        let p = m.take().await;
        assert!(p.overflowed);
        assert_eq!(p.deleted.len(), MAX_WAITING);
        assert!(m.take_now().is_empty());
    }

    #[tokio::test]
    async fn posts_heard_wait_up_to_a_bound_then_are_one_read() {
        let post = |id: i64| super::super::news::heard_of(id, id);
        let m = Mailbox::default();
        m.heard(post(1));
        m.heard(post(2));
        let p = m.take().await;
        assert!(!p.read);
        assert_eq!(p.news.len(), 2);
        for id in 0..(MAX_WAITING as i64 + 1) {
            m.heard(post(id));
        }
        let p = m.take().await;
        assert!(p.read && p.news.is_empty());
        // A read pending makes posts heard meanwhile part of it.
        m.read();
        m.heard(post(3));
        let p = m.take().await;
        assert!(p.read && p.news.is_empty());
    }

    #[tokio::test]
    async fn a_wake_before_the_wait_is_not_lost() {
        let m = Mailbox::default();
        m.close(Closing::AccountGone);
        m.close(Closing::Shutdown);
        let p = tokio::time::timeout(std::time::Duration::from_secs(1), m.take())
            .await
            .expect("woken");
        assert_eq!(p.closing, Some(Closing::AccountGone));
    }
}
