//! Users' lists: named groups of accounts one follows, each read as a
//! timeline of its members' posts. A list's page is the home's algorithm
//! over other sources: the members' outboxes, all pulled, merged, with
//! PostgreSQL below their floors and the same cursor. Its members are
//! read from the records on each page, so an account added brings its
//! past posts at once and one taken out leaves at once.
//!
//! An exclusive list's members leave its owner's home while they are in
//! it (as a mute does: the inbox keeps their posts), and come back at once
//! when they leave it or it stops being exclusive.

use super::filters::{bad, text};
use super::{now_ms, Engine, Page};
use crate::error::{AppError, AppResult};
use crate::store::pg::{HomeChanges, ListFields, ListRow, MembersRefused};
use crate::store::redis::hints::Signal;
use crate::types::{ListId, PageRequest, Scope, UserId};

/// Lists a user keeps at most.
pub const MAX_LISTS: i64 = 50;

/// Accounts a list holds at most (a page of it reads each one's outbox).
pub const MAX_MEMBERS: i64 = 250;

/// A title's characters at most.
pub const MAX_TITLE_CHARS: usize = 256;

/// Members read in one page of them at most.
pub const MAX_MEMBERS_PAGE: i64 = 80;

/// The replies policies a list may have (kept and given back: posts here
/// are not replies).
pub const REPLIES_POLICIES: [&str; 3] = ["followed", "list", "none"];

/// Users' lists ([`Engine::lists`]).
#[derive(Clone, Copy)]
pub struct Lists<'a>(pub(crate) &'a Engine);

/// A list's fields as a client sends them.
#[derive(Debug, Clone, Default)]
pub struct ListInput {
    pub title: Option<String>,
    pub replies_policy: Option<String>,
    pub exclusive: Option<bool>,
}

impl ListInput {
    /// Its fields, checked (400 for one out of bounds).
    fn fields(&self) -> AppResult<ListFields> {
        if let Some(title) = &self.title {
            text("title", title, MAX_TITLE_CHARS)?;
        }
        if let Some(p) = &self.replies_policy {
            if !REPLIES_POLICIES.contains(&p.as_str()) {
                return Err(bad(&format!(
                    "replies_policy must be followed, list or none, got {p:?}"
                )));
            }
        }
        Ok(ListFields {
            title: self.title.clone(),
            replies_policy: self.replies_policy.clone(),
            exclusive: self.exclusive,
        })
    }
}

fn missing(list: ListId) -> AppError {
    AppError::NotFound(format!("list {list} does not exist"))
}

