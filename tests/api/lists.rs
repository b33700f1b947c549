//! Lists through the Mastodon API: their timelines (members' posts, past
//! ones included, at once), members, exclusive lists leaving the home and
//! coming back, their streams, bounds and bad input.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{error_code, spawn_app, TestApp, TestUser};
use crate::stream::Events;

/// `{method} {path}` as `who`, with a JSON body if any: status and body.
async fn call(
    app: &TestApp,
    who: &TestUser,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let res = app.request(method, path, Some(&who.token), body).await;
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// A new list of `who`: its id.
async fn new_list(app: &TestApp, who: &TestUser, body: Value) -> String {
    let (status, list) = call(app, who, Method::POST, "/api/v1/lists", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["id"].as_str().unwrap().to_string()
}

/// Adds (or, with DELETE, removes) accounts of a list.
async fn members(
    app: &TestApp,
    who: &TestUser,
    method: Method,
    list: &str,
    ids: &[i64],
) -> StatusCode {
    let path = format!("/api/v1/lists/{list}/accounts");
    let body = json!({ "account_ids": ids.iter().map(|i| i.to_string()).collect::<Vec<_>>() });
    call(app, who, method, &path, Some(body)).await.0
}

/// Scrolls a Mastodon timeline by its `Link` header to the end: the texts,
/// newest first.
async fn scroll(app: &TestApp, who: &TestUser, timeline: &str, limit: u32) -> Vec<String> {
    let mut texts = Vec::new();
    let mut path = format!("/api/v1/timelines/{timeline}?limit={limit}");
    loop {
        let res = app
            .request(Method::GET, &path, Some(&who.token), None)
            .await;
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        let link = res
            .headers()
            .get("link")
            .map(|v| v.to_str().unwrap().to_string());
        let page: Value = res.json().await.unwrap();
        let page = page.as_array().unwrap();
        if page.is_empty() {
            return texts;
        }
        assert!(page.len() <= limit as usize);
        texts.extend(page.iter().map(|s| s["text"].as_str().unwrap().to_string()));
        let link = link.unwrap();
        let next = link.split('<').nth(1).unwrap().split('>').next().unwrap();
        path = next[next.find("/api/").unwrap()..].to_string();
    }
}

/// Publishes `n` posts of each author in turn, oldest first: the texts,
/// newest first.
async fn posts(app: &TestApp, authors: &[(&TestUser, &str)], n: usize) -> Vec<String> {
    let mut texts = Vec::new();
    for i in 0..n {
        for (author, name) in authors {
            let text = format!("{name} {i}");
            app.publish(author, &text).await;
            texts.push(text);
        }
    }
    texts.reverse();
    texts
}

fn of(texts: &[String], names: &[&str]) -> Vec<String> {
    texts
        .iter()
        .filter(|t| names.iter().any(|n| t.starts_with(&format!("{n} "))))
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_list_shows_its_members_posts_past_ones_too_and_each_change_at_once() {
    let app = spawn_app().await;
    let reader = app.create_user("reader").await;
    let [ann, bob, cat] = [
        app.create_user("ann").await,
        app.create_user("bob").await,
        app.create_user("cat").await,
    ];
    app.follow(&reader, &ann).await;
    app.follow(&reader, &bob).await;
    let all = posts(&app, &[(&ann, "ann"), (&bob, "bob"), (&cat, "cat")], 7).await;
    let list = new_list(&app, &reader, json!({"title": "friends"})).await;
    let (_, got) = call(
        &app,
        &reader,
        Method::GET,
        &format!("/api/v1/lists/{list}"),
        None,
    )
    .await;
    assert_eq!(
        got,
        json!({"id": list, "title": "friends", "replies_policy": "list", "exclusive": false})
    );
    let timeline = format!("list/{list}");
    assert!(scroll(&app, &reader, &timeline, 5).await.is_empty());

    // A member added brings its past posts at once.
    assert_eq!(
        members(&app, &reader, Method::POST, &list, &[ann.id]).await,
        StatusCode::OK
    );
    assert_eq!(
        scroll(&app, &reader, &timeline, 3).await,
        of(&all, &["ann"])
    );
    assert_eq!(
        members(&app, &reader, Method::POST, &list, &[bob.id]).await,
        StatusCode::OK
    );
    assert_eq!(
        scroll(&app, &reader, &timeline, 4).await,
        of(&all, &["ann", "bob"])
    );
    // The home is untouched by a list that is not exclusive.
    assert_eq!(
        scroll(&app, &reader, "home", 40).await,
        of(&all, &["ann", "bob"])
    );

    // Only accounts one follows; then nothing changes.
    let status = members(&app, &reader, Method::POST, &list, &[cat.id, ann.id]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        scroll(&app, &reader, &timeline, 40).await,
        of(&all, &["ann", "bob"])
    );

    // New posts come in as they are published.
    app.publish(&bob, "bob new").await;
    app.publish(&cat, "cat new").await;
    let texts = scroll(&app, &reader, &timeline, 40).await;
    assert_eq!(texts[0], "bob new");
    assert_eq!(texts.len(), 15);

    // The members, the lists of an account.
    let (_, accounts) = call(
        &app,
        &reader,
        Method::GET,
        &format!("/api/v1/lists/{list}/accounts"),
        None,
    )
    .await;
    let names: Vec<&str> = accounts
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["username"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bob", "ann"], "highest id first");
    let (_, of_bob) = call(
        &app,
        &reader,
        Method::GET,
        &format!("/api/v1/accounts/{}/lists", bob.id),
        None,
    )
    .await;
    assert_eq!(of_bob[0]["id"], list.as_str());

    // A member taken out leaves at once; an unfollow takes it out.
    assert_eq!(
        members(&app, &reader, Method::DELETE, &list, &[ann.id]).await,
        StatusCode::OK
    );
    let texts = scroll(&app, &reader, &timeline, 40).await;
    assert!(texts.iter().all(|t| t.starts_with("bob ")), "{texts:?}");
    app.unfollow(&reader, &bob).await;
    assert!(scroll(&app, &reader, &timeline, 40).await.is_empty());
    let (_, accounts) = call(
        &app,
        &reader,
        Method::GET,
        &format!("/api/v1/lists/{list}/accounts"),
        None,
    )
    .await;
    assert_eq!(accounts, json!([]));

    // Someone else's list is no list; renamed, then removed.
    let path = format!("/api/v1/timelines/list/{list}");
    assert_eq!(
        call(&app, &ann, Method::GET, &path, None).await.0,
        StatusCode::NOT_FOUND
    );
    let (status, renamed) = call(
        &app,
        &reader,
        Method::PUT,
        &format!("/api/v1/lists/{list}"),
        Some(json!({"title": "close friends", "replies_policy": "none"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            renamed["title"].as_str(),
            renamed["replies_policy"].as_str()
        ),
        (Some("close friends"), Some("none"))
    );
    let (_, lists) = call(&app, &reader, Method::GET, "/api/v1/lists", None).await;
    assert_eq!(lists.as_array().unwrap().len(), 1);
    let (status, _) = call(
        &app,
        &reader,
        Method::DELETE,
        &format!("/api/v1/lists/{list}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        call(&app, &reader, Method::GET, &path, None).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        members(&app, &reader, Method::POST, &list, &[ann.id]).await,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn an_exclusive_lists_members_leave_the_home_at_once_and_come_back_at_once() {
    let app = spawn_app().await;
    app.set_settings(json!({"big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let reader = app.create_user("reader").await;
    let fan = app.create_user("fan").await;
    let [ann, bob] = [app.create_user("ann").await, app.create_user("bob").await];
    app.follow(&reader, &ann).await;
    app.follow(&reader, &bob).await;
    // Bob is a big-V: the home pulls his outbox rather than holding it.
    app.follow(&fan, &bob).await;
    app.settle().await;
    let all = posts(&app, &[(&ann, "ann"), (&bob, "bob")], 6).await;
    assert_eq!(scroll(&app, &reader, "home", 5).await, all);

    let list = new_list(&app, &reader, json!({"title": "apart", "exclusive": true})).await;
    let home_without = |names: &'static [&'static str]| {
        let all = all.clone();
        move |extra: &[&str]| {
            let mut want: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            want.extend(of(&all, names));
            want
        }
    };
    for (member, name, other) in [(ann.id, "ann", "bob"), (bob.id, "bob", "ann")] {
        assert_eq!(
            members(&app, &reader, Method::POST, &list, &[member]).await,
            StatusCode::OK
        );
        assert_eq!(
            scroll(&app, &reader, "home", 5).await,
            of(&all, &[other]),
            "{name} in the list"
        );
        assert_eq!(
            scroll(&app, &reader, &format!("list/{list}"), 5).await,
            of(&all, &[name])
        );
        assert_eq!(
            members(&app, &reader, Method::DELETE, &list, &[member]).await,
            StatusCode::OK
        );
        assert_eq!(scroll(&app, &reader, "home", 5).await, all, "{name} back");
    }

    // A post while in the list goes to the list, and to the home once out.
    members(&app, &reader, Method::POST, &list, &[ann.id]).await;
    app.publish(&ann, "ann while apart").await;
    app.settle().await;
    assert_eq!(scroll(&app, &reader, "home", 5).await, of(&all, &["bob"]));
    assert_eq!(
        scroll(&app, &reader, &format!("list/{list}"), 5).await[0],
        "ann while apart"
    );
    // No longer exclusive: back; exclusive again: out; removed: back.
    let path = format!("/api/v1/lists/{list}");
    let back = home_without(&["ann", "bob"]);
    call(
        &app,
        &reader,
        Method::PUT,
        &path,
        Some(json!({"exclusive": false})),
    )
    .await;
    assert_eq!(
        scroll(&app, &reader, "home", 5).await,
        back(&["ann while apart"])
    );
    call(
        &app,
        &reader,
        Method::PUT,
        &path,
        Some(json!({"exclusive": true})),
    )
    .await;
    assert_eq!(scroll(&app, &reader, "home", 5).await, of(&all, &["bob"]));
    // A mute and the list hide alike: unmuted, still in the list.
    let mute = format!("/api/v1/accounts/{}/mute", ann.id);
    call(&app, &reader, Method::POST, &mute, None).await;
    call(
        &app,
        &reader,
        Method::POST,
        &format!("/api/v1/accounts/{}/unmute", ann.id),
        None,
    )
    .await;
    assert_eq!(scroll(&app, &reader, "home", 5).await, of(&all, &["bob"]));
    call(&app, &reader, Method::DELETE, &path, None).await;
    assert_eq!(
        scroll(&app, &reader, "home", 5).await,
        back(&["ann while apart"])
    );
    // The same from PostgreSQL as from Redis: the native feed agrees.
    let native = app.home(&reader, 4).await;
    assert_eq!(native.len(), all.len() + 1);
}

#[tokio::test]
async fn lists_are_bounded_and_refuse_bad_input_changing_nothing() {
    let app = spawn_app().await;
    let me = app.create_user("me").await;
    let friend = app.create_user("friend").await;
    app.follow(&me, &friend).await;
    let list = new_list(&app, &me, json!({"title": "one"})).await;
    for (method, path, body) in [
        (Method::POST, "/api/v1/lists".to_string(), json!({})),
        (
            Method::POST,
            "/api/v1/lists".to_string(),
            json!({"title": ""}),
        ),
        (
            Method::POST,
            "/api/v1/lists".to_string(),
            json!({"title": "x".repeat(257)}),
        ),
        (
            Method::POST,
            "/api/v1/lists".to_string(),
            json!({"title": "a\u{0}b"}),
        ),
        (
            Method::POST,
            "/api/v1/lists".to_string(),
            json!({"title": "t", "replies_policy": "all"}),
        ),
        (
            Method::POST,
            "/api/v1/lists".to_string(),
            json!({"title": "t", "exclusive": "maybe"}),
        ),
        (
            Method::PUT,
            format!("/api/v1/lists/{list}"),
            json!({"replies_policy": 3}),
        ),
        (
            Method::POST,
            format!("/api/v1/lists/{list}/accounts"),
            json!({"account_ids": []}),
        ),
        (
            Method::POST,
            format!("/api/v1/lists/{list}/accounts"),
            json!({"account_ids": ["x"]}),
        ),
        (Method::GET, "/api/v1/lists/abc".to_string(), Value::Null),
        (
            Method::GET,
            "/api/v1/timelines/list/-1".to_string(),
            Value::Null,
        ),
    ] {
        let body = (!body.is_null()).then_some(body);
        let res = app
            .request(method.clone(), &path, Some(&me.token), body.clone())
            .await;
        assert_eq!(
            error_code(res).await.0,
            StatusCode::BAD_REQUEST,
            "{method} {path} {body:?}"
        );
    }
    let (_, lists) = call(&app, &me, Method::GET, "/api/v1/lists", None).await;
    assert_eq!(
        lists.as_array().unwrap().len(),
        1,
        "a refused change changed something"
    );

    for i in 1..50 {
        new_list(&app, &me, json!({"title": format!("list {i}")})).await;
    }
    let (status, _) = call(
        &app,
        &me,
        Method::POST,
        "/api/v1/lists",
        Some(json!({"title": "51"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // 250 members at most: the 251st is refused whole.
    let many = app.users("m", 251).await;
    for m in &many {
        app.follow(&me, m).await;
    }
    let ids: Vec<i64> = many.iter().map(|m| m.id).collect();
    assert_eq!(
        members(&app, &me, Method::POST, &list, &ids[..250]).await,
        StatusCode::OK
    );
    let status = members(&app, &me, Method::POST, &list, &ids[250..]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let path = format!("/api/v1/lists/{list}/accounts?limit=0");
    let (_, all) = call(&app, &me, Method::GET, &path, None).await;
    assert_eq!(all.as_array().unwrap().len(), 250);
    // Ids in the query string, as some clients send a removal.
    let res = app
        .request(
            Method::DELETE,
            &format!("/api/v1/lists/{list}/accounts?account_ids[]={}", ids[0]),
            Some(&me.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let (_, all) = call(&app, &me, Method::GET, &path, None).await;
    assert_eq!(all.as_array().unwrap().len(), 249);
}

/// The next `update` of a Mastodon stream: its text (none within 5 s).
async fn next_text(events: &mut Events) -> Option<String> {
    loop {
        let e = events.next(Duration::from_secs(5)).await?;
        if e.event == "update" {
            return Some(e.data["text"].as_str().unwrap().to_string());
        }
    }
}

#[tokio::test]
async fn a_list_stream_sends_its_members_posts_and_follows_its_members_at_once() {
    let app = spawn_app().await;
    let reader = app.create_user("reader").await;
    let [ann, bob] = [app.create_user("ann").await, app.create_user("bob").await];
    app.follow(&reader, &ann).await;
    app.follow(&reader, &bob).await;
    let list = new_list(&app, &reader, json!({"title": "friends"})).await;
    members(&app, &reader, Method::POST, &list, &[ann.id]).await;
    let path = format!("/api/v1/streaming/list?list={list}");
    let (status, events) = Events::open_at(&app.address, &path, &reader.token, None).await;
    assert_eq!(status, StatusCode::OK);
    let mut events = events.unwrap();
    app.publish(&bob, "bob, not a member").await;
    app.publish(&ann, "ann 1").await;
    assert_eq!(next_text(&mut events).await.as_deref(), Some("ann 1"));
    // A member added: its posts come at once; one taken out: no more.
    members(&app, &reader, Method::POST, &list, &[bob.id]).await;
    app.publish(&bob, "bob 1").await;
    assert_eq!(next_text(&mut events).await.as_deref(), Some("bob 1"));
    members(&app, &reader, Method::DELETE, &list, &[ann.id]).await;
    app.publish(&ann, "ann 2").await;
    app.publish(&bob, "bob 2").await;
    assert_eq!(next_text(&mut events).await.as_deref(), Some("bob 2"));
    // A mute takes a member's posts out of the list's stream too.
    let mute = format!("/api/v1/accounts/{}/mute", bob.id);
    call(&app, &reader, Method::POST, &mute, None).await;
    app.publish(&bob, "bob muted").await;
    members(&app, &reader, Method::POST, &list, &[ann.id]).await;
    app.publish(&ann, "ann 3").await;
    assert_eq!(next_text(&mut events).await.as_deref(), Some("ann 3"));
    // The home's stream is the user's; the list's never had bob's first.
    // Someone else's list, and a list deleted, end or refuse the stream.
    let (status, _) = Events::open_at(&app.address, &path, &ann.token, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = Events::open_at(
        &app.address,
        "/api/v1/streaming/list?list=x",
        &reader.token,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    call(
        &app,
        &reader,
        Method::DELETE,
        &format!("/api/v1/lists/{list}"),
        None,
    )
    .await;
    assert!(
        events.ends_within(Duration::from_secs(5)).await,
        "the stream of a deleted list ends"
    );
}

#[tokio::test]
async fn following_an_exclusive_lists_member_again_keeps_its_posts_out_of_the_home_stream() {
    let app = spawn_app().await;
    let reader = app.create_user("reader").await;
    let [ann, bob] = [app.create_user("ann").await, app.create_user("bob").await];
    app.follow(&reader, &ann).await;
    app.follow(&reader, &bob).await;
    let list = new_list(&app, &reader, json!({"title": "apart", "exclusive": true})).await;
    members(&app, &reader, Method::POST, &list, &[ann.id]).await;
    let path = "/api/v1/streaming/user";
    let (status, events) = Events::open_at(&app.address, path, &reader.token, None).await;
    assert_eq!(status, StatusCode::OK);
    let mut events = events.unwrap();
    // A follow asked again (it stands already) changes nothing the home
    // shows: Ann's posts stay out of its stream, as out of its pages.
    app.follow(&reader, &ann).await;
    app.publish(&ann, "ann, apart").await;
    app.publish(&bob, "bob").await;
    assert_eq!(next_text(&mut events).await.as_deref(), Some("bob"));
    let home = scroll(&app, &reader, "home", 5).await;
    assert_eq!(home.len(), 1, "{home:?}");
}
