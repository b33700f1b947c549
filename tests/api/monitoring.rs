//! What operators watch, checked against what the service does: the alerts
//! of `deploy/prometheus/alerts.yml` (promtool's unit tests), the dashboard
//! of `deploy/grafana/` (every query names a metric a running instance
//! exports), and a real Prometheus scraping two running instances.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::{test_settings, Cleanup};
use crate::process::{free_port, spawn_service, Service};

fn repository(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

const ALERTS: &str = "deploy/prometheus/alerts.yml";
const ALERT_TESTS: &str = "deploy/prometheus/alerts.test.yml";
const DASHBOARD: &str = "deploy/grafana/feed-service.json";
const PROMETHEUS: &str = "deploy/prometheus/prometheus.yml";

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repository("deploy/prometheus"))
        .output()
        .expect("promtool runs (Debian's package `prometheus`; .ci/run installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {text}");
    text
}

/// The names of alerts.yml's alerts.
fn alert_names() -> Vec<String> {
    let text = std::fs::read_to_string(repository(ALERTS)).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn each_alert_fires_on_what_it_names_and_stays_quiet_beside_it() {
    promtool(&["check", "rules", "alerts.yml"]);
    let out = promtool(&["test", "rules", "alerts.test.yml"]);
    assert!(out.contains("SUCCESS"), "{out}");
    // Every alert has a case where it fires and one where it does not.
    let tests = std::fs::read_to_string(repository(ALERT_TESTS)).unwrap();
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(name) = line.strip_prefix("alertname: ") {
            match lines.get(i + 1) {
                Some(&"exp_alerts: []") => quiet.insert(name.to_string()),
                _ => fires.insert(name.to_string()),
            };
        }
    }
    let names = alert_names();
    assert!(names.len() >= 9, "{names:?}");
    for name in &names {
        assert!(fires.contains(name), "no test sees {name} fire");
        assert!(quiet.contains(name), "no test sees {name} stay quiet");
    }
}

/// PromQL's words that name no metric: aggregations (whose `by` may come
/// before their parenthesis), operators and modifiers.
const KEYWORDS: [&str; 19] = [
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "group_left",
    "group_right",
];

/// The metrics a PromQL query selects: what is left once its strings,
/// matchers, ranges, label lists, functions, keywords and numbers are gone.
fn selected_metrics(query: &str) -> Vec<String> {
    // Strings (in matchers too), matchers and ranges become spaces.
    let mut plain = String::new();
    let (mut string, mut matchers, mut range) = (false, false, false);
    for c in query.chars() {
        let inside = string || matchers || range;
        match c {
            '"' => string = !string,
            '{' if !string => matchers = true,
            '}' if !string => matchers = false,
            '[' if !string => range = true,
            ']' if !string => range = false,
            _ => {}
        }
        let outside = !(inside || string || matchers || range || "\"}]".contains(c));
        plain.push(if outside { c } else { ' ' });
    }
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let chars: Vec<char> = plain.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !word(chars[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && word(chars[i]) {
            i += 1;
        }
        let token: String = chars[start..i].iter().collect();
        let mut next = i;
        while next < chars.len() && chars[next] == ' ' {
            next += 1;
        }
        let call = chars.get(next) == Some(&'(');
        let labels = [
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
        ];
        if labels.contains(&token.as_str()) && call {
            // Its label list.
            i = next + chars[next..].iter().position(|c| *c == ')').unwrap_or(0);
        } else if !call
            && !token.starts_with(|c: char| c.is_ascii_digit())
            && !KEYWORDS.contains(&token.as_str())
        {
            names.push(token);
        }
    }
    names
}

/// Every query of the dashboard's panels.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(repository(DASHBOARD)).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "{} panels", panels.len());
    panels
        .iter()
        .flat_map(|p| p["targets"].as_array().expect("a panel's targets").clone())
        .map(|t| t["expr"].as_str().expect("a target's expr").to_string())
        .collect()
}

