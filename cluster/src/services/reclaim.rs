//! Giving back, on this node, the space that deletes free. RocksDB keeps what a delete removed
//! until a compaction rewrites its range, and a group's Raft log keeps every entry (a large
//! object's create among them) until a snapshot lets it be purged — which `--snapshot-logs`
//! counts in entries, not bytes. Every `EVERY`, for each group this node holds:
//! - when its applied entries deleted at least `FREED_TO_COMPACT` of its state, or a quarter of
//!   it (at least `PRESSED_FREED`: a split's parent drops half), since its range was last
//!   compacted (`Store::note_freed`: objects deleted, changes cut) and the disk has room for the
//!   whole range and a preallocated output file, the range is compacted;
//! - when its log holds at least `LOG_TO_SNAPSHOT` in the store's files, more than twice its
//!   state (which a snapshot writes again) and the disk has room for four times that, the group is
//!   snapshotted, its log purged up to the snapshot (the `--keep-logs` entries behind it too: a
//!   follower that far behind gets the snapshot) and the log's range compacted.
//!
//! While the disk is low or critical (`disk::DiskWatch`) both thresholds drop to
//! `PRESSED_FREED` and `PRESSED_LOG`, so the room a delete frees comes back within seconds. A
//! group is reclaimed at most once per `MIN_GAP`, and not while the disk has less than
//! `ROOM_TO_WORK` free (a compaction or a snapshot writes before it frees).
//! Neighbours: `cluster::bootstrap` spawns `run`; `replicas` holds the groups' Raft and the
//! store.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;

use crate::disk::{DiskLevel, DiskWatch};
use crate::ids::GroupId;
use crate::replicas::{GroupRaft, Replicas};
use crate::storage::keys::{self, CF_RAFT_LOG, CF_SM};
use crate::storage::Store;

const EVERY: Duration = Duration::from_secs(2);
const MIN_GAP: Duration = Duration::from_secs(20);
const FREED_TO_COMPACT: u64 = 256 << 20;
const LOG_TO_SNAPSHOT: u64 = 256 << 20;
const PRESSED_FREED: u64 = 16 << 20;
const PRESSED_LOG: u64 = 8 << 20;
const ROOM_TO_WORK: u64 = 32 << 20;
/// What RocksDB preallocates for a file it writes (a little over its 64 MiB target).
const OUTPUT_FILE: u64 = 72 << 20;
/// How long a snapshot may take before the log is purged up to it.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(60);

/// Reclaims this node's groups until shutdown.
pub async fn run(replicas: Replicas, disk: Arc<DiskWatch>) {
    let mut shutdown = replicas.shutdown_signal();
    let mut last: HashMap<GroupId, Instant> = HashMap::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = shutdown.changed() => return,
        }
        let status = disk.status();
        if status.free_bytes < ROOM_TO_WORK && status.total_bytes > 0 {
            continue;
        }
        let pressed = status.level != DiskLevel::Ok;
        let store = replicas.store();
        let groups: Vec<(GroupId, GroupRaft)> = replicas
            .groups()
            .map(|(g, raft)| (g, raft.clone()))
            .collect();
        for (group, raft) in groups {
            if last.get(&group).is_some_and(|t| t.elapsed() < MIN_GAP) {
                continue;
            }
            let (freed_mark, log_mark) = match pressed {
                true => (PRESSED_FREED, PRESSED_LOG),
                false => (FREED_TO_COMPACT, LOG_TO_SNAPSHOT),
            };
            let log_bytes = range_bytes(&store, CF_RAFT_LOG, group);
            let freed = store.freed(group);
            // Deletes that freed a quarter of the range's state are given back too (a split's
            // parent drops half of it): its files, and its size as splits measure it, shrink.
            let freed_mark = if freed >= PRESSED_FREED && freed < freed_mark {
                freed_mark.min((range_bytes(&store, CF_SM, group) / 4).max(PRESSED_FREED))
            } else {
                freed_mark
            };
            if freed < freed_mark && log_bytes < log_mark {
                continue;
            }
            last.insert(group, Instant::now());
            let started = Instant::now();
            // A compaction writes what the range keeps before it removes its old files: only
            // with room for the whole range and a preallocated output file, measured now.
            let state = range_bytes(&store, CF_SM, group);
            let mut did = freed >= freed_mark
                && state.saturating_add(ROOM_TO_WORK + OUTPUT_FILE)
                    <= disk.fresh_status().free_bytes;
            if did {
                compact(&store, group, CF_SM, freed).await;
            }
            // A snapshot writes the group's whole state (uncompressed, beside the last one)
            // before the log it lets go is purged: worth it only for a log larger than twice
            // that state, with room for four times it.
            let state = range_bytes(&store, CF_SM, group);
            let room = disk.fresh_status().free_bytes;
            if log_bytes >= log_mark
                && log_bytes > state.saturating_mul(2)
                && state.saturating_mul(4).saturating_add(ROOM_TO_WORK) <= room
            {
                snapshot_and_purge(group, &raft).await;
                compact(&store, group, CF_RAFT_LOG, 0).await;
                did = true;
            }
            if !did {
                continue;
            }
            tracing::info!(
                %group,
                freed,
                log_bytes,
                state,
                ms = started.elapsed().as_millis() as u64,
                "gave back the space deletes freed"
            );
        }
    }
}

/// Compacts `group`'s range of column family `cf` (`freed`: what its entries deleted).
async fn compact(store: &Arc<Store>, group: GroupId, cf: &'static str, freed: u64) {
    let st = Arc::clone(store);
    let compacted = tokio::task::spawn_blocking(move || {
        if freed > 0 {
            st.take_freed(group);
        }
        st.compact_range(cf, &keys::group_prefix(group), &keys::group_end(group))
    })
    .await;
    match compacted {
        Ok(Ok(())) => metrics::counter!("basalt_reclaims_total").increment(1),
        Ok(Err(e)) => tracing::warn!(%group, cf, "compacting freed space: {e}"),
        Err(e) => tracing::warn!(%group, cf, "compacting freed space: {e}"),
    }
}

/// Approximate bytes of `group`'s range of `cf` in the store's files.
fn range_bytes(store: &Store, cf: &str, group: GroupId) -> u64 {
    store
        .approximate_range_size(cf, &keys::group_prefix(group), &keys::group_end(group))
        .unwrap_or(0)
}

/// Snapshots `group` (when it applied anything since its last snapshot) and purges its log up
/// to the snapshot.
async fn snapshot_and_purge(group: GroupId, raft: &GroupRaft) {
    let metrics = raft.metrics().borrow_watched().clone();
    let applied = metrics.last_applied.map(|l| l.index).unwrap_or(0);
    let mut snapshot = metrics.snapshot.map(|l| l.index).unwrap_or(0);
    if applied > snapshot {
        if let Err(e) = raft.trigger().snapshot().await {
            tracing::warn!(%group, "snapshot trigger failed: {e}");
            return;
        }
        let deadline = Instant::now() + SNAPSHOT_WAIT;
        while snapshot < applied && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let m = raft.metrics().borrow_watched().clone();
            snapshot = m.snapshot.map(|l| l.index).unwrap_or(0);
        }
    }
    if snapshot == 0 {
        return;
    }
    if let Err(e) = raft.trigger().purge_log(snapshot).await {
        tracing::warn!(%group, "log purge failed: {e}");
        return;
    }
    // The purge runs in Raft's own time: give it a moment before the log's range is compacted.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let purged = raft.metrics().borrow_watched().purged.map(|l| l.index);
        if purged.is_some_and(|p| p >= snapshot) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
