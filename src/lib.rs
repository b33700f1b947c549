//! A push/pull hybrid follow-feed service.
//!
//! - [`http`]: the REST layer (actix-web): routes, auth, JSON errors.
//! - [`engine`]: publish, fan-out, follow and the merged scroll read; no HTTP.
//! - [`store`]: PostgreSQL (records of truth) and Redis (derived cache).
//! - [`types`]: the feed types the engine and the stores both speak.
//! - [`settings`]: start-up configuration; [`telemetry`]: logging;
//!   [`metrics`]: Prometheus metrics.
//! - [`testkit`]: what a tool outside the service (the load tool) may
//!   drive besides the HTTP API.
//!
//! Dependencies point down: `http` → `engine` → `store` → `types`.

// A live stream's task nests a page read, its warm read, a rebuild and a
// PostgreSQL connection's futures: checking that it is `Send` goes deeper
// than the default limit of 128.
#![recursion_limit = "256"]

pub mod domain;
pub mod engine;
pub mod error;
pub mod http;
pub mod metrics;
pub mod settings;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod testkit;
pub mod types;
