//! The ids of accounts, posts, jobs and tasks, each a type of its own:
//! never taken for another kind's or a count, nor one account's for
//! another's by a swapped argument. Written and read as the bare number
//! (JSON, SQL, Redis: the stores map them).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Declares an id: a `Copy` newtype over the number, ordered as the
/// number, that prints, parses and serialises as it.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
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
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = std::num::ParseIntError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                text.parse().map($name)
            }
        }
    };
}

id_type!(
    /// An account's id.
    UserId
);

id_type!(
    /// A list's id (a user's named group of accounts it follows).
    ListId
);

id_type!(
    /// A post's id.
    PostId
);

id_type!(
    /// A fan-out job's id (a row of the job queue).
    JobId
);

id_type!(
    /// The id of a task a user or an admin started and can watch.
    TaskId
);

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
        assert_eq!(serde_json::to_string(&PostId(9)).unwrap(), "9");
        assert_eq!("11".parse::<PostId>(), Ok(PostId(11)));
    }
}
