//! A Redis of the test's own, stopped, restarted empty, and hung, in the
//! middle of scrolls and fan-outs.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use feed_service::types::{Post, UserId};
use reqwest::{Method, StatusCode};
use secrecy::SecretString;
use serde_json::json;

use crate::helpers::{error_code, ids, newest_first, spawn_app_with, test_settings, TestApp};

struct OwnRedis {
    port: u16,
    dir: std::path::PathBuf,
    child: Option<Child>,
}

impl OwnRedis {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("feed-redis-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = OwnRedis {
            port,
            dir,
            child: None,
        };
        redis.up().await;
        redis
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts (again, empty) on the same port.
    async fn up(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(client) = redis::Client::open(self.url()) {
                if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                    if redis::cmd("PING")
                        .query_async::<String>(&mut c)
                        .await
                        .is_ok()
                    {
                        return;
                    }
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not come up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn down(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success());
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.signal("-CONT");
        }
        self.down();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn app_on(redis: &OwnRedis) -> TestApp {
    let mut settings = test_settings();
    settings.redis.url = SecretString::from(redis.url());
    settings.redis.cluster_urls = SecretString::from("");
    settings.redis.timeout_ms = 300;
    spawn_app_with(settings).await
}

const BASE: i64 = 1_700_000_000_000;

#[tokio::test]
async fn a_redis_outage_mid_scroll_loses_and_repeats_nothing() {
    let mut redis = OwnRedis::start().await;
    let app = app_on(&redis).await;
    app.set_settings(json!({"big_v_threshold": 3, "big_v_demote_threshold": 2}))
        .await;
    let authors = app.users("author", 3).await;
    let reader = app.create_user("reader").await;
    let fans = app.users("fan", 2).await;
    for a in &authors {
        app.follow(&reader, a).await;
    }
    for f in &fans {
        app.follow(f, &authors[0]).await; // a big-V among them
    }
    let mut before: Vec<Post> = Vec::new();
    for i in 0..60 {
        before.push(
            app.publish_at(&authors[i % 3], "old", BASE + (i / 8) as i64)
                .await,
        );
    }
    app.settle().await;
    let mut during = Vec::new();
    let seen = app
        .scroll_with(
            "/api/v1/feed",
            &reader.token,
            &[3, 5, 2],
            async |turn| match turn {
                2 => redis.down(),
                3 | 4 => {
                    // Down: publishes still succeed, readiness says so, health does not.
                    during.push(app.publish(&authors[turn % 3], "while down").await);
                    let res = app.request(Method::GET, "/readyz", None, None).await;
                    assert_eq!(
                        error_code(res).await,
                        (StatusCode::SERVICE_UNAVAILABLE, "unavailable".into())
                    );
                    let res = app.request(Method::GET, "/healthz", None, None).await;
                    assert_eq!(res.status(), StatusCode::OK);
                }
                6 => redis.up().await, // back, and empty
                _ => {}
            },
        )
        .await;
    assert_eq!(ids(&seen), newest_first(&before));
    // The jobs queued while Redis was down complete; nothing is missing.
    app.settle().await;
    let all: Vec<Post> = before.iter().chain(&during).cloned().collect();
    for size in [1, 4, 7] {
        assert_eq!(
            app.home(&reader, size).await,
            newest_first(&all),
            "page size {size}"
        );
    }
    let fan_feed = app.home(&fans[0], 5).await;
    let expected: Vec<Post> = all
        .iter()
        .filter(|p| p.author_id == UserId(authors[0].id))
        .cloned()
        .collect();
    assert_eq!(fan_feed, newest_first(&expected));
    let res = app.request(Method::GET, "/readyz", None, None).await;
    assert_eq!(res.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_cursor_from_postgresql_works_on_redis_and_back() {
    let mut redis = OwnRedis::start().await;
    let app = app_on(&redis).await;
    let authors = app.users("author", 2).await;
    let reader = app.create_user("reader").await;
    for a in &authors {
        app.follow(&reader, a).await;
    }
    let mut posts = Vec::new();
    for i in 0..30 {
        posts.push(
            app.publish_at(&authors[i % 2], "p", BASE + (i / 6) as i64)
                .await,
        );
    }
    app.settle().await;
    // Alternate: every page switches between Redis and PostgreSQL.
    let mut up = true;
    let seen = app
        .scroll_with("/api/v1/feed", &reader.token, &[4], async |_| {
            if up {
                redis.down();
            } else {
                redis.up().await;
            }
            up = !up;
        })
        .await;
    assert_eq!(ids(&seen), newest_first(&posts));
}

#[tokio::test]
async fn a_hung_redis_does_not_hang_requests() {
    let redis = OwnRedis::start().await;
    let app = app_on(&redis).await;
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    let post = app.publish(&author, "before the hang").await;
    app.settle().await;
    redis.signal("-STOP");
    // Each call is bounded by redis.timeout_ms; the reqwest timeout only
    // turns a hang into a failure instead of a stuck test.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let res = client
        .get(app.url("/api/v1/feed"))
        .bearer_auth(&reader.token)
        .send()
        .await
        .expect("the feed answers while Redis hangs");
    assert_eq!(res.status(), StatusCode::OK);
    let page: serde_json::Value = res.json().await.unwrap();
    assert_eq!(page["items"][0]["id"], post.id.0);
    let res = client
        .post(app.url("/api/v1/posts"))
        .bearer_auth(&author.token)
        .json(&json!({"body": "during the hang"}))
        .send()
        .await
        .expect("a publish answers while Redis hangs");
    assert_eq!(res.status(), StatusCode::CREATED);
    let res = client
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz answers");
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    redis.signal("-CONT");
    app.settle().await;
    assert_eq!(app.home(&reader, 5).await.len(), 2);
}

#[tokio::test]
async fn deleting_a_deleted_post_answers_404_while_redis_is_down() {
    let mut redis = OwnRedis::start().await;
    let app = app_on(&redis).await;
    let author = app.create_user("author").await;
    let post = app.publish(&author, "short-lived").await;
    redis.down();
    let first = app.delete_post(&author, post.id.0).await;
    assert_eq!(
        first.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "hiding it is queued"
    );
    let (status, code) = error_code(app.delete_post(&author, post.id.0).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    redis.up().await;
    app.settle().await;
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/posts/{}", post.id),
            Some(&author.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn publishes_past_the_fan_out_backlog_answer_503_with_retry_after() {
    let mut redis = OwnRedis::start().await;
    let app = app_on(&redis).await;
    app.set_settings(json!({"max_fanout_backlog": 2})).await;
    let author = app.create_user("author").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    // Nothing of the setup may count against the backlog: its jobs have run
    // and the gauge (counted every 100 ms here) has seen them go.
    app.settle().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // With Redis down, deliveries wait: each publish leaves a job behind.
    redis.down();
    for body in ["one", "two"] {
        let res = app
            .request(
                Method::POST,
                "/api/v1/posts",
                Some(&author.token),
                Some(json!({"body": body})),
            )
            .await;
        assert_eq!(res.status(), StatusCode::CREATED, "{body}");
    }
    let mut accepted = 2;
    let refused = async {
        loop {
            let res = app
                .request(
                    Method::POST,
                    "/api/v1/posts",
                    Some(&author.token),
                    Some(json!({"body": "three"})),
                )
                .await;
            if res.status() != StatusCode::CREATED {
                return res;
            }
            accepted += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    // The gauges are counted every 100 ms here; a post or two may pass first.
    let res = tokio::time::timeout(Duration::from_secs(10), refused)
        .await
        .expect("refused");
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()["retry-after"], "5");
    let (_, code) = error_code(res).await;
    assert_eq!(code, "unavailable");
    redis.up().await;
    app.settle().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let res = app
        .request(
            Method::POST,
            "/api/v1/posts",
            Some(&author.token),
            Some(json!({"body": "after"})),
        )
        .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    app.settle().await;
    let home = app.home(&reader, 10).await;
    assert_eq!(
        home.len(),
        accepted + 1,
        "every accepted post, none refused"
    );
}

#[tokio::test]
async fn a_transaction_a_moving_cluster_aborts_counts_as_unavailable_and_a_bad_one_does_not() {
    use feed_service::error::AppError;
    use secrecy::ExposeSecret;
    let settings = test_settings();
    let cluster = settings.redis.cluster_urls.expose_secret().to_string();
    let node = match cluster.split(',').next().filter(|u| !u.is_empty()) {
        Some(first) => first.to_string(),
        None => settings.redis.url.expose_secret().to_string(),
    };
    let mut conn = redis::Client::open(node)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // A command of the wrong arity aborts its transaction: the caller's
    // fault, never to be waited out as an outage.
    let bad: redis::RedisResult<()> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("only-a-key")
        .query_async(&mut conn)
        .await;
    let bad = AppError::from(bad.unwrap_err());
    assert!(matches!(bad, AppError::Internal { .. }), "{bad:?}");
    if cluster.is_empty() {
        return;
    }
    // On a cluster, one node answers MOVED inside MULTI for a key it does
    // not serve, and the whole transaction is aborted: a cluster in
    // motion, as a failover or a resharding leaves a stale map.
    let prefix = &settings.redis.key_prefix;
    for i in 0..64 {
        let key = format!("{prefix}moved-{i}");
        let set: redis::RedisResult<()> = redis::pipe()
            .atomic()
            .set(&key, 1)
            .ignore()
            .del(&key)
            .ignore()
            .query_async(&mut conn)
            .await;
        if let Err(e) = set {
            let moved = AppError::from(e);
            assert!(matches!(moved, AppError::Unavailable { .. }), "{moved:?}");
            return;
        }
    }
    panic!("one node served 64 keys of random slots out of 3 masters");
}
