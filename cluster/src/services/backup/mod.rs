//! Backups of the whole cluster, to a directory or an S3-compatible bucket (`destination`).
//!
//! The node asked for one coordinates it (`take`): it raises the write fence on every member
//! (`replicas::fence`: new proposals wait, none fail; each member
//! also holds its copies of stored files until the backup ends), proposes a `BackupBarrier` to
//! every group, asks the leader of each to pin a point-in-time view of its state there
//! (`writer`), lowers the fence — writes waited only that long — and waits while the leaders
//! stream their states, and copy the stored files those states name (`stored_files`), to the
//! destination. The manifest (`backup_manifest`) is written last. `verify` checks a backup
//! without a cluster.
//!
//! Neighbours: below, `replicas` (fence, proposals, the peer router for the other members) and
//! `statemachine::snapshot` (the state's format); above, `cluster`, which answers the admin
//! requests this sends.

pub mod destination;
mod stored_files;
mod upload;
pub mod verify;
pub mod writer;

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use crate::admin::{AdminRequest, AdminResponse, BackupRequest, GroupJob};
use crate::backup_manifest::{GroupBackup, Manifest, FORMAT, MANIFEST};
use crate::command::Command;
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId};
use crate::replicas::{now_ms, Replicas};
pub use destination::Destination;
pub use writer::GroupJobs;

/// How long the fence may hold writes at most (it lowers itself then).
const FENCE_TTL: Duration = Duration::from_secs(3);
/// Deadline of the fence's and pinning's requests to a member.
const STEP_TIMEOUT: Duration = Duration::from_secs(15);
/// Deadline of waiting for one group's state to be written.
const WRITE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// What this build's backups need of every member (`NodeRecord::features`): a member of an
/// older build would leave its groups' stored files out.
pub const FEATURES: [&str; 1] = ["backup-files"];

/// Key of the record (namespace `Cluster`) of the cluster's last backup (`LastBackup`).
pub const LAST_BACKUP_KEY: &str = "last-backup";

/// The cluster's last backup that finished, as the metadata group records it: what schedules
/// and the `basalt_backup_last_success_timestamp_seconds` of every node go by.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastBackup {
    pub backup: String,
    pub dest: String,
    pub started_ms: i64,
    pub finished_ms: i64,
}

/// Whether `name` is a backup's id (`new_backup_id`).
pub fn is_backup_id(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 23
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'T'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[15] == b'Z'
        && b[16] == b'-'
        && b[17..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// The ids of the backups in `dest`, newest first (folders not named as backups left out).
async fn backup_ids(dest: &Destination) -> Result<Vec<String>> {
    let mut ids: Vec<String> = dest
        .folders()
        .await?
        .into_iter()
        .filter(|n| is_backup_id(n))
        .collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    Ok(ids)
}

/// Unfinished backups younger than this are left alone (they may still be being written).
const UNFINISHED_KEPT_MS: i64 = 24 * 3600 * 1000;

/// Removes the scheduled backups in `dest` but the newest `keep`, and the unfinished ones older
/// than the oldest kept and a day; backups taken by hand and folders not named as backups are
/// left alone. The backups removed.
pub async fn prune(dest: &Destination, keep: usize) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Tag {
        #[serde(default)]
        scheduled: bool,
    }
    let ids = backup_ids(dest).await?;
    let day_ago = now_ms() - UNFINISHED_KEPT_MS;
    let mut kept = 0;
    let mut removed = Vec::new();
    for id in ids {
        let folder = dest.folder(&id);
        let remove = match folder.get(MANIFEST).await {
            Ok(bytes) => match serde_json::from_slice::<Tag>(&bytes) {
                Ok(tag) if tag.scheduled => {
                    kept += 1;
                    kept > keep
                }
                _ => false,
            },
            Err(_) => kept >= keep && id_time_ms(&id).is_some_and(|t| t < day_ago),
        };
        if remove {
            folder.remove_all().await?;
            removed.push(id);
        }
    }
    Ok(removed)
}

/// Backups `list` answers at most (the newest).
pub const LISTED: usize = 100;

/// One backup in a destination, as `list` finds it: its manifest, or none when it is
/// unfinished (still being written, or failed) or its manifest is damaged.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listed {
    pub backup: String,
    pub manifest: Option<Manifest>,
}

