//! Whether this node's replica of a group is current enough to answer a read alone, without a
//! read-index round through the leader (decisions/0011). Used for the reads every logged-in
//! request makes (the session check); the writes such a read must not miss settle on every
//! member before they answer (`settle`), and a replica vouches for itself only while that rule
//! covers it:
//!
//! - it is a member of the group in its own view (settling skips a node that is not), and its
//!   own node record does not say `Removed` (a drain settles that record on every member of
//!   the metadata group before it moves a replica, so a drained node stops vouching before a
//!   writer's view stops listing it),
//! - it has applied everything the leader last told it is committed,
//! - and it heard from the leader within `lease` (a follower: an accepted append or heartbeat,
//!   noted by the peer service; the leader: a quorum's acknowledgement; a group with one voter
//!   needs none).
//!
//! A settling write waits at most `LeaderContact::settle_timeout` (3 s by default), longer than
//! the lease plus the deadline of a Raft message (one heartbeat interval): a member that has not
//! applied it by then has either applied it since, or stopped vouching for itself. Settling
//! also counts a member that does not vouch for itself when asked (`GroupStatus::current`).

use openraft::async_runtime::WatchReceiver;
use openraft::{Instant as _, ServerState};

use crate::admin::{NodeRecord, NodeState};
use crate::ids::GroupId;
use crate::namespace::Namespace;

use super::Replicas;

impl Replicas {
    /// Notes that the leader of `group` reached this replica (an append or heartbeat it
    /// accepted).
    pub(crate) fn note_leader_contact(&self, group: GroupId) {
        self.inner.contact.note(group);
    }

    /// Notes contact with the leader of `group` through an append answered `age` after the
    /// leader sent it, when that is within a Raft message's deadline (one heartbeat interval,
    /// what a single call may take): an older one may come from a leader since deposed.
    pub(crate) fn note_leader_contact_within(&self, group: GroupId, age: std::time::Duration) {
        self.inner.contact.note_heard(group);
        match age <= self.inner.contact.heartbeat() {
            true => self.inner.contact.note(group),
            false => metrics::counter!("basalt_raft_late_appends_total").increment(1),
        }
    }

    /// Whether this node's own record (on its replica of the metadata group) marks it removed.
    fn removed(&self) -> bool {
        self.local_meta_record(Namespace::Node, &self.node_id().to_string())
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value::<NodeRecord>(v).ok())
            .is_some_and(|r| r.state == NodeState::Removed)
    }

    /// How long ago this node last heard from `group`'s leader: the last quorum answer when it
    /// leads (nothing to hear for a group of one voter), else the leader's last append.
    pub fn leader_heard(&self, group: GroupId) -> Option<std::time::Duration> {
        let raft = self.group(group).ok()?;
        let me = self.node_id();
        let leads = {
            let metrics = raft.metrics();
            let m = metrics.borrow_watched();
            if m.current_leader == Some(me) {
                let alone = m.membership_config.membership().voter_ids().eq([me]);
                // A leader no quorum answered yet: since it was first seen leading this term.
                Some(match alone {
                    true => Some(std::time::Duration::ZERO),
                    false => Some(match m.last_quorum_acked.as_ref() {
                        Some(acked) => acked.elapsed(),
                        None => self.inner.contact.leading_for(group, m.current_term),
                    }),
                })
            } else {
                None
            }
        };
        match leads {
            Some(heard) => heard,
            None => self.inner.contact.since(group),
        }
    }

    /// Whether this node's replica of `group` is current enough to answer a read alone (see
    /// the module documentation).
    pub fn replica_is_current(&self, group: GroupId) -> bool {
        // Read before borrowing the metrics: openraft cannot publish while they are borrowed.
        !self.removed() && self.replica_caught_up(group)
    }

    /// Whether this node's replica of `group` is a member that has applied what the leader
    /// last told it is committed and heard from it within the lease: the rules above but the
    /// node's own record (a node being removed still acts on what its replicas hold).
    pub(crate) fn replica_caught_up(&self, group: GroupId) -> bool {
        let Ok(raft) = self.group(group) else {
            return false;
        };
        let me = self.node_id();
        let metrics = raft.metrics();
        let m = metrics.borrow_watched();
        if m.running_state.is_err() {
            return false;
        }
        let membership = m.membership_config.membership();
        let voters: Vec<_> = membership.voter_ids().collect();
        if !voters.contains(&me) && !membership.learner_ids().any(|l| l == me) {
            return false;
        }
        let caught_up = match (&m.last_applied, &m.cluster_committed) {
            (Some(applied), Some(committed)) => applied.index >= committed.index,
            _ => false,
        };
        if !caught_up {
            return false;
        }
        if m.state == ServerState::Leader && m.current_leader == Some(me) {
            voters == [me]
                || m.last_quorum_acked
                    .as_ref()
                    .is_some_and(|acked| acked.elapsed() < self.inner.contact.lease())
        } else {
            self.inner.contact.within_lease(group)
        }
    }
}
