//! What one read of one feed source (an inbox or an outbox) returned.

use super::{feed_order, Entry};
use crate::types::UserId;

/// One range read of one source, from the request's `max` down.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRead {
    /// Entries in feed order.
    pub entries: Vec<Entry>,
    /// The source holds everything it should only for scores above this
    /// (it was trimmed, or filled only that far). `None`: down to the bottom.
    pub floor: Option<i64>,
    /// The read stopped before the floor: it holds every entry only for
    /// scores above this, the last score read (a run of equal scores may go
    /// on past the window). `None`: the read reached the floor.
    pub cut: Option<i64>,
}

/// Why a merged stream of source reads ends before the bottom of the feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Horizon {
    /// Nothing older exists: the stream is the whole rest of the feed.
    Complete,
    /// A read stopped at its limit at this score: read more.
    Truncated(i64),
    /// A source's retention ends at this score: older entries live only in
    /// PostgreSQL.
    Floor(i64),
}

impl Horizon {
    /// The score at or below which some source may lack entries.
    pub fn bound(self) -> Option<i64> {
        match self {
            Horizon::Complete => None,
            Horizon::Truncated(b) | Horizon::Floor(b) => Some(b),
        }
    }

    /// Whether every source holds every entry of this score.
    pub fn trusts(self, score: i64) -> bool {
        self.bound().is_none_or(|b| score > b)
    }
}

/// How far down a set of reads can be trusted: the highest floor or cut.
/// A floor wins over a cut at the same score, since reading more would not
/// help there.
pub fn horizon<'a>(reads: impl IntoIterator<Item = &'a SourceRead>) -> Horizon {
    let mut horizon = Horizon::Complete;
    for read in reads {
        if let Some(floor) = read.floor {
            if horizon.bound().is_none_or(|b| floor >= b) {
                horizon = Horizon::Floor(floor);
            }
        }
        if let Some(cut) = read.cut {
            if horizon.bound().is_none_or(|b| cut > b) {
                horizon = Horizon::Truncated(cut);
            }
        }
    }
    horizon
}

/// The part of a merged stream (entries above the horizon, in feed order,
/// once) that a page reading `wanted` entries can use: the first `wanted`
/// entries, then the rest of the last one's score. Returns the score above
/// which that part holds every entry, or `None` if it is the whole stream.
/// Only that part is looked up and returned by a warm read; a page that
/// needs more (its part held posts it does not show) reads again with a
/// wider window.
pub fn page_part(merged: &[Entry], wanted: usize) -> Option<i64> {
    let last = merged.get(wanted.max(1) - 1)?.score;
    merged[wanted.max(1)..]
        .iter()
        .any(|e| e.score != last)
        .then(|| last - 1)
}

/// Cuts source reads down to what a page reading `fetch` entries can use:
/// the entries above their horizon, merged in feed order and once, then
/// their [`page_part`]; each read keeps only its entries of that part (its
/// cut raised to the part's bound). Returns the part. (The warm read does
/// this in the store, `store/redis/warm.rs`, before it looks up any post.)
pub fn page_reads(reads: &mut [&mut SourceRead], fetch: usize) -> Vec<Entry> {
    let horizon = horizon(reads.iter().map(|r| &**r));
    if let Some(bound) = horizon.bound() {
        keep_trusted(reads, bound);
    }
    let mut merged: Vec<Entry> = reads
        .iter()
        .flat_map(|r| r.entries.iter().copied())
        .collect();
    merged.sort_unstable_by(feed_order);
    let mut seen = std::collections::HashSet::with_capacity(merged.len());
    merged.retain(|e| seen.insert(e.id));
    if let Some(bound) = page_part(&merged, fetch) {
        keep_above(reads, bound);
        merged.retain(|e| e.score > bound);
    }
    merged
}

/// Keeps only the entries above the reads' horizon `bound`, the only ones
/// the merge trusts: a read that stopped at its limit says so in its cut,
/// raised to `bound` (the horizon stays what it was); one that reached its
/// end keeps none.
fn keep_trusted(reads: &mut [&mut SourceRead], bound: i64) {
    for read in reads {
        read.entries.retain(|e| e.score > bound);
        if let Some(cut) = read.cut.as_mut() {
            *cut = (*cut).max(bound);
        }
    }
}

/// Keeps only the entries above `bound` of each read, and says so in its
/// cut: the read now holds every entry only above it.
fn keep_above(reads: &mut [&mut SourceRead], bound: i64) {
    for read in reads {
        read.entries.retain(|e| e.score > bound);
        if read.cut.is_none_or(|c| c < bound) {
            read.cut = Some(bound);
        }
    }
}

/// A range read of a source that may not be there.
#[derive(Debug, Clone, PartialEq)]
pub enum Range {
    /// The source does not exist: rebuild it.
    Missing,
    /// Being built by someone else: answer from PostgreSQL this time.
    Building,
    Read(SourceRead),
}

