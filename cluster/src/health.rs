//! Whether this node's groups can serve: a group is unhealthy when its Raft core has stopped
//! (a fatal storage error), when it has no leader, when the leader it knows has not been heard
//! from for an election timeout (a follower cut off from it, or a leader no quorum answers:
//! nothing can commit), or when it has committed entries it has not applied for
//! [`STUCK_AFTER`]. `ApplyWatch` remembers since when each group's applied index
//! has stood still; `Cluster::health` (in `cluster`) feeds it the groups' metrics and the node's
//! `/health` endpoint and metrics report the verdict. A hosted group with fewer voters than the
//! cluster wants (its replicas setting, or the number of members when there are fewer) is
//! under-replicated: a write acknowledged then does not survive the loss of its only voters.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::admin::{GroupStatus, NodeStatus};
use crate::ids::GroupId;

/// A group whose applied index stays behind its committed index this long is stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(10);

/// The problems of one hosted group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupProblem {
    pub group: GroupId,
    /// `halted`, `noLeader`, `leaderUnreachable` or `stuckApplying`.
    pub problem: String,
}

/// The health of the groups this node hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub hosted: usize,
    pub with_leader: usize,
    pub problems: Vec<GroupProblem>,
    /// Voters each group should have: `min(replicas, members)`.
    pub voters_wanted: usize,
    /// Hosted groups with fewer voters than `voters_wanted` (start-up, a member being
    /// added or replaced).
    pub under_replicated: Vec<GroupId>,
}

impl Health {
    pub fn ok(&self) -> bool {
        self.hosted > 0 && self.problems.is_empty()
    }
}

/// Since when each group's applied index has not moved while it lagged its committed index.
#[derive(Default)]
pub struct ApplyWatch {
    since: Mutex<HashMap<GroupId, (u64, Instant)>>,
}

impl ApplyWatch {
    /// The problems of `status`'s hosted groups, observed at `now`; a leader not heard from
    /// for `silent_after` (an election timeout) counts as none; a group with fewer than
    /// `voters_wanted` voters is under-replicated.
    pub fn assess(
        &self,
        status: &NodeStatus,
        now: Instant,
        silent_after: Duration,
        voters_wanted: usize,
    ) -> Health {
        let me = status.node_id;
        let hosted: Vec<&GroupStatus> = status.groups.iter().filter(|g| g.hosts(me)).collect();
        let silent_ms = silent_after.as_millis() as u64;
        let heard = |g: &GroupStatus| g.leader_heard_ms.is_some_and(|ms| ms <= silent_ms);
        let mut health = Health {
            hosted: hosted.len(),
            with_leader: hosted
                .iter()
                .filter(|g| g.leader.is_some() && heard(g))
                .count(),
            problems: Vec::new(),
            voters_wanted,
            under_replicated: hosted
                .iter()
                .filter(|g| g.voters.len() < voters_wanted)
                .map(|g| g.group)
                .collect(),
        };
        let mut since = match self.since.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        for g in hosted {
            let problem = if g.halted.is_some() {
                Some("halted")
            } else if g.leader.is_none() {
                Some("noLeader")
            } else if !heard(g) {
                Some("leaderUnreachable")
            } else if self.stuck(&mut since, g, now) {
                Some("stuckApplying")
            } else {
                None
            };
            if let Some(p) = problem {
                health.problems.push(GroupProblem {
                    group: g.group,
                    problem: p.into(),
                });
            }
        }
        health
    }

    fn stuck(
        &self,
        since: &mut HashMap<GroupId, (u64, Instant)>,
        g: &GroupStatus,
        now: Instant,
    ) -> bool {
        if g.applied >= g.committed {
            since.remove(&g.group);
            return false;
        }
        let entry = since.entry(g.group).or_insert((g.applied, now));
        if entry.0 != g.applied {
            *entry = (g.applied, now);
        }
        now.saturating_duration_since(entry.1) >= STUCK_AFTER
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::NodeId;

    const SILENT: Duration = Duration::from_millis(2400);

    fn group(applied: u64, committed: u64) -> GroupStatus {
        GroupStatus {
            group: GroupId::new(1),
            state: "Follower".into(),
            term: 1,
            leader: Some(NodeId::new(2)),
            last_log_index: committed,
            committed,
            applied,
            snapshot: 0,
            purged: 0,
            voters: [1, 2, 3].map(NodeId::new).to_vec(),
            learners: vec![],
            config_at: Some(1),
            bytes: 0,
            halted: None,
            current: false,
            leader_heard_ms: Some(100),
        }
    }

    fn node(g: GroupStatus) -> NodeStatus {
        NodeStatus {
            node_id: NodeId::new(1),
            draining: false,
            groups: vec![g],
        }
    }

    #[test]
    fn a_group_behind_without_progress_becomes_stuck() {
        let w = ApplyWatch::default();
        let t0 = Instant::now();
        assert!(w.assess(&node(group(5, 9)), t0, SILENT, 3).ok());
        assert!(w
            .assess(&node(group(5, 9)), t0 + Duration::from_secs(5), SILENT, 3)
            .ok());
        let h = w.assess(&node(group(5, 9)), t0 + STUCK_AFTER, SILENT, 3);
        assert_eq!(h.problems[0].problem, "stuckApplying");
        // Progress restarts the clock; catching up clears it.
        assert!(w
            .assess(&node(group(6, 9)), t0 + STUCK_AFTER, SILENT, 3)
            .ok());
        assert!(w
            .assess(&node(group(9, 9)), t0 + 3 * STUCK_AFTER, SILENT, 3)
            .ok());
    }

    #[test]
    fn halted_and_leaderless_groups_are_reported() {
        let w = ApplyWatch::default();
        let mut g = group(9, 9);
        g.halted = Some("storage".into());
        assert_eq!(
            w.assess(&node(g), Instant::now(), SILENT, 3).problems[0].problem,
            "halted"
        );
        let mut g = group(9, 9);
        g.leader = None;
        assert_eq!(
            w.assess(&node(g), Instant::now(), SILENT, 3).problems[0].problem,
            "noLeader"
        );
    }

    #[test]
    fn groups_with_fewer_voters_than_wanted_are_under_replicated() {
        let w = ApplyWatch::default();
        let mut g = group(9, 9);
        g.voters = vec![NodeId::new(1)];
        let h = w.assess(&node(g.clone()), Instant::now(), SILENT, 3);
        assert!(h.ok(), "it serves");
        assert_eq!(h.under_replicated, vec![GroupId::new(1)]);
        assert!(w
            .assess(&node(g), Instant::now(), SILENT, 1)
            .under_replicated
            .is_empty());
    }

    #[test]
    fn a_leader_not_heard_from_for_an_election_timeout_cannot_commit() {
        let w = ApplyWatch::default();
        let mut g = group(9, 9);
        g.leader_heard_ms = Some(2401);
        let h = w.assess(&node(g.clone()), Instant::now(), SILENT, 3);
        assert_eq!(h.problems[0].problem, "leaderUnreachable");
        assert_eq!(h.with_leader, 0);
        g.leader_heard_ms = None;
        let h = w.assess(&node(g), Instant::now(), SILENT, 3);
        assert_eq!(h.problems[0].problem, "leaderUnreachable");
    }
}
