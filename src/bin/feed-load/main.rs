//! `feed-load`: seeds a large follow graph straight into PostgreSQL, runs
//! load scenarios against the service over HTTP, measures Redis's own
//! ceiling in the same run, and reports every result also as a ratio to its
//! baseline (terminal table, JSON, and an HTML page with charts).
//!
//! By default it starts the service binary itself (next to its own
//! executable) on a database and key prefix of its own (`feed_load`,
//! `load:`), so one command does everything:
//!
//! ```sh
//! cargo run --release --bin feed-load
//! ```

mod big_v;
mod cpu;
mod redis_stats;
mod report;
mod scenarios;
mod seed;
mod streams;
mod target;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options, `--name value` on the command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// Followers of the one mega big-V (also the number of reader accounts).
    pub mega_followers: i64,
    /// Big-Vs with `big_followers` followers each (overlapping sets).
    pub big_authors: i64,
    pub big_followers: i64,
    /// Ordinary authors with `ordinary_min`..=`ordinary_max` followers
    /// each, counting the 50 read big-Vs of the spread graph (whose
    /// follower counts are their own: see `seed.rs`); the tied graph has as
    /// many authors again.
    pub ordinary_authors: i64,
    pub ordinary_min: i64,
    pub ordinary_max: i64,
    /// Ordinary authors each reader of the read cohorts follows, besides
    /// its big-Vs.
    pub reader_ordinary_min: i64,
    pub reader_ordinary_max: i64,
    /// Seeded posts per author.
    pub posts_per_author: i64,
    /// Readers in each read cohort (one follows 10 big-Vs, one 50; two
    /// cohorts per read graph, spread and tied).
    pub cohort: i64,
    /// Fraction of the mega big-V's followers that are active fans.
    pub active_fraction: f64,
    /// Concurrent readers and seconds per read scenario.
    pub concurrency: usize,
    pub seconds: f64,
    /// Reads per second and publishes per second in the mixed scenario.
    pub mixed_reads_per_sec: f64,
    pub mixed_publishes_per_sec: f64,
    /// Seconds of the sustained-publishing scenario.
    pub sustain_secs: f64,
    /// Publishes per author class in the publish-latency scenario.
    pub publishes: usize,
    /// Live streams held open in the streams scenario (at most the
    /// readers), and posts per author class while they are.
    pub streams: usize,
    pub stream_posts: usize,
    /// Scenarios to run (all by default; the baselines always run).
    pub only: Vec<String>,
    /// Drop and reseed even if the database already holds this graph.
    pub reseed: bool,
    /// Seed nodes of a Redis Cluster (comma-separated `redis://` URLs): the
    /// fan-out and read scenarios run on it too, after the single node,
    /// each against the same-run baselines of its own Redis.
    pub redis_cluster: Option<String>,
    /// Database name and key prefix of the run.
    pub database: String,
    pub prefix: String,
    /// The service binary to start, and where to write the reports.
    pub service_bin: PathBuf,
    pub out_dir: PathBuf,
}

