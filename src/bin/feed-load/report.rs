//! The report: a terminal table, `report.json`, and `report.html` (inline
//! SVG charts, opens without network access).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::{json, Value};

use crate::cpu::Cpu;
use crate::Options;

#[derive(Debug, Clone, Serialize)]
pub struct Fanout {
    /// The scenario's label (and topology).
    pub scenario: String,
    pub followers: i64,
    /// Inboxes verified to hold the post (the sample's proportion of the
    /// targets); the rate counts these alone.
    pub inbox_writes: i64,
    /// Inboxes checked, and how many of them held the post.
    pub sampled: usize,
    pub sampled_holding: usize,
    pub seconds_to_last_inbox: f64,
    pub writes_per_sec: f64,
    /// CPU milliseconds each process spent per 1,000 verified inbox writes,
    /// from the publish to the last inbox.
    pub cpu_ms_per_1000_writes: Cpu,
    /// (seconds since publish, inboxes written)
    pub progress: Vec<(f64, i64)>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub requests: usize,
    pub errors: usize,
    pub per_sec: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(mut ms: Vec<f64>, errors: usize, seconds: f64) -> Self {
        ms.sort_by(|a, b| a.total_cmp(b));
        let pct = |p: f64| -> f64 {
            if ms.is_empty() {
                return 0.0;
            }
            let i = ((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1;
            ms[i]
        };
        Latency {
            requests: ms.len(),
            errors,
            // Only requests answered with success count.
            per_sec: if seconds > 0.0 {
                ms.len().saturating_sub(errors) as f64 / seconds
            } else {
                0.0
            },
            p50_ms: pct(0.50),
            p90_ms: pct(0.90),
            p99_ms: pct(0.99),
            max_ms: ms.last().copied().unwrap_or(0.0),
        }
    }
}

/// One line of the results table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub scenario: String,
    pub metric: String,
    pub value: f64,
    pub baseline: Option<f64>,
    pub baseline_name: String,
    pub ratio: Option<f64>,
    pub latency: Option<Latency>,
    /// CPU milliseconds per request of each process, where measured.
    pub cpu_ms_per_request: Option<Cpu>,
}

impl Row {
    pub fn throughput(
        scenario: &str,
        metric: &str,
        value: f64,
        baseline: f64,
        baseline_name: &str,
    ) -> Self {
        Row {
            scenario: scenario.into(),
            metric: metric.into(),
            value,
            baseline: Some(baseline),
            baseline_name: baseline_name.into(),
            ratio: Some(value / baseline.max(1e-9)),
            latency: None,
            cpu_ms_per_request: None,
        }
    }

    pub fn latency(scenario: &str, lat: &Latency) -> Self {
        Row {
            scenario: scenario.into(),
            metric: "p99 ms".into(),
            value: lat.p99_ms,
            baseline: None,
            baseline_name: String::new(),
            ratio: None,
            latency: Some(lat.clone()),
            cpu_ms_per_request: None,
        }
    }

    /// The row with the CPU each process spent per request.
    pub fn with_cpu(mut self, cpu: Cpu) -> Self {
        self.cpu_ms_per_request = Some(cpu);
        self
    }

    /// Reads: requests/s against ZREVRANGEBYSCORE/s divided by the sources per page.
    pub fn reads(scenario: &str, lat: &Latency, baseline: f64, sources: f64) -> Self {
        Row {
            scenario: scenario.into(),
            metric: "requests/s".into(),
            value: lat.per_sec,
            baseline: Some(baseline),
            baseline_name: format!("ZREVRANGEBYSCORE/s / {sources} sources"),
            ratio: Some(lat.per_sec / baseline.max(1e-9)),
            latency: Some(lat.clone()),
            cpu_ms_per_request: None,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub options: Value,
    pub seeded_now: bool,
    pub seed_seconds: f64,
    pub baselines: Value,
    pub storage: Value,
    pub memory: Value,
    pub rows: Vec<Row>,
    pub latencies: Vec<(String, Latency)>,
    /// Every fan-out scenario run, in order.
    pub fanouts: Vec<Fanout>,
    /// The job table over the sustained-publishing run.
    pub sustained: Value,
}

impl Report {
    pub fn new(o: &Options, seeded_now: bool, seed_seconds: f64) -> Self {
        Report {
            options: json!({
                "mega_followers": o.mega_followers, "big_authors": o.big_authors,
                "big_followers": o.big_followers, "ordinary_authors": o.ordinary_authors,
                "ordinary_followers": [o.ordinary_min, o.ordinary_max],
                "posts_per_author": o.posts_per_author, "cohort": o.cohort,
                "active_fraction": o.active_fraction, "concurrency": o.concurrency,
                "seconds": o.seconds, "publishes": o.publishes,
                "mixed_per_sec": [o.mixed_reads_per_sec, o.mixed_publishes_per_sec],
                "only": o.only,
            }),
            seeded_now,
            seed_seconds,
            baselines: Value::Null,
            storage: Value::Null,
            memory: Value::Null,
            rows: Vec::new(),
            latencies: Vec::new(),
            fanouts: Vec::new(),
            sustained: Value::Null,
        }
    }
}

fn table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<32} {:>14} {:>14} {:>8}  {:>8} {:>8} {:>8} {:>8} {:>6}  baseline",
        "scenario", "metric", "value", "ratio", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors"
    );
    for row in &r.rows {
        let ratio = row
            .ratio
            .map(|x| format!("{x:.2}"))
            .unwrap_or_else(|| "-".into());
        let lat = match &row.latency {
            Some(l) => format!(
                "{:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>6}",
                l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms, l.errors
            ),
            None => format!("{:>8} {:>8} {:>8} {:>8} {:>6}", "-", "-", "-", "-", "-"),
        };
        let _ = writeln!(
            out,
            "{:<32} {:>14} {:>14.1} {:>8}  {lat}  {}",
            row.scenario,
            row.metric,
            row.value,
            ratio,
            row.baseline
                .map(|b| format!("{b:.0} {}", row.baseline_name))
                .unwrap_or_default()
        );
    }
    let measured: Vec<&Row> = r
        .rows
        .iter()
        .filter(|row| row.cpu_ms_per_request.is_some())
        .collect();
    if !measured.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<32} {:>10} {:>10} {:>10} {:>10}",
            "CPU ms per request", "service", "postgres", "redis", "tool"
        );
        let _ = writeln!(out, "{:<32}", "(fan-out: per 1,000 inbox writes)");
        for row in measured {
            if let Some(c) = row.cpu_ms_per_request {
                let _ = writeln!(
                    out,
                    "{:<32} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
                    row.scenario, c.service, c.postgres, c.redis, c.tool
                );
            }
        }
    }
    let _ = writeln!(out, "\nbaselines: {}", r.baselines);
    let _ = writeln!(out, "storage:   {}", r.storage);
    let _ = writeln!(out, "memory:    {}", r.memory);
    if let Some(t) = r.sustained.as_object() {
        let summary: serde_json::Map<String, Value> = t
            .iter()
            .filter(|(k, _)| *k != "samples")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let _ = writeln!(
            out,
            "fanout_jobs while publishing: {}",
            Value::Object(summary)
        );
    }
    out
}

