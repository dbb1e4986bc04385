//! Rolling upgrades (`basalt_cluster::services::upgrade`): the cluster's version, features
//! turned on once every member's build has them, `basalt admin upgrade hold|finalize`, and a
//! build without a feature the cluster turned on refused at start. An older build is stood in
//! for by the same binary leaving features out of its member record
//! (`BASALT_TESTING_WITHOUT_FEATURES`); the jepsen rolling-upgrade nemesis runs a real one.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::TestCluster;

const WITHOUT: &str = "BASALT_TESTING_WITHOUT_FEATURES";
/// The oldest build of the story: without sealed app secrets and without the rebalancer.
const OLDEST: &[(&str, &str)] = &[(WITHOUT, "sealed-secrets,rebalance")];
/// The middle build: with sealed secrets, still without the rebalancer.
const MIDDLE: &[(&str, &str)] = &[(WITHOUT, "rebalance")];
/// The newest build: everything.
const NEWEST: &[(&str, &str)] = &[];

fn upgrade(cluster: &TestCluster, i: usize, command: &str) -> Value {
    serde_json::from_str(&cluster.admin(i, &["upgrade", command])).expect("upgrade status json")
}

fn has(list: &Value, feature: &str) -> bool {
    list.as_array()
        .is_some_and(|l| l.iter().any(|f| f == feature))
}

async fn health(cluster: &TestCluster, i: usize) -> Value {
    reqwest::get(format!("{}/health", cluster.url(i)))
        .await
        .expect("health")
        .json()
        .await
        .expect("health json")
}

/// Stops every node in turn and starts it again as `build`, each healthy before the next.
async fn roll(cluster: &mut TestCluster, build: &[(&str, &str)]) {
    for i in 0..cluster.nodes.len() {
        replace_build(cluster, i, build).await;
    }
}

async fn replace_build(cluster: &mut TestCluster, i: usize, build: &[(&str, &str)]) {
    cluster.stop(i);
    cluster.set_env(i, build);
    cluster.restart(i).await;
    cluster.wait_healthy(i, Duration::from_secs(60)).await;
}

