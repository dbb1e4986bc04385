use super::*;

fn n(id: u64) -> NodeId {
    NodeId::new(id)
}

fn members(ids: &[u64]) -> Vec<Member> {
    ids.iter()
        .map(|&id| Member {
            id: n(id),
            active: true,
            draining: false,
            disk_low: false,
            disk_critical: false,
            reachable: true,
        })
        .collect()
}

/// `groups` data groups (plus group 0) all on `nodes`, settled (voters as desired).
fn settled(groups: u32, nodes: &[u64], bytes: u64) -> BTreeMap<GroupId, GroupView> {
    (0..=groups)
        .map(|g| {
            let desired: Vec<NodeId> = nodes.iter().map(|&i| n(i)).collect();
            (
                GroupId::new(g),
                GroupView {
                    actual: Some((desired.iter().copied().collect(), BTreeSet::new())),
                    desired,
                    bytes,
                },
            )
        })
        .collect()
}

fn bounds(per_node: u32) -> Bounds {
    Bounds {
        replica_moves_per_node: per_node,
        leader_moves: 100,
        balance: true,
        replicas: 3,
    }
}

/// Runs rounds, each move done before the next round, until none is planned; checks the limit
/// held in each round. The number of rounds.
fn run_to_end(
    groups: &mut BTreeMap<GroupId, GroupView>,
    members: &[Member],
    bounds: &Bounds,
) -> usize {
    for round in 1..=500 {
        let p = plan(groups, members, bounds);
        if p.moves.is_empty() {
            return round;
        }
        let mut per_node: BTreeMap<NodeId, u32> = BTreeMap::new();
        for m in p.moves.iter().filter(|m| m.kind == MoveKind::Balance) {
            for x in m.from.iter().chain(m.to.iter()) {
                *per_node.entry(*x).or_default() += 1;
            }
        }
        assert!(
            per_node
                .values()
                .all(|&c| c <= bounds.replica_moves_per_node),
            "round {round}: {per_node:?}"
        );
        for (g, desired) in p.desired {
            let view = groups.get_mut(&g).expect("group");
            view.actual = Some((desired.iter().copied().collect(), BTreeSet::new()));
            view.desired = desired;
        }
    }
    panic!("no end to the moves");
}

#[test]
fn leaders_on_one_node_move_and_then_nothing_does() {
    let groups = settled(16, &[1, 2, 3], 1000);
    let p = plan(&groups, &members(&[1, 2, 3]), &bounds(1));
    // Leaders are all on node 1 in this layout: only leader moves.
    assert!(p.moves.iter().all(|m| m.kind == MoveKind::Leader), "{p:?}");
    let mut groups = groups;
    run_to_end(&mut groups, &members(&[1, 2, 3]), &bounds(1));
    assert!(within_one(&groups, &members(&[1, 2, 3])));
    let p = plan(&groups, &members(&[1, 2, 3]), &bounds(1));
    assert!(p.moves.is_empty(), "{p:?}");
}

#[test]
fn two_new_nodes_get_their_share_one_move_per_node_at_a_time() {
    let mut groups = settled(16, &[1, 2, 3], 1 << 20);
    let five = members(&[1, 2, 3, 4, 5]);
    let rounds = run_to_end(&mut groups, &five, &bounds(1));
    assert!(within_one(&groups, &five), "{:?}", loads(&groups, &five));
    let l = loads(&groups, &five);
    // 17 groups × 3 replicas over 5 nodes: 10.2 each.
    assert!(l.values().all(|l| (10..=11).contains(&l.replicas)), "{l:?}");
    // At one move per node, the two new nodes take about 10 moves each, one at a time.
    assert!(rounds >= 10, "{rounds} rounds");
    assert!(groups.values().all(|v| v.desired.len() == 3));
}

#[test]
fn the_limit_bounds_moves_in_flight_too() {
    let mut groups = settled(8, &[1, 2, 3], 0);
    let four = members(&[1, 2, 3, 4]);
    let first = plan(&groups, &four, &bounds(1));
    let balance: Vec<&Move> = first
        .moves
        .iter()
        .filter(|m| m.kind == MoveKind::Balance)
        .collect();
    assert_eq!(balance.len(), 1, "{first:?}");
    // The move is under way (not yet made): the next round begins none on node 4.
    for (g, desired) in &first.desired {
        groups.get_mut(g).expect("group").desired = desired.clone();
    }
    let second = plan(&groups, &four, &bounds(1));
    assert!(
        second
            .moves
            .iter()
            .all(|m| m.kind != MoveKind::Balance || m.to != Some(n(4))),
        "{second:?}"
    );
    // Two per node: two at once.
    let mut groups = settled(8, &[1, 2, 3], 0);
    let p = plan(&groups, &four, &bounds(2));
    let to4 = p.moves.iter().filter(|m| m.to == Some(n(4))).count();
    assert_eq!(to4, 2, "{p:?}");
    run_to_end(&mut groups, &four, &bounds(2));
    assert!(within_one(&groups, &four));
}

