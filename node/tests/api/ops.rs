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

    // Server time: unix seconds and Beijing time (UTC+8); app keys required.
    let before = chrono::Utc::now().timestamp();
    let t = client
        .request(reqwest::Method::GET, "/1/timestamp/", None, false)
        .await
        .expect("timestamp")
        .body;
    let ts = t["timestamp"].as_i64().expect("integer timestamp");
    assert!((before - 2..=before + 2).contains(&ts), "{t}");
    let beijing = chrono::DateTime::from_timestamp(ts, 0).unwrap() + chrono::Duration::hours(8);
    assert_eq!(
        t["datetime"],
        beijing.format("%Y-%m-%d %H:%M:%S").to_string()
    );
    let anon = cluster
        .anonymous_client(0)
        .request(reqwest::Method::GET, "/1/timestamp", None, false)
        .await;
    assert_eq!(anon.err().and_then(|e| e.status()), Some(401));
}
