//! The real Mastodon client libraries against the service's binary (the
//! one `cargo test` builds beside the tests): the pinned Mastodon.py and masto.js
//! (installed by `.ci/install-clients` into `target/clients`) each run an
//! app's session (`tests/clients/`), from
//! credentials to blocks, through the home timeline, its refresh and its
//! stream; every status they see must be there exactly once, in order,
//! a big-V's among them, across its demotion and promotion mid-scroll.

use feed_service::types::UserId;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use feed_service::http::auth::JwtKeys;
use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{test_settings, Cleanup};
use crate::process::{spawn_binary, spawn_binary_on};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn clients_dir() -> PathBuf {
    let status = Command::new("bash")
        .arg(root().join(".ci/install-clients"))
        .status()
        .expect("bash runs");
    assert!(status.success(), ".ci/install-clients failed");
    root().join("target/clients")
}

/// Starts the service's binary, makes `reader`, `author` and `vip` (a big-V once the
/// reader follows it: two fans follow it already) and runs `program` with
/// `args`, given the service's URL, their tokens and ids; returns its
/// output once it succeeded.
async fn session(names: [&str; 3], program: &Path, args: &[PathBuf]) -> String {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let binary = Path::new(env!("CARGO_BIN_EXE_feed-service"));
    let mut service = spawn_binary(binary, &settings, &[], Stdio::null()).await;
    let base = format!("http://127.0.0.1:{}", service.port);
    let service_port = service.port;
    let keys = JwtKeys::from_settings(&settings.auth).unwrap();
    let admin = keys.mint(UserId(0), true, 3600).unwrap();
    let client = reqwest::Client::new();
    let call = |method: Method, path: &str, body: Value| {
        client
            .request(method, format!("{base}{path}"))
            .bearer_auth(&admin)
            .json(&body)
    };
    // Three followers make an author big-V here (and it stays big-V down
    // to one).
    let res = call(
        Method::PUT,
        "/api/v1/admin/settings",
        json!({"big_v_threshold": 3, "big_v_demote_threshold": 1}),
    )
    .send()
    .await
    .unwrap();
    assert!(res.status().is_success(), "{:?}", res.text().await);
    let [reader, author, vip] = names;
    let fans = [format!("{vip}_fan_a"), format!("{vip}_fan_b")];
    let mut ids = serde_json::Map::new();
    for name in [reader, author, vip, &fans[0], &fans[1]] {
        let user: Value = call(Method::POST, "/api/v1/users", json!({"username": name}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        ids.insert(name.to_string(), user["id"].clone());
    }
    let id = |name: &str| ids[name].as_i64().unwrap();
    for fan in &fans {
        let path = format!("/api/v1/users/{}/following/{}", id(fan), id(vip));
        let res = call(Method::PUT, &path, Value::Null).send().await.unwrap();
        assert!(res.status().is_success());
    }
    let tokens: serde_json::Map<String, Value> = names
        .iter()
        .map(|n| {
            (
                n.to_string(),
                json!(keys.mint(UserId(id(n)), false, 3600).unwrap()),
            )
        })
        .collect();
    let vip_id = id(vip);
    let env = [
        ("FEED_BASE", base.clone()),
        ("FEED_TOKENS", Value::Object(tokens).to_string()),
        ("FEED_IDS", Value::Object(ids.clone()).to_string()),
        ("FEED_ADMIN", admin.clone()),
    ];
    // The program asks for an instance restart by printing `restart`: the
    // service stops (SIGTERM) and starts again on its port, and the
    // program reads `restarted`.
    let mut child = Command::new(program)
        .args(args)
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the client's program runs");
    let (mut to_program, from_program) =
        (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let mut errors = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = errors.read_to_string(&mut text);
        text
    });
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from_program).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stdout = String::new();
    while let Some(line) = lines.recv().await {
        if line == "restart" {
            service.terminate().await;
            service = spawn_binary_on(service_port, binary, &settings, &[], Stdio::null()).await;
            writeln!(to_program, "restarted")
                .and_then(|_| to_program.flush())
                .expect("the program reads");
            continue;
        }
        stdout.push_str(&line);
        stdout.push('\n');
    }
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    let stderr = stderr.join().unwrap();
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("ok:"), "{stdout}");
    // vip was promoted by the reader's follow (and stays big-V after the
    // block): its statuses came by the pull path.
    let user: Value = call(Method::GET, &format!("/api/v1/users/{vip_id}"), Value::Null)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(user["big_v"], json!(true), "{user}");
    drop(service);
    stdout
}

#[tokio::test]
async fn mastodon_py_scrolls_refreshes_streams_and_relates_exactly_once() {
    let python = clients_dir().join("venv/bin/python");
    let script = root().join("tests/clients/mastodon_py.py");
    let out = session(["alice", "bob", "vip"], &python, &[script]).await;
    println!("Mastodon.py: {out}");
}

#[tokio::test]
async fn mastodon_py_starts_with_the_instance_and_the_version_it_checks() {
    let python = clients_dir().join("venv/bin/python");
    let script = root().join("tests/clients/mastodon_py_start.py");
    let out = session(["erin", "frank", "vip3"], &python, &[script]).await;
    println!("Mastodon.py: {out}");
}

#[tokio::test]
async fn masto_js_scrolls_refreshes_streams_and_relates_exactly_once() {
    let dir = clients_dir();
    // Node resolves `masto` from the script's own directory.
    let script = dir.join("masto.mjs");
    std::fs::copy(root().join("tests/clients/masto.mjs"), &script).unwrap();
    let out = session(["carol", "dan", "vip2"], Path::new("node"), &[script]).await;
    println!("masto.js: {out}");
}
