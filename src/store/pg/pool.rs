//! The connection pool, migrations, and creating or dropping a database.

use std::time::Duration;

use deadpool::managed::{Manager, Metrics, RecycleError, RecycleResult};
use diesel::sql_types::{BigInt, Text};
use diesel::QueryableByName;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, PoolError, PoolableConnection, RecyclingMethod,
};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};
use futures::FutureExt;
use secrecy::ExposeSecret;

use crate::error::{AppError, AppResult, Message};
use crate::settings::DatabaseSettings;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// A pooled connection used this recently is taken as it is (unless its
/// socket has closed); one idle longer is checked with `SELECT 1` first.
const CHECK_AFTER_IDLE: Duration = Duration::from_secs(1);

/// The service's PostgreSQL pool.
pub type Pool = deadpool::managed::Pool<Checked>;

/// A connection taken from the [`Pool`].
pub type Object = deadpool::managed::Object<Checked>;

/// diesel-async's connection manager, but for the check of a connection
/// taken from the pool: a `SELECT 1` only after [`CHECK_AFTER_IDLE`]. A
/// connection in steady use proves itself with every query, and one that
/// PostgreSQL or the network closed is known by its closed socket; an idle
/// one may have been broken by an outage nobody saw yet.
pub struct Checked(AsyncDieselConnectionManager<AsyncPgConnection>);

impl Manager for Checked {
    type Type = AsyncPgConnection;
    type Error = PoolError;

    async fn create(&self) -> Result<AsyncPgConnection, PoolError> {
        self.0.create().await
    }

    async fn recycle(
        &self,
        conn: &mut AsyncPgConnection,
        metrics: &Metrics,
    ) -> RecycleResult<PoolError> {
        if metrics.last_used() >= CHECK_AFTER_IDLE {
            return self.0.recycle(conn, metrics).await;
        }
        if conn.is_broken() {
            return Err(RecycleError::Message("Broken connection".into()));
        }
        Ok(())
    }
}

/// The advisory lock that lets one instance at a time run the migrations.
const MIGRATION_LOCK: i64 = 0x6665_6564_6d69_6772; // "feedmigr"

/// Creates the database if asked and missing, runs the embedded migrations,
/// then opens the pool.
pub(super) async fn connect(settings: &DatabaseSettings) -> AppResult<Pool> {
    let url = settings.url.expose_secret().to_string();
    if settings.create_if_missing {
        ensure_database(&url).await?;
    }
    run_migrations(&url).await?;
    let statement_timeout = settings.statement_timeout_ms;
    let mut config = ManagerConfig::default();
    // A connection idle for a while is checked (`SELECT 1`) when it is
    // taken from the pool ([`Checked`]), so that the first requests after a
    // PostgreSQL outage do not fail on connections it broke. Warm pages
    // take none.
    config.recycling_method = RecyclingMethod::Verified;
    // A connection is driven by a task of the runtime that opens it. Every
    // one is opened on the runtime that opened the pool (the requests'),
    // whichever runtime first needs it: one opened by the niced fan-out
    // runtime would make the requests that later use it wait on that thread.
    let home = tokio::runtime::Handle::current();
    config.custom_setup = Box::new(move |url| {
        let url = url.to_string();
        let open = async move {
            let mut conn = AsyncPgConnection::establish(&url).await?;
            conn.batch_execute(&format!("SET statement_timeout = {statement_timeout}"))
                .await
                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
            Ok(conn)
        };
        let opened = home.spawn(open);
        async move {
            opened
                .await
                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?
        }
        .boxed()
    });
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(url, config);
    let wait = Duration::from_millis(settings.pool_timeout_ms);
    Pool::builder(Checked(manager))
        .max_size(settings.pool_size)
        // The connection returned last is taken first: under a light,
        // steady load the same few stay in use (statements prepared, no
        // idle check), where taking the oldest would make each one idle
        // past CHECK_AFTER_IDLE and cost a `SELECT 1` on every request.
        .queue_mode(deadpool::managed::QueueMode::Lifo)
        .wait_timeout(Some(wait))
        .create_timeout(Some(wait))
        .recycle_timeout(Some(wait))
        .runtime(deadpool::Runtime::Tokio1)
        .build()
        .map_err(|e| AppError::internal("building the PostgreSQL pool", e))
}

