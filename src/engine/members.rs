//! Whether an account exists, as this instance remembers it. A token
//! outlives its account: every route refuses a deleted account's, and asks
//! here on each request. Ids are never reused, so an account known gone
//! stays gone; one known here is asked of PostgreSQL again after
//! [`HERE_FOR`]. The instance that deletes an account, and every instance
//! its hint reaches, forget it at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Engine;
use crate::error::AppError;
use crate::types::{AccountStatus, UserId};

/// How long an account seen existing is taken to exist.
pub const HERE_FOR: Duration = Duration::from_secs(10);

/// Accounts remembered at most (past it, the memory starts again).
const KEPT: usize = 100_000;

#[derive(Debug, Clone, Copy)]
enum Known {
    Here(Instant),
    Gone,
}

#[derive(Debug, Default)]
pub(super) struct Members {
    known: Mutex<HashMap<UserId, Known>>,
}

impl Members {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<UserId, Known>) -> R) -> R {
        let mut known = match self.known.lock() {
            Ok(k) => k,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut known)
    }

    /// What is remembered of `id`, if it is still true.
    fn recall(&self, id: UserId) -> Option<bool> {
        self.with(|known| match known.get(&id) {
            Some(Known::Gone) => Some(false),
            Some(Known::Here(at)) if at.elapsed() < HERE_FOR => Some(true),
            _ => None,
        })
    }

    fn note(&self, id: UserId, here: bool) {
        self.with(|known| {
            if known.len() >= KEPT {
                known.clear();
            }
            let fact = if here {
                Known::Here(Instant::now())
            } else {
                Known::Gone
            };
            known.insert(id, fact);
        });
    }
}

impl Engine {
    /// Whether `id` names an account that is not deleted. While PostgreSQL
    /// cannot answer, an account not known to be gone is taken to exist
    /// (warm pages go on without PostgreSQL).
    pub async fn account_exists(&self, id: UserId) -> bool {
        if let Some(here) = self.inner.members.recall(id) {
            return here;
        }
        match self.inner.pg.users().user(id).await {
            Ok(user) => {
                let here = user.is_some_and(|u| u.status != AccountStatus::Deleted);
                self.inner.members.note(id, here);
                here
            }
            Err(e @ (AppError::Unavailable { .. } | AppError::TimedOut { .. })) => {
                tracing::debug!(error = %e.chain(), "an account taken to exist: PostgreSQL is away");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e.chain(), "could not tell whether an account exists");
                true
            }
        }
    }

    /// `id`'s account is deleted: its tokens are refused from now on.
    pub fn account_gone(&self, id: UserId) {
        self.inner.members.note(id, false);
    }
}
