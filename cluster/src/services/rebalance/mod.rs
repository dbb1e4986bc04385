//! The rebalancer: each group's desired voters live in the metadata group (the placement
//! record, namespace `Cluster`, key `placement`), and a planner run by the scheduler changes
//! them a move at a time (`plan`) within run-time limits kept beside them (key `rebalance`,
//! `admin::RebalanceSettings`). Each group's leader makes the moves (`services::placement`),
//! and every node paces the snapshots it sends by the limit (`rpc::router`).
//!
//! The record is first written from each group's voters as its leader reports them (so
//! nothing moves when a cluster starts planning), once every member runs a build that plans
//! (`FEATURES`): until then, and for a group the record does not name, placement ranks nodes
//! by rendezvous hashing as before. Neighbours: `scheduler` runs `Planner::round`; `cluster`
//! answers `basalt admin rebalance` with `status` and `change`; below, `replicas`.

pub mod plan;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::admin::{
    GroupStatus, MoveInFlight, NodeShare, RebalanceRequest, RebalanceSettings, RebalanceStatus,
};
use crate::error::{Error, Result};
use crate::ids::{placement_score, GroupId, NodeId, META_GROUP};
use crate::namespace::Namespace;
use crate::replicas::Replicas;
use plan::{Bounds, GroupView, Member, MoveKind};

/// What a build that plans can do, in its member record: the planner runs once it is on
/// (`services::upgrade`: an older build would move replicas back where rendezvous hashing puts
/// them).
pub const FEATURES: [&str; 1] = ["rebalance"];

/// Key of the placement record (namespace `Cluster`).
pub(crate) const PLACEMENT_KEY: &str = "placement";
/// Key of the rebalancer's settings (namespace `Cluster`).
pub(crate) const SETTINGS_KEY: &str = "rebalance";

/// How long the planner waits for each member's report of the groups it leads.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// A member that has not answered the planner for this long is unreachable: nothing moves to
/// it, a move to it in flight is cancelled, and balancing waits (repairs go on).
pub(crate) const UNREACHABLE_AFTER: Duration = Duration::from_secs(30);
/// `queued` counts at most this many moves.
const QUEUED_CAP: usize = 10_000;

/// Each group's desired voters, the preferred leader first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PlacementRecord {
    pub(crate) groups: BTreeMap<GroupId, Vec<NodeId>>,
    /// Moves begun since the record was first written.
    #[serde(default)]
    pub(crate) moves: u64,
}

/// The placement record as this node's replica of the metadata group holds it.
pub(crate) fn local_placement(replicas: &Replicas) -> Option<PlacementRecord> {
    replicas
        .local_meta_record(Namespace::Cluster, PLACEMENT_KEY)
        .ok()
        .flatten()
        .and_then(|v| serde_json::from_value(v).ok())
}

/// The placement record as the metadata group's leader holds it (a linearizable read).
pub(crate) async fn placement_from_leader(replicas: &Replicas) -> Result<Option<PlacementRecord>> {
    replicas
        .get_record(META_GROUP, Namespace::Cluster, PLACEMENT_KEY)
        .await?
        .map(serde_json::from_value)
        .transpose()
        .map_err(Error::from)
}

