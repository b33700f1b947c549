//! The scroll position (docs/design.md, invariant 3). A request names a position
//! in the feed with a score and an `offset` that places it in the run of
//! entries of that score:
//! - `max` and `offset`: below the `offset` newest entries scored exactly
//!   `max` (the client has passed them scrolling down); a page is what
//!   comes next, older;
//! - `min` and `offset`: above the `offset` oldest entries scored exactly
//!   `min` (the client has passed them paging up); a page is the entries
//!   immediately newer, the ones closest to the position.
//!
//! Each offset counts from the end the client has seen, so posts that
//! arrive at the top of a run (newer ids, newer posts) do not move it.
//!
//! A position names its entry instead: the score and the post `id`
//! (every page's `next` and `prev` carry it). Sent back with `id`, the
//! request is below (or above) that entry in feed order, whatever else
//! joins or leaves its millisecond. The offset sent beside it (a `next`
//! sent back whole) only sizes the first read, as a guess of where the
//! entry stands in its run: it never places the page.

use serde::{Deserialize, Serialize};

use super::PostId;

/// Where the next page starts: the `next` object of a response, sent back
/// as the next request's `max` and `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(example = json!({"max": 1764500000123_i64, "offset": 2, "id": 9001}))]
pub struct Cursor {
    /// The smallest score on the page.
    pub max: i64,
    /// Entries scored exactly `max` up to the page's last item.
    pub offset: u32,
    /// The page's last item: sent back as `id` beside `max`, the next
    /// page is what comes after this entry, whatever joins or leaves its
    /// millisecond meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<i64>)]
    pub id: Option<PostId>,
}

impl Cursor {
    /// A position by count only.
    pub const fn counted(max: i64, offset: u32) -> Self {
        Cursor {
            max,
            offset,
            id: None,
        }
    }
}

/// Where a refresh starts: the `prev` object of a response, sent back as
/// the next request's `min` and `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(example = json!({"min": 1764500000123_i64, "offset": 1, "id": 9001}))]
pub struct Prev {
    /// The score of the page's first (newest) item; 0 (below every entry)
    /// on an empty first page.
    pub min: i64,
    /// Entries scored exactly `min` from the page's first item down to the
    /// last of that score.
    pub offset: u32,
    /// The page's first item (none below every entry): sent back as `id`
    /// beside `min`, the refresh is what lies above this entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<i64>)]
    pub id: Option<PostId>,
}

impl Prev {
    /// The position below every entry: a refresh from it reads the feed
    /// from its oldest entry up.
    pub const BOTTOM: Prev = Prev::counted(0, 0);

    /// A position by count only.
    pub const fn counted(min: i64, offset: u32) -> Self {
        Prev {
            min,
            offset,
            id: None,
        }
    }
}

