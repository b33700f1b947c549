//! Building and running the application: the HTTP server beside the
//! fan-out workers. Tests build the same application on port 0.

use std::net::TcpListener;
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{middleware, web, App, HttpServer};
use tokio::sync::watch;
use utoipa_actix_web::AppExt;

use crate::engine::Engine;
use crate::error::{AppError, AppResult};
use crate::http::health::MetricsToken;
use crate::http::limits::Limits;
use crate::http::{self, auth::JwtKeys, errors};
use crate::settings::Settings;
use crate::store::pg::PgStore;
use crate::store::redis::RedisStore;

pub struct Application {
    port: u16,
    metrics_port: Option<u16>,
    server: Server,
    metrics_server: Option<Server>,
    engine: Engine,
    streams: crate::engine::stream::Streams,
    limits: web::Data<Limits>,
    metrics_refresh: Duration,
    shutdown_timeout: Duration,
}

fn bind(host: &str, port: u16, setting: &str) -> AppResult<(TcpListener, u16)> {
    let listener = TcpListener::bind((host, port))
        .map_err(|e| AppError::internal(format!("{setting}: cannot bind {host}:{port}"), e))?;
    let port = listener
        .local_addr()
        .map_err(|e| AppError::internal("reading the bound address", e))?
        .port();
    Ok((listener, port))
}

