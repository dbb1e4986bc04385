//! openraft type configuration shared by every group, the Raft tuning of a node, and each
//! group's log in the shared store (`log_store`, with its newest entries in `log_cache`).
//!
//! Every group (metadata and data shards) uses the same types: the log carries `Command`s, the
//! state machine answers `CommandResult`s, nodes are `BasicNode { addr }` with the gRPC
//! address. Timeouts are sized for tens of groups sharing two cores (see docs/architecture.md).

mod log_cache;
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

/// How long each led data shard takes a node's new objects before the next one does, by
/// default (`RaftTuning::create_lane_ms`, decisions/0028).
pub const CREATE_LANE_MS: u64 = 100;

/// How many submissions of proposals each group's leader has in flight at once by default
/// (`RaftTuning::proposals_in_flight`, decisions/0029).
pub const PROPOSALS_IN_FLIGHT: usize = 1;

/// The longest a group's leader waits, by default, after answering a batch of proposals for
/// as many to queue again before it submits the next (`RaftTuning::proposal_gather_us`,
/// decisions/0030).
pub const PROPOSAL_GATHER_US: u64 = 2_000;

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
    /// Whether a leader serves linearizable reads within its lease, without a quorum round
    /// per read (decisions/0015); false confirms every read with a read index.
    pub lease_reads: bool,
    /// How long each data shard this node leads takes the node's new objects before the
    /// next one does (`replicas::create_lane`, decisions/0028); 0 puts each new object on a
    /// led shard drawn at random.
    pub create_lane_ms: u64,
    /// How many submissions of proposals a group's leader has in flight at once; proposals
    /// that arrive meanwhile wait and go to the log together (`replicas::proposals`,
    /// decisions/0029). 0 submits each proposal alone, as it arrives.
    pub proposals_in_flight: usize,
    /// After answering a batch of several proposals, how long at most a group's leader waits
    /// for as many to queue again before it submits the next batch (a quarter of the last
    /// batch's round, capped by this); 0 submits what is queued at once (decisions/0030).
    pub proposal_gather_us: u64,
}

impl Default for RaftTuning {
    fn default() -> Self {
        RaftTuning {
            heartbeat_ms: 250,
            election_min_ms: 1200,
            election_max_ms: 2400,
            snapshot_logs: 20_000,
            keep_logs: 1_000,
            lease_reads: true,
            create_lane_ms: CREATE_LANE_MS,
            proposals_in_flight: PROPOSALS_IN_FLIGHT,
            proposal_gather_us: PROPOSAL_GATHER_US,
        }
    }
}

impl RaftTuning {
    /// The oldest quorum acknowledgement a lease read trusts: nine tenths of openraft's
    /// leader lease (the largest election timeout, which followers wait out before voting
    /// for anyone else), the rest a margin for clock rates. `None` without lease reads.
    pub fn read_lease(&self) -> Option<std::time::Duration> {
        self.lease_reads
            .then(|| std::time::Duration::from_millis(self.election_max_ms * 9 / 10))
    }

    /// How long a node refuses to vote after it starts when reads use leases: a follower
    /// that acknowledged a leader just before it restarted must not elect another leader
    /// while that leader may still serve reads on the acknowledgement (openraft forgets the
    /// follower's side of the lease on restart).
    pub fn vote_hold(&self) -> std::time::Duration {
        match self.lease_reads {
            true => std::time::Duration::from_millis(self.election_max_ms),
            false => std::time::Duration::ZERO,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_read_lease_is_shorter_than_the_vote_hold_it_relies_on() {
        let tuning = RaftTuning::default();
        let lease = tuning.read_lease().expect("leases are on by default");
        assert_eq!(lease, Duration::from_millis(2160));
        assert_eq!(tuning.vote_hold(), Duration::from_millis(2400));
        assert!(lease < tuning.vote_hold());
        let config = tuning.config(crate::ids::GroupId::new(1)).unwrap();
        assert!(lease < Duration::from_millis(config.election_timeout_max));
        let off = RaftTuning {
            lease_reads: false,
            ..RaftTuning::default()
        };
        assert_eq!((off.read_lease(), off.vote_hold()), (None, Duration::ZERO));
    }
}
