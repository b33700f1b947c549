//! How a feed list holds an entry (scripts.rs, "The layout of a feed
//! list"): 5 bytes of score above [`EPOCH_MS`], then the post id in 4 bytes
//! (6 from 2³² on), big-endian. The scripts pack what the service pushes
//! (its arguments stay score, id pairs) and return what they read packed;
//! the service unpacks it here.

use crate::types::{Entry, PostId};

/// The layout's name, recorded in Redis (`Keys::layout`).
pub const NAME: &str = "lists-2";

/// The first millisecond an entry can hold: 2020-01-01T00:00:00Z. The last
/// is 2⁴⁰ ms later (November 2054).
pub const EPOCH_MS: i64 = 1_577_836_800_000;

/// The span of scores after [`EPOCH_MS`] an entry can hold.
const SPAN_MS: i64 = 1 << 40;

/// The largest post id an entry can hold (Lua's numbers are exact to 2⁵³).
const MAX_ID: i64 = (1 << 48) - 1;

/// Whether `e` fits the layout: every post the service creates does (its
/// time is the clock's); anything else is refused before it reaches Redis.
pub fn fits(e: &Entry) -> bool {
    (EPOCH_MS..EPOCH_MS + SPAN_MS).contains(&e.score) && (0..=MAX_ID).contains(&e.id.0)
}

/// The packed entry, as the scripts pack it.
pub fn pack(e: &Entry) -> Vec<u8> {
    let score = (e.score - EPOCH_MS).to_be_bytes();
    let id = e.id.0.to_be_bytes();
    let width = if e.id.0 >= 1 << 32 { 6 } else { 4 };
    let mut out = Vec::with_capacity(5 + width);
    out.extend_from_slice(&score[3..]);
    out.extend_from_slice(&id[8 - width..]);
    out
}

/// The entry a packed one holds; `None` for anything else (a sentinel).
pub fn unpack(bytes: &[u8]) -> Option<Entry> {
    if bytes.len() != 9 && bytes.len() != 11 {
        return None;
    }
    let number = |b: &[u8]| b.iter().fold(0i64, |n, &x| (n << 8) | i64::from(x));
    Some(Entry::new(
        EPOCH_MS + number(&bytes[..5]),
        PostId(number(&bytes[5..])),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_in_9_or_11_bytes() {
        for e in [
            Entry::new(EPOCH_MS, PostId(0)),
            Entry::new(1_764_500_000_123, PostId(42)),
            Entry::new(EPOCH_MS + SPAN_MS - 1, PostId((1 << 32) - 1)),
            Entry::new(1_764_500_000_123, PostId(1 << 32)),
            Entry::new(1_764_500_000_123, PostId(MAX_ID)),
        ] {
            assert!(fits(&e));
            let packed = pack(&e);
            assert_eq!(packed.len(), if e.id >= PostId(1 << 32) { 11 } else { 9 });
            assert_eq!(unpack(&packed), Some(e));
        }
        assert_eq!(unpack(b"-inf"), None);
        assert_eq!(unpack(b"1764500000123"), None);
        assert!(!fits(&Entry::new(EPOCH_MS - 1, PostId(1))));
        assert!(!fits(&Entry::new(EPOCH_MS + SPAN_MS, PostId(1))));
        assert!(!fits(&Entry::new(1_764_500_000_123, PostId(MAX_ID + 1))));
    }
}