impl Application {
    /// Connects the stores (creating and migrating the database), binds the
    /// listeners and builds the servers; nothing runs until [`Self::run`].
    pub async fn build(settings: &Settings) -> AppResult<Self> {
        if settings.uses_dev_secret() {
            tracing::warn!("auth.jwt_secret is the development default: set FEED_AUTH__JWT_SECRET outside development");
        }
        let pg = PgStore::connect(&settings.database).await?;
        let redis = RedisStore::new(&settings.redis)?;
        match redis.adopt_layout().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                keys = n,
                "deleted the feeds of an older Redis layout: they are rebuilt when read"
            ),
            Err(e) => {
                tracing::warn!(error = %e.chain(), "could not check Redis's feed layout at startup")
            }
        }
        let engine = Engine::new(pg, redis, settings.feed.clone()).await?;
        let host = settings.server.host.as_str();
        let (listener, port) = bind(host, settings.server.port, "server.host/server.port")?;
        let metrics_apart = settings.metrics.port != 0;
        let keys = web::Data::new(JwtKeys::from_settings(&settings.auth)?);
        let limits = web::Data::new(Limits::new(&settings.limits));
        let metrics_token =
            web::Data::new(MetricsToken(settings.metrics.token().map(str::to_string)));
        let api = http::openapi::document(!metrics_apart);
        let table = web::Data::new(http::openapi::route_table(&api));
        let data = web::Data::new(engine.clone());
        let streams = crate::engine::stream::Streams::new(engine.clone());
        let app_streams = web::Data::new(streams.clone());
        let sockets = web::Data::new(http::mastodon::streaming::Sockets::default());
        let origin = web::Data::new(http::mastodon::entities::PublicOrigin(
            crate::settings::public_origin(&settings.server.public_url),
        ));
        let workers = settings.server.workers;
        let app_limits = limits.clone();
        let app_token = metrics_token.clone();
        let deadline = web::Data::new(http::Deadline(Duration::from_secs(
            settings.server.request_timeout_secs,
        )));
        let mut server = HttpServer::new(move || {
            App::new()
                .into_utoipa_app()
                .app_data(keys.clone())
                .app_data(data.clone())
                .app_data(app_streams.clone())
                .app_data(sockets.clone())
                .app_data(origin.clone())
                .app_data(app_limits.clone())
                .app_data(app_token.clone())
                .app_data(table.clone())
                .app_data(errors::json_config())
                .app_data(errors::query_config())
                .app_data(errors::path_config())
                .configure(|cfg| http::routes(cfg, !metrics_apart))
                .into_app()
                .service(http::openapi::service(api.clone()))
                .configure(http::openapi::docs_alias)
                .default_service(web::to(errors::unmatched))
                .app_data(deadline.clone())
                .wrap(middleware::from_fn(http::deadline))
                .wrap(middleware::from_fn(http::limits::per_address))
                .wrap(middleware::from_fn(http::log_request))
        })
        .disable_signals()
        .on_connect(http::socket::remember)
        .client_request_timeout(Duration::from_millis(
            settings.server.request_head_timeout_ms,
        ))
        .keep_alive(Duration::from_secs(settings.server.keep_alive_secs))
        .max_connections(settings.server.max_connections)
        .shutdown_timeout(settings.server.shutdown_timeout_secs);
        if workers > 0 {
            server = server.workers(workers);
        }
        let server = server
            .listen(listener)
            .map_err(|e| AppError::internal("listening", e))?
            .run();
        tracing::info!(address = %format!("{host}:{port}"), "feed service listening");
        let (metrics_server, metrics_port) = if metrics_apart {
            let (listener, metrics_port) = bind(host, settings.metrics.port, "metrics.port")?;
            let server = HttpServer::new(move || {
                App::new()
                    .app_data(metrics_token.clone())
                    .service(crate::http::health::metrics)
                    .default_service(web::to(errors::unmatched))
            })
            .workers(1)
            .disable_signals()
            .listen(listener)
            .map_err(|e| AppError::internal("listening", e))?
            .run();
            tracing::info!(address = %format!("{host}:{metrics_port}"), "metrics listening");
            (Some(server), Some(metrics_port))
        } else {
            (None, None)
        };
        Ok(Application {
            port,
            metrics_port,
            server,
            metrics_server,
            engine,
            streams,
            limits,
            metrics_refresh: Duration::from_millis(settings.metrics.refresh_ms),
            shutdown_timeout: Duration::from_secs(settings.server.shutdown_timeout_secs),
        })
    }

    /// The port of the metrics listener, when it has one of its own.
    pub fn metrics_port(&self) -> Option<u16> {
        self.metrics_port
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Runs the server and the background work until the server stops
    /// (see [`Self::handle`]); then lets the workers finish their batch.
    pub async fn run(self) -> std::io::Result<()> {
        let (stop, stopped) = watch::channel(false);
        let background = spawn_background(self.engine.clone(), stopped)?;
        let engine = self.engine.clone();
        let every = self.metrics_refresh;
        let gauges =
            tokio::spawn(async move { engine.maintenance().maintain_forever(every).await });
        let engine = self.engine.clone();
        let heartbeat = tokio::spawn(async move { engine.maintenance().heartbeat_forever().await });
        let shrink = tokio::spawn(http::limits::shrink_forever(self.limits.clone()));
        let streams = self.streams.clone();
        let hints = tokio::spawn(async move { streams.listen_forever().await });
        let metrics_handle = self.metrics_server.as_ref().map(|s| s.handle());
        if let Some(metrics) = self.metrics_server {
            tokio::spawn(metrics);
        }
        let served = self.server.await;
        if let Some(h) = metrics_handle {
            h.stop(true).await;
        }
        gauges.abort();
        shrink.abort();
        hints.abort();
        let _ = stop.send(true);
        if tokio::time::timeout(self.shutdown_timeout, background)
            .await
            .is_err()
        {
            tracing::warn!("background work did not stop in time");
        }
        heartbeat.abort();
        served
    }

    /// Runs until SIGINT or SIGTERM, then shuts down gracefully.
    pub async fn run_until_signalled(self) -> std::io::Result<()> {
        let handle = self.handle();
        let streams = self.streams.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down");
            // Live streams end first: a client reconnects elsewhere.
            streams.close_all();
            handle.stop(true).await;
        });
        self.run().await
    }
}

/// Runs the engine's background work (fan-out workers, settings reloads) on
/// a thread and runtime of its own, at the configured niceness: when the
/// cores are busy, the request threads are scheduled first. The receiver
/// resolves when it has stopped.
fn spawn_background(
    engine: Engine,
    stopped: watch::Receiver<bool>,
) -> std::io::Result<tokio::sync::oneshot::Receiver<()>> {
    let (done, finished) = tokio::sync::oneshot::channel();
    let nice = engine.tuning().fanout_nice;
    std::thread::Builder::new()
        .name("fanout".into())
        .spawn(move || {
            lower_priority(nice);
            RedisStore::own_connections_on_this_thread();
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(engine.fanout().run_background(stopped)),
                Err(e) => tracing::error!(error = %e, "no runtime for the fan-out"),
            }
            let _ = done.send(());
        })?;
    Ok(finished)
}

/// Raises the calling thread's niceness (Linux schedules threads apart).
fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        // SAFETY: plain system calls on the calling thread, no memory shared.
        let failed = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, nice) != 0
        };
        if failed {
            tracing::warn!(nice, "could not lower the fan-out thread's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
