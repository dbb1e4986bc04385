//! Replicas removed from their group (decisions/0039): once `services::departures` is sure
//! this node's replica of a data group was removed — the group's leader, at a term no older
//! than this replica's, has applied a configuration without this node — it is stopped and its
//! state erased (objects, records, Raft log, snapshot files), so that replicas moved away by
//! the rebalancer give their disk back. Two small records stay in its place: the leader's vote,
//! so that no leader of an older term (one cut off before the removal, which may still count
//! this node a voter) is followed again, and a mark (`keys::META_ERASED`, the index of the
//! configuration that removed it) under which the replica grants no vote until a newer
//! configuration makes it a voter again — an erased replica knows no log, and a candidate of
//! the configuration it was removed from must not win with its vote. Added back (a learner, by
//! the rebalancer), its replica is made anew (`ensure_group`) and catches up from the leader.
//! The parent (`Replicas`) keeps the cells and a lock per group that makes and erases replicas
//! one at a time; `retire` erases groups merged away.

use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use openraft::RaftMetrics;

use super::Replicas;
use crate::admin::GroupStatus;
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId, META_GROUP};
use crate::raft::{TypeConfig, Vote};
use crate::storage::keys::{meta_key, CF_RAFT_META, META_ERASED, META_VOTE};

/// How long the group's leader is given to confirm the removal once the replica stopped.
const CONFIRM_WITHIN: Duration = Duration::from_secs(2);
/// How long a removed replica's Raft is given to stop.
const STOP_WITHIN: Duration = Duration::from_secs(30);
/// How long its state machine's work (an apply, a snapshot build or install under way) is
/// given to end once the Raft stopped.
const SETTLE_WITHIN: Duration = Duration::from_secs(120);

/// A replica's removal, as its group's leader reported it, and what the replica was when
/// that was seen: a replica that moved on since (heard from a leader) is not erased.
#[derive(Debug, Clone, Copy)]
pub struct Removal {
    /// The group's leader, and its term.
    pub leader: NodeId,
    pub term: u64,
    /// The log index of the leader's configuration without this node (committed).
    pub config_at: u64,
    /// The replica's term and last log index when its removal was last confirmed (the look
    /// that decided to erase it).
    pub seen_term: u64,
    pub seen_last_log: u64,
}

impl Removal {
    /// The leader's vote, as a follower of it holds it.
    fn leader_vote(&self) -> Vote {
        Vote::new_committed(self.term, self.leader)
    }

    /// Whether the replica is still where it was when the removal was seen: no newer term,
    /// no entry appended, no vote past the leader's.
    fn still_holds(&self, m: &RaftMetrics<TypeConfig>) -> bool {
        m.current_term <= self.seen_term
            && m.last_log_index.unwrap_or(0) <= self.seen_last_log
            && matches!(
                m.vote.partial_cmp(&self.leader_vote()),
                Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
            )
    }
}

