//! Basalt's cluster: multi-Raft groups replicating RocksDB state, and everything the API layer
//! needs to read and write it.
//!
//! The request path through this crate: the node calls [`Cluster::propose`] with a
//! [`Command`] (built from a request with [`update::parse_updates`]) for the group that owns
//! the object ([`ids::shard_for`]). The local replica proposes it if it leads the group;
//! otherwise `rpc::router` forwards it to the leader. openraft appends it to every replica's
//! log (`storage::log_store`, fsync'd by group commit) and, once committed, `statemachine`
//! applies it in one RocksDB batch and returns a [`CommandResult`]. Reads confirm leadership
//! (read index) and are served from the leader's RocksDB (`local_read`, `query`).
//! `placement` keeps each group's replicas on the right nodes and `scheduler` runs timed work
//! on the metadata group's leader.

pub mod acl;
pub mod admin;
pub mod cluster;
pub mod command;
pub mod error;
pub mod health;
pub mod ids;
pub mod limits;
mod local_read;
mod network;
pub mod object;
pub mod placement;
pub mod query;
pub mod raft;
pub mod request_id;
mod rpc;
mod scheduler;
pub mod schema;
pub mod statemachine;
pub mod storage;
pub mod update;

pub use cluster::{is_meta_class, now_ms, Bootstrap, Cluster, ClusterOptions, META_CLASSES};
pub use command::{Command, CommandResult, Proposed, QuotaWindow, ReadRequest, ReadResponse};
pub use error::{Error, Result};
pub use raft::RaftTuning;
