//! The run: seed, start the service, measure the baselines, run the
//! scenarios, report.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel_async::{AsyncConnection, AsyncPgConnection};
use feed_service::settings::Settings;
use feed_service::testkit::{ready_database, FeedRedis, Tokens};
use feed_service::types::{Entry, PostId, UserId};
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::big_v::{self, Admin, BigVs};
use crate::cpu::Cpu;
use crate::machine::{postgres_version, Machine};
use crate::redis_stats::{self, Stats};
use crate::report::{self, Fanout, Latency, PageCost, Report, Row};
use crate::seed::{self, bar, now_ms, Layout, COHORT_BIG_VS};
use crate::target::{self, ReadBaseline, Target, WriteBaselines};
use crate::Options;

type R<T> = Result<T, String>;

fn err<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// The service as a child process; killed when dropped.
struct Service {
    child: Child,
    base: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The admin settings of every run but the big-V thresholds (which each
/// scenario sets): an active window of a week, caps of 1,000.
fn run_settings() -> Value {
    json!({"active_window_secs": 604_800, "inbox_max_len": 1000, "outbox_max_len": 1000})
}

/// Starts the service on `target` and gives it the run's settings through
/// its admin API.
async fn start_service(
    o: &Options,
    db_url: &str,
    target: &Target,
    client: &reqwest::Client,
    keys: &Tokens,
) -> R<Service> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let child = Command::new(&o.service_bin)
        .env("FEED_SERVER__PORT", port.to_string())
        .env("FEED_DATABASE__URL", db_url)
        .env("FEED_REDIS__KEY_PREFIX", &o.prefix)
        .env("FEED_TELEMETRY__LEVEL", "warn")
        // The load is the point: no request-rate limits, and every stream
        // comes from this one address, each holding a connection.
        .env("FEED_LIMITS__ENABLED", "false")
        .env("FEED_FEED__STREAMS_PER_ADDRESS", "0")
        .env(
            "FEED_SERVER__MAX_CONNECTIONS",
            (o.streams + 10_000).to_string(),
        )
        .envs(target.service_env())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {}: {e} (build it with cargo build --release)",
                o.service_bin.display()
            )
        })?;
    let service = Service {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(res) = client.get(format!("{}/readyz", service.base)).send().await {
            if res.status().is_success() {
                Admin::new(client, &service.base, keys)?
                    .settings(&run_settings())
                    .await?;
                return Ok(service);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the service did not become ready".into())
}

pub async fn run(o: Options) -> R<()> {
    let settings = Settings::load().map_err(|e| e.to_string())?;
    let db_url = ready_database(settings.database.url.expose_secret(), &o.database)
        .await
        .map_err(|e| e.chain())?;
    let mut pg = AsyncPgConnection::establish(&db_url)
        .await
        .map_err(|e| format!("PostgreSQL: {e}"))?;
    let layout = Layout::of(&o);
    let started = Instant::now();
    let seeded = seed::seed(&mut pg, &o, &layout).await?;
    let seed_secs = started.elapsed().as_secs_f64();
    let single = Target::single(&settings, &o.prefix)?;
    let cluster = match &o.redis_cluster {
        Some(urls) => Some(Target::cluster(&settings, &o.prefix, urls)?),
        None => None,
    };
    for target in std::iter::once(&single).chain(&cluster) {
        target.delete(&format!("{}*", o.prefix)).await?;
    }
    let keys = Tokens::new(&settings.auth).map_err(|e| e.chain())?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(o.concurrency * 2)
        .build()
        .map_err(|e| e.to_string())?;
    let machine = Machine::describe(
        redis_stats::version(&single.store, single.name).await?,
        postgres_version(
            seed::count(
                &mut pg,
                "SELECT current_setting('server_version_num')::bigint AS n",
            )
            .await?,
        ),
    );
    let mut report = Report::new(&o, machine, seeded, seed_secs);

    // Storage cost of the graph.
    report.storage = storage(&mut pg).await?;

    let mut run = Run {
        o: &o,
        layout: &layout,
        pg: &mut pg,
        client: &client,
        keys: &keys,
        report: &mut report,
    };
    let service = start_service(&o, &db_url, &single, &client, &keys).await?;
    let baselines = run.on_redis(&single, &service).await?;
    run.report.baselines = json!({"tool": "redis-benchmark"});
    merge(&mut run.report.baselines, baselines);

    // Publishing authors: the big-Vs and the mega author are big-V.
    if ["publish", "mixed", "streams", "sustained", "deletes"]
        .iter()
        .any(|s| o.runs(s))
    {
        let admin = Admin::new(&client, &service.base, &keys)?;
        run.big_vs(&single, &admin, BigVs::BigAuthors).await?;
    }

    // Publish latency by the author's follower count.
    if o.runs("publish") {
        let lat = publishes(&o, &layout, run.pg, &client, &service.base, &keys).await?;
        for (label, lat) in lat {
            run.report.rows.push(Row::latency(&label, &lat));
            run.report.latencies.push((label, lat));
        }
    }

    // (d) mixed: reads at a fixed rate while authors publish.
    if o.runs("mixed") {
        let (reads_lat, publish_lat) = mixed(&o, &layout, &client, &service.base, &keys).await;
        let report = &mut *run.report;
        report.rows.push(Row::latency("mixed: reads", &reads_lat));
        report
            .rows
            .push(Row::latency("mixed: publishes", &publish_lat));
        report.latencies.push(("mixed: reads".into(), reads_lat));
        report
            .latencies
            .push(("mixed: publishes".into(), publish_lat));
    }

    // Live streams: delivery latency, an ordinary author and the mega big-V.
    if o.runs("streams") {
        run.streams(&single, &service).await?;
    }

    // Sustained publishing: does the job queue stay small?
    if o.runs("sustained") {
        let (lat, table) = sustained(&o, &layout, run.pg, &client, &service.base, &keys).await?;
        let report = &mut *run.report;
        report.rows.push(Row::latency("sustained publishing", &lat));
        report.latencies.push(("sustained publishing".into(), lat));
        report.sustained = table;
    }

    // Deleted posts giving back their slots in the inboxes.
    if o.runs("deletes") {
        let cap = run_settings()["inbox_max_len"].as_u64().unwrap_or(1000) as usize;
        let (rows, account, failures) =
            crate::deletes::deletes(&layout, run.pg, &client, &service.base, &keys, &single, cap)
                .await?;
        let report = &mut *run.report;
        report.rows.extend(rows);
        report.deletes = account;
        report.failures.extend(failures);
    }

    // Memory per inbox entry, in the service's layout.
    if o.runs("memory") {
        run.report.memory = memory(&settings, &o.prefix, 1000).await?;
    }
    // The single node's service stops first: its fan-out worker would
    // otherwise take the cluster part's jobs.
    drop(service);

    // The same fan-outs, reads and streams on the cluster, against its own baselines.
    if let Some(cluster) = &cluster {
        let service = start_service(&o, &db_url, cluster, &client, &keys).await?;
        let baselines = run.on_redis(cluster, &service).await?;
        if o.runs("streams") {
            let admin = Admin::new(&client, &service.base, &keys)?;
            run.big_vs(cluster, &admin, BigVs::BigAuthors).await?;
            run.streams(cluster, &service).await?;
        }
        drop(service);
        run.report.baselines["cluster"] = baselines;
    }
    for target in std::iter::once(&single).chain(&cluster) {
        target.delete(&format!("{}*", o.prefix)).await?;
    }
    report::write(&report, &o.out_dir)?;
    if !report.failures.is_empty() {
        return Err(format!(
            "{} premise(s) failed (the report is written):\n  {}",
            report.failures.len(),
            report.failures.join("\n  ")
        ));
    }
    Ok(())
}

/// Adds `extra`'s fields to the object `into`.
fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        into.extend(extra);
    }
}