/// What the cache knows of one post read by a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryMeta {
    /// `None`: the post is not cached (read it from PostgreSQL).
    pub author: Option<UserId>,
    pub deleted: bool,
    /// Whether the reader follows its author (always true on an author's page).
    pub followed: bool,
}

/// One of the cache's copies of the marks every page asks about (the
/// pulled authors and the hidden accounts): each change is written to
/// every copy, and each page reads the one of its reader, so that no key
/// is read by every page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MarkCopy(pub u8);

/// Reader state a warm read needs and did not find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKey {
    /// Whom the reader follows.
    Following,
    /// A copy of the authors every follower pulls.
    Pulled(MarkCopy),
    /// A copy of the accounts whose posts are in no feed.
    Hidden(MarkCopy),
}

/// One warm read: the sources of a page and what the cache knows of their
/// entries, or the reader state that is missing or being built.
#[derive(Debug, Clone, PartialEq)]
pub enum WarmRead {
    Missing(StateKey),
    Building(StateKey),
    Read {
        /// The first source (the inbox, or an author's outbox), then the
        /// outbox of each pulled author the reader follows.
        sources: Vec<(Option<UserId>, Range)>,
        meta: std::collections::HashMap<crate::types::PostId, EntryMeta>,
    },
}

/// One author of a pulled-authors fill: its big-V epoch (`None` if it is
/// not big-V; a big-V is pulled whatever its epoch, 0 included) and the
/// posts whose delivery is in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledAuthor {
    pub author: UserId,
    pub epoch: Option<i64>,
    pub in_flight: Vec<crate::types::PostId>,
}

/// A cached post's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPost {
    pub author_id: UserId,
    pub author_username: String,
    pub body: String,
    pub created_at_ms: i64,
    pub deleted: bool,
    /// The app's JSON object as text, if any.
    pub meta: Option<String>,
}

impl CachedPost {
    /// What the cache keeps of `post` (a tombstone if `deleted`).
    pub fn of(post: &crate::types::Post, deleted: bool) -> Self {
        CachedPost {
            author_id: post.author_id,
            author_username: post.author_username.clone(),
            body: post.body.clone(),
            created_at_ms: post.created_at_ms,
            deleted,
            meta: post.meta.clone(),
        }
    }

    /// The post `id` this holds.
    pub fn into_post(self, id: crate::types::PostId) -> crate::types::Post {
        crate::types::Post {
            id,
            author_id: self.author_id,
            author_username: self.author_username,
            body: self.body,
            created_at_ms: self.created_at_ms,
            meta: self.meta,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::PostId;

    fn stream(scores: &[i64]) -> Vec<Entry> {
        scores
            .iter()
            .enumerate()
            .map(|(i, &s)| Entry::new(s, PostId(i as i64 + 1)))
            .collect()
    }

    #[test]
    fn a_page_part_is_the_wanted_entries_and_the_rest_of_their_last_score() {
        assert_eq!(page_part(&stream(&[9, 8, 7]), 3), None);
        assert_eq!(page_part(&stream(&[9, 8, 7, 6]), 3), Some(6));
        assert_eq!(page_part(&stream(&[9, 7, 7, 7, 6]), 2), Some(6));
        assert_eq!(page_part(&stream(&[9, 7, 7, 7]), 2), None);
        assert_eq!(page_part(&stream(&[]), 2), None);
    }

    #[test]
    fn a_page_s_reads_keep_only_what_their_horizon_trusts() {
        // One read cut at 7 (its run of 7 may go on), one read to its end.
        let mut cut = SourceRead {
            entries: stream(&[9, 7, 7]),
            floor: None,
            cut: Some(7),
        };
        let mut ended = SourceRead {
            entries: vec![Entry::new(8, PostId(10)), Entry::new(6, PostId(11))],
            floor: Some(5),
            cut: None,
        };
        let part = page_reads(&mut [&mut cut, &mut ended], 5);
        assert_eq!(part.iter().map(|e| e.score).collect::<Vec<_>>(), [9, 8]);
        assert_eq!((cut.entries.len(), cut.cut), (1, Some(7)));
        assert_eq!(
            (ended.entries.len(), ended.cut, ended.floor),
            (1, None, Some(5))
        );
        assert_eq!(horizon([&cut, &ended]), Horizon::Truncated(7));
    }

    #[test]
    fn keeping_above_a_bound_raises_the_cut() {
        let mut read = SourceRead {
            entries: stream(&[9, 8, 7]),
            floor: None,
            cut: None,
        };
        keep_above(&mut [&mut read], 7);
        assert_eq!((read.entries.len(), read.cut), (2, Some(7)));
        keep_above(&mut [&mut read], 5);
        assert_eq!(read.cut, Some(7));
    }
}
