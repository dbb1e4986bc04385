//! Multi-process cluster tests: real `basalt` processes on loopback, started, killed,
//! restarted, joined and removed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod backup;
mod check;
mod crash;
mod disk;
mod drain;
mod prometheus;
mod rebalance;
mod split;
mod startup;
mod survival;
mod trust;
mod upgrade;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use basalt_client::signing::{Formula, SignedKeys};
use common::TestCluster;
use serde_json::{json, Value};

/// Every object id of `class`, through `client` (in pages, by id).
async fn all_ids(client: &basalt_client::Client, class: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut after = String::new();
    loop {
        let filter = json!({"objectId": {"$gt": after}}).to_string();
        let page = client
            .query(
                class,
                &[
                    ("where", &filter),
                    ("order", "objectId"),
                    ("limit", "1000"),
                    ("keys", "objectId"),
                ],
            )
            .await
            .unwrap();
        let results = page["results"].as_array().unwrap();
        let Some(last) = results.last() else {
            return ids;
        };
        after = last["objectId"].as_str().unwrap().to_string();
        ids.extend(
            results
                .iter()
                .map(|o| o["objectId"].as_str().unwrap().to_string()),
        );
    }
}

/// Waits (30 s at most) until the cluster finalized the `slots` feature: splits may begin.
async fn wait_slots_feature(cluster: &TestCluster) {
    TestCluster::eventually(Duration::from_secs(30), "the slots feature is on", || {
        serde_json::from_str::<Value>(&cluster.admin(0, &["upgrade", "status"])).is_ok_and(|s| {
            s["features"]
                .as_array()
                .is_some_and(|f| f.contains(&json!("slots")))
        })
    })
    .await;
}

/// Creates `n` objects of `class` through `client`, the i-th with `body(i)`; their ids in order.
async fn create_numbered(
    client: &basalt_client::Client,
    class: &str,
    n: usize,
    body: impl Fn(usize) -> Value,
) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let created = client
            .create_object(class, &body(i))
            .await
            .unwrap_or_else(|e| panic!("create {class} #{i}: {e}"));
        ids.push(created.object_id);
    }
    ids
}

/// Nodes restarted together refuse to vote while a leader elected before the restart may
/// still serve lease reads (one election timeout: `basalt_raft_votes_refused_total`), then
/// elect leaders and serve every object written before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_nodes_hold_their_votes_then_elect_leaders() {
    let mut cluster = TestCluster::start(3, &["--shards", "6"], &[]).await;
    let client = cluster.client(0);
    let ids = create_numbered(&client, "Held", 12, |i| json!({"n": i})).await;
    cluster.restart_all().await;
    cluster
        .wait_metric_sum(
            &[0, 1, 2],
            "basalt_raft_votes_refused_total",
            1.0,
            Duration::from_secs(20),
            "the first candidates after the restart meet nodes within their hold",
        )
        .await;
    for (i, id) in ids.iter().enumerate() {
        let obj = cluster
            .client(i % 3)
            .get_object("Held", id)
            .await
            .expect("get")
            .expect("the object survived the restart");
        assert_eq!(obj["n"], json!(i));
    }
    client
        .create_object("Held", &json!({"n": 12}))
        .await
        .expect("a write after the restart");
}

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

