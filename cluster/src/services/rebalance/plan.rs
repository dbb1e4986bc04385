//! The rebalancer's plan, without any I/O: from each group's desired voters (the placement
//! record), its membership as its leader reports it and its size, and the members, the moves
//! to begin now. A move is one change of one group's desired voters; each group's leader then
//! makes it (`services::placement`: a learner, caught up, swapped for a voter, the old one
//! removed). Neighbours: `rebalance` (above) gathers the inputs and writes the record.
//!
//! In order: **repairs** (a group short of replicas gains one at once; a replica on a removed
//! node is replaced within the limits; a group with more replicas than it should have loses
//! one, a removed node's first),
//! then, unless paused, **balance** (replicas per node within ±1 of the mean, each replica
//! weighted by its group's bytes, one move per node at a time by default) and **leaders**
//! (preferred leaders per node within ±1 of the mean, at most the round's leader moves).
//! Draining nodes are spared: no replica goes to or leaves one, and none is given a leadership;
//! balancing waits while a member drains or a group's leader does not answer.
//! An unreachable node (silent for `rebalance::UNREACHABLE_AFTER`) takes nothing, balancing
//! waits while one is, and a move to it is **cancelled**: the replica it was to replace stays,
//! or another node takes the one it was to add.
//! Nodes whose disk is low or critical take no replica (low ones only when no other can).

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{placement_score, GroupId, NodeId, META_GROUP};

/// Bytes added to each group's size when weighing it, so that empty groups weigh alike.
const WEIGHT_FLOOR_BYTES: f64 = (1u64 << 20) as f64;

/// A member as the planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub id: NodeId,
    /// Active (not removed).
    pub active: bool,
    /// Stopping for a restart: spared.
    pub draining: bool,
    /// Its disk is at the low mark or above.
    pub disk_low: bool,
    /// Its disk is at the critical mark.
    pub disk_critical: bool,
    /// It answers the planner (false: silent too long; a node restarting is not yet).
    pub reachable: bool,
}

/// One group as the planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupView {
    /// The desired voters, the preferred leader first.
    pub desired: Vec<NodeId>,
    /// Its voters and learners as its leader reports them (None: no leader answered).
    pub actual: Option<(BTreeSet<NodeId>, BTreeSet<NodeId>)>,
    /// Bytes of its state, as its leader reports them.
    pub bytes: u64,
}

impl GroupView {
    /// Whether the group's leader is still making a move: its voters are not the desired
    /// ones, or (but for the metadata group, which keeps every node as a learner) it has a
    /// learner joining or leaving.
    pub fn in_flight(&self, group: GroupId) -> bool {
        let Some((voters, learners)) = &self.actual else {
            return false;
        };
        let desired: BTreeSet<NodeId> = self.desired.iter().copied().collect();
        *voters != desired || (group != META_GROUP && !learners.is_empty())
    }

    /// The nodes a move in flight adds or removes.
    pub fn moving_nodes(&self, group: GroupId) -> BTreeSet<NodeId> {
        if !self.in_flight(group) {
            return BTreeSet::new();
        }
        let Some((voters, learners)) = &self.actual else {
            return BTreeSet::new();
        };
        let desired: BTreeSet<NodeId> = self.desired.iter().copied().collect();
        let mut moving: BTreeSet<NodeId> = desired.symmetric_difference(voters).copied().collect();
        if group != META_GROUP {
            moving.extend(learners.iter().copied());
        }
        moving
    }
}

/// What bounds a round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// Moves in flight a node may take part in (added to or removed from a group).
    pub replica_moves_per_node: u32,
    /// Preferred leaders this round may change.
    pub leader_moves: u32,
    /// Balance replicas and leaders (false: paused; repairs go on).
    pub balance: bool,
    /// Replicas per group.
    pub replicas: u32,
}

/// Why a move is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MoveKind {
    /// The group has fewer replicas than it should: one is added at once.
    Fill,
    /// A replica on a removed node goes to another node.
    Replace,
    /// A replica beyond the group's number is dropped (a removed node's first).
    Drop,
    /// A replica moves from a loaded node to a light one.
    Balance,
    /// The preferred leader changes.
    Leader,
    /// A move to a node that stopped answering is undone (or goes to another node).
    Cancel,
}

/// One change of one group's desired voters.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Move {
    pub group: GroupId,
    pub kind: MoveKind,
    pub from: Option<NodeId>,
    pub to: Option<NodeId>,
}

/// The round's moves and each group's desired voters after them.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub moves: Vec<Move>,
    pub desired: BTreeMap<GroupId, Vec<NodeId>>,
}

