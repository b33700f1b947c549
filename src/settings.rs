//! Start-up configuration, layered with the `config` crate:
//! `config/default.toml`, then `config/{FEED_ENV}.toml`, then `FEED_…`
//! environment variables with `__` between section and field
//! (`FEED_SERVER__PORT=9090`, `FEED_REDIS__KEY_PREFIX=staging:`).
//!
//! These are the process's own settings. The admin-tunable feed values
//! (thresholds, caps) live in PostgreSQL: see [`crate::engine::policy::FeedSettings`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// The JWT secret shipped in `config/default.toml`: fine on a laptop,
/// refused when `auth.allow_dev_secret` is false (the production profile).
pub const DEV_JWT_SECRET: &str = "feed-service-development-secret";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub redis: RedisSettings,
    pub feed: EngineSettings,
    pub auth: AuthSettings,
    pub telemetry: TelemetrySettings,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to bind.
    pub host: String,
    /// Port to bind; 0 picks a free one (tests do).
    pub port: u16,
    /// HTTP worker threads; 0 means one per core.
    pub workers: usize,
    /// Seconds given to in-flight requests and fan-out batches on SIGTERM.
    pub shutdown_timeout_secs: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// PostgreSQL URL of the service's database.
    pub url: SecretString,
    /// Create the database named in `url` when it does not exist.
    pub create_if_missing: bool,
    /// Connections in the pool.
    pub pool_size: usize,
    /// How long a request waits for a pooled connection (ms).
    pub pool_timeout_ms: u64,
    /// `statement_timeout` set on every connection (ms).
    pub statement_timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSettings {
    /// Redis URL.
    pub url: SecretString,
    /// Prepended to every key; lets several deployments (or tests) share one Redis.
    pub key_prefix: String,
    /// Connections in the pool.
    pub pool_size: usize,
    /// Timeout for getting a connection and for each command (ms).
    pub timeout_ms: u64,
}

/// Tuning of the feed engine that is not admin-tunable at run time.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// Followers per keyset page in fan-out (one Redis pipeline per page).
    pub fanout_batch_size: i64,
    /// Concurrent fan-out workers in this process.
    pub fanout_workers: usize,
    /// A worker's lease on a job (s); another instance takes over after it.
    pub fanout_lease_secs: u64,
    /// Attempts before a job is parked as dead.
    pub fanout_max_attempts: i32,
    /// A reader is recorded as an active fan at most once per this many seconds.
    pub active_mark_interval_secs: u64,
    /// How often each instance reloads the admin settings (ms).
    pub settings_refresh_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// HS256 secret shared with the app servers that mint tokens.
    pub jwt_secret: SecretString,
    /// Whether the development secret is accepted (with a warning).
    pub allow_dev_secret: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    /// `tracing` filter, e.g. `info` or `feed_service=debug,info`; `RUST_LOG` wins.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("configuration: {0}")]
    Load(#[from] config::ConfigError),
    #[error("configuration: {setting}: {problem}")]
    Invalid {
        setting: &'static str,
        problem: String,
    },
}

fn invalid(setting: &'static str, problem: impl Into<String>) -> SettingsError {
    SettingsError::Invalid {
        setting,
        problem: problem.into(),
    }
}

