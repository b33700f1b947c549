//! What users are told of (notifications): a new follower, written with
//! the follow in PostgreSQL, the newest
//! [`crate::store::pg::NOTIFICATIONS_KEPT`] per user. Read with the
//! accounts they are from, one by one or in groups, unread counted from
//! the notifications marker.

use std::collections::{HashMap, HashSet};

use super::markers::Timeline;
use super::Engine;
use crate::error::{AppError, AppResult};
use crate::store::pg::{AccountRow, IdRange, NotificationFilter, NotificationRow};
use crate::types::UserId;

/// The kinds of notification there are.
pub const KINDS: [&str; 1] = ["follow"];

/// A notification and the account it is from.
pub type Told = (NotificationRow, AccountRow);

/// The key of a notification shown on its own (not in a group).
const UNGROUPED: &str = "ungrouped-";

/// Accounts a group names at most (the newest first).
pub const SAMPLE_ACCOUNTS: usize = 8;

/// Notifications read per query while a page gathers its groups.
const GATHER_BATCH: i64 = 100;

/// Notifications that share a group key, as a page (or the group's own
/// read) holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub key: String,
    pub kind: String,
    /// How many of its notifications the page holds.
    pub count: usize,
    /// The newest of them.
    pub newest: NotificationRow,
    /// The id of the oldest of them.
    pub oldest_id: i64,
    /// The accounts of its newest notifications, each once, at most
    /// [`SAMPLE_ACCOUNTS`].
    pub sample: Vec<UserId>,
}

/// A page of groups: a run of consecutive notifications (by id) in which
/// at most the page's limit of groups appear, newest group first.
#[derive(Debug, Clone, Default)]
pub struct GroupedPage {
    pub groups: Vec<Group>,
    /// The accounts the groups name.
    pub accounts: Vec<AccountRow>,
    /// The highest and lowest notification id the page covers.
    pub ends: Option<(i64, i64)>,
}

/// The key a notification is shown under: its group's when its kind is
/// grouped, else one of its own.
fn key_of(row: &NotificationRow, grouped: bool) -> String {
    if grouped {
        row.group_key.clone()
    } else {
        format!("{UNGROUPED}{}", row.id)
    }
}

/// `rows` (in any order) in their groups, the group with the newest
/// notification first.
pub fn groups_of(rows: &[NotificationRow], grouped: bool) -> Vec<Group> {
    let mut newest_first: Vec<&NotificationRow> = rows.iter().collect();
    newest_first.sort_by_key(|r| std::cmp::Reverse(r.id));
    let mut groups: Vec<Group> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for row in newest_first {
        let key = key_of(row, grouped);
        let i = *at.entry(key.clone()).or_insert_with(|| {
            groups.push(Group {
                key,
                kind: row.kind.clone(),
                count: 0,
                newest: row.clone(),
                oldest_id: row.id,
                sample: Vec::new(),
            });
            groups.len() - 1
        });
        let group = &mut groups[i];
        group.count += 1;
        group.oldest_id = row.id;
        if group.sample.len() < SAMPLE_ACCOUNTS && !group.sample.contains(&row.account_id) {
            group.sample.push(row.account_id);
        }
    }
    groups
}

/// Users' notifications ([`Engine::notifications`]).
#[derive(Clone, Copy)]
pub struct Notifications<'a>(pub(crate) &'a Engine);

/// A group key as a client sends it back.
enum GroupKey<'k> {
    /// `ungrouped-<id>`: one notification.
    One(i64),
    /// `follow-<hour>`: a group that notifications share.
    Shared(&'k str),
}

impl<'k> GroupKey<'k> {
    /// The key, if it is one this service gives (404 otherwise: no group
    /// has it).
    fn parse(key: &'k str) -> AppResult<Self> {
        let number = |digits: &str| {
            let digits_only = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            digits_only.then(|| digits.parse::<i64>().ok()).flatten()
        };
        if let Some(id) = key.strip_prefix(UNGROUPED).and_then(number) {
            return Ok(GroupKey::One(id));
        }
        if key.strip_prefix("follow-").and_then(number).is_some() {
            return Ok(GroupKey::Shared(key));
        }
        Err(missing_group(key))
    }
}

