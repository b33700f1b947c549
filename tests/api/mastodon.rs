//! The Mastodon API's start-up and home-screen calls, through the API:
//! account search (v2), several statuses at once, markers and
//! notifications (one by one and grouped).

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{error_code, spawn_app, TestApp, TestUser};

/// The usernames of a search's accounts, after checking its other lists
/// are there (empty).
async fn search(app: &TestApp, who: &TestUser, query: &str) -> Vec<String> {
    let res = app
        .request(
            Method::GET,
            &format!("/api/v2/search?{query}"),
            Some(&who.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK, "{query}");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["statuses"], json!([]), "{query}");
    assert_eq!(body["hashtags"], json!([]), "{query}");
    body["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            assert_eq!(a["acct"], a["username"]);
            a["username"].as_str().unwrap().to_string()
        })
        .collect()
}

#[tokio::test]
async fn search_finds_accounts_by_username_exact_first_then_by_prefix() {
    let app = spawn_app().await;
    let me = app.create_user("me").await;
    let mut named = Vec::new();
    for name in ["annabel", "ann", "bob", "anna", "ann_x", "annie"] {
        named.push(app.create_user(name).await);
    }
    let (annabel, anna, annie) = (&named[0], &named[3], &named[5]);
    let suspended = app
        .request(
            Method::POST,
            &format!("/api/v1/admin/users/{}/suspend", annie.id),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(suspended.status(), StatusCode::OK);
    let all = ["ann", "ann_x", "anna", "annabel"];
    // The exact match first, then the usernames that start with the term;
    // a suspended account is not found.
    assert_eq!(search(&app, &me, "q=ann").await, all);
    assert_eq!(search(&app, &me, "q=%40ANN&resolve=true").await, all);
    let host = app.address.trim_start_matches("http://");
    assert_eq!(search(&app, &me, &format!("q=ann%40{host}")).await, all);
    assert_eq!(search(&app, &me, "q=anna").await, ["anna", "annabel"]);
    assert_eq!(search(&app, &me, "q=annie").await, Vec::<String>::new());
    // An account's page names that account only; another host's none.
    let page = format!("q={}/%40anna", app.address);
    assert_eq!(search(&app, &me, &page).await, ["anna"]);
    assert!(search(&app, &me, "q=ann%40elsewhere.social")
        .await
        .is_empty());
    assert!(search(&app, &me, "q=%23ann").await.is_empty());
    assert!(search(&app, &me, "q=").await.is_empty());
    assert!(search(&app, &me, "q=ann&type=statuses").await.is_empty());
    assert_eq!(search(&app, &me, "q=ann&type=accounts").await, all);
    // Pages by offset; only the accounts the caller follows.
    assert_eq!(search(&app, &me, "q=ann&limit=2").await, all[..2]);
    assert_eq!(search(&app, &me, "q=ann&limit=2&offset=2").await, all[2..]);
    app.follow(&me, anna).await;
    app.follow(&me, annabel).await;
    let followed = search(&app, &me, "q=ann&following=true").await;
    assert_eq!(followed, ["anna", "annabel"]);
    // What a client sends wrong is told, not guessed.
    for bad in [
        "",
        "q=ann&type=people",
        "q=ann&following=maybe",
        "q=ann&offset=10001",
        "q=ann&limit=many",
        "q=ann&account_id=x",
    ] {
        let res = app
            .request(
                Method::GET,
                &format!("/api/v2/search?{bad}"),
                Some(&me.token),
                None,
            )
            .await;
        assert_eq!(error_code(res).await.0, StatusCode::BAD_REQUEST, "{bad}");
    }
}

/// Publishes through Mastodon's route and answers the status id.
async fn toot(app: &TestApp, who: &TestUser, text: &str) -> String {
    let res = app
        .request(
            Method::POST,
            "/api/v1/statuses",
            Some(&who.token),
            Some(json!({ "status": text })),
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let status: Value = res.json().await.unwrap();
    status["id"].as_str().unwrap().to_string()
}

/// The ids of `GET /api/v1/statuses?{query}` (200).
async fn several(app: &TestApp, who: &TestUser, query: &str) -> Vec<String> {
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/statuses?{query}"),
            Some(&who.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK, "{query}");
    let body: Value = res.json().await.unwrap();
    body.as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn several_statuses_answer_in_the_order_asked_without_the_missing_ones() {
    let app = spawn_app().await;
    let reader = app.create_user("reader").await;
    let ann = app.create_user("ann").await;
    let rude = app.create_user("rude").await;
    let [a, b, c] = [
        toot(&app, &ann, "a").await,
        toot(&app, &ann, "b").await,
        toot(&app, &ann, "c").await,
    ];
    let blocked = toot(&app, &rude, "rude").await;
    let deleted = toot(&app, &ann, "gone").await;
    let res = app
        .request(
            Method::DELETE,
            &format!("/api/v1/statuses/{deleted}"),
            Some(&ann.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = app
        .request(
            Method::POST,
            &format!("/api/v1/accounts/{}/block", rude.id),
            Some(&reader.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let asked = format!("id[]={c}&id[]={a}&id[]={deleted}&id[]={blocked}&id[]={c}&id[]={b}");
    assert_eq!(several(&app, &reader, &asked).await, [c.as_str(), &a, &b]);
    // Another reader sees the blocked author's status; `id` works too.
    assert_eq!(
        several(&app, &ann, &format!("id={blocked}&id={a}")).await,
        [blocked.as_str(), &a]
    );
    assert!(several(&app, &reader, "").await.is_empty());
    // More than 20 ids, or one the service never gave, are refused.
    let many: Vec<String> = (1..=21).map(|i| format!("id[]={i}")).collect();
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/statuses?{}", many.join("&")),
            Some(&reader.token),
            None,
        )
        .await;
    assert_eq!(error_code(res).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    let res = app
        .request(
            Method::GET,
            "/api/v1/statuses?id[]=abc",
            Some(&reader.token),
            None,
        )
        .await;
    assert_eq!(error_code(res).await.0, StatusCode::BAD_REQUEST);
}

/// The status ids of the caller's home (`GET /api/v1/timelines/home?{query}`).
async fn home(app: &TestApp, who: &TestUser, query: &str) -> Vec<String> {
    let path = format!("/api/v1/timelines/home?{query}");
    let res = app
        .request(Method::GET, &path, Some(&who.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::OK, "{path}");
    let body: Value = res.json().await.unwrap();
    body.as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

/// `POST /api/v1/markers` with a JSON body: its status and body.
async fn set_markers(app: &TestApp, who: &TestUser, body: Value) -> (StatusCode, Value) {
    let res = app
        .request(
            Method::POST,
            "/api/v1/markers",
            Some(&who.token),
            Some(body),
        )
        .await;
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn markers(app: &TestApp, who: &TestUser, query: &str) -> Value {
    let path = format!("/api/v1/markers?{query}");
    let res = app
        .request(Method::GET, &path, Some(&who.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::OK, "{path}");
    res.json().await.unwrap()
}

#[tokio::test]
async fn the_home_marker_resumes_any_device_exactly_where_its_reader_stopped() {
    let app = spawn_app().await;
    let reader = app.create_user("reader").await;
    let author = app.create_user("author").await;
    app.follow(&reader, &author).await;
    // Two posts share a millisecond: the marker lies between them.
    let ms = feed_service::engine::now_ms();
    for (i, at) in [ms - 3, ms - 2, ms - 1, ms - 1].into_iter().enumerate() {
        app.publish_at(&author, &format!("post {i}"), at).await;
    }
    let read = home(&app, &reader, "limit=4").await;
    assert_eq!(read.len(), 4);
    assert_eq!(markers(&app, &reader, "timeline[]=home").await, json!({}));
    // The first device read down to the third newest, and says so (a form,
    // as most clients send it).
    let res = app
        .send(
            &Method::POST,
            "/api/v1/markers",
            app.client
                .post(app.url("/api/v1/markers"))
                .bearer_auth(&reader.token)
                .form(&[("home[last_read_id]", read[1].as_str())]),
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let set: Value = res.json().await.unwrap();
    assert_eq!(set["home"]["last_read_id"], read[1].as_str());
    assert_eq!(set["home"]["version"], 0);
    assert!(set["home"]["updated_at"].as_str().unwrap().ends_with('Z'));
    // Another device reads the marker and pages up from it: the one post
    // above it (its twin in that millisecond), then what arrives later.
    let got = markers(&app, &reader, "timeline[]=home&timeline[]=notifications").await;
    assert_eq!(got, set);
    let marker = got["home"]["last_read_id"].as_str().unwrap();
    assert_eq!(
        home(&app, &reader, &format!("min_id={marker}")).await,
        [read[0].as_str()]
    );
    app.publish(&author, "later").await;
    let above = home(&app, &reader, &format!("min_id={marker}")).await;
    assert_eq!(above.len(), 2);
    assert_eq!(above[1], read[0]);
    // The same id again changes nothing; a new one raises the version.
    let (status, same) =
        set_markers(&app, &reader, json!({"home": {"last_read_id": read[1]}})).await;
    assert_eq!(
        (status, &same["home"]["version"]),
        (StatusCode::OK, &json!(0))
    );
    let (status, moved) =
        set_markers(&app, &reader, json!({"home": {"last_read_id": above[0]}})).await;
    assert_eq!(
        (status, &moved["home"]["version"]),
        (StatusCode::OK, &json!(1))
    );
    // A device that read version 0 is told it is stale, and writes
    // nothing, not even its other marker.
    let stale = json!({
        "notifications": {"last_read_id": "7"},
        "home": {"last_read_id": read[3], "version": 0},
    });
    let (status, body) = set_markers(&app, &reader, stale).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let now = markers(&app, &reader, "timeline[]=home&timeline[]=notifications").await;
    assert_eq!(now["home"]["last_read_id"], above[0].as_str());
    assert!(now.get("notifications").is_none(), "{now}");
    let fresh = json!({
        "notifications": {"last_read_id": "7"},
        "home": {"last_read_id": read[3], "version": 1},
    });
    let (status, body) = set_markers(&app, &reader, fresh).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["home"]["version"], 2);
    assert_eq!(body["notifications"]["version"], 0);
    // Markers are each user's own.
    assert_eq!(markers(&app, &author, "timeline[]=home").await, json!({}));
    // What a client sends wrong is told, and changes nothing.
    for bad in [
        json!({"lists": {"last_read_id": read[0]}}),
        json!({"home": {}}),
        json!({"home": {"last_read_id": "123"}}),
        json!({"home": {"last_read_id": read[0], "version": -1}}),
        json!({"notifications": {"last_read_id": "seven"}}),
        json!({"home": read[0]}),
        json!([]),
    ] {
        let (status, _) = set_markers(&app, &reader, bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
    let res = app
        .request(
            Method::GET,
            "/api/v1/markers?timeline[]=public",
            Some(&reader.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let after = markers(&app, &reader, "timeline[]=home&timeline[]=notifications").await;
    assert_eq!(after, body);
}

/// The caller's notifications (`GET /api/v1/notifications?{query}`): each
/// one's id and account's username, and the `Link` header.
async fn notifications(
    app: &TestApp,
    who: &TestUser,
    query: &str,
) -> (Vec<(String, String)>, Option<String>) {
    let path = format!("/api/v1/notifications?{query}");
    let res = app
        .request(Method::GET, &path, Some(&who.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::OK, "{path}");
    let link = res
        .headers()
        .get("link")
        .map(|l| l.to_str().unwrap().to_string());
    let body: Value = res.json().await.unwrap();
    let told = body
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            assert_eq!(n["type"], "follow");
            let id = n["id"].as_str().unwrap().to_string();
            assert!(n["group_key"].as_str().unwrap().starts_with("follow-"));
            (id, n["account"]["username"].as_str().unwrap().to_string())
        })
        .collect();
    (told, link)
}

async fn unread(app: &TestApp, who: &TestUser) -> i64 {
    let path = "/api/v1/notifications/unread_count";
    let res = app.request(Method::GET, path, Some(&who.token), None).await;
    assert_eq!(res.status(), StatusCode::OK);
    res.json::<Value>().await.unwrap()["count"]
        .as_i64()
        .unwrap()
}

#[tokio::test]
async fn new_followers_are_told_paged_counted_from_the_marker_and_dismissed() {
    let app = spawn_app().await;
    let me = app.create_user("me").await;
    let names = ["ann", "bob", "cat"];
    let mut fans = Vec::new();
    for name in names {
        let fan = app.create_user(name).await;
        app.follow(&fan, &me).await;
        fans.push(fan);
    }
    // Following back tells them, not me.
    app.follow(&me, &fans[0]).await;
    let (all, link) = notifications(&app, &me, "").await;
    let who: Vec<&str> = all.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(who, ["cat", "bob", "ann"]);
    assert!(link.unwrap().contains(&format!("max_id={}", all[2].0)));
    let ids: Vec<&str> = all.iter().map(|(id, _)| id.as_str()).collect();
    // Paged by id, both ways.
    let (first, _) = notifications(&app, &me, "limit=2").await;
    assert_eq!(first, all[..2]);
    let (rest, _) = notifications(&app, &me, &format!("max_id={}", ids[1])).await;
    assert_eq!(rest, all[2..]);
    let (above, _) = notifications(&app, &me, &format!("min_id={}&limit=1", ids[2])).await;
    assert_eq!(above, all[1..2]);
    // Filters: kinds and an account.
    assert!(notifications(&app, &me, "types[]=mention")
        .await
        .0
        .is_empty());
    assert!(notifications(&app, &me, "exclude_types[]=follow")
        .await
        .0
        .is_empty());
    assert_eq!(notifications(&app, &me, "types[]=follow").await.0, all);
    let of_ann = format!("account_id={}", fans[0].id);
    assert_eq!(notifications(&app, &me, &of_ann).await.0, all[2..]);
    // Unread: above the notifications marker.
    assert_eq!(unread(&app, &me).await, 3);
    let (status, _) = set_markers(
        &app,
        &me,
        json!({"notifications": {"last_read_id": ids[1]}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(unread(&app, &me).await, 1);
    let path = "/api/v1/notifications/unread_count?types[]=mention";
    let res = app.request(Method::GET, path, Some(&me.token), None).await;
    assert_eq!(res.json::<Value>().await.unwrap()["count"], 0);
    // One blocked is not shown, nor counted.
    let res = app
        .request(
            Method::POST,
            &format!("/api/v1/accounts/{}/block", fans[2].id),
            Some(&me.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(notifications(&app, &me, "").await.0, all[1..]);
    assert_eq!(unread(&app, &me).await, 0);
    // One by id; dismissed; cleared.
    let one = format!("/api/v1/notifications/{}", ids[1]);
    let res = app.request(Method::GET, &one, Some(&me.token), None).await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = app
        .request(Method::GET, &one, Some(&fans[0].token), None)
        .await;
    assert_eq!(error_code(res).await.0, StatusCode::NOT_FOUND);
    let dismiss = format!("{one}/dismiss");
    let res = app
        .request(Method::POST, &dismiss, Some(&me.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = app
        .request(Method::POST, &dismiss, Some(&me.token), None)
        .await;
    assert_eq!(error_code(res).await.0, StatusCode::NOT_FOUND);
    assert_eq!(notifications(&app, &me, "").await.0, all[2..]);
    let clear = "/api/v1/notifications/clear";
    let res = app
        .request(Method::POST, clear, Some(&me.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(notifications(&app, &me, "").await.0.is_empty());
    assert_eq!(notifications(&app, &fans[0], "").await.0.len(), 1);
    for bad in ["types[]=poke", "max_id=x", "account_id=x", "limit=many"] {
        let path = format!("/api/v1/notifications?{bad}");
        let res = app.request(Method::GET, &path, Some(&me.token), None).await;
        assert_eq!(error_code(res).await.0, StatusCode::BAD_REQUEST, "{bad}");
    }
}

#[tokio::test]
async fn a_user_keeps_its_newest_thousand_notifications() {
    let app = spawn_app().await;
    let me = app.create_user("me").await;
    let old = app.create_user("old").await;
    let new = app.create_user("new").await;
    let mut pg = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(
        app.database_url(),
    )
    .await
    .unwrap();
    let many = format!(
        "INSERT INTO notifications (user_id, kind, account_id, created_at_ms, group_key) \
         SELECT {}, 'follow', {}, 0, 'follow-0' FROM generate_series(1, 1500)",
        me.id, old.id
    );
    diesel_async::RunQueryDsl::execute(diesel::sql_query(many), &mut pg)
        .await
        .unwrap();
    app.follow(&new, &me).await;
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let kept = format!(
        "SELECT count(*) AS n FROM notifications WHERE user_id = {}",
        me.id
    );
    let kept: N = diesel_async::RunQueryDsl::get_result(diesel::sql_query(kept), &mut pg)
        .await
        .unwrap();
    assert_eq!(kept.n, 1000);
    let (newest, _) = notifications(&app, &me, "limit=1").await;
    assert_eq!(newest[0].1, "new");
}

/// `GET {path}` as `who`: the body, after checking it answered 200.
async fn get_json(app: &TestApp, who: &TestUser, path: &str) -> (Value, Option<String>) {
    let res = app.request(Method::GET, path, Some(&who.token), None).await;
    assert_eq!(res.status(), StatusCode::OK, "{path}");
    let link = res
        .headers()
        .get("link")
        .map(|l| l.to_str().unwrap().to_string());
    (res.json().await.unwrap(), link)
}

/// A grouped page's groups: (key, count, sample usernames), after
/// checking that every sampled account is in `accounts`.
fn groups(page: &Value) -> Vec<(String, i64, Vec<String>)> {
    assert_eq!(page["statuses"], json!([]));
    let accounts: std::collections::HashMap<&str, &str> = page["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["id"].as_str().unwrap(), a["username"].as_str().unwrap()))
        .collect();
    page["notification_groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            assert_eq!(g["type"], "follow");
            let sample = g["sample_account_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|id| accounts[id.as_str().unwrap()].to_string())
                .collect();
            let key = g["group_key"].as_str().unwrap().to_string();
            (key, g["notifications_count"].as_i64().unwrap(), sample)
        })
        .collect()
}

/// Runs `sql` on the test's database.
async fn run_sql(app: &TestApp, sql: String) {
    let mut pg = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(
        app.database_url(),
    )
    .await
    .unwrap();
    diesel_async::RunQueryDsl::execute(diesel::sql_query(sql), &mut pg)
        .await
        .unwrap();
}

#[tokio::test]
async fn new_followers_come_in_groups_paged_counted_read_and_dismissed_whole() {
    let app = spawn_app().await;
    let (instance, _) = get_json(&app, &app.create_user("anyone").await, "/api/v2/instance").await;
    assert_eq!(instance["api_versions"]["mastodon"], 2);
    let me = app.create_user("me").await;
    let mut names = Vec::new();
    for i in 0..10 {
        let fan = app.create_user(&format!("fan{i}")).await;
        app.follow(&fan, &me).await;
        names.push(format!("fan{i}"));
    }
    let (page, link) = get_json(&app, &me, "/api/v2/notifications").await;
    let all = groups(&page);
    assert_eq!(all.len(), 1, "{page}");
    let (key, count, sample) = &all[0];
    assert!(key.starts_with("follow-"));
    assert_eq!(*count, 10);
    let newest: Vec<String> = names.iter().rev().take(8).cloned().collect();
    assert_eq!(sample, &newest, "the eight newest followers");
    let group = &page["notification_groups"][0];
    let (v1, _) = notifications(&app, &me, "").await;
    assert_eq!(group["most_recent_notification_id"], v1[0].0);
    assert_eq!(group["page_max_id"], v1[0].0);
    assert_eq!(group["page_min_id"], v1[9].0);
    assert!(link.unwrap().contains(&format!("max_id={}", v1[9].0)));
    // Not grouped: each its own; `limit` counts groups.
    let (page, link) = get_json(
        &app,
        &me,
        "/api/v2/notifications?grouped_types[]=mention&limit=3",
    )
    .await;
    let keys: Vec<String> = groups(&page).into_iter().map(|g| g.0).collect();
    let want: Vec<String> = v1[..3]
        .iter()
        .map(|(id, _)| format!("ungrouped-{id}"))
        .collect();
    assert_eq!(keys, want);
    assert!(link.unwrap().contains(&format!("max_id={}", v1[2].0)));
    // Unread: groups above the marker.
    let count = |q: &'static str| {
        let me = &me;
        let app = &app;
        async move {
            let path = format!("/api/v2/notifications/unread_count{q}");
            get_json(app, me, &path).await.0["count"].as_i64().unwrap()
        }
    };
    assert_eq!(count("").await, 1);
    assert_eq!(count("?grouped_types[]=mention").await, 10);
    assert_eq!(unread(&app, &me).await, 10);
    // A group by its key: all of it, and its accounts newest first.
    let (one, _) = get_json(&app, &me, &format!("/api/v2/notifications/{key}")).await;
    assert_eq!(groups(&one)[0].1, 10);
    assert!(one["notification_groups"][0].get("page_min_id").is_none());
    let (accounts, _) = get_json(&app, &me, &format!("/api/v2/notifications/{key}/accounts")).await;
    let usernames: Vec<&str> = accounts
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["username"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = names.iter().rev().map(String::as_str).collect();
    assert_eq!(usernames, want);
    let single = format!("/api/v2/notifications/ungrouped-{}", v1[4].0);
    assert_eq!(groups(&get_json(&app, &me, &single).await.0)[0].1, 1);
    // Another user's group, or none, is not found.
    let other = app.create_user("other").await;
    for path in [
        format!("/api/v2/notifications/{key}"),
        "/api/v2/notifications/follow-1".into(),
        "/api/v2/notifications/ungrouped-x".into(),
        "/api/v2/notifications/follow-1%00".into(),
    ] {
        let res = app
            .request(Method::GET, &path, Some(&other.token), None)
            .await;
        assert_eq!(error_code(res).await.0, StatusCode::NOT_FOUND, "{path}");
    }
    for bad in [
        "grouped_types[]=poke",
        "expand_accounts=some",
        "types[]=poke",
        "max_id=x",
    ] {
        let path = format!("/api/v2/notifications?{bad}");
        let res = app.request(Method::GET, &path, Some(&me.token), None).await;
        assert_eq!(error_code(res).await.0, StatusCode::BAD_REQUEST, "{bad}");
    }
    // Dismissed whole: the group's every notification goes.
    let dismiss = format!("/api/v2/notifications/{key}/dismiss");
    let res = app
        .request(Method::POST, &dismiss, Some(&me.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(notifications(&app, &me, "").await.0.is_empty());
    let res = app
        .request(Method::POST, &dismiss, Some(&me.token), None)
        .await;
    assert_eq!(error_code(res).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_group_takes_new_followers_for_twelve_hours_from_its_first() {
    let app = spawn_app().await;
    let hour = chrono_hour();
    let (fresh, stale) = (
        app.create_user("fresh").await,
        app.create_user("stale").await,
    );
    let old = app.create_user("old").await;
    // A group begun five hours ago, and one begun thirteen hours ago.
    for (who, began) in [(&fresh, hour - 5), (&stale, hour - 13)] {
        run_sql(
            &app,
            format!(
                "INSERT INTO notifications (user_id, kind, account_id, created_at_ms, group_key) \
             VALUES ({}, 'follow', {}, {}, 'follow-{began}')",
                who.id,
                old.id,
                began * 3_600_000
            ),
        )
        .await;
    }
    let new = app.create_user("new").await;
    app.follow(&new, &fresh).await;
    app.follow(&new, &stale).await;
    let (page, _) = get_json(&app, &fresh, "/api/v2/notifications").await;
    let got = groups(&page);
    assert_eq!(
        got,
        vec![(
            format!("follow-{}", hour - 5),
            2,
            vec!["new".into(), "old".into()]
        )]
    );
    // Two groups: a page of one holds the newest; the next page the other.
    let (page, link) = get_json(&app, &stale, "/api/v2/notifications?limit=1").await;
    let (key, count, sample) = groups(&page).remove(0);
    // (Begun this hour: the hour the test began, or the next.)
    let began = key.strip_prefix("follow-").unwrap().parse::<i64>().unwrap();
    assert!(began == hour || began == chrono_hour(), "{key}");
    assert_eq!((count, sample), (1, vec!["new".to_string()]));
    let link = link.unwrap();
    let next = link.split('<').nth(1).unwrap().split('>').next().unwrap();
    let next = &next[next.find("/api/").unwrap()..];
    let (page, _) = get_json(&app, &stale, next).await;
    assert_eq!(
        groups(&page),
        vec![(format!("follow-{}", hour - 13), 1, vec!["old".into()])]
    );
}

/// The hour since the epoch now.
fn chrono_hour() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    now.as_millis() as i64 / 3_600_000
}

/// `{method} {path}` as `who` with a JSON body: the status and the body.
async fn send_json(
    app: &TestApp,
    who: &TestUser,
    method: Method,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    let res = app
        .request(method, path, Some(&who.token), Some(body))
        .await;
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Scrolls the home with `limit` by its `Link` header to the end: each
/// page's texts, and each status's matched filters' titles.
async fn scroll_home(app: &TestApp, who: &TestUser, limit: u32) -> Vec<Vec<(String, Vec<String>)>> {
    let mut pages = Vec::new();
    let mut path = format!("/api/v1/timelines/home?limit={limit}");
    loop {
        let (body, link) = get_json(app, who, &path).await;
        let page: Vec<(String, Vec<String>)> = body
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let titles = s["filtered"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["filter"]["title"].as_str().unwrap().to_string())
                    .collect();
                (s["text"].as_str().unwrap().to_string(), titles)
            })
            .collect();
        if page.is_empty() {
            return pages;
        }
        pages.push(page);
        let link = link.unwrap();
        let next = link.split('<').nth(1).unwrap().split('>').next().unwrap();
        path = next[next.find("/api/").unwrap()..].to_string();
    }
}

#[tokio::test]
async fn filters_mark_or_hide_what_they_match_and_a_filtered_home_keeps_full_pages() {
    let app = spawn_app().await;
    let reader = app.create_user("reader").await;
    let author = app.create_user("author").await;
    app.follow(&reader, &author).await;
    let mut plain = Vec::new();
    for i in 0..25 {
        let text = if i % 3 == 0 {
            format!("Spoiler: episode {i}")
        } else {
            format!("plain {i}")
        };
        app.publish(&author, &text).await;
        if i % 3 != 0 {
            plain.push(text);
        }
    }
    plain.reverse();
    let (status, filter) = send_json(
        &app,
        &reader,
        Method::POST,
        "/api/v2/filters",
        json!({"title": "No spoilers", "context": ["home", "thread"], "filter_action": "hide",
               "keywords_attributes": [{"keyword": "spoiler", "whole_word": true}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{filter}");
    assert_eq!(filter["keywords"][0]["keyword"], "spoiler");
    assert_eq!(filter["context"], json!(["home", "thread"]));
    assert_eq!(filter["expires_at"], Value::Null);
    let id = filter["id"].as_str().unwrap().to_string();
    // A status read by itself is in the `thread` context: marked, not left out.
    let newest = format!("/api/v1/accounts/{}/statuses?limit=1", author.id);
    let (newest, _) = get_json(&app, &reader, &newest).await;
    assert_eq!(newest[0]["text"], "Spoiler: episode 24");
    let one = format!("/api/v1/statuses/{}", newest[0]["id"].as_str().unwrap());
    let (one, _) = get_json(&app, &reader, &one).await;
    assert_eq!(one["filtered"][0]["filter"]["title"], "No spoilers");
    let several = format!(
        "/api/v1/statuses?id[]={}",
        newest[0]["id"].as_str().unwrap()
    );
    let (several, _) = get_json(&app, &reader, &several).await;
    assert_eq!(
        several[0]["filtered"][0]["keyword_matches"],
        json!(["spoiler"])
    );
    // Hidden: every page full but the last, every other post once, in order.
    let pages = scroll_home(&app, &reader, 5).await;
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert!(
        sizes[..sizes.len() - 1].iter().all(|n| *n == 5),
        "{sizes:?}"
    );
    let texts: Vec<String> = pages.concat().into_iter().map(|(t, _)| t).collect();
    assert_eq!(texts, plain);
    // Warned: every post, the matched ones marked with the filter.
    let path = format!("/api/v2/filters/{id}");
    let (status, _) = send_json(
        &app,
        &reader,
        Method::PUT,
        &path,
        json!({"filter_action": "warn"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let all = scroll_home(&app, &reader, 7).await.concat();
    assert_eq!(all.len(), 25);
    for (text, titles) in &all {
        let want: Vec<String> = if text.starts_with("Spoiler") {
            vec!["No spoilers".into()]
        } else {
            vec![]
        };
        assert_eq!(titles, &want, "{text}");
    }
    // Whole words only: `spoil` matches nothing until it may be inside one.
    let body = json!({"keywords_attributes": [
        {"id": filter["keywords"][0]["id"], "_destroy": true},
        {"keyword": "spoil", "whole_word": true}]});
    let (_, changed) = send_json(&app, &reader, Method::PUT, &path, body).await;
    let spoil = changed["keywords"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        changed["keywords"].as_array().unwrap().len(),
        1,
        "{changed}"
    );
    let marked = |pages: Vec<Vec<(String, Vec<String>)>>| {
        pages
            .concat()
            .into_iter()
            .filter(|(_, t)| !t.is_empty())
            .count()
    };
    assert_eq!(marked(scroll_home(&app, &reader, 40).await), 0);
    let keyword = format!("/api/v2/filters/keywords/{spoil}");
    let (status, _) = send_json(
        &app,
        &reader,
        Method::PUT,
        &keyword,
        json!({"whole_word": false}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(marked(scroll_home(&app, &reader, 40).await), 9);
    // Another context only: the home is not filtered.
    let (status, _) = send_json(
        &app,
        &reader,
        Method::PUT,
        &path,
        json!({"context": ["account"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(marked(scroll_home(&app, &reader, 40).await), 0);
    let statuses = format!("/api/v1/accounts/{}/statuses?limit=40", author.id);
    let (body, _) = get_json(&app, &reader, &statuses).await;
    let flagged = body
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["filtered"] != json!([]))
        .count();
    assert_eq!(flagged, 9, "the account context marks");
    // Expired: no longer applies.
    let (_, home_again) = send_json(
        &app,
        &reader,
        Method::PUT,
        &path,
        json!({"context": ["home"], "expires_in": 1}),
    )
    .await;
    assert!(home_again["expires_at"].is_string());
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(marked(scroll_home(&app, &reader, 40).await), 0);
    // Keywords one by one; a form body; another user's filter is not found.
    let keywords = format!("{path}/keywords");
    let (status, added) = send_json(
        &app,
        &reader,
        Method::POST,
        &keywords,
        json!({"keyword": "episode"}),
    )
    .await;
    assert_eq!(
        (status, &added["whole_word"]),
        (StatusCode::OK, &json!(true))
    );
    let (listed, _) = get_json(&app, &reader, &keywords).await;
    assert_eq!(listed.as_array().unwrap().len(), 2);
    let res = app
        .client
        .post(app.url("/api/v2/filters"))
        .bearer_auth(&reader.token)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("title=Formed&context[]=home&keywords_attributes[0][keyword]=a%20b&keywords_attributes[0][whole_word]=false")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let formed: Value = res.json().await.unwrap();
    assert_eq!(
        formed["keywords"][0],
        json!({"id": formed["keywords"][0]["id"], "keyword": "a b", "whole_word": false})
    );
    assert_eq!(formed["filter_action"], "warn");
    let (all, _) = get_json(&app, &reader, "/api/v2/filters").await;
    assert_eq!(all.as_array().unwrap().len(), 2);
    for path in [path.clone(), keyword.clone()] {
        let res = app
            .request(Method::GET, &path, Some(&author.token), None)
            .await;
        assert_eq!(error_code(res).await.0, StatusCode::NOT_FOUND, "{path}");
    }
    // What a client sends wrong is told, and changes nothing.
    for bad in [
        json!({"title": "x", "context": ["nowhere"]}),
        json!({"title": "x", "context": ["home"], "filter_action": "nuke"}),
        json!({"title": "x", "context": ["home"], "expires_in": -5}),
        json!({"title": "", "context": ["home"]}),
        json!({"context": ["home"]}),
        json!({"title": "x", "context": ["home"], "keywords_attributes": [{"keyword": "k".repeat(101)}]}),
        json!({"title": "x", "context": ["home"], "keywords_attributes": [{"whole_word": true}]}),
    ] {
        let (status, _) =
            send_json(&app, &reader, Method::POST, "/api/v2/filters", bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
    let (all, _) = get_json(&app, &reader, "/api/v2/filters").await;
    assert_eq!(all.as_array().unwrap().len(), 2);
    // Deleted, with its keywords.
    let res = app
        .request(Method::DELETE, &path, Some(&reader.token), None)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = app
        .request(Method::GET, &keyword, Some(&reader.token), None)
        .await;
    assert_eq!(error_code(res).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_user_keeps_at_most_a_hundred_filters_of_a_hundred_keywords() {
    let app = spawn_app().await;
    let me = app.create_user("me").await;
    let many: Vec<Value> = (0..101)
        .map(|i| json!({"keyword": format!("k{i}")}))
        .collect();
    let body = json!({"title": "big", "context": ["home"], "keywords_attributes": many});
    let (status, _) = send_json(&app, &me, Method::POST, "/api/v2/filters", body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    for i in 0..100 {
        let body = json!({"title": format!("f{i}"), "context": ["home"]});
        let (status, _) = send_json(&app, &me, Method::POST, "/api/v2/filters", body).await;
        assert_eq!(status, StatusCode::OK);
    }
    let body = json!({"title": "one more", "context": ["home"]});
    let (status, _) = send_json(&app, &me, Method::POST, "/api/v2/filters", body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (all, _) = get_json(&app, &me, "/api/v2/filters").await;
    assert_eq!(all.as_array().unwrap().len(), 100);
}
