//! Building and running the application: the HTTP server beside the
//! fan-out workers. Tests build the same application on port 0.

use std::net::TcpListener;
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{middleware, web, App, HttpServer};
use secrecy::ExposeSecret;
use tokio::sync::watch;

use crate::engine::Engine;
use crate::error::{AppError, AppResult};
use crate::http::{self, auth::JwtKeys, errors};
use crate::settings::Settings;
use crate::store::pg::PgStore;
use crate::store::redis::RedisStore;

pub struct Application {
    port: u16,
    server: Server,
    engine: Engine,
    shutdown_timeout: Duration,
}

impl Application {
    /// Connects the stores (creating and migrating the database), binds the
    /// listener and builds the server; nothing runs until [`Self::run`].
    pub async fn build(settings: &Settings) -> AppResult<Self> {
        if settings.uses_dev_secret() {
            tracing::warn!("auth.jwt_secret is the development default: set FEED_AUTH__JWT_SECRET outside development");
        }
        let pg = PgStore::connect(&settings.database).await?;
        let redis = RedisStore::new(&settings.redis)?;
        let engine = Engine::new(pg, redis, settings.feed.clone()).await?;
        let listener = TcpListener::bind((settings.server.host.as_str(), settings.server.port))
            .map_err(|e| {
                AppError::internal(
                    format!(
                        "server.host/server.port: cannot bind {}:{}",
                        settings.server.host, settings.server.port
                    ),
                    e,
                )
            })?;
        let port = listener
            .local_addr()
            .map_err(|e| AppError::internal("reading the bound address", e))?
            .port();
        let keys = web::Data::new(JwtKeys::new(
            settings.auth.jwt_secret.expose_secret().as_bytes(),
        )?);
        let data = web::Data::new(engine.clone());
        let mut server = HttpServer::new(move || {
            App::new()
                .wrap(middleware::from_fn(http::log_request))
                .app_data(keys.clone())
                .app_data(data.clone())
                .app_data(errors::json_config())
                .app_data(errors::query_config())
                .app_data(errors::path_config())
                .configure(http::routes)
                .default_service(web::to(errors::not_found))
        })
        .disable_signals()
        .shutdown_timeout(settings.server.shutdown_timeout_secs);
        if settings.server.workers > 0 {
            server = server.workers(settings.server.workers);
        }
        let server = server
            .listen(listener)
            .map_err(|e| AppError::internal("listening", e))?
            .run();
        tracing::info!(
            address = %format!("{}:{port}", settings.server.host),
            "feed service listening"
        );
        Ok(Application {
            port,
            server,
            engine,
            shutdown_timeout: Duration::from_secs(settings.server.shutdown_timeout_secs),
        })
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
        let engine = self.engine.clone();
        let background = tokio::spawn(async move { engine.run_background(stopped).await });
        let served = self.server.await;
        let _ = stop.send(true);
        if tokio::time::timeout(self.shutdown_timeout, background)
            .await
            .is_err()
        {
            tracing::warn!("background work did not stop in time");
        }
        served
    }

    /// Runs until SIGINT or SIGTERM, then shuts down gracefully.
    pub async fn run_until_signalled(self) -> std::io::Result<()> {
        let handle = self.handle();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down");
            handle.stop(true).await;
        });
        self.run().await
    }
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
