//! The admin-tunable settings: persisted in PostgreSQL, live on every
//! instance; the engine's policy checks them.

/// The admin-tunable settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedSettings {
    pub big_v_threshold: i64,
    pub big_v_demote_threshold: i64,
    pub active_window_secs: i64,
    pub inbox_max_len: i64,
    pub outbox_max_len: i64,
    /// An inbox unread for this long expires (rebuilt when its reader returns).
    pub inbox_idle_ttl_secs: i64,
    /// Follows per user at most (a follow beyond answers 422).
    pub max_follows: i64,
    /// Pending fan-out jobs past which publishes answer 503.
    pub max_fanout_backlog: i64,
    /// Whether a reader's home feed shows its own posts.
    pub home_includes_own_posts: bool,
    /// An author's newest posts a follow copies into the inbox (the rest
    /// is read through the fallback).
    pub follow_copy_limit: i64,
}
