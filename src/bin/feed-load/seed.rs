//! Bulk seeding, set-based (`INSERT … SELECT generate_series`), in chunks so
//! that progress shows. Ids are laid out so every scenario can name its
//! actors without a lookup:
//! readers `1..=U` (U = mega followers), the mega big-V `U+1`, the big-Vs
//! next, then the ordinary authors; the last 50 ordinary authors form the
//! read cohorts' big-V set. The read cohorts' readers also follow 100 to 500
//! of the other ordinary authors.

use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};
use indicatif::{ProgressBar, ProgressStyle};

use crate::Options;

/// Where everyone is.
#[derive(Debug, Clone)]
pub struct Layout {
    pub readers: i64,
    pub mega: i64,
    pub bigs: std::ops::RangeInclusive<i64>,
    pub ordinary: std::ops::RangeInclusive<i64>,
    /// 50 ordinary authors that the read cohorts follow (and that are made
    /// big-V for the read scenarios); the first 10 are cohort 10's.
    pub cohort_authors: Vec<i64>,
    /// Readers following 10, and 50, of `cohort_authors`.
    pub cohort10: std::ops::RangeInclusive<i64>,
    pub cohort50: std::ops::RangeInclusive<i64>,
}

impl Layout {
    pub fn of(o: &Options) -> Self {
        let u = o.mega_followers;
        let mega = u + 1;
        let first_ordinary = mega + o.big_authors + 1;
        let last = first_ordinary + o.ordinary_authors - 1;
        Layout {
            readers: u,
            mega,
            bigs: mega + 1..=mega + o.big_authors,
            ordinary: first_ordinary..=last,
            cohort_authors: (last - 49..=last).collect(),
            cohort10: 1..=o.cohort,
            cohort50: o.cohort + 1..=2 * o.cohort,
        }
    }

    pub fn last_user(&self) -> i64 {
        *self.ordinary.end()
    }
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

/// Seeds the graph unless the database already holds one of this shape.
pub async fn seed(conn: &mut AsyncPgConnection, o: &Options, l: &Layout) -> Result<bool, String> {
    // Posts are seeded last: their count tells a complete seed of this shape
    // (scenarios add a few posts of their own).
    let users: i64 = count(conn, "SELECT count(*) AS n FROM users").await?;
    let posts: i64 = count(conn, "SELECT count(*) AS n FROM posts").await?;
    let authors = l.last_user() - l.mega + 1;
    if users == l.last_user() && posts >= authors * o.posts_per_author && !o.reseed {
        return Ok(false);
    }
    exec(
        conn,
        "TRUNCATE users, follows, posts, fanout_jobs RESTART IDENTITY CASCADE",
    )
    .await?;
    let u = l.readers;
    // Users.
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
    .await?;
    // The mega big-V: every reader.
    let b = bar(u as u64, "follows of the mega big-V");
    let mut from = 1;
    while from <= u {
        let to = (from + chunk - 1).min(u);
        exec(conn, &format!("INSERT INTO follows (follower_id, followee_id) SELECT g, {} FROM generate_series({from}::bigint, {to}::bigint) g", l.mega)).await?;
        b.set_position(to as u64);
        from = to + 1;
    }
    b.finish();
    // Big-Vs: overlapping pseudo-random sets.
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
    // Ordinary authors: between ordinary_min and ordinary_max followers each.
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
    // Read cohorts: 10 and 50 of the cohort authors.
    let b = bar(2, "follows of the read cohorts");
    let ten: Vec<String> = l.cohort_authors[..10]
        .iter()
        .map(|a| a.to_string())
        .collect();
    let fifty: Vec<String> = l.cohort_authors.iter().map(|a| a.to_string()).collect();
    for (readers, authors) in [(&l.cohort10, ten), (&l.cohort50, fifty)] {
        exec(conn, &format!(
            "INSERT INTO follows (follower_id, followee_id) \
             SELECT r, a FROM generate_series({}::bigint, {}::bigint) r, unnest(ARRAY[{}]::bigint[]) a \
             ON CONFLICT DO NOTHING",
            readers.start(), readers.end(), authors.join(",")
        )).await?;
        b.inc(1);
    }
    b.finish();
    // Readers of the read cohorts also follow reader_ordinary_min..=max
    // ordinary authors (not the cohort authors), so their inboxes are at the
    // cap: a page merges a full inbox with the big-V outboxes.
    let pool = o.ordinary_authors - 50;
    if pool > 0 {
        let b = bar(1, "follows of readers' ordinary authors");
        let span = o.reader_ordinary_max - o.reader_ordinary_min + 1;
        exec(conn, &format!(
            "INSERT INTO follows (follower_id, followee_id) \
             SELECT r, {first} + ((r * 7919 + k * 104729) % {pool}) \
             FROM generate_series(1::bigint, {last}::bigint) r, \
             LATERAL generate_series(0::bigint, LEAST({pool}, {min} + ((r * 2654435761) % {span})) - 1) k \
             ON CONFLICT DO NOTHING",
            first = l.ordinary.start(),
            last = l.cohort50.end(),
            min = o.reader_ordinary_min,
        )).await?;
        b.inc(1);
        b.finish();
    }
    let b = bar(3, "counters, posts, statistics");
    exec(conn, "UPDATE users u SET follower_count = x.n FROM \
                (SELECT followee_id, count(*) AS n FROM follows GROUP BY followee_id) x WHERE u.id = x.followee_id").await?;
    exec(conn, "UPDATE users u SET following_count = x.n FROM \
                (SELECT follower_id, count(*) AS n FROM follows GROUP BY follower_id) x WHERE u.id = x.follower_id").await?;
    exec(conn, "UPDATE users SET big_v = (follower_count >= 10000)").await?;
    b.inc(1);
    let now = feed_service::engine::now_ms();
    exec(
        conn,
        &format!(
            "INSERT INTO posts (author_id, body, created_at_ms) \
         SELECT a, 'seeded post ' || k, {now} - k * 60000 - (a % 997) \
         FROM generate_series({}::bigint, {}::bigint) a, generate_series(1::bigint, {}::bigint) k",
            l.mega,
            l.last_user(),
            o.posts_per_author
        ),
    )
    .await?;
    b.inc(1);
    exec(conn, "ANALYZE users; ANALYZE follows; ANALYZE posts").await?;
    b.finish();
    Ok(true)
}

#[derive(diesel::QueryableByName)]
struct N {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

pub async fn count(conn: &mut AsyncPgConnection, sql: &str) -> Result<i64, String> {
    use diesel_async::RunQueryDsl;
    let row: N = diesel::sql_query(sql)
        .get_result(conn)
        .await
        .map_err(|e| format!("{sql}: {e}"))?;
    Ok(row.n)
}
