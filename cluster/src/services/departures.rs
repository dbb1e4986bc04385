//! Replicas removed from their group without knowing it. Raft never tells a replica it was
//! removed: the leader stops replicating to it once it appends the configuration without it,
//! so the removed replica keeps its last (joint) configuration and, hearing from no leader,
//! would count for ever as a leaderless group of this node (its `/health` never ready again).
//! Every `EVERY`, when a group whose local configuration holds this node has heard from no
//! leader for `silent`, this asks the members who leads it (`Replicas::led_group_statuses`:
//! the claimant with the highest term); one whose leader, at a term no older than this
//! replica's, reports a configuration without this node is departed — left out of this
//! node's health (`Cluster::health`) until its replica hears from a leader again (it was added
//! back). Once that leader has applied the configuration without this node (it is committed)
//! and still reports it `ERASE_AFTER` later, the replica of a data group — a silent one, or
//! one whose own configuration already leaves this node out — is stopped and erased
//! (`Replicas::erase_removed`): its disk is given back. Neighbours: `replicas` keeps the set
//! and erases; `cluster::bootstrap` spawns `run`.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::admin::GroupStatus;
use crate::ids::{GroupId, META_GROUP};
use crate::replicas::{Removal, Replicas};

/// How often silent replicas are looked at; the first look is at once, so that a node
/// restarted is ready without waiting for it.
const EVERY: Duration = Duration::from_secs(1);
/// How long the members are given to say what they lead.
const ASK_WITHIN: Duration = Duration::from_secs(2);
/// How long a replica's removal is seen committed before the replica is erased: the leader
/// is asked again then, and a draining node erases nothing.
const ERASE_AFTER: Duration = Duration::from_secs(10);
/// How often a replica known departed, or left out of its own configuration, is asked about
/// while its removal is not seen committed.
const ASK_AGAIN: Duration = Duration::from_secs(5);

/// Whether `status`, reported by the leader of its group, says this node's replica `me` was
/// removed: a leader other than `me`, at a term no older than `term_here` (a deposed one may
/// still hold an older configuration), whose configuration leaves `me` out.
fn removed(status: &GroupStatus, me: crate::ids::NodeId, term_here: u64) -> bool {
    status.leader != Some(me) && status.term >= term_here && !status.hosts(me)
}

/// Whether the leader has applied the configuration it reports (so it is committed: no later
/// leader holds one with this node again unless it is added back).
fn committed(status: &GroupStatus) -> bool {
    status.config_at.is_some_and(|at| at <= status.applied)
}

/// Watches this node's silent replicas, and those its own configuration leaves out, until
/// shutdown; `silent` is how long a replica may go without hearing from its leader before its
/// leader is looked for.
pub async fn run(replicas: Replicas, silent: Duration) {
    let mut shutdown = replicas.shutdown_signal();
    metrics::gauge!("basalt_departed_replicas").set(0.0);
    // When each removed replica's removal was first seen committed.
    let mut removal_seen: HashMap<GroupId, Instant> = HashMap::new();
    // When each replica not yet known removed (committed) was last asked about.
    let mut last_asked: HashMap<GroupId, Instant> = HashMap::new();
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shutdown.changed() => return,
        }
        let me = replicas.node_id();
        let silent_ms = silent.as_millis() as u64;
        let local = replicas.status();
        let here: HashMap<GroupId, &GroupStatus> =
            local.groups.iter().map(|g| (g.group, g)).collect();
        let quiet: BTreeSet<GroupId> = local
            .groups
            .iter()
            .filter(|g| g.hosts(me) && g.leader != Some(me))
            .filter(|g| g.leader.is_none() || g.leader_heard_ms.is_none_or(|ms| ms > silent_ms))
            .map(|g| g.group)
            .collect();
        // Replicas whose own configuration already leaves this node out (they received the
        // change, or led it) but still hold state: not in the node's health, erased like the
        // quiet ones once the group's leader — another node, at a term no older — confirms.
        let left_out: BTreeSet<GroupId> = local
            .groups
            .iter()
            .filter(|g| !g.hosts(me) && (g.last_log_index > 0 || g.applied > 0))
            .map(|g| g.group)
            .collect();
        let term_here = |group: GroupId| here.get(&group).map_or(0, |g| g.term);
        // A replica that hears from a leader again was added back.
        let mut departed: BTreeSet<GroupId> =
            replicas.departed().intersection(&quiet).copied().collect();
        removal_seen.retain(|g, _| departed.contains(g) || left_out.contains(g));
        last_asked.retain(|g, _| quiet.contains(g) || left_out.contains(g));
        let draining = replicas.draining();
        let due = removal_seen
            .iter()
            .filter(|(_, seen)| !draining && seen.elapsed() >= ERASE_AFTER)
            .map(|(&g, _)| g);
        // Not yet known departed, or not yet seen committed: asked about (again, every
        // `ASK_AGAIN`).
        let unknown = quiet.difference(&departed).copied();
        let pending = departed
            .iter()
            .chain(&left_out)
            .filter(|g| !removal_seen.contains_key(g))
            .filter(|g| last_asked.get(g).is_none_or(|at| at.elapsed() >= ASK_AGAIN))
            .copied();
        let ask: BTreeSet<GroupId> = unknown.chain(pending).chain(due).collect();
        if !ask.is_empty() {
            let now = Instant::now();
            last_asked.extend(ask.iter().map(|&g| (g, now)));
            let led = replicas.led_group_statuses(ASK_WITHIN, false).await;
            for group in ask {
                let Some(status) = led.get(&group) else {
                    continue;
                };
                if !removed(status, me, term_here(group)) {
                    // Added back (it will hear from the leader soon).
                    departed.remove(&group);
                    removal_seen.remove(&group);
                    continue;
                }
                if quiet.contains(&group) && departed.insert(group) {
                    tracing::info!(
                        %group,
                        leader = ?status.leader,
                        voters = ?status.voters,
                        "this node's replica was removed from the group: left out of its health"
                    );
                }
                let (Some(leader), Some(config_at)) = (status.leader, status.config_at) else {
                    continue;
                };
                if !committed(status) || group == META_GROUP {
                    continue;
                }
                let seen = *removal_seen.entry(group).or_insert_with(Instant::now);
                if draining || seen.elapsed() < ERASE_AFTER {
                    continue;
                }
                let removal = Removal {
                    leader,
                    term: status.term,
                    config_at,
                    seen_term: term_here(group),
                    seen_last_log: here.get(&group).map_or(0, |g| g.last_log_index),
                };
                let seen_term = removal.seen_term;
                let still_removed = |s: &GroupStatus| removed(s, me, seen_term) && committed(s);
                match replicas.erase_removed(group, &removal, still_removed).await {
                    Ok(true) => {
                        departed.remove(&group);
                        removal_seen.remove(&group);
                    }
                    // Kept (or given up): looked at again after `ERASE_AFTER`, not every tick.
                    Ok(false) => {
                        removal_seen.insert(group, Instant::now());
                    }
                    Err(e) => {
                        removal_seen.insert(group, Instant::now());
                        tracing::warn!(%group, "erasing a removed replica: {e}");
                    }
                }
            }
        }
        if departed != replicas.departed() {
            metrics::gauge!("basalt_departed_replicas").set(departed.len() as f64);
            replicas.set_departed(departed);
        }
    }
}
