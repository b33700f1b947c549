//! Feed lists (inboxes and outboxes, scripts.rs clauses 1 to 6): their
//! reads, builds, pushes and removals, whatever the topology.

use futures::{StreamExt, TryStreamExt};
use redis::Value;

use super::{layout, parse_score, scripts, slot, RedisStore};
use crate::error::{AppError, AppResult, Message};
use crate::metrics::{windows_read, WindowRead};
use crate::types::{Entry, Range, Scope, SourceRead};

/// PUSH calls sent together in one fan-out pipeline: Redis runs a client's
/// whole pipeline before serving anyone else, so pipelines of a few calls
/// keep publishes and reads from waiting behind a whole batch.
const CALLS_PER_PIPELINE: usize = 3;

/// Fan-out pipelines one push keeps in flight: Redis works on the next
/// while the reply of one travels back and the service builds the one
/// after, and a request's call still waits behind at most this many.
const PIPELINES_IN_FLIGHT: usize = 2;

/// Keys in one PUSH call of a fan-out, for a single entry: the call is paid
/// once per this many followers.
const KEYS_PER_CALL: usize = 100;

/// Entry writes one PUSH call may make: a push of many entries (a backfill, a
/// follow) goes to fewer keys per call, so that every call stays short.
const WRITES_PER_CALL: usize = 1000;

/// Entry writes of a cluster fan-out's round (its "pipeline"), at most: a round
/// goes as one pipeline per master, so a master's share of a round spread
/// over three makes no more writes than a single node's pipeline.
const CLUSTER_WRITES_PER_ROUND: usize = CALLS_PER_PIPELINE * KEYS_PER_CALL * 3;

/// Elements read above a guessed place (the place moves up when entries
/// above it are removed) and below the window (it moves down as posts
/// arrive at the top): a guess within these of the place proves itself.
const GUESS_ABOVE: usize = 1;
const GUESS_BELOW: usize = 4;

/// Feed lists: reads of their ranges, builds, pushes and removals
/// ([`RedisStore::feeds`]).
#[derive(Clone, Copy)]
pub struct FeedLists<'a>(pub(super) &'a RedisStore);