impl Settings {
    /// Loads from `FEED_CONFIG_DIR` (default `./config`, else the crate's own
    /// `config/`), the `FEED_ENV` overlay and the process environment.
    pub fn load() -> Result<Self, SettingsError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        Self::load_from(&config_dir(&env), &env)
    }

    /// Loads with an explicit directory and environment (used by tests).
    pub fn load_from(dir: &Path, env: &HashMap<String, String>) -> Result<Self, SettingsError> {
        let mut builder = config::Config::builder()
            .add_source(config::File::from(dir.join("default.toml")).required(true));
        if let Some(profile) = env.get("FEED_ENV").filter(|p| !p.is_empty()) {
            if !profile
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(invalid(
                    "FEED_ENV",
                    format!("{profile:?} is not a profile name"),
                ));
            }
            let file = dir.join(format!("{profile}.toml"));
            if !file.exists() {
                return Err(invalid(
                    "FEED_ENV",
                    format!("no configuration file {}", file.display()),
                ));
            }
            builder = builder.add_source(config::File::from(file).required(true));
        }
        // FEED_ENV and FEED_CONFIG_DIR choose files; they are not settings.
        let overrides: HashMap<String, String> = env
            .iter()
            .filter(|(k, _)| k.starts_with("FEED_") && *k != "FEED_ENV" && *k != "FEED_CONFIG_DIR")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        builder = builder.add_source(
            config::Environment::with_prefix("FEED")
                .prefix_separator("_")
                .separator("__")
                .try_parsing(true)
                .source(Some(overrides)),
        );
        let settings: Settings = builder.build()?.try_deserialize()?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), SettingsError> {
        if self.server.host.trim().is_empty() {
            return Err(invalid("server.host", "must not be empty"));
        }
        if self.database.url.expose_secret().trim().is_empty() {
            return Err(invalid("database.url", "must not be empty"));
        }
        if !self.database.url.expose_secret().starts_with("postgres") {
            return Err(invalid("database.url", "must be a postgres:// URL"));
        }
        if self.database.pool_size == 0 {
            return Err(invalid("database.pool_size", "must be at least 1"));
        }
        if self.redis.pool_size == 0 {
            return Err(invalid("redis.pool_size", "must be at least 1"));
        }
        if !self.redis.url.expose_secret().starts_with("redis") {
            return Err(invalid("redis.url", "must be a redis:// URL"));
        }
        if self.redis.timeout_ms == 0 {
            return Err(invalid("redis.timeout_ms", "must be at least 1"));
        }
        if self.feed.fanout_batch_size < 1 {
            return Err(invalid("feed.fanout_batch_size", "must be at least 1"));
        }
        if self.feed.fanout_workers == 0 {
            return Err(invalid("feed.fanout_workers", "must be at least 1"));
        }
        if self.feed.fanout_max_attempts < 1 {
            return Err(invalid("feed.fanout_max_attempts", "must be at least 1"));
        }
        if self.feed.settings_refresh_ms == 0 || self.feed.settings_refresh_ms > 1000 {
            return Err(invalid(
                "feed.settings_refresh_ms",
                "must be between 1 and 1000 (admin changes are live within 1 s)",
            ));
        }
        let secret = self.auth.jwt_secret.expose_secret();
        if secret.len() < 16 {
            return Err(invalid("auth.jwt_secret", "must be at least 16 bytes"));
        }
        if secret == DEV_JWT_SECRET && !self.auth.allow_dev_secret {
            return Err(invalid(
                "auth.jwt_secret",
                "the development secret is refused in this profile: set FEED_AUTH__JWT_SECRET",
            ));
        }
        if !matches!(self.telemetry.format.as_str(), "text" | "json") {
            return Err(invalid("telemetry.format", "must be \"text\" or \"json\""));
        }
        Ok(())
    }

    /// Whether the development JWT secret is in use (start-up logs a warning).
    pub fn uses_dev_secret(&self) -> bool {
        self.auth.jwt_secret.expose_secret() == DEV_JWT_SECRET
    }
}

fn config_dir(env: &HashMap<String, String>) -> PathBuf {
    if let Some(dir) = env.get("FEED_CONFIG_DIR") {
        return PathBuf::from(dir);
    }
    let local = PathBuf::from("config");
    if local.join("default.toml").exists() {
        local
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config")
    }

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_load_and_use_the_dev_secret() {
        let s = Settings::load_from(&dir(), &env(&[])).unwrap();
        assert_eq!(s.server.host, "127.0.0.1");
        assert_eq!(s.server.port, 8080);
        assert!(s.uses_dev_secret());
    }

    #[test]
    fn environment_overrides_nested_settings() {
        let s = Settings::load_from(
            &dir(),
            &env(&[
                ("FEED_SERVER__HOST", "0.0.0.0"),
                ("FEED_SERVER__PORT", "9191"),
                ("FEED_DATABASE__URL", "postgres://x@h/db"),
                ("FEED_REDIS__URL", "redis://h:1/"),
                ("FEED_REDIS__KEY_PREFIX", "abc:"),
                ("FEED_AUTH__JWT_SECRET", "0123456789abcdef0123"),
            ]),
        )
        .unwrap();
        assert_eq!(s.server.host, "0.0.0.0");
        assert_eq!(s.server.port, 9191);
        assert_eq!(s.database.url.expose_secret(), "postgres://x@h/db");
        assert_eq!(s.redis.url.expose_secret(), "redis://h:1/");
        assert_eq!(s.redis.key_prefix, "abc:");
        assert!(!s.uses_dev_secret());
    }

    #[test]
    fn production_refuses_the_dev_secret_and_names_the_setting() {
        let err = Settings::load_from(&dir(), &env(&[("FEED_ENV", "production")])).unwrap_err();
        assert!(err.to_string().contains("auth.jwt_secret"), "{err}");
        let ok = Settings::load_from(
            &dir(),
            &env(&[
                ("FEED_ENV", "production"),
                ("FEED_AUTH__JWT_SECRET", "a-real-secret-of-some-length"),
            ]),
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn bad_values_name_the_setting() {
        let err =
            Settings::load_from(&dir(), &env(&[("FEED_SERVER__PORT", "eighty")])).unwrap_err();
        assert!(err.to_string().contains("port"), "{err}");
        let err = Settings::load_from(&dir(), &env(&[("FEED_SERVER__NOPE", "1")])).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let err =
            Settings::load_from(&dir(), &env(&[("FEED_REDIS__URL", "http://x")])).unwrap_err();
        assert!(err.to_string().contains("redis.url"), "{err}");
        let err = Settings::load_from(&dir(), &env(&[("FEED_ENV", "nowhere")])).unwrap_err();
        assert!(err.to_string().contains("FEED_ENV"), "{err}");
    }
}
