//! The report: a terminal table, `report.json`, and `report.html` (inline
//! SVG charts, opens without network access).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::{json, Value};

use crate::cpu::Cpu;
use crate::redis_stats::Stats;
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
    /// Redis's own account of a read run, per page.
    pub redis: Option<PageCost>,
    /// The row's target, and whether this run met it.
    pub goal: Option<Goal>,
}

/// A target and whether it was met.
#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    pub target: String,
    pub met: bool,
}

/// How far `sources_per_page` may be from the sources a page must read
/// (its big-Vs' outboxes and the inbox): 5 %. A page reads each source's
/// length once (`LLEN`) before any of its entries; the service's
/// background work adds a few, and anything else using the same Redis
/// meanwhile more; the tolerance is for that.
pub const SOURCES_TOLERANCE: f64 = 0.05;

/// Redis per page of a read run (pages: its successful responses), from
/// `INFO commandstats` and `INFO cpu` around it (see `redis_stats.rs`).
#[derive(Debug, Clone, Serialize)]
pub struct PageCost {
    pub pages: usize,
    /// The sources a page must read: the cohort's big-Vs and the inbox.
    pub expected_sources: f64,
    /// `LLEN` calls ÷ pages: a page reads each source's length once (with
    /// its floor, `LINDEX -1`; its entries then take one `LRANGE` or more,
    /// as many as the merge needs).
    pub sources_per_page: f64,
    /// Whether `sources_per_page` is within [`SOURCES_TOLERANCE`] of
    /// `expected_sources`: the premise of the row.
    pub sources_ok: bool,
    /// Every command Redis ran ÷ pages (inside scripts or not).
    pub redis_calls_per_page: f64,
    /// Microseconds Redis spent in `EVALSHA` and `EVAL` ÷ pages (the
    /// scripts' own commands included).
    pub redis_script_usec_per_page: f64,
    /// Redis CPU (user + system) ÷ pages, microseconds.
    pub redis_cpu_usec_per_page: f64,
    /// Calls of each command ÷ pages ([`PAGE_COMMANDS`] always, 0 if none).
    pub calls_per_page: std::collections::BTreeMap<String, f64>,
    /// Redis CPU per `ZREVRANGEBYSCORE` of the same-run baseline.
    pub range_read_cpu_usec: f64,
    /// `2 × expected_sources × range_read_cpu_usec`: a page may cost Redis
    /// twice the range reads it needs, as plain calls.
    pub redis_cpu_budget_usec: f64,
    pub budget_met: bool,
    /// The service's CPU per page (from `/proc`), microseconds.
    pub service_cpu_usec_per_page: f64,
}

/// The commands the terminal table shows per page.
pub const PAGE_COMMANDS: [&str; 8] = [
    "llen",
    "lindex",
    "lrange",
    "hmget",
    "hget",
    "sinter",
    "smismember",
    "evalsha",
];

impl PageCost {
    /// `stats` over a run of `pages` pages that each must read
    /// `expected_sources`; `range_read_cpu_usec` from the baseline,
    /// `service_ms_per_page` from `/proc`.
    pub fn of(
        stats: &Stats,
        pages: usize,
        expected_sources: f64,
        range_read_cpu_usec: f64,
        service_ms_per_page: f64,
    ) -> Self {
        let per = |n: f64| n / pages.max(1) as f64;
        let sources_per_page = per(stats.calls("llen") as f64);
        let redis_cpu_usec_per_page = per(stats.cpu_usec);
        let budget = 2.0 * expected_sources * range_read_cpu_usec;
        PageCost {
            pages,
            expected_sources,
            sources_per_page,
            sources_ok: pages > 0
                && (sources_per_page - expected_sources).abs()
                    <= SOURCES_TOLERANCE * expected_sources,
            redis_calls_per_page: per(stats.total_calls() as f64),
            redis_script_usec_per_page: per((stats.usec("evalsha") + stats.usec("eval")) as f64),
            redis_cpu_usec_per_page,
            // The main commands always, then every other that ran.
            calls_per_page: PAGE_COMMANDS
                .iter()
                .map(|name| (name.to_string(), 0.0))
                .chain(
                    stats
                        .commands
                        .iter()
                        .map(|(name, c)| (name.clone(), per(c.calls as f64))),
                )
                .collect(),
            range_read_cpu_usec,
            redis_cpu_budget_usec: budget,
            budget_met: redis_cpu_usec_per_page <= budget,
            service_cpu_usec_per_page: service_ms_per_page * 1000.0,
        }
    }

