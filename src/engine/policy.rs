//! The engine's policy: when an author is big-V, whom a post goes to, and
//! which admin settings are valid. The stores record what is decided here.

use serde::Deserialize;

use crate::types::BigVChange;
pub use crate::types::FeedSettings;

/// Bounds of the admin settings.
pub const MAX_CAP: i64 = 100_000;
pub const MAX_FOLLOWS: i64 = 1_000_000;
pub const MAX_FANOUT_BACKLOG: i64 = 100_000_000;
pub const MAX_ACTIVE_WINDOW_SECS: i64 = 366 * 24 * 3600;
/// Bounds of the inbox idle TTL: an hour (far above the interval at which
/// reads refresh it) to a year.
pub const MIN_INBOX_IDLE_TTL_SECS: i64 = 3600;
pub const MAX_INBOX_IDLE_TTL_SECS: i64 = 366 * 24 * 3600;
const _: () =
    assert!(crate::settings::MAX_ACTIVE_MARK_INTERVAL_SECS * 2 <= MIN_INBOX_IDLE_TTL_SECS as u64);

/// Whether an author with `followers` followers changes state: it becomes
/// big-V at `big_v_threshold` followers and ordinary again below
/// `big_v_demote_threshold` (hysteresis: between the two it stays as it is).
pub fn big_v_change(followers: i64, big_v: bool, s: &FeedSettings) -> Option<BigVChange> {
    if !big_v && followers >= s.big_v_threshold {
        Some(BigVChange::Promote)
    } else if big_v && followers < s.big_v_demote_threshold {
        Some(BigVChange::Demote)
    } else {
        None
    }
}

/// Whom a post's delivery reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// An ordinary author's post: every follower's inbox, and the
    /// author's own (a home shows its reader's posts).
    Followers,
    /// A big-V's post (pulled by every follower from the outbox): only the
    /// inboxes of its active fans, so their reads find it at home.
    ActiveFans,
}

pub fn audience(pulled: bool) -> Audience {
    if pulled {
        Audience::ActiveFans
    } else {
        Audience::Followers
    }
}

/// A partial update of the admin settings: any subset of the fields,
/// validated as a whole.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"big_v_threshold": 5000, "big_v_demote_threshold": 4000}))]
pub struct SettingsPatch {
    /// Follower count at which an author becomes big-V (at least 1).
    #[schema(minimum = 1)]
    pub big_v_threshold: Option<i64>,
    /// Below this a big-V becomes ordinary again; below `big_v_threshold`.
    #[schema(minimum = 0)]
    pub big_v_demote_threshold: Option<i64>,
    /// A fan who read within this window is active.
    #[schema(minimum = 1, maximum = 31622400)]
    pub active_window_secs: Option<i64>,
    /// Inbox cap.
    #[schema(minimum = 1, maximum = 100000)]
    pub inbox_max_len: Option<i64>,
    /// Outbox cap.
    #[schema(minimum = 1, maximum = 100000)]
    pub outbox_max_len: Option<i64>,
    /// An inbox unread for this long expires, and is rebuilt from
    /// PostgreSQL when its reader returns.
    #[schema(minimum = 3600, maximum = 31622400)]
    pub inbox_idle_ttl_secs: Option<i64>,
    /// Follows per user at most: a follow beyond answers 422.
    #[schema(minimum = 1, maximum = 1000000)]
    pub max_follows: Option<i64>,
    /// Pending fan-out deliveries past which publishes answer 503 with
    /// `Retry-After`.
    #[schema(minimum = 1, maximum = 100000000)]
    pub max_fanout_backlog: Option<i64>,
    /// Whether a reader's home feed shows its own posts (live at once:
    /// nothing is rebuilt).
    pub home_includes_own_posts: Option<bool>,
    /// An author's newest posts a follow copies into the follower's inbox
    /// (0 to 100,000; the rest is read through the fallback).
    #[schema(minimum = 0, maximum = 100000)]
    pub follow_copy_limit: Option<i64>,
}

