//! Bulk seeding, set-based (`INSERT … SELECT generate_series`), in chunks so
//! that progress shows. Ids are laid out so every scenario can name its
//! actors without a lookup:
//! readers `1..=U` (U = mega followers), the mega big-V `U+1`, the big-Vs
//! next, then the ordinary authors, then the two read graphs' authors (the
//! spread graph's 50 read big-Vs; the tied graph's 50 read big-Vs and its
//! own ordinary authors), then the read cohorts' readers.
//!
//! The read cohorts' readers are users of their own, outside `1..=U`: they
//! follow their graph's read big-Vs and 100 to 500 of its ordinary authors,
//! and nobody else (not the mega big-V, not the big-Vs), so a "10 big-V"
//! page merges exactly 10 outboxes and the inbox.
//!
//! Nobody is seeded big-V: every scenario reaches its big-Vs through the
//! service's own promotion (`PUT /api/v1/admin/settings`, see `big_v.rs`),
//! so each has a big-V epoch and is among the authors Redis pulls. Follower
//! counts are seeded in tiers that single thresholds separate:
//! ordinary authors (at most [`Layout::ordinary_followers_max`]) < read
//! big-Vs (exactly [`Layout::read_big_v_followers`]) < big-Vs
//! (`big_followers`) < the mega big-V (U).

use std::ops::RangeInclusive;

use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};
use indicatif::{ProgressBar, ProgressStyle};

use crate::Options;

/// Authors of a read graph that the first read cohort follows (the second
/// follows all [`READ_BIG_VS`]).
pub const COHORT_BIG_VS: [i64; 2] = [10, 50];
/// Read big-Vs of each read graph.
pub const READ_BIG_VS: i64 = 50;

/// The tie pattern of the tied graph: its authors, in id order, form groups
/// of these sizes (cycling), and every member of a group publishes at the
/// same millisecond, so 2 to 4 posts share each millisecond of a feed. The
/// prefixes of 10 and 50 authors are whole groups (4 + 2 + 4; two cycles of
/// 20, then 10): each cohort's big-Vs tie among themselves, never with a
/// big-V the cohort does not follow.
const TIE_GROUPS: [i64; 6] = [4, 2, 4, 3, 4, 3];
/// Authors in one cycle of [`TIE_GROUPS`].
const TIE_CYCLE: i64 = 20;
/// Milliseconds between an author's seeded posts: post `k` of every author
/// is in minute `k` before the seeding, at an offset within that minute.
const POST_SPACING_MS: i64 = 60_000;

/// One read graph: the authors two read cohorts follow, and the cohorts.
#[derive(Debug, Clone)]
pub struct ReadGraph {
    /// Whether its posts tie ([`TIE_GROUPS`]).
    pub tied: bool,
    /// Appended to the scenario's label: `""` (spread) or `", tied"`.
    pub suffix: &'static str,
    /// The read big-Vs (big-V in the read scenarios): the first 10 are the
    /// first cohort's.
    pub big_vs: RangeInclusive<i64>,
    /// Ordinary authors the cohorts' readers follow besides the big-Vs.
    pub pool: RangeInclusive<i64>,
    /// Readers following 10, and 50, of `big_vs`.
    pub cohorts: [RangeInclusive<i64>; 2],
}

impl ReadGraph {
    /// The first `n` read big-Vs.
    fn first_big_vs(&self, n: i64) -> RangeInclusive<i64> {
        *self.big_vs.start()..=self.big_vs.start() + n - 1
    }

    /// Every reader of both cohorts (contiguous ids).
    fn readers(&self) -> RangeInclusive<i64> {
        *self.cohorts[0].start()..=*self.cohorts[1].end()
    }
}

