//! Where each view last read its sources (clause 6): a hint of the place of
//! a cursor in a feed list, so that a page below a cursor reads its windows
//! with plain commands instead of searching for the place. A hint is only
//! a guess: the window read at it is checked (`feeds.rs`, `Window::at`),
//! and a source whose guess missed is searched as before. So a hint may be
//! stale, wrong or gone (another instance served the last page, posts
//! arrived, the list was rebuilt) at the cost of that search alone.
//!
//! Bounded by construction: two generations of at most [`PER_GENERATION`]
//! windows each; when the current one is full it becomes the previous one
//! and the oldest is dropped.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::types::{Entry, Scope};

/// Windows remembered per generation (each about 300 bytes: a window's
/// scores), so at most twice this many.
pub const PER_GENERATION: usize = 16_384;

/// A window as it was read: the list's index of its first entry, its
/// entries' scores, and whether it reached the sentinel.
#[derive(Debug, Clone)]
struct Seen {
    start: usize,
    scores: Vec<i64>,
    ended: bool,
}

impl Seen {
    /// The index of the first entry scored at most `max`, if this window
    /// tells it: its place in the window, or the window's end if the window
    /// reached the sentinel.
    fn place(&self, max: i64) -> Option<usize> {
        let above = self.scores.partition_point(|s| *s > max);
        (above < self.scores.len() || self.ended).then_some(self.start + above)
    }
}

/// A view and a hash of a feed list's key (two keys of one hash would
/// only share a guess, which the read then disproves).
type Key = (Scope, u64);

fn key_of(view: Scope, key: &str) -> Key {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    (
        view,
        BuildHasherDefault::<DefaultHasher>::default().hash_one(key),
    )
}

#[derive(Default)]
struct Generations {
    current: HashMap<Key, Seen>,
    previous: HashMap<Key, Seen>,
}

/// The windows views last read, by view and feed list.
#[derive(Default)]
pub struct Places(Mutex<Generations>);

impl Places {
    /// Each key's guessed place of `max`, as `view` last read it.
    pub(super) fn guesses(&self, view: Scope, keys: &[String], max: i64) -> Vec<Option<usize>> {
        let held = self.lock();
        keys.iter()
            .map(|key| {
                let key = key_of(view, key);
                let seen = held.current.get(&key).or_else(|| held.previous.get(&key));
                seen.and_then(|s| s.place(max))
            })
            .collect()
    }

    /// Remembers a window `view` read of `key`, from the list's index
    /// `start`.
    pub(super) fn remember(
        &self,
        view: Scope,
        key: &str,
        start: usize,
        entries: &[Entry],
        ended: bool,
    ) {
        let seen = Seen {
            start,
            scores: entries.iter().map(|e| e.score).collect(),
            ended,
        };
        let mut held = self.lock();
        if held.current.len() >= PER_GENERATION {
            held.previous = std::mem::take(&mut held.current);
        }
        held.current.insert(key_of(view, key), seen);
    }

    /// Moves every remembered window by `by` places (tests: hints that
    /// lie, as after pushes and removals no read saw).
    pub fn mislead(&self, by: isize) {
        let mut held = self.lock();
        let Generations { current, previous } = &mut *held;
        for seen in current.values_mut().chain(previous.values_mut()) {
            seen.start = seen.start.saturating_add_signed(by);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{PostId, UserId};

    fn entries(scores: &[i64]) -> Vec<Entry> {
        scores.iter().map(|s| Entry::new(*s, PostId(*s))).collect()
    }

    #[test]
    fn a_place_is_guessed_only_where_the_window_tells_it() {
        let places = Places::default();
        let view = Scope::Home {
            reader: UserId(1),
            own: false,
        };
        let key = "inbox:1".to_string();
        places.remember(view, &key, 3, &entries(&[90, 80, 80, 70]), false);
        let guess = |max| places.guesses(view, std::slice::from_ref(&key), max)[0];
        assert_eq!(guess(95), Some(3));
        assert_eq!(guess(80), Some(4));
        assert_eq!(guess(75), Some(6));
        assert_eq!(guess(70), Some(6));
        // Below the window's last score: it does not tell.
        assert_eq!(guess(60), None);
        places.remember(view, &key, 3, &entries(&[90, 80]), true);
        assert_eq!(guess(60), Some(5));
        let other = Scope::Author(UserId(1));
        assert_eq!(
            places.guesses(other, std::slice::from_ref(&key), 60),
            vec![None]
        );
        places.mislead(-10);
        assert_eq!(guess(95), Some(0));
    }

    #[test]
    fn at_most_two_generations_are_held() {
        let places = Places::default();
        let view = Scope::Author(UserId(1));
        for i in 0..PER_GENERATION * 3 {
            places.remember(view, &format!("k{i}"), 0, &entries(&[1]), true);
        }
        let held = places.lock();
        assert!(held.current.len() + held.previous.len() <= 2 * PER_GENERATION);
        let held_key = |i: usize| key_of(view, &format!("k{i}"));
        assert!(held.current.contains_key(&held_key(PER_GENERATION * 3 - 1)));
        assert!(held
            .previous
            .contains_key(&held_key(PER_GENERATION * 2 - 1)));
        assert!(!held.previous.contains_key(&held_key(0)));
    }
}
