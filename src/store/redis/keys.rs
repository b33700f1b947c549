//! Every Redis key string of the service is built here, nowhere else.
//!
//! Per-user keys carry the user id in a hash tag (`{42}`) so that one user's
//! keys share a Redis Cluster slot.

#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Keys {
            prefix: prefix.into(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Inbox ZSET: post id → created_at_ms, plus the floor sentinel.
    pub fn inbox(&self, user: i64) -> String {
        format!("{}feed:{{{user}}}", self.prefix)
    }

    /// Outbox ZSET: the author's own posts, same encoding as an inbox.
    pub fn outbox(&self, author: i64) -> String {
        format!("{}outbox:{{{author}}}", self.prefix)
    }

    /// Active fans ZSET of a big-V: follower id → last-active ms.
    pub fn active_fans(&self, author: i64) -> String {
        format!("{}active_fans:{{{author}}}", self.prefix)
    }

    /// Whom a reader follows (HASH followee → change seq; see scripts.rs).
    pub fn following(&self, reader: i64) -> String {
        format!("{}following:{{{reader}}}", self.prefix)
    }

    /// The authors every follower pulls right now (one HASH for all: big-Vs
    /// and authors with deliveries in flight; see scripts.rs).
    pub fn pulled(&self) -> String {
        format!("{}pulled", self.prefix)
    }

    /// A post as readers see it (HASH: author, username, body, time, and a
    /// tombstone once deleted).
    pub fn post(&self, id: i64) -> String {
        format!("{}post:{{{id}}}", self.prefix)
    }

    /// Marker that rate-limits recording a reader as an active fan.
    pub fn active_mark(&self, reader: i64) -> String {
        format!("{}active_mark:{{{reader}}}", self.prefix)
    }

    /// Pattern matching every key of this prefix (for clean-up and tests).
    pub fn pattern(&self) -> String {
        format!("{}*", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_prefix_and_a_hash_tag() {
        let k = Keys::new("t1:");
        assert_eq!(k.inbox(42), "t1:feed:{42}");
        assert_eq!(k.outbox(7), "t1:outbox:{7}");
        assert_eq!(k.active_fans(7), "t1:active_fans:{7}");
        assert_eq!(k.active_mark(42), "t1:active_mark:{42}");
        assert_eq!(k.following(42), "t1:following:{42}");
        assert_eq!(k.pulled(), "t1:pulled");
        assert_eq!(k.post(9), "t1:post:{9}");
        assert_eq!(k.pattern(), "t1:*");
    }
}
