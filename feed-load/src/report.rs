//! The report: its tables (`table.rs`) in the terminal, in `report.json`
//! beside the raw figures, and in `report.html` beside inline SVG charts
//! (the page fetches nothing, so it opens without network access).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::cpu::Cpu;
use crate::machine::Machine;
use crate::redis_stats::Stats;
use crate::table::{escape, figure, Table, NONE};
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
/// window once (one `LRANGE`, from the top or below its cursor); the service's
/// background work adds a few, and anything else using the same Redis
/// meanwhile more; the tolerance is for that.
pub const SOURCES_TOLERANCE: f64 = 0.05;

/// Script calls a page may make beyond one per node measured: a page reads
/// all the sources a node holds in one call, and the service's background
/// work (active-fan marks, touches) and the rebuilds of readers' first
/// pages add some (in a tiny run, about half a call per page). A page that
/// read its sources one call each would make one per source.
pub const SCRIPTS_SLACK: f64 = 1.0;

/// Redis per page of a read run (pages: its successful responses), from
/// `INFO commandstats` and `INFO cpu` around it (see `redis_stats.rs`).
#[derive(Debug, Clone, Serialize)]
pub struct PageCost {
    pub pages: usize,
    /// The sources a page must read: the cohort's big-Vs and the inbox.
    pub expected_sources: f64,
    /// `LRANGE` calls ÷ pages: a page reads each source's window once (its
    /// entries, with its floor, `LINDEX -1`), and again only when the
    /// merge needs a wider one.
    pub sources_per_page: f64,
    /// Whether `sources_per_page` is within [`SOURCES_TOLERANCE`] of
    /// `expected_sources`: the premise of the row.
    pub sources_ok: bool,
    /// Nodes measured (the masters of a cluster).
    pub nodes: usize,
    /// `EVALSHA` calls ÷ pages.
    pub scripts_per_page: f64,
    /// Whether `scripts_per_page` is at most one per node (and
    /// [`SCRIPTS_SLACK`]): the other premise of the row.
    pub scripts_ok: bool,
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
    /// `expected_sources × range_read_cpu_usec`: a page may cost Redis
    /// the range reads it needs, as plain calls.
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
        let sources_per_page = per(stats.calls("lrange") as f64);
        let redis_cpu_usec_per_page = per(stats.cpu_usec);
        let budget = expected_sources * range_read_cpu_usec;
        let scripts_per_page = per(stats.calls("evalsha") as f64);
        PageCost {
            pages,
            expected_sources,
            sources_per_page,
            sources_ok: pages > 0
                && (sources_per_page - expected_sources).abs()
                    <= SOURCES_TOLERANCE * expected_sources,
            nodes: stats.nodes,
            scripts_per_page,
            scripts_ok: scripts_per_page <= stats.nodes as f64 + SCRIPTS_SLACK,
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

    /// Why the row's premises fail, if they do.
    pub fn premise(&self, scenario: &str) -> Vec<String> {
        let mut failed = Vec::new();
        if !self.sources_ok {
            failed.push(format!(
                "{scenario}: {:.2} sources (windows read, LRANGE) per page over {} pages, expected {} \
                 (its big-Vs' outboxes and the inbox) within {:.0} %: its pages do not read \
                 the sources the scenario claims",
                self.sources_per_page,
                self.pages,
                self.expected_sources,
                SOURCES_TOLERANCE * 100.0
            ));
        }
        if !self.scripts_ok {
            failed.push(format!(
                "{scenario}: {:.2} script calls (EVALSHA) per page over {} pages, on {} node(s): \
                 a page reads the sources a node holds in more than one call",
                self.scripts_per_page, self.pages, self.nodes
            ));
        }
        failed
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
    /// Every option of the run, as given or at its default.
    pub options: Value,
    pub machine: Machine,
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
    /// The deletes' run: live and deleted entries the inboxes hold, and
    /// the scrolls' pages by source.
    pub deletes: Value,
    /// Each change of who is big-V: thresholds, big-Vs reached, drain time.
    pub big_vs: Vec<Value>,
    /// How the read cohorts' feeds share milliseconds (one reader each).
    pub ties: Vec<Value>,
    /// Premises that did not hold: the run fails with these.
    pub failures: Vec<String>,
}

impl Report {
    pub fn new(o: &Options, machine: Machine, seeded_now: bool, seed_seconds: f64) -> Self {
        Report {
            options: serde_json::to_value(o).unwrap_or_default(),
            machine,
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
            deletes: Value::Null,
            big_vs: Vec::new(),
            ties: Vec::new(),
            failures: Vec::new(),
        }
    }
}

/// The results: one row per figure, with its same-run baseline, the ratio
/// to it, and its target and whether this run met it.
pub const RESULT_COLUMNS: [&str; 7] = [
    "scenario",
    "figure",
    "value",
    "same-run baseline",
    "ratio",
    "target",
    "met",
];

impl Row {
    /// The row's cells under [`RESULT_COLUMNS`].
    pub fn cells(&self) -> Vec<String> {
        let or_none = |v: Option<String>| v.unwrap_or_else(|| NONE.into());
        vec![
            self.scenario.clone(),
            self.metric.clone(),
            figure(self.value),
            or_none(
                self.baseline
                    .map(|b| format!("{} {}", figure(b), self.baseline_name)),
            ),
            or_none(self.ratio.map(|x| format!("{x:.2}"))),
            or_none(self.goal.as_ref().map(|g| g.target.clone())),
            or_none(
                self.goal
                    .as_ref()
                    .map(|g| if g.met { "met" } else { "NOT met" }.to_string()),
            ),
        ]
    }
}

/// Every table of the report, in the order it shows them.
pub fn tables(r: &Report) -> Vec<Table> {
    let mut results = Table::new("Results", &RESULT_COLUMNS);
    for row in &r.rows {
        results.push(row.cells());
    }
    let mut tables = vec![results, latency_table(&r.rows)];
    tables.extend([page_cost_table(r), cpu_table(r), failures_table(r)]);
    tables.extend([configuration_table(r), machine_table(r)]);
    tables.retain(|t| !t.is_empty());
    tables
}

fn latency_table(rows: &[Row]) -> Table {
    let mut t = Table::new(
        "Latency",
        &[
            "scenario", "requests", "errors", "per s", "p50 ms", "p90 ms", "p99 ms", "max ms",
        ],
    );
    for row in rows {
        if let Some(l) = &row.latency {
            t.push(vec![
                row.scenario.clone(),
                l.requests.to_string(),
                l.errors.to_string(),
                figure(l.per_sec),
                figure(l.p50_ms),
                figure(l.p90_ms),
                figure(l.p99_ms),
                figure(l.max_ms),
            ]);
        }
    }
    t
}

/// The read rows' Redis figures per page: sources read (and expected),
/// calls (all, and of the main commands), script and CPU microseconds,
/// the CPU budget, and the service's CPU beside Redis's.
fn page_cost_table(r: &Report) -> Table {
    let mut columns = vec!["scenario", "sources", "expected", "calls"];
    columns.extend(PAGE_COMMANDS);
    columns.extend(["script µs", "redis µs", "budget µs", "budget", "service µs"]);
    let mut t = Table::new("Redis per page (INFO commandstats)", &columns);
    for row in &r.rows {
        let Some(c) = &row.redis else { continue };
        let mut cells = vec![
            row.scenario.clone(),
            figure(c.sources_per_page),
            format!(
                "{}{}",
                c.expected_sources,
                if c.sources_ok { "" } else { " (not read)" }
            ),
            figure(c.redis_calls_per_page),
        ];
        cells.extend(
            PAGE_COMMANDS
                .iter()
                .map(|name| figure(c.calls_per_page.get(*name).copied().unwrap_or(0.0))),
        );
        cells.extend([
            figure(c.redis_script_usec_per_page),
            figure(c.redis_cpu_usec_per_page),
            figure(c.redis_cpu_budget_usec),
            if c.budget_met { "met" } else { "NOT met" }.into(),
            figure(c.service_cpu_usec_per_page),
        ]);
        t.push(cells);
    }
    t
}

/// CPU each process spent per request (fan-out: per 1,000 inbox writes).
fn cpu_table(r: &Report) -> Table {
    let mut t = Table::new(
        "CPU ms per request (fan-out: per 1,000 inbox writes)",
        &["scenario", "service", "postgres", "redis", "tool"],
    );
    for row in &r.rows {
        if let Some(c) = row.cpu_ms_per_request {
            let ms = |v: f64| format!("{v:.3}");
            t.push(vec![
                row.scenario.clone(),
                ms(c.service),
                ms(c.postgres),
                ms(c.redis),
                ms(c.tool),
            ]);
        }
    }
    t
}

fn failures_table(r: &Report) -> Table {
    let mut t = Table::new("Premises that failed", &["premise"]);
    for failure in &r.failures {
        t.push(vec![failure.clone()]);
    }
    t
}

/// The run's options, each as given or at its default.
fn configuration_table(r: &Report) -> Table {
    let mut t = Table::new("Configuration", &["option", "value"]);
    if let Some(options) = r.options.as_object() {
        for (name, value) in options {
            let value = match value {
                Value::String(s) => s.clone(),
                Value::Array(items) => items
                    .iter()
                    .map(|v| v.as_str().map_or(v.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(","),
                Value::Null => NONE.into(),
                other => other.to_string(),
            };
            t.push(vec![name.replace('_', "-"), value]);
        }
    }
    t.push(vec![
        "graph seeded by this run".into(),
        r.seeded_now.to_string(),
    ]);
    t
}

fn machine_table(r: &Report) -> Table {
    let mut t = Table::new("Machine", &["property", "value"]);
    for (name, value) in r.machine.properties() {
        t.push(vec![name.into(), value]);
    }
    t
}

/// What the tables do not hold, a line each: baselines, who was big-V,
/// ties, storage, memory and the job table while publishing.
fn details(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "baselines: {}", r.baselines);
    for change in &r.big_vs {
        let _ = writeln!(out, "big-Vs:    {change}");
    }
    for ties in &r.ties {
        let _ = writeln!(out, "ties:      {ties}");
    }
    let _ = writeln!(out, "storage:   {}", r.storage);
    let _ = writeln!(out, "memory:    {}", r.memory);
    if !r.deletes.is_null() {
        let _ = writeln!(out, "deletes:   {}", r.deletes);
    }
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
            escape(name)
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

/// The page's own policy: nothing may be fetched (the charts are inline
/// SVG, the style inline), so it renders the same with no network.
const NO_NETWORK: &str = "default-src 'none'; style-src 'unsafe-inline'";

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1400px}\
     table{border-collapse:collapse;margin:0 0 1.5em;font-size:13px}\
     caption{text-align:left;font-weight:bold;padding:.3em 0}\
     th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}\
     th{background:#f0f0f0}tbody tr:nth-child(even){background:#fafafa}\
     .side{display:flex;flex-wrap:wrap;gap:2em;align-items:flex-start}\
     pre{background:#f4f4f4;padding:1em;overflow-x:auto;font-size:12px}";

/// Writes the terminal table, `report.json` and `report.html` of `r`:
/// the same tables in each.
pub fn write(r: &Report, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let tables = tables(r);
    let text: Vec<String> = tables.iter().map(Table::text).collect();
    println!("\n{}\n{}", text.join("\n"), details(r));
    let mut json = serde_json::to_value(r).map_err(|e| e.to_string())?;
    json["tables"] = serde_json::to_value(&tables).map_err(|e| e.to_string())?;
    let json = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("report.json"), &json).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("report.html"), page(r, &tables)).map_err(|e| e.to_string())?;
    println!(
        "wrote {} and {}",
        dir.join("report.json").display(),
        dir.join("report.html").display()
    );
    Ok(())
}

/// The HTML page: each table beside its chart, then the run.
fn page(r: &Report, tables: &[Table]) -> String {
    let table = |title: &str| {
        tables
            .iter()
            .find(|t| t.title.starts_with(title))
            .map(Table::html)
            .unwrap_or_default()
    };
    let mut page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{NO_NETWORK}\">\
         <title>feed-service load report</title><style>{STYLE}</style></head><body>\
         <h1>feed-service load report</h1><p>{} on {}, {} cores, {} GiB; Redis {}, PostgreSQL {}.</p>",
        if r.failures.is_empty() {
            "Every premise held"
        } else {
            "<strong>Some premises failed</strong> (below)"
        },
        escape(&r.machine.cpu),
        r.machine.cores,
        r.machine.memory_gib,
        escape(&r.machine.redis),
        escape(&r.machine.postgres),
    );
    let _ = write!(page, "<h2>Results</h2>{}", table("Results"));
    let _ = write!(page, "{}", table("Premises that failed"));
    let _ = write!(
        page,
        "<h2>Latency</h2><div class=\"side\">{}{}</div>",
        table("Latency"),
        latency_svg(&r.latencies)
    );
    if r.rows.iter().any(|row| row.redis.is_some()) {
        let _ = write!(
            page,
            "<h2>Redis per page of the reads</h2><p>Redis from <code>INFO commandstats</code> and \
             <code>INFO cpu</code> around the closed loop, its budget sources × the \
             baseline's CPU per ZREVRANGEBYSCORE, the service from <code>/proc</code>.</p>\
             {}<div class=\"side\">{}{}</div>",
            table("Redis per page"),
            table("CPU ms per request"),
            page_cost_svg(&r.rows)
        );
    }
    for f in &r.fanouts {
        let _ = write!(
            page,
            "<h2>Progress: {}</h2><p>{} inbox writes in {:.2} s ({:.0}/s)</p>{}",
            escape(&f.scenario),
            f.inbox_writes,
            f.seconds_to_last_inbox,
            f.writes_per_sec,
            progress_svg(f)
        );
    }
    let _ = write!(
        page,
        "<h2>Run</h2><div class=\"side\">{}{}</div><pre>{}</pre></body></html>",
        table("Configuration"),
        table("Machine"),
        escape(&details(r))
    );
    page
}
