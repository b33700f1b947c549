//! The service's command line, as an operator meets it: help that names
//! each option's variable and default, the version, completion scripts,
//! errors that name the option, options beating variables, `migrate`.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use diesel::sql_types::BigInt;
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use feed_service::settings::Settings;
use secrecy::ExposeSecret;
use serde_json::Value;

use crate::helpers::{test_settings, Cleanup};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_feed-service"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).to_string()
}

/// Each option of `help` with the text that follows it, up to the next.
fn options(help: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut current: Option<(String, String)> = None;
    for line in help.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("--") {
            if let Some((name, text)) = current.take() {
                out.insert(name, text);
            }
            let name = rest.split([' ', '<']).next().unwrap().to_string();
            current = Some((name, String::new()));
        } else if trimmed.starts_with("-h,") || trimmed.starts_with("-V,") {
            if let Some((name, text)) = current.take() {
                out.insert(name, text);
            }
        }
        if let Some((_, text)) = current.as_mut() {
            text.push(' ');
            text.push_str(trimmed);
        }
    }
    if let Some((name, text)) = current {
        out.insert(name, text);
    }
    out
}

#[test]
fn help_names_every_command_and_each_option_s_variable_and_default() {
    let out = run(&["--help"], &[]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for command in ["serve", "token", "config", "migrate", "completions"] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "{command} in {help}"
        );
    }
    let options = options(&help);
    // The defaults the help states are the configuration's own.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let defaults = Settings::load_from(&dir, &HashMap::new()).unwrap();
    let want = [
        ("config-dir", "FEED_CONFIG_DIR", "./config".to_string()),
        ("profile", "FEED_ENV", "none".to_string()),
        ("host", "FEED_SERVER__HOST", defaults.server.host.clone()),
        (
            "port",
            "FEED_SERVER__PORT",
            defaults.server.port.to_string(),
        ),
        (
            "database-url",
            "FEED_DATABASE__URL",
            defaults.database.url.expose_secret().to_string(),
        ),
        (
            "redis-url",
            "FEED_REDIS__URL",
            defaults.redis.url.expose_secret().to_string(),
        ),
        (
            "redis-cluster-urls",
            "FEED_REDIS__CLUSTER_URLS",
            "none".to_string(),
        ),
        (
            "log-level",
            "FEED_TELEMETRY__LEVEL",
            defaults.telemetry.level.clone(),
        ),
        ("log-format", "FEED_TELEMETRY__FORMAT", "text".to_string()),
    ];
    for (option, variable, default) in want {
        let about = options
            .get(option)
            .unwrap_or_else(|| panic!("--{option} in {help}"));
        let about = about.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            about.contains(&format!("[env: {variable}")),
            "--{option}: {about}"
        );
        assert!(
            about.contains(&format!("[default: {default}")),
            "--{option}: {about}, want the default {default}"
        );
    }
    let out = run(&["token", "--help"], &[]);
    let token = text(&out.stdout);
    assert!(
        token.contains("--ttl <SECS>") && token.contains("[default: 86400]"),
        "{token}"
    );
}

#[test]
fn the_version_and_completion_scripts_come_from_the_command_line() {
    let out = run(&["--version"], &[]);
    assert_eq!(
        text(&out.stdout).trim(),
        format!("feed-service {}", env!("CARGO_PKG_VERSION"))
    );
    let out = run(&["completions", "bash"], &[]);
    assert!(out.status.success());
    let script = text(&out.stdout);
    for word in ["serve", "token", "migrate", "completions", "--database-url"] {
        assert!(script.contains(word), "{word} in the bash completion");
    }
    let path = std::env::temp_dir().join(format!("feed-service-{}.bash", std::process::id()));
    std::fs::write(&path, &script).unwrap();
    let checked = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(checked.status.success(), "{}", text(&checked.stderr));
    for shell in ["zsh", "fish"] {
        let out = run(&["completions", shell], &[]);
        assert!(out.status.success() && text(&out.stdout).contains("migrate"));
    }
    let out = run(&["completions", "tcsh"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn errors_name_the_option_and_change_nothing() {
    for (args, named) in [
        (vec!["token", "--user", "x"], "--user"),
        (vec!["token", "--user=-3"], "--user"),
        (vec!["token"], "--user"),
        (vec!["token", "--admin", "--ttl", "soon"], "--ttl"),
        (vec!["--port", "99999", "config", "check"], "--port"),
        (vec!["--colour"], "--colour"),
        (vec!["deploy"], "deploy"),
    ] {
        let out = run(&args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(named), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // A setting out of its range names the setting.
    let out = run(&["--log-format", "xml", "config", "check"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("telemetry.format"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_option_beats_its_variable_and_the_files() {
    let out = run(
        &["--port", "9123", "config", "check"],
        &[
            ("FEED_SERVER__PORT", "9000"),
            ("FEED_SERVER__HOST", "127.0.0.2"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let config: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(config["server"]["port"], 9123);
    assert_eq!(config["server"]["host"], "127.0.0.2");
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[tokio::test]
async fn migrate_creates_the_database_and_brings_it_up_to_date_twice_over() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let url = settings.database.url.expose_secret().to_string();
    for _ in 0..2 {
        let out = run(&["migrate", "--database-url", &url], &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
    let applied: Count = diesel::sql_query("SELECT count(*) AS n FROM __diesel_schema_migrations")
        .get_result(&mut conn)
        .await
        .unwrap();
    let shipped = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().join("up.sql").exists())
        .count();
    assert_eq!(applied.n as usize, shipped);
    let users: Count = diesel::sql_query("SELECT count(*) AS n FROM users")
        .get_result(&mut conn)
        .await
        .unwrap();
    assert_eq!(users.n, 0);
}
