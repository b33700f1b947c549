//! What one read of one feed source (an inbox or an outbox) returned.

use super::Entry;

/// One range read of one source, from the request's `max` down.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRead {
    /// Entries in feed order.
    pub entries: Vec<Entry>,
    /// The source holds everything it should only for scores above this
    /// (it was trimmed, or filled only that far). `None`: down to the bottom.
    pub floor: Option<i64>,
    /// The read stopped at its `LIMIT`: it holds every entry only for
    /// scores above this. That is the last score read, or one below it
    /// when the read also took the rest of that score's run (scores are
    /// whole milliseconds), so a run of equal scores at the limit needs no
    /// second read. `None`: the read reached the floor.
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
    pub author: Option<i64>,
    pub deleted: bool,
    /// Whether the reader follows its author (always true on an author's page).
    pub followed: bool,
}

/// Reader state a warm read needs and did not find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKey {
    /// Whom the reader follows.
    Following,
    /// The authors every follower pulls.
    Pulled,
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
        sources: Vec<(Option<i64>, Range)>,
        meta: std::collections::HashMap<i64, EntryMeta>,
    },
}

/// A cached post's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPost {
    pub author_id: i64,
    pub author_username: String,
    pub body: String,
    pub created_at_ms: i64,
    pub deleted: bool,
}