    /// Why the row's premise fails, if it does.
    pub fn premise(&self, scenario: &str) -> Option<String> {
        (!self.sources_ok).then(|| {
            format!(
                "{scenario}: {:.2} sources (lengths read, LLEN) per page over {} pages, expected {} \
                 (its big-Vs' outboxes and the inbox) within {:.0} %: its pages do not read \
                 the sources the scenario claims",
                self.sources_per_page,
                self.pages,
                self.expected_sources,
                SOURCES_TOLERANCE * 100.0
            )
        })
    }
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
            redis: None,
            goal: None,
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
            redis: None,
            goal: None,
        }
    }

    /// The row with the CPU each process spent per request.
    pub fn with_cpu(mut self, cpu: Cpu) -> Self {
        self.cpu_ms_per_request = Some(cpu);
        self
    }

    /// The row with Redis's account of it, per page.
    pub fn with_redis(mut self, cost: PageCost) -> Self {
        self.redis = Some(cost);
        self
    }

    /// The row with its target and whether it was met.
    pub fn with_goal(mut self, target: String, met: bool) -> Self {
        self.goal = Some(Goal { target, met });
        self
    }

    /// Reads: pages/s against ZREVRANGEBYSCORE/s divided by the sources per page.
    pub fn reads(scenario: &str, lat: &Latency, baseline: f64, sources: f64) -> Self {
        Row {
            scenario: scenario.into(),
            metric: "pages/s".into(),
            value: lat.per_sec,
            baseline: Some(baseline),
            baseline_name: format!("ZREVRANGEBYSCORE/s / {sources} sources"),
            ratio: Some(lat.per_sec / baseline.max(1e-9)),
            latency: Some(lat.clone()),
            cpu_ms_per_request: None,
            redis: None,
            goal: None,
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
    /// The live streams' run: streams open, events, hints.
    pub streams: Value,
    /// Each change of who is big-V: thresholds, big-Vs reached, drain time.
    pub big_vs: Vec<Value>,
    /// How the read cohorts' feeds share milliseconds (one reader each).
    pub ties: Vec<Value>,
    /// Premises that did not hold: the run fails with these.
    pub failures: Vec<String>,
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
            streams: Value::Null,
            big_vs: Vec::new(),
            ties: Vec::new(),
            failures: Vec::new(),
        }
    }
}

fn table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<44} {:>14} {:>14} {:>8}  {:>8} {:>8} {:>8} {:>8} {:>6}  baseline",
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
        let goal = row
            .goal
            .as_ref()
            .map(|g| {
                format!(
                    "  [{}: {}]",
                    g.target,
                    if g.met { "met" } else { "NOT met" }
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<44} {:>14} {:>14.1} {:>8}  {lat}  {}{goal}",
            row.scenario,
            row.metric,
            row.value,
            ratio,
            row.baseline
                .map(|b| format!("{b:.0} {}", row.baseline_name))
                .unwrap_or_default()
        );
    }
    page_costs(&mut out, r);
    let measured: Vec<&Row> = r
        .rows
        .iter()
        .filter(|row| row.cpu_ms_per_request.is_some())
        .collect();
    if !measured.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<44} {:>10} {:>10} {:>10} {:>10}",
            "CPU ms per request", "service", "postgres", "redis", "tool"
        );
        let _ = writeln!(out, "{:<44}", "(fan-out: per 1,000 inbox writes)");
        for row in measured {
            if let Some(c) = row.cpu_ms_per_request {
                let _ = writeln!(
                    out,
                    "{:<44} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
                    row.scenario, c.service, c.postgres, c.redis, c.tool
                );
            }
        }
    }
    let _ = writeln!(out, "\nbaselines: {}", r.baselines);
    for change in &r.big_vs {
        let _ = writeln!(out, "big-Vs:    {change}");
    }
    for ties in &r.ties {
        let _ = writeln!(out, "ties:      {ties}");
    }
    for failure in &r.failures {
        let _ = writeln!(out, "FAILED:    {failure}");
    }
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

