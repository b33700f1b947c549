//! The reader state and the post cache (scripts.rs, clauses 7 to 10): whom
//! each reader follows, the authors every follower pulls, cached posts, and
//! the warm read that uses them all in one round trip.

use std::collections::HashMap;

use redis::Value;

use super::{scripts, source_of, RedisStore};
use crate::error::{AppError, AppResult, Message};
use crate::types::{
    page_reads, CachedPost, Edge, Entry, EntryMeta, Range, Scope, StateKey, WarmRead,
};

/// A change to the pulled authors (clause 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PulledChange {
    /// A post's delivery is in flight.
    Add(i64),
    /// A post's delivery is done.
    Done(i64),
    /// The author is big-V, in this epoch.
    Promote(i64),
    /// The big-V time of this epoch is settled (its backfill done).
    Demoted(i64),
    /// The author is gone (a purged account): its field goes, whatever it
    /// holds.
    Forget,
}

/// One author of a pulled-authors fill: its big-V epoch (`None` if it is
/// not big-V; a big-V is pulled whatever its epoch, 0 included) and the
/// posts whose delivery is in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledAuthor {
    pub author: i64,
    pub epoch: Option<i64>,
    pub in_flight: Vec<i64>,
}

fn bad<E: Into<crate::error::BoxError>>(what: &str) -> impl FnOnce(E) -> AppError + '_ {
    move |e| AppError::internal(format!("reading {what}"), e)
}

