//! Fan-out jobs: the rows of the `fanout_jobs` table (a transactional
//! outbox), each inserted in the same transaction as the change it serves.

use std::fmt;
use std::str::FromStr;

/// What a job delivers. Stored as text with a CHECK constraint; a kind this
/// binary does not know is an error, never a silent default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobKind {
    /// One post to its audience: every follower, or a big-V's active fans.
    Deliver,
    /// A demoted author's posts of its big-V time to every follower.
    Backfill,
    /// An author's recent posts into one new follower's inbox.
    Follow,
    /// An author's posts out of one former follower's inbox.
    Unfollow,
    /// A deleted post's tombstone into the post cache.
    Retract,
    /// An author muted by one reader: out of its home (its posts stay in
    /// the reader's inbox).
    Mute,
    /// An author unmuted by one reader: back in its home if followed.
    Unmute,
    /// An account's posts out of every feed, or back: the hidden accounts
    /// take its status.
    Hide,
    /// A deleted account's follows, posts and keys, in batches, then its
    /// row (its task counts the progress).
    Purge,
    /// A task's list of follows, a batch at a time.
    Import,
    /// Many follows of one reader, made in one transaction.
    Follows,
}

impl JobKind {
    pub const ALL: [JobKind; 11] = [
        JobKind::Deliver,
        JobKind::Backfill,
        JobKind::Follow,
        JobKind::Unfollow,
        JobKind::Retract,
        JobKind::Mute,
        JobKind::Unmute,
        JobKind::Hide,
        JobKind::Purge,
        JobKind::Import,
        JobKind::Follows,
    ];

    /// The kinds that work for long, a batch after another, for one user:
    /// they never hold every worker of an instance, and every other kind is
    /// claimed before them.
    pub const BULK: [JobKind; 2] = [JobKind::Import, JobKind::Purge];

    pub fn is_bulk(self) -> bool {
        Self::BULK.contains(&self)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Deliver => "deliver",
            JobKind::Backfill => "backfill",
            JobKind::Follow => "follow",
            JobKind::Unfollow => "unfollow",
            JobKind::Retract => "retract",
            JobKind::Mute => "mute",
            JobKind::Unmute => "unmute",
            JobKind::Hide => "hide",
            JobKind::Purge => "purge",
            JobKind::Import => "import",
            JobKind::Follows => "follows",
        }
    }
}

impl fmt::Display for JobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kind read from the database that this binary does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown fan-out job kind {0:?}")]
pub struct UnknownKind(pub String);

impl FromStr for JobKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind(s.to_string()))
    }
}

/// A claimed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: i64,
    pub kind: JobKind,
    pub author_id: i64,
    /// For `Deliver`: the post.
    pub post_id: Option<i64>,
    /// For `Follow`, `Unfollow`, `Mute` and `Unmute`: the one reader
    /// concerned.
    pub follower_id: Option<i64>,
    /// Keyset checkpoint: the last follower done.
    pub checkpoint: i64,
    /// Claims so far, this one included (failures that were the stores'
    /// unavailability are not counted).
    pub attempts: i32,
    /// When the job was queued (ms): fan-out lag is measured from here.
    pub created_at_ms: i64,
    /// Proves the lease: progress is recorded only while it is still ours.
    pub lease: i64,
    /// For `Backfill`: the big-V epoch it settles. For `Follow`,
    /// `Unfollow`, `Mute` and `Unmute`: the reader's follow sequence
    /// number of the change.
    pub epoch: Option<i64>,
    /// For `Purge` and `Import`: the task whose progress it makes.
    pub task_id: Option<i64>,
    /// For `Follows`: the authors followed.
    pub targets: Vec<i64>,
}

impl Job {
    /// What its kind needs that the row does not hold (a row written by
    /// hand, or by a version that wrote it otherwise), if anything: such a
    /// job is parked as dead with the reason, never run as something else.
    pub fn lacks(&self) -> Option<&'static str> {
        use JobKind::*;
        match self.kind {
            Deliver | Retract if self.post_id.is_none() => Some("its post"),
            Follow | Unfollow | Mute | Unmute if self.follower_id.is_none() => Some("its reader"),
            Follow | Unfollow | Mute | Unmute | Follows if self.epoch.is_none() => {
                Some("its follow sequence number")
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_unknown_ones_are_errors() {
        for k in JobKind::ALL {
            assert_eq!(k.as_str().parse::<JobKind>(), Ok(k));
        }
        assert_eq!(
            "reshuffle".parse::<JobKind>(),
            Err(UnknownKind("reshuffle".into()))
        );
    }

    #[test]
    fn a_job_lacking_what_its_kind_needs_says_what() {
        let job = |kind, post_id, follower_id, epoch| Job {
            id: 1,
            kind,
            author_id: 2,
            post_id,
            follower_id,
            checkpoint: 0,
            attempts: 0,
            created_at_ms: 0,
            lease: 0,
            epoch,
            task_id: None,
            targets: Vec::new(),
        };
        assert_eq!(
            job(JobKind::Deliver, None, None, None).lacks(),
            Some("its post")
        );
        assert_eq!(job(JobKind::Deliver, Some(3), None, None).lacks(), None);
        assert_eq!(
            job(JobKind::Retract, None, None, None).lacks(),
            Some("its post")
        );
        assert_eq!(job(JobKind::Mute, None, Some(4), Some(5)).lacks(), None);
        assert_eq!(
            job(JobKind::Unfollow, None, None, Some(5)).lacks(),
            Some("its reader")
        );
        assert_eq!(
            job(JobKind::Follow, None, Some(4), None).lacks(),
            Some("its follow sequence number")
        );
        assert_eq!(
            job(JobKind::Follows, None, None, None).lacks(),
            Some("its follow sequence number")
        );
        for kind in [
            JobKind::Backfill,
            JobKind::Hide,
            JobKind::Purge,
            JobKind::Import,
        ] {
            assert_eq!(job(kind, None, None, None).lacks(), None, "{kind}");
        }
    }
}
