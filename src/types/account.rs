//! Accounts, and the long work users start and watch (tasks).

use std::str::FromStr;

use crate::types::{TaskId, UserId};

/// A user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: UserId,
    pub username: String,
    pub follower_count: i64,
    pub following_count: i64,
    /// Whether this author's posts are currently pulled rather than pushed.
    pub big_v: bool,
    pub status: AccountStatus,
}

/// Where an account stands (the `users.status` column: its SQL mapping is
/// the store's).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    diesel::expression::AsExpression,
    diesel::deserialize::FromSqlRow,
)]
#[diesel(sql_type = diesel::sql_types::Text)]
pub enum AccountStatus {
    Active,
    /// Suspended by an admin: its posts are in no feed.
    Suspended,
    /// Being deleted, or deleted: never shown.
    Deleted,
}

/// Work a user or an admin started and can watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub id: TaskId,
    pub kind: TaskKind,
    /// The account deleted, or the importer.
    pub user_id: UserId,
    pub state: TaskState,
    /// Units of work in all: follows, posts (a deletion); ids (an import).
    pub total: i64,
    /// Units done so far.
    pub done: i64,
    /// Of an import's ids, those not followed.
    pub skipped: i64,
    pub created_at_ms: i64,
    pub finished_at_ms: Option<i64>,
}

/// What a task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    DeleteAccount,
    ImportFollows,
}

/// How far a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Pending,
    Running,
    Done,
    Failed,
}

/// Names written as text (in a column, and in the API), read back exactly.
macro_rules! named {
    ($what:literal, $ty:ident { $($variant:ident = $name:literal),+ $(,)? }) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl FromStr for $ty {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| format!(concat!("unknown ", $what, " {:?}"), s))
            }
        }
    };
}

named!("account status", AccountStatus {
    Active = "active",
    Suspended = "suspended",
    Deleted = "deleted",
});
named!("task kind", TaskKind {
    DeleteAccount = "delete_account",
    ImportFollows = "import_follows",
});
named!("task state", TaskState {
    Pending = "pending",
    Running = "running",
    Done = "done",
    Failed = "failed",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_as_written_and_unknown_ones_are_errors() {
        for s in AccountStatus::ALL {
            assert_eq!(s.as_str().parse(), Ok(*s));
        }
        for k in TaskKind::ALL {
            assert_eq!(k.as_str().parse(), Ok(*k));
        }
        for s in TaskState::ALL {
            assert_eq!(s.as_str().parse(), Ok(*s));
        }
        assert_eq!(
            "Active".parse::<AccountStatus>(),
            Err("unknown account status \"Active\"".to_string())
        );
        assert!("paused".parse::<TaskState>().is_err());
    }
}
