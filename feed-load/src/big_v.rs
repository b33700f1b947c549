//! Who is big-V in each scenario, reached through the service's own path:
//! `PUT /api/v1/admin/settings` with the scenario's thresholds. The service
//! then promotes every author with at least `big_v_threshold` followers (a
//! new big-V epoch, recorded in Redis's `pulled`) and demotes every big-V
//! below `big_v_demote_threshold` (queueing the backfill a demotion owes).
//! The tool waits until every fan-out job is done and checks that
//! PostgreSQL holds exactly the big-Vs the scenario needs, each with an
//! epoch. Nothing here writes `users.big_v` itself.
//!
//! The seeded follower counts come in tiers (see `seed.rs`): ordinary
//! authors (at most `O`), the read big-Vs (`R = 2·O`), the big-Vs (`B`),
//! the mega big-V (`U`). A scenario's thresholds sit between two tiers:
//! demote below `lower + 1`, promote at `upper`, so every author of the
//! tiers above is big-V and every author below is ordinary, whatever it
//! was before (no author is left in the hysteresis band).

use std::time::{Duration, Instant};

use diesel_async::AsyncPgConnection;
use feed_service::testkit::Tokens;
use serde_json::{json, Value};

use crate::seed::{self, bar, Layout};

type R<T> = Result<T, String>;

/// How long fan-out jobs may take to drain before the run gives up.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1800);

/// The big-Vs a scenario needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BigVs {
    /// Nobody (the pure-push fan-out: the mega author's post goes to
    /// every follower's inbox).
    Nobody,
    /// The mega author alone (its post goes to its active fans).
    Mega,
    /// The mega author and the big-Vs (publish latency by author class,
    /// and the mixed and sustained scenarios that follow it).
    BigAuthors,
    /// Besides, every read big-V of both read graphs (the read scenarios;
    /// the cohorts' readers follow none of the mega author and big-Vs).
    ReadGraphs,
}

impl BigVs {
    fn name(self) -> &'static str {
        match self {
            BigVs::Nobody => "nobody",
            BigVs::Mega => "the mega author",
            BigVs::BigAuthors => "the mega author and the big-Vs",
            BigVs::ReadGraphs => "the mega author, the big-Vs and the read big-Vs",
        }
    }

    /// `(big_v_threshold, big_v_demote_threshold)`: between the most
    /// followers of the tier below and the fewest of the lowest tier that
    /// is big-V (`Layout::check` makes sure they are 2 apart at least).
    fn thresholds(self, l: &Layout) -> (i64, i64) {
        let between = |lower_max: i64, upper_min: i64| (upper_min, lower_max + 1);
        match self {
            BigVs::Nobody => between(l.readers, l.readers + 2),
            BigVs::Mega => between(l.big_followers, l.readers),
            BigVs::BigAuthors => between(l.read_big_v_followers, l.big_followers),
            BigVs::ReadGraphs => between(l.ordinary_followers_max, l.read_big_v_followers),
        }
    }

    /// The authors that must be big-V (an SQL condition on `id`), and how
    /// many they are.
    fn who(self, l: &Layout) -> (String, i64) {
        let range =
            |r: &std::ops::RangeInclusive<i64>| format!("id BETWEEN {} AND {}", r.start(), r.end());
        let bigs = (r_len(&l.bigs), range(&l.bigs));
        let mut parts: Vec<(i64, String)> = match self {
            BigVs::Nobody => vec![],
            BigVs::Mega => vec![(1, format!("id = {}", l.mega))],
            BigVs::BigAuthors | BigVs::ReadGraphs => vec![(1, format!("id = {}", l.mega)), bigs],
        };
        if self == BigVs::ReadGraphs {
            for g in l.graphs() {
                parts.push((r_len(&g.big_vs), range(&g.big_vs)));
            }
        }
        let n = parts.iter().map(|p| p.0).sum();
        let sql: Vec<String> = parts.into_iter().map(|p| format!("({})", p.1)).collect();
        let sql = if sql.is_empty() {
            "FALSE".to_string()
        } else {
            sql.join(" OR ")
        };
        (sql, n)
    }
}

fn r_len(r: &std::ops::RangeInclusive<i64>) -> i64 {
    (r.end() - r.start() + 1).max(0)
}

/// The service's admin API, as an admin.
pub struct Admin<'a> {
    client: &'a reqwest::Client,
    base: &'a str,
    token: String,
}

impl<'a> Admin<'a> {
    pub fn new(client: &'a reqwest::Client, base: &'a str, keys: &Tokens) -> R<Self> {
        let token = keys.admin(7200).map_err(|e| e.chain())?;
        Ok(Admin {
            client,
            base,
            token,
        })
    }

    /// `PUT /api/v1/admin/settings` with `patch`; the settings now.
    pub async fn settings(&self, patch: &Value) -> R<Value> {
        let res = self
            .client
            .put(format!("{}/api/v1/admin/settings", self.base))
            .bearer_auth(&self.token)
            .json(patch)
            .send()
            .await
            .map_err(|e| format!("PUT /api/v1/admin/settings: {e}"))?;
        let status = res.status();
        let body = res.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(format!(
                "PUT /api/v1/admin/settings {patch} answered {status}: {body}"
            ));
        }
        serde_json::from_str(&body).map_err(|e| format!("PUT /api/v1/admin/settings: {e}"))
    }
}

/// Makes exactly `who` big-V through the service, waits for the fan-out
/// jobs this queues (and any left) and checks the state reached. Returns
/// what was done, for the report.
pub async fn reach(
    pg: &mut AsyncPgConnection,
    admin: &Admin<'_>,
    l: &Layout,
    who: BigVs,
) -> R<Value> {
    let (threshold, demote) = who.thresholds(l);
    admin
        .settings(&json!({"big_v_threshold": threshold, "big_v_demote_threshold": demote}))
        .await?;
    let drained = drain(pg, &format!("big-V: {}", who.name())).await?;
    let (condition, expected) = who.who(l);
    let with_epoch = seed::count(
        pg,
        "SELECT count(*) AS n FROM users WHERE big_v AND big_v_epoch > 0",
    )
    .await?;
    let all = seed::count(pg, "SELECT count(*) AS n FROM users WHERE big_v").await?;
    let wanted = seed::count(
        pg,
        &format!(
            "SELECT count(*) AS n FROM users WHERE big_v AND big_v_epoch > 0 AND ({condition})"
        ),
    )
    .await?;
    if with_epoch != expected || all != expected || wanted != expected {
        return Err(format!(
            "big-V {}: thresholds {threshold}/{demote} left {all} big-Vs ({with_epoch} with an epoch, \
             {wanted} of the {expected} wanted)",
            who.name()
        ));
    }
    Ok(json!({
        "big_vs": who.name(),
        "big_v_threshold": threshold,
        "big_v_demote_threshold": demote,
        "big_vs_with_epoch": with_epoch,
        "seconds_to_drain": drained,
    }))
}

/// Waits until no fan-out job is pending (dead jobs aside); returns the
/// seconds it took.
pub async fn drain(pg: &mut AsyncPgConnection, what: &str) -> R<f64> {
    let b = bar(1, &format!("{what}: fan-out draining"));
    let started = Instant::now();
    while seed::count(pg, "SELECT count(*) AS n FROM fanout_jobs WHERE NOT dead").await? > 0 {
        if started.elapsed() > DRAIN_TIMEOUT {
            return Err(format!(
                "{what}: fan-out jobs still pending after 30 minutes"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.finish();
    Ok(started.elapsed().as_secs_f64())
}
