//! Where users stopped reading their timelines (markers): one row per
//! user and timeline, its version raised by each change.

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Text};
use diesel_async::{AsyncConnection, RunQueryDsl};

use super::PgStore;
use crate::error::{AppError, AppResult};
use crate::types::UserId;

/// Markers ([`PgStore::markers`]).
#[derive(Clone, Copy)]
pub struct MarkerRecords<'a>(pub(super) &'a PgStore);

/// A timeline's marker.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct MarkerRow {
    #[diesel(sql_type = Text)]
    pub timeline: String,
    #[diesel(sql_type = Text)]
    pub last_read_id: String,
    #[diesel(sql_type = BigInt)]
    pub version: i64,
    #[diesel(sql_type = BigInt)]
    pub updated_at_ms: i64,
}

/// A marker to set: its timeline, the id, and the version it must be at
/// (if the caller names one).
pub type MarkerChange<'a> = (&'a str, &'a str, Option<i64>);

impl MarkerRecords<'_> {
    /// `user`'s markers of `timelines`, those that exist.
    pub async fn markers(self, user: UserId, timelines: &[&str]) -> AppResult<Vec<MarkerRow>> {
        let mut conn = self.0.conn().await?;
        Ok(diesel::sql_query(
            "SELECT timeline, last_read_id, version, updated_at_ms FROM markers \
             WHERE user_id = $1 AND timeline = ANY($2) ORDER BY timeline",
        )
        .bind::<BigInt, _>(user)
        .bind::<Array<Text>, _>(timelines)
        .load(&mut conn)
        .await?)
    }

    /// Sets `user`'s markers, all or none: each to its id (version 0 when
    /// new, one more at each change; the same id again changes nothing).
    /// If one names a version its marker is not at, nothing is written and
    /// that marker is the error (`Err`). Two devices setting markers at
    /// once both count, one after the other.
    pub async fn set(
        self,
        user: UserId,
        changes: &[MarkerChange<'_>],
        now_ms: i64,
    ) -> AppResult<Result<Vec<MarkerRow>, MarkerRow>> {
        let mut conn = self.0.conn().await?;
        let timelines: Vec<&str> = changes.iter().map(|c| c.0).collect();
        conn.transaction::<_, AppError, _>(async move |conn| {
            let now: Vec<MarkerRow> = diesel::sql_query(
                "SELECT timeline, last_read_id, version, updated_at_ms FROM markers \
                 WHERE user_id = $1 AND timeline = ANY($2) FOR UPDATE",
            )
            .bind::<BigInt, _>(user)
            .bind::<Array<Text>, _>(&timelines)
            .load(conn)
            .await?;
            for (timeline, _, version) in changes {
                let held = now.iter().find(|m| m.timeline == *timeline);
                if let (Some(held), Some(v)) = (held, version) {
                    if held.version != *v {
                        return Ok(Err(held.clone()));
                    }
                }
            }
            let mut set = Vec::with_capacity(changes.len());
            for (timeline, last_read_id, _) in changes {
                let row: MarkerRow = diesel::sql_query(
                    "INSERT INTO markers AS m \
                        (user_id, timeline, last_read_id, version, updated_at_ms) \
                     VALUES ($1, $2, $3, 0, $4) \
                     ON CONFLICT (user_id, timeline) DO UPDATE \
                        SET last_read_id = EXCLUDED.last_read_id, \
                            version = m.version + (m.last_read_id <> EXCLUDED.last_read_id)::int, \
                            updated_at_ms = CASE WHEN m.last_read_id <> EXCLUDED.last_read_id \
                                THEN EXCLUDED.updated_at_ms ELSE m.updated_at_ms END \
                     RETURNING m.timeline, m.last_read_id, m.version, m.updated_at_ms",
                )
                .bind::<BigInt, _>(user)
                .bind::<Text, _>(*timeline)
                .bind::<Text, _>(*last_read_id)
                .bind::<BigInt, _>(now_ms)
                .get_result(conn)
                .await?;
                set.push(row);
            }
            Ok(Ok(set))
        })
        .await
    }
}
