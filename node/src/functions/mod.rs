//! Cloud functions (spec 4.11, decisions/0023): JavaScript that apps deploy and run inside the
//! node. `record` stores each function in the metadata group (with the trigger index that
//! finds a class's triggers); `settings` holds an app's limits; `engine` runs one invocation
//! in a fresh QuickJS sandbox; `runner` gives each invocation its thread, within the node's
//! bounds, and counts it; `host` is what a running function may ask of the node (the data API
//! through the node's own router, timers, allow-listed `fetch`, the log), over the `prelude`
//! script; `invoke` runs a function for a caller (a direct call, a trigger, a schedule);
//! `triggers` runs a class's hooks around its writes; `deploy` reads what a deploy asks for;
//! `cron` runs the scheduled ones on the leader-elected scheduler's node. Callers:
//! `api::functions` (deploy, list, call: it parses and answers), `api::objects` (the triggers
//! of a write), `serve` (the runner and the cron loop).

pub mod cron;
pub mod deploy;
pub mod engine;
pub mod host;
pub mod invoke;
pub mod record;
pub mod runner;
pub mod settings;
pub mod triggers;

use std::sync::atomic::{AtomicBool, Ordering};

use basalt_cluster::Error as ClusterError;

use crate::users::UsersError;

/// Whether function metrics carry their app and function (`--metrics-per-app`).
static PER_APP_METRICS: AtomicBool = AtomicBool::new(false);

/// Labels function metrics with app and function from now on (set once at start).
pub fn set_per_app_metrics(on: bool) {
    PER_APP_METRICS.store(on, Ordering::Relaxed);
}

/// The labels of a function's metrics: its app and name only when the operator asked for
/// them (they tell whoever reads `/metrics` which apps exist and what their functions are
/// called), else none.
pub fn metric_labels(app: &str, function: &str) -> Vec<(&'static str, String)> {
    match PER_APP_METRICS.load(Ordering::Relaxed) {
        true => vec![("app", app.to_string()), ("function", function.to_string())],
        false => Vec::new(),
    }
}

/// Why a function could not be deployed, found or run.
#[derive(Debug, thiserror::Error)]
pub enum FunctionsError {
    /// No function of that name (311).
    #[error("Function {0} not found.")]
    NotFound(String),
    /// A deploy the API refuses: bad name, source or options (107).
    #[error("{0}")]
    Invalid(String),
    /// Concurrent deploys of one function kept changing it.
    #[error("the function {0} is being changed by another request; try again")]
    Contended(String),
    #[error("function record: {0}")]
    Corrupt(String),
    /// A directly called function gave no result: it threw (its own `Basalt.Error` code
    /// counts), timed out, ran out of memory, or found no slot.
    #[error("{0}")]
    Run(engine::RunError),
    /// A class's before-trigger refused the write (any code it threw counts; 310 without one).
    #[error("{0}")]
    Refused(engine::RunError),
    #[error(transparent)]
    Users(#[from] UsersError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}
