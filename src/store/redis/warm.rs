//! The warm read of a page (clause 10 of scripts.rs): the same four round
//! trips on any topology, each costing what the reader and the page hold,
//! never what the system holds; the merge is the service's.

use std::collections::{HashMap, HashSet};

use redis::Value;

use super::{bad, RedisStore};
use crate::error::AppResult;
use crate::types::{
    page_reads, EntryMeta, MarkCopy, PostId, Range, Scope, StateKey, UserId, WarmRead,
};

/// Whether a page shows an author's posts.
type Visible = Box<dyn Fn(UserId) -> bool + Send>;

/// Members a SMISMEMBER names at the most (a longer list is asked in
/// several, in the same pipeline).
const MEMBERS_PER_CALL: usize = 1000;

/// Whom a home shows, as its reader's copy says (clause 7): the authors it
/// follows, and itself with `own`.
struct Shown {
    reader: UserId,
    own: bool,
    authors: HashSet<UserId>,
}

impl Shown {
    fn shows(&self, author: UserId) -> bool {
        (self.own && author == self.reader) || self.authors.contains(&author)
    }

    /// The authors whose outboxes the page may pull, in order.
    fn candidates(&self) -> Vec<UserId> {
        let mut all: Vec<UserId> = self.authors.iter().copied().collect();
        if self.own && !self.authors.contains(&self.reader) {
            all.push(self.reader);
        }
        all.sort_unstable();
        all
    }
}

/// Of some authors, those whose outboxes every follower pulls (clause 8)
/// and those hidden (clause 12).
struct Marks {
    pulled: Vec<UserId>,
    hidden: HashSet<UserId>,
}

impl RedisStore {
    /// The warm read of a page of `scope` (clause 10), in four round trips
    /// whatever the topology (on a cluster, each is one call or pipeline
    /// per master it touches), none reading a key every page reads:
    /// (1) whom the reader follows, from its copy; (2) which of them are
    /// pulled or hidden, asked by name of the reader's copy of the marks; (3) the
    /// first source (a home's inbox, an author's outbox) and the pulled
    /// outboxes; (4) the authors and tombstones of the page's posts. The
    /// pulled authors are read before the inbox: a delivery done before
    /// that read is in the inbox read after it, and a post still in flight
    /// keeps its author's outbox pulled. An author's page asks (2) and (3)
    /// at once.
    pub async fn warm_read(
        &self,
        scope: Scope,
        authors: &[UserId],
        max: Option<i64>,
        fetch: usize,
    ) -> AppResult<WarmRead> {
        let (mut sources, visible) = match scope {
            Scope::Home { reader, own } => {
                let shown = match self.shown(reader, own).await? {
                    Ok(shown) => shown,
                    Err(state) => return Ok(state),
                };
                let copy = self.keys.mark_copy(reader);
                let marks = match self.marks(copy, &shown.candidates(), true).await? {
                    Ok(marks) => marks,
                    Err(state) => return Ok(state),
                };
                let pulled: Vec<UserId> = marks
                    .pulled
                    .iter()
                    .copied()
                    .filter(|a| !marks.hidden.contains(a))
                    .collect();
                let mut keys = vec![self.keys.inbox(reader)];
                keys.extend(pulled.iter().map(|a| self.keys.outbox(*a)));
                let ranges = self.feeds().ranges(scope, &keys, max, fetch).await?;
                let authors = std::iter::once(None).chain(pulled.into_iter().map(Some));
                let sources: Vec<_> = authors.zip(ranges).collect();
                let visible: Visible =
                    Box::new(move |a| shown.shows(a) && !marks.hidden.contains(&a));
                (sources, visible)
            }
            Scope::Author(author) => match self.outboxes(scope, &[author], max, fetch).await? {
                Ok((ranges, visible)) => (ranges.into_iter().map(|r| (None, r)).collect(), visible),
                Err(state) => return Ok(state),
            },
            Scope::List { .. } => match self.outboxes(scope, authors, max, fetch).await? {
                Ok((ranges, visible)) => {
                    let labels = authors.iter().map(|a| Some(*a));
                    (labels.zip(ranges).collect(), visible)
                }
                Err(state) => return Ok(state),
            },
        };
        let ids = page_ids(&mut sources, fetch);
        let meta = self.page_meta(ids, visible).await?;
        Ok(WarmRead::Read { sources, meta })
    }