/// The newest `LISTED` backups in `dest`, newest first (by when they started; folders not
/// named as backups are left out).
pub async fn list(dest: &Destination) -> Result<Vec<Listed>> {
    let mut ids = backup_ids(dest).await?;
    ids.truncate(LISTED);
    let mut listed = Vec::with_capacity(ids.len());
    for backup in ids {
        let manifest = match dest.folder(&backup).get(MANIFEST).await {
            Ok(bytes) => serde_json::from_slice::<Manifest>(&bytes).ok(),
            Err(_) => None,
        };
        listed.push(Listed { backup, manifest });
    }
    // Ids tell the second a backup started; manifests tell the millisecond.
    listed.sort_by_key(|l| {
        std::cmp::Reverse(
            l.manifest
                .as_ref()
                .map(|m| m.started_ms)
                .or_else(|| id_time_ms(&l.backup))
                .unwrap_or(0),
        )
    });
    Ok(listed)
}

/// When backup `id` was taken (ms since the epoch).
fn id_time_ms(id: &str) -> Option<i64> {
    let at = chrono::NaiveDateTime::parse_from_str(id.get(..15)?, "%Y%m%dT%H%M%S").ok()?;
    Some(at.and_utc().timestamp_millis())
}

/// A new backup (or check) id: its time (UTC) and a random suffix, sorting in time order.
pub fn new_backup_id() -> String {
    use rand::Rng;
    format!(
        "{}-{:06x}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
        rand::rng().random::<u32>() & 0xff_ffff
    )
}

/// Takes a backup of every group to `req.dest`, this node coordinating; `jobs` are this node's
/// own group jobs. Answers the manifest written.
pub(crate) async fn take(
    replicas: &Replicas,
    jobs: &GroupJobs,
    req: &BackupRequest,
) -> Result<Manifest> {
    let active = replicas.active_members();
    if let Some(old) = active
        .iter()
        .find(|n| !FEATURES.iter().all(|f| n.features.iter().any(|h| h == f)))
    {
        return Err(Error::InvalidOperation(format!(
            "node {} runs a build that cannot take part in this backup: upgrade every member first",
            old.id
        )));
    }
    // The destination is checked (and a directory made) before any write waits.
    let id = new_backup_id();
    let folder = Destination::open(&req.dest, jobs.s3())?.folder(&id);
    let members: Vec<NodeId> = active.iter().map(|n| n.id).collect();
    let written = match write_groups(replicas, jobs, &members, &id, req).await {
        Ok(written) => written,
        Err(e) => {
            // The writers still streaming stop, and their uploads are dropped.
            let abort = members.iter().map(|&node| {
                let req = AdminRequest::BackupAbort { backup: id.clone() };
                at(replicas, jobs, node, req, STEP_TIMEOUT)
            });
            join_all(abort).await;
            tracing::warn!(backup = %id, "backup failed: {e}");
            return Err(e);
        }
    };
    jobs.forget(&id);
    // Every member's copies of stored files were held for the backup: they may go now.
    let end = members.iter().map(|&node| {
        let req = AdminRequest::BackupEnd { backup: id.clone() };
        at(replicas, jobs, node, req, STEP_TIMEOUT)
    });
    for (node, ended) in members.iter().zip(join_all(end).await) {
        if let Err(e) = ended {
            tracing::warn!(backup = %id, %node, "ending the backup's hold on copies: {e} (it lapses after a day)");
        }
    }
    // What the manifest names is on disk before the manifest (which makes the backup whole)
    // is; `put` syncs the manifest and its name before the backup is said to be written.
    folder.sync_folders().await?;
    folder
        .put(MANIFEST, serde_json::to_vec_pretty(&written)?)
        .await?;
    metrics::gauge!("basalt_backup_last_success_timestamp_seconds")
        .set(written.finished_ms as f64 / 1000.0);
    let last = LastBackup {
        backup: id.clone(),
        dest: req.dest.clone(),
        started_ms: written.started_ms,
        finished_ms: written.finished_ms,
    };
    let recorded = replicas
        .put_record(
            crate::ids::META_GROUP,
            crate::namespace::Namespace::Cluster,
            LAST_BACKUP_KEY,
            serde_json::to_value(&last)?,
            None,
        )
        .await;
    if let Err(e) = recorded {
        tracing::warn!(backup = %id, "recording the last backup: {e}");
    }
    tracing::info!(backup = %id, dest = %folder.shown(), fence_ms = written.fence_ms, groups = written.groups.len(), "backup written");
    Ok(written)
}

