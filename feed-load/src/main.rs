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
mod deletes;
mod machine;
mod redis_stats;
mod report;
mod scenarios;
mod seed;
mod streams;
mod table;
mod target;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use clap_complete::Shell;

/// The run's options (from [`Cli`], each at its default when not given).
#[derive(Debug, Clone, serde::Serialize)]
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
    /// Pages each reader of the closed loop scrolls, from the first (1:
    /// first pages only).
    pub pages: usize,
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
    /// fan-out, read and streams scenarios run on it too, after the single node,
    /// each against the same-run baselines of its own Redis.
    pub redis_cluster: Option<String>,
    /// Database name and key prefix of the run.
    pub database: String,
    pub prefix: String,
    /// The service binary to start, and where to write the reports.
    pub service_bin: PathBuf,
    pub out_dir: PathBuf,
}

/// Seeds a follow graph straight into PostgreSQL, starts the service on it
/// and runs load scenarios over HTTP, each figure beside a baseline that
/// Redis itself (redis-benchmark) gives in the same run.
///
/// PostgreSQL and Redis are those of the service's configuration (FEED_*
/// variables). Graph sizes are scaled by --scale unless given.
#[derive(Parser, Debug)]
#[command(name = "feed-load", version)]
struct Cli {
    /// Scales every graph size not given [default: 1]
    #[arg(long, env = "FEED_LOAD_SCALE", value_name = "F")]
    scale: Option<f64>,
    /// Followers of the mega big-V, also the number of readers [default: 1000000 × scale]
    #[arg(long, env = "FEED_LOAD_MEGA_FOLLOWERS", value_name = "N")]
    mega_followers: Option<i64>,
    /// Big-Vs of --big-followers followers each (overlapping) [default: 20]
    #[arg(long, env = "FEED_LOAD_BIG_AUTHORS", value_name = "N")]
    big_authors: Option<i64>,
    /// Followers of each big-V [default: 100000 × scale]
    #[arg(long, env = "FEED_LOAD_BIG_FOLLOWERS", value_name = "N")]
    big_followers: Option<i64>,
    /// Ordinary authors (50 of them the read graph's big-Vs) [default: 10000 × scale]
    #[arg(long, env = "FEED_LOAD_ORDINARY_AUTHORS", value_name = "N")]
    ordinary_authors: Option<i64>,
    /// Fewest followers of an ordinary author [default: 100 × scale]
    #[arg(long, env = "FEED_LOAD_ORDINARY_MIN", value_name = "N")]
    ordinary_min: Option<i64>,
    /// Most followers of an ordinary author [default: 5000 × scale]
    #[arg(long, env = "FEED_LOAD_ORDINARY_MAX", value_name = "N")]
    ordinary_max: Option<i64>,
    /// Fewest ordinary authors a read cohort's reader follows [default: 100 × scale]
    #[arg(long, env = "FEED_LOAD_READER_ORDINARY_MIN", value_name = "N")]
    reader_ordinary_min: Option<i64>,
    /// Most ordinary authors a read cohort's reader follows [default: 500 × scale]
    #[arg(long, env = "FEED_LOAD_READER_ORDINARY_MAX", value_name = "N")]
    reader_ordinary_max: Option<i64>,
    /// Seeded posts per author [default: 20]
    #[arg(long, env = "FEED_LOAD_POSTS_PER_AUTHOR", value_name = "N")]
    posts_per_author: Option<i64>,
    /// Readers in each read cohort [default: 2000 × scale, at least 2]
    #[arg(long, env = "FEED_LOAD_COHORT", value_name = "N")]
    cohort: Option<i64>,
    /// Share of the mega big-V's followers that are active fans [default: 0.1]
    #[arg(long, env = "FEED_LOAD_ACTIVE_FRACTION", value_name = "F")]
    active_fraction: Option<f64>,
    /// Concurrent readers of the read scenarios [default: 64]
    #[arg(long, env = "FEED_LOAD_CONCURRENCY", value_name = "N")]
    concurrency: Option<usize>,
    /// Pages each reader scrolls in a read run, from the first; 1 reads
    /// first pages only [default: 3]
    #[arg(long, env = "FEED_LOAD_PAGES", value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pages: Option<u16>,
    /// Seconds of each read run [default: 10]
    #[arg(long, env = "FEED_LOAD_SECONDS", value_name = "S")]
    seconds: Option<f64>,
    /// Reads per second of the mixed scenario [default: 200]
    #[arg(long, env = "FEED_LOAD_MIXED_READS_PER_SEC", value_name = "R")]
    mixed_reads_per_sec: Option<f64>,
    /// Publishes per second of the mixed scenario [default: 10]
    #[arg(long, env = "FEED_LOAD_MIXED_PUBLISHES_PER_SEC", value_name = "R")]
    mixed_publishes_per_sec: Option<f64>,
    /// Publishes per author class of the publish-latency scenario [default: 100]
    #[arg(long, env = "FEED_LOAD_PUBLISHES", value_name = "N")]
    publishes: Option<usize>,
    /// Live streams held open in the streams scenario [default: 10000]
    #[arg(long, env = "FEED_LOAD_STREAMS", value_name = "N")]
    streams: Option<usize>,
    /// Posts per author class while the streams are open (a p99 of fewer
    /// than 100 is their largest) [default: 100]
    #[arg(long, env = "FEED_LOAD_STREAM_POSTS", value_name = "N")]
    stream_posts: Option<usize>,
    /// Seconds of the sustained-publishing scenario [default: 600]
    #[arg(long, env = "FEED_LOAD_SUSTAIN_SECS", value_name = "S")]
    sustain_secs: Option<f64>,
    /// Scenarios to run, comma-separated (the baselines always run) [default: all: fanout,active,publish,reads,mixed,streams,sustained,memory]
    #[arg(long, env = "FEED_LOAD_ONLY", value_name = "LIST", value_delimiter = ',',
          value_parser = clap::builder::PossibleValuesParser::new(SCENARIOS))]
    only: Option<Vec<String>>,
    /// Drop and seed again even if the database holds this graph
    #[arg(long, env = "FEED_LOAD_RESEED")]
    reseed: bool,
    /// A Redis Cluster's seed nodes (redis://HOST:PORT,…): the fan-out, read and streams scenarios run on it too [default: none]
    #[arg(long, env = "FEED_LOAD_REDIS_CLUSTER", value_name = "URLS")]
    redis_cluster: Option<String>,
    /// The run's database [default: feed_load]
    #[arg(long, env = "FEED_LOAD_DATABASE", value_name = "NAME")]
    database: Option<String>,
    /// The run's Redis key prefix [default: load:]
    #[arg(long, env = "FEED_LOAD_PREFIX", value_name = "P")]
    prefix: Option<String>,
    /// The service binary to start [default: feed-service beside this one]
    #[arg(long, env = "FEED_LOAD_SERVICE_BIN", value_name = "PATH")]
    service_bin: Option<PathBuf>,
    /// Where report.json and report.html go [default: target/load]
    #[arg(long, env = "FEED_LOAD_OUT", value_name = "DIR")]
    out: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the completion script of a shell
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
}

