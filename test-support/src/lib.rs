//! The test support the API tests and the load tool's test share: `spawn_app()`, the
//! real application on port 0 with its own PostgreSQL database and Redis
//! key prefix, both removed when the `TestApp` drops; a client whose every
//! answer is checked against the OpenAPI document; readers of the state.

use std::collections::HashMap;
use std::time::Duration;

use feed_service::domain::PostBody;
use feed_service::engine::Engine;
use feed_service::http::auth::JwtKeys;
use feed_service::settings::Settings;
use feed_service::startup::Application;
use feed_service::store::pg::{drop_database, with_database};
use feed_service::store::redis::RedisStore;
use feed_service::types::{Post, PostId, UserId};
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};

pub struct TestApp {
    pub address: String,
    /// The service's own OpenAPI document: every response of `request` is
    /// checked against it.
    pub doc: Value,
    pub engine: Engine,
    pub client: reqwest::Client,
    pub keys: JwtKeys,
    pub admin: String,
    pub jwt_secret: String,
    database_url: String,
    handle: actix_web::dev::ServerHandle,
}

/// Test settings: the defaults (and FEED_ environment), with a fresh
/// database name, a fresh key prefix and port 0.
pub fn test_settings() -> Settings {
    let mut settings = Settings::load().expect("test configuration loads");
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let url = with_database(
        settings.database.url.expose_secret(),
        &format!("feed_test_{tag}"),
    )
    .expect("database.url");
    settings.database.url = SecretString::from(url);
    settings.database.create_if_missing = true;
    settings.database.pool_size = 8;
    settings.redis.key_prefix = format!("test:{tag}:");
    if settings.redis.cluster_nodes().is_empty() {
        settings.redis.pool_size = Some(8);
    }
    settings.server.port = 0;
    settings.server.workers = 1;
    settings.feed.fanout_workers = 2;
    settings.feed.fanout_batch_size = 50;
    // Tests send bursts no client would; the rate-limit tests turn it on.
    settings.limits.enabled = false;
    settings.metrics.refresh_ms = 100;
    settings
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(test_settings()).await
}

pub async fn spawn_app_with(settings: Settings) -> TestApp {
    let app = Application::build(&settings)
        .await
        .expect("application builds");
    let address = format!("http://127.0.0.1:{}", app.port());
    let engine = app.engine().clone();
    let handle = app.handle();
    tokio::spawn(app.run());
    let keys = JwtKeys::from_settings(&settings.auth).unwrap();
    let admin = keys.mint(UserId(0), true, 3600).unwrap();
    let client = reqwest::Client::new();
    let doc: Value = client
        .get(format!("{address}/openapi.json"))
        .send()
        .await
        .expect("GET /openapi.json")
        .json()
        .await
        .expect("the OpenAPI document is JSON");
    TestApp {
        doc,
        address,
        engine,
        client,
        admin,
        keys,
        jwt_secret: settings.auth.jwt_secret.expose_secret().to_string(),
        database_url: settings.database.url.expose_secret().to_string(),
        handle,
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        cleanup(
            &self.database_url,
            self.engine.redis(),
            Some(self.handle.clone()),
        );
    }
}

/// Removes a test's database and Redis keys when dropped, for tests that
/// run the service without a `TestApp`.
pub struct Cleanup {
    pub database_url: String,
    pub redis: RedisStore,
}

impl Cleanup {
    pub fn of(settings: &Settings) -> Self {
        Cleanup {
            database_url: settings.database.url.expose_secret().to_string(),
            redis: RedisStore::new(&settings.redis).expect("Redis settings"),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        cleanup(&self.database_url, &self.redis, None);
    }
}

/// Stops the server, deletes the prefix's keys and drops the database
/// (closing its connections), on a runtime of its own (Drop cannot await).
/// The stop is sent, not awaited: the server runs on the test's runtime,
/// which this blocks, so it could only answer once the wait timed out.
fn cleanup(url: &str, redis: &RedisStore, handle: Option<actix_web::dev::ServerHandle>) {
    if let Some(handle) = handle {
        drop(handle.stop(false));
    }
    let url = url.to_string();
    let redis = redis.clone();
    let done = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("cleanup runtime");
        rt.block_on(async move {
            let _ = redis.delete_all().await;
            if let Err(e) = drop_database(&url).await {
                eprintln!("could not drop the test database: {}", e.chain());
            }
        });
    });
    let _ = done.join();
}