/// What every part of the run shares.
struct Run<'a> {
    o: &'a Options,
    layout: &'a Layout,
    pg: &'a mut AsyncPgConnection,
    client: &'a reqwest::Client,
    keys: &'a Tokens,
    report: &'a mut Report,
}

impl Run<'_> {
    /// The scenarios that measure Redis, on `target` through `service`:
    /// (a) fan-out to every follower of the mega author, pure push; (b) the
    /// same author as a big-V, to its active fans; (c) reads merging 10
    /// and 50 big-V outboxes with the inbox, on the spread and the tied
    /// graph. Returns the same-run baselines of `target`: pipelined ZADD
    /// and LPUSH of new members before the fan-outs (each fan-out is held
    /// to the first and shown beside the second), ZREVRANGEBYSCORE (rate
    /// and Redis CPU per call) before and after the reads (the reads are
    /// held to their mean).
    async fn on_redis(&mut self, target: &Target, service: &Service) -> R<Value> {
        let o = self.o;
        let writes = WriteBaselines {
            zadd: target.zadd_baseline().await?,
            lpush: target.lpush_baseline().await?,
        };
        let zrev_before = target.zrev_baseline().await?;
        for (name, label, big_v) in [
            ("fanout", "fan-out, pure push", false),
            ("active", "fan-out, big-V to active fans", true),
        ] {
            if !o.runs(name) {
                continue;
            }
            let label = target.label(label);
            let f = fanout(self, target, service, &label, big_v).await?;
            let row = Row::throughput(
                &label,
                "inbox writes/s",
                f.writes_per_sec,
                writes.zadd,
                "pipelined ZADD/s",
            );
            let met = row.ratio.unwrap_or(0.0) >= FANOUT_TARGET;
            self.report.rows.push(
                row.with_cpu(f.cpu_ms_per_1000_writes)
                    .with_goal(format!("≥ {FANOUT_TARGET}"), met),
            );
            self.report.rows.push(Row::throughput(
                &label,
                "inbox writes/s",
                f.writes_per_sec,
                writes.lpush,
                "pipelined LPUSH/s",
            ));
            self.report.fanouts.push(f);
        }

        let read_runs = if o.runs("reads") {
            self.read_scenarios(target, service).await?
        } else {
            Vec::new()
        };
        let zrev_after = target.zrev_baseline().await?;
        let zrev = ReadBaseline::mean(zrev_before, zrev_after);
        for run in read_runs {
            self.report_reads(run, zrev);
        }
        Ok(target::baselines(writes, zrev_before, zrev_after))
    }

    /// The live streams on `target` through `service`: their rows, and
    /// their account in the report's `streams` (a cluster's under its
    /// `cluster` key).
    async fn streams(&mut self, target: &Target, service: &Service) -> R<()> {
        let at = (service.base.as_str(), service.child.id());
        let (rows, account, failures) =
            crate::streams::streams(self.o, self.layout, self.pg, at, self.keys, target).await?;
        let report = &mut *self.report;
        for (label, lat, goal) in rows {
            let row = Row::latency(&label, &lat);
            report.rows.push(match goal {
                Some((target, met)) => row.with_goal(target, met),
                None => row,
            });
            report.latencies.push((label, lat));
        }
        match target.is_cluster() {
            true => report.streams["cluster"] = account,
            false => report.streams = account,
        }
        report.failures.extend(failures);
        Ok(())
    }

    /// Makes exactly `who` big-V through `admin`'s service on `target`
    /// (see `big_v.rs`), recorded in the report.
    async fn big_vs(&mut self, target: &Target, admin: &Admin<'_>, who: BigVs) -> R<()> {
        let mut record = big_v::reach(self.pg, admin, self.layout, who).await?;
        record["redis"] = json!(target.name);
        self.report.big_vs.push(record);
        Ok(())
    }

    /// The read scenarios on `target`: the read big-Vs of both graphs made
    /// big-V, Redis emptied (every inbox, outbox and reader state is
    /// rebuilt by the warm-up reads), then for each graph (spread, tied)
    /// and each cohort (10 and 50 big-Vs) a closed and an open loop.
    async fn read_scenarios(&mut self, target: &Target, service: &Service) -> R<Vec<ReadRun>> {
        let admin = Admin::new(self.client, &service.base, self.keys)?;
        self.big_vs(target, &admin, BigVs::ReadGraphs).await?;
        self.check_ties().await?;
        target
            .delete(&format!("{}*", target.store.prefix()))
            .await?;
        let mut runs = Vec::new();
        for graph in self.layout.graphs() {
            for (cohort, big_vs) in graph.cohorts.iter().zip(COHORT_BIG_VS) {
                let label = target.label(&read_label(big_vs, graph.suffix));
                runs.push(
                    self.read_run(target, service, label, cohort, big_vs)
                        .await?,
                );
            }
        }
        Ok(runs)
    }

    /// Records how the feed of each read cohort's first reader shares
    /// milliseconds (from PostgreSQL, so once a run); a tied cohort whose
    /// feed has a millisecond of fewer than 2 or more than 4 posts fails
    /// the run, as its rows would not measure what they claim.
    async fn check_ties(&mut self) -> R<()> {
        if !self.report.ties.is_empty() {
            return Ok(());
        }
        for graph in self.layout.graphs() {
            for (cohort, big_vs) in graph.cohorts.iter().zip(COHORT_BIG_VS) {
                let label = read_label(big_vs, graph.suffix);
                let ties = seed::ties(self.pg, *cohort.start()).await?;
                if graph.tied && (ties.min_per_ms < 2 || ties.max_per_ms > 4) {
                    self.report.failures.push(format!(
                        "{label}: reader {}'s feed has {} to {} posts to a millisecond, not 2 to 4",
                        ties.reader, ties.min_per_ms, ties.max_per_ms
                    ));
                }
                let mut record = serde_json::to_value(&ties).map_err(|e| e.to_string())?;
                record["scenario"] = json!(label);
                self.report.ties.push(record);
            }
        }
        Ok(())
    }

    /// One read scenario: the cohort's readers read once (warm-up), then
    /// `concurrency` of them scroll `pages` pages for `seconds` (closed loop, with Redis's
    /// statistics around it), then first pages at half that rate (open
    /// loop: requests sent on schedule whatever the answers' latency).
    async fn read_run(
        &self,
        target: &Target,
        service: &Service,
        label: String,
        cohort: &std::ops::RangeInclusive<i64>,
        big_vs: i64,
    ) -> R<ReadRun> {
        let o = self.o;
        let tokens: Vec<String> = cohort
            .clone()
            .map(|r| self.keys.user(UserId(r), 3600).unwrap_or_default())
            .collect();
        let (client, base) = (self.client, service.base.as_str());
        warm(client, base, &tokens, &label).await;
        let pid = service.child.id();
        let before = Cpu::now(pid);
        let closed = reads(
            client,
            base,
            &tokens,
            (o.concurrency, o.pages),
            o.seconds,
            &label,
        );
        let (closed, redis) = redis_stats::around(&target.store, target.name, closed).await?;
        let cpu = before.per(Cpu::now(pid), pages(&closed) as f64);
        let rate = (closed.per_sec / 2.0).max(1.0);
        let open_label = format!("{label}, open loop {rate:.0}/s");
        let before = Cpu::now(pid);
        let open = open_loop(client, base, &tokens, rate, o.seconds, &open_label).await;
        let open_cpu = before.per(Cpu::now(pid), pages(&open) as f64);
        Ok(ReadRun {
            label,
            big_vs,
            closed,
            cpu,
            redis,
            open_label,
            open,
            open_cpu,
        })
    }

    /// A read run's rows, against the same-run read baseline `zrev`: its
    /// premise checked (a failure is recorded), its targets met or not.
    fn report_reads(&mut self, run: ReadRun, zrev: ReadBaseline) {
        let sources = (run.big_vs + 1) as f64;
        let cost = PageCost::of(
            &run.redis,
            pages(&run.closed),
            sources,
            zrev.cpu_usec_per_read,
            run.cpu.service,
        );
        let report = &mut *self.report;
        report.failures.extend(cost.premise(&run.label));
        let target = read_ratio_target(run.big_vs);
        let row = Row::reads(&run.label, &run.closed, zrev.per_sec / sources, sources);
        let met = row.ratio.unwrap_or(0.0) >= target && run.closed.errors == 0;
        report.rows.push(
            row.with_cpu(run.cpu)
                .with_redis(cost)
                .with_goal(format!("ratio ≥ {target}, 0 errors"), met),
        );
        report.latencies.push((run.label, run.closed));
        let met = run.open.p99_ms < OPEN_LOOP_P99_MS && run.open.errors == 0;
        report.rows.push(
            Row::latency(&run.open_label, &run.open)
                .with_cpu(run.open_cpu)
                .with_goal(format!("p99 < {OPEN_LOOP_P99_MS} ms, 0 errors"), met),
        );
        report.latencies.push((run.open_label, run.open));
    }
}

