//! What users are told of (notifications): a new follower, written with
//! the follow in PostgreSQL, the newest
//! [`crate::store::pg::NOTIFICATIONS_KEPT`] per user. Read with the
//! accounts they are from, unread counted from the notifications marker.

use std::collections::HashMap;

use super::markers::Timeline;
use super::Engine;
use crate::error::{AppError, AppResult};
use crate::store::pg::{AccountRow, IdRange, NotificationFilter, NotificationRow};
use crate::types::UserId;

/// The kinds of notification there are.
pub const KINDS: [&str; 1] = ["follow"];

/// A notification and the account it is from.
pub type Told = (NotificationRow, AccountRow);

/// Users' notifications ([`Engine::notifications`]).
#[derive(Clone, Copy)]
pub struct Notifications<'a>(pub(crate) &'a Engine);

impl Notifications<'_> {
    /// Up to `limit` of `user`'s notifications within `range` that pass
    /// `filter`, newest first, each with its account.
    pub async fn page(
        self,
        user: UserId,
        range: IdRange,
        filter: &NotificationFilter,
        limit: u32,
    ) -> AppResult<Vec<Told>> {
        self.0.accounts().active_user(user).await?;
        let rows = self
            .0
            .inner
            .pg
            .notifications()
            .page(user, range, filter, limit.into())
            .await?;
        self.with_accounts(rows).await
    }

    /// One of `user`'s notifications (404 if it has none of that id).
    pub async fn one(self, user: UserId, id: i64) -> AppResult<Told> {
        self.0.accounts().active_user(user).await?;
        let row = self.0.inner.pg.notifications().one(user, id).await?;
        let row =
            row.ok_or_else(|| AppError::NotFound(format!("notification {id} does not exist")))?;
        self.with_accounts(vec![row])
            .await?
            .pop()
            .ok_or_else(|| AppError::NotFound(format!("notification {id} does not exist")))
    }

    /// How many of `user`'s notifications that pass `filter` are newer
    /// than its notifications marker (all, without one), up to `limit`.
    pub async fn unread(
        self,
        user: UserId,
        filter: &NotificationFilter,
        limit: u32,
    ) -> AppResult<i64> {
        let marker = self
            .0
            .markers()
            .get(user, &[Timeline::Notifications])
            .await?;
        let after = marker
            .first()
            .and_then(|m| m.last_read_id.parse::<i64>().ok())
            .unwrap_or(0);
        self.0
            .inner
            .pg
            .notifications()
            .count_above(user, after, filter, limit.into())
            .await
    }

    /// Removes one of `user`'s notifications (404 if it has none of that
    /// id), or all of them (`None`).
    pub async fn dismiss(self, user: UserId, id: Option<i64>) -> AppResult<()> {
        self.0.accounts().active_user(user).await?;
        let gone = self.0.inner.pg.notifications().dismiss(user, id).await?;
        match id {
            Some(id) if gone == 0 => Err(AppError::NotFound(format!(
                "notification {id} does not exist"
            ))),
            _ => Ok(()),
        }
    }

    async fn with_accounts(self, rows: Vec<NotificationRow>) -> AppResult<Vec<Told>> {
        let ids: Vec<UserId> = rows.iter().map(|r| r.account_id).collect();
        let accounts: HashMap<UserId, AccountRow> = self
            .0
            .profiles()
            .profiles(&ids)
            .await?
            .into_iter()
            .map(|a| (a.id, a))
            .collect();
        Ok(rows
            .into_iter()
            .filter_map(|r| accounts.get(&r.account_id).cloned().map(|a| (r, a)))
            .collect())
    }
}