/// A user created through the API, with a token.
#[derive(Debug, Clone)]
pub struct TestUser {
    pub id: i64,
    pub token: String,
}

impl TestApp {
    pub fn database_url(&self) -> &str {
        &self.database_url
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    /// Sends a request; its response must be one the OpenAPI document
    /// allows (a documented status, with a body of its schema).
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> TestResponse {
        let mut req = self.client.request(method.clone(), self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = TestResponse::read(req.send().await.expect("request is sent")).await;
        conforms(&self.doc, &method, path, &res);
        res
    }

    /// Sends a request built by the caller, checked like [`Self::request`].
    pub async fn send(
        &self,
        method: &Method,
        path: &str,
        req: reqwest::RequestBuilder,
    ) -> TestResponse {
        let res = TestResponse::read(req.send().await.expect("request is sent")).await;
        conforms(&self.doc, method, path, &res);
        res
    }

    pub async fn create_user(&self, username: &str) -> TestUser {
        let res = self
            .request(
                Method::POST,
                "/api/v1/users",
                Some(&self.admin),
                Some(json!({ "username": username })),
            )
            .await;
        assert_eq!(res.status(), StatusCode::CREATED, "creating {username}");
        let user: Value = res.json().await.unwrap();
        let id = user["id"].as_i64().unwrap();
        TestUser {
            id,
            token: self.keys.mint(UserId(id), false, 3600).unwrap(),
        }
    }

    pub async fn users(&self, prefix: &str, n: usize) -> Vec<TestUser> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            out.push(self.create_user(&format!("{prefix}{i}")).await);
        }
        out
    }

    pub async fn follow(&self, who: &TestUser, target: &TestUser) {
        let res = self
            .request(
                Method::PUT,
                &format!("/api/v1/users/{}/following/{}", who.id, target.id),
                Some(&who.token),
                None,
            )
            .await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
    }

    pub async fn unfollow(&self, who: &TestUser, target: &TestUser) {
        let res = self
            .request(
                Method::DELETE,
                &format!("/api/v1/users/{}/following/{}", who.id, target.id),
                Some(&who.token),
                None,
            )
            .await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
    }

    pub async fn publish(&self, author: &TestUser, body: &str) -> Post {
        let res = self
            .request(
                Method::POST,
                "/api/v1/posts",
                Some(&author.token),
                Some(json!({ "body": body })),
            )
            .await;
        assert_eq!(res.status(), StatusCode::CREATED);
        post_of(&res.json().await.unwrap())
    }

    /// Publishes through the store layer with a chosen timestamp.
    pub async fn publish_at(&self, author: &TestUser, body: &str, created_at_ms: i64) -> Post {
        self.engine
            .posts()
            .publish_at(
                UserId(author.id),
                &PostBody::parse(body).unwrap(),
                created_at_ms,
            )
            .await
            .expect("publish_at")
    }

    pub async fn delete_post(&self, who: &TestUser, post: i64) -> TestResponse {
        self.request(
            Method::DELETE,
            &format!("/api/v1/posts/{post}"),
            Some(&who.token),
            None,
        )
        .await
    }

    pub async fn set_settings(&self, body: Value) -> Value {
        let res = self
            .request(
                Method::PUT,
                "/api/v1/admin/settings",
                Some(&self.admin),
                Some(body),
            )
            .await;
        assert_eq!(res.status(), StatusCode::OK);
        res.json().await.unwrap()
    }

    /// The admin settings as GET /api/v1/admin/settings returns them.
    pub async fn settings(&self) -> Value {
        let res = self
            .request(
                Method::GET,
                "/api/v1/admin/settings",
                Some(&self.admin),
                None,
            )
            .await;
        assert_eq!(res.status(), StatusCode::OK);
        res.json().await.unwrap()
    }