impl Replicas {
    /// Stops and erases this node's replica of `group`, removed from the group as `removal`
    /// says (the caller made sure: `services::departures`). The metadata group (every node
    /// reads it locally) and groups merged away (`retire`) are not erased here. Whether a
    /// replica was erased.
    /// `still_removed` is asked of the leader's status once more after the replica stopped: a
    /// replica added back meanwhile is kept (made again on the leader's next message).
    pub(crate) async fn erase_removed(
        &self,
        group: GroupId,
        removal: &Removal,
        still_removed: impl Fn(&GroupStatus) -> bool,
    ) -> Result<bool> {
        if group == META_GROUP || self.is_retired(group) {
            return Ok(false);
        }
        let (cell, making) = self.group_cell(group)?;
        let _making = making.lock().await;
        if *self.inner.shutdown.borrow() {
            return Ok(false);
        }
        let Some(replica) = cell.load_full() else {
            return Ok(false);
        };
        if !removal.still_holds(&replica.raft.metrics().borrow_watched()) {
            return Ok(false);
        }
        // The mark first: from here the replica grants no vote (its configuration is not
        // newer than the one that removed it), whatever happens next.
        let store = self.store();
        let mark = crate::encoding::encode(&removal.config_at)?;
        blocking(move || {
            let mut batch = crate::storage::WriteBatch::default();
            batch.put_cf(store.cf(CF_RAFT_META)?, meta_key(group, META_ERASED), mark);
            store.write(batch, true)
        })
        .await?;
        // From here a request for the group finds no replica on this node (`NotLeader`, sent
        // to the members in turn), and a peer's message makes a new one only once the lock is
        // let go and the old one's state machine is done (`ensure_group`): from the erased
        // state, or from the state as it is when the erasure is given up.
        self.stop_replica(group, cell, &replica).await?;
        let led = self.led_group_statuses(CONFIRM_WITHIN, false).await;
        let confirmed = led.get(&group).is_some_and(still_removed);
        if !confirmed || !removal.still_holds(&replica.raft.metrics().borrow_watched()) {
            tracing::info!(%group, "a removed replica may have been added back as it stopped: kept");
            self.make_into(group, cell).await?;
            return Ok(false);
        }
        let vote = crate::encoding::encode(&removal.leader_vote())?;
        let mark = crate::encoding::encode(&removal.config_at)?;
        let store = self.store();
        let snapshots = self.inner.maker.snapshots_dir.join(format!("g{group}"));
        // The snapshot files first: a crash before the state is erased leaves a replica whose
        // state is whole (and still marked), erased again by a later look.
        let erased = blocking(move || {
            remove_dir_synced(&snapshots)?;
            store.erase_replica(group, &[(META_VOTE, vote), (META_ERASED, mark)])
        })
        .await;
        if let Err(e) = erased {
            // Nothing of the state was erased (one batch): the replica runs again, for a later
            // look to erase.
            self.make_into(group, cell).await?;
            return Err(e);
        }
        tracing::info!(
            %group,
            leader = %removal.leader,
            term = removal.term,
            "this node's replica was removed from the group: stopped and erased"
        );
        metrics::counter!("basalt_replicas_erased_total").increment(1);
        let store = self.store();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = store.compact_group(group) {
                tracing::warn!(%group, "compacting an erased replica's range: {e}");
            }
        });
        Ok(true)
    }

    /// Takes `group`'s replica (`replica`, in `cell`) away and stops it: its Raft, then what
    /// its state machine still does (openraft's shutdown does not wait for an apply, a snapshot
    /// build or an install under way; each holds the state machine's token), so that nothing
    /// writes the group's state after this returns. The caller holds the group's lock. Given
    /// up after `STOP_WITHIN` and `SETTLE_WITHIN` (a full disk holds writes back): no new
    /// replica is made meanwhile (`settling`).
    pub(super) async fn stop_replica(
        &self,
        group: GroupId,
        cell: &arc_swap::ArcSwapOption<super::group_maker::Replica>,
        replica: &super::group_maker::Replica,
    ) -> Result<()> {
        if let Some(settling) = self.inner.settling.get(group.get() as usize) {
            *settling.lock().unwrap_or_else(|p| p.into_inner()) = replica.state_machine.clone();
        }
        cell.store(None);
        match tokio::time::timeout(STOP_WITHIN, replica.raft.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(%group, "stopping a replica: {e}"),
            Err(_) => {
                return Err(Error::Timeout(format!(
                    "stopping this node's replica of group {group}"
                )))
            }
        }
        let settled = Instant::now() + SETTLE_WITHIN;
        while replica.state_machine.strong_count() > 0 {
            if Instant::now() > settled {
                return Err(Error::Timeout(format!(
                    "this node's replica of group {group} still writing its state"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Whether a replica of `group` stopped by `stop_replica` may still write its state.
    pub(super) fn settling(&self, group: GroupId) -> bool {
        self.inner
            .settling
            .get(group.get() as usize)
            .is_some_and(|s| s.lock().unwrap_or_else(|p| p.into_inner()).strong_count() > 0)
    }

    /// Whether this node's replica of `group` may grant votes: not when it was erased after
    /// its removal (`erase_removed`), or is being erased, unless a configuration newer than
    /// the one that removed it makes this node a voter again. A store that cannot say refuses.
    pub(crate) fn may_vote_in(&self, group: GroupId) -> bool {
        let me = self.node_id();
        let removed_at: u64 = match self
            .inner
            .store
            .get(CF_RAFT_META, &meta_key(group, META_ERASED))
            .and_then(|v| v.map(|b| crate::encoding::decode(&b)).transpose())
        {
            Ok(None) => return true,
            Ok(Some(at)) => at,
            Err(e) => {
                tracing::warn!(%group, "reading the erased mark: {e}");
                return false;
            }
        };
        self.group_metrics(group, |m| {
            let config = &m.membership_config;
            config
                .log_id()
                .as_ref()
                .is_some_and(|l| l.index > removed_at)
                && config.membership().voter_ids().any(|v| v == me)
        })
        .unwrap_or(false)
    }
}

/// Runs `work` on a blocking thread.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
}

/// Removes `dir` and everything in it, and syncs its parent so that the removal survives a
/// crash; a missing one is removed already.
fn remove_dir_synced(dir: &std::path::Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    if let Some(parent) = dir.parent() {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}
