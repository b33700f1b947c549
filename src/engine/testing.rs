//! What the engine's unit tests share: a runtime, settings, accounts.

use crate::types::{AccountStatus, FeedSettings, User, UserId};

/// Runs a test's future to its end on a runtime of its own.
pub fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}

/// Settings roomy enough that no limit is met unless a test sets it.
pub fn settings() -> FeedSettings {
    FeedSettings {
        big_v_threshold: 1000,
        big_v_demote_threshold: 900,
        active_window_secs: 3600,
        inbox_max_len: 1000,
        outbox_max_len: 1000,
        inbox_idle_ttl_secs: 3600,
        max_follows: 1000,
        max_fanout_backlog: 1000,
        home_includes_own_posts: true,
        follow_copy_limit: 1000,
    }
}

/// Account ids, as a test names them.
pub fn ids<const N: usize>(ids: [i64; N]) -> Vec<UserId> {
    ids.into_iter().map(UserId).collect()
}

/// Account `id` in `status`.
pub fn user(id: UserId, status: AccountStatus) -> User {
    User {
        id,
        username: format!("u{id}"),
        follower_count: 0,
        following_count: 0,
        big_v: false,
        status,
    }
}