    pub async fn user(&self, id: i64) -> Value {
        let res = self
            .request(
                Method::GET,
                &format!("/api/v1/users/{id}"),
                Some(&self.admin),
                None,
            )
            .await;
        assert_eq!(res.status(), StatusCode::OK);
        res.json().await.unwrap()
    }

    /// One feed page: (items, next).
    pub async fn page(
        &self,
        path: &str,
        token: &str,
        cursor: Option<(i64, i64)>,
        limit: u32,
    ) -> (Vec<Post>, Option<(i64, i64)>) {
        let query = match cursor {
            Some((max, offset)) => format!("max={max}&offset={offset}&limit={limit}"),
            None => format!("limit={limit}"),
        };
        let (items, next, _) = self.page_with(path, token, &query).await;
        (items, next)
    }

    /// One feed page read with a query of the caller's (`limit=…&min=…`):
    /// (items, next, prev), the cursors as (score, offset).
    pub async fn page_with(
        &self,
        path: &str,
        token: &str,
        query: &str,
    ) -> (Vec<Post>, Option<(i64, i64)>, (i64, i64)) {
        let res = self
            .request(Method::GET, &format!("{path}?{query}"), Some(token), None)
            .await;
        assert_eq!(res.status(), StatusCode::OK, "{path}?{query}");
        let page: Value = res.json().await.unwrap();
        let items = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(post_of)
            .collect();
        let next = match &page["next"] {
            Value::Null => None,
            n => Some((n["max"].as_i64().unwrap(), n["offset"].as_i64().unwrap())),
        };
        let prev = (
            page["prev"]["min"].as_i64().unwrap(),
            page["prev"]["offset"].as_i64().unwrap(),
        );
        (items, next, prev)
    }

    /// A refresh: the page immediately newer than `prev`.
    pub async fn refresh(
        &self,
        path: &str,
        token: &str,
        prev: (i64, i64),
        limit: u32,
    ) -> (Vec<Post>, (i64, i64)) {
        let query = format!("min={}&offset={}&limit={limit}", prev.0, prev.1);
        let (items, _, prev) = self.page_with(path, token, &query).await;
        (items, prev)
    }

    /// Scrolls a feed to its end, page sizes cycling through `sizes`,
    /// running `between(page_number)` after each page.
    pub async fn scroll_with(
        &self,
        path: &str,
        token: &str,
        sizes: &[u32],
        mut between: impl AsyncFnMut(usize),
    ) -> Vec<Post> {
        let mut seen = Vec::new();
        let mut cursor = None;
        for turn in 0.. {
            assert!(turn < 10_000, "the scroll does not end");
            let (items, next) = self
                .page(path, token, cursor, sizes[turn % sizes.len()])
                .await;
            seen.extend(items);
            match next {
                Some(c) => cursor = Some(c),
                None => return seen,
            }
            between(turn).await;
        }
        unreachable!()
    }

    pub async fn scroll(&self, path: &str, token: &str, size: u32) -> Vec<Post> {
        self.scroll_with(path, token, &[size], async |_| {}).await
    }

    pub async fn home(&self, reader: &TestUser, size: u32) -> Vec<PostId> {
        ids(&self.scroll("/api/v1/feed", &reader.token, size).await)
    }

    pub async fn settle(&self) {
        self.engine
            .wait_for_fanout(Duration::from_secs(60))
            .await
            .expect("fan-out finishes");
    }

    /// Deletes `who`'s account, as itself: 202 and its job's path.
    pub async fn delete_account(&self, who: &TestUser) -> String {
        let path = format!("/api/v1/users/{}", who.id);
        let res = self
            .request(Method::DELETE, &path, Some(&who.token), None)
            .await;
        assert_eq!(res.status(), StatusCode::ACCEPTED, "DELETE {path}");
        let job: Value = res.json().await.unwrap();
        format!("/api/v1/jobs/{}", job["id"])
    }