/// A read scenario's label (before the topology's mark).
fn read_label(big_vs: i64, suffix: &str) -> String {
    format!("reads, {big_vs} big-Vs{suffix}")
}

/// Pages served: the successful responses.
fn pages(lat: &Latency) -> usize {
    lat.requests.saturating_sub(lat.errors)
}

/// The read target: pages/s at least this share of the same-run
/// ZREVRANGEBYSCORE rate divided by the page's sources, 1.0 with 10
/// big-Vs and 2.0 with 50 (a page's range reads travel together, where
/// the baseline pays a request per range read, so the more sources the
/// more a page saves).
fn read_ratio_target(big_vs: i64) -> f64 {
    if big_vs >= 50 {
        2.0
    } else {
        1.0
    }
}

/// The fan-out target: verified inbox writes/s at least this share of the
/// same-run pipelined ZADD rate (new members into sorted sets of about a
/// thousand, the layout the lists replaced).
const FANOUT_TARGET: f64 = 0.8;

/// The open loop's target: p99 below this, in milliseconds.
const OPEN_LOOP_P99_MS: f64 = 25.0;

/// A read scenario's measurements, reported once the read baseline after
/// the reads is known.
struct ReadRun {
    label: String,
    big_vs: i64,
    closed: Latency,
    /// CPU per page of each process (closed loop).
    cpu: Cpu,
    /// Redis's statistics around the closed loop.
    redis: Stats,
    open_label: String,
    open: Latency,
    open_cpu: Cpu,
}

