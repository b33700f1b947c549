//! Every Redis key string of the service is built here, nowhere else.
//!
//! Hash tags decide which keys share a Redis Cluster slot:
//! - a reader's keys (inbox, whom it follows, active mark) carry its
//!   *block*, `{r<id / 1024>}`: readers with ids in one block of
//!   [`READER_BLOCK`] share a slot, so a fan-out's followers (read in id
//!   order) share PUSH calls on a cluster as they do on one node, where
//!   each of those calls serves many inboxes. Blocks outnumber a cluster's
//!   masters by far once users count in the millions, so they still spread
//!   evenly;
//! - an author's outbox and active fans carry its id (`{7}`), a post its
//!   id;
//! - each copy of the marks (pulled authors, hidden accounts) carries a tag
//!   of its own (`{m3}`), the copies' slots spread evenly over the slot
//!   space, so that a cluster's masters share the pages' questions.

use std::sync::LazyLock;

use super::slot;
use crate::types::{MarkCopy, PostId, UserId};

/// Copies of the marks every page asks about ([`MarkCopy`]): a change costs
/// one call per copy, in one round trip per master; a page reads one. Every
/// instance sharing a Redis must keep the same number (a copy written by
/// none would fall behind), so it is not a setting.
pub const MARK_COPIES: u8 = 4;

/// Each copy's hash tag: the first `m<n>` whose slot is in the copy's
/// share of the slot space.
static MARK_TAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let share = 16384 / u32::from(MARK_COPIES);
    (0..u32::from(MARK_COPIES))
        .map(|copy| {
            (0u32..)
                .map(|n| format!("{{m{n}}}"))
                .find(|tag| u32::from(slot(tag.as_bytes())) / share == copy)
                .expect("every share of the slots has a tag")
        })
        .collect()
});
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

/// Readers whose ids share `id / READER_BLOCK` share a hash tag.
pub const READER_BLOCK: i64 = 1024;

