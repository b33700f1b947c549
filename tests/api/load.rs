//! A small run of the load tool, so that it cannot rot. Its numbers are
//! printed, not asserted.

use std::process::Command;

use secrecy::ExposeSecret;

use crate::helpers::{test_settings, Cleanup};

#[tokio::test]
async fn the_load_tool_runs_a_small_scenario_end_to_end() {
    let mut settings = test_settings();
    let database = format!("feed_load_{}", &settings.redis.key_prefix[5..37]);
    settings.database.url = secrecy::SecretString::from(
        feed_service::store::pg::with_database(settings.database.url.expose_secret(), &database)
            .unwrap(),
    );
    // The load tool measures against a single Redis node (its baselines are
    // that node's `redis-benchmark`), whatever topology the suite runs on.
    settings.redis.cluster_urls = secrecy::SecretString::from("");
    let _cleanup = Cleanup::of(&settings);
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
        ])
        .args([
            "--database",
            &database,
            "--prefix",
            &settings.redis.key_prefix,
        ])
        .arg("--service-bin")
        .arg(env!("CARGO_BIN_EXE_feed-service"))
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
    for expected in [
        "fan-out, pure push",
        "fan-out, big-V to active fans",
        "reads, 10 big-Vs",
        "reads, 50 big-Vs",
        "mixed: reads",
        "sustained publishing",
    ] {
        assert!(
            scenarios.contains(&expected),
            "report lacks {expected}: {scenarios:?}"
        );
    }
    let publishes = rows
        .iter()
        .filter(|r| r["scenario"].as_str().unwrap().starts_with("publish, "))
        .count();
    assert_eq!(
        publishes, 4,
        "one publish row per author class: {scenarios:?}"
    );
    for row in rows.iter().filter(|r| {
        let name = r["scenario"].as_str().unwrap();
        name.starts_with("reads") || name.starts_with("publish")
    }) {
        assert_eq!(row["latency"]["errors"], 0, "{row}");
    }
    let baselines = &report["baselines"];
    assert_eq!(baselines["tool"], "redis-benchmark", "{baselines}");
    for rate in [
        "zadd_pipelined_per_sec",
        "zrevrangebyscore_per_sec_before_reads",
        "zrevrangebyscore_per_sec_after_reads",
    ] {
        assert!(baselines[rate].as_f64().unwrap_or(0.0) > 0.0, "{baselines}");
    }
    for fanout in ["fanout", "fanout_active"] {
        let f = &report[fanout];
        assert!(f["sampled"].as_u64().unwrap_or(0) > 0, "{fanout}: {f}");
        assert_eq!(f["sampled"], f["sampled_holding"], "{fanout}: {f}");
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
