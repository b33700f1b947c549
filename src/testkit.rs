//! The surface a tool outside the service (the load tool) drives it with
//! besides its HTTP API: tokens signed as the service signs them, a
//! database made ready, and the service's Redis through the service's own
//! store (its keys, the layout of its lists, its calls, grouped per slot,
//! and each master for statistics). The rest of [`crate::store`] and
//! [`crate::http`] is the service's own business, free to change.

use redis::Value;

use crate::error::AppResult;
use crate::http::auth::JwtKeys;
use crate::settings::{AuthSettings, RedisSettings};
use crate::store::pg::{ensure_database, run_migrations, with_database};
use crate::store::redis::keys::READER_BLOCK;
use crate::store::redis::{layout, Conn, RedisStore};
use crate::types::{Entry, Scope, UserId};

/// Bearer tokens, signed with the configured secret.
pub struct Tokens(JwtKeys);

impl Tokens {
    pub fn new(auth: &AuthSettings) -> AppResult<Self> {
        JwtKeys::from_settings(auth).map(Tokens)
    }

    /// A user's token, valid for `ttl_secs`.
    pub fn user(&self, id: UserId, ttl_secs: u64) -> AppResult<String> {
        self.0.mint(id, false, ttl_secs)
    }

    /// An admin's token, valid for `ttl_secs`.
    pub fn admin(&self, ttl_secs: u64) -> AppResult<String> {
        self.0.mint(UserId(0), true, ttl_secs)
    }
}

/// The URL of the database `name` on the server of `url`, created if
/// missing and migrated: ready for the service.
pub async fn ready_database(url: &str, name: &str) -> AppResult<String> {
    let url = with_database(url, name)?;
    ensure_database(&url).await?;
    run_migrations(&url).await?;
    Ok(url)
}

/// The service's Redis (a single node or a cluster), through its store.
pub struct FeedRedis {
    store: RedisStore,
}

/// A master of [`Connection::masters`]: `None` is the single node.
pub type Master = Option<(String, u16)>;

impl FeedRedis {
    /// The name of the layout of the service's lists.
    pub const LAYOUT: &'static str = layout::NAME;

    pub fn new(settings: &RedisSettings) -> AppResult<Self> {
        Ok(FeedRedis {
            store: RedisStore::new(settings)?,
        })
    }

    pub fn is_cluster(&self) -> bool {
        self.store.is_cluster()
    }

    /// The prefix of every key of the service.
    pub fn prefix(&self) -> &str {
        self.store.keys().prefix()
    }

    /// A reader's inbox.
    pub fn inbox(&self, reader: UserId) -> String {
        self.store.keys().inbox(reader)
    }

    /// An author's active fans (a sorted set scored by last read, ms).
    pub fn active_fans(&self, author: UserId) -> String {
        self.store.keys().active_fans(author)
    }

    /// The `n`th of readers whose inboxes never share a slot's hash tag.
    pub fn apart(n: i64) -> i64 {
        n * READER_BLOCK
    }

    /// An inbox's list as the store holds it: `entries`, newest first,
    /// then its floor (nothing at or below it is claimed).
    pub fn inbox_list(entries: &[Entry], floor: i64) -> Vec<Vec<u8>> {
        let mut list: Vec<Vec<u8>> = entries.iter().map(layout::pack).collect();
        list.push(floor.to_string().into_bytes());
        list
    }

    /// One entry as an inbox holds it.
    pub fn packed(entry: &Entry) -> Vec<u8> {
        layout::pack(entry)
    }

    /// The service's keys that match `pattern`, on every master.
    pub async fn scan(&self, pattern: &str) -> AppResult<Vec<String>> {
        self.store.scan(pattern).await
    }

    /// One command (or more) per key, grouped by slot: one pipeline on a
    /// single node, one per slot on a cluster, sent concurrently.
    pub async fn query_per_slot(
        &self,
        keys: &[String],
        add: impl Fn(&mut redis::Pipeline, &str),
    ) -> AppResult<Vec<Value>> {
        self.store.query_per_slot(keys, add).await
    }

    /// Builds an inbox at `cap` from `entries` (newest first), as a read
    /// rebuilds one.
    pub async fn build_inbox(&self, key: &str, cap: i64, entries: &[Entry]) -> AppResult<()> {
        self.store.feeds().begin_build(key).await?;
        self.store.feeds().fill(key, cap, None, entries, 0).await?;
        Ok(())
    }

    /// Pushes `entries` into each of `inboxes`, as a fan-out does.
    pub async fn push(&self, inboxes: &[String], entries: &[Entry], cap: i64) -> AppResult<()> {
        self.store
            .feeds()
            .push_same(inboxes, entries, cap, None)
            .await?;
        Ok(())
    }

    /// The first `fetch` entries of each list, as a page's range read.
    pub async fn first_ranges(&self, keys: &[String], fetch: usize) -> AppResult<()> {
        self.store
            .feeds()
            .ranges(Scope::Author(UserId(0)), keys, None, fetch)
            .await?;
        Ok(())
    }

    /// Deletes every key of the service's prefix.
    pub async fn delete_all(&self) -> AppResult<u64> {
        self.store.delete_all().await
    }

    /// A connection: keyed commands go to their key's node.
    pub async fn connection(&self) -> AppResult<Connection> {
        Ok(Connection(self.store.connection().await?))
    }
}

/// A connection to the service's Redis.
pub struct Connection(Conn);

impl Connection {
    /// Every master (one `None` on a single node).
    pub async fn masters(&mut self) -> redis::RedisResult<Vec<Master>> {
        self.0.masters().await
    }

    /// `cmd` on one master (`None`: the single node).
    pub async fn query_on<T: redis::FromRedisValue>(
        &mut self,
        master: &Master,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        self.0.query_on(master.as_ref(), cmd).await
    }

    /// A keyed command, on its key's node.
    pub async fn query<T: redis::FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        cmd.query_async(&mut self.0).await
    }
}