/// Runs the embedded migrations on a blocking thread (the migration harness
/// is synchronous), through diesel-async's connection wrapper, holding an
/// advisory lock so that instances starting together take turns.
pub async fn run_migrations(url: &str) -> AppResult<()> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || -> AppResult<()> {
        let mut conn =
            <AsyncConnectionWrapper<AsyncPgConnection> as diesel::Connection>::establish(&url)
                .map_err(|e| AppError::Unavailable {
                    what: "PostgreSQL",
                    source: e.into(),
                })?;
        let lock = |conn: &mut AsyncConnectionWrapper<AsyncPgConnection>, sql: &str| {
            diesel::RunQueryDsl::execute(
                diesel::sql_query(sql).bind::<BigInt, _>(MIGRATION_LOCK),
                conn,
            )
        };
        lock(&mut conn, "SELECT pg_advisory_lock($1)")?;
        let ran = conn
            .run_pending_migrations(MIGRATIONS)
            .map(|_| ())
            .map_err(|e| AppError::internal("running migrations", Message(e.to_string())));
        lock(&mut conn, "SELECT pg_advisory_unlock($1)")?;
        ran
    })
    .await
    .map_err(|e| AppError::internal("migration task", e))?
}

/// Splits a PostgreSQL URL into (server part, database name, query).
fn url_parts(url: &str) -> AppResult<(&str, &str, Option<&str>)> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let no_name = || {
        AppError::internal(
            "database.url",
            Message("no database name in the URL".into()),
        )
    };
    let slash = base[scheme_end..]
        .rfind('/')
        .map(|i| i + scheme_end)
        .ok_or_else(no_name)?;
    let name = &base[slash + 1..];
    if name.is_empty() {
        return Err(no_name());
    }
    Ok((&base[..slash], name, query))
}

/// The same server and options, another database.
pub fn with_database(url: &str, database: &str) -> AppResult<String> {
    let (server, _, query) = url_parts(url)?;
    Ok(match query {
        Some(q) => format!("{server}/{database}?{q}"),
        None => format!("{server}/{database}"),
    })
}

/// Splits a PostgreSQL URL into (URL of the `postgres` database, database name).
pub fn split_database_url(url: &str) -> AppResult<(String, String)> {
    let (_, name, _) = url_parts(url)?;
    Ok((with_database(url, "postgres")?, name.to_string()))
}

async fn server_connection(url: &str) -> AppResult<(AsyncPgConnection, String)> {
    let (server, name) = split_database_url(url)?;
    let conn = AsyncPgConnection::establish(&server)
        .await
        .map_err(|e| AppError::Unavailable {
            what: "PostgreSQL",
            source: e.into(),
        })?;
    Ok((conn, name))
}

/// Creates the database named in `url` when it does not exist.
pub async fn ensure_database(url: &str) -> AppResult<()> {
    let (mut conn, name) = server_connection(url).await?;
    let exists: i64 = diesel::sql_query("SELECT count(*) AS n FROM pg_database WHERE datname = $1")
        .bind::<Text, _>(&name)
        .get_result::<Count>(&mut conn)
        .await?
        .n;
    if exists == 0 {
        let quoted = name.replace('"', "\"\"");
        match conn
            .batch_execute(&format!("CREATE DATABASE \"{quoted}\""))
            .await
        {
            Ok(()) => tracing::info!(database = %name, "created database"),
            // Another instance created it meanwhile.
            Err(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _,
            )) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Drops a database, disconnecting its sessions (tests clean up with it).
pub async fn drop_database(url: &str) -> AppResult<()> {
    let (mut conn, name) = server_connection(url).await?;
    let quoted = name.replace('"', "\"\"");
    conn.batch_execute(&format!(
        "DROP DATABASE IF EXISTS \"{quoted}\" WITH (FORCE)"
    ))
    .await?;
    Ok(())
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_split_into_server_and_name() {
        let (server, name) =
            split_database_url("postgres://postgres@127.0.0.1:5432/feed?sslmode=disable").unwrap();
        assert_eq!(
            server,
            "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
        );
        assert_eq!(name, "feed");
        assert!(split_database_url("postgres://h:5432/").is_err());
        assert_eq!(
            with_database("postgres://postgres@h/a?x=1", "b").unwrap(),
            "postgres://postgres@h/b?x=1"
        );
    }
}
