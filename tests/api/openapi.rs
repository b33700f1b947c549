//! The OpenAPI document against the routes actually served, both ways, and
//! the Swagger UI with no network.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{conforms, spawn_app, TestResponse};

/// The `/api` routes that need no token.
const PUBLIC: [&str; 4] = [
    "/api/v1/custom_emojis",
    "/api/v1/instance",
    "/api/v2/instance",
    "/api/v1/streaming/health",
];

const METHODS: [Method; 5] = [
    Method::GET,
    Method::PUT,
    Method::POST,
    Method::DELETE,
    Method::PATCH,
];

#[tokio::test]
async fn the_document_and_the_route_table_agree_both_ways() {
    let app = spawn_app().await;
    let doc = app.doc.clone();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    let post = app.publish(&alice, "hello").await;
    let paths = doc["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 68, "{:?}", paths.keys().collect::<Vec<_>>());
    for (template, item) in paths {
        // Ids that exist, so that each operation can do its work.
        let path = template
            .replace("{id}", &alice.id.to_string())
            .replace("{target}", &bob.id.to_string())
            .replace(
                &format!("/posts/{}", alice.id),
                &format!("/posts/{}", post.id),
            );
        let documented: Vec<String> = item.as_object().unwrap().keys().cloned().collect();
        for method in METHODS {
            let name = method.as_str().to_lowercase();
            let op = &item[&name];
            let mut req = app
                .client
                .request(method.clone(), app.url(&path))
                .bearer_auth(&app.admin);
            if let Some(example) = body_example(&doc, op) {
                req = req.json(&example);
            }
            let res = app.send(&method, &path, req).await;
            if documented.contains(&name) {
                // Served: not the router's 404 nor a 405.
                assert_ne!(
                    res.status(),
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {path}"
                );
                if res.status() == StatusCode::NOT_FOUND {
                    let body: Value = res.json().await.unwrap();
                    let message = body["error"]["message"].as_str().unwrap();
                    assert!(
                        !message.starts_with("no route"),
                        "{method} {path}: {message}"
                    );
                }
                assert!(op["operationId"].is_string(), "{method} {template}");
                if PUBLIC.contains(&template.as_str()) {
                    // As on Mastodon, these need no token.
                    assert!(op["security"].is_null(), "{method} {template}");
                    let res = app.request(method.clone(), &path, None, None).await;
                    assert_eq!(res.status(), StatusCode::OK, "{method} {path}");
                } else if template.starts_with("/api/") {
                    assert_eq!(
                        op["security"],
                        json!([{"bearer": []}]),
                        "{method} {template}"
                    );
                }
            } else {
                // Not served: 405 naming what is.
                assert_eq!(
                    res.status(),
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {path}"
                );
                let allow = res.headers()["allow"].to_str().unwrap().to_string();
                let mut allowed: Vec<String> =
                    allow.split(", ").map(|m| m.to_lowercase()).collect();
                allowed.sort();
                let mut want = documented.clone();
                want.sort();
                assert_eq!(allowed, want, "Allow on {path}");
            }
        }
    }
    // Nothing else is served.
    for path in [
        "/",
        "/api",
        "/api/v1",
        "/api/v1/users/1/followers/2",
        "/api/v1/admin",
        "/api/v1/posts/1/likes",
        "/health",
    ] {
        let res = app.request(Method::GET, path, Some(&app.admin), None).await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{path}");
    }
}

/// The example of an operation's JSON request body, if it has one.
fn body_example(doc: &Value, op: &Value) -> Option<Value> {
    let schema = &op["requestBody"]["content"]["application/json"]["schema"];
    let name = schema["$ref"].as_str()?.rsplit('/').next()?;
    let example = doc["components"]["schemas"][name]["example"].clone();
    (!example.is_null()).then_some(example)
}

#[tokio::test]
async fn swagger_ui_is_served_from_the_binary() {
    let app = spawn_app().await;
    let res = app.client.get(app.url("/docs")).send().await.unwrap();
    assert_eq!(res.url().path(), "/docs/", "redirected");
    let html = res.text().await.unwrap();
    assert!(html.contains("swagger-ui"), "{html}");
    // Its scripts, styles and configuration come from this server.
    for asset in [
        "/docs/swagger-ui-bundle.js",
        "/docs/swagger-ui.css",
        "/docs/swagger-initializer.js",
    ] {
        let res = app.client.get(app.url(asset)).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{asset}");
        let text = res.text().await.unwrap();
        assert!(text.len() > 100, "{asset}");
        if asset.ends_with("initializer.js") {
            assert!(text.contains("/openapi.json"), "{text}");
        }
    }
    let res = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}

#[test]
#[should_panic(expected = "does not match its schema")]
fn a_response_off_its_schema_is_caught() {
    let doc = json!({
        "paths": {"/x": {"get": {"responses": {"200": {"content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/T"}}}}}}}},
        "components": {"schemas": {"T": {"type": "object", "required": ["id"],
            "properties": {"id": {"type": "integer"}}}}}
    });
    let res = TestResponse::fake(StatusCode::OK, "application/json", br#"{"id": "seven"}"#);
    conforms(&doc, &Method::GET, "/x", &res);
}

#[test]
#[should_panic(expected = "does not document")]
fn an_undocumented_status_is_caught() {
    let doc = json!({"paths": {"/x": {"get": {"responses": {"200": {}}}}}});
    let res = TestResponse::fake(StatusCode::IM_A_TEAPOT, "application/json", b"{}");
    conforms(&doc, &Method::GET, "/x", &res);
}
