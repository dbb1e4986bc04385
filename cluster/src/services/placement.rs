//! Placement: which nodes hold each group's replicas, and which of them leads.
//!
//! The desired voters of a group are those the placement record in the metadata group names
//! (`services::rebalance`, whose planner changes them a move at a time), the first being the
//! preferred leader; for a group the record does not name (before the cluster plans), the
//! `replicas` active nodes ranked highest by rendezvous hashing of (group, node), which
//! spreads leaders across nodes. Each group's leader converges its own group towards that:
//! missing nodes join as learners, caught-up learners become voters in one membership change
//! (a leader leaving the group hands its leadership to a voter that stays first),
//! removed or surplus nodes leave, and leadership moves to the preferred node once it is
//! caught up. The metadata group also keeps every other active node as a learner, so every
//! node has the cluster's metadata locally. Ranking by rendezvous, a node whose member record
//! says its disk is low or critical (`disk`) is given no new replica (low ones still are when
//! too few nodes have room); it keeps those it holds (the planner spares such nodes alike).
//! Each tick also sets the pace of the snapshots this node sends (`rpc::router`) from the
//! rebalancer's settings. A node whose record says it is draining (it is stopping) is
//! given no leadership, and hands over those it holds to caught-up voters.

use openraft::async_runtime::WatchReceiver;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use openraft::{BasicNode, ChangeMembers};

use crate::ids::{placement_score, GroupId, NodeId, META_GROUP};
use crate::raft::TypeConfig;
use crate::replicas::Replicas;

const TICK: Duration = Duration::from_millis(250);
/// A learner this close to the leader's log may become a voter or leader.
const CAUGHT_UP_ENTRIES: u64 = 64;
const TRANSFER_COOLDOWN: Duration = Duration::from_secs(15);
/// A voter whose last answer to its leader is older than this is not handed a leadership.
const LIVE_WITHIN: Duration = Duration::from_secs(2);
/// A voter whose replication stream broke (it stopped, restarted or was cut off) is handed no
/// leadership for this long: a node just back may still be catching up, and a leadership
/// handed to a node that cannot take it leaves the group without a leader until an election.
const LEADER_SETTLE: Duration = Duration::from_secs(5);
/// How often a draining node looks again at the groups it still leads.
const HANDOVER_ROUND: Duration = Duration::from_millis(100);
/// How long a group handed over is given to elect its new leader before it is handed again.
const ELECTION_WAIT: Duration = Duration::from_secs(1);
const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The desired voters of `group` among `nodes`, best first.
pub fn desired_voters(group: GroupId, nodes: &[NodeId], replicas: u32) -> Vec<NodeId> {
    let mut ranked: Vec<NodeId> = nodes.to_vec();
    ranked.sort_by_key(|&n| std::cmp::Reverse(placement_score(group, n)));
    ranked.truncate(replicas.max(1) as usize);
    ranked
}

/// Runs the placement loop of this node until shutdown.
pub async fn run(replicas: Replicas) {
    let mut shutdown = replicas.shutdown_signal();
    let mut last_transfer: HashMap<GroupId, Instant> = HashMap::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => return,
        }
        let settings = crate::services::rebalance::local_settings(&replicas);
        replicas
            .router()
            .set_snapshot_rate(u64::from(settings.snapshot_mb_per_s) << 20);
        if replicas.led_groups().is_empty() {
            continue;
        }
        // The record before the members: a node the record names is a member already. A
        // replica of the metadata group behind its leader may hold an older record, whose
        // moves would undo newer ones: then the record is read through the metadata group's
        // leader (a node removed from the cluster is dropped from the metadata group, and its
        // replica stops there, while it may still lead groups it must leave).
        let record = if replicas.replica_caught_up(META_GROUP) {
            crate::services::rebalance::local_placement(&replicas)
        } else {
            match tokio::time::timeout(
                CHANGE_TIMEOUT,
                crate::services::rebalance::placement_from_leader(&replicas),
            )
            .await
            {
                Ok(Ok(record)) => record,
                _ => {
                    // The cluster cannot be asked: a node that leaves it hands over what it
                    // leads; any other waits.
                    if !replicas.member_addrs().contains_key(&replicas.node_id()) {
                        hand_over_leaderships(&replicas, ELECTION_WAIT).await;
                    }
                    continue;
                }
            }
        };
        let addrs = replicas.member_addrs();
        if addrs.is_empty() {
            continue;
        }
        for group in replicas.led_groups() {
            let desired = record.as_ref().and_then(|r| r.groups.get(&group));
            if let Err(e) = reconcile(&replicas, group, desired, &addrs, &mut last_transfer).await {
                tracing::debug!(%group, "placement step failed: {e}");
            }
        }
    }
}

