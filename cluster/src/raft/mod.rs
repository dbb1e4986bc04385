//! openraft type configuration shared by every group, the Raft tuning of a node, and each
//! group's log in the shared store (`log_store`).
//!
//! Every group (metadata and data shards) uses the same types: the log carries `Command`s, the
//! state machine answers `CommandResult`s, nodes are `BasicNode { addr }` with the gRPC
//! address. Timeouts are sized for tens of groups sharing two cores (see docs/architecture.md).

pub mod log_store;

use std::sync::Arc;

use crate::command::{Command, CommandResult};
use crate::error::{Error, Result};

pub use log_store::RocksLogStore;

openraft::declare_raft_types!(
    /// Type configuration of every Basalt Raft group.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = crate::ids::NodeId,
        Node = openraft::BasicNode,
);

pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;

/// Raft timing and log retention of this node's groups.
#[derive(Debug, Clone)]
pub struct RaftTuning {
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// Build a snapshot after this many applied entries since the last one.
    pub snapshot_logs: u64,
    /// Entries kept in the log behind a snapshot (for followers that lag a little).
    pub keep_logs: u64,
}

impl Default for RaftTuning {
    fn default() -> Self {
        RaftTuning {
            heartbeat_ms: 250,
            election_min_ms: 1200,
            election_max_ms: 2400,
            snapshot_logs: 20_000,
            keep_logs: 1_000,
        }
    }
}

impl RaftTuning {
    pub fn config(&self, group: crate::ids::GroupId) -> Result<Arc<openraft::Config>> {
        let config = openraft::Config {
            cluster_name: format!("basalt-g{group}"),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_min_ms,
            election_timeout_max: self.election_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_logs),
            max_in_snapshot_log_to_keep: self.keep_logs,
            // Purge in batches of a quarter snapshot interval, so short intervals purge too.
            purge_batch_size: (self.snapshot_logs / 4).clamp(1, 256),
            install_snapshot_timeout: 10_000,
            // A node cut off from its peers must not inflate its term and depose healthy
            // leaders when it returns (found by the jepsen partition runs).
            enable_pre_vote: Some(true),
            ..Default::default()
        };
        config
            .validate()
            .map(Arc::new)
            .map_err(|e| Error::Internal(format!("raft config: {e}")))
    }
}
