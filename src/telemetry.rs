//! Logging with `tracing`: human-readable text or JSON lines.

use tracing_subscriber::{fmt, EnvFilter};

use crate::settings::TelemetrySettings;

/// Installs the global subscriber; `RUST_LOG` overrides the configured level.
/// Safe to call more than once (later calls are ignored).
pub fn init(settings: &TelemetrySettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt().with_env_filter(filter).with_target(false);
    let _ = if settings.format == "json" {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
