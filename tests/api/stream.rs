//! Live streams of the home feed (Server-Sent Events), through the API.

use std::time::Duration;

use feed_service::startup::Application;
use feed_service::store::redis::hints::Signal;
use feed_service::types::{PostId, UserId};
use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{spawn_app, spawn_app_with, test_settings, TestApp, TestUser};

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
        Self::open_at(base, "/api/v1/feed/stream", token, last).await
    }

    /// Opens the stream at `path` (the home's, or Mastodon's user stream).
    pub async fn open_at(
        base: &str,
        path: &str,
        token: &str,
        last: Option<&str>,
    ) -> (StatusCode, Option<Events>) {
        let mut req = reqwest::Client::new()
            .get(format!("{base}{path}"))
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
                let data = match event.as_str() {
                    // (No payload: Mastodon writes `undefined`.)
                    "filters_changed" => Value::String(data),
                    _ => serde_json::from_str(&data).expect("an event's data is JSON"),
                };
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

    /// Whether the stream ends (the server closes it) within `wait`.
    pub async fn ends_within(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, async {
            while let Some(Ok(_)) = self.body.next().await {}
        })
        .await
        .is_ok()
    }

    /// Whether nothing but heartbeats comes within `wait`.
    pub async fn quiet(&mut self, wait: Duration) -> Option<Sse> {
        self.next(wait).await
    }
}