/// The read rows' Redis figures per page: sources read (and expected),
/// calls (all, and of the main commands), script and CPU microseconds,
/// the CPU budget, and the service's CPU beside Redis's.
fn page_costs(out: &mut String, r: &Report) {
    let rows: Vec<(&str, &PageCost)> = r
        .rows
        .iter()
        .filter_map(|row| Some((row.scenario.as_str(), row.redis.as_ref()?)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "\n{:<44} {:>8} {:>8} {:>7}",
        "Redis per page (commandstats)", "sources", "expected", "calls"
    );
    for name in PAGE_COMMANDS {
        let _ = write!(out, " {:>9}", &name[..name.len().min(9)]);
    }
    let _ = writeln!(
        out,
        " {:>9} {:>9} {:>9} {:>6} {:>9}",
        "script µs", "redis µs", "budget µs", "budget", "service µs"
    );
    for (scenario, c) in rows {
        let _ = write!(
            out,
            "{:<44} {:>8.2} {:>8} {:>7.1}",
            scenario,
            c.sources_per_page,
            format!(
                "{}{}",
                c.expected_sources,
                if c.sources_ok { "" } else { " !" }
            ),
            c.redis_calls_per_page
        );
        for name in PAGE_COMMANDS {
            let _ = write!(
                out,
                " {:>9.2}",
                c.calls_per_page.get(name).copied().unwrap_or(0.0)
            );
        }
        let _ = writeln!(
            out,
            " {:>9.1} {:>9.1} {:>9.1} {:>6} {:>9.1}",
            c.redis_script_usec_per_page,
            c.redis_cpu_usec_per_page,
            c.redis_cpu_budget_usec,
            if c.budget_met { "met" } else { "NOT" },
            c.service_cpu_usec_per_page
        );
    }
}

/// One bar of a chart: label, value, colour.
type Bar = (&'static str, f64, &'static str);

/// A chart's named group of bars.
type BarGroup = (String, Vec<Bar>);

/// Horizontal bars: for each named group, one bar per `(label, value,
/// colour)`, all to the same scale, each labelled with its value and `unit`.
fn bars_svg(groups: &[BarGroup], unit: &str) -> String {
    let max = groups
        .iter()
        .flat_map(|(_, bars)| bars.iter().map(|b| b.1))
        .fold(1e-9, f64::max);
    let (w, bar_h) = (760.0, 13.0);
    let row_h = |bars: usize| 26.0 + bar_h * bars as f64;
    let height: f64 = groups.iter().map(|(_, b)| row_h(b.len())).sum();
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{}">"#,
        height + 20.0
    );
    let mut y = 10.0;
    for (name, bars) in groups {
        let _ = write!(
            svg,
            r#"<text x="0" y="{}" font-size="13">{}</text>"#,
            y + 12.0,
            html(name)
        );
        for (j, (label, v, color)) in bars.iter().enumerate() {
            let len = (v / max) * (w - 260.0);
            let yy = y + 18.0 + j as f64 * bar_h;
            let _ = write!(
                svg,
                r#"<rect x="200" y="{yy}" width="{len:.1}" height="11" fill="{color}"/><text x="{:.1}" y="{:.1}" font-size="11">{label} {v:.2} {unit}</text>"#,
                205.0 + len,
                yy + 10.0
            );
        }
        y += row_h(bars.len());
    }
    svg.push_str("</svg>");
    svg
}

/// Latency percentiles per scenario.
fn latency_svg(latencies: &[(String, Latency)]) -> String {
    let groups: Vec<BarGroup> = latencies
        .iter()
        .map(|(name, l)| {
            (
                name.clone(),
                vec![
                    ("p50", l.p50_ms, "#7aa6da"),
                    ("p90", l.p90_ms, "#e7c547"),
                    ("p99", l.p99_ms, "#d54e53"),
                ],
            )
        })
        .collect();
    bars_svg(&groups, "ms")
}

/// CPU per page of each read row: Redis's (`INFO cpu`), its budget, and
/// the service's (`/proc`).
fn page_cost_svg(rows: &[Row]) -> String {
    let groups: Vec<BarGroup> = rows
        .iter()
        .filter_map(|row| {
            let c = row.redis.as_ref()?;
            Some((
                format!("{} ({:.2} sources/page)", row.scenario, c.sources_per_page),
                vec![
                    ("Redis CPU", c.redis_cpu_usec_per_page, "#d54e53"),
                    ("Redis budget", c.redis_cpu_budget_usec, "#b9ca4a"),
                    ("service CPU", c.service_cpu_usec_per_page, "#7aa6da"),
                ],
            ))
        })
        .collect();
    bars_svg(&groups, "µs")
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
        latency_svg(&r.latencies)
    );
    if r.rows.iter().any(|row| row.redis.is_some()) {
        let _ = write!(
            page,
            "<h2>CPU per page of the reads</h2><p>Redis from <code>INFO cpu</code> around the \
             closed loop, its budget 2 × sources × the baseline's CPU per ZREVRANGEBYSCORE, \
             the service from <code>/proc</code>.</p>{}",
            page_cost_svg(&r.rows)
        );
    }
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
