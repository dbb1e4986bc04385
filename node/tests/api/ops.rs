//! Operational endpoints: /health, /metrics, unknown routes.

use serde_json::{json, Value};

use super::common::TestCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metrics_and_unknown_routes() {
    let cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    let client = cluster.client(0);
    client
        .create_object("M", &json!({"a": 1}))
        .await
        .expect("create");
    let health: Value = reqwest::get(format!("http://{}/health", cluster.nodes[0].http))
        .await
        .expect("health")
        .json()
        .await
        .expect("json");
    assert_eq!(health["status"], "ok");
    assert_eq!(health["groups"], 3);
    let text = client.metrics().await.expect("metrics");
    for name in [
        "basalt_raft_term{group=\"0\"}",
        "basalt_raft_leader{group=\"1\"}",
        "basalt_raft_commit_index{group=\"2\"}",
        "basalt_raft_applied_index{group=\"0\"}",
        "basalt_raft_proposals_total",
        "basalt_raft_proposal_seconds_bucket",
        "basalt_http_request_seconds_bucket{method=\"POST\",route=\"/1/classes/{class}\",status=\"201\"",
        "basalt_storage_bytes",
        "basalt_storage_wal_sync_seconds",
    ] {
        assert!(text.contains(name), "metrics lack {name}");
    }
    let resp = reqwest::get(format!("http://{}/1/nothing", cluster.nodes[0].http))
        .await
        .expect("get");
    assert_eq!(resp.status().as_u16(), 404);
}
