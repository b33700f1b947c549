//! Pages bounded by entries instead of cursors: what clients that page by
//! item ids ask (Mastodon's `max_id`, `since_id` and `min_id`). Each is
//! read through the cursor pages by position (one read, rarely more), so
//! it has their guarantees: an entry is strictly older or newer than a
//! bound, whatever else shares its millisecond, and nothing is skipped or
//! repeated.

use std::cmp::Ordering;

use super::read::Reads;
use super::Page;
use crate::error::AppResult;
use crate::types::Post;
use crate::types::{feed_order, Cursor, Entry, ListId, PageRequest, Prev, Scope, UserId};

/// Reads of cursor pages one bounded page may take (a run of more ties
/// than this between a bound and the page answers short, never wrong).
const MAX_ROUNDS: usize = 64;

/// The feed a bounded page reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// A reader's home.
    Home(UserId),
    /// An author's own posts, as a viewer sees them (`None`: an admin).
    Author {
        viewer: Option<UserId>,
        author: UserId,
    },
    /// One of `owner`'s lists.
    List { owner: UserId, list: ListId },
}

/// What a bounded page holds: entries strictly between its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bounds {
    /// Only entries older than this one (`max_id`).
    pub older_than: Option<Entry>,
    /// Only entries newer than this one (`since_id`, `min_id`).
    pub newer_than: Option<Entry>,
    /// The entries immediately newer than `newer_than` (`min_id`), rather
    /// than the newest ones (`since_id`).
    pub closest: bool,
}

fn entry(post: &Post) -> Entry {
    Entry::new(post.created_at_ms, post.id)
}

/// Whether `a` comes after (is older than) `b` in the feed.
fn older(a: &Entry, b: &Entry) -> bool {
    feed_order(a, b) == Ordering::Greater
}

/// The position right below `entry`.
fn named_below(entry: Entry) -> Cursor {
    Cursor {
        max: entry.score,
        offset: 0,
        id: Some(entry.id),
    }
}

/// The position right above `entry`.
fn named_above(entry: Entry) -> Prev {
    Prev {
        min: entry.score,
        offset: 0,
        id: Some(entry.id),
    }
}

fn window(n: usize) -> u32 {
    (n.max(1) as u32).min(PageRequest::MAX_LIMIT)
}

impl Reads<'_> {
    /// Up to `limit` entries of `feed` strictly within `bounds`, newest
    /// first.
    pub async fn page_between(
        self,
        feed: Feed,
        bounds: Bounds,
        limit: u32,
    ) -> AppResult<Vec<Post>> {
        match bounds.newer_than {
            Some(low) if bounds.closest => self.up_from(feed, low, bounds.older_than, limit).await,
            _ => self.down_from(feed, bounds, limit).await,
        }
    }

    async fn read(self, feed: Feed, req: PageRequest) -> AppResult<Page> {
        match feed {
            Feed::Home(reader) => self.home_page(reader, req).await,
            Feed::Author { viewer, author } => self.author_page_seen_by(viewer, author, req).await,
            Feed::List { owner, list } => self.list_page(Scope::List { owner, list }, req).await,
        }
    }

    /// Down from the newest entry, or from below `older_than`, to
    /// `newer_than` at most.
    async fn down_from(self, feed: Feed, bounds: Bounds, limit: u32) -> AppResult<Vec<Post>> {
        let want = limit as usize;
        let mut items = Vec::with_capacity(want);
        // Below a bound: the position that names it.
        let mut req = match bounds.older_than {
            Some(high) => PageRequest::after(named_below(high), window(want)),
            None => PageRequest::first(window(want)),
        };
        for _ in 0..MAX_ROUNDS {
            let page = self.read(feed, req).await?;
            for post in page.items {
                let e = entry(&post);
                if bounds.older_than.is_some_and(|high| !older(&e, &high)) {
                    continue;
                }
                if bounds.newer_than.is_some_and(|low| !older(&low, &e)) {
                    return Ok(items);
                }
                items.push(post);
                if items.len() == want {
                    return Ok(items);
                }
            }
            match page.next {
                Some(next) => req = PageRequest::after(next, window(want - items.len())),
                None => break,
            }
        }
        Ok(items)
    }

    /// The entries right above `low` (up to `older_than`), newest first.
    async fn up_from(
        self,
        feed: Feed,
        low: Entry,
        older_than: Option<Entry>,
        limit: u32,
    ) -> AppResult<Vec<Post>> {
        let want = limit as usize;
        // Newest first, like every page; filled from the bottom up.
        let mut items: Vec<Post> = Vec::with_capacity(want);
        // Above a bound: the position that names it.
        let mut req = PageRequest::before(named_above(low), window(want));
        for _ in 0..MAX_ROUNDS {
            let page = self.read(feed, req).await?;
            let read = page.items.len();
            let mut capped = false;
            let mut above: Vec<Post> = Vec::with_capacity(read);
            for post in page.items {
                let e = entry(&post);
                if older_than.is_some_and(|high| !older(&e, &high)) {
                    capped = true;
                    continue;
                }
                if older(&low, &e) {
                    above.push(post);
                }
            }
            // The closest ones: the page's oldest.
            let room = want - items.len();
            let taken = above.len().min(room);
            let rest = items;
            items = above.split_off(above.len() - taken);
            items.extend(rest);
            if items.len() == want || capped || read < req.limit as usize {
                break;
            }
            req = PageRequest::before(page.prev, window(want - items.len()));
        }
        Ok(items)
    }
}
