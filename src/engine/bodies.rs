//! This instance's cache of posts' bodies: posts never change, so every
//! instance's copy stays true (deletions are read from Redis). Bounded by
//! posts and by bytes; when full, the oldest entries leave first (one at a
//! time, not the whole cache).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use crate::types::{Post, PostId};

/// Bytes a cached post is counted for beyond its texts (its map slot, its
/// place in the order and the fixed fields).
const OVERHEAD: usize = 96;

pub struct Bodies {
    posts: HashMap<PostId, Post>,
    /// Ids in the order they came in (an id may appear once only).
    order: VecDeque<PostId>,
    bytes: usize,
    max_posts: usize,
    max_bytes: usize,
}

fn cost(p: &Post) -> usize {
    OVERHEAD + p.body.len() + p.author_username.len() + p.meta.as_ref().map_or(0, String::len)
}

impl Bodies {
    pub fn new(max_posts: usize, max_bytes: usize) -> Self {
        Bodies {
            posts: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            max_posts,
            max_bytes,
        }
    }

    pub fn insert(&mut self, post: &Post) {
        let size = cost(post);
        if self.posts.contains_key(&post.id) || size > self.max_bytes || self.max_posts == 0 {
            return;
        }
        while self.posts.len() >= self.max_posts || self.bytes + size > self.max_bytes {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.posts.remove(&oldest) {
                self.bytes -= cost(&gone);
            }
        }
        self.bytes += size;
        self.order.push_back(post.id);
        self.posts.insert(post.id, post.clone());
    }

    pub fn get(&self, id: PostId) -> Option<&Post> {
        self.posts.get(&id)
    }

    /// Posts and bytes held.
    #[cfg(test)]
    pub fn held(&self) -> (usize, usize) {
        (self.posts.len(), self.bytes)
    }
}

/// [`Bodies`] shared by an instance's requests.
pub struct SharedBodies(Mutex<Bodies>);

impl SharedBodies {
    pub fn new(max_posts: usize, max_bytes: usize) -> Self {
        SharedBodies(Mutex::new(Bodies::new(max_posts, max_bytes)))
    }

    fn lock(&self) -> MutexGuard<'_, Bodies> {
        match self.0.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Keeps posts' bodies.
    pub fn remember(&self, posts: &[Post]) {
        let mut bodies = self.lock();
        for p in posts {
            bodies.insert(p);
        }
    }

    /// The bodies held of `ids`, by id.
    pub fn recall(&self, ids: &[PostId]) -> HashMap<PostId, Post> {
        let bodies = self.lock();
        ids.iter()
            .filter_map(|id| bodies.get(*id).map(|p| (*id, p.clone())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::UserId;

    fn post(id: PostId, body_len: usize) -> Post {
        Post {
            id,
            author_id: UserId(1),
            author_username: "a".into(),
            body: "x".repeat(body_len),
            created_at_ms: id.0,
            meta: None,
        }
    }

    #[test]
    fn large_bodies_are_bounded_by_bytes_and_the_oldest_leave_first() {
        let mut cache = Bodies::new(100_000, 8 * 1024 * 1024);
        for id in 0..100_000 {
            cache.insert(&post(PostId(id), 8 * 1024));
        }
        let (posts, bytes) = cache.held();
        assert!(bytes <= 8 * 1024 * 1024, "{bytes}");
        assert!(posts > 900, "{posts} posts: the cache evicts one at a time");
        assert!(cache.get(PostId(99_999)).is_some() && cache.get(PostId(0)).is_none());
    }

    #[test]
    fn small_posts_are_bounded_by_count_and_repeats_count_once() {
        let mut cache = Bodies::new(10, 1 << 20);
        for id in 0..25 {
            cache.insert(&post(PostId(id), 10));
            cache.insert(&post(PostId(id), 10));
        }
        assert_eq!(cache.held().0, 10);
        assert!((15..25).all(|id| cache.get(PostId(id)).is_some()));
        assert_eq!(cache.held().1, 10 * cost(&post(PostId(0), 10)));
        // A post larger than the whole budget is not cached.
        let mut tiny = Bodies::new(10, 200);
        tiny.insert(&post(PostId(1), 500));
        assert_eq!(tiny.held(), (0, 0));
    }
}