impl RedisStore {
    /// The warm read of a page of `scope` (clause 10): a home's first
    /// source is its reader's inbox, an author's page's its outbox.
    pub async fn warm_read(
        &self,
        scope: Scope,
        max: Option<i64>,
        fetch: usize,
    ) -> AppResult<WarmRead> {
        if self.is_cluster() {
            return self.warm_read_by_slot(scope, max, fetch).await;
        }
        let (first, following, followees, reader, own) = match scope {
            Scope::Home { reader, own } => (
                self.keys.inbox(reader),
                self.keys.following(reader),
                self.keys.followees(reader),
                reader.to_string(),
                own,
            ),
            Scope::Author(author) => {
                let unused = format!("{}unused", self.keys.prefix());
                (
                    self.keys.outbox(author),
                    unused.clone(),
                    unused,
                    String::new(),
                    false,
                )
            }
        };
        let (pulled, pulled_authors) = (self.keys.pulled(), self.keys.pulled_authors());
        let hidden = self.keys.hidden();
        let max = max.map_or_else(|| "+inf".to_string(), |m| m.to_string());
        let prefix = self.keys.prefix().to_string();
        let mode = match scope {
            Scope::Home { .. } => "home",
            Scope::Author(_) => "author",
        };
        let first = &first;
        let reply: Value = self
            .with_conn(|mut c| async move {
                scripts::READ
                    .key(&following)
                    .key(first)
                    .key(&pulled)
                    .key(&followees)
                    .key(&pulled_authors)
                    .key(&hidden)
                    .arg(&prefix)
                    .arg(&max)
                    .arg(fetch)
                    .arg(mode)
                    .arg(scripts::TIES)
                    .arg(&reader)
                    .arg(if own { "1" } else { "0" })
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        parse_read(reply, first)
    }

    /// The warm read on a cluster, where one script cannot reach keys of
    /// other slots: the same reply as READ, in four round trips. The pulled
    /// authors are read first: a delivery done before that read is in the
    /// inbox read after it, and a post still in flight keeps its author's
    /// outbox pulled. Whom the reader follows and the inbox are read
    /// together (one slot, one RANGE call), then the outboxes concurrently
    /// (each floor with its range), then the authors and tombstones of the
    /// page's posts.
    async fn warm_read_by_slot(
        &self,
        scope: Scope,
        max: Option<i64>,
        fetch: usize,
    ) -> AppResult<WarmRead> {
        let max_arg = max.map_or_else(|| "+inf".to_string(), |m| m.to_string());
        let (first, reader, own) = match scope {
            Scope::Home { reader, own } => (self.keys.inbox(reader), Some(reader), own),
            Scope::Author(author) => (self.keys.outbox(author), None, false),
        };
        let first = first.as_str();
        // The pulled authors (a home's) and the hidden accounts: one slot.
        let shared = async {
            let (pulled, hidden) = (self.keys.pulled(), self.keys.hidden());
            let home = reader.is_some();
            self.with_conn(|mut c| async move {
                let mut pipe = redis::pipe();
                pipe.smembers(&hidden);
                if home {
                    pipe.hget(&pulled, "").hkeys(&pulled);
                }
                pipe.query_async::<Vec<Value>>(&mut c).await
            })
            .await
        };
        let following_key = reader.map(|r| self.keys.following(r));
        let first_key = first.to_string();
        let first_read = async {
            self.with_conn(|mut c| async move {
                let mut call = scripts::RANGE.key(&first_key);
                if let Some(key) = &following_key {
                    call.key(key);
                }
                call.arg(&max_arg).arg(fetch).arg(scripts::TIES);
                call.invoke_async::<Vec<Value>>(&mut c).await
            })
            .await
        };
        // A home reads the pulled authors first: a delivery done before
        // that read is in the inbox read after it. An author's page reads
        // both at once.
        let (shared, reply) = match reader {
            Some(_) => {
                let shared = shared.await?;
                (shared, first_read.await?)
            }
            None => {
                let (shared, reply) = futures::join!(shared, first_read);
                (shared?, reply?)
            }
        };
        let mut shared = shared.into_iter();
        let hidden: Vec<String> = redis::from_redis_value(shared.next().unwrap_or(Value::Nil))
            .map_err(bad("the hidden accounts"))?;
        let pulled = match reader {
            Some(_) => {
                let state: Option<String> =
                    redis::from_redis_value(shared.next().unwrap_or(Value::Nil))
                        .map_err(bad("the pulled authors"))?;
                let authors: Vec<String> =
                    redis::from_redis_value(shared.next().unwrap_or(Value::Nil))
                        .map_err(bad("the pulled authors"))?;
                Some((state, authors))
            }
            None => None,
        };
        let [floor, cut, range, rest @ ..] = &reply[..] else {
            return Err(bad::<Message>("a first source")(Message(format!(
                "{reply:?}"
            ))));
        };
        let mut sources = vec![(None, source_of(first, floor, cut, range)?)];
        let following: HashMap<String, String> = match rest.first() {
            Some(hash) => {
                redis::from_redis_value_ref(hash).map_err(bad("whom a reader follows"))?
            }
            None => HashMap::new(),
        };
        // Whose posts the home shows: whom the reader follows, and itself
        // with `own`.
        let me = reader.filter(|_| own).map(|r| r.to_string());
        let followed = |a: &str| {
            me.as_deref() == Some(a) || following.get(a).is_some_and(|v| v.starts_with('F'))
        };
        let mut pulled_authors = Vec::new();
        if let Some((state, _)) = &pulled {
            match following.get("").map(String::as_str) {
                None => return Ok(WarmRead::Missing(StateKey::Following)),
                Some("b") => return Ok(WarmRead::Building(StateKey::Following)),
                Some(_) => {}
            }
            match state.as_deref() {
                None => return Ok(WarmRead::Missing(StateKey::Pulled)),
                Some("b") => return Ok(WarmRead::Building(StateKey::Pulled)),
                Some(_) => {}
            }
        }
        if !hidden.iter().any(|m| m == "0") {
            return Ok(match hidden.iter().any(|m| m == "b") {
                true => WarmRead::Building(StateKey::Hidden),
                false => WarmRead::Missing(StateKey::Hidden),
            });
        }
        let hidden: std::collections::HashSet<&str> = hidden.iter().map(String::as_str).collect();
        if let Some((_, authors)) = pulled {
            let authors: Vec<i64> = authors
                .iter()
                .filter(|a| !a.is_empty() && followed(a) && !hidden.contains(a.as_str()))
                .map(|a| a.parse::<i64>())
                .collect::<Result<_, _>>()
                .map_err(bad("a pulled author"))?;
            pulled_authors = authors;
        }
        let outboxes: Vec<String> = pulled_authors
            .iter()
            .map(|a| self.keys.outbox(*a))
            .collect();
        let ranges = self.ranges(&outboxes, max, fetch).await;
        sources.extend(pulled_authors.into_iter().map(Some).zip(ranges?));
        let ids = page_ids(&mut sources, fetch);
        let keys: Vec<String> = ids.iter().map(|id| self.keys.post(*id)).collect();
        let rows = self
            .query_per_slot(&keys, |pipe, key| {
                pipe.cmd("HMGET").arg(key).arg("a").arg("d");
            })
            .await?;
        let mut meta = HashMap::with_capacity(ids.len());
        for (id, row) in ids.into_iter().zip(rows) {
            let (a, d): (Option<String>, Option<String>) =
                redis::from_redis_value(row).map_err(bad("a post"))?;
            let author = a
                .filter(|a| !a.is_empty())
                .map(|a| a.parse::<i64>())
                .transpose()
                .map_err(bad("a post's author"))?;
            let followed = match (reader, author) {
                (_, Some(a)) if hidden.contains(a.to_string().as_str()) => false,
                (Some(_), Some(a)) => followed(&a.to_string()),
                _ => true,
            };
            meta.insert(
                id,
                EntryMeta {
                    author,
                    deleted: d.as_deref() == Some("1"),
                    followed,
                },
            );
        }
        Ok(WarmRead::Read { sources, meta })
    }

    /// Starts building whom `reader` follows (clause 7); true if this
    /// caller must fill it.
    pub async fn begin_following(&self, reader: i64) -> AppResult<bool> {
        let (hash, names) = (self.keys.following(reader), self.keys.followees(reader));
        self.begin(&scripts::BEGIN_STATE, &[&hash, &names]).await
    }

    /// Starts building the pulled authors (clause 8); true if this caller
    /// must fill them.
    pub async fn begin_pulled(&self) -> AppResult<bool> {
        let (hash, names) = (self.keys.pulled(), self.keys.pulled_authors());
        self.begin(&scripts::BEGIN_STATE, &[&hash, &names]).await
    }

    /// Completes the build of whom `reader` follows, as of `seq`, with the
    /// idle TTL of the reader's keys.
    pub async fn fill_following(
        &self,
        reader: i64,
        seq: i64,
        followees: &[i64],
        idle_ttl_secs: u64,
    ) -> AppResult<bool> {
        let key = self.keys.following(reader);
        let names = self.keys.followees(reader);
        let filled: i64 = self
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
        &self,
        reader: i64,
        author: i64,
        seq: i64,
        (edge, shown): (Edge, bool),
        cap: i64,
        cut: Option<i64>,
        entries: &[Entry],
    ) -> AppResult<bool> {
        let following = self.keys.following(reader);
        let inbox = self.keys.inbox(reader);
        let names = self.keys.followees(reader);
        let inbox_change = match edge {
            Edge::Follow => "push",
            Edge::Unfollow => "remove",
            Edge::Mute | Edge::Unmute => "keep",
        };
        let applied: i64 = self
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
        &self,
        reader: i64,
        seq: i64,
        authors: &[(i64, bool)],
        (cap, cut): (i64, Option<i64>),
        entries: &[Entry],
    ) -> AppResult<i64> {
        let following = self.keys.following(reader);
        let inbox = self.keys.inbox(reader);
        let names = self.keys.followees(reader);
        self.with_conn(|mut c| async move {
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
    pub async fn followed_in_copy(&self, reader: i64, author: i64) -> AppResult<Option<bool>> {
        let key = self.keys.following(reader);
        let field: Option<String> = self
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
    /// author; empty while the state is missing or being built.
    pub async fn pulled_in_flight(&self) -> AppResult<Vec<(i64, Vec<i64>)>> {
        let key = self.keys.pulled();
        let fields: HashMap<String, String> = self
            .with_conn(
                |mut c| async move { redis::cmd("HGETALL").arg(&key).query_async(&mut c).await },
            )
            .await?;
        if fields.get("").map(String::as_str) != Some("c") {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for (author, value) in fields.iter().filter(|(a, _)| !a.is_empty()) {
            let author: i64 = author.parse().map_err(bad("a pulled author"))?;
            let ids = value.split_once(';').map_or("", |(_, ids)| ids);
            let ids: Vec<i64> = ids
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

    /// Changes the pulled authors (clause 8).
    pub async fn pulled_change(&self, author: i64, change: PulledChange) -> AppResult<()> {
        let (key, names) = (self.keys.pulled(), self.keys.pulled_authors());
        let (op, x) = match change {
            PulledChange::Add(id) => ("add", id),
            PulledChange::Done(id) => ("done", id),
            PulledChange::Promote(e) => ("promote", e),
            PulledChange::Demoted(e) => ("demoted", e),
            PulledChange::Forget => ("forget", 0),
        };
        self.with_conn(|mut c| async move {
            let _: i64 = scripts::PULLED
                .key(&key)
                .key(&names)
                .arg(op)
                .arg(author)
                .arg(x)
                .invoke_async(&mut c)
                .await?;
            Ok(())
        })
        .await
    }

    /// Hides (`hide`) or shows again an account's posts everywhere
    /// (clause 12).
    pub async fn hidden_change(&self, account: i64, hide: bool) -> AppResult<()> {
        let key = self.keys.hidden();
        self.with_conn(|mut c| async move {
            let _: i64 = scripts::HIDDEN
                .key(&key)
                .arg(if hide { "add" } else { "remove" })
                .arg(account)
                .invoke_async(&mut c)
                .await?;
            Ok(())
        })
        .await
    }

    /// Starts building the hidden accounts (clause 12); true if this
    /// caller must fill them.
    pub async fn begin_hidden(&self) -> AppResult<bool> {
        let key = self.keys.hidden();
        self.begin(&scripts::BEGIN_HIDDEN, &[&key]).await
    }

    /// Completes the build of the hidden accounts.
    pub async fn fill_hidden(&self, accounts: &[i64]) -> AppResult<bool> {
        let key = self.keys.hidden();
        let filled: i64 = self
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

    /// Completes the build of the pulled authors.
    pub async fn fill_pulled(&self, authors: &[PulledAuthor]) -> AppResult<bool> {
        let (key, names) = (self.keys.pulled(), self.keys.pulled_authors());
        let filled: i64 = self
            .with_conn(|mut c| async move {
                let mut inv = scripts::FILL_PULLED.key(&key);
                inv.key(&names);
                for a in authors {
                    let ids: Vec<String> = a.in_flight.iter().map(i64::to_string).collect();
                    let epoch = a.epoch.map_or_else(String::new, |e| e.to_string());
                    inv.arg(a.author).arg(epoch).arg(ids.join(","));
                }
                inv.invoke_async(&mut c).await
            })
            .await?;
        Ok(filled == 1)
    }

    /// A new post: into its author's outbox, the post cache and the
    /// deliveries in flight, at once (clauses 3, 8, 9). True if its outbox
    /// entry is new (false when it was there, or the outbox is not).
    pub async fn publish(
        &self,
        post: &CachedPost,
        id: i64,
        outbox_cap: i64,
        ttl_secs: u64,
    ) -> AppResult<bool> {
        let outbox = self.keys.outbox(post.author_id);
        let cached = self.keys.post(id);
        let (pulled, names) = (self.keys.pulled(), self.keys.pulled_authors());
        if self.is_cluster() {
            // Three slots, so three calls, in the order that keeps readers
            // right in between: the post is cached, then its delivery is
            // in flight (its outbox pulled), then it is in the outbox.
            self.with_conn(|mut c| async move {
                redis::pipe()
                    .atomic()
                    .hset_multiple(
                        &cached,
                        &[
                            ("a", post.author_id.to_string()),
                            ("u", post.author_username.clone()),
                            ("b", post.body.clone()),
                            ("t", post.created_at_ms.to_string()),
                            ("m", post.meta.clone().unwrap_or_default()),
                        ],
                    )
                    .ignore()
                    .expire(&cached, ttl_secs as i64)
                    .ignore()
                    .query_async::<()>(&mut c)
                    .await
            })
            .await?;
            self.pulled_change(post.author_id, PulledChange::Add(id))
                .await?;
            let entry = [Entry::new(post.created_at_ms, id)];
            let added = self.push(&[(outbox, &entry)], outbox_cap).await?;
            return Ok(added > 0);
        }
        self.with_conn(|mut c| async move {
            let added: i64 = scripts::PUBLISH
                .key(&outbox)
                .key(&cached)
                .key(&pulled)
                .key(&names)
                .arg(outbox_cap)
                .arg(id)
                .arg(post.created_at_ms)
                .arg(post.author_id)
                .arg(&post.author_username)
                .arg(&post.body)
                .arg(ttl_secs)
                .arg(post.meta.as_deref().unwrap_or(""))
                .invoke_async(&mut c)
                .await?;
            Ok(added == 1)
        })
        .await
    }

    /// Caches posts read from PostgreSQL (only the fields missing).
    pub async fn fill_posts(&self, posts: &[(i64, CachedPost)], ttl_secs: u64) -> AppResult<()> {
        if posts.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = posts.iter().map(|(id, _)| self.keys.post(*id)).collect();
        let calls: Vec<_> = keys
            .iter()
            .zip(posts)
            .map(|(key, (_, p))| {
                let mut inv = scripts::FILL_POST.key(key);
                inv.arg(ttl_secs)
                    .arg(p.author_id)
                    .arg(&p.author_username)
                    .arg(&p.body)
                    .arg(p.created_at_ms)
                    .arg(if p.deleted { "1" } else { "0" })
                    .arg(p.meta.as_deref().unwrap_or(""));
                (super::slot(key.as_bytes()), inv)
            })
            .collect();
        self.with_conn(|mut c| async move {
            let _: Vec<i64> = c.invoke_all(&scripts::FILL_POST, &calls).await?;
            Ok(())
        })
        .await
    }

    /// Marks a post deleted in the cache (clause 9).
    pub async fn tombstone(&self, id: i64, ttl_secs: u64) -> AppResult<()> {
        let key = self.keys.post(id);
        self.with_conn(|mut c| async move {
            let _: i64 = scripts::TOMBSTONE
                .key(&key)
                .arg(ttl_secs)
                .invoke_async(&mut c)
                .await?;
            Ok(())
        })
        .await
    }

    /// Cached posts, by id (absent: not cached whole).
    pub async fn posts(&self, ids: &[i64]) -> AppResult<HashMap<i64, CachedPost>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| self.keys.post(*id)).collect();
        let rows: Vec<Vec<Option<String>>> = self
            .query_per_slot(&keys, |pipe, key| {
                pipe.cmd("HMGET")
                    .arg(key)
                    .arg("a")
                    .arg("u")
                    .arg("b")
                    .arg("t")
                    .arg("d")
                    .arg("m");
            })
            .await?
            .into_iter()
            .map(redis::from_redis_value)
            .collect::<Result<_, _>>()
            .map_err(bad("a post"))?;
        let mut out = HashMap::with_capacity(ids.len());
        for (id, row) in ids.iter().zip(rows) {
            // A post cached without its `m` field (by an older release) is
            // not cached whole.
            if let [Some(a), Some(u), Some(b), Some(t), d, Some(m)] = row.as_slice() {
                let (Ok(author_id), Ok(created_at_ms)) = (a.parse(), t.parse()) else {
                    continue;
                };
                out.insert(
                    *id,
                    CachedPost {
                        author_id,
                        author_username: u.clone(),
                        body: b.clone(),
                        created_at_ms,
                        deleted: d.as_deref() == Some("1"),
                        meta: (!m.is_empty()).then(|| m.clone()),
                    },
                );
            }
        }
        Ok(out)
    }
}

/// As READ: the sources cut down to what the page can use
/// ([`page_reads`]), whose posts alone are looked up (none while a source
/// is not there). Returns their ids, in feed order.
fn page_ids(sources: &mut [(Option<i64>, Range)], fetch: usize) -> Vec<i64> {
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

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn items(v: Value, what: &str) -> AppResult<Vec<Value>> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(bad::<Message>(what)(Message(format!("{other:?}")))),
    }
}

/// Parses a READ reply (clause 10).
fn parse_read(reply: Value, first: &str) -> AppResult<WarmRead> {
    let mut parts = items(reply, "a warm read")?.into_iter();
    let status = parts.next().and_then(|v| text(&v)).unwrap_or_default();
    let state = |what: &str| match what {
        "following" => Ok(StateKey::Following),
        "pulled" => Ok(StateKey::Pulled),
        "hidden" => Ok(StateKey::Hidden),
        other => Err(bad::<Message>("a warm read")(Message(other.to_string()))),
    };
    if let Some(what) = status.strip_prefix("missing:") {
        return Ok(WarmRead::Missing(state(what)?));
    }
    if let Some(what) = status.strip_prefix("building:") {
        return Ok(WarmRead::Building(state(what)?));
    }
    let (Some(sources), Some(meta)) = (parts.next(), parts.next()) else {
        return Err(bad::<Message>("a warm read")(Message(status)));
    };
    let mut out = Vec::new();
    for source in items(sources, "a warm read's sources")? {
        let [author, floor, cut, entries] = &items(source, "a warm read's source")?[..] else {
            return Err(bad::<Message>("a warm read's source")(Message(
                "not four fields".into(),
            )));
        };
        let author = text(author)
            .filter(|a| !a.is_empty())
            .map(|a| a.parse::<i64>())
            .transpose()
            .map_err(bad("an author"))?;
        out.push((author, source_of(first, floor, cut, entries)?));
    }
    let meta_list = items(meta, "a warm read's posts")?;
    let mut meta = HashMap::with_capacity(meta_list.len() / 4);
    for chunk in meta_list.chunks(4) {
        let [id, author, deleted, followed] = chunk else {
            break;
        };
        let id: i64 = text(id)
            .unwrap_or_default()
            .parse()
            .map_err(bad("a post id"))?;
        let author = text(author)
            .filter(|a| !a.is_empty())
            .map(|a| a.parse::<i64>())
            .transpose()
            .map_err(bad("a post's author"))?;
        meta.insert(
            id,
            EntryMeta {
                author,
                deleted: text(deleted).as_deref() == Some("1"),
                followed: text(followed).as_deref() == Some("1"),
            },
        );
    }
    Ok(WarmRead::Read { sources: out, meta })
}