impl FeedLists<'_> {
    /// Reads each feed's window from `max` down (clause 6): `fetch + 1`
    /// entries and [`scripts::TIE_SLACK`] more, each with its state as of
    /// the same moment. From the top (no `max`) with one `LRANGE` each;
    /// below a cursor at the place `view` last left each feed
    /// ([`Places`](super::places::Places)) with plain commands, checked,
    /// and where that guess missed with one [`scripts::SOURCES`] call per
    /// node holding some, which finds the cursor's place. One round trip
    /// (one pipeline or call per master on a cluster), and a second for
    /// the feeds whose guess missed.
    pub async fn ranges(
        self,
        view: Scope,
        keys: &[String],
        max: Option<i64>,
        fetch: usize,
    ) -> AppResult<Vec<Range>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let take = fetch + 1 + scripts::TIE_SLACK;
        let windows = match max {
            None => self.tops(keys, take).await?,
            Some(max) => self.below(view, keys, max, take).await?,
        };
        for (key, window) in keys.iter().zip(&windows) {
            if let Some(start) = window.start {
                (self.0.places).remember(view, key, start, &window.entries, window.ended);
            }
        }
        windows.into_iter().map(Window::range).collect()
    }

    /// The window of each feed from its top: an `LRANGE` of its first
    /// `take` elements, which holds its state too (clause 6), the keys of a
    /// slot in one pipeline.
    async fn tops(self, keys: &[String], take: usize) -> AppResult<Vec<Window>> {
        let groups = self.0.topology().groups(keys);
        let pipes: Vec<(u16, redis::Pipeline)> = groups
            .iter()
            .map(|group| {
                let mut pipe = redis::pipe();
                for &i in group {
                    pipe.cmd("LRANGE").arg(&keys[i]).arg(0).arg(take - 1);
                }
                (slot(keys[group[0]].as_bytes()), pipe)
            })
            .collect();
        let replies = self.read_groups(pipes).await?;
        windows_read(WindowRead::Top, keys.len());
        let mut out: Vec<Option<Window>> = vec![None; keys.len()];
        for (group, results) in groups.iter().zip(replies) {
            check_replies(&results, group.len())?;
            for (&i, reply) in group.iter().zip(&results) {
                out[i] = Some(Window::from_top(&keys[i], reply)?);
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// The window of each feed from its first entry scored at most `max`:
    /// read at the place `view` last left it where that is known and the
    /// read proves it right, else found by one [`scripts::SOURCES`] call per
    /// node holding the rest.
    async fn below(
        self,
        view: Scope,
        keys: &[String],
        max: i64,
        take: usize,
    ) -> AppResult<Vec<Window>> {
        let guesses = self.0.places.guesses(view, keys, max);
        let mut out = self.at_guesses(keys, &guesses, max, take).await;
        let missed: Vec<usize> = (0..keys.len()).filter(|&i| out[i].is_none()).collect();
        windows_read(WindowRead::Guessed, keys.len() - missed.len());
        windows_read(WindowRead::Searched, missed.len());
        if !missed.is_empty() {
            let missed_keys: Vec<String> = missed.iter().map(|&i| keys[i].clone()).collect();
            let args = [max.to_string(), take.to_string()];
            let replies = self
                .0
                .with_conn(|c| async move {
                    c.reads()
                        .invoke_by_node(&scripts::SOURCES, &missed_keys, &args)
                        .await
                })
                .await?;
            for (&i, reply) in missed.iter().zip(&replies) {
                out[i] = Some(Window::from_script(&keys[i], reply)?);
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// The windows read at the guessed places (`None` where there was no
    /// guess, or the read did not prove it): per slot, one transaction of
    /// an `LRANGE` around each guess and the list's sentinel (`LINDEX -1`),
    /// so that the state read is the window's. A failed read proves nothing:
    /// its feeds are searched instead.
    async fn at_guesses(
        self,
        keys: &[String],
        guesses: &[Option<usize>],
        max: i64,
        take: usize,
    ) -> Vec<Option<Window>> {
        let mut out: Vec<Option<Window>> = vec![None; keys.len()];
        let guessed: Vec<usize> = (0..keys.len()).filter(|&i| guesses[i].is_some()).collect();
        if guessed.is_empty() {
            return out;
        }
        let from = |i: usize| guesses[i].unwrap_or(0).saturating_sub(GUESS_ABOVE);
        let guessed_keys: Vec<&String> = guessed.iter().map(|&i| &keys[i]).collect();
        let groups = self.0.topology().groups(&guessed_keys);
        let pipes: Vec<(u16, redis::Pipeline)> = groups
            .iter()
            .map(|group| {
                let mut pipe = redis::pipe();
                pipe.cmd("MULTI");
                for &g in group {
                    let (key, start) = (guessed_keys[g], from(guessed[g]));
                    let end = start + GUESS_ABOVE + take + GUESS_BELOW - 1;
                    pipe.cmd("LRANGE").arg(key).arg(start).arg(end);
                    pipe.cmd("LINDEX").arg(key).arg(-1);
                }
                pipe.cmd("EXEC");
                (slot(guessed_keys[group[0]].as_bytes()), pipe)
            })
            .collect();
        let Ok(replies) = self.read_groups(pipes).await else {
            return out;
        };
        for (group, results) in groups.iter().zip(replies) {
            let Some(Value::Array(read)) = results.last() else {
                continue;
            };
            if read.len() != 2 * group.len() {
                continue;
            }
            for (&g, pair) in group.iter().zip(read.chunks(2)) {
                let i = guessed[g];
                out[i] = Window::at(&pair[0], &pair[1], from(i), max, take);
            }
        }
        out
    }

    /// Pipelines of reads, one per slot group, on the read links.
    async fn read_groups(self, pipes: Vec<(u16, redis::Pipeline)>) -> AppResult<Vec<Vec<Value>>> {
        self.0
            .with_conn(|c| async move { c.reads().query_groups(pipes).await })
            .await
    }

    /// Every entry of a feed list, from its primary (none if it is
    /// missing): what an unfollow looks through for the author's.
    pub async fn all(self, key: &str) -> AppResult<Vec<Entry>> {
        let elements: Vec<Vec<u8>> = self
            .0
            .with_conn(|mut c| async move {
                redis::cmd("LRANGE")
                    .arg(key)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(elements.iter().filter_map(|e| layout::unpack(e)).collect())
    }

    /// Starts building a missing feed list; true if this caller must fill it.
    pub async fn begin_build(self, key: &str) -> AppResult<bool> {
        self.0.begin(&scripts::BEGIN, &[key]).await
    }

    /// Completes a build with the newest entries read from PostgreSQL.
    /// `floor`: `None` when they are all there are; `idle_ttl_secs`: the
    /// key's TTL (an inbox's; 0 for none). False if the key was no longer
    /// building (it vanished, or a cut push abandoned the build).
    pub async fn fill(
        self,
        key: &str,
        cap: i64,
        floor: Option<i64>,
        entries: &[Entry],
        idle_ttl_secs: u64,
    ) -> AppResult<bool> {
        let floor = floor.map_or_else(|| "-inf".to_string(), |f| f.to_string());
        self.0
            .with_conn(|mut c| async move {
                let mut inv = scripts::FILL.key(key);
                inv.arg(cap).arg(&floor).arg(idle_ttl_secs);
                for e in entries {
                    inv.arg(e.score).arg(e.id);
                }
                let filled: i64 = inv.invoke_async(&mut c).await?;
                Ok(filled == 1)
            })
            .await
    }

    /// Pushes each target's entries into its feed list if it exists, one
    /// pipeline for all (scripts.rs, clauses 3 and 4). Returns how many
    /// entries were added.
    pub async fn push(self, targets: &[(String, &[Entry])], cap: i64) -> AppResult<i64> {
        if targets.is_empty() {
            return Ok(0);
        }
        let calls: Vec<_> = targets
            .iter()
            .map(|(key, entries)| {
                let call = push_call(std::slice::from_ref(key), entries, cap, None);
                (slot(key.as_bytes()), call)
            })
            .collect();
        self.0
            .with_conn(|mut c| async move {
                let added: Vec<i64> = c.invoke_all(&scripts::PUSH, &calls).await?;
                Ok(added.iter().sum())
            })
            .await
    }

    /// Pushes the same entries into many feed lists (fan-out): PUSH calls of as
    /// many keys as keep a call short, a few calls per pipeline, each
    /// pipeline bounded by the timeout. `cut`: the entries are the newest of
    /// a longer list, and this is their lowest score (clause 3). Returns how
    /// many entries were added.
    pub async fn push_same(
        self,
        keys: &[String],
        entries: &[Entry],
        cap: i64,
        cut: Option<i64>,
    ) -> AppResult<i64> {
        if keys.is_empty() || entries.is_empty() {
            return Ok(0);
        }
        let group = (WRITES_PER_CALL / entries.len()).clamp(1, KEYS_PER_CALL);
        // One call's keys share a slot: on a cluster, grouped by slot (a
        // batch's followers, read in id order, share their block's slot:
        // keys.rs).
        let calls: Vec<Vec<String>> = self
            .0
            .topology()
            .groups(keys)
            .iter()
            .flat_map(|g| {
                g.chunks(group)
                    .map(|c| c.iter().map(|&i| keys[i].clone()).collect())
            })
            .collect();
        let rounds: Vec<&[Vec<String>]> = if self.0.topology().is_cluster() {
            // A round holds as many writes as a single node's pipeline, for
            // each master.
            by_weight(&calls, CLUSTER_WRITES_PER_ROUND, |c| {
                c.len() * entries.len()
            })
        } else {
            calls.chunks(CALLS_PER_PIPELINE).collect()
        };
        let pipelines: Vec<_> = rounds
            .into_iter()
            .map(|calls| self.push_pipeline(calls, entries, cap, cut))
            .collect();
        let counts: Vec<i64> = futures::stream::iter(pipelines)
            .buffer_unordered(PIPELINES_IN_FLIGHT)
            .try_collect()
            .await?;
        Ok(counts.iter().sum())
    }

    /// One fan-out pipeline: a PUSH call for each group of keys.
    async fn push_pipeline(
        self,
        calls: &[Vec<String>],
        entries: &[Entry],
        cap: i64,
        cut: Option<i64>,
    ) -> AppResult<i64> {
        let calls: Vec<_> = calls
            .iter()
            .map(|keys| (slot(keys[0].as_bytes()), push_call(keys, entries, cap, cut)))
            .collect();
        self.0
            .with_conn(|mut c| async move {
                // Every pipeline loads the script, for a Redis that restarted or
                // flushed its scripts (they run concurrently, so any may be the
                // first).
                let counts: Vec<i64> = c.invoke_all(&scripts::PUSH, &calls).await?;
                Ok(counts.iter().sum::<i64>())
            })
            .await
    }

    /// Removes entries from feed lists: one `LREM` per key and entry, the
    /// keys of a slot group in one pipeline.
    pub async fn remove(self, keys: &[String], entries: &[Entry]) -> AppResult<()> {
        if keys.is_empty() || entries.is_empty() {
            return Ok(());
        }
        let packed: Vec<Vec<u8>> = entries.iter().map(layout::pack).collect();
        self.0
            .query_per_slot(keys, |pipe, key| {
                for e in &packed {
                    pipe.lrem(key, 1, e);
                }
            })
            .await?;
        Ok(())
    }
}

/// One feed's window as read (clause 6): what it tells of the sentinel,
/// whether the window reached it, and its entries.
#[derive(Clone, Default)]
struct Window {
    sentinel: Sentinel,
    ended: bool,
    entries: Vec<Entry>,
    /// The list's index of the first entry, where known (a window read from
    /// a list that is not building).
    start: Option<usize>,
}

/// What a window tells of its feed's sentinel.
#[derive(Clone, Default)]
enum Sentinel {
    /// The key is missing.
    #[default]
    Missing,
    /// The sentinel, as read.
    Read(String),
    /// Not read: a window from the top stopped before it, in a list that
    /// is not building (a building list's mark comes first). Such a window
    /// vouches for the entries above its last score, whatever the floor.
    Beyond,
}

impl Window {
    /// A window from the top, as an `LRANGE` of the list's first elements
    /// returns it: nothing for a missing key; a building list's mark
    /// first, or an empty list's sentinel alone; else entries, then the
    /// sentinel if the window reached it (a sentinel's length tells it from
    /// an entry). A window that did not reach it leaves the floor unknown,
    /// and holds every entry above its last score.
    fn from_top(key: &str, elements: &Value) -> AppResult<Window> {
        let mut raw = elements_of(key, elements)?;
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        let Some(&first) = raw.first() else {
            return Ok(Window::default());
        };
        if layout::unpack(first).is_none() {
            return Ok(Window {
                sentinel: Sentinel::Read(text(first)),
                ended: true,
                entries: Vec::new(),
                start: None,
            });
        }
        let last = raw.last().copied().filter(|e| layout::unpack(e).is_none());
        if last.is_some() {
            raw.pop();
        }
        let entries = raw
            .into_iter()
            .map(|e| unpack(key, e))
            .collect::<AppResult<_>>()?;
        Ok(Window {
            sentinel: last.map_or(Sentinel::Beyond, |s| Sentinel::Read(text(s))),
            ended: last.is_some(),
            entries,
            start: Some(0),
        })
    }

    /// A window read at a guessed place, from the list's index `from`
    /// (`elements`, an `LRANGE` of `take` elements and the slack around
    /// them, and `sentinel`, its `LINDEX -1`, in one transaction): the
    /// window [`scripts::SOURCES`] would have read below `max`, if these
    /// elements prove where its first entry scored at most `max` is (the
    /// first element read is above `max`, or is the list's first) and hold
    /// `take` elements from there; `None` if they do not.
    fn at(
        elements: &Value,
        sentinel: &Value,
        from: usize,
        max: i64,
        take: usize,
    ) -> Option<Window> {
        let sentinel = match sentinel {
            Value::Nil => return Some(Window::default()),
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => return None,
        };
        if matches!(sentinel.as_str(), "inf" | "+inf") {
            return Some(Window {
                sentinel: Sentinel::Read(sentinel),
                ended: false,
                entries: Vec::new(),
                start: None,
            });
        }
        let Value::Array(values) = elements else {
            return None;
        };
        let mut entries = Vec::with_capacity(values.len());
        let mut reached = false;
        for (n, value) in values.iter().enumerate() {
            let Value::BulkString(bytes) = value else {
                return None;
            };
            match layout::unpack(bytes) {
                Some(entry) => entries.push(entry),
                None if n + 1 == values.len() => reached = true,
                None => return None,
            }
        }
        if from > 0 && entries.first().is_none_or(|e| e.score <= max) {
            return None;
        }
        let place = entries.partition_point(|e| e.score > max);
        let (ended, end) = match place + take <= entries.len() {
            true => (false, place + take),
            false if reached => (true, entries.len()),
            false => return None,
        };
        entries.truncate(end);
        entries.drain(..place);
        Some(Window {
            sentinel: Sentinel::Read(sentinel),
            ended,
            entries,
            start: Some(from + place),
        })
    }

    /// A window as [`scripts::SOURCES`] returns it: the sentinel, `1` if
    /// the window reached it, and the entries (packed: a list, or one
    /// string of 9-byte entries end to end).
    fn from_script(key: &str, reply: &Value) -> AppResult<Window> {
        let Value::Array(parts) = reply else {
            return Err(AppError::internal(
                format!("reading {key}"),
                Message(format!("{reply:?}")),
            ));
        };
        let (sentinel, ended, entries, from) = match parts.as_slice() {
            [sentinel, ended, entries] => (sentinel, ended, entries, None),
            [sentinel, ended, entries, from] => (sentinel, ended, entries, Some(from)),
            _ => {
                return Err(AppError::internal(
                    format!("reading {key}"),
                    Message(format!("{} values", parts.len())),
                ))
            }
        };
        let from: Option<usize> = from
            .map(redis::from_redis_value_ref)
            .transpose()
            .map_err(reading(key))?;
        let sentinel: Option<String> =
            redis::from_redis_value_ref(sentinel).map_err(reading(key))?;
        let ended: i64 = redis::from_redis_value_ref(ended).map_err(reading(key))?;
        let entries = match entries {
            // Entries of 9 bytes each, end to end.
            Value::BulkString(packed) if packed.len() % 9 == 0 => packed
                .chunks(9)
                .map(|e| unpack(key, e))
                .collect::<AppResult<_>>()?,
            list => elements_of(key, list)?
                .into_iter()
                .map(|e| unpack(key, e))
                .collect::<AppResult<_>>()?,
        };
        Ok(Window {
            sentinel: sentinel.map_or(Sentinel::Missing, Sentinel::Read),
            ended: ended == 1,
            entries,
            start: from,
        })
    }

    /// What the window says of its feed: missing, being built, or a read
    /// holding every entry above its floor, if it reached it, or only
    /// above its last score, if it did not (that score's run may go on).
    fn range(self) -> AppResult<Range> {
        let floor = match &self.sentinel {
            Sentinel::Missing => return Ok(Range::Missing),
            Sentinel::Beyond => None,
            Sentinel::Read(text) => match text.as_str() {
                "" => return Ok(Range::Missing),
                "inf" | "+inf" => return Ok(Range::Building),
                "-inf" => None,
                text => Some(parse_score(text)?),
            },
        };
        let cut = match self.ended {
            true => None,
            false => self.entries.last().map(|e| e.score),
        };
        Ok(Range::Read(SourceRead {
            entries: self.entries,
            floor,
            cut,
        }))
    }
}

/// Checks that a group of `keys` calls got as many replies.
fn check_replies(replies: &[Value], keys: usize) -> AppResult<()> {
    if replies.len() == keys {
        return Ok(());
    }
    Err(AppError::internal(
        "reading feeds",
        Message(format!("{} replies for {keys} keys", replies.len())),
    ))
}

/// The elements of a list reply, borrowed (a page reads hundreds).
fn elements_of<'v>(key: &str, reply: &'v Value) -> AppResult<Vec<&'v [u8]>> {
    let bad = || AppError::internal(format!("reading {key}"), Message(format!("{reply:?}")));
    let Value::Array(values) = reply else {
        return Err(bad());
    };
    values
        .iter()
        .map(|v| match v {
            Value::BulkString(bytes) => Ok(bytes.as_slice()),
            _ => Err(bad()),
        })
        .collect()
}

/// An entry as a feed list holds it; anything else is an error naming `key`.
fn unpack(key: &str, bytes: &[u8]) -> AppResult<Entry> {
    layout::unpack(bytes).ok_or_else(|| {
        AppError::internal(
            format!("reading {key}"),
            Message(format!("{} bytes are not an entry", bytes.len())),
        )
    })
}

fn reading(key: &str) -> impl Fn(redis::ParsingError) -> AppError + '_ {
    move |e| AppError::internal(format!("reading {key}"), e)
}

/// `items` cut into runs of at most `budget` in weight (a run holds at least
/// one item).
fn by_weight<T>(items: &[T], budget: usize, weight: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut runs = Vec::new();
    let (mut start, mut held) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let w = weight(item);
        if i > start && held + w > budget {
            runs.push(&items[start..i]);
            (start, held) = (i, 0);
        }
        held += w;
    }
    if start < items.len() {
        runs.push(&items[start..]);
    }
    runs
}

/// One PUSH call: `keys` get `entries` (scripts.rs, clause 3).
pub(super) fn push_call(
    keys: &[String],
    entries: &[Entry],
    cap: i64,
    cut: Option<i64>,
) -> redis::ScriptInvocation<'static> {
    let mut inv = scripts::PUSH.prepare_invoke();
    for key in keys {
        inv.key(key);
    }
    inv.arg(cap)
        .arg(cut.map_or_else(String::new, |c| c.to_string()));
    for e in entries {
        inv.arg(e.score).arg(e.id);
    }
    inv
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::PostId;

    /// A list of entries scored `scores` (ids from 1), and its sentinel.
    fn list(scores: &[i64], sentinel: &str) -> Vec<Vec<u8>> {
        let mut all: Vec<Vec<u8>> = (1..)
            .zip(scores)
            .map(|(id, s)| layout::pack(&Entry::new(layout::EPOCH_MS + s, PostId(id))))
            .collect();
        all.push(sentinel.as_bytes().to_vec());
        all
    }

    /// What `Window::at` makes of `list` read from `from` (`len` elements)
    /// below `max`, `take` elements: the scores of its entries, whether it
    /// ended, and its start.
    fn at(
        list: &[Vec<u8>],
        from: usize,
        len: usize,
        max: i64,
        take: usize,
    ) -> Option<(Vec<i64>, bool, Option<usize>)> {
        let read = list
            .iter()
            .skip(from)
            .take(len)
            .map(|e| Value::BulkString(e.clone()));
        let sentinel = Value::BulkString(list.last().unwrap().clone());
        let w = Window::at(
            &Value::Array(read.collect()),
            &sentinel,
            from,
            layout::EPOCH_MS + max,
            take,
        )?;
        let scores = w
            .entries
            .iter()
            .map(|e| e.score - layout::EPOCH_MS)
            .collect();
        Some((scores, w.ended, w.start))
    }

    #[test]
    fn a_window_read_at_a_guess_is_the_searched_one_or_none() {
        let feed = list(&[90, 80, 70, 70, 60, 50, 40], "-inf");
        // Read from the top: the place is wherever the first entry at most
        // max is.
        assert_eq!(at(&feed, 0, 8, 70, 2), Some((vec![70, 70], false, Some(2))));
        // From below the top: the first element read must be above max.
        assert_eq!(at(&feed, 1, 7, 75, 2), Some((vec![70, 70], false, Some(2))));
        assert_eq!(at(&feed, 2, 6, 75, 2), None);
        assert_eq!(at(&feed, 3, 5, 70, 2), None);
        // Too few elements read past the place: unproved, unless the
        // sentinel was among them.
        assert_eq!(at(&feed, 1, 3, 70, 3), None);
        assert_eq!(
            at(&feed, 3, 5, 65, 3),
            Some((vec![60, 50, 40], false, Some(4)))
        );
        assert_eq!(at(&feed, 3, 5, 55, 3), Some((vec![50, 40], true, Some(5))));
        assert_eq!(at(&feed, 3, 5, 10, 3), Some((vec![], true, Some(7))));
        // What the script would read: every case of `find`, every take.
        for max in 0..100 {
            for take in 1..6 {
                let place = [90, 80, 70, 70, 60, 50, 40]
                    .iter()
                    .filter(|s| **s > max)
                    .count();
                let want: Vec<i64> = [90, 80, 70, 70, 60, 50, 40]
                    .iter()
                    .copied()
                    .skip(place)
                    .take(take)
                    .collect();
                let ended = place + take >= 8;
                for from in 0..=place {
                    if let Some(got) = at(&feed, from, 12, max, take) {
                        assert_eq!(
                            got,
                            (want.clone(), ended, Some(place)),
                            "max {max} take {take} from {from}"
                        );
                    } else {
                        assert!(
                            from > 0 && from == place,
                            "max {max} take {take} from {from}"
                        );
                    }
                }
            }
        }
        // A building list tells it whatever was read; a missing key is
        // missing.
        let building = Value::BulkString(b"inf".to_vec());
        let w = Window::at(&Value::Array(vec![]), &building, 3, 0, 2).unwrap();
        assert!(matches!(w.range(), Ok(Range::Building)));
        let w = Window::at(&Value::Array(vec![]), &Value::Nil, 3, 0, 2).unwrap();
        assert!(matches!(w.range(), Ok(Range::Missing)));
    }

    #[test]
    fn rounds_hold_their_weight_and_every_item_once() {
        let items = [40, 70, 10, 100, 5, 5, 300];
        let runs = by_weight(&items, 100, |&w| w);
        assert_eq!(
            runs,
            [&[40][..], &[70, 10], &[100], &[5, 5], &[300]].to_vec()
        );
        assert!(by_weight(&[] as &[usize], 100, |&w| w).is_empty());
    }
}
