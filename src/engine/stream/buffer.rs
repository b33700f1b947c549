//! A stream's events on their way to its client, bounded twice: at most
//! [`EVENTS`] events and [`BYTES`] of their weight wait at once. An event
//! that finds no room waits for it; one that waits longer than the
//! stream's stall time is not sent, and the stream ends (its client
//! stopped reading).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::Event;

/// Events waiting for a client at most.
pub const EVENTS: usize = 32;

/// Bytes of events (their [`Event::weight`]) waiting for a client at most.
pub const BYTES: u32 = 32 * 1024;

/// Why an event was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unsent {
    /// The client is gone (its receiver dropped).
    Gone,
    /// No room came for it within the stall time.
    Stalled,
}

/// The stream's end of the buffer.
pub(super) struct Sender {
    tx: mpsc::Sender<(Event, OwnedSemaphorePermit)>,
    room: Arc<Semaphore>,
}

/// The client's end: the events of one live stream, in order.
pub struct Events {
    rx: mpsc::Receiver<(Event, OwnedSemaphorePermit)>,
}

pub(super) fn buffer() -> (Sender, Events) {
    let (tx, rx) = mpsc::channel(EVENTS);
    let room = Arc::new(Semaphore::new(BYTES as usize));
    (Sender { tx, room }, Events { rx })
}

impl Sender {
    /// Sends `event` once there is room for it, waiting at most `stall`.
    pub(super) async fn send(&self, event: Event, stall: Duration) -> Result<(), Unsent> {
        let weight = event.weight().min(BYTES);
        let deliver = async {
            let permit = self
                .room
                .clone()
                .acquire_many_owned(weight)
                .await
                .map_err(|_| Unsent::Gone)?;
            self.tx
                .send((event, permit))
                .await
                .map_err(|_| Unsent::Gone)
        };
        tokio::time::timeout(stall, deliver)
            .await
            .unwrap_or(Err(Unsent::Stalled))
    }

    /// Sends `event` if there is room for it now (`Ok(false)` and the
    /// event dropped if not: the stream reads it again).
    pub(super) fn try_send(&self, event: Event) -> Result<bool, Unsent> {
        let weight = event.weight().min(BYTES);
        let Ok(permit) = self.room.clone().try_acquire_many_owned(weight) else {
            return Ok(false);
        };
        match self.tx.try_send((event, permit)) {
            Ok(()) => Ok(true),
            Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Unsent::Gone),
        }
    }

    /// Waits until half the buffer is free again, at most `stall`.
    pub(super) async fn room(&self, stall: Duration) -> Result<(), Unsent> {
        let half = async {
            let bytes = self.room.acquire_many(BYTES / 2).await;
            let slots = self.tx.reserve_many(EVENTS / 2).await;
            match (bytes, slots) {
                (Ok(_), Ok(_)) => Ok(()),
                _ => Err(Unsent::Gone),
            }
        };
        tokio::select! {
            r = tokio::time::timeout(stall, half) => r.unwrap_or(Err(Unsent::Stalled)),
            _ = self.tx.closed() => Err(Unsent::Gone),
        }
    }

    /// Resolves once the client is gone.
    pub(super) async fn closed(&self) {
        self.tx.closed().await
    }
}

impl Events {
    /// The next event; none once the stream ended.
    pub async fn recv(&mut self) -> Option<Event> {
        self.rx.recv().await.map(|(event, _room)| event)
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Option<Event> {
        self.rx.try_recv().ok().map(|(event, _room)| event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{PostId, UserId};

    fn heavy() -> Event {
        Event::Remove {
            author: UserId(1),
            reason: "mute",
        }
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_holds_at_most_the_buffer() {
        let (tx, mut rx) = buffer();
        let stall = Duration::from_millis(50);
        let mut sent = 0;
        while tx.send(heavy(), stall).await.is_ok() {
            sent += 1;
            assert!(sent <= EVENTS, "more events wait than the buffer holds");
        }
        assert_eq!(sent, EVENTS.min((BYTES / heavy().weight()) as usize));
        assert_eq!(tx.send(heavy(), stall).await, Err(Unsent::Stalled));
        // Read one: there is room for one more.
        assert!(rx.recv().await.is_some());
        assert_eq!(tx.send(heavy(), stall).await, Ok(()));
        drop(rx);
        assert_eq!(tx.send(heavy(), stall).await, Err(Unsent::Gone));
    }

    #[tokio::test]
    async fn bytes_bound_what_waits_whatever_the_count() {
        let (tx, _rx) = buffer();
        let post = |n: usize| Event::Post {
            post: crate::types::Post {
                id: PostId(1),
                author_id: UserId(2),
                author_username: "a".into(),
                body: "x".repeat(n),
                created_at_ms: 3,
                meta: None,
            },
            id: crate::types::Prev::counted(3, 1),
            author: None,
        };
        let big = post(BYTES as usize / 4).weight();
        let mut sent = 0u32;
        while tx
            .send(post(BYTES as usize / 4), Duration::from_millis(50))
            .await
            .is_ok()
        {
            sent += big;
        }
        assert!(sent <= BYTES, "{sent} bytes wait");
        assert!(sent > BYTES - big, "{sent} bytes wait");
    }
}
