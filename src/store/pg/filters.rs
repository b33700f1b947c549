//! Keyword filters: a user's filters, each with its keywords. Every change
//! to one filter is one transaction, its caps checked inside it.

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::PgStore;
use crate::error::{AppError, AppResult};
use crate::types::UserId;

/// Filters ([`PgStore::filters`]).
#[derive(Clone, Copy)]
pub struct FilterRecords<'a>(pub(super) &'a PgStore);

/// A filter, without its keywords.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct FilterRow {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = Text)]
    pub title: String,
    /// Where it applies: `home`, `notifications`, `public`, `thread`,
    /// `account`.
    #[diesel(sql_type = Array<Text>)]
    pub contexts: Vec<String>,
    /// `warn`, `hide` or `blur`.
    #[diesel(sql_type = Text)]
    pub action: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub expires_at_ms: Option<i64>,
}

/// One of a filter's keywords.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct KeywordRow {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub filter_id: i64,
    #[diesel(sql_type = Text)]
    pub keyword: String,
    #[diesel(sql_type = Bool)]
    pub whole_word: bool,
}

/// A filter with its keywords (oldest first).
pub type FilterWithKeywords = (FilterRow, Vec<KeywordRow>);

/// What a change sets of a filter (`None`: left as it is).
#[derive(Debug, Clone, Default)]
pub struct FilterFields {
    pub title: Option<String>,
    pub contexts: Option<Vec<String>>,
    pub action: Option<String>,
    /// `Some(None)`: it never expires.
    pub expires_at_ms: Option<Option<i64>>,
}

/// A change to a filter's keywords.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeywordOp {
    Add {
        keyword: String,
        whole_word: bool,
    },
    /// The keyword of that id, if the filter has it (else nothing).
    Change {
        id: i64,
        keyword: Option<String>,
        whole_word: Option<bool>,
    },
    Remove(i64),
}

/// Why a change was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The user has no filter of that id.
    Missing,
    /// The user has the most filters allowed, or the filter the most
    /// keywords.
    Full,
}

const FILTER_COLUMNS: &str = "f.id, f.title, f.contexts, f.action, f.expires_at_ms";

impl FilterRecords<'_> {
    /// `user`'s filters, oldest first, each with its keywords.
    pub async fn all(self, user: UserId) -> AppResult<Vec<FilterWithKeywords>> {
        let mut conn = self.0.conn().await?;
        let filters: Vec<FilterRow> = diesel::sql_query(format!(
            "SELECT {FILTER_COLUMNS} FROM filters f WHERE f.user_id = $1 ORDER BY f.id"
        ))
        .bind::<BigInt, _>(user)
        .load(&mut conn)
        .await?;
        if filters.is_empty() {
            // (Most users: one query per read that matches filters.)
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = filters.iter().map(|f| f.id).collect();
        let keywords = keywords_of(&mut conn, &ids).await?;
        Ok(filters
            .into_iter()
            .map(|f| {
                let own = keywords
                    .iter()
                    .filter(|k| k.filter_id == f.id)
                    .cloned()
                    .collect();
                (f, own)
            })
            .collect())
    }

    /// One of `user`'s filters, with its keywords.
    pub async fn one(self, user: UserId, id: i64) -> AppResult<Option<FilterWithKeywords>> {
        let mut conn = self.0.conn().await?;
        let filter: Option<FilterRow> = diesel::sql_query(format!(
            "SELECT {FILTER_COLUMNS} FROM filters f WHERE f.user_id = $1 AND f.id = $2"
        ))
        .bind::<BigInt, _>(user)
        .bind::<BigInt, _>(id)
        .get_result(&mut conn)
        .await
        .optional()?;
        let Some(filter) = filter else {
            return Ok(None);
        };
        let keywords = keywords_of(&mut conn, &[filter.id]).await?;
        Ok(Some((filter, keywords)))
    }

    /// The filter of one of `user`'s keywords.
    pub async fn filter_of_keyword(self, user: UserId, keyword: i64) -> AppResult<Option<i64>> {
        #[derive(QueryableByName)]
        struct Id {
            #[diesel(sql_type = BigInt)]
            id: i64,
        }
        let mut conn = self.0.conn().await?;
        let found: Option<Id> = diesel::sql_query(
            "SELECT f.id FROM filter_keywords k JOIN filters f ON f.id = k.filter_id \
             WHERE k.id = $2 AND f.user_id = $1",
        )
        .bind::<BigInt, _>(user)
        .bind::<BigInt, _>(keyword)
        .get_result(&mut conn)
        .await
        .optional()?;
        Ok(found.map(|f| f.id))
    }

    /// A new filter of `user` with `keywords` (all fields set), unless it
    /// has `most` filters already or the keywords pass `most_keywords`.
    pub async fn create(
        self,
        user: UserId,
        fields: &FilterFields,
        keywords: &[KeywordOp],
        (most, most_keywords): (i64, i64),
        now_ms: i64,
    ) -> AppResult<Result<i64, Refused>> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            // (The user's row, locked: two creations count one after the
            // other.)
            diesel::sql_query("SELECT id FROM users WHERE id = $1 FOR UPDATE")
                .bind::<BigInt, _>(user)
                .execute(conn)
                .await?;
            if count(conn, "SELECT count(*) AS n FROM filters WHERE user_id = $1", user.0).await?
                >= most
            {
                return Ok(Err(Refused::Full));
            }
            #[derive(QueryableByName)]
            struct Id {
                #[diesel(sql_type = BigInt)]
                id: i64,
            }
            let created: Id = diesel::sql_query(
                "INSERT INTO filters (user_id, title, contexts, action, expires_at_ms, created_at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
            )
            .bind::<BigInt, _>(user)
            .bind::<Text, _>(fields.title.clone().unwrap_or_default())
            .bind::<Array<Text>, _>(fields.contexts.clone().unwrap_or_default())
            .bind::<Text, _>(fields.action.clone().unwrap_or_default())
            .bind::<Nullable<BigInt>, _>(fields.expires_at_ms.flatten())
            .bind::<BigInt, _>(now_ms)
            .get_result(conn)
            .await?;
            apply_keywords(conn, created.id, keywords, most_keywords).await
                .map(|r| r.map(|()| created.id))
        })
        .await
    }

    /// Changes one of `user`'s filters: its fields, then its keywords;
    /// nothing if the keywords would pass `most_keywords`.
    pub async fn update(
        self,
        user: UserId,
        id: i64,
        fields: &FilterFields,
        keywords: &[KeywordOp],
        most_keywords: i64,
    ) -> AppResult<Result<(), Refused>> {
        let mut conn = self.0.conn().await?;
        conn.transaction::<_, AppError, _>(async move |conn| {
            let expiry = fields.expires_at_ms;
            let changed = diesel::sql_query(
                "UPDATE filters SET title = coalesce($3, title), \
                    contexts = coalesce($4, contexts), action = coalesce($5, action), \
                    expires_at_ms = CASE WHEN $6 THEN $7 ELSE expires_at_ms END \
                 WHERE user_id = $1 AND id = $2",
            )
            .bind::<BigInt, _>(user)
            .bind::<BigInt, _>(id)
            .bind::<Nullable<Text>, _>(fields.title.as_deref())
            .bind::<Nullable<Array<Text>>, _>(fields.contexts.as_deref())
            .bind::<Nullable<Text>, _>(fields.action.as_deref())
            .bind::<Bool, _>(expiry.is_some())
            .bind::<Nullable<BigInt>, _>(expiry.flatten())
            .execute(conn)
            .await?;
            if changed == 0 {
                return Ok(Err(Refused::Missing));
            }
            apply_keywords(conn, id, keywords, most_keywords).await
        })
        .await
    }

    /// Removes one of `user`'s filters and its keywords; whether it had it.
    pub async fn delete(self, user: UserId, id: i64) -> AppResult<bool> {
        let mut conn = self.0.conn().await?;
        let gone = diesel::sql_query("DELETE FROM filters WHERE user_id = $1 AND id = $2")
            .bind::<BigInt, _>(user)
            .bind::<BigInt, _>(id)
            .execute(&mut conn)
            .await?;
        Ok(gone > 0)
    }
}