async fn storage(pg: &mut AsyncPgConnection) -> R<Value> {
    let follows = seed::count(pg, "SELECT count(*) AS n FROM follows").await?;
    let bytes = seed::count(pg, "SELECT pg_total_relation_size('follows') AS n").await?;
    Ok(json!({
        "follows": follows,
        "follows_bytes": bytes,
        "bytes_per_follow": bytes as f64 / follows.max(1) as f64,
        "rows_per_follow": 1,
    }))
}

fn tick(b: indicatif::ProgressBar, secs: f64) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for _ in 0..secs.ceil() as u64 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            b.inc(1);
        }
    })
}

/// Entries an inbox holds before a fan-out scenario's post.
const OLDER_ENTRIES: i64 = 100;

/// An inbox's list of [`OLDER_ENTRIES`] posts a second apart, newest at
/// `newest`, then its floor (the store's layout: `layout.rs`).
fn older_entries(newest: i64) -> Vec<Vec<u8>> {
    let entries: Vec<Entry> = (0..OLDER_ENTRIES)
        .map(|j| Entry::new(newest - j * 1000, PostId(j + 1)))
        .collect();
    FeedRedis::inbox_list(&entries, newest - OLDER_ENTRIES * 1000)
}

/// One post by the mega author; every follower has an inbox. Pure push
/// (`big_v` false: nobody is big-V) or big-V to active fans (the mega
/// author alone is big-V). The thresholds are set, and their fan-out jobs
/// done, before the inboxes are made.
async fn fanout(
    run: &mut Run<'_>,
    target: &Target,
    service: &Service,
    label: &str,
    big_v: bool,
) -> R<Fanout> {
    // Pure push: nobody is big-V; else the mega author alone.
    let admin = Admin::new(run.client, &service.base, run.keys)?;
    let who = if big_v { BigVs::Mega } else { BigVs::Nobody };
    run.big_vs(target, &admin, who).await?;
    let (o, l, pg, client, keys) = (run.o, run.layout, &mut *run.pg, run.client, run.keys);
    // Every follower has read its feed once: its inbox exists, and holds
    // older posts above its floor, so the post lands on top of them as on
    // any reader's inbox (a push's cost does not grow with the list).
    target.delete(&format!("{}feed:*", o.prefix)).await?;
    let older = older_entries(now_ms() - 86_400_000);
    let b = bar(l.readers as u64, &format!("inboxes: {}", target.name));
    let mut from = 1;
    while from <= l.readers {
        let to = (from + 9_999).min(l.readers);
        let inboxes: Vec<String> = (from..=to).map(|i| target.store.inbox(UserId(i))).collect();
        target
            .query(&inboxes, |pipe, key| {
                pipe.rpush(key, &older);
            })
            .await?;
        b.set_position(to as u64);
        from = to + 1;
    }
    b.finish();
    let mut every = 1;
    let targets = if big_v {
        // One reader in `every` read lately: the mega author's active fans.
        let active = ((l.readers as f64) * o.active_fraction).round() as i64;
        every = (l.readers / active.max(1)).max(1);
        let now = now_ms();
        let fans = target.store.active_fans(UserId(l.mega));
        let mut n = 0i64;
        let mut from = every;
        while from <= l.readers {
            let members: Vec<(i64, i64)> = (from..=l.readers)
                .step_by(every as usize)
                .take(10_000)
                .map(|i| (now, i))
                .collect();
            from = members.last().map_or(l.readers, |m| m.1) + every;
            n += members.len() as i64;
            target
                .query(std::slice::from_ref(&fans), |pipe, key| {
                    pipe.zadd_multiple(key, &members);
                })
                .await?;
        }
        n
    } else {
        l.readers
    };
    let token = keys.user(UserId(l.mega), 3600).map_err(|e| e.chain())?;
    let pid = service.child.id();
    let cpu_before = Cpu::now(pid);
    let published = Instant::now();
    let res = client
        .post(format!("{}/api/v1/posts", service.base))
        .bearer_auth(&token)
        .json(&json!({"body": "to every follower"}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if res.status().as_u16() != 201 {
        return Err(format!("publish answered {}", res.status()));
    }
    let post: Value = res.json().await.map_err(|e| e.to_string())?;
    let post_id = post["id"].as_i64().unwrap_or_default();
    let entry = FeedRedis::packed(&Entry::new(
        post["created_at_ms"].as_i64().unwrap_or_default(),
        PostId(post_id),
    ));
    let b = bar(targets as u64, label);
    let mut progress = vec![(0.0, 0)];
    loop {
        let done = seed::count(pg, &format!(
            "SELECT COALESCE((SELECT checkpoint FROM fanout_jobs WHERE post_id = {post_id} AND kind = 'deliver'), -1) AS n"
        )).await?;
        let t = published.elapsed().as_secs_f64();
        if done < 0 {
            progress.push((t, targets));
            b.set_position(targets as u64);
            break;
        }
        let written = if big_v {
            (done as f64 * o.active_fraction) as i64
        } else {
            done
        };
        progress.push((t, written));
        b.set_position(written as u64);
        if t > 1800.0 {
            return Err("the fan-out did not finish in 30 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.finish();
    let cpu_after = Cpu::now(pid);
    let secs = progress.last().map(|p| p.0).unwrap_or(0.0).max(1e-3);
    // Spot-check delivery on a sample of inboxes.
    let sample: Vec<String> = (every..=l.readers)
        .step_by(((l.readers / every / 1000).max(1) * every) as usize)
        .map(|i| target.store.inbox(UserId(i)))
        .collect();
    let places = target
        .query(&sample, |pipe, key| {
            pipe.cmd("LPOS").arg(key).arg(&entry);
        })
        .await?;
    let hit = places.iter().filter(|v| **v != redis::Value::Nil).count();
    println!(
        "{label}: {hit}/{} sampled inboxes hold the post",
        sample.len()
    );
    // Only inboxes that hold the post count: the targets in the proportion
    // of the sample found holding it.
    let verified = (targets as f64 * hit as f64 / sample.len().max(1) as f64).round() as i64;
    Ok(Fanout {
        scenario: label.to_string(),
        followers: l.readers,
        inbox_writes: verified,
        sampled: sample.len(),
        sampled_holding: hit,
        seconds_to_last_inbox: secs,
        writes_per_sec: verified as f64 / secs,
        cpu_ms_per_1000_writes: cpu_before.per(cpu_after, verified as f64 / 1000.0),
        progress,
    })
}

/// Publish latency by the author's follower count: `o.publishes` posts per
/// author, one at a time at 20 per second, by the ordinary authors with the
/// fewest and the most followers, a big-V with `big_followers` and the mega
/// author (the big-Vs and the mega author big-V: `BigVs::BigAuthors`, set
/// before). The fan-outs they start run alongside; the scenario ends when
/// they are done.
async fn publishes(
    o: &Options,
    l: &Layout,
    pg: &mut AsyncPgConnection,
    client: &reqwest::Client,
    base: &str,
    keys: &Tokens,
) -> R<Vec<(String, Latency)>> {
    let fewest = seed::ordinary_author(pg, l, false).await?;
    let most = seed::ordinary_author(pg, l, true).await?;
    let mut out = Vec::new();
    for author in [fewest, most, *l.bigs.start(), l.mega] {
        let followers = seed::count(
            pg,
            &format!("SELECT follower_count AS n FROM users WHERE id = {author}"),
        )
        .await?;
        let label = format!("publish, {followers} followers");
        let token = keys.user(UserId(author), 3600).map_err(|e| e.chain())?;
        let b = bar(o.publishes as u64, &label);
        let every = Duration::from_millis(50);
        let mut next = Instant::now();
        let (mut lat, mut errors) = (Vec::new(), 0);
        let started = Instant::now();
        for _ in 0..o.publishes {
            let t = Instant::now();
            let res = client
                .post(format!("{base}/api/v1/posts"))
                .bearer_auth(&token)
                .json(&json!({"body": "latency probe"}))
                .send()
                .await;
            lat.push(t.elapsed().as_secs_f64() * 1000.0);
            if !matches!(&res, Ok(r) if r.status().as_u16() == 201) {
                errors += 1;
            }
            b.inc(1);
            next += every;
            tokio::time::sleep_until(next.into()).await;
        }
        b.finish();
        out.push((
            label,
            Latency::of(lat, errors, started.elapsed().as_secs_f64()),
        ));
    }
    big_v::drain(pg, "publish").await?;
    Ok(out)
}

/// Sustained publishing for `o.sustain_secs` at the highest rate the
/// machine holds: `SUSTAIN_PUBLISHERS` callers publish as fast as they are
/// answered, as the ordinary authors with the fewest followers, and pause
/// while more than `MAX_BACKLOG` jobs wait (so the rate is what the fan-out
/// keeps up with, and the queue is in a steady state). Every few seconds the
/// `fanout_jobs` table is measured: its size, its indexes' size, live and
/// dead rows, and the jobs not yet done. The rate counts the posts
/// published until every fan-out is done.
async fn sustained(
    o: &Options,
    l: &Layout,
    pg: &mut AsyncPgConnection,
    client: &reqwest::Client,
    base: &str,
    keys: &Tokens,
) -> R<(Latency, Value)> {
    const SUSTAIN_PUBLISHERS: usize = 8;
    const MAX_BACKLOG: i64 = 2000;
    #[derive(diesel::QueryableByName)]
    struct Sample {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        table_bytes: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        index_bytes: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        live: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        dead: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        pending: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        vacuums: i64,
    }
    async fn sample(pg: &mut AsyncPgConnection) -> R<Sample> {
        use diesel_async::RunQueryDsl;
        diesel::sql_query(
            "SELECT pg_table_size('fanout_jobs') AS table_bytes, \
                    pg_indexes_size('fanout_jobs') AS index_bytes, \
                    n_live_tup AS live, n_dead_tup AS dead, \
                    (SELECT count(*) FROM fanout_jobs WHERE NOT dead) AS pending, \
                    autovacuum_count + vacuum_count AS vacuums \
             FROM pg_stat_user_tables WHERE relname = 'fanout_jobs'",
        )
        .get_result::<Sample>(pg)
        .await
        .map_err(|e| e.to_string())
    }
    let (first, last) = (*l.ordinary.start(), *l.ordinary.end());
    let authors: Vec<String> = {
        use diesel_async::RunQueryDsl;
        #[derive(diesel::QueryableByName)]
        struct Id {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            id: i64,
        }
        diesel::sql_query(format!(
            "SELECT id FROM users WHERE id BETWEEN {first} AND {last} \
             ORDER BY follower_count, id LIMIT 64"
        ))
        .load::<Id>(pg)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|a| keys.user(UserId(a.id), 7200).unwrap_or_default())
        .collect()
    };
    let label = "sustained publishing";
    let b = bar(o.sustain_secs.ceil() as u64, label);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(o.sustain_secs);
    let authors = Arc::new(authors);
    let held = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for p in 0..SUSTAIN_PUBLISHERS {
        let (client, base, authors, held) = (
            client.clone(),
            base.to_string(),
            authors.clone(),
            held.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let (mut lat, mut errors, mut i) = (Vec::new(), 0, p);
            while Instant::now() < deadline {
                if held.load(std::sync::atomic::Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                let t = Instant::now();
                let res = client
                    .post(format!("{base}/api/v1/posts"))
                    .bearer_auth(&authors[i % authors.len()])
                    .json(&json!({"body": "sustained"}))
                    .send()
                    .await;
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                if !matches!(&res, Ok(r) if r.status().as_u16() == 201) {
                    errors += 1;
                }
                i += SUSTAIN_PUBLISHERS;
            }
            (lat, errors)
        }));
    }
    let every = (o.sustain_secs / 60.0).clamp(1.0, 10.0);
    let mut samples = Vec::new();
    let mut next_sample = 0.0;
    loop {
        let t = started.elapsed().as_secs_f64();
        let s = sample(pg).await?;
        held.store(
            s.pending > MAX_BACKLOG,
            std::sync::atomic::Ordering::Relaxed,
        );
        if t >= next_sample || Instant::now() >= deadline {
            samples.push(json!({
                "seconds": t, "table_bytes": s.table_bytes, "index_bytes": s.index_bytes,
                "live_rows": s.live, "dead_rows": s.dead, "jobs_pending": s.pending,
                "vacuums": s.vacuums,
            }));
            next_sample += every;
        }
        b.set_position(t as u64);
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100).min(deadline - Instant::now())).await;
    }
    let (mut all, mut errors) = (Vec::new(), 0);
    for t in tasks {
        if let Ok((lat, e)) = t.await {
            all.extend(lat);
            errors += e;
        }
    }
    // Done once every fan-out is.
    while sample(pg).await?.pending > 0 && started.elapsed().as_secs_f64() < o.sustain_secs + 600.0
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lat = Latency::of(all, errors, started.elapsed().as_secs_f64());
    b.finish();
    let max = |field: &str| {
        samples
            .iter()
            .filter_map(|s| s[field].as_i64())
            .max()
            .unwrap_or(0)
    };
    let table = json!({
        "publishes_per_sec": lat.per_sec,
        "max_table_bytes": max("table_bytes"),
        "max_index_bytes": max("index_bytes"),
        "max_dead_rows": max("dead_rows"),
        "max_jobs_pending": max("jobs_pending"),
        "samples": samples,
    });
    Ok((lat, table))
}

/// The posts a measured page asks for.
const PAGE_LIMIT: usize = 20;

/// Each reader reads once: inboxes and outboxes are rebuilt before measuring.
async fn warm(client: &reqwest::Client, base: &str, tokens: &[String], label: &str) {
    let b = bar(tokens.len() as u64, &format!("warm-up: {label}"));
    let owned: Vec<String> = tokens.to_vec();
    let shared = Arc::new(Mutex::new(owned.into_iter()));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (client, base, shared, b) =
            (client.clone(), base.to_string(), shared.clone(), b.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let Some(token) = shared.lock().await.next() else {
                    return;
                };
                let _ = client
                    .get(format!("{base}/api/v1/feed?limit={PAGE_LIMIT}"))
                    .bearer_auth(&token)
                    .send()
                    .await;
                b.inc(1);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    b.finish();
}

/// `concurrency` readers each scroll `pages` pages (a first page and the
/// ones below it) for `seconds`. Every reader's feed holds far more posts
/// than it scrolls, so a page of fewer than [`PAGE_LIMIT`] posts is wrong
/// and counted as an error: the figures are of full pages only.
async fn reads(
    client: &reqwest::Client,
    base: &str,
    tokens: &[String],
    (concurrency, pages): (usize, usize),
    seconds: f64,
    label: &str,
) -> Latency {
    let b = bar(seconds.ceil() as u64, label);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let tokens = Arc::new(tokens.to_vec());
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let (client, base, tokens) = (client.clone(), base.to_string(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            let mut turn = worker;
            while Instant::now() < deadline {
                let token = &tokens[turn % tokens.len()];
                turn += concurrency;
                let mut query = format!("limit={PAGE_LIMIT}");
                for _ in 0..pages {
                    let t = Instant::now();
                    let res = client
                        .get(format!("{base}/api/v1/feed?{query}"))
                        .bearer_auth(token)
                        .send()
                        .await;
                    let page: Option<Value> = match res {
                        Ok(r) if r.status().is_success() => r.json().await.ok(),
                        _ => None,
                    };
                    lat.push(t.elapsed().as_secs_f64() * 1000.0);
                    let full = |p: &Value| p["items"].as_array().map(Vec::len) == Some(PAGE_LIMIT);
                    match page {
                        Some(p) if full(&p) && !p["next"].is_null() => {
                            // Sent back whole, as a client holding
                            // positions does.
                            query = format!(
                                "max={}&offset={}&id={}&limit={PAGE_LIMIT}",
                                p["next"]["max"], p["next"]["offset"], p["next"]["id"]
                            );
                        }
                        _ => {
                            errors += 1;
                            break;
                        }
                    }
                }
            }
            (lat, errors)
        }));
    }
    let ticker = tick(b.clone(), seconds);
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        if let Ok((lat, e)) = t.await {
            all.extend(lat);
            errors += e;
        }
    }
    ticker.abort();
    b.finish();
    Latency::of(all, errors, started.elapsed().as_secs_f64())
}

