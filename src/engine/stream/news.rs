//! A new post as this instance's streams get it: read once when its hint
//! arrives, whatever number of streams it goes to, and shared by them.
//!
//! A stream that has sent everything up to its position sends a post it
//! hears of straight away, with the position right above it, when the
//! post is alone on its millisecond above that position: what a read up
//! from the position would send. Anything else (a tie, a stream behind or
//! short of room, a post that could not be read) falls back to that read.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::store::pg::AccountRow;
use crate::types::{Post, PostId, Prev, UserId};

/// How long reading a post for the streams may take before its streams
/// read their pages instead (hints wait behind it, in order).
const READ_WAIT: Duration = Duration::from_millis(500);

/// A post heard of, as read for the streams.
#[derive(Debug)]
pub struct News {
    pub post: Post,
    /// Its author's profile: `None` when no stream here asked for
    /// profiles when it was read, `Some(None)` when the author is no
    /// longer an active account.
    pub author: Option<Option<Arc<AccountRow>>>,
}

/// What a post's hint comes to, once read.
pub(super) enum Heard {
    /// The post, for the streams whose homes show its author.
    News(Arc<News>),
    /// Deleted or gone already: nothing to send.
    Nothing,
    /// It could not be read: its streams read their pages.
    Unread,
}

impl News {
    /// The post's place in a feed.
    pub fn score(&self) -> i64 {
        self.post.created_at_ms
    }

    pub fn id(&self) -> PostId {
        self.post.id
    }

    /// The position right above the post, for a stream that sent every
    /// entry below it and knows of no other on its millisecond.
    pub fn mark(&self) -> Prev {
        Prev {
            min: self.score(),
            offset: 1,
            id: Some(self.id()),
        }
    }

    /// Whether a stream at `at` has not sent it yet (a post on the
    /// position's own millisecond other than the position's entry is
    /// above or below it by an order only a read knows: see [`tied`]).
    pub fn above(&self, at: &Prev) -> bool {
        self.score() > at.min || (self.score() == at.min && at.id != Some(self.id()))
    }
}

/// Whether posts heard of cannot be sent as they are: two on one
/// millisecond, or one on the position's (`at`) own.
pub fn tied(news: &[Arc<News>], at: &Prev) -> bool {
    news.windows(2).any(|w| w[0].score() == w[1].score())
        || news.iter().any(|n| n.score() == at.min)
}

/// Reads the post `post` of `author` for the streams, with its author's
/// profile when `profiles`.
pub(super) async fn hear(engine: &Engine, author: UserId, post: PostId, profiles: bool) -> Heard {
    let read = async {
        let Some(post) = engine.posts().live(post, author).await? else {
            return Ok(Heard::Nothing);
        };
        let author = match profiles {
            false => None,
            true => Some(
                engine
                    .profiles()
                    .profiles(&[author])
                    .await?
                    .pop()
                    .map(Arc::new),
            ),
        };
        Ok::<_, crate::error::AppError>(Heard::News(Arc::new(News { post, author })))
    };
    match tokio::time::timeout(READ_WAIT, read).await {
        Ok(Ok(heard)) => {
            crate::engine::Stats::bump(&engine.stats().stream_news, 1);
            crate::metrics::STREAM_NEWS.inc();
            heard
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e.chain(), "a post heard of could not be read");
            Heard::Unread
        }
        Err(_) => Heard::Unread,
    }
}

/// A post `id` heard of, scored `score` (for tests).
#[cfg(test)]
pub(super) fn heard_of(id: i64, score: i64) -> Arc<News> {
    Arc::new(News {
        post: Post {
            id: PostId(id),
            author_id: UserId(1),
            author_username: "a".into(),
            body: String::new(),
            created_at_ms: score,
            meta: None,
        },
        author: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_post_is_sent_as_heard_only_alone_on_its_millisecond_above_the_position() {
        let at = Prev {
            min: 100,
            offset: 1,
            id: Some(PostId(7)),
        };
        // Above, below, the position's own entry, another on its millisecond.
        assert!(heard_of(8, 101).above(&at));
        assert!(!heard_of(6, 99).above(&at));
        assert!(!heard_of(7, 100).above(&at));
        assert!(heard_of(9, 100).above(&at));
        // Alone on their milliseconds, above it: sent as they are.
        assert!(!tied(&[heard_of(8, 101), heard_of(10, 102)], &at));
        // Two on one millisecond, or one on the position's: a read decides.
        assert!(tied(&[heard_of(8, 101), heard_of(10, 101)], &at));
        assert!(tied(&[heard_of(9, 100)], &at));
        // The position right above a post names it, alone on its millisecond.
        assert_eq!(
            heard_of(8, 101).mark(),
            Prev {
                min: 101,
                offset: 1,
                id: Some(PostId(8))
            }
        );
        // A position by count only (an empty home's) is below every post.
        assert!(heard_of(1, 5).above(&Prev::BOTTOM));
    }
}