/// Story — a fault: a node paused mid-stream.
///
/// A node frozen (SIGSTOP) for longer than a stall, a lease and an election while writes
/// stream through the others: its peers' replication streams to it give up and reopen, the
/// groups it led elect new leaders, writes go on, and afterwards every acknowledged write is
/// there, each object's appends in the order sent, and the thawed node catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_node_while_appends_stream_loses_and_reorders_nothing() {
    let cluster = TestCluster::start(3, &["--shards", "8"], &[]).await;
    let placement = cluster.placement(0);
    let mut leads = [0usize; 3];
    for g in placement.as_object().expect("placement").values() {
        if let Some(l) = g["leader"].as_u64() {
            leads[(l - 1) as usize] += 1;
        }
    }
    let victim = (0..3).max_by_key(|&i| leads[i]).unwrap_or(0);
    let survivors: Vec<usize> = (0..3).filter(|&i| i != victim).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let acked_total = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..4 {
        let client = cluster.client(survivors[w % 2]);
        let (stop, acked_total) = (stop.clone(), acked_total.clone());
        writers.push(tokio::spawn(async move {
            let id = client
                .create_object("Seq", &json!({"writer": w, "log": []}))
                .await
                .expect("create")
                .object_id;
            // What was acknowledged, and what failed and so may or may not have applied.
            let (mut acked, mut uncertain) = (Vec::new(), Vec::new());
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 3000 {
                n += 1;
                let body = json!({"log": {"__op": "Add", "objects": [n]}});
                match client.update_object("Seq", &id, &body).await {
                    Ok(r) if (200..300).contains(&r.status) => {
                        acked.push(n);
                        acked_total.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => uncertain.push(n),
                }
            }
            (id, acked, uncertain)
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = acked_total.load(Ordering::Relaxed);
    cluster.pause(victim);
    TestCluster::eventually(
        Duration::from_secs(25),
        "writes acknowledged while a node is frozen",
        || acked_total.load(Ordering::Relaxed) > before + 100,
    )
    .await;
    // Frozen past the replication stall (5 s) and the lease.
    tokio::time::sleep(Duration::from_secs(6)).await;
    cluster.resume(victim);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let mut written = Vec::new();
    for w in writers {
        written.push(w.await.expect("writer"));
    }
    assert!(before > 0, "writes were streaming before the pause");
    // Every node, the thawed one included, serves each object's appends in order.
    for node in 0..3 {
        let client = cluster.client(node);
        for (id, acked, uncertain) in &written {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            let log = loop {
                let obj = client.get_object("Seq", id).await.ok().flatten();
                let log: Vec<u64> = obj
                    .and_then(|o| o["log"].as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(Value::as_u64)
                    .collect();
                if acked.iter().all(|n| log.contains(n)) {
                    break log;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "object {id} through node {}: acknowledged appends missing",
                    node + 1
                );
                tokio::time::sleep(Duration::from_millis(300)).await;
            };
            assert!(
                log.windows(2).all(|p| p[0] < p[1]),
                "object {id} through node {}: appends out of order or repeated",
                node + 1
            );
            for n in &log {
                assert!(
                    acked.contains(n) || uncertain.contains(n),
                    "object {id}: {n} was never written"
                );
            }
        }
    }
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
    ids.extend(create_numbered(&client, "Doc", 600, |i| json!({"i": i})).await);
    // The live nodes purge log entries that node 3 never received.
    let purged = cluster.wait_logs_purged(&[0, 1]).await;
    cluster.restart(2).await;
    cluster.wait_healthy(2, Duration::from_secs(60)).await;
    let node3 = cluster.client(2);
    cluster.wait_caught_up_by_snapshot(2, 0, purged).await;
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

/// Story — membership changes.
///
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
    // Every node is healthy: a replica placement moved away keeps its last configuration (Raft
    // never tells it), and is left out of its node's health once the group's leader says so.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut codes = Vec::new();
        for i in 0..4 {
            let code = reqwest::get(format!("{}/health", cluster.url(i)))
                .await
                .map_or(0, |r| r.status().as_u16());
            codes.push(code);
        }
        if codes.iter().all(|&c| c == 200) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "every node healthy with replicas moved away: {codes:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Marking node 1 removed stops it vouching for its replicas at once (decisions/0011), while
    // it still holds them: the mark is settled on every member before `remove-node` waits.
    let marked = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "--rpc", &cluster.nodes[1].rpc])
        .args(["remove-node", "1", "--wait-secs", "0"])
        .output()
        .expect("run basalt admin");
    assert!(
        String::from_utf8_lossy(&marked.stdout).contains("marked removed"),
        "{marked:?}"
    );
    let status: Value = serde_json::from_str(&cluster.admin(0, &["status"])).expect("status");
    let groups = status["Status"]["groups"].as_array().expect("groups");
    assert!(
        groups.iter().any(|g| hosts(g, 1)),
        "node 1 still holds replicas: {status}"
    );
    assert!(
        groups.iter().all(|g| g["current"] == false),
        "a removed node vouches for no replica: {status}"
    );
    // A proxy takes a node being removed out at once.
    let health = reqwest::get(format!("{}/health?ready=1", cluster.url(0)))
        .await
        .expect("health");
    assert_eq!(health.status(), 503, "a node being removed is not ready");
    let body: Value = health.json().await.expect("health json");
    assert_eq!(body["removed"], true, "{body}");
    // remove-node waits until the replicas moved, then drains and stops the node.
    let out = cluster.admin(1, &["remove-node", "1", "--wait-secs", "90"]);
    assert!(out.contains("node 1 stopped"), "{out}");
    let status = cluster
        .wait_exit(0, Duration::from_secs(10))
        .await
        .expect("the removed node exits");
    assert!(
        status.success(),
        "a removed node exits 0 after its drain: {status:?}"
    );
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
    // The removed node started again (its own replica still says it is active) does not come
    // back as a member: its record stays removed.
    cluster.restart(0).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let members: Value = serde_json::from_str(&cluster.admin(1, &["members"])).expect("members");
    let node1 = members["ClusterInfo"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["id"] == 1)
        .cloned()
        .expect("node 1's record");
    assert_eq!(node1["state"], "Removed", "{members}");
    cluster.stop(0);
}

/// Story — a fault: the metadata leader moves.
///
/// The scheduler runs on the metadata group's leader only, and another node takes over when
/// that leader is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_moves_to_the_new_metadata_leader() {
    let mut cluster = TestCluster::start(3, &["--shards", "2"], &["--ttl-sweep-secs", "1"]).await;
    let runs = |c: &TestCluster, i: usize| {
        let c = c.client(i);
        async move {
            let text = c.metrics().await.unwrap_or_default();
            text.lines()
                .filter(|l| {
                    l.starts_with("basalt_scheduler_runs_total")
                        && l.contains("ttl_sweep")
                        && l.contains("outcome=\"ok\"")
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>()
        }
    };
    let leader = cluster.placement(0)["0"]["leader"]
        .as_u64()
        .expect("metadata leader") as usize
        - 1;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        runs(&cluster, leader).await >= 2.0,
        "the metadata leader runs the sweep"
    );
    for i in (0..3).filter(|&i| i != leader) {
        assert_eq!(
            runs(&cluster, i).await,
            0.0,
            "node {} is not the leader and runs nothing",
            i + 1
        );
    }
    cluster.kill(leader);
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut total = 0.0;
        for &i in &others {
            total += runs(&cluster, i).await;
        }
        if total >= 2.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no node took the scheduler over"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The new runner really cleans up: signed requests leave nonce records that expire within
    // about 20 s (as SMS codes, quota windows, captchas and emailed links do later); the
    // survivors' sweep deletes them.
    let app = cluster
        .console_client(others[0])
        .request(
            reqwest::Method::GET,
            &format!("/1/apps/{}", cluster.keys.application_id),
            None,
            false,
        )
        .await
        .expect("app")
        .body;
    let signed = cluster
        .anonymous_client(others[0])
        .with_signing(SignedKeys::new(
            app["secretKey"].as_str().expect("secret key"),
            app["safeToken"].as_str().expect("safe token"),
            Formula::JsSdk,
        ));
    for i in 0..5 {
        signed
            .create_object("Signed", &json!({ "i": i }))
            .await
            .expect("signed create");
    }
    cluster
        .wait_metric_sum(
            &others,
            "basalt_ttl_expired_records_total",
            5.0,
            Duration::from_secs(60),
            "the new scheduler removes the expired nonces",
        )
        .await;
}

/// `basalt dev` started again on the same data dir resumes the same cluster with its data; the
/// second time its nodes take cluster-wide options from a config file and the environment
/// (the environment winning over the file).
// The lock only keeps other tests' clusters from running at the same time.
/// Story — a restart.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_resumes_the_same_cluster_on_restart() {
    let _one = common::exclusive();
    let dir = tempfile::tempdir().expect("temp dir");
    let http_port = common::free_port();
    let rpc_port = common::free_port();
    let config = dir.path().join("basalt.toml");
    std::fs::write(
        &config,
        "header-brand = \"Bmob\"\npublic_url = \"https://file.example\"\n",
    )
    .expect("write the config file");
    let start_with = |extra: &[&str], env: &[(&str, &str)]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args(extra)
            .envs(env.iter().copied())
            .args(["dev", "--nodes", "1", "--shards", "2", "--data-dir"])
            .arg(dir.path())
            .args([
                "--http-port",
                &http_port.to_string(),
                "--rpc-port",
                &rpc_port.to_string(),
            ])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start basalt dev")
    };
    let start = || start_with(&[], &[]);
    let creds = || -> basalt_client::AppKeys {
        let doc: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("node1/credentials.json"))
                .expect("credentials"),
        )
        .expect("json");
        serde_json::from_value(doc["app"].clone()).expect("keys")
    };
    let url = format!("http://127.0.0.1:{http_port}");
    let wait_ready = |client: basalt_client::Client| async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !client.healthy().await {
            assert!(
                std::time::Instant::now() < deadline,
                "dev cluster not ready"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let mut dev = start();
    wait_ready(basalt_client::Client::new(&url, None).expect("client")).await;
    TestCluster::eventually(Duration::from_secs(30), "credentials written", || {
        dir.path().join("node1/credentials.json").exists()
    })
    .await;
    let keys = creds();
    let client = basalt_client::Client::new(&url, Some(keys.clone())).expect("client");
    let id = client
        .create_object("Note", &json!({"text": "kept"}))
        .await
        .expect("create")
        .object_id;
    client
        .increment("Note", &id, "views", 3)
        .await
        .expect("increment");
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(dev.id().to_string())
        .status();
    let _ = dev.wait();

    let config_arg = config.to_string_lossy().to_string();
    let mut dev = start_with(
        &["--config", &config_arg],
        &[("BASALT_PUBLIC_URL", "https://env.example")],
    );
    wait_ready(basalt_client::Client::new(&url, None).expect("client")).await;
    let client = client.with_brand("Bmob");
    assert_eq!(
        creds().application_id,
        keys.application_id,
        "same cluster, same app"
    );
    let obj = client
        .get_object("Note", &id)
        .await
        .expect("get")
        .expect("object survived the restart");
    assert_eq!(obj["text"], "kept");
    assert_eq!(obj["views"], 3);
    // The brand came from the file, the public URL from the environment.
    let created = client
        .request(
            reqwest::Method::POST,
            "/1/classes/Note",
            Some(&json!({"text": "new"})),
            false,
        )
        .await
        .expect("create with X-Bmob headers");
    let location = created.location.unwrap_or_default();
    assert!(
        location.starts_with("https://env.example/1/classes/Note/"),
        "{location}"
    );
    assert_unauthorized_with_service_headers(&url, &keys).await;
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(dev.id().to_string())
        .status();
    let _ = dev.wait();
}

/// The default brand's headers no longer authenticate once the cluster runs with `Bmob`.
async fn assert_unauthorized_with_service_headers(url: &str, keys: &basalt_client::AppKeys) {
    let c = basalt_client::Client::new(url, Some(keys.clone())).expect("client");
    common::assert_unauthorized(
        c.get_object("Note", "abcdefghij").await,
        "X-Service headers",
    );
}

/// Story — a fault: a shard stops answering.
///
/// With one replica per group, a frozen node makes some shards unanswerable: a listing, a count
/// and an aggregation through another node fail with 503 after the query deadline instead of
/// answering from the shards that remain; gets of objects on live shards keep working; once the
/// node thaws, the same queries see every object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_with_an_unanswering_shard_fails_instead_of_answering_partially() {
    let cluster = TestCluster::start(
        3,
        &["--shards", "6", "--replicas", "1"],
        &["--query-timeout-secs", "4"],
    )
    .await;
    // With one replica per group, placement goes on moving groups to balance them after the
    // start: wait until every data shard has its one voter and no other member (the metadata
    // group keeps a learner on every node), and leadership is spread, before writing (a write
    // to a group being moved waits for its new leader).
    cluster
        .wait_leaders_spread(3, Duration::from_secs(60))
        .await;
    TestCluster::eventually(
        Duration::from_secs(60),
        "single-replica groups placed",
        || {
            let placement = cluster.placement(0);
            placement["0"]["leader"].is_u64()
                && (1..=6).all(|g| {
                    let g = &placement[g.to_string()];
                    g["leader"].is_u64()
                        && g["voters"].as_array().is_some_and(|v| v.len() == 1)
                        && g["learners"].as_array().is_none_or(|l| l.is_empty())
                })
        },
    )
    .await;
    // Nor does the rebalancer move a group (a single replica's move leaves its group
    // leaderless for a moment) while the test reads: this story is about a frozen node.
    cluster.admin(0, &["rebalance", "pause"]);
    let placement = cluster.placement(0);
    let groups = placement.as_object().expect("placement");
    let leader_of = |g: &str| groups.get(g).and_then(|s| s["leader"].as_u64());
    let shards_led = |node: u64| {
        (1..=6)
            .filter(|g| leader_of(&g.to_string()) == Some(node))
            .count()
    };
    // The victim is node 2 or 3, leads at least one data shard and, if possible, not group 0.
    let victim = [1usize, 2]
        .into_iter()
        .filter(|&i| shards_led(i as u64 + 1) > 0)
        .min_by_key(|&i| leader_of("0") == Some(i as u64 + 1))
        .expect("node 2 or 3 leads a data shard");
    assert!(
        shards_led(victim as u64 + 1) < 6,
        "some shards stay answerable"
    );

    let writer = cluster.client(0);
    let ids = create_numbered(
        &writer,
        "Spread",
        60,
        |i| json!({"n": i, "team": format!("t{}", i % 3)}),
    )
    .await;
    let all = writer
        .query("Spread", &[("count", "1"), ("limit", "1000")])
        .await
        .expect("list");
    assert_eq!(all["count"], json!(60));

    cluster.pause(victim);
    let through = cluster.client(0);
    // Meanwhile, gets of the first objects: those on shards node 1 leads are still served.
    let gets = futures::future::join_all(
        ids.iter()
            .take(12)
            .map(|id| through.get_object("Spread", id)),
    );
    let (listing, count, groups, got) = tokio::join!(
        through.query("Spread", &[("limit", "1000")]),
        through.query("Spread", &[("count", "1"), ("limit", "0")]),
        through.query("Spread", &[("groupby", "team"), ("groupcount", "true")]),
        gets,
    );
    let served = got.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
    cluster.resume(victim);
    for (what, r) in [("listing", listing), ("count", count), ("groupby", groups)] {
        match r {
            Ok(v) => panic!("{what} answered while a shard was frozen: {v}"),
            Err(e) => assert_eq!(e.status(), Some(503), "{what}: {e}"),
        }
    }
    assert!(served > 0, "gets of objects on live shards work");

    let mut seen = Value::Null;
    for _ in 0..50 {
        if let Ok(v) = through
            .query("Spread", &[("count", "1"), ("limit", "1000")])
            .await
        {
            seen = v;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(seen["count"], json!(60), "every object after the thaw");
    assert_eq!(seen["results"].as_array().map(Vec::len), Some(60));
}

/// Story — a fault: leaders move under load.
///
/// Leaders move between nodes (`basalt admin shuffle-leaders`, and placement moving them back)
/// while clients keep reading, listing and incrementing through every node: no request fails,
/// every read sees every object, and the counter ends at the number of acknowledged increments.
/// A request that reaches a node just as it is handed a group's leadership is served there
/// once it has taken over, instead of bouncing between the peers until its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_leaders_fail_no_request() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let writer = cluster.client(0);
    let ids = create_numbered(&writer, "Moving", 40, |i| json!({"n": i})).await;
    let counter = writer
        .create_object("MovingCounter", &json!({"value": 0}))
        .await
        .expect("create counter")
        .object_id;

    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for node in 0..3 {
        let client = cluster.client(node);
        let (stop, failures, ids, counter) = (
            Arc::clone(&stop),
            Arc::clone(&failures),
            ids.clone(),
            counter.clone(),
        );
        clients.push(tokio::spawn(async move {
            let mut increments = 0u64;
            // Bounded: at most 5,000 rounds even if the shuffling never ends.
            for round in 0..5_000usize {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let id = &ids[round % ids.len()];
                let fail = |what: &str, e: String| {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("node {}: {what}: {e}", node + 1))
                };
                match client.get_object("Moving", id).await {
                    Ok(Some(o)) if o["objectId"] == json!(id) => {}
                    other => fail("get", format!("{other:?}")),
                }
                match client
                    .query("Moving", &[("count", "1"), ("limit", "0")])
                    .await
                {
                    Ok(v) if v["count"] == json!(40) => {}
                    other => fail("count", format!("{other:?}")),
                }
                match client
                    .increment("MovingCounter", &counter, "value", 1)
                    .await
                {
                    Ok(_) => increments += 1,
                    Err(e) => fail("increment", e.to_string()),
                }
            }
            increments
        }));
    }

    for round in 0..12 {
        let out = cluster.admin(round % 3, &["shuffle-leaders"]);
        assert!(out.contains("moved the leadership"), "{out}");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut acknowledged = 0;
    for c in clients {
        acknowledged += c.await.expect("client task");
    }
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} requests failed while leaders moved, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(acknowledged > 0);
    let obj = cluster
        .client(1)
        .get_object("MovingCounter", &counter)
        .await
        .expect("get counter")
        .expect("counter exists");
    assert_eq!(obj["value"], json!(acknowledged));
}
