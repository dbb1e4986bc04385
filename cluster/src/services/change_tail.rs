//! Following one group's changes as they commit.
//!
//! `follow_local` reads this node's replica page by page and waits for it to apply more (what a
//! peer's `WatchChanges` stream serves, and the local source of `follow_changes`); a replica
//! that stops vouching for being current (`replicas::freshness`) for `STALE_REPLICA` — removed
//! from the group without knowing it, or cut off from its leader — stops serving.
//! `follow_changes` is what the node's realtime hub runs per group: from this node's replica
//! while it is a current member of the group, else from a peer's (its leader first, then the
//! group's other members, then every node), moving to another source whenever one fails and
//! resuming after the last position it passed on. A position no source keeps any more is reported as a `Gap`, after which it goes
//! on from the oldest kept position (replicas cut their logs at the same log indexes, so one
//! source's gap is every caught-up source's).

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId};
use crate::replicas::Replicas;

use crate::changes::{log, Change, RawPage};

/// Most changes a page carries.
pub const PAGE_CHANGES: usize = 512;
/// A source with nothing new still answers this often, so a follower knows it is alive.
const KEEPALIVE: Duration = Duration::from_secs(2);
/// A peer's stream that said nothing for this long is given up.
const SILENT_PEER: Duration = Duration::from_secs(6);
/// Pause after every source failed, before trying them again.
const RETRY_PAUSE: Duration = Duration::from_millis(250);
/// A replica that has not vouched for being current for this long (removed from the group
/// without knowing it, or cut off from its leader) stops serving its changes.
const STALE_REPLICA: Duration = Duration::from_secs(5);

/// What `follow` passes on, in order.
#[derive(Debug)]
pub enum TailEvent {
    /// The group's changes after the previous event's position up to `upto`.
    Changes {
        group: GroupId,
        upto: u64,
        changes: Vec<Change>,
    },
    /// Changes after `after` are no longer kept by any source; following goes on after
    /// `resume_after`.
    Gap {
        group: GroupId,
        after: u64,
        resume_after: u64,
    },
}

impl Replicas {
    /// Whether this node's replica of `group` is a member of it (a voter or learner) in its
    /// own view, and running.
    pub fn holds_member_replica(&self, group: GroupId) -> bool {
        let Ok(raft) = self.group(group) else {
            return false;
        };
        let me = self.node_id();
        let metrics = raft.metrics();
        let m = metrics.borrow_watched();
        let membership = m.membership_config.membership();
        m.running_state.is_ok()
            && (membership.voter_ids().any(|v| v == me)
                || membership.learner_ids().any(|l| l == me))
    }

    /// Reads one page of `group`'s changes from this node's replica.
    pub(crate) async fn local_changes(
        &self,
        group: GroupId,
        after: Option<u64>,
    ) -> Result<RawPage> {
        let store = self.store();
        tokio::task::spawn_blocking(move || log::read_page(&store, group, after, PAGE_CHANGES))
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
    }

    /// Sends pages of `group`'s changes after `after` (none: from where the replica stands) to
    /// `tx` as this node's replica applies them, until `tx` closes (Ok), a page says `gap`
    /// (sent, then Ok), or the replica stops being a member (Err).
    pub(crate) async fn follow_local(
        &self,
        group: GroupId,
        mut after: Option<u64>,
        tx: &mpsc::Sender<Result<RawPage>>,
    ) -> Result<()> {
        let mut metrics = self.group(group)?.metrics();
        let mut shutdown = self.shutdown_signal();
        let mut said = tokio::time::Instant::now();
        let mut stale_since: Option<tokio::time::Instant> = None;
        loop {
            if !self.holds_member_replica(group) {
                return Err(Error::Unavailable(format!(
                    "this node holds no replica of group {group}"
                )));
            }
            let page = self.local_changes(group, after).await?;
            // A replica with nothing new must still vouch for being current (checked only then:
            // one that applies entries is being replicated to).
            if page.entries.is_empty() && !self.replica_is_current(group) {
                let since = *stale_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= STALE_REPLICA {
                    return Err(Error::Unavailable(format!(
                        "this node's replica of group {group} is not current"
                    )));
                }
            } else {
                stale_since = None;
            }
            let (gap, full, upto) = (page.gap, page.entries.len() >= PAGE_CHANGES, page.upto);
            let news = gap || !page.entries.is_empty() || after != Some(upto);
            if news || said.elapsed() >= KEEPALIVE {
                if tx.send(Ok(page)).await.is_err() {
                    return Ok(());
                }
                said = tokio::time::Instant::now();
            }
            if gap {
                return Ok(());
            }
            after = Some(upto);
            if full {
                continue;
            }
            let applied_more = async {
                loop {
                    let applied = metrics
                        .borrow_watched()
                        .last_applied
                        .map(|l| l.index)
                        .unwrap_or(0);
                    if applied > upto || metrics.changed().await.is_err() {
                        return;
                    }
                }
            };
            tokio::select! {
                () = applied_more => {}
                () = tokio::time::sleep_until(said + KEEPALIVE) => {}
                () = tx.closed() => return Ok(()),
                _ = shutdown.changed() => return Err(Error::Unavailable("shutting down".into())),
            }
        }
    }

