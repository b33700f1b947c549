//! API tests against the real PostgreSQL and Redis: each test spawns the
//! application with its own database and key prefix.

use feed_test_support as helpers;

mod accounts;
mod admin;
mod auth;
mod bad_input;
mod bulk;
mod cli;
mod clients;
mod deployment;
mod failover;
mod fanout;
mod feed;
mod fuzz;
mod health;
mod hostile;
mod hostile_streams;
mod instances;
mod limits;
mod lists;
mod mastodon;
mod model;
mod monitoring;
mod openapi;
pub mod pg_outage;
mod posts;
pub mod process;
mod publish_keys;
mod redis_outage;
mod relations;
mod scripts;
mod stream;
mod timeline;
mod upgrade;
mod users;
