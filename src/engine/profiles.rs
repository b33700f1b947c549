//! What clients show of people: profiles with their counts, how the caller
//! stands to others, and follow lists. Read from PostgreSQL, as records
//! are; the feeds are not involved.

use super::Engine;
use crate::error::{AppError, AppResult};
use crate::store::pg::{AccountRow, FollowList, IdRange, RelationshipRow};
use crate::types::{PostId, UserId};

/// Profiles one call reads at the most.
pub const MAX_PROFILES: usize = 100;

/// Accounts as clients see them: profiles, relationships, follow lists ([`Engine::profiles`]).
#[derive(Clone, Copy)]
pub struct Profiles<'a>(pub(crate) &'a Engine);

impl Profiles<'_> {
    /// The active accounts among `ids`, in the order of `ids` (the others
    /// left out).
    pub async fn profiles(self, ids: &[UserId]) -> AppResult<Vec<AccountRow>> {
        let mut wanted: Vec<UserId> = ids.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let rows = self.0.inner.pg.profiles().accounts(&wanted).await?;
        Ok(ids
            .iter()
            .filter_map(|id| rows.iter().find(|r| r.id == *id).cloned())
            .collect())
    }

    /// One active account's profile (404 otherwise).
    pub async fn profile(self, id: UserId) -> AppResult<AccountRow> {
        self.profiles(&[id])
            .await?
            .pop()
            .ok_or_else(|| AppError::NotFound(format!("user {id} does not exist")))
    }

    /// The active account named `username` (404 otherwise).
    pub async fn profile_named(self, username: &str) -> AppResult<AccountRow> {
        let id = self
            .0
            .inner
            .pg
            .profiles()
            .account_id_by_name(username)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("no account is named {username:?}")))?;
        self.profile(id).await
    }

    /// Up to `limit` active accounts whose username starts with `prefix`
    /// (the exact match first, then in the usernames' order), past
    /// `offset`; with `followed_by`, only accounts that user follows. A
    /// prefix no username could start with finds none.
    pub async fn search(
        self,
        prefix: &str,
        followed_by: Option<UserId>,
        offset: u32,
        limit: u32,
    ) -> AppResult<Vec<AccountRow>> {
        if crate::domain::Username::parse(prefix).is_err() {
            return Ok(Vec::new());
        }
        let ids = self
            .0
            .inner
            .pg
            .profiles()
            .accounts_named_from(prefix, followed_by, offset.into(), limit.into())
            .await?;
        self.profiles(&ids).await
    }

    /// How `of` stands to each of `others` (at most [`MAX_PROFILES`]).
    pub async fn relationships(
        self,
        of: UserId,
        others: &[UserId],
    ) -> AppResult<Vec<RelationshipRow>> {
        self.0.inner.pg.profiles().relationships(of, others).await
    }

    /// Up to `limit` of `owner`'s followers or followings within `range`
    /// (highest id first), as profiles.
    pub async fn follow_list(
        self,
        owner: UserId,
        list: FollowList,
        range: IdRange,
        limit: u32,
    ) -> AppResult<Vec<AccountRow>> {
        self.0.user(owner).await?;
        let ids = self
            .0
            .inner
            .pg
            .profiles()
            .follow_list(owner, list, range, i64::from(limit))
            .await?;
        self.profiles(&ids).await
    }

    /// A post's time, deleted or not (none once purged).
    pub async fn post_time(self, id: PostId) -> AppResult<Option<i64>> {
        self.0.inner.pg.profiles().post_time(id).await
    }
}
