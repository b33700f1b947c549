//! The Mastodon API's discovery calls, through the API: account search
//! (v2) and several statuses at once.

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
