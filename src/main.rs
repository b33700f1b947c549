//! `feed-service` runs the service; `feed-service token --user 42 [--admin]`
//! prints a bearer token signed with the configured secret (for curl);
//! `feed-service config check` prints the effective configuration, secrets
//! redacted, and fails on any setting out of its range.

use std::process::ExitCode;

use feed_service::http::auth::JwtKeys;
use feed_service::settings::Settings;
use feed_service::startup::Application;

/// The service allocates many small short-lived buffers per request.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage:
  feed-service [serve]                                  run the service
  feed-service token --user ID [--admin] [--ttl SECS]   print a bearer token
  feed-service config check                             print the effective configuration
                                                        (secrets redacted); exit 2 if invalid";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let settings = match Settings::load() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match args.first().map(String::as_str) {
        None | Some("serve") => serve(settings),
        Some("token") => token(&settings, &args[1..]),
        Some("config") if args.get(1).map(String::as_str) == Some("check") && args.len() == 2 => {
            match serde_json::to_string_pretty(&settings) {
                Ok(text) => {
                    println!("{text}");
                    eprintln!("configuration: valid");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("cannot print the configuration: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some("-h") | Some("--help") | Some("help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("unknown command {other:?}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn serve(settings: Settings) -> ExitCode {
    feed_service::telemetry::init(&settings.telemetry);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let app = match Application::build(&settings).await {
            Ok(app) => app,
            Err(e) => {
                tracing::error!(error = %e.chain(), "start-up failed");
                eprintln!("start-up failed: {}", e.chain());
                return ExitCode::FAILURE;
            }
        };
        match app.run_until_signalled().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "server failed");
                ExitCode::FAILURE
            }
        }
    })
}

fn token(settings: &Settings, args: &[String]) -> ExitCode {
    let mut user: Option<i64> = None;
    let mut admin = false;
    let mut ttl: u64 = 24 * 3600;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--user" => user = it.next().and_then(|v| v.parse().ok()),
            "--admin" => admin = true,
            "--ttl" => match it.next().and_then(|v| v.parse().ok()) {
                Some(t) => ttl = t,
                None => {
                    eprintln!("--ttl takes a number of seconds\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!("unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let user = match (user, admin) {
        (Some(u), _) if u >= 0 => u,
        (None, true) => 0,
        _ => {
            eprintln!("--user takes a user id\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let minted =
        JwtKeys::from_settings(&settings.auth).and_then(|keys| keys.mint(user, admin, ttl));
    match minted {
        Ok(t) => {
            println!("{t}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}", e.chain());
            ExitCode::FAILURE
        }
    }
}
