//! The scroll position (DESIGN.md, invariant 3). A request names a position
//! with `max` (no entry newer than it) and `offset` (how many feed entries
//! scored exactly `max` the client has already passed).

use serde::{Deserialize, Serialize};

/// Where the next page starts: the `next` object of a response, sent back
/// as the next request's `max` and `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(example = json!({"max": 1764500000123_i64, "offset": 2}))]
pub struct Cursor {
    /// The smallest score on the page.
    pub max: i64,
    /// Entries scored exactly `max` up to the page's last item.
    pub offset: u32,
}

/// A validated page request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// `None`: newer than everything.
    pub max: Option<i64>,
    pub offset: u32,
    pub limit: u32,
}

impl PageRequest {
    /// Any offset up to this is accepted. A larger one is accepted only
    /// inside a run of more posts sharing `max` (a `next` the service gave
    /// after such a run); the engine checks that.
    pub const MAX_OFFSET: u32 = 10_000;
    pub const MAX_LIMIT: u32 = 100;
    pub const DEFAULT_LIMIT: u32 = 20;

    pub fn parse(
        max: Option<i64>,
        offset: Option<i64>,
        limit: Option<i64>,
    ) -> Result<Self, String> {
        if let Some(m) = max {
            if m < 0 {
                return Err(format!("max must be an integer >= 0, got {m}"));
            }
        }
        let offset = offset.unwrap_or(0);
        if offset < 0 || offset > u32::MAX as i64 {
            return Err(format!(
                "offset must be an integer from 0 to {}, got {offset}",
                Self::MAX_OFFSET
            ));
        }
        if offset > 0 && max.is_none() {
            return Err(
                "offset counts the entries scored exactly max already seen: it needs max"
                    .to_string(),
            );
        }
        let limit = limit.unwrap_or(Self::DEFAULT_LIMIT as i64);
        if !(1..=Self::MAX_LIMIT as i64).contains(&limit) {
            return Err(format!(
                "limit must be an integer from 1 to {}, got {limit}",
                Self::MAX_LIMIT
            ));
        }
        Ok(PageRequest {
            max,
            offset: offset as u32,
            limit: limit as u32,
        })
    }

    /// The first page.
    pub fn first(limit: u32) -> Self {
        PageRequest {
            max: None,
            offset: 0,
            limit,
        }
    }

    /// The page after a response's `next`.
    pub fn after(cursor: Cursor, limit: u32) -> Self {
        PageRequest {
            max: Some(cursor.max),
            offset: cursor.offset,
            limit,
        }
    }

    /// Entries a source must yield (from `max` down) to be sure to cover
    /// this page and one entry past it.
    pub fn window(&self) -> usize {
        self.offset as usize + self.limit as usize + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_validation() {
        assert!(PageRequest::parse(None, None, None).is_ok());
        assert!(PageRequest::parse(Some(-1), None, None).is_err());
        assert!(PageRequest::parse(None, Some(-1), None).is_err());
        assert!(PageRequest::parse(None, None, Some(0)).is_err());
        assert!(PageRequest::parse(None, None, Some(101)).is_err());
        assert!(PageRequest::parse(Some(5), Some(1 << 32), None).is_err());
        assert_eq!(
            PageRequest::parse(Some(5), Some(2), Some(100))
                .unwrap()
                .window(),
            103
        );
    }

    #[test]
    fn an_offset_needs_a_max() {
        // Without max an offset would be a page number: what fails while
        // posts keep arriving.
        assert!(PageRequest::parse(None, Some(3), None).is_err());
        assert!(PageRequest::parse(None, Some(0), None).is_ok());
        assert!(PageRequest::parse(Some(7), Some(3), None).is_ok());
        // Past 10,000 the engine decides (only a long run of ties allows it).
        assert!(PageRequest::parse(Some(7), Some(10_001), None).is_ok());
    }
}
