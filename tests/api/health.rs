use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::{error_code, spawn_app};

#[tokio::test]
async fn healthz_and_readyz_answer_when_both_stores_are_up() {
    let app = spawn_app().await;
    let res = app.request(Method::GET, "/healthz", None, None).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.json::<Value>().await.unwrap()["status"], "ok");
    let res = app.request(Method::GET, "/readyz", None, None).await;
    assert_eq!(res.status(), StatusCode::OK);
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_json() {
    let app = spawn_app().await;
    let res = app.request(Method::GET, "/nowhere", None, None).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );
    let res = app
        .request(Method::GET, "/api/v1/nowhere", Some(&app.admin), None)
        .await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );
    let res = app
        .request(Method::PATCH, "/api/v1/posts/1", Some(&app.admin), None)
        .await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed".into())
    );
    let res = app.request(Method::POST, "/healthz", None, None).await;
    assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
}
