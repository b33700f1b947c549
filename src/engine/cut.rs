//! Cutting a page out of a feed stream (DESIGN.md, invariant 3).
//!
//! The stream is the feed: every post of the authors followed, deleted ones
//! included, in feed order. A deleted post is *hidden*: never shown, but it
//! keeps its place, so the cursor counts it. That keeps a scroll exact when
//! a post the client has already passed is deleted: the `offset` still
//! skips the same entries. (Only a change in the set of entries scored
//! exactly `max` while a client stands there, such as a post stamped with
//! that very millisecond or a follow or unfollow of an author with a post
//! in it, can still move the skip by one: the cursor is a count.)

use crate::types::{Cursor, Entry, PageRequest};

/// One entry of the feed as the page sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot<T> {
    /// A live post: shown.
    Shown(T),
    /// A deleted post: counted by the cursor, not shown.
    Hidden,
}

/// A page cut out of a stream, or the verdict that the stream was too short
/// to decide it.
#[derive(Debug, PartialEq, Eq)]
pub enum Cut<T> {
    Page { items: Vec<T>, next: Option<Cursor> },
    NeedMore,
}

/// Positions a stream that starts at the request's `max` (entries newer than
/// it are dropped too): leaves out the `offset` entries scored exactly `max`
/// that the client has already passed.
pub fn after_seen<T>(
    stream: impl IntoIterator<Item = (Entry, Slot<T>)>,
    req: &PageRequest,
) -> impl Iterator<Item = (Entry, Slot<T>)> {
    let max = req.max;
    let mut skip = req.offset;
    stream.into_iter().filter(move |(e, _)| match max {
        Some(m) if e.score > m => false,
        Some(m) if e.score == m && skip > 0 => {
            skip -= 1;
            false
        }
        _ => true,
    })
}

/// Cuts the requested page out of `stream`, which must be positioned (see
/// [`after_seen`]), in feed order, and hold every entry of the feed from
/// there for as long as it goes. `complete` says whether the stream's end is
/// the feed's end; when it is not and the page cannot be decided, the
/// answer is [`Cut::NeedMore`].
///
/// `next.max` is the last shown item's score; `next.offset` counts the
/// entries of that score up to and including it (hidden ones too), plus the
/// request's offset when that score is the request's `max`.
pub fn cut<T>(
    stream: impl IntoIterator<Item = (Entry, Slot<T>)>,
    req: &PageRequest,
    complete: bool,
) -> Cut<T> {
    let mut items = Vec::with_capacity(req.limit as usize);
    // (score, entries of that score passed so far) of the current run.
    let mut run: Option<(i64, u32)> = None;
    let mut last: Option<(i64, u32)> = None;
    let mut more = false;
    for (entry, slot) in stream {
        let passed = match run {
            Some((score, n)) if score == entry.score => n + 1,
            _ => 1,
        };
        run = Some((entry.score, passed));
        if let Slot::Shown(item) = slot {
            if items.len() == req.limit as usize {
                more = true;
                break;
            }
            items.push(item);
            last = Some((entry.score, passed));
        }
    }
    if !more && !complete {
        return Cut::NeedMore;
    }
    let next = match last {
        Some((score, passed)) if more => Some(Cursor {
            max: score,
            offset: passed
                + if req.max == Some(score) {
                    req.offset
                } else {
                    0
                },
        }),
        _ => None,
    };
    Cut::Page { items, next }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::feed_order;

    fn sorted(mut v: Vec<Entry>) -> Vec<Entry> {
        v.sort_by(feed_order);
        v
    }

    fn shown(stream: &[Entry]) -> Vec<(Entry, Slot<Entry>)> {
        stream.iter().map(|e| (*e, Slot::Shown(*e))).collect()
    }

    fn page(stream: &[(Entry, Slot<Entry>)], req: PageRequest) -> (Vec<Entry>, Option<Cursor>) {
        match cut(after_seen(stream.iter().cloned(), &req), &req, true) {
            Cut::Page { items, next } => (items, next),
            Cut::NeedMore => unreachable!("complete streams always cut"),
        }
    }

    fn scroll(stream: &[(Entry, Slot<Entry>)], size: u32) -> Vec<Entry> {
        let mut req = PageRequest::first(size);
        let mut seen = vec![];
        loop {
            let (items, next) = page(stream, req);
            seen.extend(items);
            match next {
                Some(c) => req = PageRequest::after(c, size),
                None => return seen,
            }
        }
    }

    #[test]
    fn a_page_of_one_shared_score_does_not_loop() {
        // The seeds' cursor loses the request's offset here and loops forever.
        let stream = sorted((1..=7).map(|id| Entry::new(100, id)).collect());
        assert_eq!(scroll(&shown(&stream), 2), stream);
    }

    #[test]
    fn next_counts_the_request_offset_only_for_the_same_score() {
        let stream = shown(&sorted(vec![
            Entry::new(9, 1),
            Entry::new(9, 2),
            Entry::new(9, 3),
            Entry::new(8, 4),
            Entry::new(8, 5),
        ]));
        let (items, next) = page(&stream, PageRequest::after(Cursor { max: 9, offset: 1 }, 1));
        assert_eq!(items.len(), 1);
        assert_eq!(next, Some(Cursor { max: 9, offset: 2 }));
        let (_, next) = page(&stream, PageRequest::after(Cursor { max: 9, offset: 2 }, 2));
        assert_eq!(next, Some(Cursor { max: 8, offset: 1 }));
    }

    #[test]
    fn hidden_entries_keep_their_place_in_the_count() {
        // Ids 3 (hidden) and 2, 1 share score 9; 4 is older.
        let stream = vec![
            (Entry::new(9, 3), Slot::Hidden),
            (Entry::new(9, 2), Slot::Shown(Entry::new(9, 2))),
            (Entry::new(9, 1), Slot::Shown(Entry::new(9, 1))),
            (Entry::new(8, 4), Slot::Shown(Entry::new(8, 4))),
        ];
        let (items, next) = page(&stream, PageRequest::first(1));
        assert_eq!(items, vec![Entry::new(9, 2)]);
        assert_eq!(next, Some(Cursor { max: 9, offset: 2 }));
        assert_eq!(
            scroll(&stream, 1),
            vec![Entry::new(9, 2), Entry::new(9, 1), Entry::new(8, 4)]
        );
        // Hiding an entry already passed does not move the rest.
        let mut later = stream.clone();
        later[1].1 = Slot::Hidden;
        let (items, _) = page(&later, PageRequest::after(Cursor { max: 9, offset: 2 }, 5));
        assert_eq!(items, vec![Entry::new(9, 1), Entry::new(8, 4)]);
    }

    #[test]
    fn next_is_null_at_the_end_and_need_more_when_unsure() {
        let stream = shown(&[Entry::new(3, 1), Entry::new(2, 2)]);
        assert_eq!(page(&stream, PageRequest::first(2)).1, None);
        let req = PageRequest::first(2);
        assert_eq!(cut(stream.iter().cloned(), &req, false), Cut::NeedMore);
        let req = PageRequest::first(1);
        assert!(matches!(
            cut(stream.iter().cloned(), &req, false),
            Cut::Page { next: Some(_), .. }
        ));
        // Only hidden entries after the last item: the feed ends there.
        let tail = vec![
            (Entry::new(3, 1), Slot::Shown(Entry::new(3, 1))),
            (Entry::new(2, 2), Slot::Hidden),
        ];
        assert_eq!(page(&tail, PageRequest::first(1)).1, None);
    }
}
