//! Groups merged away (decisions/0038): once the slot map lists a group as retired, this node
//! stops its replica of it, erases its state (objects, records, Raft log and vote, snapshot
//! files) and answers for it no more — a request for it is refused `Moved`, so that a node
//! routing by an older map takes up the newer one; its id is never taken again. The parent
//! (`Replicas`) keeps a flag per group id; `bootstrap` calls `retire_merged` each time it
//! takes up the map.

use std::sync::atomic::Ordering;

use super::Replicas;
use crate::error::{Error, Result};
use crate::ids::GroupId;

impl Replicas {
    /// Whether this node retired `group` (it keeps no replica of it).
    pub(crate) fn is_retired(&self, group: GroupId) -> bool {
        self.inner
            .retired
            .get(group.get() as usize)
            .is_some_and(|f| f.load(Ordering::Acquire))
    }

    /// What a request for a retired group is answered: `Moved` at the epoch of this node's map
    /// (one that no longer names the group), for the sender to route by it.
    pub(crate) fn retired_error(&self, group: GroupId) -> Error {
        let epoch = self.slot_map().epoch;
        tracing::debug!(%group, epoch, "a request for a group merged away");
        Error::Moved { epoch }
    }

    /// Stops and erases this node's replica of every group the slot map lists as retired that
    /// it has not retired yet: the replica's stop is awaited (its state machine's work too,
    /// `erase::stop_replica`), the erasing runs on a blocking thread, not awaited. A node that
    /// starts with a retired group's state (it was down during the merge) erases it here too.
    pub async fn retire_merged(&self) {
        let map = self.slot_map();
        for &group in &map.retired {
            let Some(flag) = self.inner.retired.get(group.get() as usize) else {
                continue;
            };
            if flag.swap(true, Ordering::AcqRel) {
                continue;
            }
            let Ok((cell, making)) = self.group_cell(group) else {
                continue;
            };
            let _making = making.lock().await;
            let Some(replica) = cell.load_full() else {
                // No replica here: nothing to erase (a node started after it was erased).
                continue;
            };
            if let Err(e) = self.stop_replica(group, cell, &replica).await {
                // Its state stays until the next start erases it.
                tracing::error!(%group, "stopping a retired group: {e}");
                continue;
            }
            let store = self.store();
            let snapshots = self.inner.maker.snapshots_dir.join(format!("g{group}"));
            tokio::task::spawn_blocking(move || {
                let erased = (|| -> Result<()> {
                    store.erase_group(group)?;
                    match std::fs::remove_dir_all(&snapshots) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
                        _ => Ok(()),
                    }
                })();
                match erased {
                    Ok(()) => {
                        tracing::info!(%group, "retired a group merged away: its replica here is erased");
                        metrics::counter!("basalt_groups_retired_total").increment(1);
                    }
                    // Its state stays until the next start erases it.
                    Err(e) => tracing::error!(%group, "erasing a retired group: {e}"),
                }
            });
        }
    }
}
