//! The scroll cursor (DESIGN.md, invariant 3).
//!
//! A feed is a stream of entries ordered by score (`created_at_ms`) descending,
//! then by the post id's decimal bytes descending: the order Redis gives ties
//! in a sorted set. A request names a position with `max` (no entry newer than
//! it) and `offset` (how many entries scored exactly `max` were already seen).

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

/// One post's place in a feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    pub score: i64,
    pub id: i64,
}

impl Entry {
    pub fn new(score: i64, id: i64) -> Self {
        Entry { score, id }
    }
}

/// Feed order: `Less` means `a` comes first (is newer).
pub fn feed_order(a: &Entry, b: &Entry) -> Ordering {
    b.score.cmp(&a.score).then_with(|| member_cmp(b.id, a.id))
}

/// Compares two ids as Redis compares their members: decimal bytes.
pub fn member_cmp(a: i64, b: i64) -> Ordering {
    let (mut ba, mut bb) = ([0u8; 20], [0u8; 20]);
    decimal(a, &mut ba).cmp(decimal(b, &mut bb))
}

fn decimal(mut n: i64, buf: &mut [u8; 20]) -> &[u8] {
    // Ids are positive; a negative one would be a bug upstream, but keep a
    // total order anyway by clamping.
    if n < 0 {
        n = 0;
    }
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Where the next page starts: the `next` object of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub max: i64,
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
        if !(0..=Self::MAX_OFFSET as i64).contains(&offset) {
            return Err(format!(
                "offset must be an integer from 0 to {}, got {offset}",
                Self::MAX_OFFSET
            ));
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

/// A page cut out of a stream, or the verdict that the stream was too short
/// to decide it.
#[derive(Debug, PartialEq, Eq)]
pub enum Cut<T> {
    Page { items: Vec<T>, next: Option<Cursor> },
    NeedMore,
}

/// Cuts the requested page out of `stream`, which must be in feed order and
/// hold every entry from `max` down for as long as it goes. `complete` says
/// whether the stream's end is the feed's end; when it is not and the page
/// cannot be decided, the answer is [`Cut::NeedMore`].
pub fn cut<T>(
    stream: impl IntoIterator<Item = T>,
    entry: impl Fn(&T) -> Entry,
    req: &PageRequest,
    complete: bool,
) -> Cut<T> {
    let mut skipped = 0u32;
    let mut items = Vec::with_capacity(req.limit as usize);
    let mut more = false;
    for item in stream {
        let e = entry(&item);
        if let Some(max) = req.max {
            if e.score > max {
                continue;
            }
            if skipped < req.offset && e.score == max {
                skipped += 1;
                continue;
            }
        } else if skipped < req.offset {
            skipped += 1;
            continue;
        }
        if items.len() == req.limit as usize {
            more = true;
            break;
        }
        items.push(item);
    }
    if !more && !complete {
        return Cut::NeedMore;
    }
    let next = match items.last() {
        Some(last) if more => {
            let last = entry(last);
            let mut offset = items
                .iter()
                .filter(|i| entry(i).score == last.score)
                .count() as u32;
            if req.max == Some(last.score) {
                offset += req.offset;
            }
            Some(Cursor {
                max: last.score,
                offset,
            })
        }
        _ => None,
    };
    Cut::Page { items, next }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut v: Vec<Entry>) -> Vec<Entry> {
        v.sort_by(feed_order);
        v
    }

    fn page(stream: &[Entry], req: PageRequest) -> (Vec<Entry>, Option<Cursor>) {
        match cut(stream.iter().copied(), |e| *e, &req, true) {
            Cut::Page { items, next } => (items, next),
            Cut::NeedMore => unreachable!("complete streams always cut"),
        }
    }

    #[test]
    fn ties_order_by_member_bytes_like_redis() {
        // Redis orders members "10" < "9" byte-wise; newest first reverses it.
        let v = sorted(vec![Entry::new(5, 10), Entry::new(5, 9), Entry::new(6, 1)]);
        assert_eq!(
            v,
            vec![Entry::new(6, 1), Entry::new(5, 9), Entry::new(5, 10)]
        );
    }

    #[test]
    fn a_page_of_one_shared_score_does_not_loop() {
        // The seeds' cursor loses the request's offset here and loops forever.
        let stream = sorted((1..=7).map(|id| Entry::new(100, id)).collect());
        let mut req = PageRequest::first(2);
        let mut seen = vec![];
        loop {
            let (items, next) = page(&stream, req);
            seen.extend(items);
            match next {
                Some(c) => req = PageRequest::after(c, 2),
                None => break,
            }
        }
        assert_eq!(seen, stream);
    }

    #[test]
    fn next_counts_the_request_offset_only_for_the_same_score() {
        let stream = sorted(vec![
            Entry::new(9, 1),
            Entry::new(9, 2),
            Entry::new(9, 3),
            Entry::new(8, 4),
            Entry::new(8, 5),
        ]);
        let (items, next) = page(&stream, PageRequest::after(Cursor { max: 9, offset: 1 }, 1));
        assert_eq!(items.len(), 1);
        assert_eq!(next, Some(Cursor { max: 9, offset: 2 }));
        let (_, next) = page(&stream, PageRequest::after(Cursor { max: 9, offset: 2 }, 2));
        assert_eq!(next, Some(Cursor { max: 8, offset: 1 }));
    }

    #[test]
    fn next_is_null_at_the_end_and_need_more_when_unsure() {
        let stream = vec![Entry::new(3, 1), Entry::new(2, 2)];
        assert_eq!(page(&stream, PageRequest::first(2)).1, None);
        assert_eq!(
            cut(
                stream.iter().copied(),
                |e| *e,
                &PageRequest::first(2),
                false
            ),
            Cut::NeedMore
        );
        assert!(matches!(
            cut(
                stream.iter().copied(),
                |e| *e,
                &PageRequest::first(1),
                false
            ),
            Cut::Page { next: Some(_), .. }
        ));
    }

    #[test]
    fn request_validation() {
        assert!(PageRequest::parse(None, None, None).is_ok());
        assert!(PageRequest::parse(Some(-1), None, None).is_err());
        assert!(PageRequest::parse(None, Some(10_001), None).is_err());
        assert!(PageRequest::parse(None, Some(-1), None).is_err());
        assert!(PageRequest::parse(None, None, Some(0)).is_err());
        assert!(PageRequest::parse(None, None, Some(101)).is_err());
        assert_eq!(
            PageRequest::parse(Some(5), Some(2), Some(100))
                .unwrap()
                .window(),
            103
        );
    }
}