/// Requests at a fixed rate until `deadline` (an open loop: each is sent
/// on schedule, whatever the latency of the ones before): first pages of
/// `tokens`' feeds, or publishes by them. Returns latencies and errors.
fn at_rate(
    client: &reqwest::Client,
    base: &str,
    tokens: Vec<String>,
    rate: f64,
    deadline: Instant,
    publish: bool,
) -> tokio::task::JoinHandle<(Vec<f64>, usize)> {
    let (client, base) = (client.clone(), base.to_string());
    tokio::spawn(async move {
        let mut lat = Vec::new();
        let mut errors = 0;
        let mut inflight = Vec::new();
        let every = Duration::from_secs_f64(1.0 / rate.max(0.001));
        let mut next = Instant::now();
        let mut i = 0usize;
        while Instant::now() < deadline {
            let (client, base, token) = (
                client.clone(),
                base.clone(),
                tokens[i % tokens.len()].clone(),
            );
            i += 1;
            inflight.push(tokio::spawn(async move {
                let t = Instant::now();
                let res = if publish {
                    client
                        .post(format!("{base}/api/v1/posts"))
                        .bearer_auth(&token)
                        .json(&json!({"body": "mixed"}))
                        .send()
                        .await
                } else {
                    client
                        .get(format!("{base}/api/v1/feed?limit={PAGE_LIMIT}"))
                        .bearer_auth(&token)
                        .send()
                        .await
                };
                let ok = match res {
                    // The whole body is read: a page is served once it arrived.
                    Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                    _ => false,
                };
                (t.elapsed().as_secs_f64() * 1000.0, ok)
            }));
            next += every;
            tokio::time::sleep_until(next.into()).await;
        }
        for f in inflight {
            if let Ok((ms, ok)) = f.await {
                lat.push(ms);
                if !ok {
                    errors += 1;
                }
            }
        }
        (lat, errors)
    })
}

