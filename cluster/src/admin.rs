//! Cluster membership records kept in the metadata group, and the admin requests nodes send
//! each other (join, remove, status, compaction, state digests).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{GroupId, NodeId};

/// Key of the [`ClusterSettings`] record.
pub const SETTINGS_KEY: &str = "settings";

/// Key of the record (namespace `Cluster`) of the last consistency check that found replicas
/// differing (a `ConsistencyAlarm`); absent when the last check found none.
pub const CONSISTENCY_KEY: &str = "consistency";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    Active,
    /// Being or already drained: placement moves every replica away from it.
    Removed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub id: NodeId,
    pub rpc_addr: String,
    pub http_addr: String,
    pub state: NodeState,
    /// The node's peer links run without TLS (plaintext on loopback, or `--insecure`):
    /// `/health` of every node says the cluster is insecure while any member is.
    #[serde(default)]
    pub plaintext: bool,
    /// What the node's build can do that older builds cannot (`ClusterOptions::features`):
    /// a new format is used only once every active member can read it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// The version of the node's build (`services::upgrade::VERSION`; empty for builds older
    /// than rolling upgrades).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// The node's disk when it last crossed a mark (`disk`): absent while it has room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<crate::disk::DiskStatus>,
    /// When the node began draining (ms since the epoch): it is stopping, so leaderships move
    /// away from it and placement gives it none. Its next start clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining_since_ms: Option<i64>,
}

impl NodeRecord {
    /// How full the node's disk is, as its record says.
    pub fn disk_level(&self) -> crate::disk::DiskLevel {
        self.disk.map(|d| d.level).unwrap_or_default()
    }

    /// The node's disk alarm as `/health` and `basalt admin alarms` show it, if it has one.
    pub fn disk_alarm(&self) -> Option<serde_json::Value> {
        let d = self.disk?;
        Some(
            serde_json::json!({"node": self.id, "alarm": format!("disk {}", d.level.name()),
            "freeBytes": d.free_bytes, "totalBytes": d.total_bytes}),
        )
    }
}

pub use crate::settings::ClusterSettings;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AdminRequest {
    ClusterInfo,
    Join(NodeRecord),
    RemoveNode(NodeId),
    Status,
    /// Snapshot groups with a long log behind them and compact their logs.
    Compact,
    /// Move leadership of `group` to node `to` (sent to the group's current leader).
    TransferLeader {
        group: GroupId,
        to: NodeId,
    },
    /// A digest of every group's state as this node's replica holds it.
    Digest,
    /// The secret the nodes share outside the replicated state (the node crate's secrets key,
    /// decisions/0032), for a node that joins or lost its copy: nodes only.
    SharedSecret,
    /// Remove this node's disk ballast (`disk`), giving its room back: an administrator's
    /// way out of a full disk.
    ReleaseBallast,
    /// Take a backup of the whole cluster, this node coordinating (`services::backup`).
    Backup(BackupRequest),
    /// A backup's steps, from the node coordinating it: raise and lower this node's write
    /// fence, pin and write one group's state here, wait for that write to end.
    Fence {
        backup: String,
        ttl_ms: u64,
    },
    Unfence {
        backup: String,
    },
    BackupGroup(GroupJob),
    BackupWait {
        backup: String,
        group: GroupId,
    },
    /// The backup failed: stop this node's writers of it and drop their uploads.
    BackupAbort {
        backup: String,
    },
    /// The backup is written: this node's copies of stored files need no longer be held.
    BackupEnd {
        backup: String,
    },
    /// Check that every group's replicas hold the same state (`services::check`), this node
    /// coordinating.
    Check,
    /// This node's digest of `group` at consistency check `check` (waits for it a while).
    StateDigest {
        check: String,
        group: GroupId,
    },
    /// The alarm the last consistency check left, if any.
    ConsistencyAlarm,
    /// Drain this node and stop it, as SIGTERM does (`Cluster::drain_requested`).
    Drain,
    /// The rebalancer's state, or a change of its settings (`services::rebalance`).
    Rebalance(RebalanceRequest),
    /// The cluster's version and feature gates, or finalizing an upgrade (`services::upgrade`).
    Upgrade(UpgradeRequest),
    /// Split data group `group` (`services::splits::begin`): half its slots go to a new group.
    Split {
        group: GroupId,
        /// Slots moved at a time (0: all at once; none: about `moveBatchKb` of the group).
        #[serde(default)]
        batch_slots: Option<u32>,
    },
    /// Merge every slot of data group `group` into `into` (by default the group of its family
    /// holding fewest slots), `services::splits::begin_merge`.
    Merge {
        group: GroupId,
        into: Option<GroupId>,
        /// As `Split`'s.
        #[serde(default)]
        batch_slots: Option<u32>,
    },
    /// The slot map this node routes by, and the split under way (`basalt admin slots`).
    Slots,
    /// Change when groups split by themselves (`services::splits::change_settings`); the
    /// settings not given stay.
    SplitSettings(SplitSettingsChange),
    /// A split's step, from the metadata leader, to one of `voters`: make this node's replica
    /// of the split's child `group` and initialize the group with exactly `voters` (their
    /// peer addresses), unless done already (`services::splits::start_here`).
    StartGroup {
        group: GroupId,
        voters: BTreeMap<NodeId, String>,
    },
}

