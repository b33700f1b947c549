//! Hand-written SQL that each connection prepares once.
//!
//! diesel's `sql_query` marks its statements unsafe to cache, so PostgreSQL
//! parses and plans them on every call; on the read path that planning was
//! most of the database's time. [`Prepared`] is a query node with a fixed
//! text and typed binds: diesel-async caches its prepared statement per
//! connection, keyed by that text, and PostgreSQL may settle on a generic plan.

use std::marker::PhantomData;

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::result::Error;
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text};
use diesel::QueryResult;

use crate::types::PostId;

/// A bound parameter.
#[derive(Debug, Clone, Copy)]
pub enum Bind<'a> {
    BigInt(i64),
    Bool(bool),
    /// Post ids, as an array of `BIGINT`.
    Posts(&'a [PostId]),
    Text(&'a str),
    /// A text or NULL.
    OptText(Option<&'a str>),
    /// A `BIGINT` or NULL.
    OptBigInt(Option<i64>),
    /// An array of `TEXT`.
    Texts(&'a [&'a str]),
}

/// A query's text with its binds. The text names the binds as PostgreSQL
/// does, `$1` to `$n` by position, each as often as it needs (the text
/// holds no other `$`, in comments neither); `ST` is the SQL type of a row.
/// diesel numbers what it sends in order of appearance, so each appearance
/// goes as a parameter of its own, with its bind's value.
pub struct Prepared<'a, ST> {
    text: &'static str,
    binds: Vec<Bind<'a>>,
    row: PhantomData<ST>,
}

impl<'a, ST> Prepared<'a, ST> {
    pub fn new(text: &'static str, binds: Vec<Bind<'a>>) -> Self {
        Prepared {
            text,
            binds,
            row: PhantomData,
        }
    }
}

/// The text before each `$n` of `text`, with `n`, then the rest.
fn placeholders(text: &str) -> (Vec<(&str, usize)>, &str) {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        let digits = rest[at + 1..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        let n = rest[at + 1..at + 1 + digits].parse().unwrap_or(0);
        parts.push((&rest[..at], n));
        rest = &rest[at + 1 + digits..];
    }
    (parts, rest)
}

impl<ST> QueryId for Prepared<'_, ST> {
    type QueryId = ();
    // Not static: the cache key is the SQL text.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<ST: 'static> Query for Prepared<'_, ST> {
    type SqlType = ST;
}

impl<ST> QueryFragment<Pg> for Prepared<'_, ST> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let (parts, rest) = placeholders(self.text);
        for (sql, n) in parts {
            out.push_sql(sql);
            let Some(bind) = n.checked_sub(1).and_then(|i| self.binds.get(i)) else {
                return Err(Error::QueryBuilderError(
                    format!("${n} names no bind of {}", self.binds.len()).into(),
                ));
            };
            match bind {
                Bind::BigInt(v) => out.push_bind_param::<BigInt, _>(v)?,
                Bind::Bool(v) => out.push_bind_param::<Bool, _>(v)?,
                Bind::Posts(v) => out.push_bind_param::<Array<BigInt>, _>(*v)?,
                Bind::Text(v) => out.push_bind_param::<Text, _>(*v)?,
                Bind::OptText(v) => out.push_bind_param::<Nullable<Text>, _>(v)?,
                Bind::OptBigInt(v) => out.push_bind_param::<Nullable<BigInt>, _>(v)?,
                Bind::Texts(v) => out.push_bind_param::<Array<Text>, _>(*v)?,
            }
        }
        out.push_sql(rest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::debug_query;

    #[test]
    fn each_appearance_of_a_bind_is_sent_as_a_parameter_of_its_own() {
        let q = Prepared::<BigInt>::new(
            "SELECT $1 WHERE $2 AND $1 > 0",
            vec![Bind::BigInt(7), Bind::Bool(true)],
        );
        let sent = debug_query::<Pg, _>(&q).to_string();
        assert_eq!(sent, "SELECT $1 WHERE $2 AND $3 > 0 -- binds: [7, true, 7]");
    }

    #[test]
    fn a_placeholder_past_the_binds_is_an_error_not_a_panic() {
        let q = Prepared::<BigInt>::new("SELECT $2", vec![Bind::BigInt(7)]);
        let mut builder = diesel::pg::PgQueryBuilder::default();
        assert!(q.to_sql(&mut builder, &Pg).is_err());
    }
}
