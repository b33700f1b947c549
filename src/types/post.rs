//! A live post, as the engine hands it out.

/// A live post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    pub id: i64,
    pub author_id: i64,
    pub author_username: String,
    pub body: String,
    /// Milliseconds since the Unix epoch: the feed's score.
    pub created_at_ms: i64,
    /// The app's own JSON object as published, as text (none if none).
    pub meta: Option<String>,
}
