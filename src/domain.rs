//! Domain values that can only be built valid.

use serde::Serialize;

/// A username: 1–32 characters of `[a-z0-9_]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Username(String);

impl Username {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let len = raw.chars().count();
        if !(1..=32).contains(&len) {
            return Err(format!("username must be 1 to 32 characters, got {len}"));
        }
        if let Some(bad) = raw
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_'))
        {
            return Err(format!(
                "username may hold only a-z, 0-9 and _, not {bad:?}"
            ));
        }
        Ok(Username(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A post body: 1–2000 characters (Unicode scalar values), no NUL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostBody(String);

impl PostBody {
    pub const MAX_CHARS: usize = 2000;

    pub fn parse(raw: &str) -> Result<Self, String> {
        let len = raw.chars().count();
        if len == 0 {
            return Err("body must not be empty".to_string());
        }
        if len > Self::MAX_CHARS {
            return Err(format!(
                "body must be at most {} characters, got {len}",
                Self::MAX_CHARS
            ));
        }
        if raw.contains('\0') {
            return Err("body must not contain NUL characters".to_string());
        }
        Ok(PostBody(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A user or post id as clients send it: a positive integer.
pub fn parse_id(raw: &str, what: &str) -> Result<i64, String> {
    match raw.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(format!("{what} must be a positive integer, got {raw:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames() {
        assert!(Username::parse("alice_01").is_ok());
        assert!(Username::parse(&"a".repeat(32)).is_ok());
        assert!(Username::parse("").is_err());
        assert!(Username::parse(&"a".repeat(33)).is_err());
        assert!(Username::parse("Alice").is_err());
        assert!(Username::parse("al ice").is_err());
        assert!(Username::parse("élan").is_err());
    }

    #[test]
    fn bodies_count_characters_not_bytes() {
        assert!(PostBody::parse("x").is_ok());
        assert!(PostBody::parse(&"é".repeat(2000)).is_ok());
        assert!(PostBody::parse(&"é".repeat(2001)).is_err());
        assert!(PostBody::parse("").is_err());
        assert!(PostBody::parse("a\0b").is_err());
    }

    #[test]
    fn ids() {
        assert_eq!(parse_id("42", "id"), Ok(42));
        assert!(parse_id("0", "id").is_err());
        assert!(parse_id("-3", "id").is_err());
        assert!(parse_id("x", "id").is_err());
        assert!(parse_id("99999999999999999999", "id").is_err());
    }
}
