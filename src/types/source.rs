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
    /// The read stopped at its `LIMIT`: more entries may follow.
    pub truncated: bool,
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