/// Where everyone is.
#[derive(Debug, Clone)]
pub struct Layout {
    pub readers: i64,
    pub mega: i64,
    pub bigs: RangeInclusive<i64>,
    /// The ordinary authors with followers among the readers `1..=U`: the
    /// publish and sustained scenarios' authors, and the spread graph's
    /// pool.
    pub ordinary: RangeInclusive<i64>,
    /// Posts at distinct milliseconds (but for chance collisions).
    pub spread: ReadGraph,
    /// Posts 2 to 4 to a millisecond ([`TIE_GROUPS`]).
    pub tied: ReadGraph,
    /// Followers of each big-V (`--big-followers`).
    pub big_followers: i64,
    /// The most followers an ordinary author can have: `--ordinary-max`
    /// among the readers, plus at most every reader of both read cohorts of
    /// its graph.
    pub ordinary_followers_max: i64,
    /// Followers of every read big-V, exactly: twice
    /// [`Layout::ordinary_followers_max`], so that a threshold between the
    /// two makes the read big-Vs big-V and leaves every ordinary author
    /// ordinary, with a margin that does not depend on the random choice of
    /// followers.
    pub read_big_v_followers: i64,
}

impl Layout {
    pub fn of(o: &Options) -> Self {
        let u = o.mega_followers;
        let mega = u + 1;
        let pool = o.ordinary_authors - READ_BIG_VS;
        let first_ordinary = mega + o.big_authors + 1;
        let ordinary = first_ordinary..=first_ordinary + pool - 1;
        let spread_big_vs = ordinary.end() + 1..=ordinary.end() + READ_BIG_VS;
        let tied_big_vs = spread_big_vs.end() + 1..=spread_big_vs.end() + READ_BIG_VS;
        let tied_pool = tied_big_vs.end() + 1..=tied_big_vs.end() + pool;
        let cohorts = |first: i64| {
            [
                first..=first + o.cohort - 1,
                first + o.cohort..=first + 2 * o.cohort - 1,
            ]
        };
        let spread_cohorts = cohorts(tied_pool.end() + 1);
        let tied_cohorts = cohorts(spread_cohorts[1].end() + 1);
        let ordinary_followers_max = o.ordinary_max + 2 * o.cohort;
        Layout {
            readers: u,
            mega,
            bigs: mega + 1..=mega + o.big_authors,
            spread: ReadGraph {
                tied: false,
                suffix: "",
                big_vs: spread_big_vs,
                pool: ordinary.clone(),
                cohorts: spread_cohorts,
            },
            tied: ReadGraph {
                tied: true,
                suffix: ", tied",
                big_vs: tied_big_vs,
                pool: tied_pool,
                cohorts: tied_cohorts,
            },
            ordinary,
            big_followers: o.big_followers,
            ordinary_followers_max,
            read_big_v_followers: 2 * ordinary_followers_max,
        }
    }

    /// Whether single thresholds can separate the tiers (each needs two
    /// follower counts between it and the next: one to demote below, one
    /// to promote at) and the read big-Vs' followers fit among the readers.
    pub fn check(&self, o: &Options) -> Result<(), String> {
        let r = self.read_big_v_followers;
        if self.big_followers < r + 2 {
            return Err(format!(
                "--big-followers ({}) must be at least {}: above the read big-Vs' {r} followers \
                 (twice the {} an ordinary author can have: --ordinary-max + 2 × --cohort)",
                self.big_followers,
                r + 2,
                self.ordinary_followers_max
            ));
        }
        if self.readers < self.big_followers + 2 {
            return Err("--mega-followers must exceed --big-followers by 2 at least".into());
        }
        if r - o.cohort > self.readers {
            return Err(format!(
                "the read big-Vs need {r} followers: more than --mega-followers"
            ));
        }
        Ok(())
    }

    pub fn last_user(&self) -> i64 {
        *self.tied.cohorts[1].end()
    }

    pub fn graphs(&self) -> [&ReadGraph; 2] {
        [&self.spread, &self.tied]
    }
}

/// Milliseconds since the Unix epoch: the clock of the service's scores.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>28} [{bar:40}] {pos}/{len} {elapsed_precise} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

async fn exec(conn: &mut AsyncPgConnection, sql: &str) -> Result<(), String> {
    conn.batch_execute(sql)
        .await
        .map_err(|e| format!("seeding: {e}\n{sql}"))
}

