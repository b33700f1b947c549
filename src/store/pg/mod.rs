//! The PostgreSQL store: the records of truth, through diesel-async.
//!
//! - `pool`: the pool, migrations, creating and dropping databases;
//! - `users` ([`UserRecords`]): users, follows and the admin settings;
//! - `feed` ([`PostRecords`]): posts and the feed queries;
//! - `jobs` ([`JobTable`]): the fan-out jobs table;
//! - `accounts` ([`AccountRecords`]): suspended and deleted accounts,
//!   their purge, tasks;
//! - `profiles` ([`ProfileRecords`]): accounts with their counts,
//!   relationships, follow lists;
//! - `filters` ([`FilterRecords`]): users' keyword filters;
//! - `lists` ([`ListRecords`]): users' lists and their members;
//! - `markers` ([`MarkerRecords`]): where users stopped reading;
//! - `notifications` ([`NotificationRecords`]): new followers, told.
//!
//! Each of those types is reached from [`PgStore`] (`pg.users()`, …).
//!
//! Simple reads and writes use diesel's DSL; the feed queries that need
//! `LATERAL` or `FETCH … WITH TIES` are hand-written SQL with bound
//! parameters, prepared once per connection (`prepared`). The store
//! records what the engine decides: whether an author is big-V, whom a post
//! goes to, what a job does are the engine's.

mod accounts;
mod feed;
mod jobs;
pub use jobs::{HEARTBEAT, QUIET_INSTANCE};
mod filters;
pub use filters::{
    FilterFields, FilterRecords, FilterRow, FilterWithKeywords, KeywordOp, KeywordRow, Refused,
};
mod lists;
pub use lists::{HomeChanges, ListFields, ListRecords, ListRow, MembersRefused};
mod markers;
pub use markers::{MarkerChange, MarkerRecords, MarkerRow};
mod notifications;
pub use notifications::{
    NotificationFilter, NotificationRecords, NotificationRow, KEPT as NOTIFICATIONS_KEPT,
};
pub mod models;
mod pool;
mod prepared;
mod profiles;
pub mod schema;
mod users;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use diesel_async::SimpleAsyncConnection;

use crate::error::AppResult;
use crate::settings::DatabaseSettings;

pub use accounts::{AccountRecords, StatusChange, TASK_KEPT_DAYS};
pub use feed::{Deletion, PostRecords, Published, PUBLISH_KEY_HOURS};
pub use jobs::{Claimed, JobTable};
pub use pool::{
    drop_database, ensure_database, run_migrations, split_database_url, with_database, MIGRATIONS,
};
use pool::{Object, Pool};
pub use profiles::{AccountRow, FollowList, IdRange, ProfileRecords, RelationshipRow};
pub use users::{BigVRule, Blocked, EdgeChange, FollowedMany, UserRecords};

/// Ordering of every feed query: the order Redis gives (score, member bytes).
const FEED_ORDER: &str = r#"ORDER BY p.created_at_ms DESC, p.id::text COLLATE "C" DESC"#;

#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    /// Connections checked out: one per query or transaction (tests count
    /// the queries a request makes with it).
    checkouts: Arc<AtomicU64>,
    /// This instance, as its heartbeats and its leases name it.
    instance: i64,
}

/// A random positive id for this process's store.
fn rand_instance() -> i64 {
    (uuid::Uuid::new_v4().as_u64_pair().0 >> 1) as i64
}

impl PgStore {
    /// Creates the database if asked and missing, runs the embedded
    /// migrations, then opens the pool.
    pub async fn connect(settings: &DatabaseSettings) -> AppResult<Self> {
        Ok(PgStore {
            pool: pool::connect(settings).await?,
            checkouts: Arc::new(AtomicU64::new(0)),
            instance: rand_instance(),
        })
    }

    /// The [`UserRecords`] part of the records.
    pub fn users(&self) -> UserRecords<'_> {
        UserRecords(self)
    }

    /// The [`PostRecords`] part of the records.
    pub fn posts(&self) -> PostRecords<'_> {
        PostRecords(self)
    }

    /// The [`JobTable`] part of the records.
    pub fn jobs(&self) -> JobTable<'_> {
        JobTable(self)
    }

    /// The [`AccountRecords`] part of the records.
    pub fn accounts(&self) -> AccountRecords<'_> {
        AccountRecords(self)
    }

    /// The [`ProfileRecords`] part of the records.
    pub fn profiles(&self) -> ProfileRecords<'_> {
        ProfileRecords(self)
    }

    /// The [`ListRecords`] part of the records.
    pub fn lists(&self) -> ListRecords<'_> {
        ListRecords(self)
    }

    /// The [`FilterRecords`] part of the records.
    pub fn filters(&self) -> FilterRecords<'_> {
        FilterRecords(self)
    }

    /// The [`MarkerRecords`] part of the records.
    pub fn markers(&self) -> MarkerRecords<'_> {
        MarkerRecords(self)
    }

    /// The [`NotificationRecords`] part of the records.
    pub fn notifications(&self) -> NotificationRecords<'_> {
        NotificationRecords(self)
    }

    /// This instance's id, as its heartbeats and leases name it.
    pub fn instance(&self) -> i64 {
        self.instance
    }

    async fn conn(&self) -> AppResult<Object> {
        self.checkouts.fetch_add(1, Ordering::Relaxed);
        Ok(self.pool.get().await?)
    }

    /// A connection for the process's own bookkeeping (heartbeats, idle
    /// workers' polls for jobs), left out of [`Self::queries`].
    async fn uncounted_conn(&self) -> AppResult<Object> {
        Ok(self.pool.get().await?)
    }

    /// Queries (and transactions) run so far by this store.
    pub fn queries(&self) -> u64 {
        self.checkouts.load(Ordering::Relaxed)
    }

    /// The PostgreSQL server process of the connection a query takes now
    /// (operators and tests tell connections apart by it).
    pub async fn backend_pid(&self) -> AppResult<i32> {
        #[derive(diesel::QueryableByName)]
        struct Pid {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            pid: i32,
        }
        let mut conn = self.conn().await?;
        let row: Pid = diesel_async::RunQueryDsl::get_result(
            diesel::sql_query("SELECT pg_backend_pid() AS pid"),
            &mut conn,
        )
        .await?;
        Ok(row.pid)
    }

    /// Whether PostgreSQL answers, within the pool's wait
    /// (`database.pool_timeout_ms`) in all: taking a connection, and the
    /// query itself (a partition would hold it for ever).
    pub async fn ping(&self) -> AppResult<()> {
        let bound = self
            .pool
            .timeouts()
            .wait
            .unwrap_or(std::time::Duration::from_secs(2));
        let work = async {
            let mut conn = self.uncounted_conn().await?;
            conn.batch_execute("SELECT 1").await?;
            Ok(())
        };
        tokio::time::timeout(bound, work)
            .await
            .unwrap_or(Err(crate::error::AppError::TimedOut { what: "PostgreSQL" }))
    }
}