fn missing_group(key: &str) -> AppError {
    AppError::NotFound(format!("notification group {key:?} does not exist"))
}

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
    /// than its notifications marker (all, without one), up to `limit`;
    /// with `grouped`, how many groups they make.
    pub async fn unread(
        self,
        user: UserId,
        filter: &NotificationFilter,
        grouped: bool,
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
            .count_above(user, after, filter, grouped, limit.into())
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

    /// Up to `limit` groups of `user`'s notifications within `range` that
    /// pass `filter`: the longest run of consecutive notifications, from
    /// the top of the range (or, with `range.closest`, from its bottom),
    /// in which no more groups appear. Without `grouped`, each
    /// notification is a group of its own.
    pub async fn grouped_page(
        self,
        user: UserId,
        range: IdRange,
        filter: &NotificationFilter,
        grouped: bool,
        limit: u32,
    ) -> AppResult<GroupedPage> {
        self.0.accounts().active_user(user).await?;
        let records = self.0.inner.pg.notifications();
        let mut run: Vec<NotificationRow> = Vec::new();
        let mut keys: HashSet<String> = HashSet::new();
        let mut batch_range = range;
        'gather: loop {
            let batch = records
                .page(user, batch_range, filter, GATHER_BATCH)
                .await?;
            let ended = (batch.len() as i64) < GATHER_BATCH;
            // (Pages come newest first; gathered up from the bottom, the
            // run grows oldest first.)
            let in_order: Vec<NotificationRow> = if range.closest {
                batch.into_iter().rev().collect()
            } else {
                batch
            };
            let mut reached = None;
            for row in in_order {
                let key = key_of(&row, grouped);
                if !keys.contains(&key) {
                    if keys.len() == limit as usize {
                        break 'gather;
                    }
                    keys.insert(key);
                }
                reached = Some(row.id);
                run.push(row);
            }
            match reached {
                Some(id) if !ended => {
                    if range.closest {
                        batch_range.above = Some(id);
                    } else {
                        batch_range.below = Some(id);
                    }
                }
                _ => break,
            }
        }
        let groups = groups_of(&run, grouped);
        let ends = run
            .iter()
            .map(|r| r.id)
            .max()
            .zip(run.iter().map(|r| r.id).min());
        let named: Vec<UserId> = groups.iter().flat_map(|g| g.sample.clone()).collect();
        let accounts = self.0.profiles().profiles(&named).await?;
        Ok(GroupedPage {
            groups,
            accounts,
            ends,
        })
    }

    /// One of `user`'s groups, all of it, newest first (404 if it has no
    /// such group): its notifications each with its account.
    pub async fn group(self, user: UserId, key: &str) -> AppResult<Vec<Told>> {
        self.0.accounts().active_user(user).await?;
        let records = self.0.inner.pg.notifications();
        let rows = match GroupKey::parse(key)? {
            GroupKey::One(id) => records.one(user, id).await?.into_iter().collect(),
            GroupKey::Shared(key) => records.group(user, key).await?,
        };
        let told = self.with_accounts(rows).await?;
        if told.is_empty() {
            return Err(missing_group(key));
        }
        Ok(told)
    }

    /// Removes every notification of one of `user`'s groups (404 if it
    /// has no such group).
    pub async fn dismiss_group(self, user: UserId, key: &str) -> AppResult<()> {
        let shared = match GroupKey::parse(key)? {
            GroupKey::One(id) => return self.dismiss(user, Some(id)).await,
            GroupKey::Shared(key) => key,
        };
        self.0.accounts().active_user(user).await?;
        let records = self.0.inner.pg.notifications();
        if records.dismiss_group(user, shared).await? == 0 {
            return Err(missing_group(key));
        }
        Ok(())
    }

    /// The id of `user`'s newest notification (0 without one): where a
    /// live stream's notifications start.
    pub async fn newest_id(self, user: UserId) -> AppResult<i64> {
        self.0.inner.pg.notifications().newest_id(user).await
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, account: i64, group: &str) -> NotificationRow {
        NotificationRow {
            id,
            kind: "follow".into(),
            account_id: UserId(account),
            created_at_ms: id * 1000,
            group_key: group.into(),
        }
    }

    #[test]
    fn groups_gather_their_notifications_newest_group_first() {
        // Ten followers in the older group (one of them twice), two in the
        // newer one; given in no order.
        let mut rows = vec![row(20, 7, "follow-2"), row(15, 8, "follow-2")];
        rows.extend((1..=10).map(|i| row(i, 100 + i, "follow-1")));
        rows.push(row(11, 101, "follow-1"));
        rows.reverse();
        let groups = groups_of(&rows, true);
        assert_eq!(groups.len(), 2);
        let (newer, older) = (&groups[0], &groups[1]);
        assert_eq!((newer.key.as_str(), newer.count), ("follow-2", 2));
        assert_eq!((newer.newest.id, newer.oldest_id), (20, 15));
        assert_eq!(newer.sample, vec![UserId(7), UserId(8)]);
        assert_eq!((older.count, older.newest.id, older.oldest_id), (11, 11, 1));
        let sample: Vec<i64> = older.sample.iter().map(|a| a.0).collect();
        assert_eq!(
            sample,
            vec![101, 110, 109, 108, 107, 106, 105, 104],
            "the newest accounts, each once, at most eight"
        );
    }

    #[test]
    fn ungrouped_each_notification_is_its_own_group() {
        let rows = vec![row(3, 1, "follow-1"), row(5, 2, "follow-1")];
        let keys: Vec<String> = groups_of(&rows, false).into_iter().map(|g| g.key).collect();
        assert_eq!(keys, vec!["ungrouped-5", "ungrouped-3"]);
    }
}
