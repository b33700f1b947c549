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
}

/// `parts` is the SQL text split where the binds go (one more part than
/// binds); `ST` is the SQL type of a row.
pub struct Prepared<'a, ST> {
    parts: &'static [&'static str],
    binds: Vec<Bind<'a>>,
    row: PhantomData<ST>,
}

impl<'a, ST> Prepared<'a, ST> {
    pub fn new(parts: &'static [&'static str], binds: Vec<Bind<'a>>) -> Self {
        debug_assert_eq!(parts.len(), binds.len() + 1, "one more part than binds");
        Prepared {
            parts,
            binds,
            row: PhantomData,
        }
    }
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
        for (i, part) in self.parts.iter().enumerate() {
            out.push_sql(part);
            match self.binds.get(i) {
                Some(Bind::BigInt(v)) => out.push_bind_param::<BigInt, _>(v)?,
                Some(Bind::Bool(v)) => out.push_bind_param::<Bool, _>(v)?,
                Some(Bind::Posts(v)) => out.push_bind_param::<Array<BigInt>, _>(*v)?,
                Some(Bind::Text(v)) => out.push_bind_param::<Text, _>(*v)?,
                Some(Bind::OptText(v)) => out.push_bind_param::<Nullable<Text>, _>(v)?,
                None => {}
            }
        }
        Ok(())
    }
}