impl SettingsPatch {
    /// Applies the patch and checks the result as a whole.
    pub fn apply(&self, current: &FeedSettings) -> Result<FeedSettings, String> {
        let new = FeedSettings {
            big_v_threshold: self.big_v_threshold.unwrap_or(current.big_v_threshold),
            big_v_demote_threshold: self
                .big_v_demote_threshold
                .unwrap_or(current.big_v_demote_threshold),
            active_window_secs: self
                .active_window_secs
                .unwrap_or(current.active_window_secs),
            inbox_max_len: self.inbox_max_len.unwrap_or(current.inbox_max_len),
            outbox_max_len: self.outbox_max_len.unwrap_or(current.outbox_max_len),
            inbox_idle_ttl_secs: self
                .inbox_idle_ttl_secs
                .unwrap_or(current.inbox_idle_ttl_secs),
            max_follows: self.max_follows.unwrap_or(current.max_follows),
            max_fanout_backlog: self
                .max_fanout_backlog
                .unwrap_or(current.max_fanout_backlog),
            home_includes_own_posts: self
                .home_includes_own_posts
                .unwrap_or(current.home_includes_own_posts),
            follow_copy_limit: self.follow_copy_limit.unwrap_or(current.follow_copy_limit),
        };
        if new.big_v_threshold < 1 {
            return Err("big_v_threshold must be at least 1".into());
        }
        if new.big_v_demote_threshold < 0 {
            return Err("big_v_demote_threshold must be at least 0".into());
        }
        if new.big_v_demote_threshold >= new.big_v_threshold {
            return Err(format!(
                "big_v_demote_threshold ({}) must be below big_v_threshold ({})",
                new.big_v_demote_threshold, new.big_v_threshold
            ));
        }
        if !(1..=MAX_ACTIVE_WINDOW_SECS).contains(&new.active_window_secs) {
            return Err(format!(
                "active_window_secs must be from 1 to {MAX_ACTIVE_WINDOW_SECS}"
            ));
        }
        if !(MIN_INBOX_IDLE_TTL_SECS..=MAX_INBOX_IDLE_TTL_SECS).contains(&new.inbox_idle_ttl_secs) {
            return Err(format!(
                "inbox_idle_ttl_secs must be from {MIN_INBOX_IDLE_TTL_SECS} to {MAX_INBOX_IDLE_TTL_SECS}"
            ));
        }
        if !(0..=MAX_CAP).contains(&new.follow_copy_limit) {
            return Err(format!("follow_copy_limit must be from 0 to {MAX_CAP}"));
        }
        for (name, value, max) in [
            ("inbox_max_len", new.inbox_max_len, MAX_CAP),
            ("outbox_max_len", new.outbox_max_len, MAX_CAP),
            ("max_follows", new.max_follows, MAX_FOLLOWS),
            (
                "max_fanout_backlog",
                new.max_fanout_backlog,
                MAX_FANOUT_BACKLOG,
            ),
        ] {
            if !(1..=max).contains(&value) {
                return Err(format!("{name} must be from 1 to {max}"));
            }
        }
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> FeedSettings {
        FeedSettings {
            big_v_threshold: 10_000,
            big_v_demote_threshold: 8_000,
            active_window_secs: 604_800,
            inbox_max_len: 1_000,
            outbox_max_len: 1_000,
            inbox_idle_ttl_secs: 2_592_000,
            max_follows: 10_000,
            max_fanout_backlog: 100_000,
            home_includes_own_posts: true,
            follow_copy_limit: 100,
        }
    }

    #[test]
    fn big_v_has_hysteresis() {
        let s = defaults();
        assert_eq!(big_v_change(9_999, false, &s), None);
        assert_eq!(big_v_change(10_000, false, &s), Some(BigVChange::Promote));
        assert_eq!(big_v_change(8_000, true, &s), None);
        assert_eq!(big_v_change(7_999, true, &s), Some(BigVChange::Demote));
        assert_eq!(big_v_change(9_000, false, &s), None);
    }

    #[test]
    fn settings_patches_are_validated_as_a_whole() {
        let d = defaults();
        let p = SettingsPatch {
            big_v_threshold: Some(5),
            big_v_demote_threshold: Some(3),
            ..Default::default()
        };
        assert_eq!(p.apply(&d).unwrap().big_v_threshold, 5);
        let p = SettingsPatch {
            big_v_threshold: Some(5),
            ..Default::default()
        };
        assert!(p.apply(&d).unwrap_err().contains("big_v_demote_threshold"));
        let p = SettingsPatch {
            inbox_max_len: Some(0),
            ..Default::default()
        };
        assert!(p.apply(&d).is_err());
        let p = SettingsPatch {
            active_window_secs: Some(-1),
            ..Default::default()
        };
        assert!(p.apply(&d).is_err());
        for ttl in [0, 3_599, 31_622_401] {
            let p = SettingsPatch {
                inbox_idle_ttl_secs: Some(ttl),
                ..Default::default()
            };
            assert!(p.apply(&d).unwrap_err().contains("inbox_idle_ttl_secs"));
        }
        let p = SettingsPatch {
            inbox_idle_ttl_secs: Some(3_600),
            ..Default::default()
        };
        assert_eq!(p.apply(&d).unwrap().inbox_idle_ttl_secs, 3_600);
        for (follows, backlog) in [(0, 1), (1_000_001, 1), (1, 0), (1, 100_000_001)] {
            let p = SettingsPatch {
                max_follows: Some(follows),
                max_fanout_backlog: Some(backlog),
                ..Default::default()
            };
            assert!(p.apply(&d).is_err(), "{follows} {backlog}");
        }
        assert_eq!(SettingsPatch::default().apply(&d).unwrap(), d);
    }
}
