//! Merging the sources of a home feed (the reader's inbox and the outboxes it
//! pulls) into one de-duplicated stream, and telling how far down that stream
//! can be trusted.

use std::collections::HashSet;

pub use crate::types::Horizon;
use crate::types::{feed_order, horizon, Entry, SourceRead};

/// The merged stream: every entry strictly above the horizon, once.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    pub entries: Vec<Entry>,
    pub horizon: Horizon,
}

/// Merges source reads. Only entries above every source's horizon are kept:
/// below it, some source may be missing entries it should hold.
pub fn merge(reads: &[SourceRead]) -> Merged {
    let horizon = horizon(reads);
    let total: usize = reads.iter().map(|r| r.entries.len()).sum();
    let mut entries = Vec::with_capacity(total);
    for read in reads {
        entries.extend(
            read.entries
                .iter()
                .copied()
                .filter(|e| horizon.trusts(e.score)),
        );
    }
    entries.sort_unstable_by(feed_order);
    let mut seen = HashSet::with_capacity(entries.len());
    entries.retain(|e| seen.insert(e.id));
    Merged { entries, horizon }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cut::{after_seen, cut, Cut, Slot};
    use crate::types::{page_reads, Cursor, PageRequest, PostId};
    use proptest::prelude::*;

    fn read(entries: &[(i64, i64)], floor: Option<i64>, truncated: bool) -> SourceRead {
        let mut entries: Vec<Entry> = entries
            .iter()
            .map(|&(s, id)| Entry::new(s, PostId(id)))
            .collect();
        entries.sort_by(feed_order);
        let cut = if truncated {
            entries.last().map(|e| e.score)
        } else {
            None
        };
        SourceRead {
            entries,
            floor,
            cut,
        }
    }

    #[test]
    fn duplicates_across_sources_appear_once() {
        let m = merge(&[
            read(&[(5, 1), (3, 2)], None, false),
            read(&[(5, 1), (4, 3)], None, false),
        ]);
        assert_eq!(
            m.entries,
            vec![
                Entry::new(5, PostId(1)),
                Entry::new(4, PostId(3)),
                Entry::new(3, PostId(2))
            ]
        );
        assert_eq!(m.horizon, Horizon::Complete);
    }

    #[test]
    fn entries_at_or_below_a_horizon_are_dropped() {
        let m = merge(&[
            read(&[(9, 1), (5, 2), (2, 3)], None, false),
            read(&[(8, 4), (5, 5)], None, true),
        ]);
        assert_eq!(m.horizon, Horizon::Truncated(5));
        assert_eq!(
            m.entries,
            vec![Entry::new(9, PostId(1)), Entry::new(8, PostId(4))]
        );
        let m = merge(&[
            read(&[(9, 1), (5, 2)], Some(6), false),
            read(&[(8, 4), (7, 5)], None, true),
        ]);
        assert_eq!(m.horizon, Horizon::Truncated(7));
        let m = merge(&[read(&[(9, 1), (5, 2)], Some(5), true)]);
        assert_eq!(m.horizon, Horizon::Floor(5));
        assert_eq!(m.entries, vec![Entry::new(9, PostId(1))]);
    }

    /// A source read as the SOURCES script makes it, over `from` (the entries
    /// from `max` down) and the sentinel after them (at the floor, or
    /// `-inf`): `fetch + 1` entries, then the rest of a run of equal scores
    /// the limit cut (up to `ties` more), and the cut that follows.
    fn read_like_range(
        from: &[Entry],
        floor: Option<i64>,
        fetch: usize,
        ties: usize,
    ) -> SourceRead {
        let read = |entries: &[Entry], cut| SourceRead {
            entries: entries.to_vec(),
            floor,
            cut,
        };
        // The sentinel is read (the floor reached) within fetch + 1.
        if from.len() < fetch + 1 {
            return read(from, None);
        }
        let s = from[fetch].score;
        let tied = fetch > 0 && from[fetch - 1].score == s;
        if !tied || ties == 0 {
            return read(&from[..=fetch], Some(s));
        }
        let run = from[fetch + 1..]
            .iter()
            .take_while(|e| e.score == s)
            .count();
        let sentinel_at_s = floor == Some(s);
        // Entries of score s after the limit, then the sentinel if it has s.
        let rest = run + usize::from(sentinel_at_s && fetch + 1 + run == from.len());
        let taken = rest.min(ties);
        let entries = &from[..=fetch + taken.min(run)];
        if taken == rest && rest > run {
            read(entries, None)
        } else if taken < ties {
            read(entries, Some(s - 1))
        } else {
            read(entries, Some(s))
        }
    }

    /// A model of the engine's read loop over in-memory sources: each source
    /// holds some of the posts (every post in at least one source), is read
    /// `window` entries at a time and may be trimmed to a cap; when the merge
    /// cannot decide a page it reads more, and past a floor it answers from
    /// the full list (as the engine answers from PostgreSQL).
    fn page_of(
        sources: &[Vec<Entry>],
        caps: &[Option<usize>],
        ties: usize,
        all: &[Entry],
        req: &PageRequest,
    ) -> (Vec<Entry>, Option<Cursor>) {
        let mut fetch = req.window();
        loop {
            let reads: Vec<SourceRead> = sources
                .iter()
                .zip(caps)
                .map(|(src, cap)| {
                    let kept = &src[..cap.map_or(src.len(), |c| c.min(src.len()))];
                    let floor = match cap {
                        Some(c) if src.len() > *c => {
                            Some(src[*c].score.max(kept.last().map_or(i64::MIN, |e| e.score)))
                        }
                        _ => None,
                    };
                    let from: Vec<Entry> = kept
                        .iter()
                        .copied()
                        .filter(|e| req.max.is_none_or(|m| e.score <= m))
                        .collect();
                    read_like_range(&from, floor, fetch, ties)
                })
                .collect();
            let mut reads = reads;
            page_reads(&mut reads.iter_mut().collect::<Vec<_>>(), fetch);
            let merged = merge(&reads);
            let complete = merged.horizon == Horizon::Complete;
            let stream = merged.entries.iter().map(|e| (*e, Slot::Shown(*e)));
            match cut(after_seen(stream, req), req, complete) {
                Cut::Page { items, next, .. } => return (items, next),
                Cut::NeedMore => match merged.horizon {
                    Horizon::Truncated(_) => fetch *= 2,
                    _ => {
                        let stream = all.iter().map(|e| (*e, Slot::Shown(*e)));
                        match cut(after_seen(stream, req), req, true) {
                            Cut::Page { items, next, .. } => return (items, next),
                            Cut::NeedMore => unreachable!(),
                        }
                    }
                },
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn any_sources_and_page_sizes_yield_every_post_once_in_order(
            posts in prop::collection::vec((0i64..12, 1u8..=255), 0..120),
            n_sources in 1usize..6,
            caps in prop::collection::vec(prop::option::of(3usize..40), 6),
            sizes in prop::collection::vec(1u32..8, 1..10),
            ties in 0usize..4,
        ) {
            // Unique ids, few distinct scores: many ties.
            let mut all: Vec<Entry> = posts
                .iter()
                .enumerate()
                .map(|(i, &(score, _))| Entry::new(score, PostId(i as i64 + 1)))
                .collect();
            all.sort_by(feed_order);
            let mut sources = vec![Vec::new(); n_sources];
            for (i, &(_, mask)) in posts.iter().enumerate() {
                let e = all.iter().find(|e| e.id == PostId(i as i64 + 1)).copied().unwrap();
                let mut placed = false;
                for (s, src) in sources.iter_mut().enumerate() {
                    if mask & (1 << s) != 0 {
                        src.push(e);
                        placed = true;
                    }
                }
                if !placed {
                    sources[i % n_sources].push(e);
                }
            }
            for src in &mut sources {
                src.sort_by(feed_order);
            }
            let mut seen = Vec::new();
            let mut req = PageRequest::first(sizes[0]);
            for turn in 0.. {
                let (items, next) = page_of(&sources, &caps[..n_sources], ties, &all, &req);
                prop_assert!(items.len() <= req.limit as usize);
                seen.extend(items);
                match next {
                    Some(c) => req = PageRequest::after(c, sizes[(turn + 1) % sizes.len()]),
                    None => break,
                }
                prop_assert!(turn < 1000, "the scroll does not end");
            }
            prop_assert_eq!(seen, all);
        }
    }
}