/// The fence, the barriers, the pinned views, then every group's state written: the manifest
/// to write.
async fn write_groups(
    replicas: &Replicas,
    jobs: &GroupJobs,
    members: &[NodeId],
    id: &str,
    req: &BackupRequest,
) -> Result<Manifest> {
    // The leader of each group writes it (a node outside a group does not know its leader).
    let leaders: HashMap<GroupId, NodeId> = replicas
        .led_group_statuses(STEP_TIMEOUT, false)
        .await
        .into_iter()
        .filter_map(|(group, g)| Some((group, g.leader?)))
        .collect();
    let started_ms = now_ms();
    let fence_start = Instant::now();
    let pinned = fenced(replicas, jobs, members, &leaders, id, req).await;
    let fence_ms = fence_start.elapsed().as_millis() as u64;
    metrics::histogram!("basalt_backup_fence_seconds").record(fence_ms as f64 / 1000.0);
    let pinned = pinned?;
    // Every member's fence went up after `fence_start`: while this one had not lowered itself,
    // none had, and no write could slip between a barrier and its group's view.
    if fence_start.elapsed() >= FENCE_TTL {
        return Err(Error::Timeout(format!(
            "backup {id}: pinning every group took {fence_ms} ms, longer than the fence holds"
        )));
    }
    let waits = pinned.iter().map(|&(group, node)| async move {
        let req = AdminRequest::BackupWait {
            backup: id.to_string(),
            group,
        };
        match at(replicas, jobs, node, req, WRITE_TIMEOUT).await? {
            AdminResponse::GroupBackedUp(g) => Ok(g),
            other => Err(unexpected(&other)),
        }
    });
    let groups: Vec<GroupBackup> = join_all(waits).await.into_iter().collect::<Result<_>>()?;
    // The groups were listed from the slot map at the barriers: those above the first ones
    // are its splits' groups.
    let shards = replicas.settings().shards;
    let split_groups = groups
        .iter()
        .map(|g| g.group)
        .filter(|g| g.get() > shards)
        .collect();
    Ok(Manifest {
        format: FORMAT,
        backup: id.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_ms,
        finished_ms: now_ms(),
        fence_ms,
        settings: replicas.settings(),
        scheduled: req.scheduled,
        groups,
        split_groups,
    })
}

/// Raises the fence everywhere, commits the barriers and pins every group's view, then lowers
/// the fence whatever happened: the groups pinned and the node pinning each.
async fn fenced(
    replicas: &Replicas,
    jobs: &GroupJobs,
    members: &[NodeId],
    leaders: &HashMap<GroupId, NodeId>,
    id: &str,
    req: &BackupRequest,
) -> Result<Vec<(GroupId, NodeId)>> {
    let raise = members.iter().map(|&node| {
        let req = AdminRequest::Fence {
            backup: id.to_string(),
            ttl_ms: FENCE_TTL.as_millis() as u64,
        };
        at(replicas, jobs, node, req, STEP_TIMEOUT)
    });
    let raised = join_all(raise)
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>();
    let pinned = match raised {
        Ok(_) => barriers_and_pins(replicas, jobs, members, leaders, id, req).await,
        Err(e) => Err(e),
    };
    let lower = members.iter().map(|&node| {
        let req = AdminRequest::Unfence {
            backup: id.to_string(),
        };
        at(replicas, jobs, node, req, STEP_TIMEOUT)
    });
    for (node, lowered) in members.iter().zip(join_all(lower).await) {
        if let Err(e) = lowered {
            tracing::warn!(backup = %id, %node, "lowering the fence: {e} (it lowers itself)");
        }
    }
    pinned
}