/// First pages at `rate` per second for `seconds` (an open loop).
async fn open_loop(
    client: &reqwest::Client,
    base: &str,
    tokens: &[String],
    rate: f64,
    seconds: f64,
    label: &str,
) -> Latency {
    let b = bar(seconds.ceil() as u64, label);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let ticker = tick(b.clone(), seconds);
    let (lat, errors) = at_rate(client, base, tokens.to_vec(), rate, deadline, false)
        .await
        .unwrap_or_default();
    ticker.abort();
    b.finish();
    Latency::of(lat, errors, started.elapsed().as_secs_f64())
}

/// Reads at a fixed rate while ordinary authors (and the mega author) publish.
async fn mixed(
    o: &Options,
    l: &Layout,
    client: &reqwest::Client,
    base: &str,
    keys: &Tokens,
) -> (Latency, Latency) {
    let b = bar(o.seconds.ceil() as u64, "mixed: reads while publishing");
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(o.seconds);
    let readers: Vec<String> = l
        .spread
        .cohorts
        .iter()
        .flat_map(|c| c.clone())
        .take(1000)
        .map(|r| keys.user(UserId(r), 3600).unwrap_or_default())
        .collect();
    let authors: Vec<String> = std::iter::once(l.mega)
        .chain(l.ordinary.clone().step_by(97).take(50))
        .map(|a| keys.user(UserId(a), 3600).unwrap_or_default())
        .collect();
    let r = at_rate(
        client,
        base,
        readers,
        o.mixed_reads_per_sec,
        deadline,
        false,
    );
    let p = at_rate(
        client,
        base,
        authors,
        o.mixed_publishes_per_sec,
        deadline,
        true,
    );
    let ticker = tick(b.clone(), o.seconds);
    let (rl, re) = r.await.unwrap_or_default();
    let (pl, pe) = p.await.unwrap_or_default();
    ticker.abort();
    b.finish();
    let secs = started.elapsed().as_secs_f64();
    (Latency::of(rl, re, secs), Latency::of(pl, pe, secs))
}

