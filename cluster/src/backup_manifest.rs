//! What a backup holds, as its `manifest.json` tells: the cluster's settings, and for every
//! group the object holding its state at the backup's barrier (zstd-compressed, in the
//! snapshot file format of `statemachine::snapshot`) with its size and SHA-256, and the
//! listing of the stored files whose records that state holds (`GroupFiles`: one JSON line per
//! file, `BackedUpFile`) — each file's bytes copied into the backup (`files/<id>`) when the
//! cluster keeps copies on its nodes, or only listed when they are in the files bucket.
//!
//! `services::backup` writes backups; verifying and restoring read them. A backup is the
//! folder `<destination>/<backup id>/`: `manifest.json` is written last, so a backup without
//! one is incomplete.

use serde::{Deserialize, Serialize};

use crate::files::record::FileId;
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
    /// The data groups splits made (ids above `settings.shards`), as the slot map named them
    /// at the backup's barriers: groups the backup holds besides the cluster's first ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub split_groups: Vec<GroupId>,
}

/// One group's state in a backup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupBackup {
    pub group: GroupId,
    /// The log index of the group's `BackupBarrier`.
    pub barrier: u64,
    /// The log index the state reflects: the barrier's, or a later one (writes that passed
    /// the fence before it rose may land after the barrier and before the view is taken).
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
    /// The stored files whose records the state holds (none in a backup of a build before
    /// files were backed up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<GroupFiles>,
}

impl GroupBackup {
    /// The name of `group`'s object in a backup's folder.
    pub fn object_name(group: GroupId) -> String {
        format!("g{:05}.state.zst", group.get())
    }
}

/// The stored files of one group's state in a backup: its listing object and what it counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupFiles {
    /// The listing's object: one `BackedUpFile` as JSON per line.
    pub object: String,
    /// Bytes of the listing object.
    pub size: u64,
    /// SHA-256 of the listing object, in hex.
    pub sha256: String,
    /// Files listed, and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Files whose bytes the backup holds (`files/<id>`).
    pub copied: u64,
    /// Files in the cluster's files bucket: listed, their bytes left there.
    pub in_bucket: u64,
    /// Files no copy of could be read when the backup was taken (listed with the reason).
    pub missing: u64,
}

impl GroupFiles {
    /// The name of `group`'s listing in a backup's folder.
    pub fn object_name(group: GroupId) -> String {
        format!("g{:05}.files.jsonl", group.get())
    }
}

/// One stored file in a backup's listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackedUpFile {
    pub id: FileId,
    pub size: u64,
    /// MD5 of its bytes, in hex (as its record has it).
    pub md5: String,
    /// SHA-256 of its copy in the backup (`object_name`), when the backup holds its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The bucket holding its bytes (`s3://bucket/prefix`), when the cluster keeps files in
    /// one: the backup does not copy them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    /// Why no copy of it could be read, when none could.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
}

impl BackedUpFile {
    /// The name of the copy of file `id` in a backup's folder.
    pub fn object_name(id: &FileId) -> String {
        format!("files/{id}")
    }
}

impl Manifest {
    /// Every group the backup must hold: the metadata group, the cluster's first data groups
    /// and those its splits made.
    pub fn expected_groups(&self) -> Vec<GroupId> {
        let mut groups: Vec<GroupId> = GroupId::all(self.settings.shards).collect();
        groups.extend(self.split_groups.iter().copied());
        groups
    }

    /// Bytes of state the backup holds, before compression.
    pub fn state_bytes(&self) -> u64 {
        self.groups.iter().map(|g| g.bytes).sum()
    }
}
