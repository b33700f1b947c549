//! Active fans: the readers of each author seen lately (the big-V's
//! delivery goes to them), and the mark of a reader's read.

use redis::AsyncCommands;

use super::{scripts, RedisStore};
use crate::error::AppResult;
use crate::types::UserId;

/// Active fans read per Redis call.
const FANS_PER_CALL: usize = 5000;

/// Active fans, and noting a reader's read ([`RedisStore::fans`]).
#[derive(Clone, Copy)]
pub struct ActiveFans<'a>(pub(super) &'a RedisStore);

impl ActiveFans<'_> {
    /// Notes a read by `reader`, at most once per `interval_secs` (a marker
    /// key rate-limits it): its inbox and copy of whom it follows get the
    /// idle TTL again (scripts.rs, clause 11), and it is recorded as an
    /// active fan of `authors`. An active-fans set keeps only the fans of
    /// the last `active_window_secs` and expires that long after its last
    /// fan (an author pulled only while a delivery was in flight leaves
    /// nothing behind). Returns whether it did.
    pub async fn touch_reader(
        self,
        reader: UserId,
        authors: &[UserId],
        now_ms: i64,
        interval_secs: u64,
        (idle_ttl_secs, active_window_secs): (u64, u64),
    ) -> AppResult<bool> {
        let mark = self.0.keys.active_mark(reader);
        let inbox = self.0.keys.inbox(reader);
        let following = self.0.keys.following(reader);
        let followees = self.0.keys.followees(reader);
        let touched: i64 = self
            .0
            .with_conn(|mut c| async move {
                scripts::TOUCH
                    .key(&mark)
                    .key(&inbox)
                    .key(&following)
                    .key(&followees)
                    .arg(now_ms)
                    .arg(interval_secs.max(1))
                    .arg(idle_ttl_secs)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        if touched == 0 {
            return Ok(false);
        }
        let fans: Vec<String> = authors
            .iter()
            .map(|a| self.0.keys.active_fans(*a))
            .collect();
        let window = active_window_secs.max(1);
        let stale = format!("({}", now_ms - window as i64 * 1000);
        self.0
            .query_per_slot(&fans, |pipe, key| {
                pipe.zadd(key, reader, now_ms)
                    .zrembyscore(key, "-inf", &stale)
                    .expire(key, window as i64);
            })
            .await?;
        Ok(true)
    }

    /// Active fans of `author` seen at or after `since_ms`, ascending by id;
    /// older entries are dropped first. The rest is read by rank in pages of
    /// `FANS_PER_CALL`: one reply of a big-V's hundred thousand fans held
    /// Redis for 15 to 20 ms, and every request with it; a page takes well
    /// under one. (A fan that leaves mid-read, by unfollowing, may shift
    /// another past a page boundary: that one misses a push, not the post,
    /// which every follower of a big-V also pulls from its outbox.)
    pub async fn active_fans(self, author: UserId, since_ms: i64) -> AppResult<Vec<UserId>> {
        let key = self.0.keys.active_fans(author);
        let key = &key;
        self.0
            .with_conn(|mut c| async move {
                let _: i64 = c.zrembyscore(key, "-inf", format!("({since_ms}")).await?;
                Ok(())
            })
            .await?;
        let mut fans = Vec::new();
        loop {
            let start = fans.len() as isize;
            let page: Vec<UserId> = self
                .0
                .with_conn(|mut c| async move {
                    c.zrange(key, start, start + FANS_PER_CALL as isize - 1)
                        .await
                })
                .await?;
            let last = page.len() < FANS_PER_CALL;
            fans.extend(page);
            if last {
                break;
            }
        }
        fans.sort_unstable();
        fans.dedup();
        Ok(fans)
    }

    pub async fn forget_active_fan(self, author: UserId, reader: UserId) -> AppResult<()> {
        let key = self.0.keys.active_fans(author);
        self.0
            .with_conn(|mut c| async move {
                let _: i64 = c.zrem(&key, reader).await?;
                Ok(())
            })
            .await
    }
}