async fn barriers_and_pins(
    replicas: &Replicas,
    jobs: &GroupJobs,
    members: &[NodeId],
    leaders: &HashMap<GroupId, NodeId>,
    id: &str,
    req: &BackupRequest,
) -> Result<Vec<(GroupId, NodeId)>> {
    // Splits, merges and backups exclude each other: one moving objects between the groups'
    // barriers would leave them out of the backup, or in it twice.
    let map = crate::services::splits::map_at_leader(replicas).await?;
    if let Some(s) = map.splits.first() {
        let what = match s.kind {
            crate::slots::MoveKind::Split => "splitting off",
            crate::slots::MoveKind::Merge => "merging into",
        };
        return Err(Error::Conflict(format!(
            "group {} is {what} group {} (`basalt admin slots`): back up once it is done",
            s.parent, s.child
        )));
    }
    let groups: Vec<GroupId> = std::iter::once(crate::ids::META_GROUP)
        .chain(map.data_groups())
        .collect();
    let barrier = |group: GroupId| async move {
        let cmd = Command::BackupBarrier {
            backup: id.to_string(),
        };
        let proposed = replicas.propose(group, cmd).await?;
        // The leader the members reported writes the group: its view is taken after the
        // barrier and before any write that waited at the fence (writes already past the
        // fence may land between, and are in the backup).
        let node = leaders
            .get(&group)
            .copied()
            .or(replicas.leader_of(group))
            .unwrap_or(replicas.node_id());
        if !members.contains(&node) {
            // A leader outside the fence (a node being removed) could take writes meanwhile.
            return Err(Error::Unavailable(format!(
                "group {group} is led by node {node}, which is not an active member: try again once it is not"
            )));
        }
        let job = GroupJob {
            backup: id.to_string(),
            group,
            dest: req.dest.clone(),
            barrier: proposed.log_index,
            rate: req.rate,
        };
        match at(
            replicas,
            jobs,
            node,
            AdminRequest::BackupGroup(job),
            STEP_TIMEOUT,
        )
        .await?
        {
            AdminResponse::Done => Ok((group, node)),
            other => Err(unexpected(&other)),
        }
    };
    let pinned: Vec<(GroupId, NodeId)> = join_all(groups.into_iter().map(barrier))
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    // The map the metadata group held at its barrier is the one the groups were listed by
    // when it is still that one now.
    if crate::services::splits::map_at_leader(replicas).await? != map {
        return Err(Error::Conflict(
            "a split began while the backup's barriers were taken: try again".into(),
        ));
    }
    Ok(pinned)
}

/// Sends `req` to `node`, answering it here when that is this node.
async fn at(
    replicas: &Replicas,
    jobs: &GroupJobs,
    node: NodeId,
    req: AdminRequest,
    timeout: Duration,
) -> Result<AdminResponse> {
    if node == replicas.node_id() {
        return tokio::time::timeout(timeout, answer(replicas, jobs, req))
            .await
            .map_err(|_| Error::Timeout("backup step".into()))?;
    }
    replicas.router().admin(node, &req, timeout).await
}