impl Options {
    /// The options of a command line, each not given at its default (the
    /// graph's sizes scaled), checked together.
    fn of(cli: Cli) -> Result<Self, String> {
        let scale = cli.scale.unwrap_or(1.0);
        if !(scale > 0.0 && scale.is_finite()) {
            return Err(format!("--scale: must be above 0, got {scale}"));
        }
        let n = |v: f64| ((v * scale).round() as i64).max(1);
        let exe_dir = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.to_path_buf()))
            .unwrap_or_default();
        let opts = Options {
            mega_followers: cli.mega_followers.unwrap_or(n(1_000_000.0)),
            big_authors: cli.big_authors.unwrap_or(20),
            big_followers: cli.big_followers.unwrap_or(n(100_000.0)),
            ordinary_authors: cli.ordinary_authors.unwrap_or(n(10_000.0)),
            ordinary_min: cli.ordinary_min.unwrap_or(n(100.0)),
            ordinary_max: cli.ordinary_max.unwrap_or(n(5_000.0)),
            reader_ordinary_min: cli.reader_ordinary_min.unwrap_or(n(100.0)),
            reader_ordinary_max: cli.reader_ordinary_max.unwrap_or(n(500.0)),
            posts_per_author: cli.posts_per_author.unwrap_or(20),
            cohort: cli.cohort.unwrap_or(n(2_000.0).max(2)),
            active_fraction: cli.active_fraction.unwrap_or(0.1),
            concurrency: cli.concurrency.unwrap_or(64),
            pages: usize::from(cli.pages.unwrap_or(3)),
            seconds: cli.seconds.unwrap_or(10.0),
            mixed_reads_per_sec: cli.mixed_reads_per_sec.unwrap_or(200.0),
            mixed_publishes_per_sec: cli.mixed_publishes_per_sec.unwrap_or(10.0),
            only: cli
                .only
                .unwrap_or_else(|| SCENARIOS.iter().map(|s| s.to_string()).collect()),
            publishes: cli.publishes.unwrap_or(100),
            streams: cli.streams.unwrap_or(10_000),
            stream_posts: cli.stream_posts.unwrap_or(100),
            sustain_secs: cli.sustain_secs.unwrap_or(600.0),
            reseed: cli.reseed,
            redis_cluster: cli.redis_cluster.filter(|u| !u.trim().is_empty()),
            database: cli.database.unwrap_or_else(|| "feed_load".to_string()),
            prefix: cli.prefix.unwrap_or_else(|| "load:".to_string()),
            service_bin: cli
                .service_bin
                .unwrap_or_else(|| exe_dir.join("feed-service")),
            out_dir: cli.out.unwrap_or_else(|| PathBuf::from("target/load")),
        };
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
pub const SCENARIOS: [&str; 9] = [
    "fanout",
    "active",
    "publish",
    "reads",
    "mixed",
    "streams",
    "sustained",
    "deletes",
    "memory",
];

impl Options {
    /// Whether `scenario` is to run.
    pub fn runs(&self, scenario: &str) -> bool {
        self.only.iter().any(|s| s == scenario)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Completions { shell }) = cli.command {
        clap_complete::generate(
            shell,
            &mut Cli::command(),
            "feed-load",
            &mut std::io::stdout(),
        );
        return ExitCode::SUCCESS;
    }
    let opts = match Options::of(cli) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}\n\nFor more information, try '--help'.");
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
