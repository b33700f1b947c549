//! The deployment examples of `deploy/systemd/` run: systemd accepts the
//! unit, and two instances started the way it starts them (its
//! environment files in its order, `%i` the port, `ExecStartPre`, then
//! `ExecStart`, stopped by its `KillSignal`) serve, each with its own
//! settings, and stop cleanly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use secrecy::ExposeSecret;
use serde_json::Value;

use crate::helpers::{test_settings, Cleanup};
use crate::process::free_port;

const UNIT: &str = "deploy/systemd/feed-service@.service";
const SHARED_ENV: &str = "deploy/systemd/feed-service.env";
const INSTANCE_ENV: &str = "deploy/systemd/8082.env";
const INSTALLED_BINARY: &str = "/usr/local/bin/feed-service";
const INSTALLED_CONFIG: &str = "/etc/feed-service/";

fn repository(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_feed-service")
}

#[test]
fn systemd_accepts_the_unit() {
    // Verified as an instance of the template, the binary where the unit
    // expects it installed.
    let dir = std::env::temp_dir().join(format!("feed-unit-{}", free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let unit = std::fs::read_to_string(repository(UNIT)).unwrap();
    assert!(unit.contains(INSTALLED_BINARY), "{unit}");
    let path = dir.join("feed-service@8081.service");
    std::fs::write(&path, unit.replace(INSTALLED_BINARY, binary())).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("systemd-analyze runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

/// The `[Service]` settings of the unit named `key`, in order.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .collect()
}

/// An environment file's `KEY=VALUE` lines.
fn environment_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('=').expect("KEY=VALUE");
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The environment systemd gives instance `port`: each `EnvironmentFile`
/// (a `-` one only if present) and `Environment` in the unit's order,
/// later ones winning, the files read from `etc` for `/etc/feed-service`.
fn instance_environment(unit: &str, etc: &Path, port: u16) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for line in unit.lines() {
        let line = line.replace("%i", &port.to_string());
        if let Some(file) = line.strip_prefix("EnvironmentFile=") {
            let (optional, file) = match file.strip_prefix('-') {
                Some(file) => (true, file),
                None => (false, file),
            };
            let path = etc.join(
                file.strip_prefix(INSTALLED_CONFIG)
                    .expect("under /etc/feed-service"),
            );
            match std::fs::read_to_string(&path) {
                Ok(text) => env.extend(environment_file(&text)),
                Err(_) if optional => {}
                Err(e) => panic!("{}: {e}", path.display()),
            }
        } else if let Some(pair) = line.strip_prefix("Environment=") {
            let (k, v) = pair.split_once('=').unwrap();
            env.insert(k.to_string(), v.to_string());
        }
    }
    env
}

/// Runs a command line of the unit with `env` alone (systemd passes no
/// other), the installed binary being the built one.
fn command(line: &str, env: &BTreeMap<String, String>) -> Command {
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[0], INSTALLED_BINARY);
    let mut command = Command::new(binary());
    command.args(&words[1..]).env_clear().envs(env);
    command
}

#[tokio::test]
async fn two_instances_run_as_the_unit_and_its_environment_files_say() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let unit = std::fs::read_to_string(repository(UNIT)).unwrap();
    // /etc/feed-service as deploy/README.md installs it, with the test's stores.
    let etc = std::env::temp_dir().join(format!("feed-etc-{}", free_port()));
    std::fs::create_dir_all(&etc).unwrap();
    let mut shared = std::fs::read_to_string(repository(SHARED_ENV)).unwrap();
    for (key, value) in [
        (
            "FEED_CONFIG_DIR",
            repository("config").display().to_string(),
        ),
        ("FEED_SERVER__HOST", "127.0.0.1".to_string()),
        (
            "FEED_DATABASE__URL",
            settings.database.url.expose_secret().to_string(),
        ),
        (
            "FEED_REDIS__URL",
            settings.redis.url.expose_secret().to_string(),
        ),
    ] {
        let line = shared
            .lines()
            .find(|l| l.starts_with(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{SHARED_ENV} sets no {key}"))
            .to_string();
        shared = shared.replace(&line, &format!("{key}={value}"));
    }
    shared.push_str(&format!(
        "FEED_REDIS__KEY_PREFIX={}\nFEED_REDIS__CLUSTER_URLS={}\n",
        settings.redis.key_prefix,
        settings.redis.cluster_urls.expose_secret()
    ));
    let ports = [free_port(), free_port()];
    // The second instance has a file of its own, as 8082 has.
    std::fs::copy(
        repository(INSTANCE_ENV),
        etc.join(format!("{}.env", ports[1])),
    )
    .unwrap();
    let with_secrets = |jwt: &str, token: &str| {
        let mut text = shared.clone();
        for (key, value) in [
            ("FEED_AUTH__JWT_SECRET", jwt),
            ("FEED_METRICS__TOKEN", token),
        ] {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{key}=")))
                .unwrap_or_else(|| panic!("{SHARED_ENV} sets no {key}"))
                .to_string();
            text = text.replace(&line, &format!("{key}={value}"));
        }
        std::fs::write(etc.join("feed-service.env"), text).unwrap();
    };

    // As shipped, the secrets are empty: ExecStartPre refuses to start,
    // naming the setting and the command that makes one; so it does with
    // the placeholders an operator might leave.
    let pre = &unit_values(&unit, "ExecStartPre")[0];
    for (jwt, token, refused) in [
        ("", "", "auth.jwt_secret"),
        (
            "replace-with-48-random-bytes-of-openssl-rand-base64",
            "",
            "auth.jwt_secret",
        ),
        (
            "kX8v2QmR9tLw4ZpN7cYs1JhB6dFg3VaE5uTo0WiKyLxM",
            "replace-with-a-random-metrics-token",
            "metrics.token",
        ),
    ] {
        if jwt.is_empty() && token.is_empty() {
            std::fs::write(etc.join("feed-service.env"), &shared).unwrap();
        } else {
            with_secrets(jwt, token);
        }
        let env = instance_environment(&unit, &etc, ports[0]);
        let out = command(pre, &env).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{jwt:?} {token:?}: {said}");
        assert!(
            said.contains(refused) && said.contains("openssl rand"),
            "{said}"
        );
    }
    // With secrets made as the file says, it starts.
    let random = |n: usize| -> String {
        (0..n)
            .map(|_| uuid::Uuid::new_v4().simple().to_string())
            .collect()
    };
    with_secrets(&random(2), &random(1));

    let environments: Vec<BTreeMap<String, String>> = ports
        .iter()
        .map(|&port| instance_environment(&unit, &etc, port))
        .collect();
    // deploy/README.md's first step: the database and its migrations.
    let mut migrate = environments[0].clone();
    migrate.insert("FEED_DATABASE__CREATE_IF_MISSING".into(), "true".into());
    let line = unit_values(&unit, "ExecStart")[0].replace(" serve", " migrate");
    let out = command(&line, &migrate).output().unwrap();
    assert!(
        out.status.success(),
        "migrate: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // ExecStartPre checks each instance's settings: its own file applies.
    let mut workers = Vec::new();
    for env in &environments {
        let pre = &unit_values(&unit, "ExecStartPre")[0];
        let out = command(pre, env).output().unwrap();
        assert!(
            out.status.success(),
            "{pre}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let effective: Value = serde_json::from_slice(&out.stdout).unwrap();
        workers.push(effective["feed"]["fanout_workers"].as_u64().unwrap());
        assert_eq!(
            effective["auth"]["allow_dev_secret"], false,
            "the production profile"
        );
    }
    assert_eq!(workers, [2, 4], "8082.env applies to its instance alone");

    let start = &unit_values(&unit, "ExecStart")[0];
    let mut children: Vec<_> = environments
        .iter()
        .map(|env| {
            command(start, env)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let client = reqwest::Client::new();
    let token = environments[0]["FEED_METRICS__TOKEN"].clone();
    for port in ports {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = client
                .get(format!("http://127.0.0.1:{port}/readyz"))
                .send()
                .await
                .map(|r| r.status());
            if ready.as_ref().ok() == Some(&StatusCode::OK) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "instance on {port} not ready: {ready:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let metrics = |auth: Option<&str>| {
            let req = client.get(format!("http://127.0.0.1:{port}/metrics"));
            match auth {
                Some(token) => req.bearer_auth(token),
                None => req,
            }
            .send()
        };
        assert_eq!(
            metrics(None).await.unwrap().status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            metrics(Some(&token)).await.unwrap().status(),
            StatusCode::OK
        );
    }

    // KillSignal, then TimeoutStopSec at most.
    assert_eq!(unit_values(&unit, "KillSignal"), ["SIGTERM"]);
    let stop_within: u64 = unit_values(&unit, "TimeoutStopSec")[0].parse().unwrap();
    for child in &children {
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let deadline = Instant::now() + Duration::from_secs(stop_within);
    for child in &mut children {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "stopped with {status}");
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("an instance outlived TimeoutStopSec");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let _ = std::fs::remove_dir_all(&etc);
}