#[test]
fn bytes_weigh_replicas() {
    // Group 1 holds three times what each other group holds.
    let mut groups = settled(15, &[1, 2, 3], 10 << 20);
    groups.get_mut(&GroupId::new(1)).expect("g1").bytes = 30 << 20;
    let four = members(&[1, 2, 3, 4]);
    run_to_end(&mut groups, &four, &bounds(1));
    let l = loads(&groups, &four);
    let mean = l.values().map(|l| l.weighted).sum::<f64>() / 4.0;
    assert!(
        l.values().all(|l| (l.weighted - mean).abs() <= 1.0 + 1e-9),
        "{l:?}"
    );
    // The node without the big group holds more replicas than any with it.
    let big = &groups[&GroupId::new(1)].desired;
    let without = l
        .keys()
        .find(|n| !big.contains(n))
        .expect("a node without group 1");
    assert!(
        big.iter().all(|n| l[n].replicas < l[without].replicas),
        "{l:?}"
    );
}

#[test]
fn a_removed_node_is_replaced_within_the_limits_and_a_short_group_filled_at_once() {
    let mut groups = settled(8, &[1, 2, 3, 4], 0);
    for (g, v) in groups.iter_mut() {
        v.desired.truncate(3);
        v.desired.rotate_left(g.get() as usize % 3);
        v.actual = Some((v.desired.iter().copied().collect(), BTreeSet::new()));
    }
    let mut ms = members(&[1, 2, 3, 4]);
    ms[0].active = false; // node 1 removed
    let p = plan(&groups, &ms, &bounds(1));
    let replaced: Vec<&Move> = p
        .moves
        .iter()
        .filter(|m| m.kind == MoveKind::Replace)
        .collect();
    // Only node 4 can take node 1's replicas (the others hold them): one at a time.
    assert_eq!(replaced.len(), 1, "{p:?}");
    run_to_end(&mut groups, &ms, &bounds(1));
    assert!(groups.values().all(|v| !v.desired.contains(&n(1))));
    assert!(groups.values().all(|v| v.desired.len() == 3));

    // A group on one node of three fills up at once, in rendezvous order.
    let mut groups = settled(4, &[1], 0);
    let three = members(&[1, 2, 3]);
    let p = plan(&groups, &three, &bounds(1));
    let fills = p.moves.iter().filter(|m| m.kind == MoveKind::Fill).count();
    assert_eq!(fills, 10, "{p:?}");
    for (g, desired) in &p.desired {
        // The three nodes by rendezvous rank, as placement ranks them.
        let mut want = vec![n(1), n(2), n(3)];
        want.sort_by_key(|&x| std::cmp::Reverse(placement_score(*g, x)));
        assert_eq!(desired, &want);
    }
    run_to_end(&mut groups, &three, &bounds(1));
}

#[test]
fn paused_balance_still_repairs_and_draining_nodes_are_spared() {
    let groups = settled(8, &[1, 2, 3], 0);
    let mut ms = members(&[1, 2, 3, 4]);
    let paused = Bounds {
        balance: false,
        ..bounds(1)
    };
    assert!(plan(&groups, &ms, &paused).moves.is_empty());
    // Node 4 drains: nothing goes to it.
    ms[3].draining = true;
    let p = plan(&groups, &ms, &bounds(1));
    assert!(p.moves.iter().all(|m| m.to != Some(n(4))), "{p:?}");
    // A node whose disk is low takes nothing either.
    ms[3].draining = false;
    ms[3].disk_low = true;
    let p = plan(&groups, &ms, &bounds(1));
    assert!(
        p.moves
            .iter()
            .all(|m| m.kind == MoveKind::Leader || m.to != Some(n(4))),
        "{p:?}"
    );
}

#[test]
fn leaders_spread_within_the_round_budget() {
    let groups = settled(16, &[1, 2, 3], 0);
    let ms = members(&[1, 2, 3]);
    let p = plan(
        &groups,
        &ms,
        &Bounds {
            leader_moves: 2,
            ..bounds(1)
        },
    );
    assert_eq!(p.moves.len(), 2, "{p:?}");
    assert!(p.moves.iter().all(|m| m.kind == MoveKind::Leader));
    assert!(queued(&groups, &ms, &bounds(1), 1000) >= 10);
}

