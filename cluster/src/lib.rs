//! Basalt's cluster: multi-Raft groups replicating RocksDB state, and everything the API layer
//! needs to read and write it.
//!
//! The request path through this crate: the node calls [`Cluster`] — the one door — with a
//! [`Command`] (built from a request with [`update::parse_updates`]) for the group that owns the
//! object ([`ids::object_group`]). `replicas::routing` proposes it through the local replica if
//! it leads the group, otherwise `rpc::router` forwards it to the leader, whose `peer_service`
//! proposes it there. openraft appends it to every replica's log (`raft::log_store`, fsync'd by
//! group commit) and, once committed, `statemachine` applies it in one RocksDB batch and
//! returns a [`CommandResult`]. Reads confirm leadership (read index) and are served from the
//! leader's RocksDB (`local_read`, `query::shard_exec`); queries are scattered to every shard
//! and merged by `services::queries`. The services — queries, the schema catalog, the change
//! tail, files, placement, reclaim and the scheduler — run on top of the replicas.
//!
//! Floors (imports point down; checked by `scripts/module-cycles.py`):
//! - 4: cluster
//! - 3: services peer_service
//! - 2: replicas
//! - 1: statemachine rpc network local_read
//! - 0: every other module — the leaves: ids, slots, names, encodings, command, object, update, acl,
//!   the query engine, schema rules, the change log, files' records, raft, storage (the only
//!   one naming RocksDB), errors; `damage` (tests' damage to a stopped node's store, with the
//!   `failpoints` feature).

pub mod acl;
pub mod admin;
pub mod backup_manifest;
pub mod cancel;
pub mod changes;
pub mod cluster;
pub mod command;
#[cfg(feature = "failpoints")]
pub mod damage;
pub mod disk;
mod encoding;
pub mod error;
pub mod failpoints;
pub mod files;
pub mod health;
pub mod ids;
pub mod kept_reads;
pub mod limits;
mod local_read;
pub mod names;
pub mod namespace;
mod network;
pub mod object;
mod peer_service;
pub mod query;
mod raft;
pub mod replicas;
pub mod request_id;
pub mod rpc;
pub mod schema;
pub mod services;
pub mod settings;
pub mod slots;
pub mod statemachine;
mod storage;
pub mod tls;
pub mod update;
pub mod usage;

pub use cluster::{Bootstrap, Cluster, ClusterOptions};
pub use command::{Command, CommandResult, Proposed, QuotaWindow, ReadRequest, ReadResponse};
pub use error::{Error, Result};
pub use ids::{is_meta_class, META_CLASSES};
pub use kept_reads::KeptReads;
pub use raft::{RaftTuning, CREATE_LANE_MS, PROPOSALS_IN_FLIGHT, PROPOSAL_GATHER_US};
pub use replicas::{now_ms, Replicas};
pub use storage::StoreTuning;
