//! The reader state (scripts.rs, clauses 7, 8 and 12): whom each reader
//! follows, the authors every follower pulls and the hidden accounts (the
//! warm read that uses them is in warm.rs, the cached posts in posts.rs).

use std::collections::HashMap;

use super::{bad, scripts, RedisStore};
use crate::error::AppResult;
use crate::types::{Edge, Entry, MarkCopy, PostId, PulledAuthor, UserId};

/// A change to the pulled authors (clause 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PulledChange {
    /// A post's delivery is in flight.
    Add(PostId),
    /// A post's delivery is done.
    Done(PostId),
    /// The author is big-V, in this epoch.
    Promote(i64),
    /// The big-V time of this epoch is settled (its backfill done).
    Demoted(i64),
    /// The author is gone (a purged account): its field goes, whatever it
    /// holds.
    Forget,
}

/// Whom readers follow, the pulled authors and the hidden accounts
/// ([`RedisStore::state`]).
#[derive(Clone, Copy)]
pub struct ReaderState<'a>(pub(super) &'a RedisStore);

impl ReaderState<'_> {
    /// Starts building whom `reader` follows (clause 7); true if this
    /// caller must fill it.
    pub async fn begin_following(self, reader: UserId) -> AppResult<bool> {
        let (hash, names) = (self.0.keys.following(reader), self.0.keys.followees(reader));
        self.0.begin(&scripts::BEGIN_STATE, &[&hash, &names]).await
    }

    /// Starts building a copy of the pulled authors (clause 8); true if
    /// this caller must fill it.
    pub async fn begin_pulled(self, copy: MarkCopy) -> AppResult<bool> {
        let (hash, names) = (self.0.keys.pulled(copy), self.0.keys.pulled_authors(copy));
        self.0.begin(&scripts::BEGIN_STATE, &[&hash, &names]).await
    }

    /// Completes the build of whom `reader` follows, as of `seq`, with the
    /// idle TTL of the reader's keys.
    pub async fn fill_following(
        self,
        reader: UserId,
        seq: i64,
        followees: &[UserId],
        idle_ttl_secs: u64,
    ) -> AppResult<bool> {
        let key = self.0.keys.following(reader);
        let names = self.0.keys.followees(reader);
        let filled: i64 = self
            .0
            .with_conn(|mut c| async move {
                let mut inv = scripts::FILL_FOLLOWING.key(&key);
                inv.key(&names).arg(seq).arg(idle_ttl_secs);
                for f in followees {
                    inv.arg(f);
                }
                inv.invoke_async(&mut c).await
            })
            .await?;
        Ok(filled == 1)
    }

    /// A change `seq` of what `reader`'s home shows of `author` (clause
    /// 7): `shown` after it, and what its inbox gets: for a follow, the
    /// author's newest `entries` (`cut`: they are the newest of more); for
    /// an unfollow, those entries out. True if the reader's copy took the
    /// change.
    #[allow(clippy::too_many_arguments)]
    pub async fn set_follow(
        self,
        reader: UserId,
        author: UserId,
        seq: i64,
        (edge, shown): (Edge, bool),
        cap: i64,
        cut: Option<i64>,
        entries: &[Entry],
    ) -> AppResult<bool> {
        let following = self.0.keys.following(reader);
        let inbox = self.0.keys.inbox(reader);
        let names = self.0.keys.followees(reader);
        let inbox_change = match edge {
            Edge::Follow => "push",
            Edge::Unfollow => "remove",
            Edge::Mute | Edge::Unmute => "keep",
        };
        let applied: i64 = self
            .0
            .with_conn(|mut c| async move {
                let mut inv = scripts::SET_FOLLOW.key(&following);
                inv.key(&inbox)
                    .key(&names)
                    .arg(author)
                    .arg(seq)
                    .arg(if shown { "F" } else { "U" })
                    .arg(inbox_change)
                    .arg(cap)
                    .arg(cut.map_or_else(String::new, |c| c.to_string()));
                for e in entries {
                    inv.arg(e.score).arg(e.id);
                }
                inv.invoke_async(&mut c).await
            })
            .await?;
        Ok(applied == 1)
    }

    /// Many follows of `reader`, change `seq` (clause 7): each author shown
    /// or not (a muted one), and `entries` (their newest, merged, `cut` the
    /// score of the first left out) into its inbox. Returns how many fields
    /// the change set.
    pub async fn follow_many(
        self,
        reader: UserId,
        seq: i64,
        authors: &[(UserId, bool)],
        (cap, cut): (i64, Option<i64>),
        entries: &[Entry],
    ) -> AppResult<i64> {
        let following = self.0.keys.following(reader);
        let inbox = self.0.keys.inbox(reader);
        let names = self.0.keys.followees(reader);
        self.0
            .with_conn(|mut c| async move {
                let mut inv = scripts::FOLLOW_MANY.key(&following);
                inv.key(&inbox).key(&names).arg(seq).arg(authors.len());
                for (author, shown) in authors {
                    inv.arg(author).arg(if *shown { "F" } else { "U" });
                }
                inv.arg(cap)
                    .arg(cut.map_or_else(String::new, |c| c.to_string()));
                for e in entries {
                    inv.arg(e.score).arg(e.id);
                }
                inv.invoke_async(&mut c).await
            })
            .await
    }

    /// Whether `reader`'s copy of whom it follows has `author` followed:
    /// `None` when the copy has no word of it (no field, or no copy).
    pub async fn followed_in_copy(self, reader: UserId, author: UserId) -> AppResult<Option<bool>> {
        let key = self.0.keys.following(reader);
        let field: Option<String> = self
            .0
            .with_conn(|mut c| async move {
                redis::cmd("HGET")
                    .arg(&key)
                    .arg(author)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(field.map(|f| f.starts_with('F')))
    }

    /// The deliveries in flight the pulled authors hold (clause 8), by
    /// author, in any copy (a copy missing or being built holds none).
    pub async fn pulled_in_flight(self) -> AppResult<Vec<(UserId, Vec<PostId>)>> {
        let keys: Vec<String> = self
            .0
            .keys
            .mark_copies()
            .map(|c| self.0.keys.pulled(c))
            .collect();
        let copies = self
            .0
            .query_per_slot(&keys, |pipe, key| {
                pipe.cmd("HGETALL").arg(key);
            })
            .await?;
        let mut held: std::collections::BTreeMap<UserId, Vec<PostId>> = Default::default();
        for copy in copies {
            let fields: HashMap<String, String> =
                redis::from_redis_value(copy).map_err(bad("the pulled authors"))?;
            for (author, ids) in in_flight(&fields)? {
                let all = held.entry(author).or_default();
                all.extend(ids);
                all.sort_unstable();
                all.dedup();
            }
        }
        Ok(held.into_iter().collect())
    }

    /// Changes the pulled authors (clause 8), in every copy.
    pub async fn pulled_change(self, author: UserId, change: PulledChange) -> AppResult<()> {
        let calls = self.pulled_calls(author, change);
        self.0.every_copy(&scripts::PULLED, &calls).await
    }

    /// The PULLED calls that make `change`, one per copy, each with its
    /// slot.
    pub(super) fn pulled_calls(
        self,
        author: UserId,
        change: PulledChange,
    ) -> Vec<(u16, redis::ScriptInvocation<'static>)> {
        let (op, x) = match change {
            PulledChange::Add(id) => ("add", id.0),
            PulledChange::Done(id) => ("done", id.0),
            PulledChange::Promote(e) => ("promote", e),
            PulledChange::Demoted(e) => ("demoted", e),
            PulledChange::Forget => ("forget", 0),
        };
        let keys = &self.0.keys;
        keys.mark_copies()
            .map(|copy| {
                let key = keys.pulled(copy);
                let mut call = scripts::PULLED.prepare_invoke();
                call.key(&key)
                    .key(keys.pulled_authors(copy))
                    .arg(op)
                    .arg(author)
                    .arg(x);
                (super::slot(key.as_bytes()), call)
            })
            .collect()
    }

    /// Hides (`hide`) or shows again an account's posts everywhere
    /// (clause 12), in every copy.
    pub async fn hidden_change(self, account: UserId, hide: bool) -> AppResult<()> {
        let keys = &self.0.keys;
        let calls: Vec<_> = keys
            .mark_copies()
            .map(|copy| {
                let key = keys.hidden(copy);
                let mut call = scripts::HIDDEN.prepare_invoke();
                call.key(&key)
                    .arg(if hide { "add" } else { "remove" })
                    .arg(account);
                (super::slot(key.as_bytes()), call)
            })
            .collect();
        self.0.every_copy(&scripts::HIDDEN, &calls).await
    }

    /// Starts building a copy of the hidden accounts (clause 12); true if
    /// this caller must fill it.
    pub async fn begin_hidden(self, copy: MarkCopy) -> AppResult<bool> {
        let key = self.0.keys.hidden(copy);
        self.0.begin(&scripts::BEGIN_HIDDEN, &[&key]).await
    }

    /// Completes the build of a copy of the hidden accounts.
    pub async fn fill_hidden(self, copy: MarkCopy, accounts: &[UserId]) -> AppResult<bool> {
        let key = self.0.keys.hidden(copy);
        let filled: i64 = self
            .0
            .with_conn(|mut c| async move {
                let mut inv = scripts::FILL_HIDDEN.key(&key);
                for a in accounts {
                    inv.arg(a);
                }
                inv.invoke_async(&mut c).await
            })
            .await?;
        Ok(filled == 1)
    }

    /// Completes the build of a copy of the pulled authors.
    pub async fn fill_pulled(self, copy: MarkCopy, authors: &[PulledAuthor]) -> AppResult<bool> {
        let (key, names) = (self.0.keys.pulled(copy), self.0.keys.pulled_authors(copy));
        let filled: i64 = self
            .0
            .with_conn(|mut c| async move {
                let mut inv = scripts::FILL_PULLED.key(&key);
                inv.key(&names);
                for a in authors {
                    let ids: Vec<String> = a.in_flight.iter().map(PostId::to_string).collect();
                    let epoch = a.epoch.map_or_else(String::new, |e| e.to_string());
                    inv.arg(a.author).arg(epoch).arg(ids.join(","));
                }
                inv.invoke_async(&mut c).await
            })
            .await?;
        Ok(filled == 1)
    }
}

/// The deliveries in flight one copy of the pulled authors holds, by
/// author (none while the copy is missing or being built).
fn in_flight(fields: &HashMap<String, String>) -> AppResult<Vec<(UserId, Vec<PostId>)>> {
    if fields.get("").map(String::as_str) != Some("c") {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (author, value) in fields.iter().filter(|(a, _)| !a.is_empty()) {
        let author: UserId = author.parse().map_err(bad("a pulled author"))?;
        let ids = value.split_once(';').map_or("", |(_, ids)| ids);
        let ids: Vec<PostId> = ids
            .split(',')
            .filter(|id| !id.is_empty())
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(bad("a delivery in flight"))?;
        if !ids.is_empty() {
            out.push((author, ids));
        }
    }
    Ok(out)
}
