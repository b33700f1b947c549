//! Deleted posts give back their slots: the ordinary author with the most
//! followers publishes enough posts to turn over its followers' inboxes
//! (warmed first, so that they exist throughout) while 30 % of them are
//! deleted a few posts later; once the fan-out has drained, every
//! follower's inbox is read straight from Redis and a sample of them is
//! scrolled past its cap.
//!
//! Reported: the live entries each inbox holds (against the inbox cap, and
//! against what the same inbox would hold had the deleted posts kept their
//! slots, computed from the same lists), the deleted entries left in them,
//! and per scroll the pages Redis served and those past a floor (from
//! PostgreSQL). Premises, checked before anything is reported:
//! 30 % of the posts were deleted, every publish and delete was answered,
//! every follower's inbox exists, and the author's live posts outnumber the
//! cap (so a full inbox holds only live posts of this run).

use std::collections::{BTreeMap, BTreeSet};

use diesel_async::AsyncPgConnection;
use feed_service::store::redis::layout;
use feed_service::testkit::Tokens;
use feed_service::types::{feed_order, Entry, PostId, UserId};
use serde_json::{json, Value};

use crate::report::Row;
use crate::seed::{self, bar, Layout};
use crate::target::Target;

type R<T> = Result<T, String>;

/// Posts deleted: `DELETED` in every `OF`.
const DELETED: usize = 3;
const OF: usize = 10;

/// A post chosen for deletion is deleted this many posts after it.
const DELETE_AFTER: usize = 5;

/// Followers whose inboxes are read, and of them those scrolled.
const READERS: usize = 300;
const SCROLLED: usize = 30;

/// Items per page of the scrolls.
const PAGE: u32 = 20;

/// The scenario's rows, its account, and the premises that failed.
pub async fn deletes(
    l: &Layout,
    pg: &mut AsyncPgConnection,
    client: &reqwest::Client,
    base: &str,
    keys: &Tokens,
    target: &Target,
    cap: usize,
) -> R<(Vec<Row>, Value, Vec<String>)> {
    let author = seed::ordinary_author(pg, l, true).await?;
    let readers = seed::ids(
        pg,
        &format!(
            "SELECT follower_id AS n FROM follows WHERE followee_id = {author} \
             ORDER BY follower_id LIMIT {READERS}"
        ),
    )
    .await?;
    let tokens: Vec<String> = readers
        .iter()
        .map(|r| keys.user(UserId(*r), 3600).map_err(|e| e.chain()))
        .collect::<R<_>>()?;
    let mut failures = Vec::new();

    // The inboxes exist before the posts come: a first page of each.
    for token in &tokens {
        page(client, base, token, "").await?;
    }

    let posts = posts_for(cap);
    let (published, deleted, unanswered) =
        publish_and_delete(client, base, keys, author, posts).await?;
    crate::big_v::drain(pg, "deletes").await?;
    if unanswered > 0 {
        failures.push(format!(
            "deletes: {unanswered} publish(es) or delete(s) were not answered 201 / 204"
        ));
    }
    if deleted.len() * OF != published.len() * DELETED {
        failures.push(format!(
            "deletes: {} of {} posts deleted, not {DELETED} in {OF}",
            deleted.len(),
            published.len()
        ));
    }

    // What the inboxes hold, straight from Redis.
    let held = inboxes(target, &readers).await?;
    let missing = readers.len() - held.len();
    if missing > 0 {
        failures.push(format!(
            "deletes: {missing} of {} followers' inboxes do not exist",
            readers.len()
        ));
    }
    let deleted_set: BTreeSet<PostId> = deleted.iter().copied().collect();
    let live: Vec<usize> = held
        .values()
        .map(|entries| {
            entries
                .iter()
                .filter(|e| !deleted_set.contains(&e.id))
                .count()
        })
        .collect();
    let deleted_held: usize = held
        .values()
        .map(|entries| {
            entries
                .iter()
                .filter(|e| deleted_set.contains(&e.id))
                .count()
        })
        .sum();
    let had_they_stayed: Vec<usize> = held
        .values()
        .map(|entries| live_if_kept(entries, &published, &deleted_set, cap))
        .collect();

    // Scrolls past the cap: pages from Redis, then past the floor.
    let mut scrolls = Vec::new();
    let b = bar(SCROLLED.min(tokens.len()) as u64, "deletes: scrolls");
    for token in tokens.iter().take(SCROLLED) {
        scrolls.push(scroll(client, base, token, cap).await?);
        b.inc(1);
    }
    b.finish();

    let mean = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len().max(1) as f64;
    let least = live.iter().copied().min().unwrap_or(0);
    let redis_pages: Vec<usize> = scrolls.iter().map(|s| s.redis).collect();
    let whole = cap / PAGE as usize;
    let fewest_pages = redis_pages.iter().copied().min().unwrap_or(0);
    let rows = vec![
        Row::throughput(
            "deletes: 30 % of posts",
            "live entries per inbox",
            mean(&live),
            cap as f64,
            "inbox cap",
        )
        .with_goal(
            format!("every inbox holds its cap of live posts and no deleted one ({least} at least, {deleted_held} deleted held)"),
            least >= cap && deleted_held == 0,
        ),
        Row::throughput(
            "deletes: 30 % of posts",
            "pages from Redis per scroll",
            mean(&redis_pages),
            whole as f64,
            &format!("cap / {PAGE} items"),
        )
        .with_goal(
            format!("at least {} pages from Redis ({fewest_pages} at least)", whole - 1),
            fewest_pages + 1 >= whole,
        ),
    ];
    let account = json!({
        "author": author,
        "author_followers": seed::count(pg, &format!("SELECT follower_count AS n FROM users WHERE id = {author}")).await?,
        "inbox_cap": cap,
        "published": published.len(),
        "deleted": deleted.len(),
        "inboxes_read": held.len(),
        "live_entries_per_inbox": {"mean": mean(&live), "min": least, "max": live.iter().max()},
        "deleted_entries_held": deleted_held,
        "live_entries_had_deleted_posts_kept_their_slots": mean(&had_they_stayed),
        "scrolls": scrolls.len(),
        "pages_per_scroll": {
            "from_redis": mean(&redis_pages),
            "from_redis_min": fewest_pages,
            "past_the_floor": mean(&scrolls.iter().map(|s| s.past_floor).collect::<Vec<_>>()),
            "other_fallbacks": mean(&scrolls.iter().map(|s| s.other).collect::<Vec<_>>()),
        },
    });
    Ok((rows, account, failures))
}