/// The rebalancer's settings as this node's replica of the metadata group holds them.
pub(crate) fn local_settings(replicas: &Replicas) -> RebalanceSettings {
    replicas
        .local_meta_record(Namespace::Cluster, SETTINGS_KEY)
        .ok()
        .flatten()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

/// Whether planning is on (every active member's build plans, and the cluster finalized it).
fn members_plan(replicas: &Replicas) -> bool {
    FEATURES
        .iter()
        .all(|f| crate::services::upgrade::is_on(replicas, f))
}

/// The members as the planner sees them; `reachable` says whether one answers.
fn members(replicas: &Replicas, reachable: impl Fn(NodeId) -> bool) -> Vec<Member> {
    replicas
        .local_nodes()
        .into_iter()
        .map(|n| Member {
            reachable: reachable(n.id),
            id: n.id,
            active: n.state == crate::admin::NodeState::Active,
            draining: n.draining_since_ms.is_some(),
            disk_low: n.disk_level() >= crate::disk::DiskLevel::Low,
            disk_critical: n.disk_level() >= crate::disk::DiskLevel::Critical,
        })
        .collect()
}

/// What a round or a status reads: the record (as read, and parsed), the settings, each
/// group's status as its leader reports it.
struct Inputs {
    raw: Option<Value>,
    record: Option<PlacementRecord>,
    settings: RebalanceSettings,
    statuses: HashMap<GroupId, GroupStatus>,
    /// The members that answered this time.
    answered: BTreeSet<NodeId>,
}

async fn gather(replicas: &Replicas) -> Result<Inputs> {
    let raw = replicas
        .get_record(META_GROUP, Namespace::Cluster, PLACEMENT_KEY)
        .await?;
    let record = raw
        .clone()
        .map(serde_json::from_value::<PlacementRecord>)
        .transpose()?;
    let settings = replicas
        .get_record(META_GROUP, Namespace::Cluster, SETTINGS_KEY)
        .await?
        .map(serde_json::from_value::<RebalanceSettings>)
        .transpose()?
        .unwrap_or_default();
    let (statuses, answered) = replicas.member_statuses(STATUS_TIMEOUT, true).await;
    Ok(Inputs {
        raw,
        record,
        settings,
        statuses,
        answered,
    })
}

impl Inputs {
    /// The planner's view of each group the record names.
    fn views(&self) -> BTreeMap<GroupId, GroupView> {
        let Some(record) = &self.record else {
            return BTreeMap::new();
        };
        record
            .groups
            .iter()
            .map(|(&g, desired)| {
                let status = self.statuses.get(&g);
                (
                    g,
                    GroupView {
                        desired: desired.clone(),
                        actual: status.map(|s| {
                            (
                                s.voters.iter().copied().collect(),
                                s.learners.iter().copied().collect(),
                            )
                        }),
                        bytes: status.map_or(0, |s| s.bytes),
                    },
                )
            })
            .collect()
    }

    /// The record to begin with: each group's voters as its leader reports them, ranked as
    /// placement ranked them (None while a group's leader has not answered).
    fn seed(
        &self,
        groups: impl Iterator<Item = GroupId>,
        replicas: u32,
    ) -> Option<PlacementRecord> {
        let mut record = PlacementRecord::default();
        for g in groups {
            let status = self.statuses.get(&g)?;
            let mut voters = status.voters.clone();
            voters.sort_by_key(|&n| std::cmp::Reverse(placement_score(g, n)));
            // In a joint configuration the voters are the old and the new ones together.
            voters.truncate(replicas.max(1) as usize);
            record.groups.insert(g, voters);
        }
        Some(record)
    }
}

/// The planner the scheduler runs: its state between rounds.
#[derive(Default)]
pub(crate) struct Planner {
    state: Mutex<PlannerState>,
}

#[derive(Default)]
struct PlannerState {
    last_round: Option<Instant>,
    /// Leader moves this node may still make (refilled at `leader_moves_per_s`).
    leader_tokens: f64,
    /// Groups in flight at the last round: one no longer is counts as a move done.
    in_flight: BTreeSet<GroupId>,
    /// Since when each member that does not answer has not.
    silent_since: HashMap<NodeId, Instant>,
    /// The metadata group's term in which this node kept `silent_since`: a new term of its
    /// leadership (another node ran the scheduler meanwhile) starts them afresh.
    term: Option<u64>,
}

impl Planner {
    /// One round: write the record first if there is none, else begin the moves the plan
    /// allows now.
    pub(crate) async fn round(&self, replicas: &Replicas) -> Result<()> {
        if !members_plan(replicas) {
            return Ok(());
        }
        let inputs = gather(replicas).await?;
        let settings = &inputs.settings;
        metrics::gauge!("basalt_rebalance_paused").set(if settings.paused { 1.0 } else { 0.0 });
        let Some(record) = &inputs.record else {
            let seed = inputs.seed(
                replicas.group_ids().into_iter(),
                replicas.settings().replicas,
            );
            let Some(seed) = seed else {
                return Ok(());
            };
            tracing::info!(
                groups = seed.groups.len(),
                "writing the placement record from the groups' voters"
            );
            replicas
                .cas_record(
                    META_GROUP,
                    Namespace::Cluster,
                    PLACEMENT_KEY,
                    None,
                    Some(serde_json::to_value(&seed)?),
                )
                .await?;
            return Ok(());
        };
        let views = inputs.views();
        let now_in_flight: BTreeSet<GroupId> = views
            .iter()
            .filter(|(g, v)| v.in_flight(**g))
            .map(|(g, _)| *g)
            .collect();
        let leader_moves;
        let members = {
            let mut state = self.state.lock().map_err(poisoned)?;
            let now = Instant::now();
            let answered = &inputs.answered;
            let term = replicas
                .group(META_GROUP)
                .ok()
                .map(|raft| raft.metrics().borrow_watched().current_term);
            if term != state.term {
                state.silent_since.clear();
                state.term = term;
            }
            state.silent_since.retain(|n, _| !answered.contains(n));
            for n in replicas.active_members() {
                if !answered.contains(&n.id) {
                    state.silent_since.entry(n.id).or_insert(now);
                }
            }
            let silent = state.silent_since.clone();
            let members = members(replicas, |n| {
                silent
                    .get(&n)
                    .is_none_or(|since| now.duration_since(*since) < UNREACHABLE_AFTER)
            });
            metrics::gauge!("basalt_rebalance_unreachable_members")
                .set(members.iter().filter(|m| m.active && !m.reachable).count() as f64);
            let done = state.in_flight.difference(&now_in_flight).count();
            metrics::counter!("basalt_rebalance_moves_done_total").increment(done as u64);
            state.in_flight = now_in_flight.clone();
            let rate = settings.leader_moves_per_s.max(0.0);
            let elapsed = state.last_round.map_or(1.0, |t| t.elapsed().as_secs_f64());
            state.last_round = Some(Instant::now());
            state.leader_tokens = (state.leader_tokens + rate * elapsed).min(rate.max(1.0));
            leader_moves = state.leader_tokens.floor() as u32;
            members
        };
        let bounds = Bounds {
            replica_moves_per_node: settings.replica_moves_per_node.max(1),
            leader_moves,
            balance: !settings.paused,
            replicas: replicas.settings().replicas,
        };
        let planned = plan::plan(&views, &members, &bounds);
        metrics::gauge!("basalt_rebalance_moves_in_flight").set(now_in_flight.len() as f64);
        let unpaused = Bounds {
            balance: true,
            ..bounds
        };
        metrics::gauge!("basalt_rebalance_moves_queued")
            .set(plan::queued(&views, &members, &unpaused, QUEUED_CAP) as f64);
        if planned.moves.is_empty() {
            return Ok(());
        }
        let mut next = record.clone();
        next.moves += planned.moves.len() as u64;
        for (g, desired) in &planned.desired {
            next.groups.insert(*g, desired.clone());
        }
        replicas
            .cas_record(
                META_GROUP,
                Namespace::Cluster,
                PLACEMENT_KEY,
                inputs.raw.clone(),
                Some(serde_json::to_value(&next)?),
            )
            .await?;
        let mut leader_moved = 0;
        for m in &planned.moves {
            tracing::info!(group = %m.group, kind = ?m.kind, from = ?m.from, to = ?m.to, "rebalance: move begun");
            metrics::counter!("basalt_rebalance_moves_begun_total", "kind" => kind_name(m.kind))
                .increment(1);
            leader_moved += u32::from(m.kind == MoveKind::Leader);
        }
        if let Ok(mut state) = self.state.lock() {
            state.leader_tokens = (state.leader_tokens - leader_moved as f64).max(0.0);
        }
        Ok(())
    }
}

fn kind_name(kind: MoveKind) -> &'static str {
    match kind {
        MoveKind::Fill => "fill",
        MoveKind::Replace => "replace",
        MoveKind::Drop => "drop",
        MoveKind::Balance => "balance",
        MoveKind::Leader => "leader",
        MoveKind::Cancel => "cancel",
    }
}