async fn keywords_of(conn: &mut AsyncPgConnection, filters: &[i64]) -> AppResult<Vec<KeywordRow>> {
    Ok(diesel::sql_query(
        "SELECT id, filter_id, keyword, whole_word FROM filter_keywords \
         WHERE filter_id = ANY($1) ORDER BY id",
    )
    .bind::<Array<BigInt>, _>(filters)
    .load(conn)
    .await?)
}

/// The count (`n`) one query of one bound number gives.
pub(super) async fn count(conn: &mut AsyncPgConnection, sql: &str, of: i64) -> AppResult<i64> {
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let n: N = diesel::sql_query(sql)
        .bind::<BigInt, _>(of)
        .get_result(conn)
        .await?;
    Ok(n.n)
}

/// Applies `ops` to filter `id`'s keywords; refused (and to be rolled
/// back) past `most` keywords.
async fn apply_keywords(
    conn: &mut AsyncPgConnection,
    id: i64,
    ops: &[KeywordOp],
    most: i64,
) -> AppResult<Result<(), Refused>> {
    for op in ops {
        match op {
            KeywordOp::Add {
                keyword,
                whole_word,
            } => {
                diesel::sql_query(
                    "INSERT INTO filter_keywords (filter_id, keyword, whole_word) \
                     VALUES ($1, $2, $3)",
                )
                .bind::<BigInt, _>(id)
                .bind::<Text, _>(keyword)
                .bind::<Bool, _>(*whole_word)
                .execute(conn)
                .await?;
            }
            KeywordOp::Change {
                id: keyword_id,
                keyword,
                whole_word,
            } => {
                diesel::sql_query(
                    "UPDATE filter_keywords SET keyword = coalesce($3, keyword), \
                        whole_word = coalesce($4, whole_word) \
                     WHERE filter_id = $1 AND id = $2",
                )
                .bind::<BigInt, _>(id)
                .bind::<BigInt, _>(*keyword_id)
                .bind::<Nullable<Text>, _>(keyword.as_deref())
                .bind::<Nullable<Bool>, _>(*whole_word)
                .execute(conn)
                .await?;
            }
            KeywordOp::Remove(keyword_id) => {
                diesel::sql_query("DELETE FROM filter_keywords WHERE filter_id = $1 AND id = $2")
                    .bind::<BigInt, _>(id)
                    .bind::<BigInt, _>(*keyword_id)
                    .execute(conn)
                    .await?;
            }
        }
    }
    let held = count(
        conn,
        "SELECT count(*) AS n FROM filter_keywords WHERE filter_id = $1",
        id,
    )
    .await?;
    if held > most {
        // (Rolled back by the caller's transaction.)
        return Err(AppError::Unprocessable(format!(
            "a filter holds at most {most} keywords"
        )));
    }
    Ok(Ok(()))
}