/// What `basalt admin upgrade` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpgradeRequest {
    Status,
    /// Turn on every feature all members' builds have, and clear `Hold`: from then on a
    /// build without them cannot start in the cluster.
    Finalize,
    /// Finalize nothing by itself (the previous build can be brought back) until `Finalize`.
    Hold,
}

/// The cluster's version as any node sees it (`basalt admin upgrade status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    /// The lowest build version among the members when the cluster last finalized.
    pub cluster_version: String,
    /// Every member runs the same build version and every feature of theirs is on: nothing
    /// is left to finalize.
    pub finalized: bool,
    /// Set by `basalt admin upgrade hold`: nothing is finalized until `finalize`.
    pub hold: bool,
    /// The features that are on: new commands and storage formats are used only once on.
    pub features: Vec<String>,
    /// Features every active member's build has that are not on yet (`finalize` turns them
    /// on).
    pub pending: Vec<String>,
    /// When the cluster last finalized (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalized_at_ms: Option<i64>,
    /// Each active member's build.
    pub nodes: Vec<NodeBuild>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeBuild {
    pub node: NodeId,
    pub version: String,
    pub features: Vec<String>,
    /// Features other members have that this build lacks (a rolling upgrade not finished).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lacks: Vec<String>,
}

/// What `basalt admin rebalance` asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RebalanceRequest {
    Status,
    /// Begin no balancing move (repairs go on) until `Resume`.
    Pause,
    Resume,
    /// Change the limits given (the others stay).
    Limits {
        replica_moves_per_node: Option<u32>,
        snapshot_mb_per_s: Option<u32>,
        leader_moves_per_s: Option<f64>,
    },
}

/// The rebalancer's run-time settings, kept in the metadata group (namespace `Cluster`, key
/// `rebalance`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RebalanceSettings {
    #[serde(default)]
    pub paused: bool,
    /// Moves in flight each node may take part in (as the node a replica goes to or leaves).
    #[serde(default = "default_replica_moves")]
    pub replica_moves_per_node: u32,
    /// MB per second each node may send in snapshots to its peers, over all groups (0: no
    /// limit).
    #[serde(default = "default_snapshot_mb")]
    pub snapshot_mb_per_s: u32,
    /// Preferred leaders the planner may change per second.
    #[serde(default = "default_leader_moves")]
    pub leader_moves_per_s: f64,
}

fn default_replica_moves() -> u32 {
    1
}

fn default_snapshot_mb() -> u32 {
    64
}

fn default_leader_moves() -> f64 {
    4.0
}

impl Default for RebalanceSettings {
    fn default() -> Self {
        RebalanceSettings {
            paused: false,
            replica_moves_per_node: default_replica_moves(),
            snapshot_mb_per_s: default_snapshot_mb(),
            leader_moves_per_s: default_leader_moves(),
        }
    }
}