/// The bytes an inbox entry costs Redis at the cap of `cap`, in the
/// service's own layout: 200 inboxes built by the store's FILL, as a read
/// builds them, measured by `MEMORY USAGE`; with the push and range-read
/// rates of that layout, through the store's own calls.
async fn memory(settings: &Settings, prefix: &str, cap: i64) -> R<Value> {
    let mut redis = settings.redis.clone();
    redis.key_prefix = format!("{prefix}mem:");
    redis.timeout_ms = 60_000;
    let store = FeedRedis::new(&redis).map_err(|e| e.chain())?;
    let chain = |e: feed_service::error::AppError| e.chain();
    let inboxes = 200i64;
    let keys: Vec<String> = (0..inboxes)
        .map(|i| store.inbox(UserId(FeedRedis::apart(i))))
        .collect();
    let b = bar(inboxes as u64, "memory: inboxes at the cap");
    for (k, key) in keys.iter().enumerate() {
        let entries: Vec<Entry> = (0..cap)
            .map(|e| {
                Entry::new(
                    1_764_500_000_000 + e * 1_000,
                    PostId(10_000_000 + k as i64 * 5_000 + e),
                )
            })
            .collect();
        store.build_inbox(key, cap, &entries).await.map_err(chain)?;
        b.inc(1);
    }
    b.finish();
    let mut conn = store.connection().await.map_err(chain)?;
    let mut bytes = 0i64;
    let mut held = 0i64;
    for key in &keys {
        let usage = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .arg("SAMPLES")
            .arg(0)
            .clone();
        let used: i64 = conn.query(&usage).await.map_err(err("Redis"))?;
        let len: i64 = conn
            .query(redis::cmd("LLEN").arg(key))
            .await
            .map_err(err("Redis"))?;
        bytes += used;
        held += len - 1;
    }
    if held != inboxes * cap {
        return Err(format!(
            "memory: the inboxes hold {held} entries, not {}",
            inboxes * cap
        ));
    }
    let encoding: String = conn
        .query(redis::cmd("OBJECT").arg("ENCODING").arg(&keys[0]))
        .await
        .map_err(err("Redis"))?;
    // Push cost: the fan-out's calls into full inboxes (a trim every
    // cap/32 pushes), a hundred inboxes per call as the fan-out sends them.
    let pushes = 20_000i64;
    let started = Instant::now();
    for n in 0..pushes / inboxes {
        let entry = Entry::new(1_764_600_000_000 + n, PostId(20_000_000 + n));
        store.push(&keys, &[entry], cap).await.map_err(chain)?;
    }
    let push_per_sec = pushes as f64 / started.elapsed().as_secs_f64();
    // Read cost: the engine's range read of a first page, 64 per pipeline.
    let reads = 20_000i64;
    let started = Instant::now();
    for chunk in 0..reads / 64 {
        let batch: Vec<String> = (0..64)
            .map(|j| keys[((chunk * 64 + j) % inboxes) as usize].clone())
            .collect();
        store.first_ranges(&batch, 21).await.map_err(chain)?;
    }
    let read_per_sec = (reads / 64 * 64) as f64 / started.elapsed().as_secs_f64();
    store.delete_all().await.map_err(chain)?;
    let bytes_per_entry = bytes as f64 / (inboxes as f64 * cap as f64);
    Ok(json!({
        "layout": FeedRedis::LAYOUT,
        "encoding": encoding,
        "entries_per_inbox": cap,
        "bytes_per_entry": bytes_per_entry,
        "bytes_per_entry_target": MEMORY_TARGET_BYTES,
        "target_met": bytes_per_entry <= MEMORY_TARGET_BYTES,
        "push_per_sec": push_per_sec,
        "range_read_per_sec": read_per_sec,
    }))
}

/// The memory target: at most this many bytes of Redis per inbox entry at
/// the cap.
const MEMORY_TARGET_BYTES: f64 = 12.0;