/// Answers a backup step's admin request on this node (`cluster` hands them here).
pub(crate) async fn answer(
    replicas: &Replicas,
    jobs: &GroupJobs,
    req: AdminRequest,
) -> Result<AdminResponse> {
    match req {
        AdminRequest::Fence { backup, ttl_ms } => {
            replicas
                .fence()
                .raise(&backup, Duration::from_millis(ttl_ms))?;
            // From before the barrier until the backup ends, no copy of a stored file goes.
            jobs.files().copies().hold(&backup, WRITE_TIMEOUT);
            Ok(AdminResponse::Done)
        }
        AdminRequest::Unfence { backup } => {
            replicas.fence().lower(&backup);
            Ok(AdminResponse::Done)
        }
        AdminRequest::BackupGroup(job) => {
            jobs.start(replicas, job).await?;
            Ok(AdminResponse::Done)
        }
        AdminRequest::BackupWait { backup, group } => Ok(AdminResponse::GroupBackedUp(
            jobs.wait(&backup, group).await?,
        )),
        AdminRequest::BackupAbort { backup } => {
            replicas.fence().lower(&backup);
            jobs.abort(&backup);
            jobs.files().copies().release(&backup);
            Ok(AdminResponse::Done)
        }
        AdminRequest::BackupEnd { backup } => {
            jobs.files().copies().release(&backup);
            Ok(AdminResponse::Done)
        }
        AdminRequest::Status => Ok(AdminResponse::Status(replicas.status())),
        other => Err(Error::InvalidOperation(format!(
            "{} is not a backup step",
            other.name()
        ))),
    }
}

fn unexpected(r: &AdminResponse) -> Error {
    Error::Internal(format!("unexpected answer to a backup step: {r:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_backup_ids_and_others_are_not() {
        assert!(is_backup_id(&new_backup_id()));
        for other in [
            "",
            "photos",
            "20261129T061502Z-3fa9cX",
            "20261129T061502Z3fa9c21",
        ] {
            assert!(!is_backup_id(other), "{other}");
        }
    }

    #[test]
    fn a_directory_opened_to_read_is_not_made_and_one_opened_to_write_is() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("backups");
        let spec = missing.to_str().unwrap();
        assert!(Destination::open_existing(spec, None).unwrap().is_none());
        assert!(!missing.exists());
        assert!(Destination::open(spec, None).is_ok());
        assert!(missing.is_dir());
        assert!(Destination::open_existing(spec, None).unwrap().is_some());
    }

    #[tokio::test]
    async fn pruning_keeps_the_newest_scheduled_backups_and_what_was_not_scheduled() {
        let dir = tempfile::tempdir().unwrap();
        let dest = Destination::open(dir.path().to_str().unwrap(), None).unwrap();
        let scheduled = [
            "20261101T030000Z-000001",
            "20261102T030000Z-000002",
            "20261103T030000Z-000003",
            "20261104T030000Z-000004",
        ];
        let tag = br#"{"scheduled": true}"#.to_vec();
        for id in scheduled {
            dest.folder(id).put(MANIFEST, tag.clone()).await.unwrap();
            dest.folder(id)
                .put("g00000.state.zst", vec![1])
                .await
                .unwrap();
        }
        // By hand, older than every scheduled one: kept.
        let manual = "20261001T120000Z-0000cc";
        dest.folder(manual)
            .put(MANIFEST, b"{}".to_vec())
            .await
            .unwrap();
        // Unfinished: one older than the kept ones (and a day), one newer (maybe being written).
        let old = "20261101T000000Z-0000aa";
        let new = new_backup_id();
        for id in [old, new.as_str()] {
            dest.folder(id)
                .put("g00000.state.zst", vec![1])
                .await
                .unwrap();
        }
        dest.folder("photos").put("cat.jpg", vec![1]).await.unwrap();
        let mut removed = prune(&dest, 2).await.unwrap();
        removed.sort();
        assert_eq!(removed, vec![old, scheduled[0], scheduled[1]]);
        let mut left = dest.folders().await.unwrap();
        left.sort();
        let mut expected = vec![manual, scheduled[2], scheduled[3], new.as_str(), "photos"];
        expected.sort();
        assert_eq!(left, expected);
    }
}
