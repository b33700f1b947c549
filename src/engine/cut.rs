//! Cutting a page out of a feed stream (docs/design.md, invariant 3).
//!
//! The stream is the feed: every live post of the authors followed, in feed
//! order (a deleted post has left it). The `offset` counts entries of the
//! millisecond `max` only, so a scroll by count stays exact whatever joins
//! or leaves the feed elsewhere, a post the client has passed deleted
//! included. (Only a change in the set of entries scored exactly `max`
//! while a client stands there, such as a post stamped with that very
//! millisecond, a delete of one, or a follow or unfollow of an author with
//! a post in it, can still move the skip by one: the cursor is a count.)
//!
//! A request that names its entry (`id`) has no such slack: it is turned
//! into the count of the entries read at or above that entry
//! ([`positioned`], and in [`cut_up`]), and cut as any other.

use std::cmp::Ordering;

use crate::types::{feed_order, Cursor, Entry, PageRequest, PostId, Prev};

/// Where an entry of a stream stands: its score (the feed's entries, a
/// list of accounts by the time each was added). A page is cut by scores
/// alone: the cursor counts entries, it does not name them.
pub trait Scored {
    fn score(&self) -> i64;

    /// The post the entry is of, where it names one (a position names
    /// the feed's entries).
    fn post(&self) -> Option<PostId> {
        None
    }
}

impl Scored for Entry {
    fn score(&self) -> i64 {
        self.score
    }

    fn post(&self) -> Option<PostId> {
        Some(self.id)
    }
}

impl Scored for i64 {
    fn score(&self) -> i64 {
        *self
    }
}

/// One entry of the feed as the page sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot<T> {
    /// A live post: shown.
    Shown(T),
    /// Counted by the cursor, not shown (a read that only counts reads no
    /// body).
    Hidden,
}

/// A page cut out of a stream, or the verdict that the stream was too short
/// to decide it.
#[derive(Debug, PartialEq, Eq)]
pub enum Cut<T> {
    Page {
        items: Vec<T>,
        next: Option<Cursor>,
        /// Where the first item stands, for the page's `prev` (none on an
        /// empty page).
        top: Option<Top>,
    },
    NeedMore,
}

/// Where a page's first item stands in its run of equal scores: its score,
/// and how many entries of that score come before it (are newer). A page's
/// `prev` counts the rest of the run: the run's length less `before`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Top {
    pub score: i64,
    pub before: u32,
    /// The item's post.
    pub id: Option<PostId>,
}

impl Top {
    /// The `prev` of a page whose first item stands here, in a run of
    /// `run` entries.
    pub fn prev(self, run: u32) -> Prev {
        Prev {
            min: self.score,
            offset: run.saturating_sub(self.before),
            id: self.id,
        }
    }
}

/// The request with the entry it names counted: `offset` becomes the
/// entries of `stream` scored exactly `max` at or above that entry in feed
/// order (it need not be there: deleted, unfollowed). `stream` holds the
/// run of `max` from its top, in feed order. A request by count is
/// returned as it is.
pub fn positioned<T>(stream: &[(Entry, Slot<T>)], req: &PageRequest) -> PageRequest {
    let (Some(max), Some(id)) = (req.max, req.id) else {
        return *req;
    };
    PageRequest {
        offset: run_beside(stream, Entry::new(max, id), Ordering::Greater),
        ..*req
    }
}

