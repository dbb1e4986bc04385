//! Realtime subscriptions (decisions/0024): clients subscribe to a class's or an object's
//! changes and receive an event for each committed write they may read, whichever node made it.
//!
//! `hub` (one per node) follows every group's log of changes (`basalt_cluster::changes`) and
//! hands each change to the subscriptions of its app and class; `subscription` decides what a
//! change means to one subscriber (ACL, `where`, enter/leave) and renders its event;
//! `connection` is one client's session — its subscriptions and its bounded queue of messages —
//! whatever the transport; `wire` is the message model and each transport's framing. The
//! transports (plain WebSocket, socket.io 0.9, SSE) are served by `api::realtime`.

pub mod body;
pub mod connection;
pub mod cursor;
pub mod hub;
pub mod outbox;
pub mod subscription;
pub mod wire;

use crate::apps::AppsError;
use crate::users::UsersError;

/// Why a realtime request is refused; `api::error` gives each its code.
#[derive(Debug, thiserror::Error)]
pub enum RealtimeError {
    /// A message that is not one the protocol knows (107).
    #[error("{0}")]
    InvalidMessage(String),
    /// A `where` the subscription cannot use (102).
    #[error("{0}")]
    InvalidWhere(String),
    /// A class name that is not allowed (103).
    #[error("invalid class name: {0}")]
    InvalidClassName(String),
    /// No app, wrong keys, or an app key that is not the connection's (401 / 0).
    #[error("unauthorized: {0}")]
    Unauthorized(&'static str),
    /// The app is disabled (10008).
    #[error("the app is disabled.")]
    AppDisabled,
    /// The node cannot follow the cluster's changes now (503).
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Users(#[from] UsersError),
    #[error(transparent)]
    Apps(#[from] AppsError),
}