/// Multiplier of the pseudo-random follower choice: a prime above any
/// reader count we seed, so `(g * P + k) % U` is a bijection of `0..U`.
const P: i64 = 1_000_003;

/// What a seeded graph is: options that shape it, and the layout's version.
/// Written as the comment of the `follows` table once seeding is done, so a
/// later run reuses the graph only if it is complete and of this shape.
fn fingerprint(o: &Options) -> String {
    format!(
        "feed-load graph v2: mega {} big {}x{} ordinary {} ({}..={}) reader-ordinary {}..={} posts {} cohort {}",
        o.mega_followers,
        o.big_authors,
        o.big_followers,
        o.ordinary_authors,
        o.ordinary_min,
        o.ordinary_max,
        o.reader_ordinary_min,
        o.reader_ordinary_max,
        o.posts_per_author,
        o.cohort
    )
}

/// Seeds the graph unless the database already holds one of this shape.
pub async fn seed(conn: &mut AsyncPgConnection, o: &Options, l: &Layout) -> Result<bool, String> {
    let mark = fingerprint(o);
    if !o.reseed && seeded_as(conn).await? == mark {
        return Ok(false);
    }
    exec(
        conn,
        "COMMENT ON TABLE follows IS NULL; \
         TRUNCATE users, follows, posts, fanout_jobs RESTART IDENTITY CASCADE",
    )
    .await?;
    seed_users(conn, l).await?;
    seed_mega_and_bigs(conn, o, l).await?;
    seed_ordinary(conn, o, l).await?;
    let b = bar(2, "follows of the read graphs");
    for graph in l.graphs() {
        seed_read_graph(conn, o, l, graph).await?;
        b.inc(1);
    }
    b.finish();
    let b = bar(3, "counters, posts, statistics");
    exec(conn, "UPDATE users u SET follower_count = x.n FROM \
                (SELECT followee_id, count(*) AS n FROM follows GROUP BY followee_id) x WHERE u.id = x.followee_id").await?;
    exec(conn, "UPDATE users u SET following_count = x.n FROM \
                (SELECT follower_id, count(*) AS n FROM follows GROUP BY follower_id) x WHERE u.id = x.follower_id").await?;
    b.inc(1);
    seed_posts(conn, o, l).await?;
    b.inc(1);
    exec(conn, "ANALYZE users; ANALYZE follows; ANALYZE posts").await?;
    exec(
        conn,
        &format!("COMMENT ON TABLE follows IS '{}'", mark.replace('\'', "''")),
    )
    .await?;
    b.finish();
    Ok(true)
}

/// The fingerprint of the graph the database holds (`""` if none).
async fn seeded_as(conn: &mut AsyncPgConnection) -> Result<String, String> {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Comment {
        #[diesel(sql_type = diesel::sql_types::Text)]
        s: String,
    }
    let sql = "SELECT COALESCE(obj_description('follows'::regclass, 'pg_class'), '') AS s";
    let row: Comment = diesel::sql_query(sql)
        .get_result(conn)
        .await
        .map_err(|e| format!("{sql}: {e}"))?;
    Ok(row.s)
}

async fn seed_users(conn: &mut AsyncPgConnection, l: &Layout) -> Result<(), String> {
    let chunk = 100_000;
    let b = bar(l.last_user() as u64, "users");
    let mut from = 1;
    while from <= l.last_user() {
        let to = (from + chunk - 1).min(l.last_user());
        exec(conn, &format!("INSERT INTO users (id, username) SELECT g, 'u' || g FROM generate_series({from}::bigint, {to}::bigint) g")).await?;
        b.set_position(to as u64);
        from = to + 1;
    }
    b.finish();
    exec(
        conn,
        &format!("SELECT setval('users_id_seq', {})", l.last_user()),
    )
    .await
}