/// The sample names of a `/metrics` text.
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

/// The bearer token the instances of these tests guard `/metrics` with.
const METRICS_TOKEN: &str = "a-metrics-token-for-the-tests";

/// A service process guarding `/metrics` with [`METRICS_TOKEN`], asked
/// once for a route so that the request metrics hold a sample, and its
/// `/metrics` text once the stores' gauges are set.
async fn running_instance(settings: &feed_service::settings::Settings) -> (Service, String) {
    let env = [("FEED_METRICS__TOKEN", METRICS_TOKEN.to_string())];
    let service = spawn_service(settings, &env, Stdio::null()).await;
    let base = format!("http://127.0.0.1:{}", service.port);
    let client = reqwest::Client::new();
    let res = client
        .get(format!("{base}/api/v1/feed"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = client
            .get(format!("{base}/metrics"))
            .bearer_auth(METRICS_TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains("store_up{store=\"redis\"} 1")
            && text.contains("store_up{store=\"postgres\"} 1")
        {
            return (service, text);
        }
        assert!(
            Instant::now() < deadline,
            "the stores' gauges never showed up: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_dashboard_queries_only_metrics_a_running_instance_exports() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let (_service, text) = running_instance(&settings).await;
    let exported = exported(&text);
    let mut used = BTreeSet::new();
    for query in dashboard_queries() {
        let names = selected_metrics(&query);
        assert!(!names.is_empty(), "the query selects no metric: {query}");
        for name in names {
            assert!(
                exported.contains(&name),
                "{name} of the dashboard's `{query}` is not exported"
            );
            used.insert(name);
        }
    }
    // And the dashboard shows every family the service exports.
    let families: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    for family in &families {
        assert!(
            used.iter()
                .any(|n| n == family || n.strip_suffix("_bucket") == Some(family)),
            "the dashboard does not show {family}"
        );
    }
}

#[test]
fn a_query_s_metrics_are_what_is_left_of_it_once_the_rest_is_gone() {
    assert_eq!(
        selected_metrics(
            r#"sum by (le) (rate(a_b_bucket{job=~"$job", x="{y}"}[5m])) / on (job) group_left c:d > 0.5"#
        ),
        ["a_b_bucket", "c:d"]
    );
    assert_eq!(selected_metrics("up == 0"), ["up"]);
    assert_eq!(
        selected_metrics("max by (job) (x) > max by (job) (x offset 15m)"),
        ["x", "x"]
    );
    assert!(selected_metrics("vector(1)").is_empty());
}

/// A process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// Polls `check` on Prometheus's `path` until it holds (30 s at most).
async fn until(
    client: &reqwest::Client,
    url: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(res) = client.get(url).send().await {
            if let Ok(body) = res.json::<Value>().await {
                if check(&body) {
                    return body;
                }
                assert!(Instant::now() < deadline, "{what}: {body}");
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: Prometheus does not answer"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn a_real_prometheus_scrapes_two_instances_and_evaluates_every_alert() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let (first, text) = running_instance(&settings).await;
    let (second, _) = running_instance(&settings).await;
    // deploy/prometheus as shipped, but for its targets, its token file and
    // a scrape and evaluation every second.
    let dir = std::env::temp_dir().join(format!("feed-prometheus-{}", free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(repository(ALERTS), dir.join("alerts.yml")).unwrap();
    std::fs::write(dir.join("token"), METRICS_TOKEN).unwrap();
    let shipped = std::fs::read_to_string(repository(PROMETHEUS)).unwrap();
    let mut config = shipped.clone();
    for (line, instead) in [
        (
            "  scrape_interval: 15s".to_string(),
            "  scrape_interval: 1s".to_string(),
        ),
        (
            "  evaluation_interval: 15s".to_string(),
            "  evaluation_interval: 1s".to_string(),
        ),
        (
            "credentials_file: /etc/prometheus/feed-service-metrics-token".to_string(),
            format!("credentials_file: {}", dir.join("token").display()),
        ),
        (
            shipped
                .lines()
                .find(|l| l.trim_start().starts_with("- targets:"))
                .expect("the shipped targets")
                .to_string(),
            format!(
                "      - targets: ['127.0.0.1:{}', '127.0.0.1:{}']",
                first.port, second.port
            ),
        ),
    ] {
        assert!(config.contains(&line), "{PROMETHEUS} lacks `{line}`");
        config = config.replace(&line, &instead);
    }
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let port = free_port();
    let prometheus = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus runs (Debian's package `prometheus`; .ci/run installs it)");
    let _prometheus = Killed(prometheus);
    let api = format!("http://127.0.0.1:{port}/api/v1");
    let client = reqwest::Client::new();

    until(
        &client,
        &format!("{api}/targets"),
        "both targets up",
        |body| {
            let targets = body["data"]["activeTargets"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            targets.len() == 2 && targets.iter().all(|t| t["health"] == "up")
        },
    )
    .await;
    // Each instance's series, as Prometheus stored them.
    let query = |q: &str| format!("{api}/query?query={}", urlencode(q));
    until(
        &client,
        &query("store_up == 1"),
        "both stores up on both instances",
        |body| {
            body["data"]["result"]
                .as_array()
                .is_some_and(|r| r.len() == 4)
        },
    )
    .await;
    for name in [
        "fanout_jobs",
        "feed_pages_total",
        "http_requests_total",
        "redis_errors_total",
    ] {
        let body = get_json(&client, &query(&format!("count by (instance) ({name})"))).await;
        let result = body["data"]["result"].as_array().unwrap();
        assert_eq!(result.len(), 2, "{name} of both instances: {body}");
    }
    // Every dashboard query evaluates, with Grafana's variables filled in.
    for q in dashboard_queries() {
        let q = q
            .replace("$job", "feed-service")
            .replace("$instance", ".*")
            .replace("$__rate_interval", "1m");
        let body = get_json(&client, &query(&q)).await;
        assert_eq!(body["status"], "success", "{q}: {body}");
    }
    // Every alert evaluates without error, and none fires on healthy instances.
    let names = alert_names();
    let body = until(
        &client,
        &format!("{api}/rules"),
        "every rule evaluated",
        |body| {
            let rules: Vec<&Value> = body["data"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().into_iter().flatten())
                .collect();
            rules.len() == names.len() && rules.iter().all(|r| r["health"] == "ok")
        },
    )
    .await;
    let exported = exported(&text);
    for rule in body["data"]["groups"][0]["rules"].as_array().unwrap() {
        assert_eq!(rule["state"], "inactive", "{rule}");
        // Each names metrics the service exports (`up` is Prometheus's own).
        let query = rule["query"].as_str().unwrap();
        let names = selected_metrics(query);
        assert!(
            !names.is_empty(),
            "the alert's query selects no metric: {query}"
        );
        for name in names.into_iter().filter(|n| n != "up") {
            assert!(
                exported.contains(&name),
                "{name} of the alert `{query}` is not exported"
            );
        }
    }
    drop(_prometheus);
    let _ = std::fs::remove_dir_all(&dir);
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn an_instance_that_cannot_reach_redis_says_so_on_its_metrics() {
    let settings = test_settings();
    let _cleanup = Cleanup::of(&settings);
    let dead = format!("redis://127.0.0.1:{}", free_port());
    let env = [
        ("FEED_REDIS__URL", dead),
        ("FEED_REDIS__CLUSTER_URLS", String::new()),
    ];
    let service = spawn_service(&settings, &env, Stdio::null()).await;
    let url = format!("http://127.0.0.1:{}/metrics", service.port);
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = client.get(&url).send().await.unwrap().text().await.unwrap();
        if text.contains("store_up{store=\"redis\"} 0") {
            assert!(text.contains("store_up{store=\"postgres\"} 1"), "{text}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Redis never showed as down: {text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