fn bars_svg(latencies: &[(String, Latency)]) -> String {
    let max = latencies.iter().map(|(_, l)| l.p99_ms).fold(1.0, f64::max);
    let (w, row_h) = (760.0, 64.0);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{}">"#,
        row_h * latencies.len() as f64 + 20.0
    );
    for (i, (name, l)) in latencies.iter().enumerate() {
        let y = i as f64 * row_h + 10.0;
        let _ = write!(
            svg,
            r#"<text x="0" y="{}" font-size="13">{}</text>"#,
            y + 12.0,
            html(name)
        );
        for (j, (label, v, color)) in [
            ("p50", l.p50_ms, "#7aa6da"),
            ("p90", l.p90_ms, "#e7c547"),
            ("p99", l.p99_ms, "#d54e53"),
        ]
        .iter()
        .enumerate()
        {
            let len = (v / max) * (w - 260.0);
            let yy = y + 18.0 + j as f64 * 13.0;
            let _ = write!(
                svg,
                r#"<rect x="200" y="{yy}" width="{len:.1}" height="11" fill="{color}"/><text x="{:.1}" y="{:.1}" font-size="11">{label} {v:.2} ms</text>"#,
                205.0 + len,
                yy + 10.0
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

fn progress_svg(f: &Fanout) -> String {
    let (w, h) = (760.0, 260.0);
    let t_max = f.progress.last().map(|p| p.0).unwrap_or(1.0).max(1e-3);
    let n_max = f.inbox_writes.max(1) as f64;
    let points: Vec<String> = f
        .progress
        .iter()
        .map(|(t, n)| {
            format!(
                "{:.1},{:.1}",
                50.0 + t / t_max * (w - 70.0),
                h - 30.0 - (*n as f64 / n_max) * (h - 50.0)
            )
        })
        .collect();
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">
<line x1="50" y1="{b}" x2="{r}" y2="{b}" stroke="#888"/><line x1="50" y1="20" x2="50" y2="{b}" stroke="#888"/>
<text x="50" y="{lb}" font-size="11">0 s</text><text x="{r}" y="{lb}" font-size="11" text-anchor="end">{t_max:.2} s</text>
<text x="45" y="25" font-size="11" text-anchor="end">{n_max}</text>
<polyline fill="none" stroke="#d54e53" stroke-width="2" points="{}"/></svg>"##,
        points.join(" "),
        b = h - 30.0,
        r = w - 20.0,
        lb = h - 12.0,
    )
}

fn html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub fn write(r: &Report, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let text = table(r);
    println!("\n{text}");
    let json = serde_json::to_string_pretty(r).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("report.json"), &json).map_err(|e| e.to_string())?;
    let mut page = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>feed-service load report</title>\
         <style>body{font-family:sans-serif;margin:2em;max-width:1000px}pre{background:#f4f4f4;padding:1em;overflow-x:auto}</style>\
         </head><body><h1>feed-service load report</h1>",
    );
    let _ = write!(page, "<h2>Results</h2><pre>{}</pre>", html(&text));
    let _ = write!(
        page,
        "<h2>Latency percentiles per scenario</h2>{}",
        bars_svg(&r.latencies)
    );
    for f in &r.fanouts {
        let _ = write!(
            page,
            "<h2>Progress: {}</h2><p>{} inbox writes in {:.2} s ({:.0}/s)</p>{}",
            html(&f.scenario),
            f.inbox_writes,
            f.seconds_to_last_inbox,
            f.writes_per_sec,
            progress_svg(f)
        );
    }
    let _ = write!(
        page,
        "<h2>Run</h2><pre>{}</pre></body></html>",
        html(&serde_json::to_string_pretty(&r.options).unwrap_or_default())
    );
    std::fs::write(dir.join("report.html"), page).map_err(|e| e.to_string())?;
    println!(
        "wrote {} and {}",
        dir.join("report.json").display(),
        dir.join("report.html").display()
    );
    Ok(())
}