/// When the `splits` job splits a data group by itself, kept in the metadata group (namespace
/// `Cluster`, key `splitting`): one at a time, the largest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SplitSettings {
    /// A data group whose state passes this many MiB on its leader's disk is split (0: never
    /// by size).
    #[serde(default = "default_split_mb")]
    pub split_above_mb: u32,
    /// A data group that applied more than this many writes (log entries) a second over the
    /// last minute is split (0: never by load).
    #[serde(default = "default_split_writes")]
    pub split_above_writes_per_s: u32,
    /// A group that began as a split's child merges back into its family's smallest group
    /// when the two hold less than this many MiB together and both are quiet (0: never).
    #[serde(default = "default_merge_mb")]
    pub merge_below_mb: u32,
    /// After a split or merge is done, its groups are left alone this many seconds.
    #[serde(default = "default_settle_secs")]
    pub settle_secs: u32,
    /// A split or merge moves its slots in batches holding about this many KiB of the group
    /// (writes to a batch's slots wait for its copy); 0: all at once.
    #[serde(default = "default_move_batch_kb")]
    pub move_batch_kb: u32,
    /// A split or merge copies and drops at most about this many KiB of objects a second on
    /// average (0: as fast as it can), and its batches hold at most a second of it.
    #[serde(default = "default_move_kb_per_s")]
    pub move_kb_per_s: u32,
}

impl SplitSettings {
    /// The settings a record holds. A record written before merges were built, with both
    /// split limits at 0 (automatic splits turned off), keeps merges off too.
    pub fn from_stored(value: serde_json::Value) -> serde_json::Result<SplitSettings> {
        let has_merge = value.get("mergeBelowMb").is_some();
        let mut settings: SplitSettings = serde_json::from_value(value)?;
        if !has_merge && settings.split_above_mb == 0 && settings.split_above_writes_per_s == 0 {
            settings.merge_below_mb = 0;
        }
        Ok(settings)
    }
}

/// A change of the automatic splits' settings: those given change, the others stay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitSettingsChange {
    #[serde(default)]
    pub split_above_mb: Option<u32>,
    #[serde(default)]
    pub split_above_writes_per_s: Option<u32>,
    #[serde(default)]
    pub merge_below_mb: Option<u32>,
    #[serde(default)]
    pub settle_secs: Option<u32>,
    #[serde(default)]
    pub move_batch_kb: Option<u32>,
    #[serde(default)]
    pub move_kb_per_s: Option<u32>,
}

impl SplitSettingsChange {
    /// Whether it changes anything.
    pub fn is_empty(&self) -> bool {
        *self == SplitSettingsChange::default()
    }

    /// `settings` with this change.
    pub fn applied_to(&self, mut settings: SplitSettings) -> SplitSettings {
        if let Some(v) = self.split_above_mb {
            settings.split_above_mb = v;
        }
        if let Some(v) = self.split_above_writes_per_s {
            settings.split_above_writes_per_s = v;
        }
        if let Some(v) = self.merge_below_mb {
            settings.merge_below_mb = v;
        }
        if let Some(v) = self.settle_secs {
            settings.settle_secs = v;
        }
        if let Some(v) = self.move_batch_kb {
            settings.move_batch_kb = v;
        }
        if let Some(v) = self.move_kb_per_s {
            settings.move_kb_per_s = v;
        }
        settings
    }
}

fn default_merge_mb() -> u32 {
    64
}

fn default_settle_secs() -> u32 {
    600
}

fn default_move_batch_kb() -> u32 {
    2048
}

fn default_move_kb_per_s() -> u32 {
    1024
}

fn default_split_mb() -> u32 {
    256
}

fn default_split_writes() -> u32 {
    3_000
}

impl Default for SplitSettings {
    fn default() -> Self {
        SplitSettings {
            split_above_mb: default_split_mb(),
            split_above_writes_per_s: default_split_writes(),
            merge_below_mb: default_merge_mb(),
            settle_secs: default_settle_secs(),
            move_batch_kb: default_move_batch_kb(),
            move_kb_per_s: default_move_kb_per_s(),
        }
    }
}