/// A validated page request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// `None`: newer than everything.
    pub max: Option<i64>,
    /// A refresh: the entries immediately newer than (`min`, `offset`).
    pub min: Option<i64>,
    pub offset: u32,
    /// The entry the position names (scored `max`, or `min`): the page is
    /// below (above) it in feed order; `offset` then only sizes the read.
    pub id: Option<PostId>,
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
        min: Option<i64>,
        offset: Option<i64>,
        id: Option<i64>,
        limit: Option<i64>,
    ) -> Result<Self, String> {
        for (name, value) in [("max", max), ("min", min)] {
            if let Some(m) = value {
                if m < 0 {
                    return Err(format!("{name} must be an integer >= 0, got {m}"));
                }
            }
        }
        if max.is_some() && min.is_some() {
            return Err(
                "max pages down and min pages up from a position: send one of them".to_string(),
            );
        }
        if let Some(id) = id {
            if id < 1 {
                return Err(format!("id must be a post id (an integer >= 1), got {id}"));
            }
            if max.is_none() && min.is_none() {
                return Err(
                    "id names the entry a position stands on: it needs max (or min), its score"
                        .to_string(),
                );
            }
        }
        let offset = offset.unwrap_or(0);
        if offset < 0 || offset > u32::MAX as i64 {
            return Err(format!(
                "offset must be an integer from 0 to {}, got {offset}",
                Self::MAX_OFFSET
            ));
        }
        if offset > 0 && max.is_none() && min.is_none() {
            return Err(
                "offset counts the entries scored exactly max (or min) already seen: it needs \
                 max or min"
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
            min,
            offset: offset as u32,
            id: id.map(PostId),
            limit: limit as u32,
        })
    }

    /// The first page.
    pub fn first(limit: u32) -> Self {
        PageRequest {
            max: None,
            min: None,
            offset: 0,
            id: None,
            limit,
        }
    }

    /// The page after a response's `next`: by the entry it names, if it
    /// names one.
    pub fn after(cursor: Cursor, limit: u32) -> Self {
        PageRequest {
            max: Some(cursor.max),
            min: None,
            offset: cursor.offset,
            id: cursor.id,
            limit,
        }
    }

    /// The page before a response's `prev`: the entries immediately newer
    /// (than the entry it names, if it names one).
    pub fn before(prev: Prev, limit: u32) -> Self {
        PageRequest {
            max: None,
            min: Some(prev.min),
            offset: prev.offset,
            id: prev.id,
            limit,
        }
    }

    /// The score the request's offset counts entries of.
    pub fn at(&self) -> Option<i64> {
        self.max.or(self.min)
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
        assert!(PageRequest::parse(None, None, None, None, None).is_ok());
        assert!(PageRequest::parse(Some(-1), None, None, None, None).is_err());
        assert!(PageRequest::parse(None, Some(-1), None, None, None).is_err());
        assert!(PageRequest::parse(None, None, Some(-1), None, None).is_err());
        assert!(PageRequest::parse(None, None, None, None, Some(0)).is_err());
        assert!(PageRequest::parse(None, None, None, None, Some(101)).is_err());
        assert!(PageRequest::parse(Some(5), None, Some(1 << 32), None, None).is_err());
        assert_eq!(
            PageRequest::parse(Some(5), None, Some(2), None, Some(100))
                .unwrap()
                .window(),
            103
        );
        // One direction at a time.
        assert!(PageRequest::parse(Some(5), Some(5), None, None, None).is_err());
        assert_eq!(
            PageRequest::parse(None, Some(5), Some(2), None, None).unwrap(),
            PageRequest::before(Prev::counted(5, 2), 20)
        );
    }

    #[test]
    fn an_offset_needs_a_max() {
        // Without max an offset would be a page number: what fails while
        // posts keep arriving.
        assert!(PageRequest::parse(None, None, Some(3), None, None).is_err());
        assert!(PageRequest::parse(None, None, Some(0), None, None).is_ok());
        assert!(PageRequest::parse(Some(7), None, Some(3), None, None).is_ok());
        assert!(PageRequest::parse(None, Some(7), Some(3), None, None).is_ok());
        // Past 10,000 the engine decides (only a long run of ties allows it).
        assert!(PageRequest::parse(Some(7), None, Some(10_001), None, None).is_ok());
    }

    #[test]
    fn an_id_names_the_entry_of_a_position() {
        // With an id the count sent beside it only sizes the read.
        let req = PageRequest::parse(Some(7), None, Some(3), Some(9), None).unwrap();
        assert_eq!((req.offset, req.id), (3, Some(PostId(9))));
        let up = PageRequest::parse(None, Some(7), None, Some(9), None).unwrap();
        assert_eq!(up.id, Some(PostId(9)));
        // An id needs the score it stands at; ids are positive.
        assert!(PageRequest::parse(None, None, None, Some(9), None).is_err());
        assert!(PageRequest::parse(Some(7), None, None, Some(0), None).is_err());
        // A `next` or `prev` sent back whole keeps its id.
        let next = Cursor {
            max: 7,
            offset: 2,
            id: Some(PostId(9)),
        };
        assert_eq!(PageRequest::after(next, 5).id, Some(PostId(9)));
        assert_eq!(PageRequest::after(next, 5).window(), 8);
        assert_eq!(PageRequest::after(Cursor::counted(7, 2), 5).offset, 2);
    }
}