fn post_ids(events: &[Sse]) -> Vec<PostId> {
    events
        .iter()
        .map(|e| {
            assert_eq!(e.event, "post", "{e:?}");
            PostId(e.data["id"].as_i64().unwrap())
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
    let res = app.delete_post(&friend, a.id.0).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let deleted = again.take(1).await.remove(0);
    assert_eq!(
        (deleted.event.as_str(), deleted.data["id"].as_i64()),
        ("delete", Some(a.id.0))
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

/// Waits until an instance listens on `channel`.
async fn until_listened(app: &TestApp, channel: &str) {
    let redis = app.engine.redis();
    let verb = if redis.is_cluster() {
        "SHARDNUMSUB"
    } else {
        "NUMSUB"
    };
    let mut conn = redis.connection().await.unwrap();
    for _ in 0..250 {
        let mut listeners = 0;
        for node in conn.masters().await.unwrap() {
            let cmd = redis::cmd("PUBSUB").arg(verb).arg(channel).clone();
            let (_, n): (String, i64) = conn.query_on(node.as_ref(), &cmd).await.unwrap();
            listeners += n;
        }
        if listeners > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no instance listens on {channel}");
}

#[tokio::test]
async fn a_post_heard_of_while_its_author_is_suspended_stays_out_of_the_streams() {
    let app = spawn_app_with(test_settings()).await;
    let author = app.create_user("author").await;
    let friend = app.create_user("friend").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &author).await;
    app.follow(&reader, &friend).await;
    let (_, first) = Events::open(&app.address, &reader.token, None).await;
    let mut first = first.unwrap();
    first.take(1).await;
    app.publish(&friend, "before").await;
    let seen = first.take(1).await.remove(0).id.unwrap();
    drop(first);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let unseen = app.publish(&author, "never streamed").await;
    let path = format!("/api/v1/admin/users/{}/suspend", author.id);
    assert_eq!(as_admin(&app, Method::POST, &path).await, StatusCode::OK);
    // Resumed below the author's post, which has left the home.
    let (_, events) = Events::open(&app.address, &reader.token, Some(&seen)).await;
    let mut events = events.unwrap();
    assert_eq!(events.take(1).await[0].event, "open");
    let channel = app.engine.redis().keys().author_channel(UserId(author.id));
    until_listened(&app, &channel).await;
    // The post told of again, as a delivery job that writes its outbox
    // entry late does.
    app.engine
        .redis()
        .hint(Signal::Published {
            author: UserId(author.id),
            post: unseen.id,
            score: unseen.created_at_ms,
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let next = app.publish(&friend, "after").await;
    // The suspension's own hint may reach the stream after it opened: a
    // `remove` of the author then comes first, as it should.
    let sent = loop {
        let event = events.take(1).await.remove(0);
        if event.event != "remove" {
            break event;
        }
        assert_eq!(
            event.data,
            json!({"author_id": author.id, "reason": "suspend"})
        );
    };
    assert_eq!(
        post_ids(&[sent]),
        vec![next.id],
        "the suspended author's post was sent"
    );
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

/// `n` readers that follow `star` (a big-V by then) and `friend`, each
/// with a stream open on `app`.
async fn fans_streaming(
    app: &TestApp,
    n: usize,
) -> (TestUser, TestUser, Vec<TestUser>, Vec<Events>) {
    app.set_settings(json!({"big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let star = app.create_user("star").await;
    let friend = app.create_user("friend").await;
    let readers: Vec<TestUser> = app.users("reader", n).await;
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
    (star, friend, readers, streams)
}

#[tokio::test]
async fn streams_woken_together_take_turns_to_read_and_each_gets_every_post() {
    let mut settings = test_settings();
    // One read at a time: every stream waits its turn, none is skipped.
    settings.feed.stream_reads = 1;
    let app = spawn_app_with(settings).await;
    let late = app.create_user("late").await;
    let mut want = Vec::new();
    for i in 0..3 {
        want.push(app.publish(&late, &format!("before {i}")).await.id);
    }
    let (_, _, readers, mut streams) = fans_streaming(&app, 12).await;
    // A follow copies the author's posts into each home, above each
    // stream's position, with no post to hear of: every stream reads.
    for r in &readers {
        app.follow(r, &late).await;
    }
    for events in &mut streams {
        assert_eq!(post_ids(&events.take(want.len()).await), want);
    }
}

#[tokio::test]
async fn a_post_reaches_every_stream_of_an_instance_read_once_there_not_once_per_stream() {
    use feed_service::engine::Stats;
    let app = spawn_app_with(test_settings()).await;
    let (star, friend, readers, mut streams) = fans_streaming(&app, 40).await;
    // Each stream has read its home once on opening.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = app.engine.stats();
    let (reads, news, heard) = (
        Stats::get(&stats.range_reads),
        Stats::get(&stats.stream_news),
        Stats::get(&stats.stream_posts_heard),
    );
    let mut want = Vec::new();
    for i in 0..3 {
        want.push(app.publish(&star, &format!("pulled {i}")).await.id);
        want.push(app.publish(&friend, &format!("pushed {i}")).await.id);
    }
    let mut first = Vec::new();
    for events in &mut streams {
        let got = events.take(want.len()).await;
        assert_eq!(post_ids(&got), want);
        first = got;
    }
    // One read of each post for the 40 streams, or two when its delivery
    // job wrote its outbox entry before the publish's own Redis step and
    // hinted it too (a worker polling between the two); no stream read a
    // page for them (a read per stream would be 40 × 2 sources per post).
    let read = Stats::get(&stats.stream_news) - news;
    assert!((6..=12).contains(&read), "{read} reads of 6 posts");
    // Nearly every event was sent as heard (a stream still finishing its
    // opening read when a post came reads it instead).
    let sent_as_heard = Stats::get(&stats.stream_posts_heard) - heard;
    assert!(
        sent_as_heard > 40 * 6 - 20,
        "{sent_as_heard} of 240 sent as heard"
    );
    let stream_reads = Stats::get(&stats.range_reads) - reads;
    assert!(stream_reads < 10, "{stream_reads} range reads");
    // Each event's id is the position right above its post: resumed from
    // the last but one, a stream sends the last post and nothing else.
    let last_but_one = first[4].id.clone().expect("an id");
    let (_, resumed) = Events::open(&app.address, &readers[0].token, Some(&last_but_one)).await;
    let mut resumed = resumed.unwrap();
    assert_eq!(resumed.take(1).await[0].event, "open");
    assert_eq!(post_ids(&resumed.take(1).await), vec![want[5]]);
    assert_eq!(resumed.quiet(Duration::from_millis(500)).await, None);
}

/// A second instance of the service on the same stores, its PostgreSQL
/// reached through a proxy the test can cut.
async fn instance_behind_a_proxy(
    settings: &feed_service::settings::Settings,
) -> (
    String,
    crate::pg_outage::PgProxy,
    actix_web::dev::ServerHandle,
) {
    use secrecy::{ExposeSecret, SecretString};
    let proxy = crate::pg_outage::PgProxy::start().await;
    let mut behind = settings.clone();
    let direct = settings.database.url.expose_secret().to_string();
    behind.database.url =
        SecretString::from(direct.replace(":5432/", &format!(":{}/", proxy.port)));
    behind.database.pool_timeout_ms = 300;
    let other = Application::build(&behind).await.unwrap();
    let address = format!("http://127.0.0.1:{}", other.port());
    let handle = other.handle();
    tokio::spawn(other.run());
    (address, proxy, handle)
}

#[tokio::test]
async fn a_mastodon_stream_holds_an_update_until_its_author_can_be_read() {
    let settings = test_settings();
    let app = spawn_app_with(settings.clone()).await;
    let (other, proxy, handle) = instance_behind_a_proxy(&settings).await;
    let writer = app.create_user("writer").await;
    let reader = app.create_user("reader").await;
    app.follow(&reader, &writer).await;
    let (status, events) =
        Events::open_at(&other, "/api/v1/streaming/user", &reader.token, None).await;
    assert_eq!(status, StatusCode::OK);
    let mut events = events.unwrap();
    // The instance holding the stream cannot read profiles any more; the
    // writer's first post reaches the reader's inbox through the other.
    proxy.down();
    let post = app
        .publish(&writer, "while its author cannot be read")
        .await;
    app.settle().await;
    assert_eq!(events.quiet(Duration::from_secs(1)).await, None);
    proxy.restore();
    let update = events
        .next(Duration::from_secs(15))
        .await
        .expect("the update comes once the author can be read");
    assert_eq!(update.event, "update");
    assert_eq!(update.data["text"], "while its author cannot be read");
    assert_eq!(update.data["account"]["id"], writer.id.to_string());
    let _ = post;
    handle.stop(false).await;
}

#[tokio::test]
async fn a_mastodon_stream_tells_each_new_follower_once_in_order() {
    let app = spawn_app().await;
    let me = app.create_user("me").await;
    let (ann, bob) = (app.create_user("ann").await, app.create_user("bob").await);
    app.follow(&ann, &me).await;
    let (status, events) =
        Events::open_at(&app.address, "/api/v1/streaming/user", &me.token, None).await;
    assert_eq!(status, StatusCode::OK);
    let mut events = events.unwrap();
    // Followed before it opened: not told here.
    app.follow(&bob, &me).await;
    app.unfollow(&ann, &me).await;
    app.follow(&ann, &me).await;
    let mut told = Vec::new();
    while let Some(event) = events.next(Duration::from_secs(2)).await {
        if event.event == "notification" {
            assert_eq!(event.data["type"], "follow");
            let id = event.data["id"].as_str().unwrap().parse::<i64>().unwrap();
            told.push((
                id,
                event.data["account"]["username"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            ));
        }
        if told.len() == 2 {
            break;
        }
    }
    let who: Vec<&str> = told.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(who, ["bob", "ann"]);
    assert!(told[0].0 < told[1].0);
    // Following back tells them, not me; the home's own stream tells none.
    let (_, native) = Events::open(&app.address, &me.token, None).await;
    let mut native = native.unwrap();
    app.follow(&me, &bob).await;
    let carl = app.create_user("carl").await;
    app.follow(&carl, &me).await;
    let next = events.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        (next.event.as_str(), &next.data["account"]["username"]),
        ("notification", &json!("carl"))
    );
    while let Some(event) = native.quiet(Duration::from_secs(1)).await {
        assert_ne!(event.event, "notification");
    }
}

/// The next `update` or `filters_changed` of a stream.
async fn next_update(events: &mut Events) -> Sse {
    loop {
        let e = events.next(Duration::from_secs(5)).await.expect("an event");
        if e.event == "update" || e.event == "filters_changed" {
            return e;
        }
    }
}

#[tokio::test]
async fn a_mastodon_stream_says_when_filters_change_and_applies_them_at_once() {
    let app = spawn_app().await;
    let (reader, author) = (
        app.create_user("reader").await,
        app.create_user("author").await,
    );
    app.follow(&reader, &author).await;
    let filter = json!({"title": "Secrets", "context": ["home"], "filter_action": "warn",
        "keywords_attributes": [{"keyword": "secret"}]});
    let res = app
        .request(
            Method::POST,
            "/api/v2/filters",
            Some(&reader.token),
            Some(filter),
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let id = res.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, events) =
        Events::open_at(&app.address, "/api/v1/streaming/user", &reader.token, None).await;
    let mut events = events.unwrap();
    app.publish(&author, "a secret plan").await;
    let warned = next_update(&mut events).await;
    assert_eq!(warned.data["filtered"][0]["filter"]["title"], "Secrets");
    assert_eq!(
        warned.data["filtered"][0]["keyword_matches"],
        json!(["secret"])
    );
    let path = format!("/api/v2/filters/{id}");
    let res = app
        .request(
            Method::PUT,
            &path,
            Some(&reader.token),
            Some(json!({"filter_action": "hide"})),
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let changed = next_update(&mut events).await;
    assert_eq!(
        (changed.event.as_str(), &changed.data),
        ("filters_changed", &json!("undefined"))
    );
    app.publish(&author, "another secret").await;
    app.publish(&author, "nothing to hide").await;
    let next = next_update(&mut events).await;
    assert_eq!(
        (next.event.as_str(), &next.data["text"]),
        ("update", &json!("nothing to hide"))
    );
}

#[tokio::test]
async fn a_deleted_account_s_open_streams_end() {
    let mut settings = test_settings();
    settings.feed.stream_heartbeat_secs = 1;
    let app = spawn_app_with(settings).await;
    let reader = app.create_user("reader").await;
    let mut open = Vec::new();
    for path in ["/api/v1/feed/stream", "/api/v1/streaming/user"] {
        let (status, events) = Events::open_at(&app.address, path, &reader.token, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        open.push(events.unwrap());
    }
    app.delete_account(&reader).await;
    for events in &mut open {
        assert!(
            events.ends_within(Duration::from_secs(5)).await,
            "a deleted account's stream ends"
        );
    }
    let (status, _) = Events::open(&app.address, &reader.token, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn refused_stream_opens_are_charged_and_cost_no_query() {
    let mut settings = test_settings();
    settings.limits.enabled = true;
    settings.limits.user_reads_per_sec = 1;
    settings.limits.user_read_burst = 3;
    settings.feed.streams_per_user = 1;
    let app = spawn_app_with(settings).await;
    let reader = app.create_user("reader").await;
    let (status, first) =
        Events::open_at(&app.address, "/api/v1/streaming/user", &reader.token, None).await;
    assert_eq!(status, StatusCode::OK);
    // Past the user's streams: refused before anything is read.
    let queries = app.engine.pg().queries();
    for _ in 0..2 {
        let (status, _) =
            Events::open_at(&app.address, "/api/v1/streaming/user", &reader.token, None).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(
        app.engine.pg().queries(),
        queries,
        "a refused open read nothing"
    );
    // Past the read budget (three, the opens among them): refused too,
    // access_token or header alike.
    let res = reqwest::get(format!(
        "{}/api/v1/streaming/user?access_token={}",
        app.address, reader.token
    ))
    .await
    .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = res.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many reads"),
        "{body}"
    );
    drop(first);
}

/// The subscriber connections of the instances on `redis`'s key prefix,
/// on a single Redis node, cut as a network fault would (none on a
/// cluster: the test then says so).
async fn cut_hints_link(redis: &feed_service::store::redis::RedisStore) -> bool {
    if !redis.is_cluster() {
        let name = redis.subscriber_name();
        let mut redis = redis::Client::open("redis://127.0.0.1:6379/")
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("pubsub")
            .query_async(&mut redis)
            .await
            .unwrap();
        let mut killed = false;
        for line in list.lines() {
            if line.contains(&format!(" name={name} ")) {
                let id = line.split(' ').find_map(|f| f.strip_prefix("id=")).unwrap();
                let _: i64 = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("ID")
                    .arg(id)
                    .query_async(&mut redis)
                    .await
                    .unwrap();
                killed = true;
            }
        }
        return killed;
    }
    eprintln!("on a cluster the subscriber's links are not cut here");
    false
}

#[tokio::test]
async fn hints_flow_again_at_once_after_their_link_breaks_while_postgresql_is_away() {
    let mut settings = test_settings();
    settings.feed.stream_heartbeat_secs = 1;
    let app = spawn_app_with(settings.clone()).await;
    let (other, proxy, handle) = instance_behind_a_proxy(&settings).await;
    let author = app.create_user("author").await;
    let readers: Vec<TestUser> = app.users("reader", 20).await;
    for r in &readers {
        app.follow(r, &author).await;
    }
    let mut streams = Vec::new();
    for r in &readers {
        let (_, events) = Events::open(&other, &r.token, None).await;
        let mut events = events.unwrap();
        assert_eq!(events.take(1).await[0].event, "open");
        streams.push(events);
    }
    let _ = app.publish(&author, "warm").await;
    for events in &mut streams {
        assert_eq!(events.take(1).await[0].event, "post");
    }
    proxy.down();
    if !cut_hints_link(app.engine.redis()).await {
        handle.stop(false).await;
        return;
    }
    // Twenty readers whose authors cannot be read again: the hints flow
    // anyway, and the post comes within a second or two.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let post = app.publish(&author, "after the break").await;
    for events in &mut streams {
        let got = events
            .next(Duration::from_secs(5))
            .await
            .expect("the post comes");
        assert_eq!(got.data["id"], post.id.0);
    }
    eprintln!(
        "after the link broke: every stream had the post in {:?}",
        started.elapsed()
    );
    proxy.restore();
    handle.stop(false).await;
}

#[tokio::test]
async fn a_newly_followed_author_s_posts_reach_a_stream_while_another_reader_subscribes_to_thousands(
) {
    use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
    use secrecy::ExposeSecret;
    let settings = test_settings();
    let app = spawn_app_with(settings.clone()).await;
    let many = app.create_user("many").await;
    let reader = app.create_user("reader").await;
    let author = app.create_user("author").await;
    // `many` follows 10,000 accounts (written as records: the follows are
    // not the point here).
    let mut pg = AsyncPgConnection::establish(settings.database.url.expose_secret())
        .await
        .unwrap();
    pg.batch_execute(&format!(
        "INSERT INTO users (username) SELECT 'bulk_' || g FROM generate_series(1, 10000) g;
         INSERT INTO follows (follower_id, followee_id)
           SELECT {}, id FROM users WHERE username LIKE 'bulk\\_%';",
        many.id
    ))
    .await
    .unwrap();
    let (_, events) = Events::open(&app.address, &reader.token, None).await;
    let mut events = events.unwrap();
    assert_eq!(events.take(1).await[0].event, "open");
    // While `many` opens its stream (10,000 channels), the reader follows
    // the author, who posts at once.
    let opening = {
        let (address, token) = (app.address.clone(), many.token.clone());
        tokio::spawn(async move { Events::open(&address, &token, None).await.0 })
    };
    app.follow(&reader, &author).await;
    let post = app.publish(&author, "right after the follow").await;
    let started = std::time::Instant::now();
    let mut got = None;
    while let Some(e) = events.next(Duration::from_secs(10)).await {
        if e.event == "post" && e.data["id"] == post.id.0 {
            got = Some(e);
            break;
        }
    }
    assert!(got.is_some(), "the newly followed author's post came");
    eprintln!(
        "the post came {:?} after it was published",
        started.elapsed()
    );
    assert_eq!(opening.await.unwrap(), StatusCode::OK);
}

#[tokio::test]
async fn a_stream_resumed_from_the_entry_its_id_names_repeats_and_skips_nothing_of_that_millisecond(
) {
    let app = spawn_app_with(test_settings()).await;
    let reader = app.create_user("reader").await;
    let friend = app.create_user("friend").await;
    let other = app.create_user("other").await;
    app.follow(&reader, &friend).await;
    app.follow(&reader, &other).await;
    let (_, events) = Events::open(&app.address, &reader.token, None).await;
    let mut events = events.unwrap();
    assert_eq!(events.take(1).await[0].event, "open");
    const AT: i64 = 1_700_000_000_000;
    let mut posts = vec![
        app.publish_at(&friend, "one", AT).await,
        app.publish_at(&friend, "two", AT).await,
    ];
    let got = events.take(2).await;
    // Each id names its post.
    for e in &got {
        let id = e.id.clone().unwrap();
        assert_eq!(
            id.rsplit(':').next().unwrap(),
            e.data["id"].to_string(),
            "{id}"
        );
    }
    drop(events);
    // Posts of that very millisecond arrive late while the client is away.
    for i in 0..4 {
        posts.push(app.publish_at(&other, &format!("late {i}"), AT).await);
    }
    let first = PostId(got[0].data["id"].as_i64().unwrap());
    // Resumed from the first event: what lies above its post, oldest first.
    let mut order = crate::helpers::newest_first(&posts);
    order.truncate(order.iter().position(|id| *id == first).unwrap());
    order.reverse();
    let last = got[0].id.clone().unwrap();
    let (_, again) = Events::open(&app.address, &reader.token, Some(&last)).await;
    let mut again = again.unwrap();
    assert_eq!(again.take(1).await[0].event, "open");
    assert_eq!(post_ids(&again.take(order.len()).await), order);
    assert_eq!(again.quiet(Duration::from_millis(1500)).await, None);
}
