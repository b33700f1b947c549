//! Fan-out jobs: the rows of the `fanout_jobs` table (a transactional
//! outbox), each inserted in the same transaction as the change it serves.

use std::fmt;
use std::str::FromStr;

use super::Edge;
use crate::types::{JobId, PostId, TaskId, UserId};

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

/// A claimed job: its lease and progress, and the work it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: JobId,
    /// The author whose change this is (for `Follows`, `Import` and
    /// `Purge`: the reader, the importer, the account).
    pub author_id: UserId,
    /// Keyset checkpoint: the last follower done.
    pub checkpoint: i64,
    /// Claims so far, this one included (failures that were the stores'
    /// unavailability are not counted).
    pub attempts: i32,
    /// When the job was queued (ms): fan-out lag is measured from here.
    pub created_at_ms: i64,
    /// Proves the lease: progress is recorded only while it is still ours.
    pub lease: i64,
    pub work: Work,
}

impl Job {
    pub fn kind(&self) -> JobKind {
        self.work.kind()
    }
}

/// What a job does, with what its kind needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    Deliver {
        post: PostId,
    },
    /// Settles the big-V time of this epoch.
    Backfill {
        epoch: i64,
    },
    /// One reader's follow, unfollow, mute or unmute of the author, at the
    /// reader's follow sequence number `seq`.
    Edge {
        edge: Edge,
        reader: UserId,
        seq: i64,
    },
    Retract {
        post: PostId,
    },
    Hide,
    Purge {
        task: TaskId,
    },
    Import {
        task: TaskId,
    },
    Follows {
        seq: i64,
        targets: Vec<UserId>,
    },
}

/// The columns a job's kind may need, as a row holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Payload {
    pub post: Option<PostId>,
    pub reader: Option<UserId>,
    pub epoch: Option<i64>,
    pub task: Option<TaskId>,
    pub targets: Option<Vec<UserId>>,
}

impl Work {
    /// The work of a stored job, or what its kind needs that the row does
    /// not hold (a row written by hand, or by a version that wrote it
    /// otherwise): such a job is parked as dead with the reason, never run
    /// as something else.
    pub fn of(kind: JobKind, p: Payload) -> Result<Work, &'static str> {
        let post = p.post.ok_or("its post");
        let task = p.task.ok_or("its task");
        let seq = p.epoch.ok_or("its follow sequence number");
        Ok(match kind {
            JobKind::Deliver => Work::Deliver { post: post? },
            JobKind::Retract => Work::Retract { post: post? },
            JobKind::Backfill => Work::Backfill {
                epoch: p.epoch.ok_or("its big-V epoch")?,
            },
            JobKind::Follow | JobKind::Unfollow | JobKind::Mute | JobKind::Unmute => Work::Edge {
                edge: Edge::of_job(kind).ok_or("an edge")?,
                reader: p.reader.ok_or("its reader")?,
                seq: seq?,
            },
            JobKind::Hide => Work::Hide,
            JobKind::Purge => Work::Purge { task: task? },
            JobKind::Import => Work::Import { task: task? },
            JobKind::Follows => Work::Follows {
                seq: seq?,
                targets: p.targets.unwrap_or_default(),
            },
        })
    }

    pub fn kind(&self) -> JobKind {
        match self {
            Work::Deliver { .. } => JobKind::Deliver,
            Work::Backfill { .. } => JobKind::Backfill,
            Work::Edge { edge, .. } => edge.job(),
            Work::Retract { .. } => JobKind::Retract,
            Work::Hide => JobKind::Hide,
            Work::Purge { .. } => JobKind::Purge,
            Work::Import { .. } => JobKind::Import,
            Work::Follows { .. } => JobKind::Follows,
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
        let payload = |post, reader, epoch| Payload {
            post,
            reader,
            epoch,
            ..Payload::default()
        };
        let work = |kind, post, reader, epoch| Work::of(kind, payload(post, reader, epoch));
        assert_eq!(work(JobKind::Deliver, None, None, None), Err("its post"));
        assert_eq!(
            work(JobKind::Deliver, Some(PostId(3)), None, None),
            Ok(Work::Deliver { post: PostId(3) })
        );
        assert_eq!(work(JobKind::Retract, None, None, None), Err("its post"));
        assert_eq!(
            work(JobKind::Mute, None, Some(UserId(4)), Some(5)),
            Ok(Work::Edge {
                edge: Edge::Mute,
                reader: UserId(4),
                seq: 5
            })
        );
        assert_eq!(
            work(JobKind::Unfollow, None, None, Some(5)),
            Err("its reader")
        );
        assert_eq!(
            work(JobKind::Follow, None, Some(UserId(4)), None),
            Err("its follow sequence number")
        );
        assert_eq!(
            work(JobKind::Follows, None, None, None),
            Err("its follow sequence number")
        );
        assert_eq!(
            work(JobKind::Backfill, None, None, None),
            Err("its big-V epoch")
        );
        assert_eq!(work(JobKind::Import, None, None, None), Err("its task"));
        assert_eq!(work(JobKind::Purge, None, None, None), Err("its task"));
        assert_eq!(work(JobKind::Hide, None, None, None), Ok(Work::Hide));
    }

    #[test]
    fn every_work_names_the_kind_it_was_read_as() {
        let full = Payload {
            post: Some(PostId(1)),
            reader: Some(UserId(2)),
            epoch: Some(3),
            task: Some(TaskId(4)),
            targets: Some(vec![UserId(5)]),
        };
        for kind in JobKind::ALL {
            assert_eq!(Work::of(kind, full.clone()).map(|w| w.kind()), Ok(kind));
        }
    }
}

/// What delivering a post needs: the post as the cache keeps it (a deleted
/// one is delivered nowhere: its tombstone is written), whether it is
/// pulled (published while its author was big-V), and its author's big-V
/// state now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub post: crate::types::CachedPost,
    pub pulled: bool,
    pub big_v: bool,
    pub big_v_epoch: i64,
}