/// The hash tag of a reader's keys: its block of ids.
fn reader_tag(reader: UserId) -> String {
    format!("{{r{}}}", reader.0.div_euclid(READER_BLOCK))
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Keys {
            prefix: prefix.into(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Inbox: a feed list of the posts pushed to the reader (scripts.rs).
    pub fn inbox(&self, user: UserId) -> String {
        format!("{}feed:{}{user}", self.prefix, reader_tag(user))
    }

    /// Outbox: a feed list of the author's own posts, as an inbox.
    pub fn outbox(&self, author: UserId) -> String {
        format!("{}outbox:{{{author}}}", self.prefix)
    }

    /// Active fans ZSET of a big-V: follower id → last-active ms.
    pub fn active_fans(&self, author: UserId) -> String {
        format!("{}active_fans:{{{author}}}", self.prefix)
    }

    /// Whom a reader follows (HASH followee → change seq; see scripts.rs).
    pub fn following(&self, reader: UserId) -> String {
        format!("{}following:{}{reader}", self.prefix, reader_tag(reader))
    }

    /// The authors a reader follows (a SET beside [`Keys::following`], of
    /// its slot; see scripts.rs).
    pub fn followees(&self, reader: UserId) -> String {
        format!("{}followees:{}{reader}", self.prefix, reader_tag(reader))
    }

    /// Every copy of the marks.
    pub fn mark_copies(&self) -> impl Iterator<Item = MarkCopy> {
        (0..MARK_COPIES).map(MarkCopy)
    }

    /// The copy of the marks a page of `user` (its reader, or the author of
    /// an author's page) reads.
    pub fn mark_copy(&self, user: UserId) -> MarkCopy {
        MarkCopy(user.0.rem_euclid(i64::from(MARK_COPIES)) as u8)
    }

    /// The authors every follower pulls right now, in one copy (one HASH
    /// for all: big-Vs and authors with deliveries in flight; see
    /// scripts.rs).
    pub fn pulled(&self, copy: MarkCopy) -> String {
        format!("{}pulled:{}", self.prefix, MARK_TAGS[usize::from(copy.0)])
    }

    /// The pulled authors' names (a SET beside [`Keys::pulled`], of its
    /// slot; see scripts.rs).
    pub fn pulled_authors(&self, copy: MarkCopy) -> String {
        format!(
            "{}pulled_authors:{}",
            self.prefix,
            MARK_TAGS[usize::from(copy.0)]
        )
    }

    /// The accounts whose posts are in no feed: suspended, or being
    /// deleted (a SET of ids, of its copy's slot; see scripts.rs).
    pub fn hidden(&self, copy: MarkCopy) -> String {
        format!("{}hidden:{}", self.prefix, MARK_TAGS[usize::from(copy.0)])
    }

    /// A post as readers see it (HASH: author, username, body, time, and a
    /// tombstone once deleted).
    pub fn post(&self, id: PostId) -> String {
        format!("{}post:{{{id}}}", self.prefix)
    }

    /// The channel of hints about an author's posts (its slot: sharded
    /// pub/sub keeps a hint on the master of its outbox).
    pub fn author_channel(&self, author: UserId) -> String {
        format!("{}hints:{{{author}}}", self.prefix)
    }

    /// The channel of hints about what a reader's home shows.
    pub fn reader_channel(&self, reader: UserId) -> String {
        format!("{}hints:{}{reader}", self.prefix, reader_tag(reader))
    }

    /// The channel of hints about hidden accounts.
    pub fn hidden_channel(&self) -> String {
        format!("{}hints:{{pulled}}", self.prefix)
    }

    /// Marker that rate-limits recording a reader as an active fan.
    pub fn active_mark(&self, reader: UserId) -> String {
        format!("{}active_mark:{}{reader}", self.prefix, reader_tag(reader))
    }

    /// The layout the feeds of this prefix are in (`layout.rs`).
    pub fn layout(&self) -> String {
        format!("{}layout", self.prefix)
    }

    /// Patterns matching every inbox and outbox of this prefix.
    pub fn feed_patterns(&self) -> [String; 2] {
        [
            format!("{}feed:*", self.prefix),
            format!("{}outbox:*", self.prefix),
        ]
    }

    /// Pattern matching every key of this prefix (for clean-up and tests).
    pub fn pattern(&self) -> String {
        format!("{}*", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_prefix_and_a_hash_tag() {
        let k = Keys::new("t1:");
        assert_eq!(k.inbox(UserId(42)), "t1:feed:{r0}42");
        assert_eq!(k.inbox(UserId(5000)), "t1:feed:{r4}5000");
        assert_eq!(k.outbox(UserId(7)), "t1:outbox:{7}");
        assert_eq!(k.active_fans(UserId(7)), "t1:active_fans:{7}");
        assert_eq!(k.active_mark(UserId(42)), "t1:active_mark:{r0}42");
        assert_eq!(k.following(UserId(42)), "t1:following:{r0}42");
        assert_eq!(k.followees(UserId(42)), "t1:followees:{r0}42");
        assert_eq!(k.pulled(MarkCopy(0)), "t1:pulled:{m0}");
        assert_eq!(k.post(PostId(9)), "t1:post:{9}");
        assert_eq!(k.pattern(), "t1:*");
    }

    #[test]
    fn readers_of_one_block_share_a_slot() {
        use crate::store::redis::slot;
        let k = Keys::new("feed:");
        let at = |key: String| slot(key.as_bytes());
        assert_eq!(at(k.inbox(UserId(1024))), at(k.inbox(UserId(2047))));
        assert_eq!(at(k.inbox(UserId(1024))), at(k.following(UserId(1500))));
        assert_eq!(at(k.following(UserId(1500))), at(k.followees(UserId(1500))));
        for copy in k.mark_copies() {
            assert_eq!(at(k.pulled(copy)), at(k.pulled_authors(copy)));
            assert_eq!(at(k.pulled(copy)), at(k.hidden(copy)));
        }
        assert_eq!(at(k.inbox(UserId(1024))), at(k.active_mark(UserId(2000))));
        assert_ne!(at(k.inbox(UserId(1023))), at(k.inbox(UserId(1024))));
        assert_ne!(at(k.inbox(UserId(1))), at(k.outbox(UserId(1))));
    }

    #[test]
    fn the_copies_of_the_marks_spread_over_the_slots_and_the_readers() {
        use crate::store::redis::slot;
        let k = Keys::new("feed:");
        let share = 16384 / u16::from(MARK_COPIES);
        let shares: Vec<u16> = k
            .mark_copies()
            .map(|c| slot(k.pulled(c).as_bytes()) / share)
            .collect();
        assert_eq!(shares, (0..u16::from(MARK_COPIES)).collect::<Vec<_>>());
        let read: std::collections::HashSet<MarkCopy> =
            (1..=8).map(|r| k.mark_copy(UserId(r))).collect();
        assert_eq!(
            read.len(),
            usize::from(MARK_COPIES),
            "readers share them all"
        );
    }
}
