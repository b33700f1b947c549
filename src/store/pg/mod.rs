//! The PostgreSQL store: the records of truth, through diesel-async.
//!
//! - [`pool`]: the pool, migrations, creating and dropping databases;
//! - [`users`]: users, follows and the admin settings;
//! - [`feed`]: posts and the feed queries;
//! - [`jobs`]: the fan-out jobs table.
//!
//! Simple reads and writes use diesel's DSL; the feed queries that need
//! `LATERAL` or `FETCH … WITH TIES` are hand-written SQL with bound
//! parameters, prepared once per connection ([`prepared`]). The store
//! records what the engine decides: whether an author is big-V, whom a post
//! goes to, what a job does are the engine's.

mod feed;
mod jobs;
pub mod models;
mod pool;
mod prepared;
pub mod schema;
mod users;

use diesel_async::pooled_connection::deadpool::{Object, Pool};
use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};

use crate::error::AppResult;
use crate::settings::DatabaseSettings;

pub use feed::{Deletion, EntriesOf, FeedRows};
pub use jobs::Claimed;
pub use pool::{
    drop_database, ensure_database, run_migrations, split_database_url, with_database, MIGRATIONS,
};
pub use users::BigVRule;

/// Ordering of every feed query: the order Redis gives (score, member bytes).
const FEED_ORDER: &str = r#"ORDER BY p.created_at_ms DESC, p.id::text COLLATE "C" DESC"#;

#[derive(Clone)]
pub struct PgStore {
    pool: Pool<AsyncPgConnection>,
}

impl PgStore {
    /// Creates the database if asked and missing, runs the embedded
    /// migrations, then opens the pool.
    pub async fn connect(settings: &DatabaseSettings) -> AppResult<Self> {
        Ok(PgStore {
            pool: pool::connect(settings).await?,
        })
    }

    async fn conn(&self) -> AppResult<Object<AsyncPgConnection>> {
        Ok(self.pool.get().await?)
    }

    pub async fn ping(&self) -> AppResult<()> {
        let mut conn = self.conn().await?;
        conn.batch_execute("SELECT 1").await?;
        Ok(())
    }
}
