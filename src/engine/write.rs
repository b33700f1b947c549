//! The write-through policy, written once: a change PostgreSQL has
//! recorded, with the job that would redo it, has its Redis side done by
//! its requester at once, or left to its job.

use std::time::Duration;

use super::stores::{Jobs, Replicas};
use crate::error::{AppError, AppResult};
use crate::types::JobId;

/// Runs a Redis write a call's answer depends on: up to four attempts, a
/// few milliseconds apart, so that a blip does not fail the call.
pub(crate) async fn retried<T, F, Fut>(mut write: F) -> AppResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = AppResult<T>>,
{
    let mut delay = Duration::from_millis(2);
    let mut attempt = 1;
    loop {
        match write().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt == 4 => return Err(e),
            Err(_) => {
                tokio::time::sleep(delay).await;
                delay *= 4;
                attempt += 1;
            }
        }
    }
}

/// The write-through of a change the records hold, with `job` that would
/// redo it: its cache side (`apply`) runs now, retried, and is waited on
/// until a replica holds it (a failover must not lose it), then the job is
/// dropped. If the cache cannot take it, the job stays for a worker,
/// `deferred` is told, and the call answers 503 saying that `queued` is.
pub(crate) async fn write_through<J, C, F, Fut>(
    jobs: &J,
    cache: &C,
    job: Option<JobId>,
    queued: &str,
    apply: F,
    deferred: impl FnOnce(),
) -> AppResult<()>
where
    J: Jobs,
    C: Replicas,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = AppResult<()>>,
{
    let applied = retried(|| async {
        let mark = cache.write_mark();
        apply().await?;
        cache.replicated(mark).await
    })
    .await;
    match applied {
        Ok(()) => {
            let Some(job) = job else { return Ok(()) };
            if let Err(e) = jobs.drop_job(job).await {
                tracing::debug!(error = %e.chain(), "a done job stays for a worker");
            }
            Ok(())
        }
        Err(e) => {
            deferred();
            Err(AppError::Unavailable {
                what: "Redis",
                source: format!("{queued}: {}", e.chain()).into(),
            })
        }
    }
}