/// The entries of `stream` scored as `named` that are not on `side` of it
/// in feed order: with `Greater`, it and those above it; with `Less`, it
/// and those below it (it need not be there).
fn run_beside<T>(stream: &[(Entry, Slot<T>)], named: Entry, side: Ordering) -> u32 {
    let n = stream
        .iter()
        .filter(|(e, _)| e.score == named.score && feed_order(e, &named) != side)
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Positions a stream that starts at the request's `max` (entries newer than
/// it are dropped too): leaves out the entries scored exactly `max` that
/// the client has already passed, the named entry and those above it, or
/// by count the `offset` newest. (A named request's page also needs its
/// count, for `next`: see [`positioned`].)
pub fn after_seen<E: Scored, T>(
    stream: impl IntoIterator<Item = (E, Slot<T>)>,
    req: &PageRequest,
) -> impl Iterator<Item = (E, Slot<T>)> {
    let max = req.max;
    let named = req.id.zip(max).map(|(id, m)| Entry::new(m, id));
    let mut skip = req.offset;
    stream
        .into_iter()
        .filter(move |(e, _)| match (max, named, e.post()) {
            (Some(m), _, _) if e.score() > m => false,
            (Some(m), Some(named), Some(id)) if e.score() == m => {
                feed_order(&Entry::new(m, id), &named) == Ordering::Greater
            }
            (Some(m), None, _) if e.score() == m && skip > 0 => {
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
/// entries of that score up to and including it, plus the
/// request's offset when that score is the request's `max`.
pub fn cut<E: Scored, T>(
    stream: impl IntoIterator<Item = (E, Slot<T>)>,
    req: &PageRequest,
    complete: bool,
) -> Cut<T> {
    let mut items = Vec::with_capacity(req.limit as usize);
    // (score, entries of that score passed so far) of the current run.
    let mut run: Option<(i64, u32)> = None;
    let mut last: Option<(i64, u32, Option<PostId>)> = None;
    let mut top = None;
    let mut more = false;
    // The entries of `score` the request's offset skipped: the stream does
    // not hold them.
    let skipped = |score: i64| {
        if req.max == Some(score) {
            req.offset
        } else {
            0
        }
    };
    for (entry, slot) in stream {
        let passed = match run {
            Some((score, n)) if score == entry.score() => n + 1,
            _ => 1,
        };
        run = Some((entry.score(), passed));
        if let Slot::Shown(item) = slot {
            if items.len() == req.limit as usize {
                more = true;
                break;
            }
            if items.is_empty() {
                top = Some(Top {
                    score: entry.score(),
                    before: passed - 1 + skipped(entry.score()),
                    id: entry.post(),
                });
            }
            items.push(item);
            last = Some((entry.score(), passed, entry.post()));
        }
    }
    if !more && !complete {
        return Cut::NeedMore;
    }
    let next = match last {
        Some((score, passed, id)) if more => Some(Cursor {
            max: score,
            offset: passed + skipped(score),
            id,
        }),
        _ => None,
    };
    Cut::Page { items, next, top }
}

/// A page read up from a refresh's position (`min`, `offset`): the
/// `limit` shown entries immediately newer than it, newest first.
#[derive(Debug, PartialEq, Eq)]
pub enum CutUp<T> {
    Page {
        items: Vec<T>,
        /// Below the page's last (oldest) item; below the position when the
        /// page is empty.
        next: Cursor,
        /// Above the page's first item; the request's position when the
        /// page is empty (nothing newer yet).
        prev: Prev,
        /// Above each item, in the items' order (the first is `prev`): a
        /// stream's event ids, so that a client that saw an item resumes
        /// right above it.
        marks: Vec<Prev>,
    },
    /// The stream starts too low to decide the page: read further up.
    NeedMore,
}

/// Cuts a refresh page out of `stream`: the feed in order from some entry
/// down to the last entry scored `min` (every entry of that score
/// included), each shown or hidden. `complete_above`: the stream starts at
/// the top of the feed.
///
/// The position leaves the `offset` oldest entries scored `min` below it;
/// the page is the `limit` shown entries just above it. Its `prev` counts
/// the entries of its first item's score from that item down (the stream
/// holds them all: they lie above the position or in the run of `min`),
/// its `next` those of its last item's score from the top of their run
/// down to it.
pub fn cut_up<T>(
    stream: Vec<(Entry, Slot<T>)>,
    req: &PageRequest,
    complete_above: bool,
) -> CutUp<T> {
    let min = req.min.unwrap_or(0);
    let run_at_min = stream.iter().filter(|(e, _)| e.score() == min).count() as u32;
    // A named entry leaves itself and the older entries of its score
    // below; a count, the `offset` oldest.
    let named = req.id.map(|id| Entry::new(min, id));
    let below = match named {
        Some(named) => run_beside(&stream, named, Ordering::Less),
        None => req.offset.min(run_at_min),
    };
    let below = below as usize;
    // Where a page with no item stands: below the entries above the
    // position, or by name below the entry it names (that one and those
    // above it).
    let above_position = match named {
        Some(named) => run_beside(&stream, named, Ordering::Greater),
        None => run_at_min - below as u32,
    };
    // Entries of the first one's score may lie above the stream.
    let open_at =
        |score: i64| !complete_above && stream.first().is_some_and(|(e, _)| e.score() == score);
    if open_at(min) {
        return CutUp::NeedMore;
    }
    let newer = stream.len() - below;
    let mut picked: Vec<usize> = Vec::with_capacity(req.limit as usize);
    for i in (0..newer).rev() {
        if picked.len() == req.limit as usize {
            break;
        }
        if matches!(stream[i].1, Slot::Shown(_)) {
            picked.push(i);
        }
    }
    if picked.len() < req.limit as usize && !complete_above {
        return CutUp::NeedMore;
    }
    let (Some(&newest), Some(&oldest)) = (picked.last(), picked.first()) else {
        return CutUp::Page {
            items: Vec::new(),
            next: Cursor {
                max: min,
                offset: above_position,
                id: req.id,
            },
            prev: Prev {
                min,
                offset: if req.id.is_some() {
                    below as u32
                } else {
                    req.offset
                },
                id: req.id,
            },
            marks: Vec::new(),
        };
    };
    let last_score = stream[oldest].0.score();
    if open_at(last_score) {
        return CutUp::NeedMore;
    }
    let count = |range: &[(Entry, Slot<T>)], score: i64| {
        range.iter().filter(|(e, _)| e.score() == score).count() as u32
    };
    let next = Cursor {
        max: last_score,
        offset: count(&stream[..=oldest], last_score),
        id: Some(stream[oldest].0.id),
    };
    let mark = |i: usize| Prev {
        min: stream[i].0.score(),
        offset: count(&stream[i..], stream[i].0.score()),
        id: Some(stream[i].0.id),
    };
    let prev = mark(newest);
    let marks: Vec<Prev> = picked.iter().rev().map(|&i| mark(i)).collect();
    let mut items = Vec::with_capacity(picked.len());
    let mut stream = stream;
    for i in picked.into_iter().rev() {
        if let Slot::Shown(item) = std::mem::replace(&mut stream[i].1, Slot::Hidden) {
            items.push(item);
        }
    }
    CutUp::Page {
        items,
        next,
        prev,
        marks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{feed_order, PostId};

    /// The entry of post `id` at `score`.
    fn at(score: i64, id: i64) -> Entry {
        Entry::new(score, PostId(id))
    }

    /// The entry of post `id` at `score`, shown.
    fn shown_at(score: i64, id: i64) -> (Entry, Slot<Entry>) {
        (at(score, id), Slot::Shown(at(score, id)))
    }

    fn sorted(mut v: Vec<Entry>) -> Vec<Entry> {
        v.sort_by(feed_order);
        v
    }

    fn shown(stream: &[Entry]) -> Vec<(Entry, Slot<Entry>)> {
        stream.iter().map(|e| (*e, Slot::Shown(*e))).collect()
    }

    /// A position that names post `id` at `score`.
    fn named(max: i64, offset: u32, id: i64) -> Cursor {
        Cursor {
            max,
            offset,
            id: Some(PostId(id)),
        }
    }

    fn named_prev(min: i64, offset: u32, id: i64) -> Prev {
        Prev {
            min,
            offset,
            id: Some(PostId(id)),
        }
    }

    fn page(stream: &[(Entry, Slot<Entry>)], req: PageRequest) -> (Vec<Entry>, Option<Cursor>) {
        let req = positioned(stream, &req);
        match cut(after_seen(stream.iter().cloned(), &req), &req, true) {
            Cut::Page { items, next, .. } => (items, next),
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
        let stream = sorted((1..=7).map(|id| at(100, id)).collect());
        assert_eq!(scroll(&shown(&stream), 2), stream);
    }

    #[test]
    fn next_counts_the_request_offset_only_for_the_same_score() {
        let stream = shown(&sorted(vec![
            at(9, 1),
            at(9, 2),
            at(9, 3),
            at(8, 4),
            at(8, 5),
        ]));
        let (items, next) = page(&stream, PageRequest::after(Cursor::counted(9, 1), 1));
        assert_eq!(items.len(), 1);
        assert_eq!(next, Some(named(9, 2, 2)));
        let (_, next) = page(&stream, PageRequest::after(Cursor::counted(9, 2), 2));
        assert_eq!(next, Some(named(8, 1, 5)));
    }

    #[test]
    fn a_named_position_stays_put_while_its_millisecond_changes() {
        let mut stream = shown(&sorted(vec![at(9, 5), at(9, 4), at(9, 3), at(8, 1)]));
        let (items, next) = page(&stream, PageRequest::first(2));
        assert_eq!(items, vec![at(9, 5), at(9, 4)]);
        let next = next.unwrap();
        assert_eq!(next, named(9, 2, 4));
        // Late posts of that millisecond: 40 sorts above the position
        // ("40" > "4"), 35 below it.
        stream.extend(shown(&[at(9, 40), at(9, 35)]));
        stream.sort_by(|a, b| feed_order(&a.0, &b.0));
        // By count, the client is shown post 4 again; by name, it goes on
        // from right below post 4, the late post below it included, and
        // `next` counts what lies above it now.
        assert_eq!(
            page(&stream, PageRequest::after(Cursor { id: None, ..next }, 2)).0,
            vec![at(9, 4), at(9, 35)]
        );
        let (items, after) = page(&stream, PageRequest::after(next, 2));
        assert_eq!(items, vec![at(9, 35), at(9, 3)]);
        assert_eq!(after, Some(named(9, 5, 3)));
        // The named post may be gone: the position stays where it was.
        stream.retain(|(e, _)| e.id != PostId(4));
        let (items, _) = page(&stream, PageRequest::after(next, 1));
        assert_eq!(items, vec![at(9, 35)]);
        // Up from a name: what lies above it, the late post included.
        let req = PageRequest::before(named_prev(9, 2, 35), 5);
        let end = stream.partition_point(|(e, _)| e.score >= 9);
        let CutUp::Page { items, prev, .. } = cut_up(stream[..end].to_vec(), &req, true) else {
            unreachable!()
        };
        assert_eq!(items, vec![at(9, 5), at(9, 40)]);
        assert_eq!(prev, named_prev(9, 4, 5));
        // Nothing above the top entry: the page is empty, and its `next`,
        // below that entry by name, counts it as passed.
        let req = PageRequest::before(named_prev(9, 4, 5), 5);
        let CutUp::Page {
            items, next, prev, ..
        } = cut_up(stream[..end].to_vec(), &req, true)
        else {
            unreachable!()
        };
        assert!(items.is_empty());
        assert_eq!((next, prev), (named(9, 1, 5), named_prev(9, 4, 5)));
    }

    #[test]
    fn hidden_entries_keep_their_place_in_the_count() {
        // Ids 3 (hidden) and 2, 1 share score 9; 4 is older.
        let stream = vec![
            (at(9, 3), Slot::Hidden),
            shown_at(9, 2),
            shown_at(9, 1),
            shown_at(8, 4),
        ];
        let (items, next) = page(&stream, PageRequest::first(1));
        assert_eq!(items, vec![at(9, 2)]);
        assert_eq!(next, Some(named(9, 2, 2)));
        assert_eq!(scroll(&stream, 1), vec![at(9, 2), at(9, 1), at(8, 4)]);
        // Hiding an entry already passed does not move the rest.
        let mut later = stream.clone();
        later[1].1 = Slot::Hidden;
        let (items, _) = page(&later, PageRequest::after(Cursor::counted(9, 2), 5));
        assert_eq!(items, vec![at(9, 1), at(8, 4)]);
    }

    #[test]
    fn an_entry_leaving_moves_a_count_only_at_its_own_millisecond() {
        let stream = shown(&[at(9, 3), at(9, 2), at(8, 5), at(8, 4), at(7, 1)]);
        let (items, next) = page(&stream, PageRequest::first(3));
        assert_eq!(items, vec![at(9, 3), at(9, 2), at(8, 5)]);
        let next = next.unwrap();
        let by_count = PageRequest::after(Cursor::counted(next.max, next.offset), 5);
        // A passed entry of another millisecond leaves: the count holds.
        let mut later = stream.clone();
        later.remove(0);
        assert_eq!(page(&later, by_count).0, vec![at(8, 4), at(7, 1)]);
        // One of the count's own millisecond leaves: the count skips one,
        // and the position that names its entry does not.
        let mut later = stream.clone();
        later.remove(2);
        assert_eq!(page(&later, by_count).0, vec![at(7, 1)]);
        let by_name = PageRequest::after(next, 5);
        assert_eq!(page(&later, by_name).0, vec![at(8, 4), at(7, 1)]);
    }

    #[test]
    fn next_is_null_at_the_end_and_need_more_when_unsure() {
        let stream = shown(&[at(3, 1), at(2, 2)]);
        assert_eq!(page(&stream, PageRequest::first(2)).1, None);
        let req = PageRequest::first(2);
        assert_eq!(cut(stream.iter().cloned(), &req, false), Cut::NeedMore);
        let req = PageRequest::first(1);
        assert!(matches!(
            cut(stream.iter().cloned(), &req, false),
            Cut::Page { next: Some(_), .. }
        ));
        // Only hidden entries after the last item: the feed ends there.
        let tail = vec![shown_at(3, 1), (at(2, 2), Slot::Hidden)];
        assert_eq!(page(&tail, PageRequest::first(1)).1, None);
    }

    /// The refresh page from `prev` over a whole feed, its items and prev.
    fn up(stream: &[(Entry, Slot<Entry>)], prev: Prev, size: u32) -> (Vec<Entry>, Prev) {
        let req = PageRequest::before(prev, size);
        let end = stream.partition_point(|(e, _)| e.score >= prev.min);
        match cut_up(stream[..end].to_vec(), &req, true) {
            CutUp::Page { items, prev, .. } => (items, prev),
            CutUp::NeedMore => unreachable!("a whole feed always cuts"),
        }
    }

    proptest::proptest! {
        #[test]
        fn paging_up_from_any_prev_shows_what_is_above_it_once_in_order(
            scores in proptest::collection::vec(0i64..6, 0..40),
            hidden in proptest::collection::vec(proptest::bool::weighted(0.2), 40),
            down in 1u32..6,
            size in 1u32..6,
            pages in 0usize..4,
        ) {
            let entries = sorted(
                scores.iter().enumerate().map(|(i, &s)| at(s, i as i64 + 1)).collect(),
            );
            let stream: Vec<(Entry, Slot<Entry>)> = entries
                .iter()
                .zip(&hidden)
                .map(|(e, &h)| (*e, if h { Slot::Hidden } else { Slot::Shown(*e) }))
                .collect();
            // Down a few pages; the last page's prev is where the client
            // turns, and what lies above it is what it saw.
            let mut req = PageRequest::first(down);
            let mut seen = Vec::new();
            let mut turn = Prev::BOTTOM;
            for _ in 0..=pages {
                let Cut::Page { items, next, top } =
                    cut(after_seen(stream.iter().cloned(), &req), &req, true)
                else {
                    unreachable!()
                };
                if let Some(top) = top {
                    let at = stream.iter().position(|(e, _)| *e == items[0]).unwrap();
                    let run = stream[at..].iter().filter(|(e, _)| e.score == top.score).count();
                    turn = top.prev(top.before + run as u32);
                    seen = items.clone();
                }
                match next {
                    Some(c) => req = PageRequest::after(c, down),
                    None => break,
                }
            }
            if seen.is_empty() {
                turn = Prev::BOTTOM;
            }
            let shown: Vec<Entry> =
                stream.iter().filter_map(|(e, s)| matches!(s, Slot::Shown(_)).then_some(*e)).collect();
            let above: Vec<Entry> = match seen.first() {
                Some(first) => shown.iter().take_while(|e| *e != first).copied().collect(),
                None => shown.clone(),
            };
            // Up to the top: each page above the last, every entry once.
            let mut got: Vec<Entry> = Vec::new();
            let mut prev = turn;
            loop {
                let (items, up) = up(&stream, prev, size);
                if items.is_empty() {
                    proptest::prop_assert_eq!(up, prev);
                    break;
                }
                proptest::prop_assert!(items.len() <= size as usize);
                got.splice(0..0, items);
                prev = up;
            }
            proptest::prop_assert_eq!(got, above);
        }
    }

    #[test]
    fn a_refresh_page_carries_cursors_both_ways() {
        // Ids 5, 4 at 9; 3, 2, 1 at 8 (2 hidden); the position leaves 1 below.
        let stream = vec![
            shown_at(9, 5),
            shown_at(9, 4),
            shown_at(8, 3),
            (at(8, 2), Slot::Hidden),
            shown_at(8, 1),
        ];
        let req = PageRequest::before(Prev::counted(8, 1), 2);
        let CutUp::Page {
            items,
            next,
            prev,
            marks,
        } = cut_up(stream.clone(), &req, true)
        else {
            unreachable!()
        };
        assert_eq!(items, vec![at(9, 4), at(8, 3)]);
        assert_eq!(next, named(8, 1, 3));
        assert_eq!(prev, named_prev(9, 1, 4));
        // Above 8/3: the entries of 8 from it down, the hidden one counted.
        assert_eq!(marks, vec![prev, named_prev(8, 3, 3)]);
        // Started above an entry of 9, it decides the page (the cursors
        // count from the items away from the top); started inside the run
        // of 8, it cannot tell that run's length: read more.
        assert!(matches!(
            cut_up(stream[1..].to_vec(), &req, false),
            CutUp::Page { .. }
        ));
        assert_eq!(cut_up(stream[2..].to_vec(), &req, false), CutUp::NeedMore);
        // Nothing newer: the position stays, next is the position from above.
        let req = PageRequest::before(Prev::counted(9, 2), 2);
        let CutUp::Page {
            items, next, prev, ..
        } = cut_up(stream[..2].to_vec(), &req, true)
        else {
            unreachable!()
        };
        assert!(items.is_empty());
        assert_eq!((next, prev), (Cursor::counted(9, 0), Prev::counted(9, 2)));
    }
}
