//! The reader state and the post cache (scripts.rs, clauses 7 to 9 and
//! 12): whom each reader follows, the authors every follower pulls, the
//! hidden accounts and cached posts (the warm read that uses them all is
//! in warm.rs).

use std::collections::HashMap;

use redis::Value;

use super::{push_call, scripts, RedisStore};
use crate::error::{AppError, AppResult};
use crate::types::{CachedPost, Edge, Entry, PulledAuthor};

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

fn bad<E: Into<crate::error::BoxError>>(what: &str) -> impl FnOnce(E) -> AppError + '_ {
    move |e| AppError::internal(format!("reading {what}"), e)
}

impl RedisStore {
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
        let call = self.pulled_call(author, change);
        self.with_conn(|mut c| async move {
            let _: i64 = call.invoke_async(&mut c).await?;
            Ok(())
        })
        .await
    }

    /// The PULLED call that makes `change`.
    fn pulled_call(&self, author: i64, change: PulledChange) -> redis::ScriptInvocation<'static> {
        let (op, x) = match change {
            PulledChange::Add(id) => ("add", id),
            PulledChange::Done(id) => ("done", id),
            PulledChange::Promote(e) => ("promote", e),
            PulledChange::Demoted(e) => ("demoted", e),
            PulledChange::Forget => ("forget", 0),
        };
        let mut call = scripts::PULLED.prepare_invoke();
        call.key(self.keys.pulled())
            .key(self.keys.pulled_authors())
            .arg(op)
            .arg(author)
            .arg(x);
        call
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

    /// A new post (clauses 3, 8, 9), in the order that keeps readers right
    /// between the steps: the post is cached, then its delivery is in
    /// flight (its outbox pulled), then it is in its outbox. Three slots:
    /// on a single node the three go at once, on a cluster one after the
    /// other ([`RedisStore::in_order`]). True if its outbox entry is new
    /// (false when it was there, or the outbox is not).
    pub async fn publish(
        &self,
        post: &CachedPost,
        id: i64,
        outbox_cap: i64,
        ttl_secs: u64,
    ) -> AppResult<bool> {
        let cached = self.keys.post(id);
        let mut cache = redis::pipe();
        cache
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
            .expire(&cached, ttl_secs as i64);
        let mut in_flight = redis::pipe();
        in_flight.invoke_script(&self.pulled_call(post.author_id, PulledChange::Add(id)));
        let mut outbox = redis::pipe();
        let entry = [Entry::new(post.created_at_ms, id)];
        let key = self.keys.outbox(post.author_id);
        outbox.invoke_script(&push_call(
            std::slice::from_ref(&key),
            &entry,
            outbox_cap,
            None,
        ));
        let scripts = [&*scripts::PULLED, &*scripts::PUSH];
        let replies = self.in_order(&scripts, &[cache, in_flight, outbox]).await?;
        let added: i64 = redis::from_redis_value(replies.into_iter().last().unwrap_or(Value::Nil))
            .map_err(bad("a publish"))?;
        Ok(added > 0)
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