/// Each node's load: its replicas weighted by bytes (an average group weighs 1), and its
/// preferred leaderships.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Load {
    pub replicas: u32,
    pub weighted: f64,
    pub bytes: u64,
    pub leaders: u32,
}

/// The world one round plans in: updated as it plans, so that later moves see earlier ones.
struct World<'a> {
    groups: BTreeMap<GroupId, GroupView>,
    members: &'a [Member],
    weight: BTreeMap<GroupId, f64>,
    /// Moves in flight (and begun this round) each node takes part in.
    busy: BTreeMap<NodeId, u32>,
    /// Groups in flight or moved this round: no other move begins in them.
    moving: BTreeSet<GroupId>,
    moves: Vec<Move>,
}

/// Plans one round.
pub fn plan(groups: &BTreeMap<GroupId, GroupView>, members: &[Member], bounds: &Bounds) -> Plan {
    let mut w = World::new(groups, members);
    w.repair(bounds);
    // Balancing waits while any group's state is unknown (its moves and bytes would be
    // guessed) and while any member drains (it is restarting: its share comes back with it).
    let calm = groups.values().all(|v| v.actual.is_some())
        && members
            .iter()
            .all(|m| !(m.active && (m.draining || !m.reachable)));
    if bounds.balance && calm {
        w.balance_replicas(bounds);
        w.balance_leaders(bounds.leader_moves);
    }
    Plan {
        moves: w.moves,
        desired: w.groups.into_iter().map(|(g, v)| (g, v.desired)).collect(),
    }
}

/// How many moves are left until the placement is balanced, as if each were made at once, no
/// limit held and every group's leader had answered (at most `cap`).
pub fn queued(
    groups: &BTreeMap<GroupId, GroupView>,
    members: &[Member],
    bounds: &Bounds,
    cap: usize,
) -> usize {
    let mut groups = groups.clone();
    let unbounded = Bounds {
        replica_moves_per_node: u32::MAX,
        leader_moves: u32::MAX,
        ..*bounds
    };
    let mut count = 0;
    while count < cap {
        // Each move in flight (or planned) done: the group is as desired.
        for view in groups.values_mut() {
            view.actual = Some((view.desired.iter().copied().collect(), BTreeSet::new()));
        }
        let next = plan(&groups, members, &unbounded);
        if next.moves.is_empty() {
            break;
        }
        count += next.moves.len();
        for (g, desired) in next.desired {
            if let Some(view) = groups.get_mut(&g) {
                view.desired = desired;
            }
        }
    }
    count.min(cap)
}

/// Each active member's load under `groups`' desired voters.
pub fn loads(groups: &BTreeMap<GroupId, GroupView>, members: &[Member]) -> BTreeMap<NodeId, Load> {
    World::new(groups, members).loads()
}

/// Whether every active member not draining is within ±1 of the mean, in weighted replicas and
/// in preferred leaders.
#[cfg(test)]
pub fn within_one(groups: &BTreeMap<GroupId, GroupView>, members: &[Member]) -> bool {
    let w = World::new(groups, members);
    let loads = w.loads();
    let pool: Vec<&Load> = members
        .iter()
        .filter(|m| m.active && !m.draining)
        .filter_map(|m| loads.get(&m.id))
        .collect();
    if pool.is_empty() {
        return true;
    }
    let n = pool.len() as f64;
    let mean_w = pool.iter().map(|l| l.weighted).sum::<f64>() / n;
    let mean_l = pool.iter().map(|l| l.leaders as f64).sum::<f64>() / n;
    pool.iter().all(|l| {
        (l.weighted - mean_w).abs() <= 1.0 + 1e-9 && (l.leaders as f64 - mean_l).abs() <= 1.0 + 1e-9
    })
}