    /// Waits (a minute at most) until the job at `path` is done, as
    /// `token` watches it; its last state.
    pub async fn job_done(&self, token: &str, path: &str) -> Value {
        for _ in 0..600 {
            let res = self.request(Method::GET, path, Some(token), None).await;
            assert_eq!(res.status(), StatusCode::OK, "{path}");
            let job: Value = res.json().await.unwrap();
            if job["state"] == "done" {
                return job;
            }
            assert!(job["done"].as_i64() <= job["total"].as_i64(), "{job}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("job {path} never ends");
    }
}

pub fn post_of(v: &Value) -> Post {
    Post {
        id: PostId(v["id"].as_i64().unwrap()),
        author_id: UserId(v["author_id"].as_i64().unwrap()),
        author_username: v["author_username"].as_str().unwrap().to_string(),
        body: v["body"].as_str().unwrap().to_string(),
        created_at_ms: v["created_at_ms"].as_i64().unwrap(),
        meta: v.get("meta").map(|m| m.to_string()),
    }
}

pub fn ids(posts: &[Post]) -> Vec<PostId> {
    posts.iter().map(|p| p.id).collect()
}

/// The feed order, computed independently: newest first, ties by the id's
/// decimal string descending (as Redis orders equal scores).
pub fn newest_first(posts: &[Post]) -> Vec<PostId> {
    let mut v: Vec<&Post> = posts.iter().collect();
    v.sort_by(|a, b| {
        b.created_at_ms
            .cmp(&a.created_at_ms)
            .then_with(|| b.id.to_string().cmp(&a.id.to_string()))
    });
    v.iter().map(|p| p.id).collect()
}

/// Asserts no id appears twice.
pub fn assert_unique(ids: &[PostId]) {
    let mut count: HashMap<PostId, usize> = HashMap::new();
    for id in ids {
        *count.entry(*id).or_default() += 1;
    }
    let dup: Vec<_> = count.into_iter().filter(|(_, n)| *n > 1).collect();
    assert!(dup.is_empty(), "repeated posts: {dup:?}");
}

pub async fn error_code(res: TestResponse) -> (StatusCode, String) {
    let status = res.status();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    (
        status,
        body["error"]["code"]
            .as_str()
            .unwrap_or("<no JSON error>")
            .to_string(),
    )
}

/// A response read whole (so that it can be checked against the document).
pub struct TestResponse {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl TestResponse {
    pub async fn read(res: reqwest::Response) -> Self {
        TestResponse {
            status: res.status(),
            headers: res.headers().clone(),
            body: res.bytes().await.expect("response body").to_vec(),
        }
    }

    /// A response made up, to test [`conforms`] itself.
    pub fn fake(status: StatusCode, content_type: &str, body: &[u8]) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            content_type.parse().expect("a content type"),
        );
        TestResponse {
            status,
            headers,
            body: body.to_vec(),
        }
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    pub async fn json<T: serde::de::DeserializeOwned>(self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.body)
    }

    pub async fn text(self) -> Result<String, std::string::FromUtf8Error> {
        String::from_utf8(self.body)
    }
}

/// The document's template for a concrete path, if it has one.
fn template_of<'d>(doc: &'d Value, path: &str) -> Option<&'d str> {
    let path = path.split('?').next().unwrap_or(path);
    let segments: Vec<&str> = path.split('/').collect();
    doc["paths"]
        .as_object()?
        .keys()
        .map(String::as_str)
        .find(|t| {
            let ts: Vec<&str> = t.split('/').collect();
            ts.len() == segments.len()
                && ts
                    .iter()
                    .zip(&segments)
                    .all(|(t, s)| t == s || (t.starts_with('{') && !s.is_empty()))
        })
}

