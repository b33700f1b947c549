//! A post's place in a feed, and the feed order.
//!
//! A feed is a stream of entries ordered by score (`created_at_ms`)
//! descending, then by the post id's decimal bytes descending: the order
//! Redis gives ties in a sorted set whose members are the ids.

use crate::types::PostId;
use std::cmp::Ordering;

/// One post's place in a feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    pub score: i64,
    pub id: PostId,
}

impl Entry {
    pub fn new(score: i64, id: PostId) -> Self {
        Entry { score, id }
    }
}

/// The floor of the newest `cap` entries of a list read `cap` at a time:
/// the last one's score when the read was full (the list may hold older
/// ones), none when it reached the bottom.
pub fn floor_of_newest(entries: &[Entry], cap: i64) -> Option<i64> {
    (entries.len() as i64 >= cap)
        .then(|| entries.last().map(|e| e.score))
        .flatten()
}

/// Feed order: `Less` means `a` comes first (is newer).
pub fn feed_order(a: &Entry, b: &Entry) -> Ordering {
    b.score.cmp(&a.score).then_with(|| member_cmp(b.id, a.id))
}

/// Compares two ids as Redis compares their members: decimal bytes.
pub fn member_cmp(a: PostId, b: PostId) -> Ordering {
    let (mut ba, mut bb) = ([0u8; 20], [0u8; 20]);
    decimal(a.0, &mut ba).cmp(decimal(b.0, &mut bb))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_order_by_member_bytes_like_redis() {
        // Redis orders members "10" < "9" byte-wise; newest first reverses it.
        let mut v = vec![
            Entry::new(5, PostId(10)),
            Entry::new(5, PostId(9)),
            Entry::new(6, PostId(1)),
        ];
        v.sort_by(feed_order);
        assert_eq!(
            v,
            vec![
                Entry::new(6, PostId(1)),
                Entry::new(5, PostId(9)),
                Entry::new(5, PostId(10))
            ]
        );
    }
}