fn poisoned<T>(_: std::sync::PoisonError<T>) -> Error {
    Error::Internal("the planner's state lock is poisoned".into())
}

/// The rebalancer as this node sees it, asking every member for the groups it leads.
pub(crate) async fn status(replicas: &Replicas) -> Result<RebalanceStatus> {
    let inputs = gather(replicas).await?;
    let views = inputs.views();
    // Without the planner's history, a member that did not answer now is called unreachable.
    let members = members(replicas, |n| inputs.answered.contains(&n));
    // Moves left are counted as if the rebalancer were not paused.
    let bounds = Bounds {
        replica_moves_per_node: inputs.settings.replica_moves_per_node.max(1),
        leader_moves: u32::MAX,
        balance: true,
        replicas: replicas.settings().replicas,
    };
    let queued = plan::queued(&views, &members, &bounds, QUEUED_CAP);
    let loads = plan::loads(&views, &members);
    let in_flight: Vec<MoveInFlight> = views
        .iter()
        .filter(|(g, v)| v.in_flight(**g))
        .filter_map(|(g, v)| {
            let (voters, learners) = v.actual.as_ref()?;
            Some(MoveInFlight {
                group: *g,
                voters: voters.iter().copied().collect(),
                learners: if *g == META_GROUP {
                    Vec::new()
                } else {
                    learners.iter().copied().collect()
                },
                desired: v.desired.clone(),
            })
        })
        .collect();
    let mut busy: BTreeMap<NodeId, u32> = BTreeMap::new();
    for (g, v) in &views {
        for n in v.moving_nodes(*g) {
            *busy.entry(n).or_default() += 1;
        }
    }
    let mut led: BTreeMap<NodeId, u32> = BTreeMap::new();
    for s in inputs.statuses.values() {
        if let Some(l) = s.leader {
            *led.entry(l).or_default() += 1;
        }
    }
    let nodes = members
        .iter()
        .filter(|m| m.active)
        .map(|m| {
            let load = loads.get(&m.id).cloned().unwrap_or_default();
            NodeShare {
                node: m.id,
                draining: m.draining,
                unreachable: !m.reachable,
                replicas: load.replicas,
                bytes: load.bytes,
                weighted: (load.weighted * 100.0).round() / 100.0,
                preferred_leaders: load.leaders,
                leaders: led.get(&m.id).copied().unwrap_or(0),
                moves_in_flight: busy.get(&m.id).copied().unwrap_or(0),
            }
        })
        .collect();
    let unknown_groups: Vec<GroupId> = replicas
        .group_ids()
        .into_iter()
        .filter(|g| !inputs.statuses.contains_key(g))
        .collect();
    let planning = members_plan(replicas) && inputs.record.is_some();
    // Not balanced while a member does not answer: balancing waits for it (`plan`), so no
    // move being left would say nothing.
    let all_answer = members.iter().all(|m| !m.active || m.reachable);
    Ok(RebalanceStatus {
        settings: inputs.settings,
        planning,
        balanced: planning
            && all_answer
            && unknown_groups.is_empty()
            && in_flight.is_empty()
            && queued == 0,
        moves_begun: inputs.record.as_ref().map_or(0, |r| r.moves),
        in_flight,
        queued,
        nodes,
        unknown_groups,
    })
}

