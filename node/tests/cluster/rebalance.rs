//! The rebalancer (`basalt admin rebalance`): replicas move to new nodes a move at a time
//! within the limits, and off removed ones.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::TestCluster;

/// `basalt admin rebalance <args>` through node `i`: the status it prints.
fn rebalance(cluster: &TestCluster, i: usize, args: &[&str]) -> Value {
    let mut all = vec!["rebalance"];
    all.extend_from_slice(args);
    serde_json::from_str(&cluster.admin(i, &all)).expect("rebalance status json")
}

/// Replicas (voters) per node in the placement the groups' leaders report.
fn voters_per_node(p: &Value) -> BTreeMap<u64, u32> {
    let mut count = BTreeMap::new();
    for g in p.as_object().expect("placement").values() {
        for v in g["voters"].as_array().into_iter().flatten() {
            *count.entry(v.as_u64().expect("node id")).or_default() += 1;
        }
    }
    count
}

/// Story — scaling out and back in (3 → 5 → 3 nodes, 9 groups of 3 replicas).
///
/// The cluster starts planning from the placement it has (no move); paused, two new nodes
/// get nothing; resumed, replicas move to them one move per node at a time (the default
/// limit, sampled all along) until every node is within ±1 of the mean, in replicas and
/// in preferred leaders; limits changed at once through three nodes all hold, limits out of
/// range are refused; removing the two nodes moves their
/// replicas back (the second while it leads groups); every object is readable throughout. A
/// replica moved off a node is erased there (one erasure each), and one added back where it
/// was erased catches up (a consistency check passes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_move_to_new_nodes_within_the_limits_and_back_off_removed_ones() {
    let mut cluster = TestCluster::start(3, &["--shards", "8"], &[]).await;
    let ids = crate::create_numbered(&cluster.client(1), "Thing", 40, |i| json!({"i": i})).await;
    // The planner writes its record from the groups' voters, and then spreads the leaders.
    let mut status = Value::Null;
    TestCluster::eventually(Duration::from_secs(60), "the rebalancer plans", || {
        status = rebalance(&cluster, 1, &["status"]);
        status["planning"] == true && status["balanced"] == true
    })
    .await;
    assert_eq!(status["settings"]["replicaMovesPerNode"], 1, "{status}");
    let nodes = status["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{status}");
    assert!(
        nodes.iter().all(|n| n["replicas"] == 9),
        "every node holds every group: {status}"
    );

    // Paused: new nodes take nothing, and the moves are counted as left.
    let paused = rebalance(&cluster, 0, &["pause"]);
    assert_eq!(paused["settings"]["paused"], true, "{paused}");
    cluster.add_node().await;
    cluster.add_node().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let status = rebalance(&cluster, 2, &["status"]);
    let counts = voters_per_node(&cluster.placement(0));
    assert_eq!(counts.get(&4), None, "{counts:?}");
    assert_eq!(counts.get(&5), None, "{counts:?}");
    assert!(
        status["queued"].as_u64().unwrap_or(0) >= 6,
        "moves left while paused: {status}"
    );
    assert_eq!(status["balanced"], false, "{status}");

    // Resumed: one move per node at a time, until balanced.
    rebalance(&cluster, 0, &["resume"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(150);
    let mut most_in_flight = 0;
    let mut saw_moves = false;
    loop {
        let s = rebalance(&cluster, 3, &["status"]);
        for n in s["nodes"].as_array().into_iter().flatten() {
            most_in_flight = most_in_flight.max(n["movesInFlight"].as_u64().unwrap_or(0));
        }
        saw_moves |= s["inFlight"].as_array().is_some_and(|m| !m.is_empty());
        if s["balanced"] == true && s["nodes"].as_array().map_or(0, Vec::len) == 5 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not balanced in time: {s}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(saw_moves, "moves were seen in flight");
    assert_eq!(
        most_in_flight, 1,
        "each node takes part in one move at a time"
    );
    let status = rebalance(&cluster, 4, &["status"]);
    let shares = status["nodes"].as_array().expect("nodes");
    let mean = shares
        .iter()
        .map(|n| n["weighted"].as_f64().unwrap_or(0.0))
        .sum::<f64>()
        / 5.0;
    let leaders_mean = 9.0 / 5.0;
    for n in shares {
        let w = n["weighted"].as_f64().unwrap_or(0.0);
        assert!((w - mean).abs() <= 1.01, "replicas within ±1: {status}");
        let l = n["preferredLeaders"].as_f64().unwrap_or(0.0);
        assert!(
            (l - leaders_mean).abs() <= 1.0,
            "leaders within ±1: {status}"
        );
    }
    // The groups' leaders report what the record says: 27 replicas over 5 nodes.
    let counts = voters_per_node(&cluster.placement(0));
    assert_eq!(counts.values().sum::<u32>(), 27, "{counts:?}");
    assert!(counts.values().all(|&c| (4..=7).contains(&c)), "{counts:?}");
    assert!(status["movesBegun"].as_u64().unwrap_or(0) >= 6, "{status}");
    // A replica moved away is stopped and erased where it was: each of the first three nodes
    // keeps only the groups the leaders place on it.
    let mut last_seen = (BTreeSet::new(), BTreeSet::new());
    TestCluster::eventually(Duration::from_secs(60), "moved replicas erased", || {
        let placement = cluster.placement(0);
        (0..3).all(|i| {
            last_seen = (
                local_data_groups(&cluster, i),
                placed_on(&placement, i as u64 + 1),
            );
            last_seen.0 == last_seen.1
        })
    })
    .await;
    // Counted once its state is erased (a moment after the replica left the node's status).
    let kept: usize = (0..3).map(|i| local_data_groups(&cluster, i).len()).sum();
    assert!(
        kept < 24,
        "replicas moved off the first three nodes ({last_seen:?})"
    );
    cluster
        .wait_metric_sum(
            &[0, 1, 2],
            "basalt_replicas_erased_total",
            (24 - kept) as f64,
            Duration::from_secs(30),
            "an erasure per replica moved off the first three nodes",
        )
        .await;
    for id in &ids {
        assert!(
            cluster
                .client(4)
                .get_object("Thing", id)
                .await
                .expect("get")
                .is_some(),
            "{id} readable through node 5"
        );
    }

    // Limits: changed, echoed, refused out of range.
    let limits = rebalance(
        &cluster,
        1,
        &[
            "limits",
            "--replica-moves-per-node",
            "2",
            "--snapshot-mb-per-s",
            "32",
        ],
    );
    assert_eq!(limits["settings"]["replicaMovesPerNode"], 2, "{limits}");
    assert_eq!(limits["settings"]["snapshotMbPerS"], 32, "{limits}");
    assert_eq!(limits["settings"]["leaderMovesPerS"], 4.0, "{limits}");
    // Three changes of different limits at once, through three nodes (compare-and-set of
    // one record): every one of them holds.
    let racing: Vec<std::process::Child> = [
        (0usize, "--replica-moves-per-node", "3"),
        (1, "--snapshot-mb-per-s", "16"),
        (2, "--leader-moves-per-s", "2"),
    ]
    .into_iter()
    .map(|(i, flag, value)| {
        std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args(["admin", "--rpc", &cluster.nodes[i].rpc])
            .args(["rebalance", "limits", flag, value])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("run basalt admin")
    })
    .collect();
    for mut child in racing {
        assert!(
            child.wait().expect("wait").success(),
            "a racing change failed"
        );
    }
    let settings = &rebalance(&cluster, 3, &["status"])["settings"];
    assert_eq!(
        (
            &settings["replicaMovesPerNode"],
            &settings["snapshotMbPerS"],
            &settings["leaderMovesPerS"]
        ),
        (&json!(3), &json!(16), &json!(2.0)),
        "{settings}"
    );
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "--rpc", &cluster.nodes[0].rpc])
        .args(["rebalance", "limits", "--replica-moves-per-node", "0"])
        .output()
        .expect("run basalt admin");
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("from 1 to 64"),
        "{refused:?}"
    );

    // Back to three nodes: each removal waits for the replicas to move, then stops the node;
    // a removed node hands over the leaderships it holds (node 4 holds some when removed).
    for (i, id) in [(4usize, "5"), (3, "4")] {
        if id == "4" {
            TestCluster::eventually(Duration::from_secs(60), "node 4 leads a group", || {
                let s = rebalance(&cluster, 0, &["status"]);
                s["nodes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|n| n["node"] == 4 && n["leaders"].as_u64().unwrap_or(0) > 0)
            })
            .await;
        }
        let out = cluster.admin(0, &["remove-node", id, "--wait-secs", "150"]);
        assert!(out.contains(&format!("node {id} stopped")), "{out}");
        cluster
            .wait_exit(i, Duration::from_secs(10))
            .await
            .expect("the removed node exits");
    }
    let counts = voters_per_node(&cluster.placement(0));
    assert_eq!(
        counts,
        BTreeMap::from([(1, 9), (2, 9), (3, 9)]),
        "every group back on the three nodes"
    );
    // The replicas added back where they were erased caught up: every group's three replicas
    // hold the same state at one committed index.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "--rpc", &cluster.nodes[0].rpc, "check"])
        .output()
        .expect("run basalt admin check");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(
        out.status.success(),
        "{report} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for g in report["groups"].as_array().expect("groups") {
        assert_eq!(g["digests"].as_array().map(Vec::len), Some(3), "{g}");
        assert_eq!(g["differing"], json!([]), "{g}");
    }
    for id in &ids {
        assert!(
            cluster
                .client(2)
                .get_object("Thing", id)
                .await
                .expect("get")
                .is_some(),
            "{id} readable after the removals"
        );
    }
}