    /// Round trips (2) and (3) of a page of outboxes alone (an author's, a
    /// list's), at once: which of `authors` are hidden, asked of the scope's
    /// user's copy of the marks, and their outboxes' ranges, in the order of
    /// `authors`; a post is shown if its author is not hidden.
    async fn outboxes(
        &self,
        scope: Scope,
        authors: &[UserId],
        max: Option<i64>,
        fetch: usize,
    ) -> AppResult<Result<(Vec<Range>, Visible), WarmRead>> {
        let keys: Vec<String> = authors.iter().map(|a| self.keys.outbox(*a)).collect();
        let (marks, ranges) = futures::join!(
            self.marks(self.keys.mark_copy(scope.user()), authors, false),
            self.feeds().ranges(scope, &keys, max, fetch)
        );
        let marks = match marks? {
            Ok(marks) => marks,
            Err(state) => return Ok(Err(state)),
        };
        let visible: Visible = Box::new(move |a| !marks.hidden.contains(&a));
        Ok(Ok((ranges?, visible)))
    }

    /// Whether `author`'s posts are hidden (suspended or deleted), as its
    /// copy of the marks says; `None` while that copy is missing or being
    /// built. One call, as a warm read asks it.
    pub async fn hidden(&self, author: UserId) -> AppResult<Option<bool>> {
        let copy = self.keys.mark_copy(author);
        Ok(match self.marks(copy, &[author], false).await? {
            Ok(marks) => Some(marks.hidden.contains(&author)),
            Err(_) => None,
        })
    }

    /// Round trip (1): whom `reader`'s home shows, or the state of its
    /// copy if that is missing or being built.
    async fn shown(&self, reader: UserId, own: bool) -> AppResult<Result<Shown, WarmRead>> {
        let (hash, names) = (self.keys.following(reader), self.keys.followees(reader));
        let mut pipe = redis::pipe();
        pipe.hget(&hash, "").smembers(&names);
        let replies = self.read_pipeline(&hash, pipe).await?;
        let (built, members): (Option<String>, Vec<String>) =
            redis::from_redis_value(Value::Array(replies)).map_err(bad("whom a reader follows"))?;
        match built.as_deref() {
            None => return Ok(Err(WarmRead::Missing(StateKey::Following))),
            Some("b") => return Ok(Err(WarmRead::Building(StateKey::Following))),
            Some(_) => {}
        }
        if !members.iter().any(|m| m == "0") {
            return Ok(Err(WarmRead::Missing(StateKey::Following)));
        }
        let authors = members
            .iter()
            .filter(|m| *m != "0")
            .map(|m| m.parse::<UserId>())
            .collect::<Result<_, _>>()
            .map_err(bad("whom a reader follows"))?;
        Ok(Ok(Shown {
            reader,
            own,
            authors,
        }))
    }

