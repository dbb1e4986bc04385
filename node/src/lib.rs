//! The `basalt` node: serves the REST API over a cluster node.
//!
//! The request path in ten lines: `server` runs axum with the middleware stack around
//! `api::routes()`; `api::context` authenticates the app (`auth`: keys, master key, signatures); the handler in
//! `api/<family>.rs` validates the body, builds a `basalt_cluster::Command` (or a read) and
//! calls `basalt_cluster::Cluster`, which routes it by (app, class, objectId) to the owning
//! Raft group's leader and returns once the command is committed and applied; the handler
//! shapes the JSON, and `api::error` turns any failure into the documented status and code.
//! `serve` wires a node together, `dev` starts local clusters, `admin` talks to a running one
//! (`certs`: the cluster's certificates; `https`: the API's own TLS).
//!
//! Floors (imports point down; checked by `scripts/module-cycles.py`):
//! - 4: cli dev serve server admin
//! - 3: api
//! - 2: auth users sms captcha mail installations query realtime push functions files
//!   bootstrap backups drain
//! - 1: apps
//! - 0: every other module — the leaves: configuration, paths, passwords, sealed secrets, outbound
//!   limits, rates, budgets and quotas, connections, TLS, JSON text.

pub mod admin;
pub mod api;
pub mod app_rate;
pub mod apps;
pub mod auth;
pub mod backups;
pub mod body_budget;
pub mod bootstrap;
pub mod captcha;
pub mod certs;
pub mod cli;
pub mod config;
pub mod connections;
pub mod dev;
pub mod drain;
pub mod files;
pub mod functions;
pub mod https;
pub mod installations;
pub mod json_text;
pub mod mail;
pub mod outbound;
pub mod password;
pub mod paths;
pub mod push;
pub mod query;
pub mod realtime;
pub mod request_log;
pub mod secrets;
pub mod serve;
pub mod server;
pub mod sms;
pub mod storage_quota;
pub mod throttle;
pub mod users;