/// The mega big-V (every reader of `1..=U`) and the big-Vs (overlapping
/// pseudo-random sets of them).
async fn seed_mega_and_bigs(
    conn: &mut AsyncPgConnection,
    o: &Options,
    l: &Layout,
) -> Result<(), String> {
    let (u, chunk) = (l.readers, 100_000);
    let b = bar(u as u64, "follows of the mega big-V");
    let mut from = 1;
    while from <= u {
        let to = (from + chunk - 1).min(u);
        exec(conn, &format!("INSERT INTO follows (follower_id, followee_id) SELECT g, {} FROM generate_series({from}::bigint, {to}::bigint) g", l.mega)).await?;
        b.set_position(to as u64);
        from = to + 1;
    }
    b.finish();
    let b = bar(o.big_authors as u64, "follows of the big-Vs");
    for a in l.bigs.clone() {
        exec(conn, &format!(
            "INSERT INTO follows (follower_id, followee_id) \
             SELECT ((g * {P} + {a}::bigint * 7919) % {u}) + 1, {a} FROM generate_series(0::bigint, {}::bigint) g",
            o.big_followers - 1
        )).await?;
        b.inc(1);
    }
    b.finish();
    Ok(())
}

/// Ordinary authors: between ordinary_min and ordinary_max followers each,
/// among the readers `1..=U`.
async fn seed_ordinary(
    conn: &mut AsyncPgConnection,
    o: &Options,
    l: &Layout,
) -> Result<(), String> {
    let u = l.readers;
    let span = o.ordinary_max - o.ordinary_min + 1;
    let b = bar(o.ordinary_authors as u64, "follows of ordinary authors");
    let step = 250;
    let mut from = *l.ordinary.start();
    while from <= *l.ordinary.end() {
        let to = (from + step - 1).min(*l.ordinary.end());
        exec(conn, &format!(
            "INSERT INTO follows (follower_id, followee_id) \
             SELECT ((g * {P} + a * 15485863) % {u}) + 1, a FROM generate_series({from}::bigint, {to}::bigint) a, \
             LATERAL generate_series(0::bigint, {min} + ((a * 2654435761) % {span}) - 1) g",
            min = o.ordinary_min
        )).await?;
        b.set_position((to - l.ordinary.start() + 1) as u64);
        from = to + 1;
    }
    b.finish();
    Ok(())
}

/// A read graph's follows: each cohort follows its read big-Vs; each read
/// big-V gets readers of `1..=U` besides, up to exactly
/// [`Layout::read_big_v_followers`]; each cohort reader follows
/// `--reader-ordinary-min..=max` authors of the graph's pool (so its inbox
/// is at the cap: a page merges a full inbox with the big-V outboxes), in
/// whole tie groups on the tied graph.
async fn seed_read_graph(
    conn: &mut AsyncPgConnection,
    o: &Options,
    l: &Layout,
    g: &ReadGraph,
) -> Result<(), String> {
    for (readers, n) in g.cohorts.iter().zip(COHORT_BIG_VS) {
        let authors = g.first_big_vs(n);
        exec(conn, &format!(
            "INSERT INTO follows (follower_id, followee_id) \
             SELECT r, a FROM generate_series({}::bigint, {}::bigint) r, generate_series({}::bigint, {}::bigint) a",
            readers.start(), readers.end(), authors.start(), authors.end()
        )).await?;
    }
    // The cohort readers (outside 1..=U) do not collide with these.
    let (first10, last10) = g.first_big_vs(COHORT_BIG_VS[0]).into_inner();
    exec(conn, &format!(
        "INSERT INTO follows (follower_id, followee_id) \
         SELECT ((k * {P} + a * 7919) % {u}) + 1, a FROM generate_series({first}::bigint, {last}::bigint) a, \
         LATERAL generate_series(0::bigint, {r} - (CASE WHEN a BETWEEN {first10} AND {last10} THEN {both} ELSE {one} END) - 1) k \
         ON CONFLICT DO NOTHING",
        u = l.readers,
        first = g.big_vs.start(),
        last = g.big_vs.end(),
        r = l.read_big_v_followers,
        both = 2 * o.cohort,
        one = o.cohort,
    )).await?;
    let pool = g.pool.end() - g.pool.start() + 1;
    if pool <= 0 {
        return Ok(());
    }
    let (readers, min) = (g.readers(), o.reader_ordinary_min);
    let span = o.reader_ordinary_max - o.reader_ordinary_min + 1;
    // How many authors reader r follows, and its k-th pick out of `n`.
    let count = format!("({min} + ((r * 2654435761) % {span}))");
    let pick = |n: &str| format!("((r * 7919 + k * 104729) % {n})");
    let sql = if !g.tied {
        format!(
            "SELECT r, {first} + {pick} FROM generate_series({from}::bigint, {to}::bigint) r, \
             LATERAL generate_series(0::bigint, LEAST({pool}, {count}) - 1) k",
            first = g.pool.start(),
            pick = pick(&pool.to_string()),
            from = readers.start(),
            to = readers.end(),
        )
    } else {
        // Whole groups only: about as many authors as the spread graph's.
        let groups = whole_tie_groups(pool);
        if groups == 0 {
            return Ok(());
        }
        let avg = TIE_CYCLE as f64 / TIE_GROUPS.len() as f64;
        format!(
            "SELECT r, {first} + {start} + m FROM generate_series({from}::bigint, {to}::bigint) r, \
             LATERAL (SELECT {pick} AS g FROM generate_series(0::bigint, \
                 GREATEST(1, LEAST({groups}, ({count} / {avg})::bigint)) - 1) k) gs, \
             LATERAL generate_series(0::bigint, {size} - 1) m",
            first = g.pool.start(),
            start = tie_group_start("gs.g"),
            size = tie_group_size("gs.g"),
            pick = pick(&groups.to_string()),
            from = readers.start(),
            to = readers.end(),
        )
    };
    exec(
        conn,
        &format!("INSERT INTO follows (follower_id, followee_id) {sql} ON CONFLICT DO NOTHING"),
    )
    .await
}

