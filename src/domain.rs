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

/// An app's own data on a post: a JSON object, at most 4 KiB written
/// compactly. Kept as that compact text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostMeta(String);

impl PostMeta {
    pub const MAX_BYTES: usize = 4096;

    pub fn parse(value: &serde_json::Value) -> Result<Self, String> {
        if !value.is_object() {
            return Err("meta must be a JSON object".to_string());
        }
        let text = value.to_string();
        if text.len() > Self::MAX_BYTES {
            return Err(format!(
                "meta must be at most {} bytes written compactly, got {}",
                Self::MAX_BYTES,
                text.len()
            ));
        }
        Ok(PostMeta(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A client's name for one publish, so that a retry answers the first
/// post: 1 to 255 visible ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    pub fn parse(raw: &[u8]) -> Result<Self, String> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN {
            return Err(format!(
                "Idempotency-Key must be 1 to {} characters, got {}",
                Self::MAX_LEN,
                raw.len()
            ));
        }
        if !raw.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Err("Idempotency-Key may hold only visible ASCII characters".to_string());
        }
        Ok(IdempotencyKey(String::from_utf8_lossy(raw).into_owned()))
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
    fn meta_is_a_small_object() {
        use serde_json::json;
        assert!(PostMeta::parse(&json!({"k": [1, "x"]})).is_ok());
        assert!(PostMeta::parse(&json!([1])).is_err());
        assert!(PostMeta::parse(&json!("text")).is_err());
        assert!(PostMeta::parse(&json!({"k": "x".repeat(4088)})).is_ok());
        assert!(PostMeta::parse(&json!({"k": "x".repeat(4089)})).is_err());
    }

    #[test]
    fn idempotency_keys() {
        assert!(IdempotencyKey::parse(b"retry-1").is_ok());
        assert!(IdempotencyKey::parse(b"").is_err());
        assert!(IdempotencyKey::parse(&[b'a'; 256]).is_err());
        assert!(IdempotencyKey::parse(&[b'a'; 255]).is_ok());
        assert!(IdempotencyKey::parse(b"with space").is_err());
        assert!(IdempotencyKey::parse("é".as_bytes()).is_err());
    }

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
