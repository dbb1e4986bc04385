//! What a backup holds, as its `manifest.json` tells: the cluster's settings, and for every
//! group the object holding its state at the backup's barrier (zstd-compressed, in the
//! snapshot file format of `statemachine::snapshot`) with its size and SHA-256.
//!
//! `services::backup` writes backups; verifying and restoring read them. A backup is the
//! folder `<destination>/<backup id>/`: `manifest.json` is written last, so a backup without
//! one is incomplete.

use serde::{Deserialize, Serialize};

use crate::ids::{GroupId, NodeId};
use crate::settings::ClusterSettings;

/// The manifest's name in a backup's folder.
pub const MANIFEST: &str = "manifest.json";

/// The manifest format this build writes and reads.
pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: u32,
    /// The backup's id: its folder's name.
    pub backup: String,
    /// The version of the node that took it.
    pub version: String,
    /// When the fence was raised and when the last group's state was written (ms since the
    /// epoch).
    pub started_ms: i64,
    pub finished_ms: i64,
    /// How long new writes waited at the fence.
    pub fence_ms: u64,
    pub settings: ClusterSettings,
    /// Taken by a schedule: pruning removes only these (`--backup-keep`).
    #[serde(default)]
    pub scheduled: bool,
    /// One per group, the metadata group first.
    pub groups: Vec<GroupBackup>,
}

/// One group's state in a backup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupBackup {
    pub group: GroupId,
    /// The log index of the group's `BackupBarrier`.
    pub barrier: u64,
    /// The log index the state reflects: the barrier's, or a later one of entries that
    /// change no data (a new leader's blank entry).
    pub applied: u64,
    /// Records of the state (objects, indexes, records, the change log).
    pub records: u64,
    /// Bytes of the state before compression.
    pub bytes: u64,
    /// The object's name in the backup's folder.
    pub object: String,
    /// Bytes of the object.
    pub size: u64,
    /// SHA-256 of the object, in hex.
    pub sha256: String,
    /// The node whose replica wrote it.
    pub node: NodeId,
}

impl GroupBackup {
    /// The name of `group`'s object in a backup's folder.
    pub fn object_name(group: GroupId) -> String {
        format!("g{:05}.state.zst", group.get())
    }
}

impl Manifest {
    /// Bytes of state the backup holds, before compression.
    pub fn state_bytes(&self) -> u64 {
        self.groups.iter().map(|g| g.bytes).sum()
    }
}
