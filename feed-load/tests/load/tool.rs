//! A small run of the load tool, so that it cannot rot. Its rates are
//! printed, not asserted; what is asserted is that every figure is there
//! and that the read scenarios read what they claim: per page, the window
//! (`LRANGE`) of one outbox per big-V followed plus the inbox's, as Redis's
//! `INFO commandstats` counts them (the tool fails the run otherwise too).

use std::process::Command;

use secrecy::ExposeSecret;

use crate::helpers::{test_settings, Cleanup};

/// The tool's tolerance on sources per page (`SOURCES_TOLERANCE`).
const SOURCES_TOLERANCE: f64 = 0.05;

/// Big-Vs the tool makes big-V for the reads, at its default
/// `--big-authors`: the mega author, 20 big-Vs, 50 read big-Vs per graph.
const READ_BIG_VS: i64 = 1 + 20 + 2 * 50;

/// The service's binary, which the streams scenario starts: built beside
/// the tool's by the workspace's `cargo test` (a binary of the other crate
/// has no `CARGO_BIN_EXE_` of its own here).
fn service_binary() -> std::path::PathBuf {
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_feed-load"))
        .with_file_name(format!("feed-service{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.exists(),
        "{} is missing: run the tests from the repository's root (`cargo test` builds both crates)",
        binary.display()
    );
    binary
}

#[tokio::test]
async fn the_load_tool_runs_a_small_scenario_end_to_end() {
    let mut settings = test_settings();
    let database = format!("feed_load_{}", &settings.redis.key_prefix[5..37]);
    settings.database.url = secrecy::SecretString::from(
        feed_service::store::pg::with_database(settings.database.url.expose_secret(), &database)
            .unwrap(),
    );
    // The tool always measures the single node of its settings; when the
    // suite runs on a cluster, it measures that cluster too (`--redis-cluster`).
    let cluster_urls = settings.redis.cluster_urls.expose_secret().to_string();
    let _cluster_cleanup = (!cluster_urls.is_empty()).then(|| Cleanup::of(&settings));
    settings.redis.cluster_urls = secrecy::SecretString::from("");
    let _cleanup = Cleanup::of(&settings);
    let cluster_args: Vec<&str> = if cluster_urls.is_empty() {
        Vec::new()
    } else {
        vec!["--redis-cluster", &cluster_urls]
    };
    let out = std::env::temp_dir().join(format!("feed-load-{database}"));
    let output = Command::new(env!("CARGO_BIN_EXE_feed-load"))
        .env_remove("FEED_REDIS__CLUSTER_URLS")
        .args([
            "--scale",
            "0.005",
            "--seconds",
            "1",
            "--concurrency",
            "4",
            "--mixed-reads-per-sec",
            "50",
            "--publishes",
            "5",
            // Room for the readers' ordinary authors besides the cohorts'.
            "--ordinary-authors",
            "60",
            "--sustain-secs",
            "3",
            "--streams",
            "50",
            "--stream-posts",
            "3",
        ])
        .args([
            "--database",
            &database,
            "--prefix",
            &settings.redis.key_prefix,
        ])
        .args(&cluster_args)
        .arg("--service-bin")
        .arg(service_binary())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "feed-load failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    let scenarios: Vec<&str> = rows
        .iter()
        .map(|r| r["scenario"].as_str().unwrap())
        .collect();
    let on_redis = [
        "fan-out, pure push",
        "fan-out, big-V to active fans",
        "reads, 10 big-Vs",
        "reads, 50 big-Vs",
        "reads, 10 big-Vs, tied",
        "reads, 50 big-Vs, tied",
    ];
    let mut expected: Vec<String> = on_redis.iter().map(|s| s.to_string()).collect();
    expected.extend([
        "mixed: reads".into(),
        "sustained publishing".into(),
        "deletes: 30 % of posts".into(),
    ]);
    if !cluster_urls.is_empty() {
        expected.extend(on_redis.iter().map(|s| format!("{s}, cluster")));
    }
    for expected in &expected {
        assert!(
            scenarios.contains(&expected.as_str()),
            "report lacks {expected}: {scenarios:?}"
        );
    }
    crate::browser::the_report_renders_offline_with_the_json_s_tables(&out, &report, &stdout);
    let publishes = rows
        .iter()
        .filter(|r| r["scenario"].as_str().unwrap().starts_with("publish, "))
        .count();
    assert_eq!(
        publishes, 4,
        "one publish row per author class: {scenarios:?}"
    );
    // Live streams, on each topology: an ordinary author's and the mega
    // big-V's posts, every event arrived (the run checks it), one hint per
    // post; for each, the delivery from the answer and from the publish
    // sent, and the publishes' own latency.
    let topologies = if cluster_urls.is_empty() { 1 } else { 2 };
    let deliveries: Vec<&&str> = scenarios
        .iter()
        .filter(|s| s.starts_with("stream delivery, "))
        .collect();
    assert_eq!(
        deliveries.len(),
        6 * topologies,
        "six stream rows per topology: {scenarios:?}"
    );
    for suffix in [", from the publish sent", ": its publish, 50 streams open"] {
        let with = deliveries.iter().filter(|s| s.ends_with(suffix)).count();
        assert_eq!(with, 2 * topologies, "{suffix}: {deliveries:?}");
    }
    let on_the_cluster = (topologies == 2).then(|| &report["streams"]["cluster"]);
    for streams in std::iter::once(&report["streams"]).chain(on_the_cluster) {
        assert_eq!(streams["streams_open"], 50);
        // One hint per post from its publish, and a second when its delivery
        // job writes an outbox entry the publish could not: never per follower.
        let (hints, posts) = (
            streams["hints"].as_u64().unwrap(),
            streams["posts"].as_u64().unwrap(),
        );
        assert!(
            posts <= hints && hints <= 2 * posts,
            "{hints} hints for {posts} posts"
        );
        // The service's own count of the pages the streams read meanwhile.
        let counted = &streams["service_counted"];
        let pages: f64 = counted
            .as_object()
            .unwrap()
            .iter()
            .filter(|(series, _)| series.starts_with("feed_pages_total"))
            .map(|(_, n)| n.as_f64().unwrap())
            .sum();
        assert!(pages >= 1.0, "the streams read pages: {counted}");
    }
    for row in rows.iter().filter(|r| {
        let name = r["scenario"].as_str().unwrap();
        name.starts_with("reads") || name.starts_with("publish")
    }) {
        assert_eq!(row["latency"]["errors"], 0, "{row}");
    }
    check_reads(&report, if cluster_urls.is_empty() { 1 } else { 2 });
    // Memory per inbox entry, measured on inboxes the store built.
    let memory = &report["memory"];
    assert!(
        memory["bytes_per_entry"].as_f64().unwrap_or(0.0) > 0.0,
        "{memory}"
    );
    assert!(memory["target_met"].is_boolean(), "{memory}");
    assert_eq!(memory["encoding"], "quicklist", "{memory}");
    let baselines = &report["baselines"];
    assert_eq!(baselines["tool"], "redis-benchmark", "{baselines}");
    let mut measured = vec![baselines];
    if !cluster_urls.is_empty() {
        measured.push(&baselines["cluster"]);
    }
    for redis in measured {
        for rate in [
            "zadd_pipelined_per_sec",
            "lpush_pipelined_per_sec",
            "zrevrangebyscore_per_sec_before_reads",
            "zrevrangebyscore_per_sec_after_reads",
            "zrevrangebyscore_redis_cpu_usec_per_read_before_reads",
            "zrevrangebyscore_redis_cpu_usec_per_read_after_reads",
        ] {
            assert!(redis[rate].as_f64().unwrap_or(0.0) > 0.0, "{baselines}");
        }
    }
    // Every fan-out reached every sampled inbox, on each Redis.
    let fanouts = report["fanouts"].as_array().unwrap();
    let runs: Vec<&str> = fanouts
        .iter()
        .map(|f| f["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        runs.len(),
        if cluster_urls.is_empty() { 2 } else { 4 },
        "{runs:?}"
    );
    for f in fanouts {
        assert!(f["sampled"].as_u64().unwrap_or(0) > 0, "{f}");
        assert_eq!(f["sampled"], f["sampled_holding"], "{f}");
    }
    let sustained = &report["sustained"];
    assert!(
        sustained["max_table_bytes"].as_i64().unwrap_or(0) > 0,
        "{sustained}"
    );
    assert!(
        !sustained["samples"].as_array().unwrap().is_empty(),
        "{sustained}"
    );
    assert!(std::fs::read_to_string(out.join("report.html"))
        .unwrap()
        .contains("<svg"));
    let _ = std::fs::remove_dir_all(&out);
}

/// The read rows of each Redis (`topologies` of them): Redis's figures per
/// page are there, each page read its big-Vs' outboxes and the inbox (one
/// `ZREVRANGEBYSCORE` each), targets are reported, the big-Vs were reached
/// through the service (each with an epoch) and the tied graph's feeds tie.
fn check_reads(report: &serde_json::Value, topologies: usize) {
    assert_eq!(
        report["failures"],
        serde_json::json!([]),
        "{}",
        report["failures"]
    );
    let rows = report["rows"].as_array().unwrap();
    let closed: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| {
            let name = r["scenario"].as_str().unwrap();
            name.starts_with("reads, ") && !name.contains("open loop")
        })
        .collect();
    assert_eq!(closed.len(), 4 * topologies, "{closed:?}");
    for row in closed {
        let name = row["scenario"].as_str().unwrap();
        let big_vs: f64 = name.split_whitespace().nth(1).unwrap().parse().unwrap();
        let redis = &row["redis"];
        assert!(redis["pages"].as_u64().unwrap() > 0, "{name}: {redis}");
        assert_eq!(
            redis["expected_sources"].as_f64(),
            Some(big_vs + 1.0),
            "{name}"
        );
        let sources = redis["sources_per_page"].as_f64().unwrap();
        assert!(
            (sources - (big_vs + 1.0)).abs() <= SOURCES_TOLERANCE * (big_vs + 1.0),
            "{name}: {sources} sources per page, not {}: {redis}",
            big_vs + 1.0
        );
        assert_eq!(redis["sources_ok"], true, "{name}: {redis}");
        for figure in [
            "redis_calls_per_page",
            "redis_cpu_usec_per_page",
            "range_read_cpu_usec",
            "redis_cpu_budget_usec",
            "service_cpu_usec_per_page",
        ] {
            assert!(
                redis[figure].as_f64().unwrap() > 0.0,
                "{name}: {figure}: {redis}"
            );
        }
        assert!(redis["budget_met"].is_boolean(), "{name}: {redis}");
        for command in ["llen", "lindex", "lrange", "hmget", "hget", "evalsha"] {
            assert!(
                redis["calls_per_page"][command].as_f64().is_some(),
                "{name}: no {command} per page: {redis}"
            );
        }
        assert!(row["goal"]["met"].is_boolean(), "{name}: {row}");
    }
    for row in rows
        .iter()
        .filter(|r| r["scenario"].as_str().unwrap().contains("open loop"))
    {
        assert!(row["goal"]["met"].is_boolean(), "{row}");
    }
    let reached: Vec<&serde_json::Value> = report["big_vs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["big_vs_with_epoch"] == READ_BIG_VS)
        .collect();
    assert_eq!(reached.len(), topologies, "{}", report["big_vs"]);
    for ties in report["ties"].as_array().unwrap() {
        if ties["scenario"].as_str().unwrap().ends_with(", tied") {
            assert!(ties["min_per_ms"].as_i64().unwrap() >= 2, "{ties}");
            assert!(ties["max_per_ms"].as_i64().unwrap() <= 4, "{ties}");
        }
    }
}

#[test]
fn the_load_tool_s_help_names_each_option_s_variable_and_default() {
    let out = Command::new(env!("CARGO_BIN_EXE_feed-load"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    // Each option's block: its line and the lines up to the next option.
    let mut blocks: Vec<(String, String)> = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("--") {
            let name = rest.split([' ', '<']).next().unwrap().to_string();
            blocks.push((name, String::new()));
        } else if trimmed.starts_with("-h,") || trimmed.starts_with("-V,") {
            blocks.push((String::new(), String::new()));
        }
        if let Some((_, text)) = blocks.last_mut() {
            text.push(' ');
            text.push_str(trimmed);
        }
    }
    let options: Vec<_> = blocks.iter().filter(|(name, _)| !name.is_empty()).collect();
    assert!(options.len() >= 25, "{help}");
    for (name, text) in options {
        let env = format!("[env: FEED_LOAD_{}", name.to_uppercase().replace('-', "_"));
        assert!(text.contains(&env), "--{name}: {text}");
        assert!(
            name == "reseed" || text.contains("[default: "),
            "--{name}: {text}"
        );
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_feed-load"))
        .args(["--only", "fanout,everything"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--only"));
}
