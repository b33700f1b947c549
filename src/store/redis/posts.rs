//! The post cache (scripts.rs, clause 9) and a new post's arrival in
//! Redis (clauses 3, 8 and 9).

use std::collections::HashMap;

use redis::Value;

use super::feeds::push_call;
use super::hints::Signal;
use super::state::PulledChange;
use super::{bad, scripts, slot, RedisStore};
use crate::error::AppResult;
use crate::types::{CachedPost, Entry, PostId};

/// Cached posts, and publishing one ([`RedisStore::posts`]).
#[derive(Clone, Copy)]
pub struct PostCache<'a>(pub(super) &'a RedisStore);

impl PostCache<'_> {
    /// A new post (clauses 3, 8, 9), in the order that keeps readers right
    /// between the steps: the post is cached, then its delivery is in
    /// flight (its outbox pulled, in every copy of the marks), then it is
    /// in its outbox. On a single node the three go at once, on a cluster
    /// one after the other ([`RedisStore::in_order`]). With `hint`, the
    /// hint follows them as their last step: on a single node in the same
    /// transaction, so that the publish makes one round trip. True if its
    /// outbox entry is new (false when it was there, or the outbox is not).
    pub async fn publish(
        self,
        post: &CachedPost,
        id: PostId,
        outbox_cap: i64,
        ttl_secs: u64,
        hint: Option<&Signal>,
    ) -> AppResult<bool> {
        let cached = self.0.keys.post(id);
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
        let in_flight: Vec<(u16, redis::Pipeline)> = self
            .0
            .state()
            .pulled_calls(post.author_id, PulledChange::Add(id))
            .iter()
            .map(|(slot, call)| {
                let mut copy = redis::pipe();
                copy.invoke_script(call);
                (*slot, copy)
            })
            .collect();
        let mut outbox = redis::pipe();
        let entry = [Entry::new(post.created_at_ms, id)];
        let key = self.0.keys.outbox(post.author_id);
        outbox.invoke_script(&push_call(
            std::slice::from_ref(&key),
            &entry,
            outbox_cap,
            None,
        ));
        let scripts = [&*scripts::PULLED, &*scripts::PUSH];
        // The post's cache and its delivery in flight go together (a reader
        // pulls the outbox for it, where it is not yet), then the outbox
        // entry that makes it seen, then the hint that it is there.
        let mut first = vec![(slot(cached.as_bytes()), cache)];
        first.extend(in_flight);
        let mut steps = vec![first, vec![(slot(key.as_bytes()), outbox)]];
        steps.extend(hint.map(|signal| vec![self.0.hint_step(signal)]));
        let mut replies = self.0.in_order(&scripts, &steps).await?;
        // The outbox's reply is the last but the hint's.
        replies.truncate(replies.len().saturating_sub(usize::from(hint.is_some())));
        let added: i64 = redis::from_redis_value(replies.pop().unwrap_or(Value::Nil))
            .map_err(bad("a publish"))?;
        Ok(added > 0)
    }

    /// Caches posts read from PostgreSQL (only the fields missing).
    pub async fn fill(self, posts: &[(PostId, CachedPost)], ttl_secs: u64) -> AppResult<()> {
        if posts.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = posts.iter().map(|(id, _)| self.0.keys.post(*id)).collect();
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
        self.0
            .with_conn(|mut c| async move {
                let _: Vec<i64> = c.invoke_all(&scripts::FILL_POST, &calls).await?;
                Ok(())
            })
            .await
    }

    /// Marks a post deleted in the cache (clause 9).
    pub async fn tombstone(self, id: PostId, ttl_secs: u64) -> AppResult<()> {
        let key = self.0.keys.post(id);
        self.0
            .with_conn(|mut c| async move {
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
    pub async fn cached(self, ids: &[PostId]) -> AppResult<HashMap<PostId, CachedPost>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| self.0.keys.post(*id)).collect();
        let rows: Vec<Vec<Option<String>>> = self
            .0
            .read_per_slot(&keys, |pipe, key| {
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
