//! Replicas removed from their group without knowing it. Raft never tells a replica it was
//! removed: the leader stops replicating to it once it appends the configuration without it,
//! so the removed replica keeps its last (joint) configuration and, hearing from no leader,
//! would count for ever as a leaderless group of this node (its `/health` never ready again).
//! Every `EVERY`, when a group whose local configuration holds this node has heard from no
//! leader for `silent`, this asks the members who leads it (`Replicas::led_group_statuses`:
//! the claimant with the highest term); one whose leader, at a term no older than this
//! replica's, reports a configuration without this node is departed — left out of this
//! node's health (`Cluster::health`) until its replica hears from a leader again (it was added
//! back). Neighbours: `replicas` keeps the set; `cluster::bootstrap` spawns `run`.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::ids::GroupId;
use crate::replicas::Replicas;

/// How often silent replicas are looked at; the first look is at once, so that a node
/// restarted is ready without waiting for it.
const EVERY: Duration = Duration::from_secs(1);
/// How long the members are given to say what they lead.
const ASK_WITHIN: Duration = Duration::from_secs(2);

/// Watches this node's silent replicas until shutdown; `silent` is how long a replica may go
/// without hearing from its leader before its leader is looked for.
pub async fn run(replicas: Replicas, silent: Duration) {
    let mut shutdown = replicas.shutdown_signal();
    metrics::gauge!("basalt_departed_replicas").set(0.0);
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
        let quiet: BTreeSet<GroupId> = local
            .groups
            .iter()
            .filter(|g| g.hosts(me) && g.leader != Some(me))
            .filter(|g| g.leader.is_none() || g.leader_heard_ms.is_none_or(|ms| ms > silent_ms))
            .map(|g| g.group)
            .collect();
        let term_here = |group: GroupId| {
            local
                .groups
                .iter()
                .find(|g| g.group == group)
                .map_or(0, |g| g.term)
        };
        // A replica that hears from a leader again was added back.
        let mut departed: BTreeSet<GroupId> =
            replicas.departed().intersection(&quiet).copied().collect();
        let unknown: Vec<GroupId> = quiet.difference(&departed).copied().collect();
        if !unknown.is_empty() {
            let led = replicas.led_group_statuses(ASK_WITHIN, false).await;
            for group in unknown {
                let Some(status) = led.get(&group) else {
                    continue;
                };
                // Only a leader at least as recent as anything this replica saw can say it
                // was removed (a deposed one may still hold an older configuration).
                if status.leader != Some(me) && status.term >= term_here(group) && !status.hosts(me)
                {
                    tracing::info!(
                        %group,
                        leader = ?status.leader,
                        voters = ?status.voters,
                        "this node's replica was removed from the group: left out of its health"
                    );
                    departed.insert(group);
                }
            }
        }
        if departed != replicas.departed() {
            metrics::gauge!("basalt_departed_replicas").set(departed.len() as f64);
            replicas.set_departed(departed);
        }
    }
}
