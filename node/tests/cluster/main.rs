//! Multi-process cluster tests: real `basalt` processes on loopback, started, killed,
//! restarted, joined and removed.

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::TestCluster;
use serde_json::{json, Value};

/// Every create through any node is readable through every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_accept_creates_everywhere_and_serve_every_object() {
    let cluster = TestCluster::start(3, &["--shards", "8"], &[]).await;
    let mut created = Vec::new();
    for i in 0..30 {
        let c = cluster
            .client(i % 3)
            .create_object("Item", &json!({"n": i}))
            .await
            .expect("create");
        created.push((c.object_id, i));
    }
    for node in 0..3 {
        let client = cluster.client(node);
        for (id, n) in &created {
            let obj = client
                .get_object("Item", id)
                .await
                .expect("get")
                .expect("object exists");
            assert_eq!(obj["n"], json!(n), "object {id} through node {}", node + 1);
            assert_eq!(obj["objectId"], json!(id));
        }
    }
    let listed = cluster
        .client(2)
        .query("Item", &[("count", "1"), ("limit", "0")])
        .await
        .expect("list");
    assert_eq!(listed["count"], json!(30));
}

/// 8 clients each increment one counter 200 times through different nodes: none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_increments_through_every_node_are_exact() {
    let cluster = TestCluster::start(3, &["--shards", "8"], &[]).await;
    let counter = cluster
        .client(0)
        .create_object("Counter", &json!({"value": 0}))
        .await
        .expect("create")
        .object_id;
    let mut tasks = Vec::new();
    for c in 0..8 {
        let client = cluster.client(c % 3);
        let id = counter.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..200 {
                client
                    .increment("Counter", &id, "value", 1)
                    .await
                    .expect("increment");
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    for node in 0..3 {
        let obj = cluster
            .client(node)
            .get_object("Counter", &counter)
            .await
            .expect("get")
            .expect("exists");
        assert_eq!(obj["value"], json!(1600));
    }
}

/// `kill -9` of the node that leads the most groups during a stream of creates: the surviving
/// nodes elect new leaders and serve again, and every acknowledged create is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_leader_loses_no_acknowledged_create() {
    let mut cluster = TestCluster::start(3, &["--shards", "8"], &[]).await;
    // The node leading the most groups is the victim.
    let placement = cluster.placement(0);
    let mut leads = [0usize; 3];
    for g in placement.as_object().expect("placement").values() {
        if let Some(l) = g["leader"].as_u64() {
            leads[(l - 1) as usize] += 1;
        }
    }
    let victim = (0..3).max_by_key(|&i| leads[i]).unwrap_or(0);
    let survivors: Vec<usize> = (0..3).filter(|&i| i != victim).collect();

    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let client = cluster.client(survivors[w % 2]);
        let (acked, stop) = (acked.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) && n < 2000 {
                n += 1;
                if let Ok(c) = client
                    .create_object("Stream", &json!({"writer": w, "n": n}))
                    .await
                {
                    acked.lock().expect("lock").push(c.object_id);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_kill = acked.lock().expect("lock").len();
    cluster.kill(victim);
    // New leaders serve: creates are acknowledged again after the kill.
    TestCluster::eventually(
        Duration::from_secs(20),
        "creates acknowledged after the kill",
        || {
            acked
                .lock()
                .map(|a| a.len() > before_kill + 50)
                .unwrap_or(false)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("writer");
    }
    let acked = acked.lock().expect("lock").clone();
    assert!(before_kill > 0, "the stream was running before the kill");
    for &node in &survivors {
        let client = cluster.client(node);
        for id in &acked {
            let obj = client
                .get_object("Stream", id)
                .await
                .expect("get after kill");
            assert!(
                obj.is_some(),
                "acknowledged create {id} lost (read through node {})",
                node + 1
            );
        }
    }
    // The killed node comes back and catches up.
    cluster.restart(victim).await;
    cluster.wait_healthy(victim, Duration::from_secs(60)).await;
    let sample = &acked[acked.len() / 2];
    assert!(cluster
        .client(victim)
        .get_object("Stream", sample)
        .await
        .expect("get")
        .is_some());
}

/// A node stopped while its peers write enough to purge their logs catches up by snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_catches_up_by_snapshot() {
    let tuning = ["--snapshot-logs", "100", "--keep-logs", "10"];
    let mut cluster = TestCluster::start(3, &["--shards", "2"], &tuning).await;
    let before = cluster
        .client(0)
        .create_object("Doc", &json!({"phase": "before"}))
        .await
        .expect("create");
    cluster.stop(2);
    let client = cluster.client(0);
    let mut ids = vec![before.object_id.clone()];
    for i in 0..600 {
        ids.push(
            client
                .create_object("Doc", &json!({"i": i}))
                .await
                .expect("create while node 3 is down")
                .object_id,
        );
    }
    // The live nodes purged log entries that node 3 never received.
    let status: Value = serde_json::from_str(&cluster.admin(0, &["status"])).expect("status");
    let purged = status["Status"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter(|g| g["group"].as_u64() != Some(0))
        .map(|g| g["purged"].as_u64().unwrap_or(0))
        .min()
        .unwrap_or(0);
    assert!(purged > 0, "logs were purged on node 1: {status}");
    cluster.restart(2).await;
    cluster.wait_healthy(2, Duration::from_secs(60)).await;
    let node3 = cluster.client(2);
    TestCluster::eventually(
        Duration::from_secs(60),
        "node 3 installs snapshots and catches up",
        || {
            let s: Value =
                serde_json::from_str(&cluster.admin(2, &["status"])).unwrap_or(Value::Null);
            let lead: Value =
                serde_json::from_str(&cluster.admin(0, &["status"])).unwrap_or(Value::Null);
            let applied = |v: &Value, g: u64| {
                v["Status"]["groups"]
                    .as_array()
                    .and_then(|gs| gs.iter().find(|x| x["group"].as_u64() == Some(g)))
                    .and_then(|x| x["applied"].as_u64())
                    .unwrap_or(0)
            };
            (1..=2).all(|g| applied(&s, g) >= purged && applied(&s, g) + 5 >= applied(&lead, g))
        },
    )
    .await;
    assert!(
        cluster
            .metric(2, "basalt_raft_snapshots_received_total")
            .await
            >= 1.0,
        "node 3 received a snapshot"
    );
    for id in ids.iter().step_by(37) {
        assert!(
            node3.get_object("Doc", id).await.expect("get").is_some(),
            "{id} readable through node 3"
        );
    }
}

fn hosts(group: &Value, node: u64) -> bool {
    let has = |k: &str| {
        group[k]
            .as_array()
            .is_some_and(|a| a.iter().any(|n| n.as_u64() == Some(node)))
    };
    has("voters") || has("learners")
}

/// A 4th node joins and ends up holding replicas; a removed node's groups keep 3 replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_gets_replicas_and_a_removed_node_gives_them_up() {
    let mut cluster = TestCluster::start(3, &["--shards", "8"], &[]).await;
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            cluster
                .client(i % 3)
                .create_object("Thing", &json!({"i": i}))
                .await
                .expect("create")
                .object_id,
        );
    }
    let fourth = cluster.add_node().await;
    TestCluster::eventually(
        Duration::from_secs(60),
        "node 4 holds voting replicas",
        || {
            let p = cluster.placement(0);
            let groups = p
                .as_object()
                .map(|m| m.values().cloned().collect::<Vec<_>>())
                .unwrap_or_default();
            groups.len() == 9
                && groups
                    .iter()
                    .filter(|g| {
                        g["voters"]
                            .as_array()
                            .is_some_and(|v| v.iter().any(|n| n.as_u64() == Some(4)))
                    })
                    .count()
                    >= 2
                && groups
                    .iter()
                    .all(|g| g["voters"].as_array().map_or(0, Vec::len) == 3)
        },
    )
    .await;
    assert!(cluster
        .client(fourth)
        .get_object("Thing", &ids[0])
        .await
        .expect("get")
        .is_some());

    cluster.admin(1, &["remove-node", "1", "--wait-secs", "90"]);
    let p = cluster.placement(1);
    let groups: Vec<Value> = p
        .as_object()
        .expect("placement")
        .values()
        .cloned()
        .collect();
    assert_eq!(groups.len(), 9, "every group has a leader: {p}");
    for g in &groups {
        assert!(!hosts(g, 1), "node 1 still holds a replica: {g}");
        assert_eq!(
            g["voters"].as_array().map_or(0, Vec::len),
            3,
            "three replicas: {g}"
        );
    }
    cluster.stop(0);
    let ids_set: BTreeSet<_> = ids.iter().collect();
    for id in ids_set {
        assert!(cluster
            .client(3)
            .get_object("Thing", id)
            .await
            .expect("get after removal")
            .is_some());
    }
}
