//! The publishes of this instance that have not answered their clients
//! yet. This instance's streams hear a post at the moment its publish
//! gets Redis's answer; they hold it until that publish has answered (for
//! at most a bound), so that the publish does not wait for the cores
//! behind thousands of its own post's events.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::types::PostId;

/// The longest a stream holds a post back for its publish to answer: a
/// publish stalled on Redis (its wait for the replicas, say) does not hold
/// the streams for longer.
pub const MOST_HELD: Duration = Duration::from_millis(50);

/// The posts whose publishes here are under way. Holds at most one id per
/// publish in flight (each removes its own when it ends, answered or not).
#[derive(Default)]
pub struct Answering {
    posts: Mutex<HashSet<PostId>>,
    answered: Notify,
}

/// A publish under way: its post leaves the publishes under way when this
/// drops. The publish hands it to whoever writes its answer, who drops it
/// once the answer is written.
pub struct Publishing {
    answering: Arc<Answering>,
    post: PostId,
}

impl std::fmt::Debug for Publishing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Publishing").field(&self.post).finish()
    }
}

impl Answering {
    /// Notes `post`'s publish as under way until the returned guard drops.
    pub fn publishing(self: &Arc<Self>, post: PostId) -> Publishing {
        self.lock().insert(post);
        Publishing {
            answering: self.clone(),
            post,
        }
    }

    /// Returns once `post`'s publish here has answered (at once if it is
    /// not a publish of this instance), or at `deadline`.
    pub async fn answered(&self, post: PostId, deadline: Instant) {
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            // Registered before the check: an answer between the two wakes it.
            answered.as_mut().enable();
            if !self.lock().contains(&post) {
                return;
            }
            if tokio::time::timeout_at(deadline, answered).await.is_err() {
                return;
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<PostId>> {
        match self.posts.lock() {
            Ok(posts) => posts,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl Drop for Publishing {
    fn drop(&mut self) {
        self.answering.lock().remove(&self.post);
        self.answering.answered.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_post_is_held_until_its_publish_answers() {
        let answering = Arc::new(Answering::default());
        let publishing = answering.publishing(PostId(7));
        let waiter = {
            let answering = answering.clone();
            tokio::spawn(async move {
                let far = Instant::now() + Duration::from_secs(60);
                answering.answered(PostId(7), far).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiter.is_finished(),
            "the post was told before its publish answered"
        );
        drop(publishing);
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the post is told once its publish has answered")
            .unwrap();
    }

    #[tokio::test]
    async fn a_post_of_another_instance_or_a_stalled_publish_is_not_held_past_the_bound() {
        let answering = Arc::new(Answering::default());
        let far = Instant::now() + Duration::from_secs(60);
        tokio::time::timeout(Duration::from_secs(10), answering.answered(PostId(1), far))
            .await
            .expect("a post no publish here holds is told at once");

        let _stalled = answering.publishing(PostId(2));
        drop(answering.publishing(PostId(3)));
        let deadline = Instant::now() + Duration::from_millis(20);
        answering.answered(PostId(2), deadline).await;
        assert!(Instant::now() >= deadline, "told before the bound");
    }
}
