//! Feed lists (inboxes and outboxes, scripts.rs clauses 1 to 6): their
//! reads, builds, pushes and removals, whatever the topology.

use futures::{StreamExt, TryStreamExt};
use redis::Value;

use super::{layout, parse_score, scripts, slot, RedisStore};
use crate::error::{AppError, AppResult, Message};
use crate::types::{Entry, Range, SourceRead};

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

/// Feed lists: reads of their ranges, builds, pushes and removals
/// ([`RedisStore::feeds`]).
#[derive(Clone, Copy)]
pub struct FeedLists<'a>(pub(super) &'a RedisStore);

impl FeedLists<'_> {
    /// Reads each feed's window from `max` down (clause 6): `fetch + 1`
    /// entries and [`scripts::TIE_SLACK`] more, each with its state as of
    /// the same moment. From the top (no `max`) with one `LRANGE` each;
    /// below a cursor with one [`scripts::SOURCES`] call per node holding
    /// some, which finds the cursor's place. Either way one round trip
    /// (one pipeline or call per master on a cluster).
    pub async fn ranges(
        self,
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
            Some(max) => self.below(keys, max, take).await?,
        };
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
        let replies = self
            .0
            .with_conn(|c| async move { c.reads().query_groups(pipes).await })
            .await?;
        let mut out: Vec<Option<Window>> = vec![None; keys.len()];
        for (group, results) in groups.iter().zip(replies) {
            if results.len() != group.len() {
                return Err(AppError::internal(
                    "reading feeds",
                    Message(format!(
                        "{} replies for {} keys",
                        results.len(),
                        group.len()
                    )),
                ));
            }
            for (&i, reply) in group.iter().zip(&results) {
                out[i] = Some(Window::from_top(&keys[i], reply)?);
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// The window of each feed from its first entry scored at most `max`:
    /// one [`scripts::SOURCES`] call per node.
    async fn below(self, keys: &[String], max: i64, take: usize) -> AppResult<Vec<Window>> {
        let args = [max.to_string(), take.to_string()];
        let replies = self
            .0
            .with_conn(|c| async move {
                c.reads()
                    .invoke_by_node(&scripts::SOURCES, keys, &args)
                    .await
            })
            .await?;
        keys.iter()
            .zip(&replies)
            .map(|(key, reply)| Window::from_script(key, reply))
            .collect()
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
        let [sentinel, ended, entries] = parts.as_slice() else {
            return Err(AppError::internal(
                format!("reading {key}"),
                Message(format!("{} values", parts.len())),
            ));
        };
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
