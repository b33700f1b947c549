//! Live streams of the home feed (Server-Sent Events), through the API.

use std::time::Duration;

use feed_service::startup::Application;
use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{spawn_app_with, test_settings, TestApp, TestUser};

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq)]
pub struct Sse {
    pub event: String,
    pub id: Option<String>,
    pub data: Value,
}

/// An open stream, read event by event.
pub struct Events {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<Vec<u8>>> + Send>>,
    buf: String,
}

impl Events {
    /// Opens `GET {base}/api/v1/feed/stream` with the token and, if any, a
    /// `Last-Event-ID`.
    pub async fn open(base: &str, token: &str, last: Option<&str>) -> (StatusCode, Option<Events>) {
        let mut req = reqwest::Client::new()
            .get(format!("{base}/api/v1/feed/stream"))
            .bearer_auth(token);
        if let Some(id) = last {
            req = req.header("last-event-id", id);
        }
        let res = req.send().await.expect("the stream opens");
        let status = res.status();
        if status != StatusCode::OK {
            return (status, None);
        }
        assert!(res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        (
            status,
            Some(Events {
                body: Box::pin(res.bytes_stream().map(|r| r.map(|b| b.to_vec()))),
                buf: String::new(),
            }),
        )
    }

    /// The next event (heartbeats skipped), within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Sse> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut event, mut id, mut data) = (String::new(), None, String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        event = v.to_string();
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        id = Some(v.to_string());
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if event.is_empty() {
                    continue; // a heartbeat, or the retry line
                }
                let data = serde_json::from_str(&data).expect("an event's data is JSON");
                return Some(Sse { event, id, data });
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .ok()??;
            self.buf
                .push_str(std::str::from_utf8(&chunk.expect("the stream reads")).unwrap());
        }
    }

    /// The next `n` events.
    pub async fn take(&mut self, n: usize) -> Vec<Sse> {
        let mut out = Vec::new();
        for _ in 0..n {
            match self.next(Duration::from_secs(10)).await {
                Some(e) => out.push(e),
                None => panic!("{} events came, {n} awaited: {out:?}", out.len()),
            }
        }
        out
    }

    /// Whether nothing but heartbeats comes within `wait`.
    pub async fn quiet(&mut self, wait: Duration) -> Option<Sse> {
        self.next(wait).await
    }
}

fn post_ids(events: &[Sse]) -> Vec<i64> {
    events
        .iter()
        .map(|e| {
            assert_eq!(e.event, "post", "{e:?}");
            e.data["id"].as_i64().unwrap()
        })
        .collect()
}

async fn as_admin(app: &TestApp, method: Method, path: &str) -> StatusCode {
    app.request(method, path, Some(&app.admin), None)
        .await
        .status()
}

