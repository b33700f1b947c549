//! PostgreSQL unreachable (a proxy in front of it that the test cuts):
//! warm pages are still served from Redis; cold pages and writes wait for
//! PostgreSQL (503), and everything works again once it is back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::helpers::{error_code, ids, spawn_app_with, test_settings};

/// A TCP proxy to PostgreSQL that can be cut: cutting drops every open
/// connection and refuses new ones.
pub struct PgProxy {
    pub port: u16,
    up: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
}

impl PgProxy {
    /// Starts the proxy on a thread and runtime of its own, so that it keeps
    /// serving while the test's runtime is blocked (the app's clean-up drops
    /// its database through it).
    pub async fn start() -> Self {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let port = std_listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let (cut, cuts) = watch::channel(0u64);
        let accepting = up.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = TcpListener::from_std(std_listener).unwrap();
                loop {
                    let Ok((mut client, _)) = listener.accept().await else {
                        return;
                    };
                    if !accepting.load(Ordering::SeqCst) {
                        continue; // dropped: refused
                    }
                    let mut cuts = cuts.clone();
                    // Only cuts after this connection end it.
                    cuts.borrow_and_update();
                    tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(("127.0.0.1", 5432)).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = cuts.changed() => {}
                        }
                    });
                }
            });
        });
        PgProxy { port, up, cut }
    }

    pub fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn with_postgresql_down_warm_pages_are_served_and_writes_wait() {
    let proxy = PgProxy::start().await;
    let mut settings = test_settings();
    let direct = settings.database.url.expose_secret().to_string();
    settings.database.url =
        SecretString::from(direct.replace(":5432/", &format!(":{}/", proxy.port)));
    settings.database.pool_timeout_ms = 500;
    let app = spawn_app_with(settings).await;
    app.set_settings(serde_json::json!({"big_v_threshold": 2, "big_v_demote_threshold": 1}))
        .await;
    let plain = app.create_user("plain").await;
    let star = app.create_user("star").await;
    let reader = app.create_user("reader").await;
    let cold = app.create_user("cold").await;
    let fan = app.create_user("fan").await;
    for who in [&reader, &cold] {
        app.follow(who, &plain).await;
        app.follow(who, &star).await;
    }
    app.follow(&fan, &star).await; // star is big-V: pulled
    let mut posts = Vec::new();
    for i in 0..12 {
        let author = if i % 2 == 0 { &plain } else { &star };
        posts.push(app.publish(author, &format!("p{i}")).await);
    }
    app.settle().await;
    // Warm the reader's pages (the first read caches what it needs).
    let feed = app.scroll("/api/v1/feed", &reader.token, 5).await;
    assert_eq!(feed.len(), 12);
    let own = app
        .scroll(
            &format!("/api/v1/users/{}/posts", star.id),
            &reader.token,
            4,
        )
        .await;
    assert_eq!(own.len(), 6);

    proxy.down();
    // Warm pages, first and next, come from Redis alone.
    assert_eq!(app.scroll("/api/v1/feed", &reader.token, 5).await, feed);
    assert_eq!(
        app.scroll(
            &format!("/api/v1/users/{}/posts", star.id),
            &reader.token,
            4
        )
        .await,
        own
    );
    // A cold reader and any write wait for PostgreSQL.
    let res = app
        .request(Method::GET, "/api/v1/feed", Some(&cold.token), None)
        .await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable".into())
    );
    let res = app
        .request(
            Method::POST,
            "/api/v1/posts",
            Some(&plain.token),
            Some(serde_json::json!({"body": "while down"})),
        )
        .await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    let res = app.request(Method::GET, "/readyz", None, None).await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);

    proxy.restore();
    let fresh = app.publish(&plain, "back").await;
    let seen = app.home(&cold, 7).await;
    assert_eq!(seen.len(), 13);
    assert_eq!(seen[0], fresh.id);
    assert_eq!(
        ids(&feed),
        ids(&app.scroll("/api/v1/feed", &reader.token, 5).await)[1..]
    );
}

#[tokio::test]
async fn a_statement_timeout_answers_503_not_500() {
    use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
    let mut settings = test_settings();
    settings.database.statement_timeout_ms = 300;
    let app = spawn_app_with(settings).await;
    let alice = app.create_user("alice").await;
    // Another client holds the users table: reading a user waits past the
    // statement timeout.
    let mut holder = AsyncPgConnection::establish(app.database_url())
        .await
        .unwrap();
    holder
        .batch_execute("BEGIN; LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/users/{}", alice.id),
            Some(&alice.token),
            None,
        )
        .await;
    let (status, code) = error_code(res).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    let res = app
        .request(
            Method::GET,
            &format!("/api/v1/users/{}", alice.id),
            Some(&alice.token),
            None,
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_connection_opened_for_another_runtime_outlives_it() {
    use feed_service::store::pg::PgStore;
    let mut settings = test_settings();
    settings.database.pool_size = 1;
    let _cleanup = crate::helpers::Cleanup::of(&settings);
    // The pool is opened here, as the service opens it on its request runtime.
    let pg = PgStore::connect(&settings.database).await.unwrap();
    // The fan-out's runtime is the first to need a connection, then stops.
    let other = pg.clone();
    let opened_by_other = tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let pid = rt.block_on(other.backend_pid()).unwrap();
        drop(rt);
        pid
    })
    .await
    .unwrap();
    // The same connection still serves this runtime: its driver never ran
    // on the other one.
    assert_eq!(pg.backend_pid().await.unwrap(), opened_by_other);
}
