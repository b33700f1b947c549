//! The read path's CPU work: merging a page's source reads and cutting the
//! page with the cursor, for 1, 10, 50 and 200 sources. Throughput is per
//! entry read, so time per item = time per page / entries.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use feed_service::engine::cut::{after_seen, cut, Cut, Slot};
use feed_service::engine::merge::merge;
use feed_service::types::{feed_order, Cursor, Entry, PageRequest, PostId, SourceRead};

/// `sources` reads of one page's window each, with ties and overlaps, as the
/// engine gets them from Redis (each in feed order).
fn reads(sources: usize, req: &PageRequest) -> Vec<SourceRead> {
    let window = req.window();
    (0..sources)
        .map(|s| {
            let mut entries: Vec<Entry> = (0..window)
                .map(|i| {
                    let id = (s * 7 + i * 13) as i64 % 5_000 + 1;
                    Entry::new(1_700_000_000_000 - (id / 3), PostId(id))
                })
                .collect();
            entries.sort_by(feed_order);
            entries.dedup();
            SourceRead {
                cut: entries.last().map(|e| e.score),
                entries,
                floor: None,
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("merge_and_cut");
    for req in [
        PageRequest::first(20),
        PageRequest::after(Cursor::counted(1_700_000_000_000 - 100, 2), 20),
    ] {
        for sources in [1usize, 10, 50, 200] {
            let input = reads(sources, &req);
            let entries: usize = input.iter().map(|r| r.entries.len()).sum();
            group.throughput(Throughput::Elements(entries as u64));
            let name = if req.max.is_none() {
                "first_page"
            } else {
                "next_page"
            };
            group.bench_with_input(BenchmarkId::new(name, sources), &input, |b, input| {
                b.iter(|| {
                    let merged = merge(black_box(input));
                    let stream = merged.entries.iter().map(|e| (*e, Slot::Shown(*e)));
                    match cut(after_seen(stream, &req), &req, false) {
                        Cut::Page { items, next, .. } => black_box((items.len(), next)),
                        Cut::NeedMore => black_box((0, None)),
                    }
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
