//! The service's command line: `serve` (the default) runs it, `token`
//! prints a bearer token, `config check` prints the effective
//! configuration, `migrate` brings the database's schema up to date and
//! `completions` prints a shell's completion script. Every option stands
//! for the `FEED_…` variable it names and beats it and the files (see
//! [`feed_service::settings`]).

use feed_service::types::UserId;
use std::collections::HashMap;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use clap_complete::Shell;
use feed_service::http::auth::JwtKeys;
use feed_service::settings::Settings;
use feed_service::startup::Application;
use secrecy::ExposeSecret;

/// The service allocates many small short-lived buffers per request.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Push/pull hybrid follow feed over REST: PostgreSQL of record, Redis as a
/// cache rebuilt from it.
///
/// Settings come from config/default.toml, then the overlay the profile
/// names, then FEED_SECTION__FIELD variables, then these options.
#[derive(Parser)]
#[command(name = "feed-service", version, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

/// The defaults, as `config/default.toml` declares them (built in).
const DEFAULTS: &str = include_str!("../config/default.toml");

/// `about`, then the default of the setting `key` as `config/default.toml`
/// declares it (`none` if it is empty or absent).
fn with_default(about: &str, key: &str) -> String {
    let defaults = config::Config::builder()
        .add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml))
        .build();
    let value = defaults
        .ok()
        .and_then(|d| d.get_string(key).ok())
        .filter(|v| !v.is_empty());
    format!("{about} [default: {}]", value.as_deref().unwrap_or("none"))
}

/// Where the settings come from, and the ones an operator sets most.
#[derive(Args)]
#[command(next_help_heading = "Settings (each beats its variable and the files)")]
struct ConfigArgs {
    /// Directory of default.toml and its overlays [default: ./config, else the build's own config/]
    #[arg(long, global = true, env = "FEED_CONFIG_DIR", value_name = "DIR")]
    config_dir: Option<String>,
    /// Overlay config/NAME.toml on the defaults (production: JSON logs, a real secret) [default: none]
    #[arg(long, global = true, env = "FEED_ENV", value_name = "NAME")]
    profile: Option<String>,
    #[arg(long, global = true, env = "FEED_SERVER__HOST", value_name = "ADDR",
          help = with_default("Address to listen on", "server.host"))]
    host: Option<String>,
    #[arg(long, global = true, env = "FEED_SERVER__PORT", value_name = "PORT",
          help = with_default("Port to listen on (0: any free one)", "server.port"))]
    port: Option<u16>,
    #[arg(
        long,
        global = true,
        env = "FEED_DATABASE__URL",
        hide_env_values = true,
        value_name = "URL",
        help = with_default("PostgreSQL, the records of truth", "database.url")
    )]
    database_url: Option<String>,
    #[arg(
        long,
        global = true,
        env = "FEED_REDIS__URL",
        hide_env_values = true,
        value_name = "URL",
        help = with_default("Redis, a single node", "redis.url")
    )]
    redis_url: Option<String>,
    #[arg(
        long,
        global = true,
        env = "FEED_REDIS__CLUSTER_URLS",
        hide_env_values = true,
        value_name = "URLS",
        help = with_default("A Redis Cluster instead: its seed nodes, comma-separated", "redis.cluster_urls")
    )]
    redis_cluster_urls: Option<String>,
    #[arg(
        long,
        global = true,
        env = "FEED_TELEMETRY__LEVEL",
        value_name = "LEVEL",
        help = with_default("Log filter: error, warn, info, debug, trace or a tracing directive", "telemetry.level")
    )]
    log_level: Option<String>,
    #[arg(
        long,
        global = true,
        env = "FEED_TELEMETRY__FORMAT",
        value_name = "FORMAT",
        help = with_default("Log lines as text or json", "telemetry.format")
    )]
    log_format: Option<String>,
}

impl ConfigArgs {
    /// The options given, as the variables they stand for.
    fn overrides(&self) -> HashMap<String, String> {
        [
            ("FEED_CONFIG_DIR", self.config_dir.clone()),
            ("FEED_ENV", self.profile.clone()),
            ("FEED_SERVER__HOST", self.host.clone()),
            ("FEED_SERVER__PORT", self.port.map(|p| p.to_string())),
            ("FEED_DATABASE__URL", self.database_url.clone()),
            ("FEED_REDIS__URL", self.redis_url.clone()),
            ("FEED_REDIS__CLUSTER_URLS", self.redis_cluster_urls.clone()),
            ("FEED_TELEMETRY__LEVEL", self.log_level.clone()),
            ("FEED_TELEMETRY__FORMAT", self.log_format.clone()),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_string(), value?)))
        .collect()
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the service (the default)
    Serve,
    /// Print a bearer token signed with the configured secret
    Token(TokenArgs),
    /// The configuration
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Create the database if it is missing (database.create_if_missing) and run the migrations, then exit
    Migrate,
    /// Print the completion script of a shell
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
}

#[derive(Args)]
struct TokenArgs {
    /// The user the token acts as (its sub) [default: 0 with --admin]
    #[arg(long, value_name = "ID", required_unless_present = "admin",
          value_parser = clap::value_parser!(i64).range(0..))]
    user: Option<i64>,
    /// An admin token (role admin): every route, for any user
    #[arg(long)]
    admin: bool,
    /// Seconds until it expires
    #[arg(long, value_name = "SECS", default_value_t = 24 * 3600)]
    ttl: u64,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the effective configuration (secrets redacted); exit 2 if a setting is invalid
    Check,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Completions { shell }) = cli.command {
        clap_complete::generate(
            shell,
            &mut Cli::command(),
            "feed-service",
            &mut std::io::stdout(),
        );
        return ExitCode::SUCCESS;
    }
    let settings = match Settings::load_overriding(cli.config.overrides()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(settings),
        Command::Token(args) => token(&settings, &args),
        Command::Config(ConfigCommand::Check) => config_check(&settings),
        Command::Migrate => migrate(&settings),
        Command::Completions { .. } => ExitCode::SUCCESS,
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|e| {
        eprintln!("cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

fn serve(settings: Settings) -> ExitCode {
    feed_service::telemetry::init(&settings.telemetry);
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
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

fn token(settings: &Settings, args: &TokenArgs) -> ExitCode {
    let user = UserId(args.user.unwrap_or(0));
    let minted = JwtKeys::from_settings(&settings.auth)
        .and_then(|keys| keys.mint(user, args.admin, args.ttl));
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

fn config_check(settings: &Settings) -> ExitCode {
    match serde_json::to_string_pretty(settings) {
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

fn migrate(settings: &Settings) -> ExitCode {
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let url = settings.database.url.expose_secret().to_string();
    let create = settings.database.create_if_missing;
    let migrated = runtime.block_on(async move {
        if create {
            feed_service::store::pg::ensure_database(&url).await?;
        }
        feed_service::store::pg::run_migrations(&url).await
    });
    match migrated {
        Ok(()) => {
            eprintln!("migrations: up to date");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("migrations failed: {}", e.chain());
            ExitCode::FAILURE
        }
    }
}