/// Story — a cluster of the oldest build rolls to the middle one: until the last node runs
/// it, the cluster is not finalized and the new feature stays off; then it turns on by itself.
/// Held (`upgrade hold`) before rolling to the newest build, the rebalancer's feature stays
/// pending and off (the rebalancer does not plan), a node goes back to the middle build and
/// serves, `finalize` is refused while it runs it and then turns the feature on (the
/// rebalancer plans and balances) — a node of the middle build whose join raced the
/// finalization is refused once its record is in, and the record undone; a node started again
/// as the middle build now exits naming what it lacks, and a new node of it cannot join. An object written at the start reads the
/// same at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_turns_features_on_only_when_finalized() {
    let mut cluster = TestCluster::start_with_env(3, &["--shards", "2"], &[], OLDEST).await;
    let client = cluster.client(0);
    let created = client
        .create_object("Ledger", &json!({"entry": 1}))
        .await
        .expect("create");
    let id = created.object_id;

    let s = upgrade(&cluster, 0, "status");
    assert_eq!(s["finalized"], true, "{s}");
    assert_eq!(s["hold"], false, "{s}");
    assert!(
        !has(&s["features"], "sealed-secrets") && !has(&s["features"], "rebalance"),
        "{s}"
    );
    assert!(has(&s["features"], "backup-files"), "{s}");
    let h = health(&cluster, 1).await;
    assert_eq!(h["finalized"], true, "{h}");
    assert_eq!(h["clusterVersion"], s["clusterVersion"], "{h}");
    assert_eq!(h["version"], s["clusterVersion"], "{h}");

    // Halfway through a roll the cluster is not finalized: node 1 has what the others lack.
    replace_build(&mut cluster, 0, MIDDLE).await;
    TestCluster::eventually(
        Duration::from_secs(20),
        "node 1's new build is seen",
        || {
            let s = upgrade(&cluster, 1, "status");
            s["finalized"] == false
                && !has(&s["features"], "sealed-secrets")
                && s["nodes"].as_array().is_some_and(|nodes| {
                    nodes
                        .iter()
                        .any(|n| n["node"] == 2 && has(&n["lacks"], "sealed-secrets"))
                })
        },
    )
    .await;
    for i in 1..3 {
        replace_build(&mut cluster, i, MIDDLE).await;
    }
    TestCluster::eventually(
        Duration::from_secs(20),
        "sealing turns on by itself",
        || {
            let s = upgrade(&cluster, 2, "status");
            s["finalized"] == true && has(&s["features"], "sealed-secrets")
        },
    )
    .await;

    // Held: the newest build everywhere, and still the rebalancer's feature is off.
    // Held at once through every node: each compare-and-set retries on the others' writes.
    let holds: Vec<std::process::Child> = (0..3)
        .map(|i| {
            std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
                .args(["admin", "--rpc", &cluster.nodes[i].rpc, "upgrade", "hold"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("basalt admin upgrade hold")
        })
        .collect();
    for hold in holds {
        let out = hold.wait_with_output().expect("hold");
        assert!(out.status.success(), "{out:?}");
    }
    let s = upgrade(&cluster, 0, "status");
    assert_eq!(s["hold"], true, "{s}");
    assert!(
        has(&s["features"], "sealed-secrets"),
        "a hold keeps what is on: {s}"
    );
    roll(&mut cluster, NEWEST).await;
    TestCluster::eventually(
        Duration::from_secs(20),
        "every member's build is seen",
        || {
            let s = upgrade(&cluster, 0, "status");
            s["pending"] == json!(["rebalance"])
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = upgrade(&cluster, 0, "status");
    assert_eq!(
        (&s["finalized"], &s["hold"], &s["pending"]),
        (&json!(false), &json!(true), &json!(["rebalance"])),
        "held, nothing is finalized by itself: {s}"
    );
    assert!(!has(&s["features"], "rebalance"), "{s}");
    let r: Value =
        serde_json::from_str(&cluster.admin(1, &["rebalance", "status"])).expect("rebalance json");
    assert_eq!(r["planning"], false, "a feature not on is not used: {r}");
    assert_eq!(
        cluster.metric(0, "basalt_cluster_version_finalized").await,
        0.0
    );
    assert_eq!(cluster.metric(0, "basalt_cluster_upgrade_hold").await, 1.0);
    assert_eq!(
        cluster
            .metric(0, "basalt_cluster_upgrade_pending_features")
            .await,
        1.0
    );
    let h = health(&cluster, 2).await;
    assert_eq!(
        (&h["finalized"], &h["upgradeHold"]),
        (&json!(false), &json!(true)),
        "{h}"
    );

    // The previous build can come back, and finalizing waits for it to leave.
    replace_build(&mut cluster, 1, MIDDLE).await;
    TestCluster::eventually(
        Duration::from_secs(20),
        "node 2 runs the middle build",
        || {
            let s = upgrade(&cluster, 0, "status");
            s["nodes"].as_array().is_some_and(|nodes| {
                nodes
                    .iter()
                    .any(|n| n["node"] == 2 && has(&n["lacks"], "rebalance"))
            })
        },
    )
    .await;
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args([
            "admin",
            "--rpc",
            &cluster.nodes[0].rpc,
            "upgrade",
            "finalize",
        ])
        .output()
        .expect("run basalt admin");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "finalize with node 2 behind: {refused:?}"
    );
    assert!(
        stderr.contains("node 2") && stderr.contains("rebalance"),
        "{stderr}"
    );

    replace_build(&mut cluster, 1, NEWEST).await;
    TestCluster::eventually(
        Duration::from_secs(20),
        "node 2 runs the newest build",
        || {
            let s = upgrade(&cluster, 0, "status");
            s["nodes"]
                .as_array()
                .is_some_and(|nodes| nodes.iter().all(|n| n["lacks"].is_null()))
        },
    )
    .await;
    // A new node of the middle build asks to join through node 1 (held there for 5 s once its
    // build is checked) while the cluster is finalized through node 3: the join is refused
    // once its record is in, the record undone, and the joiner stops.
    cluster.stop(0);
    cluster.restart_with_failpoints(0, "join-checked=return(5000)");
    cluster.wait_healthy(0, Duration::from_secs(60)).await;
    let mut racing_joiner = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["serve", "--node-id", "5", "--http-addr", "127.0.0.1:0"])
        .args(["--rpc-addr", "127.0.0.1:0", "--join", &cluster.nodes[0].rpc])
        .arg("--data-dir")
        .arg(cluster.dir.path().join("node5-middle"))
        .envs(MIDDLE.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("basalt serve");
    TestCluster::eventually(Duration::from_secs(20), "node 1 holds a join", || {
        cluster.log_text(0).contains("fail point holds this task")
    })
    .await;
    let s = upgrade(&cluster, 2, "finalize");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = racing_joiner.try_wait().expect("joiner") {
            break Some(exit);
        }
        if std::time::Instant::now() > deadline {
            let _ = racing_joiner.kill();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        exit.is_some_and(|e| !e.success()),
        "the joiner stops, refused: {exit:?}"
    );
    let undone = "raced a finalization of features its build lacks: refused, its record undone";
    assert!(
        cluster.log_text(0).contains(undone),
        "the second check refused it"
    );
    let members = upgrade(&cluster, 1, "status");
    assert_eq!(
        members["nodes"].as_array().map(Vec::len),
        Some(3),
        "{members}"
    );
    assert_eq!(
        (&s["finalized"], &s["hold"]),
        (&json!(true), &json!(false)),
        "{s}"
    );
    assert!(
        has(&s["features"], "rebalance") && s["pending"] == json!([]),
        "{s}"
    );
    assert!(s["finalizedAtMs"].as_i64().is_some(), "{s}");
    cluster.wait_balanced(Duration::from_secs(60)).await;
    // Each node's metric follows its own replica of the metadata group.
    cluster
        .wait_metric_sum(
            &[1],
            "basalt_cluster_version_finalized",
            1.0,
            Duration::from_secs(10),
            "node 2 sees the cluster finalized",
        )
        .await;

    // Finalized: the middle build no longer starts on a node's data dir.
    cluster.stop(2);
    cluster.set_env(2, MIDDLE);
    cluster.restart(2).await;
    let exit = cluster
        .wait_exit(2, Duration::from_secs(60))
        .await
        .expect("an older build exits at start");
    assert!(!exit.success(), "{exit:?}");
    let log = cluster.log_text(2);
    assert!(
        log.contains("finalized") && log.contains("rebalance"),
        "the refusal names what the build lacks"
    );
    cluster.set_env(2, NEWEST);
    cluster.restart(2).await;
    cluster.wait_healthy(2, Duration::from_secs(60)).await;

    // Nor does a new node of the middle build join.
    let joiner = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["serve", "--node-id", "4", "--http-addr", "127.0.0.1:0"])
        .args(["--rpc-addr", "127.0.0.1:0", "--join", &cluster.nodes[0].rpc])
        .arg("--data-dir")
        .arg(cluster.dir.path().join("node4-middle"))
        .envs(MIDDLE.iter().copied())
        .output()
        .expect("basalt serve");
    let stderr = String::from_utf8_lossy(&joiner.stderr);
    assert!(!joiner.status.success(), "{stderr}");
    assert!(
        stderr.contains("finalized") && stderr.contains("rebalance"),
        "{stderr}"
    );
    let s = upgrade(&cluster, 0, "status");
    assert_eq!(s["nodes"].as_array().map(Vec::len), Some(3), "{s}");

    let read = cluster
        .client(2)
        .get_object("Ledger", &id)
        .await
        .expect("read")
        .expect("the object written at the start");
    assert_eq!(read["entry"], 1);
}