/// Panics unless `res` is a response the document allows for `method path`:
/// a documented status, the documented content type, a body of its schema.
pub fn conforms(doc: &Value, method: &Method, path: &str, res: &TestResponse) {
    let Some(template) = template_of(doc, path) else {
        return;
    };
    let op = &doc["paths"][template][method.as_str().to_lowercase()];
    if op.is_null() {
        // An undocumented method on a documented path: 405.
        assert_eq!(
            res.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        return;
    }
    let status = res.status.as_str();
    let response = &op["responses"][status];
    assert!(
        !response.is_null(),
        "{method} {path} answered {status}, which its operation does not document"
    );
    let Some((content_type, media)) = response["content"]
        .as_object()
        .and_then(|c| c.iter().next())
    else {
        assert!(
            res.body.is_empty(),
            "{method} {path} {status}: a body where none is documented"
        );
        return;
    };
    let got = res
        .headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(
        got.starts_with(content_type.as_str()),
        "{method} {path} {status}: content type {got:?}, documented {content_type}"
    );
    if content_type != "application/json" {
        return;
    }
    let body: Value = serde_json::from_slice(&res.body)
        .unwrap_or_else(|e| panic!("{method} {path} {status}: not JSON: {e}"));
    let mut schema = media["schema"].clone();
    schema["components"] = doc["components"].clone();
    if let Err(e) = jsonschema::validate(&schema, &body) {
        panic!("{method} {path} {status}: the body does not match its schema: {e}\n{body}");
    }
}

/// A time for posts published at chosen times (a feed entry holds times
/// from 2020 on).
pub const T0: i64 = 1_764_500_000_000;

/// A feed list as an `LRANGE key 0 -1` returns it: its entries, newest
/// first, and its floor as stored (`-inf`, `inf` or a score); `None` for a
/// missing key. A building list's mark at its head is checked and left out.
pub fn feed_from(reply: &redis::Value) -> Option<(Vec<feed_service::types::Entry>, String)> {
    use feed_service::store::redis::layout;
    let members: Vec<Vec<u8>> = redis::from_redis_value_ref(reply).unwrap();
    let (floor, mut entries) = members.split_last()?;
    if floor == b"inf" {
        let (mark, rest) = entries.split_first().expect("a building list has its mark");
        assert_eq!(mark, b"inf", "a building list starts with its mark");
        entries = rest;
    }
    let entries = entries
        .iter()
        .map(|m| layout::unpack(m).expect("an entry before the sentinel"))
        .collect();
    assert!(
        layout::unpack(floor).is_none(),
        "the last element is the sentinel"
    );
    Some((entries, String::from_utf8(floor.clone()).unwrap()))
}

/// What is wrong with a feed list as an `LRANGE key 0 -1` returns it, if
/// its last element is not a sentinel: its length and its last elements,
/// to name in a failure.
pub fn sentinel_missing(reply: &redis::Value) -> Option<String> {
    use feed_service::store::redis::layout;
    let members: Vec<Vec<u8>> = redis::from_redis_value_ref(reply).unwrap();
    let last = members.last()?;
    let entry = layout::unpack(last)?;
    let show = |m: &Vec<u8>| match layout::unpack(m) {
        Some(e) => format!("{}@{}", e.id, e.score),
        None => String::from_utf8_lossy(m).into_owned(),
    };
    let tail: Vec<String> = members.iter().rev().take(4).map(show).collect();
    let head: Vec<String> = members.iter().take(3).map(show).collect();
    Some(format!(
        "{} elements, the last an entry ({}@{}); from the end: {}; from the head: {}",
        members.len(),
        entry.id,
        entry.score,
        tail.join(", "),
        head.join(", ")
    ))
}

/// The feed list `key`, read on `conn` (see [`feed_from`]).
pub async fn feed_list(
    conn: &mut impl redis::aio::ConnectionLike,
    key: &str,
) -> Option<(Vec<feed_service::types::Entry>, String)> {
    let reply: redis::Value = redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap();
    feed_from(&reply)
}

/// A metric's value in the service's `/metrics` at `base` (the sum of its
/// series whose labels contain `labels`; 0 if it has none).
pub async fn metric(base: &str, name: &str, labels: &str) -> f64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("/metrics is text");
    metric_in(&text, name, labels)
}

/// [`metric`] read from a scrape's text.
pub fn metric_in(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with([' ', '{']) && rest.contains(labels))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
