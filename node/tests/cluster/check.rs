//! Consistency checks (`basalt admin check`): replicas compared at one committed index.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::TestCluster;

/// `basalt admin check` through node `i`: whether it passed, and its report.
fn check(cluster: &TestCluster, i: usize) -> (bool, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "--rpc", &cluster.rpc(i), "check"])
        .output()
        .expect("run basalt admin check");
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.success(), report)
}

/// Story — a replica that skipped one create: the check passes on the healthy cluster under
/// writes, then names the group and the replica that differs, and every node's `/health` shows
/// the alarm until a check finds the replicas agreeing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_names_the_replica_that_differs() {
    let mut cluster = TestCluster::start(3, &["--shards", "2"], &[]).await;
    for n in 0..12 {
        let c = cluster.client(n % 3);
        c.create_object("Item", &json!({"n": n})).await.unwrap();
    }
    let (ok, report) = tokio::task::block_in_place(|| check(&cluster, 0));
    assert!(ok, "a healthy cluster: {report}");
    for g in report["groups"].as_array().unwrap() {
        let digests = g["digests"].as_array().unwrap();
        assert_eq!(digests.len(), 3, "every voter answered: {g}");
        assert_eq!(g["differing"], json!([]), "{g}");
    }
    cluster.stop(2);
    cluster.restart_with_failpoints(2, "apply-skip-create=1*return");
    cluster.wait_healthy(2, Duration::from_secs(60)).await;
    let skipped = cluster
        .client(0)
        .create_object("Item", &json!({"n": 12}))
        .await;
    skipped.expect("the create is committed");
    let (ok, report) = tokio::task::block_in_place(|| check(&cluster, 1));
    assert!(!ok, "a differing replica passed: {report}");
    let differing: Vec<&Value> = report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["differing"] != json!([]))
        .collect();
    assert_eq!(differing.len(), 1, "one group differs: {report}");
    assert_eq!(
        differing[0]["differing"],
        json!([3]),
        "node 3 skipped the create"
    );
    for i in 0..3 {
        // Each node shows it once its replica of the metadata group applied the record.
        let mut health = Value::Null;
        for _ in 0..50 {
            health = reqwest::get(format!("{}/health", cluster.url(i)))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let alarms = health["alarms"].as_array().unwrap();
            if alarms
                .iter()
                .any(|a| a["alarm"] == "consistency" && a["nodes"] == json!([3]))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let alarms = health["alarms"].as_array().unwrap();
        assert!(
            alarms
                .iter()
                .any(|a| a["alarm"] == "consistency" && a["nodes"] == json!([3])),
            "node {}'s /health: {health}",
            i + 1
        );
    }
}

/// Story — one object's stored bytes changed on a stopped node's disk (as a faulty disk or a
/// tool writing into the data dir would): once the node is back, a check names that group and
/// that node, and the other groups agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_finds_a_replica_corrupted_on_disk() {
    let mut cluster = TestCluster::start(3, &["--shards", "3"], &[]).await;
    let mut ids = Vec::new();
    for n in 0..12 {
        let c = cluster.client(n % 3);
        ids.push(
            c.create_object("Item", &json!({"n": n}))
                .await
                .unwrap()
                .object_id,
        );
    }
    let (ok, report) = tokio::task::block_in_place(|| check(&cluster, 0));
    assert!(ok, "a healthy cluster: {report}");
    cluster.stop(2);
    let group = basalt_cluster::damage::corrupt_stored_object(cluster.data_dir(2), &ids[5])
        .expect("the object is stored on node 3");
    cluster.restart(2).await;
    cluster.wait_healthy(2, Duration::from_secs(60)).await;
    let (ok, report) = tokio::task::block_in_place(|| check(&cluster, 1));
    assert!(!ok, "a corrupted replica passed: {report}");
    for g in report["groups"].as_array().unwrap() {
        if g["group"] == json!(group.get()) {
            assert_eq!(g["differing"], json!([3]), "node 3's copy was changed: {g}");
        } else {
            assert_eq!(g["differing"], json!([]), "{g}");
        }
    }
}