/// Posts the author publishes: enough that its live ones alone outnumber
/// the cap by a tenth, in whole tens (so that exactly 3 in 10 go).
fn posts_for(cap: usize) -> usize {
    (cap * 11 / 10).div_ceil(OF - DELETED) * OF
}

/// Whether the `i`-th post of the run is one to delete.
fn doomed(i: usize) -> bool {
    i % OF < DELETED
}

/// Publishes `n` posts as `author`, deleting each doomed one
/// [`DELETE_AFTER`] posts later: the posts published, those deleted, and
/// the calls not answered as they should be.
async fn publish_and_delete(
    client: &reqwest::Client,
    base: &str,
    keys: &Tokens,
    author: i64,
    n: usize,
) -> R<(Vec<Entry>, Vec<PostId>, usize)> {
    let token = keys.user(UserId(author), 3600).map_err(|e| e.chain())?;
    let b = bar(n as u64, "deletes: publishing, 30 % deleted");
    let (mut published, mut deleted, mut unanswered) = (Vec::new(), Vec::new(), 0);
    for i in 0..n + DELETE_AFTER {
        if i < n {
            let res = client
                .post(format!("{base}/api/v1/posts"))
                .bearer_auth(&token)
                .json(&json!({"body": format!("post {i}")}))
                .send()
                .await
                .map_err(|e| format!("publish: {e}"))?;
            if res.status().as_u16() != 201 {
                unanswered += 1;
                continue;
            }
            let post: Value = res.json().await.map_err(|e| format!("publish: {e}"))?;
            let (Some(id), Some(at)) = (post["id"].as_i64(), post["created_at_ms"].as_i64()) else {
                return Err(format!("publish answered {post}"));
            };
            published.push(Entry::new(at, PostId(id)));
            b.inc(1);
        }
        let Some(j) = i.checked_sub(DELETE_AFTER) else {
            continue;
        };
        if let (true, Some(e)) = (doomed(j), published.get(j)) {
            let res = client
                .delete(format!("{base}/api/v1/posts/{}", e.id.0))
                .bearer_auth(&token)
                .send()
                .await
                .map_err(|e| format!("delete: {e}"))?;
            match res.status().as_u16() {
                204 => deleted.push(e.id),
                _ => unanswered += 1,
            }
        }
    }
    b.finish();
    Ok((published, deleted, unanswered))
}