    /// Round trip (2): which of `authors` are hidden and, for a home
    /// (`pulled`), which are pulled, as `copy` of the marks says; or the
    /// state of the copy's key that is missing or being built. Asked by
    /// name, so its cost follows the authors named, not how many the keys
    /// hold.
    async fn marks(
        &self,
        copy: MarkCopy,
        authors: &[UserId],
        pulled: bool,
    ) -> AppResult<Result<Marks, WarmRead>> {
        let (state, names, hidden) = (
            self.keys.pulled(copy),
            self.keys.pulled_authors(copy),
            self.keys.hidden(copy),
        );
        let ask = |pipe: &mut redis::Pipeline, key: &str, marks: &[&str]| {
            let mut first = true;
            for chunk in authors.chunks(MEMBERS_PER_CALL) {
                let cmd = pipe.cmd("SMISMEMBER").arg(key);
                if std::mem::take(&mut first) {
                    cmd.arg(marks);
                }
                cmd.arg(chunk);
            }
            if authors.is_empty() {
                pipe.cmd("SMISMEMBER").arg(key).arg(marks);
            }
        };
        let mut pipe = redis::pipe();
        ask(&mut pipe, &hidden, &["0", "b"]);
        if pulled {
            ask(&mut pipe, &names, &["0"]);
            pipe.hget(&state, "");
        }
        let mut replies = self.read_pipeline(&hidden, pipe).await?;
        if pulled {
            let built: Option<String> =
                redis::from_redis_value(replies.pop().unwrap_or(Value::Nil))
                    .map_err(bad("the pulled authors"))?;
            match built.as_deref() {
                None => return Ok(Err(WarmRead::Missing(StateKey::Pulled(copy)))),
                Some("b") => return Ok(Err(WarmRead::Building(StateKey::Pulled(copy)))),
                Some(_) => {}
            }
        }
        let calls = authors.len().div_ceil(MEMBERS_PER_CALL).max(1);
        let mut flags = replies
            .into_iter()
            .map(|v| redis::from_redis_value::<Vec<i64>>(v).map_err(bad("the pulled authors")));
        let mut next_flags = || -> AppResult<Vec<i64>> {
            let mut all = Vec::with_capacity(authors.len() + 2);
            for _ in 0..calls {
                all.extend(flags.next().transpose()?.unwrap_or_default());
            }
            Ok(all)
        };
        let hidden_flags = next_flags()?;
        if hidden_flags.first() != Some(&1) {
            return Ok(Err(match hidden_flags.get(1) == Some(&1) {
                true => WarmRead::Building(StateKey::Hidden(copy)),
                false => WarmRead::Missing(StateKey::Hidden(copy)),
            }));
        }
        let hidden = authors
            .iter()
            .zip(&hidden_flags[2..])
            .filter(|(_, f)| **f == 1)
            .map(|(a, _)| *a)
            .collect();
        let pulled = match pulled {
            false => Vec::new(),
            true => {
                let pulled_flags = next_flags()?;
                if pulled_flags.first() != Some(&1) {
                    return Ok(Err(WarmRead::Missing(StateKey::Pulled(copy))));
                }
                authors
                    .iter()
                    .zip(&pulled_flags[1..])
                    .filter(|(_, f)| **f == 1)
                    .map(|(a, _)| *a)
                    .collect()
            }
        };
        Ok(Ok(Marks { pulled, hidden }))
    }

    /// Round trip (4): the author and tombstone of each of the page's
    /// posts, one pipeline per master; a post is followed if its author is
    /// `visible` (an unknown author's post is kept: the engine reads it).
    async fn page_meta(
        &self,
        ids: Vec<PostId>,
        visible: Visible,
    ) -> AppResult<HashMap<PostId, EntryMeta>> {
        let keys: Vec<String> = ids.iter().map(|id| self.keys.post(*id)).collect();
        let rows = self
            .read_per_slot(&keys, |pipe, key| {
                pipe.cmd("HMGET").arg(key).arg("a").arg("d");
            })
            .await?;
        let mut meta = HashMap::with_capacity(ids.len());
        for (id, row) in ids.into_iter().zip(rows) {
            let (a, d): (Option<String>, Option<String>) =
                redis::from_redis_value(row).map_err(bad("a post"))?;
            let author = author_of(a)?;
            meta.insert(
                id,
                EntryMeta {
                    author,
                    deleted: d.as_deref() == Some("1"),
                    followed: author.is_none_or(&visible),
                },
            );
        }
        Ok(meta)
    }
}

/// The sources cut down to what the page can use
/// ([`page_reads`]), whose posts alone are looked up (none while a source
/// is not there). Returns their ids, in feed order.
fn page_ids(sources: &mut [(Option<UserId>, Range)], fetch: usize) -> Vec<PostId> {
    let mut reads = Vec::with_capacity(sources.len());
    for (_, range) in sources.iter_mut() {
        match range {
            Range::Read(read) => reads.push(read),
            Range::Missing | Range::Building => return Vec::new(),
        }
    }
    page_reads(&mut reads, fetch)
        .into_iter()
        .map(|e| e.id)
        .collect()
}

/// A cached post's author (`None` or empty: the post is not cached).
fn author_of(field: Option<String>) -> AppResult<Option<UserId>> {
    field
        .filter(|a| !a.is_empty())
        .map(|a| a.parse::<UserId>())
        .transpose()
        .map_err(bad("a post's author"))
}
