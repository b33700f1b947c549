//! Several service processes against one PostgreSQL and one Redis (a node,
//! or the cluster of `FEED_REDIS__CLUSTER_URLS`), as behind a load balancer.

use feed_service::types::{PostId, UserId};
use std::collections::HashSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use diesel::sql_types::BigInt;
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use feed_service::http::auth::JwtKeys;
use feed_service::settings::Settings;
use feed_service::store::redis::RedisStore;
use reqwest::Method;
use secrecy::ExposeSecret;
use serde_json::{json, Value};

use crate::helpers::{metric, test_settings, Cleanup};
use crate::process::{delivered_of, seed, spawn_service, Delivered, Service};

const FOLLOWERS: i64 = 20_000;

struct Instances {
    services: Vec<Service>,
    client: reqwest::Client,
    keys: JwtKeys,
}

impl Instances {
    async fn call(
        &self,
        i: usize,
        method: Method,
        path: &str,
        who: i64,
        body: Option<Value>,
    ) -> Value {
        let token = self.keys.mint(UserId(who), who == 0, 600).unwrap();
        let mut req = self
            .client
            .request(
                method,
                format!("http://127.0.0.1:{}{path}", self.services[i].port),
            )
            .bearer_auth(token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let res = req.send().await.unwrap();
        let status = res.status();
        let text = res.text().await.unwrap();
        assert!(
            status.is_success(),
            "{path} on instance {i}: {status} {text}"
        );
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// Publishes as the seeded author (user 1) through instance `i`.
    async fn publish(&self, i: usize, body: &str) -> i64 {
        let post = self
            .call(
                i,
                Method::POST,
                "/api/v1/posts",
                1,
                Some(json!({ "body": body })),
            )
            .await;
        post["id"].as_i64().unwrap()
    }

    /// An instance's `fanout_inbox_writes_total`.
    async fn inbox_writes(&self, i: usize) -> i64 {
        let base = format!("http://127.0.0.1:{}", self.services[i].port);
        metric(&base, "fanout_inbox_writes_total", "").await as i64
    }
}

#[derive(QueryableByName)]
struct Job {
    #[diesel(sql_type = BigInt)]
    checkpoint: i64,
}

async fn jobs(conn: &mut AsyncPgConnection) -> Vec<i64> {
    let rows: Vec<Job> = diesel::sql_query("SELECT checkpoint FROM fanout_jobs ORDER BY id")
        .load(conn)
        .await
        .unwrap();
    rows.into_iter().map(|j| j.checkpoint).collect()
}

async fn wait_for_jobs(conn: &mut AsyncPgConnection, done: impl Fn(&[i64]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !done(&jobs(conn).await) {
        assert!(Instant::now() < deadline, "jobs: {:?}", jobs(conn).await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn start(settings: &Settings) -> Instances {
    // One fan-out worker each: a job one instance works on can only be
    // taken by the other.
    let env = [
        ("FEED_FEED__FANOUT_BATCH_SIZE", "500".to_string()),
        ("FEED_FEED__FANOUT_WORKERS", "1".to_string()),
        ("FEED_TELEMETRY__LEVEL", "warn".to_string()),
    ];
    let first = spawn_service(settings, &env, Stdio::null()).await;
    let second = spawn_service(settings, &env, Stdio::null()).await;
    Instances {
        services: vec![first, second],
        client: reqwest::Client::new(),
        keys: JwtKeys::new(settings.auth.jwt_secret.expose_secret().as_bytes()).unwrap(),
    }
}

#[tokio::test]
async fn two_instances_share_the_jobs_the_settings_and_one_scroll() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let it = start(&settings).await;
    let mut conn = AsyncPgConnection::establish(settings.database.url.expose_secret())
        .await
        .unwrap();
    seed(&settings, &mut conn, FOLLOWERS).await;

    // Jobs: the first delivery holds one instance's worker, so the second
    // is taken by the other; each is finished once, every inbox gets each
    // post once, and the inbox writes of both add up to exactly that.
    let first = it.publish(0, "one").await;
    wait_for_jobs(&mut conn, |j| j.first().is_some_and(|&c| c > 0)).await;
    let second = it.publish(1, "two").await;
    wait_for_jobs(&mut conn, |j| j.is_empty()).await;
    for post in [first, second] {
        assert_eq!(
            delivered_of(&settings, FOLLOWERS, post, 2).await,
            Delivered {
                with_post: FOLLOWERS,
                other: 0,
                gone: 0
            },
            "post {post}: every inbox holds it, and holds only the two"
        );
    }
    let writes = [it.inbox_writes(0).await, it.inbox_writes(1).await];
    assert!(writes[0] > 0 && writes[1] > 0, "both worked: {writes:?}");
    assert_eq!(writes[0] + writes[1], 2 * FOLLOWERS, "{writes:?}");

    // A scroll whose pages alternate between the instances, while posts
    // keep arriving through both: every post older than the scroll once,
    // newest first.
    let reader = 2;
    let mut posted = vec![second, first];
    for n in 0..25 {
        posted.insert(0, it.publish(n % 2, &format!("post {n}")).await);
    }
    wait_for_jobs(&mut conn, |j| j.is_empty()).await;
    let mut seen = Vec::new();
    let mut next: Option<Value> = None;
    for page in 0.. {
        let query = match &next {
            None => "limit=4".to_string(),
            Some(n) => format!("limit=4&max={}&offset={}", n["max"], n["offset"]),
        };
        let res = it
            .call(
                page % 2,
                Method::GET,
                &format!("/api/v1/feed?{query}"),
                reader,
                None,
            )
            .await;
        seen.extend(
            res["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["id"].as_i64().unwrap()),
        );
        it.publish((page + 1) % 2, &format!("during the scroll {page}"))
            .await;
        next = Some(res["next"].clone()).filter(|n| !n.is_null());
        if next.is_none() {
            break;
        }
    }
    let unique: HashSet<i64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "no post twice: {seen:?}");
    assert_eq!(seen, posted, "every post once, newest first");

    // Settings: a change through one instance is live on the other within
    // a second (its inbox rebuilds use the new cap).
    let changed = it
        .call(
            0,
            Method::PUT,
            "/api/v1/admin/settings",
            0,
            Some(json!({"inbox_max_len": 5})),
        )
        .await;
    assert_eq!(changed["inbox_max_len"], 5);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let redis = RedisStore::new(&settings.redis).unwrap();
    let inbox = redis.keys().inbox(UserId(reader));
    redis.delete(&inbox).await.unwrap();
    let page = it
        .call(1, Method::GET, "/api/v1/feed?limit=3", reader, None)
        .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
    let mut c = redis.connection().await.unwrap();
    let held: i64 = redis::cmd("LLEN")
        .arg(&inbox)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        held,
        5 + 1,
        "rebuilt by the other instance with the new cap (and its sentinel)"
    );
}

#[tokio::test]
async fn replication_is_never_confirmed_across_a_replaced_connection() {
    use feed_service::store::redis::Fault;
    let app = crate::helpers::spawn_app().await;
    let redis = app.engine.redis();
    let mark = redis.write_mark();
    redis.posts().tombstone(PostId(1), 60).await.unwrap();
    // A reply is lost meanwhile: on a cluster the process's connection is
    // replaced, and a `WAIT` on the new one knows nothing of the write.
    redis.faults().arm(1, Fault::LoseReply);
    assert!(redis.ping().await.is_err());
    let confirmed = redis.replicated(mark).await;
    if redis.is_cluster() {
        assert!(
            confirmed.is_err(),
            "a WAIT on another connection confirmed the write"
        );
    } else {
        assert!(
            confirmed.is_ok(),
            "a single node acknowledges each write itself"
        );
    }
    // Redone after the swap, the write is confirmed.
    let mark = redis.write_mark();
    redis.posts().tombstone(PostId(1), 60).await.unwrap();
    redis.replicated(mark).await.unwrap();
}