/// The entries of each reader's inbox that exists, as Redis holds it.
async fn inboxes(target: &Target, readers: &[i64]) -> R<BTreeMap<i64, Vec<Entry>>> {
    let keys: Vec<String> = readers
        .iter()
        .map(|r| target.store.inbox(UserId(*r)))
        .collect();
    let lists = target
        .query(&keys, |pipe, key| {
            pipe.lrange(key, 0, -1);
        })
        .await?;
    let mut out = BTreeMap::new();
    for (r, list) in readers.iter().zip(lists) {
        let members: Vec<Vec<u8>> =
            redis::from_redis_value(list).map_err(|e| format!("LRANGE of {r}'s inbox: {e}"))?;
        if !members.is_empty() {
            out.insert(
                *r,
                members.iter().filter_map(|m| layout::unpack(m)).collect(),
            );
        }
    }
    Ok(out)
}

/// The live entries an inbox would hold had the deleted posts kept their
/// slots: the newest `cap` of what it holds and the run's deleted posts
/// above its lowest entry, less the deleted ones.
fn live_if_kept(
    held: &[Entry],
    published: &[Entry],
    deleted: &BTreeSet<PostId>,
    cap: usize,
) -> usize {
    let Some(lowest) = held.iter().min_by(|a, b| feed_order(b, a)) else {
        return 0;
    };
    let mut all: Vec<Entry> = held.to_vec();
    all.extend(
        published
            .iter()
            .filter(|e| deleted.contains(&e.id) && feed_order(e, lowest).is_lt()),
    );
    all.sort_by(feed_order);
    all.truncate(cap);
    all.iter().filter(|e| !deleted.contains(&e.id)).count()
}

/// One scroll's pages, by where they came from.
#[derive(Debug, Default)]
struct Scroll {
    /// Served from Redis.
    redis: usize,
    /// From PostgreSQL, past a source's floor.
    past_floor: usize,
    /// From PostgreSQL for another reason.
    other: usize,
}

/// Scrolls a home `cap / PAGE + 3` pages deep (or to its end), reading
/// the service's page counters around it (the scrolls run one at a time,
/// and nothing else reads meanwhile).
async fn scroll(client: &reqwest::Client, base: &str, token: &str, cap: usize) -> R<Scroll> {
    let before = pages_served(client, base).await?;
    let mut pages = 0;
    let mut query = String::new();
    for _ in 0..cap / PAGE as usize + 3 {
        let page = page(client, base, token, &query).await?;
        pages += 1;
        let Some(next) = page["next"].as_object() else {
            break;
        };
        query = next
            .iter()
            .map(|(k, v)| format!("&{k}={v}"))
            .collect::<String>();
    }
    let after = pages_served(client, base).await?;
    let redis = (after.0 - before.0) as usize;
    let past_floor = (after.1 - before.1) as usize;
    Ok(Scroll {
        redis,
        past_floor,
        other: pages - (redis + past_floor).min(pages),
    })
}

/// A page of the home, as JSON.
async fn page(client: &reqwest::Client, base: &str, token: &str, query: &str) -> R<Value> {
    let res = client
        .get(format!("{base}/api/v1/feed?limit={PAGE}{query}"))
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| format!("page: {e}"))?;
    if !res.status().is_success() {
        return Err(format!("page answered {}", res.status()));
    }
    res.json().await.map_err(|e| format!("page: {e}"))
}

/// Pages the service has served: from Redis, and from PostgreSQL past a
/// floor (its `/metrics`).
async fn pages_served(client: &reqwest::Client, base: &str) -> R<(f64, f64)> {
    let series = crate::streams::counters(client, base).await?;
    let sum = |labels: &str| -> f64 {
        (series.iter())
            .filter(|(s, _)| s.starts_with("feed_pages_total{") && s.contains(labels))
            .map(|(_, n)| n)
            .sum()
    };
    Ok((sum("source=\"redis\""), sum("reason=\"past_floor\"")))
}
