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
    use crate::engine::cut::{after_seen, cut, positioned, Cut, Slot};
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

    /// A source read as a window makes it (scripts.rs, clause 6), over
    /// `from` (the entries from `max` down) and the sentinel after them:
    /// the first `fetch + 1 + slack` elements. With the sentinel among
    /// them the read reached the floor; else it holds every entry only
    /// above the last score it read.
    fn read_like_window(
        from: &[Entry],
        floor: Option<i64>,
        fetch: usize,
        slack: usize,
    ) -> SourceRead {
        let take = fetch + 1 + slack;
        let ended = from.len() < take;
        let entries = from[..from.len().min(take)].to_vec();
        let cut = match ended {
            true => None,
            false => entries.last().map(|e| e.score),
        };
        SourceRead {
            entries,
            floor,
            cut,
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
        slack: usize,
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
                    read_like_window(&from, floor, fetch, slack)
                })
                .collect();
            let mut reads = reads;
            page_reads(&mut reads.iter_mut().collect::<Vec<_>>(), fetch);
            let merged = merge(&reads);
            let complete = merged.horizon == Horizon::Complete;
            // As the reader: a named position is counted in what was read.
            let stream: Vec<_> = merged
                .entries
                .iter()
                .map(|e| (*e, Slot::Shown(*e)))
                .collect();
            let at = positioned(&stream, req);
            match cut(after_seen(stream, &at), &at, complete) {
                Cut::Page { items, next, .. } => return (items, next),
                Cut::NeedMore => match merged.horizon {
                    Horizon::Truncated(_) => fetch *= 2,
                    _ => {
                        let stream: Vec<_> = all.iter().map(|e| (*e, Slot::Shown(*e))).collect();
                        let at = positioned(&stream, req);
                        match cut(after_seen(stream, &at), &at, true) {
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
            slack in 0usize..4,
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
                let (items, next) = page_of(&sources, &caps[..n_sources], slack, &all, &req);
                prop_assert!(items.len() <= req.limit as usize);
                seen.extend(items);
                if let Some(c) = next {
                    // The count names the same place as the entry.
                    let named = Entry::new(c.max, c.id.expect("a page's next names its entry"));
                    let passed = all
                        .iter()
                        .take_while(|e| feed_order(e, &named).is_le())
                        .filter(|e| e.score == c.max)
                        .count();
                    prop_assert_eq!(c.offset as usize, passed);
                }
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
