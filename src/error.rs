//! The one error type of the service. Each variant has a stable snake_case
//! code (API.md); the HTTP layer maps it to a status. Causes of internal
//! errors go to the log, never to a response body.

use std::fmt;

pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    Unprocessable(String),
    /// Too many requests; the client may retry after this many seconds.
    #[error("{message}")]
    RateLimited {
        message: String,
        retry_after_secs: u64,
    },
    /// The client took too long to send its request.
    #[error("{0}")]
    RequestTimeout(String),
    /// The service refuses new work until a backlog drains; the client may
    /// retry after this many seconds.
    #[error("{message}")]
    Overloaded {
        message: String,
        retry_after_secs: u64,
    },
    /// A dependency is down or saturated; the client may retry.
    #[error("{what} is unavailable")]
    Unavailable {
        what: &'static str,
        #[source]
        source: BoxError,
    },
    /// A call to a dependency took longer than its bound. The dependency
    /// may be down, or the call may have been too big: callers that can
    /// tell (fan-out, with a ping) decide which.
    #[error("{what} timed out")]
    TimedOut { what: &'static str },
    /// Anything else: a bug or an unexpected failure.
    #[error("{context}")]
    Internal {
        context: String,
        #[source]
        source: BoxError,
    },
}

impl AppError {
    pub fn code(&self) -> &'static str {
        match self {
            AppError::BadRequest(_) => "bad_request",
            AppError::Unauthorized(_) => "unauthorized",
            AppError::Forbidden(_) => "forbidden",
            AppError::NotFound(_) => "not_found",
            AppError::MethodNotAllowed(_) => "method_not_allowed",
            AppError::Conflict(_) => "conflict",
            AppError::PayloadTooLarge(_) => "payload_too_large",
            AppError::Unprocessable(_) => "unprocessable",
            AppError::RateLimited { .. } => "rate_limited",
            AppError::RequestTimeout(_) => "request_timeout",
            AppError::Unavailable { .. }
            | AppError::TimedOut { .. }
            | AppError::Overloaded { .. } => "unavailable",
            AppError::Internal { .. } => "internal",
        }
    }

    /// What a client may read. Internal causes stay in the log.
    pub fn public_message(&self) -> String {
        match self {
            AppError::Internal { .. } => "internal error".to_string(),
            other => other.to_string(),
        }
    }

    #[track_caller]
    pub fn internal(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        let location = std::panic::Location::caller();
        AppError::Internal {
            context: format!(
                "{} (at {}:{})",
                context.into(),
                location.file(),
                location.line()
            ),
            source: source.into(),
        }
    }

    /// The error and its whole cause chain, for the log.
    pub fn chain(&self) -> String {
        let mut out = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(err) = source {
            out.push_str(": ");
            out.push_str(&err.to_string());
            source = err.source();
        }
        out
    }
}

/// PostgreSQL failures: pool exhaustion, lost connections and statement
/// timeouts are `unavailable`.
impl From<diesel::result::Error> for AppError {
    #[track_caller]
    fn from(err: diesel::result::Error) -> Self {
        use diesel::result::Error as E;
        crate::metrics::PG_ERRORS.inc();
        match err {
            E::DatabaseError(diesel::result::DatabaseErrorKind::ClosedConnection, _) => {
                AppError::Unavailable {
                    what: "PostgreSQL",
                    source: err.into(),
                }
            }
            // `statement_timeout`: PostgreSQL is saturated (or waiting on a lock).
            E::DatabaseError(_, ref info) if info.message().contains("statement timeout") => {
                AppError::TimedOut { what: "PostgreSQL" }
            }
            other => AppError::internal("PostgreSQL query failed", other),
        }
    }
}

impl From<diesel_async::pooled_connection::deadpool::PoolError> for AppError {
    fn from(err: diesel_async::pooled_connection::deadpool::PoolError) -> Self {
        crate::metrics::PG_ERRORS.inc();
        AppError::Unavailable {
            what: "PostgreSQL",
            source: err.into(),
        }
    }
}

impl From<redis::RedisError> for AppError {
    #[track_caller]
    fn from(err: redis::RedisError) -> Self {
        crate::metrics::REDIS_ERRORS.inc();
        if err.is_timeout() {
            AppError::TimedOut { what: "Redis" }
        } else if err.is_connection_dropped()
            || err.is_io_error()
            || err.is_connection_refusal()
            || err.is_cluster_error()
            || redirected_inside(&err)
            || matches!(
                err.kind(),
                redis::ErrorKind::Server(
                    redis::ServerErrorKind::MasterDown
                        | redis::ServerErrorKind::ReadOnly
                        | redis::ServerErrorKind::BusyLoading
                )
            )
        {
            // A node down, loading, or a cluster failing over: retry later.
            AppError::Unavailable {
                what: "Redis",
                source: err.into(),
            }
        } else {
            AppError::internal("Redis command failed", err)
        }
    }
}

/// Whether a transaction or a pipeline failed because a command of it met
/// a cluster that moved on (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`): the
/// client does not follow a redirection inside `MULTI`, so the call fails
/// whole while its map of the slots is stale, until the connection is
/// replaced (as for an unavailable node).
fn redirected_inside(err: &redis::RedisError) -> bool {
    use redis::ServerErrorKind::{Ask, ClusterDown, Moved, TryAgain};
    err.clone().into_server_errors().is_some_and(|errs| {
        errs.iter()
            .any(|(_, e)| matches!(e.kind(), Some(Moved | Ask | TryAgain | ClusterDown)))
    })
}

impl From<deadpool_redis::PoolError> for AppError {
    fn from(err: deadpool_redis::PoolError) -> Self {
        crate::metrics::REDIS_ERRORS.inc();
        AppError::Unavailable {
            what: "Redis",
            source: err.into(),
        }
    }
}

/// A message-only error, for sources built from text.
#[derive(Debug)]
pub struct Message(pub String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

pub type AppResult<T> = Result<T, AppError>;