/// `ARRAY[…]` of SQL, 1-based.
fn sql_array(values: impl IntoIterator<Item = i64>) -> String {
    let v: Vec<String> = values.into_iter().map(|x| x.to_string()).collect();
    format!("(ARRAY[{}]::bigint[])", v.join(","))
}

/// First author index of each group of a cycle of [`TIE_GROUPS`].
fn tie_starts() -> Vec<i64> {
    TIE_GROUPS
        .iter()
        .scan(0, |at, size| {
            let start = *at;
            *at += size;
            Some(start)
        })
        .collect()
}

/// SQL: the index (within its set) of tie group `g`'s first author.
fn tie_group_start(g: &str) -> String {
    let n = TIE_GROUPS.len();
    format!(
        "({TIE_CYCLE} * ({g} / {n}) + {}[{g} % {n} + 1])",
        sql_array(tie_starts())
    )
}

/// SQL: the size of tie group `g`.
fn tie_group_size(g: &str) -> String {
    let n = TIE_GROUPS.len();
    format!("{}[{g} % {n} + 1]", sql_array(TIE_GROUPS))
}

/// SQL: the tie group of the author at index `i` (within its set).
fn tie_group_of(i: &str) -> String {
    let ends: Vec<String> = tie_starts()[1..]
        .iter()
        .map(|s| format!(" + ({i} % {TIE_CYCLE} >= {s})::int"))
        .collect();
    format!(
        "({n} * ({i} / {TIE_CYCLE}){})",
        ends.concat(),
        n = TIE_GROUPS.len()
    )
}

/// Tie groups wholly inside the first `n` authors of a set.
fn whole_tie_groups(n: i64) -> i64 {
    let in_cycle = tie_starts()
        .iter()
        .zip(TIE_GROUPS)
        .filter(|(start, size)| *start + size <= n % TIE_CYCLE)
        .count() as i64;
    n / TIE_CYCLE * TIE_GROUPS.len() as i64 + in_cycle
}