#[test]
fn a_target_removed_before_it_joined_is_replaced_mid_move_and_extra_replicas_dropped() {
    let mut groups = settled(4, &[1, 2, 3], 0);
    // Group 1 is adding node 4 in place of node 3 (a learner now) when node 4 is removed.
    let g1 = groups.get_mut(&GroupId::new(1)).expect("g1");
    g1.desired = vec![n(1), n(2), n(4)];
    g1.actual = Some(([n(1), n(2), n(3)].into(), [n(4)].into()));
    let mut ms = members(&[1, 2, 3, 4, 5]);
    ms[3].active = false;
    let p = plan(&groups, &ms, &bounds(1));
    assert_eq!(p.desired[&GroupId::new(1)], vec![n(1), n(2), n(5)], "{p:?}");
    assert!(p
        .moves
        .iter()
        .any(|m| m.kind == MoveKind::Replace && m.from == Some(n(4)) && m.to == Some(n(5))));

    // A group with a fourth replica (seeded in the middle of a change) loses one.
    let mut groups = settled(2, &[1, 2, 3], 0);
    let g2 = groups.get_mut(&GroupId::new(2)).expect("g2");
    g2.desired = vec![n(1), n(2), n(3), n(4)];
    g2.actual = Some((g2.desired.iter().copied().collect(), BTreeSet::new()));
    let four = members(&[1, 2, 3, 4]);
    let p = plan(&groups, &four, &bounds(1));
    assert_eq!(p.desired[&GroupId::new(2)].len(), 3, "{p:?}");
    run_to_end(&mut groups, &four, &bounds(1));
    assert!(groups.values().all(|v| v.desired.len() == 3));
}

#[test]
fn balancing_waits_while_a_member_drains_or_a_group_is_unknown() {
    let groups = settled(8, &[1, 2, 3], 0);
    let mut ms = members(&[1, 2, 3, 4]);
    ms[1].draining = true;
    assert!(plan(&groups, &ms, &bounds(1)).moves.is_empty());
    let mut groups = groups;
    groups.get_mut(&GroupId::new(3)).expect("g3").actual = None;
    assert!(plan(&groups, &members(&[1, 2, 3, 4]), &bounds(1))
        .moves
        .is_empty());
}

#[test]
fn a_removed_node_no_move_needs_is_replaced_beside_one_a_move_needs() {
    // Group 1 moves C(3) → D(4) while B(2) and D(4) are removed: D, not yet a voter, is
    // replaced at once though B, a voter of the move in flight, waits.
    let mut groups = settled(2, &[1, 2, 3], 0);
    let g1 = groups.get_mut(&GroupId::new(1)).expect("g1");
    g1.desired = vec![n(1), n(2), n(4)];
    g1.actual = Some(([n(1), n(2), n(3)].into(), [n(4)].into()));
    let mut ms = members(&[1, 2, 3, 4, 5, 6]);
    ms[1].active = false;
    ms[3].active = false;
    let p = plan(&groups, &ms, &bounds(1));
    let g1 = &p.desired[&GroupId::new(1)];
    assert_eq!(&g1[..2], &[n(1), n(2)], "{p:?}");
    assert!(g1[2] == n(5) || g1[2] == n(6), "{p:?}");
}

/// `members(ids)` with `silent` ones unreachable.
fn with_silent(ids: &[u64], silent: &[u64]) -> Vec<Member> {
    let mut all = members(ids);
    for m in &mut all {
        m.reachable = !silent.contains(&m.id.get());
    }
    all
}

#[test]
fn a_move_to_a_node_that_stopped_answering_is_cancelled_back() {
    // Group 1 was moving from node 3 to node 4 (a learner so far) when node 4 went silent.
    let mut groups = settled(4, &[1, 2, 3], 1 << 20);
    let view = groups.get_mut(&GroupId::new(1)).expect("group 1");
    view.desired = vec![n(1), n(2), n(4)];
    view.actual = Some(([n(1), n(2), n(3)].into(), [n(4)].into()));
    let four = with_silent(&[1, 2, 3, 4], &[4]);
    let p = plan(&groups, &four, &bounds(1));
    assert_eq!(
        p.moves,
        vec![Move {
            group: GroupId::new(1),
            kind: MoveKind::Cancel,
            from: Some(n(4)),
            to: Some(n(3)),
        }],
        "the replica on node 3 stays, and nothing else moves while node 4 is silent"
    );
    assert_eq!(p.desired[&GroupId::new(1)], vec![n(1), n(2), n(3)]);
    // Still silent once the group settled back: nothing moves to it.
    let view = groups.get_mut(&GroupId::new(1)).expect("group 1");
    view.desired = vec![n(1), n(2), n(3)];
    view.actual = Some(([n(1), n(2), n(3)].into(), BTreeSet::new()));
    let p = plan(&groups, &four, &bounds(1));
    assert!(p.moves.iter().all(|m| m.to != Some(n(4))), "{p:?}");
    // Answering again, it gets its share.
    let p = plan(&groups, &members(&[1, 2, 3, 4]), &bounds(1));
    assert!(p.moves.iter().any(|m| m.to == Some(n(4))), "{p:?}");
}

