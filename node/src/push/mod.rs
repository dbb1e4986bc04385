//! Push notifications (spec 4.12, decisions/0022). `request` turns a `POST /1/push` body into
//! what to send, to whom and when (141-144); `record` keeps each accepted push in the
//! metadata group until it is sent; `status` is its `_PushStatus` object; `dispatcher` runs on
//! the leader-elected scheduler's node and starts a `fanout` for each push that is due, which
//! reads the targeted installations page by page and hands them, as `delivery` batches, to the
//! `provider`s configured in the app's `settings`. Callers: `api::push` (accepting), `serve` (the dispatcher).

pub mod delivery;
pub mod dispatcher;
pub mod fanout;
pub mod provider;
pub mod record;
pub mod request;
pub mod settings;
pub mod status;

use basalt_cluster::Error as ClusterError;

use crate::apps::AppsError;

/// Why a push could not be stored or moved on.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Apps(#[from] AppsError),
    /// Its record changed under this runner: another one moves it on.
    #[error("the push was taken over by another runner")]
    Lost,
    #[error("push record: {0}")]
    Corrupt(String),
    /// Its stored query no longer parses.
    #[error("push query: {0}")]
    Query(String),
}