/// The rebalancer as any node sees it (`basalt admin rebalance status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RebalanceStatus {
    pub settings: RebalanceSettings,
    /// Every member runs a build with the rebalancer, and the placement record is written:
    /// the planner moves replicas (until then placement ranks nodes by rendezvous hashing).
    pub planning: bool,
    /// Every group's leader answered, no move is in flight and none is left to make.
    pub balanced: bool,
    /// Moves begun since the cluster first planned.
    pub moves_begun: u64,
    /// Groups whose leader is making a move now.
    pub in_flight: Vec<MoveInFlight>,
    /// Moves left until balanced, counted as if each were made at once (at most 10,000).
    pub queued: usize,
    /// Each active member's share.
    pub nodes: Vec<NodeShare>,
    /// Groups no leader answered for: left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_groups: Vec<GroupId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveInFlight {
    pub group: GroupId,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    pub desired: Vec<NodeId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeShare {
    pub node: NodeId,
    pub draining: bool,
    /// It did not answer: nothing moves to it, and balancing waits (`remove-node` to have its
    /// replicas replaced).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unreachable: bool,
    /// Replicas the placement record gives it, and their groups' bytes.
    pub replicas: u32,
    pub bytes: u64,
    /// Its replicas weighted by bytes (an average group weighs 1): balanced within ±1.
    pub weighted: f64,
    /// Groups the record prefers it to lead, and those it leads now.
    pub preferred_leaders: u32,
    pub leaders: u32,
    /// Moves in flight it takes part in.
    pub moves_in_flight: u32,
}

/// What a consistency check found, group by group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    pub check: String,
    pub groups: Vec<GroupCheck>,
}

impl CheckReport {
    /// The groups whose replicas differ.
    pub fn mismatched(&self) -> Vec<&GroupCheck> {
        self.groups
            .iter()
            .filter(|g| !g.differing.is_empty())
            .collect()
    }

    /// The groups not compared in full: a voter did not answer, or the group's voters were
    /// not known (its leader did not answer).
    pub fn incomplete(&self) -> Vec<&GroupCheck> {
        self.groups
            .iter()
            .filter(|g| g.digests.is_empty() || !g.unanswered.is_empty())
            .collect()
    }

    /// Whether every group was compared in full.
    pub fn complete(&self) -> bool {
        self.incomplete().is_empty()
    }
}

/// One group's replicas at one log index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupCheck {
    pub group: GroupId,
    /// The log index of the check's entry: every digest is of the state as it left it.
    pub index: u64,
    /// Each voter's digest (none: it did not answer, `unanswered`).
    pub digests: Vec<(NodeId, Option<GroupDigest>)>,
    /// The voters whose state differs from the most of them (all of them when no digest is
    /// shared by more than half).
    pub differing: Vec<NodeId>,
    /// The voters that did not answer in time.
    pub unanswered: Vec<NodeId>,
}

/// The record a check that found differing replicas leaves in the metadata group: `/health`
/// and `basalt admin alarms` show it on every node until a check finds none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsistencyAlarm {
    pub check: String,
    pub at_ms: i64,
    /// The groups that differ and the replicas that differ in each.
    pub groups: Vec<(GroupId, Vec<NodeId>)>,
}

/// What `basalt admin backup` asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackupRequest {
    /// A directory (absolute, the same on every node's machine) or `s3://bucket/prefix`.
    pub dest: String,
    /// Bytes per second each node may write (None: no limit).
    pub rate: Option<u64>,
    /// Taken by a schedule (`--backup-schedule`): only such backups are pruned.
    #[serde(default)]
    pub scheduled: bool,
}

/// What a backup's coordinator asks of the node writing one group's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupJob {
    pub backup: String,
    pub group: GroupId,
    /// The destination as given, without the backup's id.
    pub dest: String,
    /// The log index of the group's barrier.
    pub barrier: u64,
    /// Bytes per second for all of this node's groups of the backup (None: no limit).
    pub rate: Option<u64>,
}