impl<'a> World<'a> {
    fn new(groups: &BTreeMap<GroupId, GroupView>, members: &'a [Member]) -> World<'a> {
        let mean_bytes = if groups.is_empty() {
            0.0
        } else {
            groups.values().map(|v| v.bytes as f64).sum::<f64>() / groups.len() as f64
        };
        let weight = groups
            .iter()
            .map(|(&g, v)| {
                (
                    g,
                    (v.bytes as f64 + WEIGHT_FLOOR_BYTES) / (mean_bytes + WEIGHT_FLOOR_BYTES),
                )
            })
            .collect();
        let mut busy: BTreeMap<NodeId, u32> = BTreeMap::new();
        let mut moving = BTreeSet::new();
        for (&g, view) in groups {
            if view.in_flight(g) {
                moving.insert(g);
                for n in view.moving_nodes(g) {
                    *busy.entry(n).or_default() += 1;
                }
            }
        }
        World {
            groups: groups.clone(),
            members,
            weight,
            busy,
            moving,
            moves: Vec::new(),
        }
    }

    fn member(&self, n: NodeId) -> Option<&Member> {
        self.members.iter().find(|m| m.id == n)
    }

    fn is_active(&self, n: NodeId) -> bool {
        self.member(n).is_some_and(|m| m.active)
    }

    /// Nodes that may take a new replica: active, not draining, disk not low (low ones when
    /// no other can), never critical.
    fn takers(&self) -> Vec<NodeId> {
        let ok: Vec<NodeId> = self
            .members
            .iter()
            .filter(|m| m.active && m.reachable && !m.draining && !m.disk_low && !m.disk_critical)
            .map(|m| m.id)
            .collect();
        if !ok.is_empty() {
            return ok;
        }
        self.members
            .iter()
            .filter(|m| m.active && m.reachable && !m.draining && !m.disk_critical)
            .map(|m| m.id)
            .collect()
    }

    fn free(&self, n: NodeId, limit: u32) -> bool {
        self.busy.get(&n).copied().unwrap_or(0) < limit
    }

    fn loads(&self) -> BTreeMap<NodeId, Load> {
        let mut loads: BTreeMap<NodeId, Load> = self
            .members
            .iter()
            .filter(|m| m.active)
            .map(|m| (m.id, Load::default()))
            .collect();
        for (g, view) in &self.groups {
            let weight = self.weight.get(g).copied().unwrap_or(1.0);
            for n in &view.desired {
                if let Some(l) = loads.get_mut(n) {
                    l.replicas += 1;
                    l.weighted += weight;
                    l.bytes += view.bytes;
                }
            }
            if let Some(leader) = self.preferred_leader(view) {
                if let Some(l) = loads.get_mut(&leader) {
                    l.leaders += 1;
                }
            }
        }
        loads
    }

    /// The node placement hands the group's leadership to: its first desired voter not
    /// draining.
    fn preferred_leader(&self, view: &GroupView) -> Option<NodeId> {
        view.desired
            .iter()
            .copied()
            .find(|&n| self.member(n).is_some_and(|m| m.active && !m.draining))
    }

    fn begin(&mut self, group: GroupId, kind: MoveKind, from: Option<NodeId>, to: Option<NodeId>) {
        for n in from.iter().chain(to.iter()) {
            *self.busy.entry(*n).or_default() += 1;
        }
        self.moving.insert(group);
        self.moves.push(Move {
            group,
            kind,
            from,
            to,
        });
    }

    /// Repairs: groups short of replicas, replicas on removed nodes.
    fn repair(&mut self, bounds: &Bounds) {
        let active = self.members.iter().filter(|m| m.active).count();
        let want = (bounds.replicas.max(1) as usize).min(active.max(1));
        let takers = self.takers();
        let ids: Vec<GroupId> = self.groups.keys().copied().collect();
        for g in ids {
            let Some(view) = self.groups.get(&g) else {
                continue;
            };
            // A group no leader answered for is left as it is: its state is not known.
            if view.actual.is_none() {
                continue;
            }
            if self.cancel_move_to_unreachable(g, &takers) {
                continue;
            }
            let Some(view) = self.groups.get(&g) else {
                continue;
            };
            let desired = view.desired.clone();
            let gone: Vec<NodeId> = desired
                .iter()
                .copied()
                .filter(|&n| !self.is_active(n))
                .collect();
            let candidates: Vec<NodeId> = takers
                .iter()
                .copied()
                .filter(|n| !desired.contains(n))
                .collect();
            if desired.len() < want {
                // Short of replicas: the best takers by rendezvous rank (as placement always
                // ranked them), at once, whatever the limits.
                let mut ranked = candidates.clone();
                ranked.sort_by_key(|&n| std::cmp::Reverse(placement_score(g, n)));
                ranked.truncate(want - desired.len());
                if ranked.is_empty() {
                    continue;
                }
                let mut next = desired.clone();
                next.extend(ranked.iter().copied());
                // A group filled up takes the rendezvous order, which spreads leaders.
                next.sort_by_key(|&n| std::cmp::Reverse(placement_score(g, n)));
                self.set(g, next);
                for to in ranked {
                    self.begin(g, MoveKind::Fill, None, Some(to));
                }
                continue;
            }
            // A move in flight that needs `n` (a voter now) is not undone; a node the group's
            // leader has not made a voter yet waits on nothing.
            let voters = view
                .actual
                .as_ref()
                .map(|(v, _)| v.clone())
                .unwrap_or_default();
            let held = |n: NodeId| self.moving.contains(&g) && voters.contains(&n);
            let loads = self.loads();
            let load = |n: &NodeId| loads.get(n).map_or(f64::MAX, |l| l.weighted);
            if desired.len() > want {
                // More replicas than wanted (fewer members than replicas, or a layout seeded
                // in the middle of a change): a removed node's goes first, else the most
                // loaded node's.
                let off = gone.iter().copied().find(|&n| !held(n)).or_else(|| {
                    desired
                        .iter()
                        .copied()
                        .filter(|&n| !held(n))
                        .max_by(|a, b| load(a).total_cmp(&load(b)))
                });
                if let Some(off) = off {
                    let next: Vec<NodeId> = desired.iter().copied().filter(|&n| n != off).collect();
                    self.set(g, next);
                    self.begin(g, MoveKind::Drop, Some(off), None);
                }
                continue;
            }
            // The first removed node no move in flight needs (another may be one that does).
            let Some(off) = gone.iter().copied().find(|&n| !held(n)) else {
                continue;
            };
            let limit = bounds.replica_moves_per_node;
            let to = candidates
                .iter()
                .copied()
                .filter(|&n| self.free(n, limit))
                .min_by(|a, b| {
                    load(a)
                        .total_cmp(&load(b))
                        .then(placement_score(g, *b).cmp(&placement_score(g, *a)))
                });
            if let Some(to) = to {
                let next: Vec<NodeId> = desired
                    .iter()
                    .map(|&n| if n == off { to } else { n })
                    .collect();
                self.set(g, next);
                // The removed node is not counted busy: nothing waits on it.
                *self.busy.entry(to).or_default() += 1;
                self.moving.insert(g);
                self.moves.push(Move {
                    group: g,
                    kind: MoveKind::Replace,
                    from: Some(off),
                    to: Some(to),
                });
            }
        }
    }

    /// Undoes a move in flight to a node that stopped answering (one the group's leader has
    /// not made a voter yet): the voter it was to replace, when there is one that answers,
    /// stays; else the best other taker by rendezvous rank takes its place, else it is left
    /// out. Whether it changed the group.
    fn cancel_move_to_unreachable(&mut self, g: GroupId, takers: &[NodeId]) -> bool {
        let Some(view) = self.groups.get(&g) else {
            return false;
        };
        let Some((voters, _)) = &view.actual else {
            return false;
        };
        let unreachable = |n: NodeId| self.member(n).is_some_and(|m| m.active && !m.reachable);
        let Some(dead) = view
            .desired
            .iter()
            .copied()
            .find(|&n| !voters.contains(&n) && unreachable(n))
        else {
            return false;
        };
        let answering = |n: NodeId| self.member(n).is_some_and(|m| m.active && m.reachable);
        let back = voters
            .iter()
            .copied()
            .find(|&n| !view.desired.contains(&n) && answering(n));
        let instead = back.or_else(|| {
            takers
                .iter()
                .copied()
                .filter(|n| !view.desired.contains(n))
                .max_by_key(|&n| placement_score(g, n))
        });
        let next: Vec<NodeId> = match instead {
            Some(to) => view
                .desired
                .iter()
                .map(|&n| if n == dead { to } else { n })
                .collect(),
            None => view
                .desired
                .iter()
                .copied()
                .filter(|&n| n != dead)
                .collect(),
        };
        // A node taking the added replica instead takes part in a move now.
        let newcomer = instead.filter(|n| !voters.contains(n));
        self.set(g, next);
        self.moving.insert(g);
        if let Some(to) = newcomer {
            *self.busy.entry(to).or_default() += 1;
        }
        self.moves.push(Move {
            group: g,
            kind: MoveKind::Cancel,
            from: Some(dead),
            to: instead,
        });
        true
    }

    fn set(&mut self, g: GroupId, desired: Vec<NodeId>) {
        if let Some(view) = self.groups.get_mut(&g) {
            view.desired = desired;
        }
    }

    /// Moves replicas from the most loaded nodes to the least loaded ones until every node is
    /// within ±1 of the mean, or no move within the limits makes the spread smaller.
    fn balance_replicas(&mut self, bounds: &Bounds) {
        let limit = bounds.replica_moves_per_node;
        let sources: Vec<NodeId> = self
            .members
            .iter()
            .filter(|m| m.active && m.reachable && !m.draining)
            .map(|m| m.id)
            .collect();
        let takers = self.takers();
        // Each move lowers the sum of squared loads: bounded by the replicas there are.
        let most = self.groups.len() * bounds.replicas.max(1) as usize + 1;
        for _ in 0..most {
            let loads = self.loads();
            let pool: Vec<(NodeId, f64)> = sources
                .iter()
                .filter_map(|n| loads.get(n).map(|l| (*n, l.weighted)))
                .collect();
            if pool.len() < 2 {
                return;
            }
            let mean = pool.iter().map(|(_, l)| l).sum::<f64>() / pool.len() as f64;
            if pool.iter().all(|(_, l)| (l - mean).abs() <= 1.0 + 1e-9) {
                return;
            }
            let mut from_order = pool.clone();
            from_order.sort_by(|a, b| b.1.total_cmp(&a.1));
            let mut to_order: Vec<(NodeId, f64)> = pool
                .iter()
                .copied()
                .filter(|(n, _)| takers.contains(n))
                .collect();
            to_order.sort_by(|a, b| a.1.total_cmp(&b.1));
            let Some(found) = self.best_replica_move(&from_order, &to_order, limit) else {
                return;
            };
            let (g, from, to) = found;
            let next: Vec<NodeId> = self.groups[&g]
                .desired
                .iter()
                .map(|&n| if n == from { to } else { n })
                .collect();
            self.set(g, next);
            self.begin(g, MoveKind::Balance, Some(from), Some(to));
        }
    }

    /// The move that narrows the widest gap it can: from a node above another (most loaded
    /// first), to the light one, of the group whose weight is nearest half the gap.
    fn best_replica_move(
        &self,
        from_order: &[(NodeId, f64)],
        to_order: &[(NodeId, f64)],
        limit: u32,
    ) -> Option<(GroupId, NodeId, NodeId)> {
        for &(from, lf) in from_order {
            if !self.free(from, limit) {
                continue;
            }
            for &(to, lt) in to_order {
                let gap = lf - lt;
                if to == from || gap <= 1.0 + 1e-9 || !self.free(to, limit) {
                    continue;
                }
                let best = self
                    .groups
                    .iter()
                    .filter(|(g, v)| {
                        v.actual.is_some()
                            && !self.moving.contains(g)
                            && v.desired.contains(&from)
                            && !v.desired.contains(&to)
                            && v.desired.iter().all(|&n| self.is_active(n))
                    })
                    .filter_map(|(g, _)| {
                        let w = self.weight.get(g).copied().unwrap_or(1.0);
                        (w < gap - 1e-9).then_some((*g, (gap / 2.0 - w).abs()))
                    })
                    .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
                if let Some((g, _)) = best {
                    return Some((g, from, to));
                }
            }
        }
        None
    }

    /// Moves preferred leaderships from the nodes with the most to voters with fewer, until
    /// every node is within ±1 of the mean or `budget` moves were made.
    fn balance_leaders(&mut self, mut budget: u32) {
        let pool: Vec<NodeId> = self
            .members
            .iter()
            .filter(|m| m.active && !m.draining)
            .map(|m| m.id)
            .collect();
        if pool.len() < 2 {
            return;
        }
        while budget > 0 {
            let loads = self.loads();
            let count = |n: &NodeId| loads.get(n).map_or(0, |l| l.leaders);
            let mean = pool.iter().map(|n| count(n) as f64).sum::<f64>() / pool.len() as f64;
            let mut over: Vec<NodeId> = pool.clone();
            over.sort_by_key(|n| std::cmp::Reverse(count(n)));
            let fits = |n: &NodeId| (count(n) as f64 - mean).abs() <= 1.0 + 1e-9;
            if pool.iter().all(fits) {
                return;
            }
            // A group led by a node above the mean, with a voter two or more below it.
            let mut found = None;
            'search: for from in &over {
                for (g, view) in &self.groups {
                    if view.actual.is_none()
                        || self.moving.contains(g)
                        || self.preferred_leader(view) != Some(*from)
                    {
                        continue;
                    }
                    let to = view
                        .desired
                        .iter()
                        .copied()
                        .filter(|n| pool.contains(n) && count(n) + 1 < count(from))
                        .min_by_key(|n| count(n));
                    if let Some(to) = to {
                        found = Some((*g, *from, to));
                        break 'search;
                    }
                }
            }
            let Some((g, from, to)) = found else {
                return;
            };
            let mut next = self.groups[&g].desired.clone();
            next.retain(|&n| n != to);
            next.insert(0, to);
            self.set(g, next);
            self.moving.insert(g);
            self.moves.push(Move {
                group: g,
                kind: MoveKind::Leader,
                from: Some(from),
                to: Some(to),
            });
            budget -= 1;
        }
    }
}

#[cfg(test)]
mod tests;
