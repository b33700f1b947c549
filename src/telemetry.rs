//! Logging with `tracing`: human-readable text or JSON lines.

use tracing_subscriber::{fmt, EnvFilter};

use crate::settings::TelemetrySettings;

/// actix's per-connection protocol errors (a malformed request, a client
/// that hangs up mid-request) are logged by actix at ERROR, but they are the
/// client's doing: a client must not be able to fill the error log or page
/// an operator. They stay off unless a filter names `actix_http`.
const CLIENT_NOISE: &str = "actix_http::h1::dispatcher=off";

/// The filter: `RUST_LOG` if set, else the configured level; with actix's
/// client-caused errors off unless the filter speaks of `actix_http`.
fn filter(level: &str) -> EnvFilter {
    let chosen = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| level.to_string());
    let directives = if chosen.contains("actix_http") {
        chosen
    } else {
        format!("{chosen},{CLIENT_NOISE}")
    };
    EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| EnvFilter::new(format!("info,{CLIENT_NOISE}")))
}

/// Installs the global subscriber; `RUST_LOG` overrides the configured level.
/// Safe to call more than once (later calls are ignored).
pub fn init(settings: &TelemetrySettings) {
    let filter = filter(&settings.level);
    let builder = fmt().with_env_filter(filter).with_target(false);
    let _ = if settings.format == "json" {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