    /// Where `follow` may read `group` from, best first.
    fn change_sources(&self, group: GroupId) -> Vec<Option<NodeId>> {
        let me = self.node_id();
        let mut out: Vec<Option<NodeId>> = Vec::new();
        let local = self.holds_member_replica(group);
        // This node's replica first while it vouches for being current, else last.
        let current = local && self.replica_is_current(group);
        if current {
            out.push(None);
        }
        let active: Vec<NodeId> = {
            let mut ids: Vec<NodeId> = self.member_addrs().into_keys().collect();
            ids.sort();
            ids
        };
        let desired =
            crate::services::placement::desired_voters(group, &active, self.settings().replicas);
        for n in self
            .leader_of(group)
            .into_iter()
            .chain(desired)
            .chain(active)
        {
            if n != me && !out.contains(&Some(n)) {
                out.push(Some(n));
            }
        }
        if local && !current {
            out.push(None);
        }
        out
    }

    /// Follows `group`'s changes after `after` (none: from where its sources stand now) until
    /// `tx` closes or the node shuts down; see the module documentation.
    pub async fn follow_changes(
        &self,
        group: GroupId,
        after: Option<u64>,
        tx: mpsc::Sender<TailEvent>,
    ) {
        let mut after = after;
        let mut shutdown = self.shutdown_signal();
        loop {
            // A group merged away writes no more changes (its last ones were before its
            // slots froze): its follower ends.
            if self.slot_map().retired.contains(&group) {
                tracing::debug!(%group, "following changes: the group was merged away");
                return;
            }
            let mut cut = None;
            for source in self.change_sources(group) {
                if tx.is_closed() || *shutdown.borrow() {
                    return;
                }
                match self.follow_source(group, source, &mut after, &tx).await {
                    SourceEnd::Closed => return,
                    SourceEnd::Gap(floor) => {
                        cut = Some(floor);
                        break;
                    }
                    SourceEnd::Failed(e) => {
                        tracing::debug!(%group, ?source, "following changes: {e}");
                    }
                }
            }
            // Every replica cuts its log at the same indexes: one that no longer holds the
            // position shows where every replica that applied as far stands.
            if let Some(floor) = cut {
                if let Some(after_was) = after {
                    let resume_after = floor.saturating_sub(1).max(after_was);
                    let gap = TailEvent::Gap {
                        group,
                        after: after_was,
                        resume_after,
                    };
                    if tx.send(gap).await.is_err() {
                        return;
                    }
                    after = Some(resume_after);
                    continue;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(RETRY_PAUSE) => {}
                () = tx.closed() => return,
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Follows `group` from one source (None: this node's replica) until it fails, says
    /// `gap`, or `tx` closes, passing on its pages and moving `after` past them.
    async fn follow_source(
        &self,
        group: GroupId,
        source: Option<NodeId>,
        after: &mut Option<u64>,
        tx: &mpsc::Sender<TailEvent>,
    ) -> SourceEnd {
        let (page_tx, mut pages) = mpsc::channel::<Result<RawPage>>(4);
        let from = *after;
        let this = self.clone();
        let reader = tokio::spawn(async move {
            let r = match source {
                None => this.follow_local(group, from, &page_tx).await,
                Some(node) => {
                    this.router()
                        .watch_changes(node, group, from, &page_tx)
                        .await
                }
            };
            if let Err(e) = r {
                let _ = page_tx.send(Err(e)).await;
            }
        });
        let _stop_reader = AbortOnDrop(reader);
        loop {
            let next = tokio::select! {
                p = tokio::time::timeout(SILENT_PEER, pages.recv()) => p,
                () = tx.closed() => return SourceEnd::Closed,
            };
            let page = match next {
                Err(_) => return SourceEnd::Failed(Error::Timeout("a silent source".into())),
                Ok(None) => return SourceEnd::Failed(Error::Unavailable("source ended".into())),
                Ok(Some(Err(e))) => return SourceEnd::Failed(e),
                Ok(Some(Ok(page))) => page,
            };
            if page.gap {
                return SourceEnd::Gap(page.floor);
            }
            // A source behind the position already passed on has nothing new yet.
            if after.is_some_and(|a| page.upto <= a) {
                continue;
            }
            let changes = match page.decode(group) {
                Ok(c) => c,
                Err(e) => return SourceEnd::Failed(e),
            };
            let changes: Vec<Change> = changes
                .into_iter()
                .filter(|c| after.is_none_or(|a| c.index > a))
                .collect();
            *after = Some(page.upto);
            let event = TailEvent::Changes {
                group,
                upto: page.upto,
                changes,
            };
            if tx.send(event).await.is_err() {
                return SourceEnd::Closed;
            }
        }
    }
}

enum SourceEnd {
    Closed,
    Gap(u64),
    Failed(Error),
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