async fn reconcile(
    replicas: &Replicas,
    group: GroupId,
    recorded: Option<&Vec<NodeId>>,
    addrs: &HashMap<NodeId, String>,
    last_transfer: &mut HashMap<GroupId, Instant>,
) -> Result<(), String> {
    let raft = replicas.group(group).map_err(|e| e.to_string())?;
    let me = replicas.node_id();
    let m = raft.metrics().borrow_watched().clone();
    // A replica removed from its group may still name itself leader: only a leader acts.
    if m.current_leader != Some(me) || m.state != openraft::ServerState::Leader {
        return Ok(());
    }
    let membership = m.membership_config.membership().clone();
    // One change at a time: wait while a joint configuration is in flight. One that is
    // committed and still joint lost its second step (the change's caller gave up, or the
    // leader changed): it is made uniform (the joint's last configuration), as openraft's own
    // second step does.
    if membership.get_joint_config().len() > 1 {
        let committed = m.membership_config.log_id().as_ref().is_some_and(|at| {
            m.last_applied
                .as_ref()
                .is_some_and(|applied| applied.index() >= at.index())
        });
        if committed {
            tracing::info!(%group, "making a joint configuration left behind uniform");
            let flatten =
                raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::new()), false);
            tokio::time::timeout(CHANGE_TIMEOUT, flatten)
                .await
                .map_err(|_| "timeout".to_string())?
                .map_err(|e| e.to_string())?;
        }
        return Ok(());
    }
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let learners: BTreeSet<NodeId> = membership.learner_ids().collect();
    // A node whose disk is low or critical gets no new replica: it keeps those it holds. When
    // that leaves too few nodes, low ones are used still (fewer replicas would be worse),
    // critical ones never.
    let nodes = replicas.local_nodes();
    let levels: HashMap<NodeId, crate::disk::DiskLevel> =
        nodes.iter().map(|n| (n.id, n.disk_level())).collect();
    // Draining nodes are stopping: no leadership goes to one, and one that leads hands over.
    let draining = draining_members(&nodes);
    let eligible = |worst: crate::disk::DiskLevel| -> Vec<NodeId> {
        addrs
            .keys()
            .copied()
            .filter(|n| {
                levels.get(n).copied().unwrap_or_default() <= worst
                    || voters.contains(n)
                    || learners.contains(n)
            })
            .collect()
    };
    let mut active = eligible(crate::disk::DiskLevel::Ok);
    if active.len() < replicas.settings().replicas as usize {
        active = eligible(crate::disk::DiskLevel::Low);
    }
    let want_voters: Vec<NodeId> = match recorded {
        // The record's voters; one that is no member any more stays until the planner names
        // another in its place, one that is no member and no voter is not added.
        Some(recorded) => recorded
            .iter()
            .copied()
            .filter(|n| addrs.contains_key(n) || voters.contains(n))
            .collect(),
        None => desired_voters(group, &active, replicas.settings().replicas),
    };
    // A record naming a node that cannot be added waits for the planner to name another: the
    // voters are not changed to fewer than it names meanwhile.
    let short = recorded.is_some_and(|r| r.len() > want_voters.len());
    if want_voters.is_empty() {
        return Ok(());
    }
    let want_all: BTreeSet<NodeId> = if group == META_GROUP {
        active.iter().chain(want_voters.iter()).copied().collect()
    } else {
        want_voters.iter().copied().collect()
    };
    let last = m.last_log_index.unwrap_or(0);
    let matched = |n: NodeId| -> u64 {
        if n == me {
            return last;
        }
        matched_index(&m, n)
    };
    // Ready to vote: it acknowledged entries near the leader's last one and answers (in a
    // group with a short log a node that never answered would otherwise be near enough, and
    // made a voter that cannot vote).
    let ready = |n: NodeId| {
        n == me
            || (replication_known(&m, n)
                && last.saturating_sub(matched(n)) <= CAUGHT_UP_ENTRIES
                && answered_lately(&m, n))
    };
    // The voters may change to `want` when every newcomer is ready and a majority of `want` is:
    // a voter that stays is not asked to be (one dead voter must not block replacing another),
    // but a change that leaves too few ready voters (dropping a live one while another is
    // down) would never commit, and waits.
    let can_become = |want: &BTreeSet<NodeId>| {
        want.iter()
            .filter(|n| !voters.contains(n))
            .all(|&n| ready(n))
            && want.iter().filter(|&&n| ready(n)).count() * 2 > want.len()
    };

    // 1. Every wanted node holds a replica (as a learner first).
    for &n in &want_all {
        if !voters.contains(&n) && !learners.contains(&n) {
            let addr = addrs.get(&n).cloned().unwrap_or_default();
            tracing::info!(%group, node = %n, "adding a replica (learner)");
            let add = raft.add_learner(n, BasicNode::new(addr), false);
            tokio::time::timeout(CHANGE_TIMEOUT, add)
                .await
                .map_err(|_| "timeout".to_string())?
                .map_err(|e| e.to_string())?;
            return Ok(());
        }
    }
    if short {
        return Ok(());
    }
    // 2. Voters become exactly the wanted set once the new ones have caught up.
    let want_voter_set: BTreeSet<NodeId> = want_voters.iter().copied().collect();
    let live = |n: NodeId| n == me || answered_lately(&m, n);
    let settled = |n: NodeId| n == me || !replicas.router().failed_within(n, LEADER_SETTLE);
    if want_voter_set != voters {
        if can_become(&want_voter_set) {
            // A leader that leaves the group hands its leadership to a voter that stays
            // first: removed as leader, it would step down and leave the group to an
            // election. (A group none of whose voters stays changes at once.)
            if !want_voter_set.contains(&me) {
                let heir = want_voters
                    .iter()
                    .copied()
                    .find(|&n| voters.contains(&n) && matched(n) == last && live(n) && settled(n));
                let any_stays = want_voter_set.iter().any(|n| voters.contains(n));
                let handed_lately = last_transfer
                    .get(&group)
                    .is_some_and(|t| t.elapsed() < ELECTION_WAIT);
                if handed_lately {
                    return Ok(());
                }
                if let Some(heir) = heir {
                    last_transfer.insert(group, Instant::now());
                    tracing::info!(%group, to = %heir, "handing the leadership over before leaving the group");
                    raft.trigger()
                        .transfer_leader(heir)
                        .await
                        .map_err(|e| e.to_string())?;
                    return Ok(());
                }
                if any_stays {
                    // One will be caught up and answering shortly.
                    return Ok(());
                }
            }
            tracing::info!(%group, ?want_voter_set, "changing voters");
            let change = raft.change_membership(
                ChangeMembers::ReplaceAllVoters(want_voter_set),
                group == META_GROUP,
            );
            tokio::time::timeout(CHANGE_TIMEOUT, change)
                .await
                .map_err(|_| "timeout".to_string())?
                .map_err(|e| e.to_string())?;
        }
        return Ok(());
    }
    // 3. Replicas nobody wants any more leave.
    let surplus: BTreeSet<NodeId> = learners
        .iter()
        .copied()
        .filter(|n| !want_all.contains(n))
        .collect();
    if !surplus.is_empty() {
        tracing::info!(%group, ?surplus, "removing replicas");
        let change = raft.change_membership(ChangeMembers::RemoveNodes(surplus), false);
        tokio::time::timeout(CHANGE_TIMEOUT, change)
            .await
            .map_err(|_| "timeout".to_string())?
            .map_err(|e| e.to_string())?;
        return Ok(());
    }
    // 4. Leadership moves to the preferred node — the first wanted voter active and not
    //    draining — when it is caught up, answers and has not failed lately; at once, when
    //    this node is draining.
    // A node leaving — draining, or removed from the cluster — hands its leaderships over.
    let me_draining = draining.contains(&me) || replicas.draining() || !addrs.contains_key(&me);
    let preferred = want_voters
        .iter()
        .copied()
        .filter(|n| !draining.contains(n) && addrs.contains_key(n))
        .find(|&n| !me_draining || (n != me && voters.contains(&n) && matched(n) == last));
    if let Some(preferred) = preferred {
        let cooled = me_draining
            || last_transfer
                .get(&group)
                .is_none_or(|t| t.elapsed() > TRANSFER_COOLDOWN);
        if preferred != me
            && cooled
            && matched(preferred) == last
            && last > 0
            && live(preferred)
            && settled(preferred)
        {
            last_transfer.insert(group, Instant::now());
            tracing::info!(%group, to = %preferred, "transferring leadership");
            raft.trigger()
                .transfer_leader(preferred)
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The last log index the leader whose metrics are `m` knows voter `n` holds (0: none yet).
fn matched_index(m: &openraft::RaftMetrics<TypeConfig>, n: NodeId) -> u64 {
    m.replication
        .as_ref()
        .and_then(|r| r.get(&n).cloned().flatten())
        .map(|l| l.index)
        .unwrap_or(0)
}

/// Whether the leader whose metrics are `m` has had an entry acknowledged by `n`.
fn replication_known(m: &openraft::RaftMetrics<TypeConfig>, n: NodeId) -> bool {
    m.replication
        .as_ref()
        .and_then(|r| r.get(&n).cloned().flatten())
        .is_some()
}

/// Whether voter `n` answered the leader whose metrics are `m` within `LIVE_WITHIN`.
fn answered_lately(m: &openraft::RaftMetrics<TypeConfig>, n: NodeId) -> bool {
    m.heartbeat
        .as_ref()
        .and_then(|h| h.get(&n).cloned().flatten())
        .is_some_and(|at| openraft::Instant::elapsed(&*at) < LIVE_WITHIN)
}

/// The members whose records say they are draining (stopping).
fn draining_members(nodes: &[crate::admin::NodeRecord]) -> BTreeSet<NodeId> {
    nodes
        .iter()
        .filter(|n| n.draining_since_ms.is_some())
        .map(|n| n.id)
        .collect()
}

/// Hands the leadership of every group this node leads to another voter — live, not
/// draining, holding the whole log: the one placement prefers when it does — until it leads
/// none or `within` has passed: the groups it still leads then (a group with no such voter
/// stays).
pub(crate) async fn hand_over_leaderships(replicas: &Replicas, within: Duration) -> Vec<GroupId> {
    let deadline = Instant::now() + within;
    let me = replicas.node_id();
    // Groups handed over lately: their new leader is being elected.
    let mut handed: HashMap<GroupId, Instant> = HashMap::new();
    loop {
        let led = replicas.led_groups();
        if led.is_empty() || Instant::now() >= deadline {
            return led;
        }
        let draining = draining_members(&replicas.local_nodes());
        let active: Vec<NodeId> = replicas.member_addrs().keys().copied().collect();
        let record = crate::services::rebalance::local_placement(replicas);
        let mut handing = false;
        for group in &led {
            let group = *group;
            let Ok(raft) = replicas.group(group) else {
                continue;
            };
            let m = raft.metrics().borrow_watched().clone();
            if m.current_leader != Some(me) {
                continue;
            }
            if handed
                .get(&group)
                .is_some_and(|t| t.elapsed() < ELECTION_WAIT)
            {
                handing = true;
                continue;
            }
            let wanted = match record.as_ref().and_then(|r| r.groups.get(&group)) {
                Some(recorded) => recorded.clone(),
                None => desired_voters(group, &active, replicas.settings().replicas),
            };
            let last = m.last_log_index.unwrap_or(0);
            let matched = |n: NodeId| matched_index(&m, n);
            // A voter that answered lately (a stopped or paused one would leave the group
            // leaderless until an election).
            let live = |n: NodeId| answered_lately(&m, n);
            let candidates: Vec<NodeId> = m
                .membership_config
                .membership()
                .voter_ids()
                .filter(|&n| n != me && live(n) && !draining.contains(&n))
                .collect();
            // Only a voter holding the whole log takes the group (openraft's target ignores a
            // handover its log is behind, and the group then waits for an election): the one
            // placement prefers when it does (so that it keeps the group), else any that does,
            // one whose replication stream has not failed lately first (a node just back may
            // not take it in time); none yet, and the next round looks again.
            handing |= !candidates.is_empty();
            let whole = |n: &NodeId| last > 0 && matched(*n) == last;
            let settled = |n: &NodeId| !replicas.router().failed_within(*n, LEADER_SETTLE);
            let target = wanted
                .iter()
                .find(|n| candidates.contains(n) && whole(n) && settled(n))
                .or_else(|| candidates.iter().find(|n| whole(n) && settled(n)))
                .or_else(|| wanted.iter().find(|n| candidates.contains(n) && whole(n)))
                .or_else(|| candidates.iter().find(|n| whole(n)))
                .copied();
            if let Some(to) = target {
                handed.insert(group, Instant::now());
                if let Err(e) = raft.trigger().transfer_leader(to).await {
                    tracing::debug!(%group, %to, "handing leadership over: {e}");
                }
            }
        }
        if !handing {
            // No group this node leads has another live voter to take it.
            return led;
        }
        tokio::time::sleep(HANDOVER_ROUND).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `desired_voters` in plain numbers.
    fn voters(group: u32, nodes: &[u64], replicas: u32) -> Vec<u64> {
        let nodes: Vec<NodeId> = nodes.iter().map(|&n| NodeId::new(n)).collect();
        desired_voters(GroupId::new(group), &nodes, replicas)
            .into_iter()
            .map(NodeId::get)
            .collect()
    }

    #[test]
    fn desired_voters_are_stable_and_spread() {
        let nodes = [1, 2, 3, 4];
        assert_eq!(voters(5, &nodes, 3), voters(5, &[4, 3, 2, 1], 3));
        assert_eq!(voters(5, &nodes, 3).len(), 3);
        assert_eq!(voters(5, &[7], 3), vec![7]);
        // Preferred leaders are spread over the nodes.
        let mut leaders: HashMap<u64, u32> = HashMap::new();
        for g in 0..=64 {
            *leaders.entry(voters(g, &nodes, 3)[0]).or_default() += 1;
        }
        assert_eq!(leaders.len(), 4, "{leaders:?}");
        assert!(leaders.values().all(|&c| c >= 6), "{leaders:?}");
    }

    #[test]
    fn adding_a_node_moves_only_some_groups() {
        let before: Vec<_> = (1..=64).map(|g| voters(g, &[1, 2, 3], 3)).collect();
        let after: Vec<_> = (1..=64).map(|g| voters(g, &[1, 2, 3, 4], 3)).collect();
        let moved = before.iter().zip(&after).filter(|(b, a)| {
            let b: BTreeSet<_> = b.iter().collect();
            let a: BTreeSet<_> = a.iter().collect();
            b != a
        });
        let n = moved.count();
        assert!(n > 20 && n < 64, "{n} of 64 groups moved");
    }
}
