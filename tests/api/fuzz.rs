//! Schema fuzzing: schemathesis (pinned, in `target/schemathesis`, installed
//! by `.ci/install-schemathesis`) against the service binary, with an admin
//! token and with a user's, through every phase (examples, coverage,
//! fuzzing, and stateful runs along the document's links), from a fixed
//! seed. Any server error, or any response off the document, fails it.

use feed_service::types::UserId;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use feed_service::http::auth::JwtKeys;

use crate::helpers::{test_settings, Cleanup};
use crate::process::spawn_service;

/// Examples per operation and phase: enough for a few minutes in all.
const MAX_EXAMPLES: &str = "150";
const SEED: &str = "20261130";

fn schemathesis() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let st = root.join("target/schemathesis/bin/st");
    if !st.exists() {
        let status = Command::new("bash")
            .arg(root.join(".ci/install-schemathesis"))
            .status()
            .expect("bash runs");
        assert!(status.success(), ".ci/install-schemathesis failed");
    }
    st
}

fn fuzz(port: u16, token: &str, label: &str, excluded: &[&str]) {
    // schemathesis keeps a cache in its working directory: keep it in target/.
    let workdir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target");
    let output = Command::new(schemathesis())
        .current_dir(workdir)
        .arg("run")
        .arg(format!("http://127.0.0.1:{port}/openapi.json"))
        .args([
            "--checks",
            "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--seed",
            SEED,
            "--max-examples",
            MAX_EXAMPLES,
            "--workers",
            "1",
            "--no-color",
            "--generation-database",
            "none",
            "--request-timeout",
            "10",
            // A live stream never ends: its own tests read it.
            "--exclude-operation-id",
            "home_stream",
            "--exclude-operation-id",
            "mastodon_stream_user",
        ])
        .args(excluded.iter().flat_map(|op| ["--exclude-operation-id", op]))
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .stdin(Stdio::null())
        .output()
        .expect("schemathesis runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis ({label}) found problems:\n{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("Stateful"), "{text}");
}

#[tokio::test]
async fn schemathesis_finds_no_server_error_and_no_response_off_the_document() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    // Rates well above what one fuzzing worker sends.
    let env = [
        ("FEED_LIMITS__USER_READS_PER_SEC", "10000".to_string()),
        ("FEED_LIMITS__USER_READ_BURST", "10000".to_string()),
        ("FEED_LIMITS__USER_WRITES_PER_SEC", "10000".to_string()),
        ("FEED_LIMITS__USER_WRITE_BURST", "10000".to_string()),
        ("FEED_TELEMETRY__LEVEL", "warn".to_string()),
    ];
    let service = spawn_service(&settings, &env, Stdio::null()).await;
    let keys = JwtKeys::from_settings(&settings.auth).unwrap();
    let admin = keys.mint(UserId(0), true, 3600).unwrap();
    let port = service.port;
    let token = admin.clone();
    // The admin's run tries any settings (a backlog of one delivery, say),
    // past which publishes answer 503 by design: publishing is the user's
    // run's, under the default settings.
    let publishes = ["create_post", "mastodon_post_status"];
    tokio::task::spawn_blocking(move || fuzz(port, &token, "admin token", &publishes))
        .await
        .unwrap();
    // A user of its own, made after the admin's run (which deletes and
    // suspends whom it finds), so that its publishes lead (by the
    // document's links) to reading and deleting them.
    let res = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{}/api/v1/users", service.port))
        .bearer_auth(&admin)
        .json(&serde_json::json!({"username": "fuzzer"}))
        .send()
        .await
        .unwrap();
    let user: serde_json::Value = res.json().await.unwrap();
    let user = keys
        .mint(UserId(user["id"].as_i64().unwrap()), false, 3600)
        .unwrap();
    // The admin's run left whatever settings it tried (a backlog of one
    // delivery, a cap of one post): the user's run starts from the defaults.
    let res = reqwest::Client::new()
        .put(format!("http://127.0.0.1:{port}/api/v1/admin/settings"))
        .bearer_auth(&admin)
        .json(&serde_json::json!({
            "big_v_threshold": 10000, "big_v_demote_threshold": 8000,
            "active_window_secs": 604800, "inbox_max_len": 1000, "outbox_max_len": 1000,
            "inbox_idle_ttl_secs": 2592000, "max_follows": 10000, "max_fanout_backlog": 100000,
            "home_includes_own_posts": true, "follow_copy_limit": 100
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::OK);
    tokio::task::spawn_blocking(move || fuzz(port, &user, "user token", &[]))
        .await
        .unwrap();
}