/// Story — a node frozen (SIGSTOP) as the rebalancer begins moving replicas to it: after
/// `UNREACHABLE_AFTER` (30 s) without an answer the moves are cancelled (the replicas they
/// were to replace stay; `cancel` moves counted), the status calls it unreachable, nothing
/// else moves to it, and writes go on; thawed, it answers again and gets its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_to_a_node_that_stops_answering_are_cancelled() {
    let mut cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let mut ids = crate::create_numbered(&client, "Thing", 20, |i| json!({"i": i})).await;
    rebalance(&cluster, 0, &["pause"]);
    let four = cluster.add_node().await;
    cluster.pause(four);
    rebalance(&cluster, 0, &["resume"]);
    let to_four = |s: &Value| {
        s["inFlight"].as_array().is_some_and(|moves| {
            moves
                .iter()
                .any(|m| has_node(&m["desired"], 4) && !has_node(&m["voters"], 4))
        })
    };
    TestCluster::eventually(Duration::from_secs(30), "a move to node 4 begins", || {
        to_four(&rebalance(&cluster, 0, &["status"]))
    })
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let status = rebalance(&cluster, 1, &["status"]);
        let cancelled = status["inFlight"] == json!([])
            && status["nodes"].as_array().is_some_and(|nodes| {
                nodes
                    .iter()
                    .any(|n| n["node"] == 4 && n["unreachable"] == true && n["replicas"] == 0)
            });
        if cancelled {
            break;
        }
        if std::time::Instant::now() > deadline {
            let logs: Vec<String> = (0..3)
                .flat_map(|i| {
                    cluster
                        .log_text(i)
                        .lines()
                        .filter(|l| l.contains("rebalance") || l.contains("replica"))
                        .map(|l| format!("node {}: {l}", i + 1))
                        .collect::<Vec<_>>()
                })
                .collect();
            panic!(
                "the moves to node 4 were not cancelled: {status}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cluster
        .wait_metric_sum(
            &[0, 1, 2],
            "basalt_rebalance_moves_begun_total{kind=\"cancel\"}",
            1.0,
            Duration::from_secs(10),
            "a cancel counted",
        )
        .await;
    for p in cluster
        .placement(0)
        .as_object()
        .expect("placement")
        .values()
    {
        assert!(!has_node(&p["voters"], 4), "{p}");
    }
    ids.extend(crate::create_numbered(&client, "Thing", 10, |i| json!({"i": 100 + i})).await);

    cluster.resume(four);
    cluster.wait_balanced(Duration::from_secs(90)).await;
    let status = rebalance(&cluster, 0, &["status"]);
    assert!(
        status["nodes"]
            .as_array()
            .is_some_and(|nodes| nodes.iter().any(|n| n["node"] == 4
                && n["unreachable"].is_null()
                && n["replicas"].as_u64().unwrap_or(0) > 0)),
        "{status}"
    );
    for id in &ids {
        let got = cluster
            .client(3)
            .get_object("Thing", id)
            .await
            .expect("read");
        assert!(got.is_some(), "{id}");
    }
}

/// Story — a node removed while a voter of the same groups is frozen (SIGSTOP): the removal
/// replaces the removed node's replicas anyway (a voter that stays is not asked to answer
/// before the voters change; two of three voters answer), the frozen node keeps its replicas,
/// and every object stays readable and writable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_removed_while_another_voter_of_its_groups_is_frozen() {
    let mut cluster = TestCluster::start(4, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let mut ids = crate::create_numbered(&client, "Thing", 20, |i| json!({"i": i})).await;
    let before = cluster.placement(0);
    let shared = before
        .as_object()
        .expect("placement")
        .values()
        .filter(|p| has_node(&p["voters"], 2) && has_node(&p["voters"], 3))
        .count();
    assert!(
        shared > 0,
        "some group has nodes 2 and 3 as voters: {before}"
    );
    cluster.pause(2);
    let out = cluster.admin(0, &["remove-node", "2", "--wait-secs", "150"]);
    assert!(out.contains("node 2 stopped"), "{out}");
    cluster
        .wait_exit(1, Duration::from_secs(10))
        .await
        .expect("the removed node exits");
    for p in cluster
        .placement(0)
        .as_object()
        .expect("placement")
        .values()
    {
        assert!(!has_node(&p["voters"], 2), "{p}");
    }
    ids.extend(crate::create_numbered(&client, "Thing", 10, |i| json!({"i": 100 + i})).await);
    for id in &ids {
        let got = cluster
            .client(3)
            .get_object("Thing", id)
            .await
            .expect("read");
        assert!(got.is_some(), "{id}");
    }
    cluster.resume(2);
}

/// Story — single-replica groups leaving a removed node (3 nodes, one replica per group).
///
/// Node 1 started every group, so it keeps a replica of each group it gave away, which still
/// names the leader it last knew. Once node 2 is removed and its groups have moved (to node 1
/// or node 3), every object is written and read through node 1 at the first try: a request
/// for a group that moved from node 2 to node 3 finds node 3, instead of asking node 2 — which
/// knows no leader any more — until its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_replica_groups_moved_off_a_removed_node_are_served_through_every_node() {
    let cluster = TestCluster::start(3, &["--shards", "6", "--replicas", "1"], &[]).await;
    let before = cluster.placement(0);
    rebalance(&cluster, 0, &["pause"]);
    let out = cluster.admin(
        0,
        &["remove-node", "2", "--keep-running", "--wait-secs", "120"],
    );
    assert!(out.contains("holds no replicas"), "{out}");
    let after = cluster.placement(0);
    let moved_to_3: Vec<&String> = before
        .as_object()
        .expect("placement")
        .iter()
        .filter(|(g, p)| has_node(&p["voters"], 2) && has_node(&after[g.as_str()]["voters"], 3))
        .map(|(g, _)| g)
        .collect();
    let through = cluster.client(0);
    let ids = crate::create_numbered(&through, "Moved", 30, |i| json!({"i": i})).await;
    for id in &ids {
        let got = through
            .get_object("Moved", id)
            .await
            .unwrap_or_else(|e| panic!("read {id} (groups moved 2 -> 3: {moved_to_3:?}): {e}"));
        assert!(got.is_some(), "{id}");
    }
    let listed = through
        .query("Moved", &[("count", "1"), ("limit", "0")])
        .await
        .expect("count");
    assert_eq!(listed["count"], json!(30), "{after}");
}

/// The data groups node `i` holds a replica of (`basalt admin status`).
fn local_data_groups(cluster: &TestCluster, i: usize) -> BTreeSet<u64> {
    cluster
        .data_group_field(i, "applied")
        .into_iter()
        .map(|(g, _)| g)
        .collect()
}

/// The data groups whose voters or learners (as their leaders report) include node `id`.
fn placed_on(placement: &Value, id: u64) -> BTreeSet<u64> {
    placement
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, g)| has_node(&g["voters"], id) || has_node(&g["learners"], id))
        .filter_map(|(group, _)| group.parse().ok())
        .filter(|&g: &u64| g != 0)
        .collect()
}

fn has_node(list: &Value, id: u64) -> bool {
    list.as_array().is_some_and(|l| l.iter().any(|n| n == id))
}