impl AdminRequest {
    /// The request's name, for logs and refusals.
    pub fn name(&self) -> &'static str {
        match self {
            AdminRequest::ClusterInfo => "ClusterInfo",
            AdminRequest::Join(_) => "Join",
            AdminRequest::RemoveNode(_) => "RemoveNode",
            AdminRequest::Status => "Status",
            AdminRequest::Compact => "Compact",
            AdminRequest::TransferLeader { .. } => "TransferLeader",
            AdminRequest::Digest => "Digest",
            AdminRequest::SharedSecret => "SharedSecret",
            AdminRequest::ReleaseBallast => "ReleaseBallast",
            AdminRequest::Backup(_) => "Backup",
            AdminRequest::Fence { .. } => "Fence",
            AdminRequest::Unfence { .. } => "Unfence",
            AdminRequest::BackupGroup(_) => "BackupGroup",
            AdminRequest::BackupWait { .. } => "BackupWait",
            AdminRequest::BackupAbort { .. } => "BackupAbort",
            AdminRequest::BackupEnd { .. } => "BackupEnd",
            AdminRequest::Check => "Check",
            AdminRequest::StateDigest { .. } => "StateDigest",
            AdminRequest::ConsistencyAlarm => "ConsistencyAlarm",
            AdminRequest::Drain => "Drain",
            AdminRequest::Rebalance(_) => "Rebalance",
            AdminRequest::Upgrade(_) => "Upgrade",
            AdminRequest::Split { .. } => "Split",
            AdminRequest::Merge { .. } => "Merge",
            AdminRequest::Slots => "Slots",
            AdminRequest::SplitSettings(_) => "SplitSettings",
            AdminRequest::StartGroup { .. } => "StartGroup",
        }
    }

    /// Whether node `sender` may send this request with its own certificate: the requests
    /// nodes send one another (joining as itself, a compaction round, settling writes, the
    /// shared secret, a backup's steps). Removing or draining nodes, moving leaders, reading
    /// digests and starting a backup take an admin's certificate.
    pub fn node_may_send(&self, sender: NodeId) -> bool {
        match self {
            AdminRequest::ClusterInfo
            | AdminRequest::Status
            | AdminRequest::Compact
            | AdminRequest::SharedSecret
            | AdminRequest::Fence { .. }
            | AdminRequest::Unfence { .. }
            | AdminRequest::BackupGroup(_)
            | AdminRequest::BackupWait { .. }
            | AdminRequest::BackupAbort { .. }
            | AdminRequest::BackupEnd { .. }
            | AdminRequest::StateDigest { .. }
            | AdminRequest::ConsistencyAlarm
            | AdminRequest::Slots
            | AdminRequest::StartGroup { .. } => true,
            AdminRequest::Join(record) => record.id == sender,
            AdminRequest::RemoveNode(_)
            | AdminRequest::TransferLeader { .. }
            | AdminRequest::Digest
            | AdminRequest::ReleaseBallast
            | AdminRequest::Backup(_)
            | AdminRequest::Check
            | AdminRequest::Drain
            | AdminRequest::Rebalance(_)
            | AdminRequest::Upgrade(_)
            | AdminRequest::Split { .. }
            | AdminRequest::Merge { .. }
            | AdminRequest::SplitSettings(_) => false,
        }
    }

    /// Whether an administrator's certificate may send this request: all but the shared
    /// secret, which only nodes hold.
    pub fn admin_may_send(&self) -> bool {
        !matches!(self, AdminRequest::SharedSecret)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AdminResponse {
    ClusterInfo {
        settings: ClusterSettings,
        nodes: Vec<NodeRecord>,
        /// The features the cluster finalized: a joining build without them is refused.
        #[serde(default)]
        finalized_features: Vec<String>,
    },
    Done,
    Status(NodeStatus),
    Digests(Vec<GroupDigest>),
    /// The shared secret, when this node has it.
    SharedSecret(Option<Vec<u8>>),
    /// A backup was written: its manifest.
    BackedUp(crate::backup_manifest::Manifest),
    /// A consistency check's findings.
    Checked(CheckReport),
    /// The alarm the last consistency check left.
    Consistency(Option<ConsistencyAlarm>),
    /// One group's state of a backup was written here.
    GroupBackedUp(crate::backup_manifest::GroupBackup),
    /// The ballast is gone: the bytes it held (0 when there was none), and the disk now.
    BallastReleased {
        bytes: u64,
        disk: crate::disk::DiskStatus,
    },
    Rebalance(RebalanceStatus),
    Upgrade(UpgradeStatus),
    /// The slot map (`basalt admin slots`): `services::splits::view`.
    Slots(serde_json::Value),
}

/// A digest of one group's replicated state as one node holds it (the records a snapshot
/// carries, read at one point in time): replicas that applied the same log index hold the same
/// state exactly when their digests are equal (the same build computes them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupDigest {
    pub group: GroupId,
    /// The log index the state reflects.
    pub applied: u64,
    /// Records in the state.
    pub records: u64,
    /// Hex digest of every key and value, in key order.
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub node_id: NodeId,
    /// The node is draining before it stops (`cluster::drain`): it takes no leadership.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
    pub groups: Vec<GroupStatus>,
}

