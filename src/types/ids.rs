//! The id of an account, a type of its own: never taken for a post's, a
//! job's or a count, nor one account's for another's by a swapped
//! argument. Written and read as the bare number (JSON, SQL, Redis: the
//! stores map it).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An account's id.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    diesel::expression::AsExpression,
    diesel::deserialize::FromSqlRow,
)]
#[serde(transparent)]
#[diesel(sql_type = diesel::sql_types::BigInt)]
pub struct UserId(pub i64);

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for UserId {
    type Err = std::num::ParseIntError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.parse().map(UserId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_reads_and_writes_as_its_number() {
        assert_eq!(serde_json::to_string(&UserId(42)).unwrap(), "42");
        assert_eq!(serde_json::from_str::<UserId>("7").unwrap(), UserId(7));
        assert_eq!("19".parse::<UserId>(), Ok(UserId(19)));
        assert!("x".parse::<UserId>().is_err());
        assert_eq!(UserId(3).to_string(), "3");
    }
}