#[test]
fn a_fill_to_a_silent_node_goes_to_another_and_silent_nodes_take_nothing() {
    // Group 2 has two voters and was filling to node 4, which went silent: node 5 takes it.
    let mut groups = settled(3, &[1, 2, 3, 5], 1 << 20);
    for v in groups.values_mut() {
        v.desired = vec![n(1), n(2), n(3)];
        v.actual = Some((v.desired.iter().copied().collect(), BTreeSet::new()));
    }
    let view = groups.get_mut(&GroupId::new(2)).expect("group 2");
    view.desired = vec![n(1), n(2), n(4)];
    view.actual = Some(([n(1), n(2)].into(), [n(4)].into()));
    let five = with_silent(&[1, 2, 3, 4, 5], &[4]);
    let p = plan(&groups, &five, &bounds(1));
    let cancel = p
        .moves
        .iter()
        .find(|m| m.group == GroupId::new(2))
        .expect("group 2 changes");
    assert_eq!(cancel.kind, MoveKind::Cancel, "{p:?}");
    assert_eq!(cancel.from, Some(n(4)));
    assert!(
        matches!(cancel.to, Some(x) if x == n(3) || x == n(5)),
        "{p:?}"
    );
    assert!(
        p.moves.iter().all(|m| m.kind == MoveKind::Cancel),
        "balancing waits while a member is silent: {p:?}"
    );
    // A short group fills on answering nodes only.
    let mut short = settled(2, &[1, 2], 0);
    for v in short.values_mut() {
        v.actual = Some((v.desired.iter().copied().collect(), BTreeSet::new()));
    }
    let p = plan(&short, &with_silent(&[1, 2, 3, 4], &[3]), &bounds(1));
    assert!(!p.moves.is_empty());
    assert!(
        p.moves
            .iter()
            .all(|m| m.kind == MoveKind::Fill && m.to == Some(n(4))),
        "{p:?}"
    );
}

#[test]
fn a_cancels_new_taker_is_busy_for_the_rest_of_the_round() {
    // Group 1 was filling to node 4, which went silent; group 2 has a replica on removed node
    // 6. Node 5 is the only other taker, one move at a time: the cancel gives it group 1's
    // replica, and group 2's replacement waits for the next round.
    let mut groups = settled(2, &[1, 3, 5], 1 << 20);
    let g1 = groups.get_mut(&GroupId::new(1)).expect("group 1");
    g1.desired = vec![n(1), n(3), n(4)];
    g1.actual = Some(([n(1), n(3)].into(), [n(4)].into()));
    let g2 = groups.get_mut(&GroupId::new(2)).expect("group 2");
    g2.desired = vec![n(1), n(3), n(6)];
    g2.actual = Some(([n(1), n(3), n(6)].into(), BTreeSet::new()));
    let mut ms = with_silent(&[1, 3, 4, 5, 6], &[4]);
    ms[4].active = false;
    let p = plan(&groups, &ms, &bounds(1));
    assert_eq!(
        p.moves,
        vec![Move {
            group: GroupId::new(1),
            kind: MoveKind::Cancel,
            from: Some(n(4)),
            to: Some(n(5)),
        }],
        "one move per node"
    );
    // Next round, the cancel done: group 2's replica on node 6 goes to node 5.
    let g1 = groups.get_mut(&GroupId::new(1)).expect("group 1");
    g1.desired = vec![n(1), n(3), n(5)];
    g1.actual = Some(([n(1), n(3), n(5)].into(), BTreeSet::new()));
    let p = plan(&groups, &ms, &bounds(1));
    assert!(
        p.moves.iter().any(|m| m.group == GroupId::new(2)
            && m.kind == MoveKind::Replace
            && m.to == Some(n(5))),
        "{p:?}"
    );
}
