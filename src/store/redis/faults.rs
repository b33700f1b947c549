//! Injected Redis faults, for tests that prove the engine survives them
//! (the stateful model test arms them between operations). Inert unless
//! armed: one atomic load per Redis call.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// What an armed fault does to a Redis call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call never reaches Redis: as if the connection were refused.
    Refuse,
    /// The call runs, but its reply is lost: the caller sees a timeout.
    LoseReply,
    /// A change to the copies of the marks reaches all of them but the
    /// first, and the caller sees the call refused: as when one master is
    /// down. Any other call is refused.
    CopyBehind,
}

#[derive(Debug, Default)]
pub struct Faults {
    armed: AtomicU32,
    kind: AtomicU8,
}

impl Faults {
    /// The next `calls` Redis calls fail with `fault`.
    pub fn arm(&self, calls: u32, fault: Fault) {
        self.kind.store(fault as u8, Ordering::SeqCst);
        self.armed.store(calls, Ordering::SeqCst);
    }

    pub fn disarm(&self) {
        self.armed.store(0, Ordering::SeqCst);
    }

    /// Whether calls are to fail still.
    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst) > 0
    }

    /// The fault for this call, if one is armed.
    pub(super) fn take(&self) -> Option<Fault> {
        if self.armed.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.armed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()?;
        Some(self.kind())
    }

    /// Whether the next call is to leave a copy of the marks behind (and
    /// takes the fault if so).
    pub(super) fn take_copy_behind(&self) -> bool {
        self.kind() == Fault::CopyBehind && self.take().is_some()
    }

    fn kind(&self) -> Fault {
        match self.kind.load(Ordering::SeqCst) {
            k if k == Fault::LoseReply as u8 => Fault::LoseReply,
            k if k == Fault::CopyBehind as u8 => Fault::CopyBehind,
            _ => Fault::Refuse,
        }
    }
}