/// Pauses, resumes or changes the limits (compare-and-set against the settings as the
/// metadata group holds them): the settings now.
pub(crate) async fn change(
    replicas: &Replicas,
    req: &RebalanceRequest,
) -> Result<RebalanceSettings> {
    let written = replicas
        .update_meta_record(Namespace::Cluster, SETTINGS_KEY, 10, |raw| {
            let current: RebalanceSettings = raw
                .cloned()
                .map(serde_json::from_value)
                .transpose()?
                .unwrap_or_default();
            let next = changed(&current, req)?;
            // A status is only read; a change to what a cluster without the record has
            // already writes the record.
            if next == current && (raw.is_some() || *req == RebalanceRequest::Status) {
                return Ok(None);
            }
            Ok(Some(serde_json::to_value(&next)?))
        })
        .await
        .map_err(|e| match e {
            Error::Conflict(_) => {
                Error::Unavailable("the rebalancer's settings kept changing".into())
            }
            e => e,
        })?;
    Ok(written
        .map(serde_json::from_value)
        .transpose()?
        .unwrap_or_default())
}

/// `current` with the change `req` asks (unchanged for `Status`); a limit out of its range is
/// refused.
fn changed(current: &RebalanceSettings, req: &RebalanceRequest) -> Result<RebalanceSettings> {
    let mut next = current.clone();
    match req {
        RebalanceRequest::Status => {}
        RebalanceRequest::Pause => next.paused = true,
        RebalanceRequest::Resume => next.paused = false,
        RebalanceRequest::Limits {
            replica_moves_per_node,
            snapshot_mb_per_s,
            leader_moves_per_s,
        } => {
            if let Some(n) = replica_moves_per_node {
                if !(1..=64).contains(n) {
                    return Err(Error::InvalidOperation(
                        "replica moves per node: from 1 to 64".into(),
                    ));
                }
                next.replica_moves_per_node = *n;
            }
            if let Some(mb) = snapshot_mb_per_s {
                if *mb > 100_000 {
                    return Err(Error::InvalidOperation(
                        "snapshot MB/s: from 0 (no limit) to 100000".into(),
                    ));
                }
                next.snapshot_mb_per_s = *mb;
            }
            if let Some(rate) = leader_moves_per_s {
                if !rate.is_finite() || *rate <= 0.0 || *rate > 1000.0 {
                    return Err(Error::InvalidOperation(
                        "leader moves per second: more than 0, at most 1000".into(),
                    ));
                }
                next.leader_moves_per_s = *rate;
            }
        }
    }
    Ok(next)
}