/// Posts, `--posts-per-author` per author, post `k` in minute `k` before
/// now. Spread: an author's offset in the minute is its id modulo 997
/// (distinct for neighbouring ids). Tied: a tie group's members share their
/// offset, the read big-Vs' groups at even milliseconds and the pool's at
/// odd ones, so no two groups share one (while the pool has fewer than
/// 90,000 authors).
async fn seed_posts(conn: &mut AsyncPgConnection, o: &Options, l: &Layout) -> Result<(), String> {
    let now = now_ms();
    let insert = |from: i64, to: i64, offset: &str| {
        format!(
            "INSERT INTO posts (author_id, body, created_at_ms) \
             SELECT a, 'seeded post ' || k, {now} - k * {POST_SPACING_MS} - {offset} \
             FROM generate_series({from}::bigint, {to}::bigint) a, generate_series(1::bigint, {}::bigint) k",
            o.posts_per_author
        )
    };
    exec(conn, &insert(l.mega, *l.spread.big_vs.end(), "(a % 997)")).await?;
    let t = &l.tied;
    let big_v = tie_group_of(&format!("(a - {})", t.big_vs.start()));
    exec(
        conn,
        &insert(*t.big_vs.start(), *t.big_vs.end(), &format!("2 * {big_v}")),
    )
    .await?;
    let pool = tie_group_of(&format!("(a - {})", t.pool.start()));
    exec(
        conn,
        &insert(*t.pool.start(), *t.pool.end(), &format!("(2 * {pool} + 1)")),
    )
    .await
}

/// How the posts of one reader's home feed share milliseconds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ties {
    pub reader: i64,
    pub posts: i64,
    pub milliseconds: i64,
    /// Fewest and most posts sharing one millisecond.
    pub min_per_ms: i64,
    pub max_per_ms: i64,
}

/// The [`Ties`] of `reader`'s whole feed, from PostgreSQL.
pub async fn ties(conn: &mut AsyncPgConnection, reader: i64) -> Result<Ties, String> {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        posts: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        ms: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        lo: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        hi: i64,
    }
    let sql = format!(
        "SELECT COALESCE(sum(n), 0)::bigint AS posts, count(*) AS ms, \
                COALESCE(min(n), 0) AS lo, COALESCE(max(n), 0) AS hi \
         FROM (SELECT count(*) AS n FROM follows f JOIN posts p ON p.author_id = f.followee_id \
               WHERE f.follower_id = {reader} GROUP BY p.created_at_ms) t"
    );
    let row: Row = diesel::sql_query(&sql)
        .get_result(conn)
        .await
        .map_err(|e| format!("{sql}: {e}"))?;
    Ok(Ties {
        reader,
        posts: row.posts,
        milliseconds: row.ms,
        min_per_ms: row.lo,
        max_per_ms: row.hi,
    })
}

#[derive(diesel::QueryableByName)]
struct N {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// The ordinary author with the most followers (`most`), or the fewest
/// (ties to the lowest id).
pub async fn ordinary_author(
    conn: &mut AsyncPgConnection,
    l: &Layout,
    most: bool,
) -> Result<i64, String> {
    let (first, last) = (*l.ordinary.start(), *l.ordinary.end());
    let order = if most { "DESC" } else { "ASC" };
    count(
        conn,
        &format!(
            "SELECT id AS n FROM users WHERE id BETWEEN {first} AND {last} \
             ORDER BY follower_count {order}, id LIMIT 1"
        ),
    )
    .await
}

pub async fn count(conn: &mut AsyncPgConnection, sql: &str) -> Result<i64, String> {
    use diesel_async::RunQueryDsl;
    let row: N = diesel::sql_query(sql)
        .get_result(conn)
        .await
        .map_err(|e| format!("{sql}: {e}"))?;
    Ok(row.n)
}

/// The `n` column of every row of `sql`.
pub async fn ids(conn: &mut AsyncPgConnection, sql: &str) -> Result<Vec<i64>, String> {
    use diesel_async::RunQueryDsl;
    let rows: Vec<N> = diesel::sql_query(sql)
        .load(conn)
        .await
        .map_err(|e| format!("{sql}: {e}"))?;
    Ok(rows.into_iter().map(|r| r.n).collect())
}