#[tokio::test]
async fn a_stream_sends_each_new_entry_once_and_resumes_from_its_last_id() {
    let mut settings = test_settings();
    settings.feed.stream_heartbeat_secs = 1;
    let app = spawn_app_with(settings).await;
    app.set_settings(json!({"big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let reader = app.create_user("reader").await;
    let friend = app.create_user("friend").await;
    let star = app.create_user("star").await;
    let fan = app.create_user("fan").await;
    for (who, whom) in [(&reader, &friend), (&reader, &star), (&fan, &star)] {
        app.follow(who, whom).await;
    }
    assert_eq!(app.user(star.id).await["big_v"], true);
    let old = app.publish(&friend, "before").await;
    let (_, events) = Events::open(&app.address, &reader.token, None).await;
    let mut events = events.unwrap();
    let open = events.take(1).await.remove(0);
    assert_eq!(open.event, "open");
    // Pushed, pulled and its own: each once, oldest first, nothing older.
    let a = app.publish(&friend, "pushed").await;
    let b = app.publish(&star, "pulled").await;
    let c = app.publish(&reader, "mine").await;
    let got = events.take(3).await;
    assert_eq!(post_ids(&got), vec![a.id, b.id, c.id]);
    assert!(got.iter().all(|e| e.id.is_some()));
    assert!(!post_ids(&got).contains(&old.id));
    // Dropped after the first of them; three more meanwhile.
    drop(events);
    let d = app.publish(&star, "while away").await;
    let e = app.publish(&friend, "also").await;
    let f = app.publish_at(&friend, "same ms", e.created_at_ms).await;
    // Resumed from the id of `a`: b, c, then the missed ones, then live.
    let last = got[0].id.clone().unwrap();
    let (_, again) = Events::open(&app.address, &reader.token, Some(&last)).await;
    let mut again = again.unwrap();
    assert_eq!(again.take(1).await[0].event, "open");
    let mut want = vec![b.id, c.id, d.id];
    let mut tie = [e.clone(), f.clone()];
    tie.sort_by_key(|p| p.id.to_string());
    want.extend(tie.iter().map(|p| p.id));
    assert_eq!(post_ids(&again.take(5).await), want);
    let g = app.publish(&star, "live again").await;
    assert_eq!(post_ids(&again.take(1).await), vec![g.id]);
    // A deletion and a mute remove what they name.
    let res = app.delete_post(&friend, a.id).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let deleted = again.take(1).await.remove(0);
    assert_eq!(
        (deleted.event.as_str(), deleted.data["id"].as_i64()),
        ("delete", Some(a.id))
    );
    let path = format!("/api/v1/users/{}/mutes/{}", reader.id, star.id);
    assert_eq!(
        app.request(Method::PUT, &path, Some(&reader.token), None)
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    let removed = again.take(1).await.remove(0);
    assert_eq!(removed.event, "remove");
    assert_eq!(
        removed.data,
        json!({"author_id": star.id, "reason": "mute"})
    );
    // A muted author's post is not sent; the next friend's is.
    app.publish(&star, "muted").await;
    let h = app.publish(&friend, "after the mute").await;
    assert_eq!(post_ids(&again.take(1).await), vec![h.id]);
    // Heartbeats keep it open: nothing else comes.
    assert_eq!(again.quiet(Duration::from_millis(2500)).await, None);
}

#[tokio::test]
async fn a_post_reaches_streams_held_by_another_instance() {
    let settings = test_settings();
    let app = spawn_app_with(settings.clone()).await;
    let other = Application::build(&settings).await.unwrap();
    let other_address = format!("http://127.0.0.1:{}", other.port());
    let other_handle = other.handle();
    tokio::spawn(other.run());
    let author = app.create_user("author").await;
    let readers: Vec<TestUser> = app.users("reader", 3).await;
    for r in &readers {
        app.follow(r, &author).await;
    }
    let mut streams = Vec::new();
    for r in &readers {
        let (_, events) = Events::open(&other_address, &r.token, None).await;
        let mut events = events.unwrap();
        assert_eq!(events.take(1).await[0].event, "open");
        streams.push(events);
    }
    let post = app.publish(&author, "across").await;
    for events in &mut streams {
        assert_eq!(post_ids(&events.take(1).await), vec![post.id]);
    }
    // Suspended: its posts leave every stream's home.
    let path = format!("/api/v1/admin/users/{}/suspend", author.id);
    assert_eq!(as_admin(&app, Method::POST, &path).await, StatusCode::OK);
    for events in &mut streams {
        let removed = events.take(1).await.remove(0);
        assert_eq!(
            removed.data,
            json!({"author_id": author.id, "reason": "suspend"})
        );
    }
    other_handle.stop(false).await;
}

#[tokio::test]
async fn streams_are_limited_per_user_and_ids_are_checked() {
    let mut settings = test_settings();
    settings.feed.streams_per_user = 2;
    // A dead client is noticed when a heartbeat cannot be written.
    settings.feed.stream_heartbeat_secs = 1;
    let app = spawn_app_with(settings).await;
    let reader = app.create_user("reader").await;
    let (_, first) = Events::open(&app.address, &reader.token, None).await;
    let (_, second) = Events::open(&app.address, &reader.token, None).await;
    let (status, _) = Events::open(&app.address, &reader.token, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    drop(first);
    // The slot is given back once the server sees the stream closed.
    let mut reopened = None;
    for _ in 0..50 {
        let (status, events) = Events::open(&app.address, &reader.token, None).await;
        if status == StatusCode::OK {
            reopened = events;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reopened.is_some(), "a closed stream's slot comes back");
    drop(second);
    for bad in ["x", "12", "-5:1", "5:-1"] {
        let (status, _) = Events::open(&app.address, &reader.token, Some(bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
    let res = reqwest::get(format!("{}/api/v1/feed/stream", app.address))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn streams_woken_together_take_turns_to_read_and_each_gets_every_post() {
    let mut settings = test_settings();
    // One read at a time: every stream waits its turn, none is skipped.
    settings.feed.stream_reads = 1;
    let app = spawn_app_with(settings).await;
    app.set_settings(json!({"big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let star = app.create_user("star").await;
    let friend = app.create_user("friend").await;
    let readers: Vec<TestUser> = app.users("reader", 12).await;
    for r in &readers {
        app.follow(r, &star).await;
        app.follow(r, &friend).await;
    }
    assert_eq!(app.user(star.id).await["big_v"], true);
    let mut streams = Vec::new();
    for r in &readers {
        let (_, events) = Events::open(&app.address, &r.token, None).await;
        let mut events = events.unwrap();
        assert_eq!(events.take(1).await[0].event, "open");
        streams.push(events);
    }
    let mut want = Vec::new();
    for i in 0..3 {
        want.push(app.publish(&star, &format!("pulled {i}")).await.id);
        want.push(app.publish(&friend, &format!("pushed {i}")).await.id);
    }
    for events in &mut streams {
        assert_eq!(post_ids(&events.take(want.len()).await), want);
    }
}