impl Lists<'_> {
    /// `owner`'s lists, oldest first.
    pub async fn all(self, owner: UserId) -> AppResult<Vec<ListRow>> {
        self.0.pg().lists().all(owner).await
    }

    /// One of `owner`'s lists (404 without it).
    pub async fn one(self, owner: UserId, list: ListId) -> AppResult<ListRow> {
        let found = self.0.pg().lists().one(owner, list).await?;
        found.ok_or_else(|| missing(list))
    }

    /// `owner`'s lists that hold `member`.
    pub async fn holding(self, owner: UserId, member: UserId) -> AppResult<Vec<ListRow>> {
        self.0.pg().lists().holding(owner, member).await
    }

    /// A new list (a title needed); 422 past [`MAX_LISTS`].
    pub async fn create(self, owner: UserId, input: &ListInput) -> AppResult<ListRow> {
        if input.title.is_none() {
            return Err(bad("title is required"));
        }
        let fields = input.fields()?;
        self.0.accounts().active_user(owner).await?;
        let created = self
            .0
            .pg()
            .lists()
            .create(owner, &fields, MAX_LISTS, now_ms());
        created.await?.ok_or_else(|| {
            AppError::Unprocessable(format!("a user keeps at most {MAX_LISTS} lists"))
        })
    }

    /// Changes a list; returns once the home shows what its exclusivity
    /// now hides or shows.
    pub async fn update(
        self,
        owner: UserId,
        list: ListId,
        input: &ListInput,
    ) -> AppResult<ListRow> {
        let fields = input.fields()?;
        let updated = self.0.pg().lists().update(owner, list, &fields, now_ms());
        let (row, changes) = updated.await?.ok_or_else(|| missing(list))?;
        self.home_changed(owner, changes).await?;
        Ok(row)
    }

    /// Removes a list (an exclusive one's members come back home at once).
    pub async fn delete(self, owner: UserId, list: ListId) -> AppResult<()> {
        let deleted = self.0.pg().lists().delete(owner, list, now_ms());
        let changes = deleted.await?.ok_or_else(|| missing(list))?;
        self.home_changed(owner, changes).await
    }

    /// Members of a list by account id, up to `limit` (at most
    /// [`MAX_MEMBERS_PAGE`]; 0: all of them) between `above` and `below`,
    /// the lowest first if `lowest`.
    pub async fn members(
        self,
        owner: UserId,
        list: ListId,
        range: (Option<i64>, Option<i64>),
        lowest: bool,
        limit: i64,
    ) -> AppResult<Vec<UserId>> {
        let limit = match limit {
            0 => MAX_MEMBERS,
            n => n.clamp(1, MAX_MEMBERS_PAGE),
        };
        let members = self
            .0
            .pg()
            .lists()
            .members(owner, list, range, lowest, limit);
        members.await?.ok_or_else(|| missing(list))
    }

    /// Adds accounts `owner` follows to a list (422 for one it does not,
    /// or past [`MAX_MEMBERS`]; then nothing changes). Returns once the
    /// list's pages show them, and, for an exclusive list, once the home
    /// no longer does.
    pub async fn add(self, owner: UserId, list: ListId, accounts: &[UserId]) -> AppResult<()> {
        check_accounts(accounts)?;
        let added = self
            .0
            .pg()
            .lists()
            .add(owner, list, accounts, MAX_MEMBERS, now_ms());
        let changes = match added.await? {
            Ok(changes) => changes,
            Err(MembersRefused::Missing) => return Err(missing(list)),
            Err(MembersRefused::NotFollowed(strangers)) => {
                return Err(AppError::Unprocessable(format!(
                    "a list holds only accounts its owner follows; not followed: {}",
                    strangers
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        };
        self.home_changed(owner, changes).await
    }

    /// Takes accounts out of a list (those not in it are let be).
    pub async fn remove(self, owner: UserId, list: ListId, accounts: &[UserId]) -> AppResult<()> {
        check_accounts(accounts)?;
        let removed = self.0.pg().lists().remove(owner, list, accounts, now_ms());
        let changes = removed.await?.ok_or_else(|| missing(list))?;
        self.home_changed(owner, changes).await
    }

    /// A page of a list's timeline, newest first, with the home's cursor.
    pub async fn page(self, owner: UserId, list: ListId, req: PageRequest) -> AppResult<Page> {
        self.0
            .reads()
            .list_page(Scope::List { owner, list }, req)
            .await
    }

    /// Applies what a change of a list did to the owner's home, and tells
    /// the owner's list streams (on every instance) to read their authors
    /// again.
    async fn home_changed(self, owner: UserId, changes: HomeChanges) -> AppResult<()> {
        self.0.hint(Signal::ListsChanged { user: owner }).await;
        if changes.is_empty() {
            return Ok(());
        }
        self.0.relations().home_changed(owner, changes).await
    }
}

/// One change names 1 to [`MAX_MEMBERS`] accounts.
fn check_accounts(accounts: &[UserId]) -> AppResult<()> {
    if accounts.is_empty() || accounts.len() as i64 > MAX_MEMBERS {
        return Err(bad(&format!(
            "account_ids must name 1 to {MAX_MEMBERS} accounts, got {}",
            accounts.len()
        )));
    }
    Ok(())
}