impl Options {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut map: HashMap<String, String> = HashMap::new();
        let mut flags = Vec::new();
        let mut it = args.iter().peekable();
        while let Some(arg) = it.next() {
            let Some(name) = arg.strip_prefix("--") else {
                return Err(format!("unexpected argument {arg:?}"));
            };
            match it.peek() {
                Some(v) if !v.starts_with("--") => {
                    map.insert(name.to_string(), it.next().cloned().unwrap_or_default());
                }
                _ => flags.push(name.to_string()),
            }
        }
        let scale: f64 = take(&mut map, "scale", 1.0)?;
        let n = |v: f64| ((v * scale).round() as i64).max(1);
        let exe_dir = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.to_path_buf()))
            .unwrap_or_default();
        let opts = Options {
            mega_followers: take(&mut map, "mega-followers", n(1_000_000.0))?,
            big_authors: take(&mut map, "big-authors", 20)?,
            big_followers: take(&mut map, "big-followers", n(100_000.0))?,
            ordinary_authors: take(&mut map, "ordinary-authors", n(10_000.0))?,
            ordinary_min: take(&mut map, "ordinary-min", n(100.0))?,
            ordinary_max: take(&mut map, "ordinary-max", n(5_000.0))?,
            reader_ordinary_min: take(&mut map, "reader-ordinary-min", n(100.0))?,
            reader_ordinary_max: take(&mut map, "reader-ordinary-max", n(500.0))?,
            posts_per_author: take(&mut map, "posts-per-author", 20)?,
            cohort: take(&mut map, "cohort", n(2_000.0).max(2))?,
            active_fraction: take(&mut map, "active-fraction", 0.1)?,
            concurrency: take(&mut map, "concurrency", 64)?,
            seconds: take(&mut map, "seconds", 10.0)?,
            mixed_reads_per_sec: take(&mut map, "mixed-reads-per-sec", 200.0)?,
            mixed_publishes_per_sec: take(&mut map, "mixed-publishes-per-sec", 10.0)?,
            only: take(&mut map, "only", SCENARIOS.join(","))?
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            publishes: take(&mut map, "publishes", 100)?,
            streams: take(&mut map, "streams", 10_000)?,
            stream_posts: take(&mut map, "stream-posts", 20)?,
            sustain_secs: take(&mut map, "sustain-secs", 600.0)?,
            reseed: flags.iter().any(|f| f == "reseed"),
            redis_cluster: map.remove("redis-cluster").filter(|u| !u.trim().is_empty()),
            database: take(&mut map, "database", "feed_load".to_string())?,
            prefix: take(&mut map, "prefix", "load:".to_string())?,
            service_bin: take(&mut map, "service-bin", exe_dir.join("feed-service"))?,
            out_dir: take(&mut map, "out", PathBuf::from("target/load"))?,
        };
        if let Some(unknown) = map.keys().next().or(flags.iter().find(|f| *f != "reseed")) {
            return Err(format!("unknown option --{unknown}"));
        }
        if let Some(bad) = opts.only.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
            return Err(format!(
                "--only: unknown scenario {bad:?} (known: {})",
                SCENARIOS.join(",")
            ));
        }
        if opts.big_followers > opts.mega_followers
            || opts.ordinary_max > opts.mega_followers
            || opts.ordinary_min > opts.ordinary_max
            || opts.reader_ordinary_min > opts.reader_ordinary_max
            || opts.cohort > opts.mega_followers
            || opts.ordinary_authors < 60
        {
            return Err("follower counts must fit in the reader population (mega-followers), with at least 60 ordinary authors (50 of them are the read big-Vs)".into());
        }
        seed::Layout::of(&opts).check(&opts)?;
        Ok(opts)
    }
}

/// The scenarios, in the order they run.
pub const SCENARIOS: [&str; 8] = [
    "fanout",
    "active",
    "publish",
    "reads",
    "mixed",
    "streams",
    "sustained",
    "memory",
];

impl Options {
    /// Whether `scenario` is to run.
    pub fn runs(&self, scenario: &str) -> bool {
        self.only.iter().any(|s| s == scenario)
    }
}

fn take<T: std::str::FromStr>(
    map: &mut HashMap<String, String>,
    name: &str,
    default: T,
) -> Result<T, String> {
    match map.remove(name) {
        Some(v) => v
            .parse()
            .map_err(|_| format!("--{name}: cannot parse {v:?}")),
        None => Ok(default),
    }
}

const USAGE: &str =
    "usage: feed-load [--scale F] [--mega-followers N] [--big-authors N] [--big-followers N]
                 [--ordinary-authors N] [--ordinary-min N] [--ordinary-max N] [--posts-per-author N]
                 [--reader-ordinary-min N] [--reader-ordinary-max N]
                 [--cohort N] [--active-fraction F] [--concurrency N] [--seconds S]
                 [--mixed-reads-per-sec R] [--mixed-publishes-per-sec R] [--publishes N]
                 [--streams N] [--stream-posts N] [--sustain-secs S]
                 [--only fanout,active,publish,reads,mixed,streams,sustained,memory]
                 [--reseed] [--redis-cluster redis://HOST:PORT,...]
                 [--database NAME] [--prefix P] [--service-bin PATH] [--out DIR]
PostgreSQL and Redis are those of the service's configuration (FEED_* variables).
With --redis-cluster, the fan-out and read scenarios run again on that cluster.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let opts = match Options::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(scenarios::run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("feed-load: {e}");
            ExitCode::FAILURE
        }
    }
}