/// One group as this node sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupStatus {
    pub group: GroupId,
    /// Leader, Follower, Candidate or Learner.
    pub state: String,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub last_log_index: u64,
    pub committed: u64,
    pub applied: u64,
    pub snapshot: u64,
    pub purged: u64,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    /// The log index of the entry that holds the configuration (`voters`, `learners`): once
    /// the leader has applied it (`applied`), it is committed. `None` from an older node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_at: Option<u64>,
    /// Approximate bytes of the group's state in this node's files (not its memtables).
    #[serde(default)]
    pub bytes: u64,
    /// Why the group's Raft core stopped on this node, if it did (it serves nothing then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<String>,
    /// Whether this replica vouches for being current, so that it may answer a read alone
    /// (`replicas::freshness`).
    #[serde(default)]
    pub current: bool,
    /// Milliseconds since this node last heard from the group's leader: on a follower its last
    /// append, on the leader the last time a quorum answered it (0 for a group of one voter);
    /// `None` when it never did. `/health` calls a group whose leader is silent for longer than
    /// an election timeout unable to commit (`leaderUnreachable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_heard_ms: Option<u64>,
}

impl GroupStatus {
    /// True when this node holds a replica (voter or learner) of the group.
    pub fn hosts(&self, node: NodeId) -> bool {
        self.voters.contains(&node) || self.learners.contains(&node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starting a backup or a check, or draining a node, takes an administrator's certificate;
    /// a node's may send only the steps a coordinating node sends its peers.
    #[test]
    fn backups_checks_and_drains_are_started_by_administrators_only() {
        let node = NodeId::new(2);
        let started = [
            AdminRequest::Backup(BackupRequest {
                dest: "/backups".into(),
                rate: None,
                scheduled: false,
            }),
            AdminRequest::Check,
            AdminRequest::Drain,
            AdminRequest::Rebalance(RebalanceRequest::Pause),
            AdminRequest::Split {
                group: GroupId::new(1),
                batch_slots: None,
            },
            AdminRequest::Merge {
                group: GroupId::new(5),
                into: None,
                batch_slots: Some(8),
            },
            AdminRequest::SplitSettings(SplitSettingsChange {
                split_above_mb: Some(1),
                ..Default::default()
            }),
        ];
        for req in &started {
            assert!(!req.node_may_send(node), "{}", req.name());
            assert!(req.admin_may_send(), "{}", req.name());
        }
        let steps = [
            AdminRequest::Fence {
                backup: "b".into(),
                ttl_ms: 1000,
            },
            AdminRequest::Unfence { backup: "b".into() },
            AdminRequest::BackupAbort { backup: "b".into() },
            AdminRequest::BackupEnd { backup: "b".into() },
            AdminRequest::BackupWait {
                backup: "b".into(),
                group: GroupId::new(1),
            },
            AdminRequest::StateDigest {
                check: "c".into(),
                group: GroupId::new(1),
            },
            AdminRequest::ConsistencyAlarm,
            AdminRequest::StartGroup {
                group: GroupId::new(9),
                voters: BTreeMap::new(),
            },
        ];
        for req in &steps {
            assert!(req.node_may_send(node), "{}", req.name());
        }
    }
}
