//! Operational endpoints (`src/api/ops.rs`): /health, /metrics, /admin/logs, unknown routes.

use serde_json::{json, Value};

use super::common::scenario::{run_rows, As, Row};
use super::common::TestCluster;

/// Who may call the operational endpoints, as a table: `/health` is open, `/metrics` answers
/// a caller on the node's own machine when no token is set, `/admin/logs` an app's master key
/// or the console account, an unknown route is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_endpoints_answer_as_their_table_says() {
    use basalt_client::Method;
    let cluster = TestCluster::start(1, &[], &[]).await;
    let rows = vec![
        Row::new("health, without keys", Method::GET, "/health")
            .auth(As::Nobody)
            .answers(200),
        Row::new("health, with the app keys", Method::GET, "/health").answers(200),
        Row::new("health, with a wrong key", Method::GET, "/health")
            .auth(As::WrongKey)
            .answers(200),
        Row::new(
            "metrics, from the node's own machine",
            Method::GET,
            "/metrics",
        )
        .auth(As::Nobody)
        .answers(200),
        Row::new("metrics, with the app keys", Method::GET, "/metrics").answers(200),
        Row::new("an unknown route", Method::GET, "/1/nothing")
            .auth(As::Nobody)
            .answers(404),
        Row::new(
            "an unknown route, with the app keys",
            Method::GET,
            "/1/nothing",
        )
        .answers(404),
        Row::new("logs, without keys", Method::GET, "/admin/logs")
            .auth(As::Nobody)
            .answers(401),
        Row::new("logs, with the REST key", Method::GET, "/admin/logs").fails(400, 10061),
        Row::new("logs, with a wrong key", Method::GET, "/admin/logs")
            .auth(As::WrongKey)
            .fails(400, 10061),
        Row::new("logs, with the master key", Method::GET, "/admin/logs")
            .auth(As::Master)
            .answers(200),
        Row::new("logs, with the console account", Method::GET, "/admin/logs")
            .auth(As::Console)
            .answers(200),
    ];
    run_rows(&cluster, &rows).await;
}

/// `/health` counts the node's groups; `/metrics` names the Raft, HTTP and storage series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics_describe_the_node() {
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
}

/// Story — an operator's configuration: a token, a listener of its own, per-app labels.
///
/// `/metrics` is for the node's operator: with `--metrics-token` every caller needs it (401
/// without); its own listener (`--metrics-addr`) answers without one; functions' metrics name
/// no app or function unless `--metrics-per-app`; `/health` says the cluster is insecure when
/// its peer links are plaintext.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_for_operators_only() {
    let metrics_port = common_free_port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let cluster = TestCluster::start(
        1,
        &["--shards", "1", "--metrics-addr", &metrics_addr],
        &["--metrics-token", "s3cret"],
    )
    .await;
    let url = format!("{}/metrics", cluster.url(0));
    let http = reqwest::Client::new();
    let refused = http.get(&url).send().await.expect("metrics");
    assert_eq!(refused.status(), 401);
    let wrong = http
        .get(&url)
        .bearer_auth("guess")
        .send()
        .await
        .expect("metrics");
    assert_eq!(wrong.status(), 401);
    let text = http
        .get(&url)
        .bearer_auth("s3cret")
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(text.contains("basalt_raft_term"), "{text}");
    assert!(
        text.contains("basalt_cluster_insecure 1"),
        "plaintext peers are insecure"
    );
    let own = reqwest::get(format!("http://{metrics_addr}/metrics"))
        .await
        .expect("own listener");
    assert_eq!(own.status(), 200);
    // Only /metrics there.
    let other = reqwest::get(format!("http://{metrics_addr}/health"))
        .await
        .expect("get");
    assert_eq!(other.status(), 404);

    // A function call is counted without its app or name.
    let m = cluster.master_client(0);
    m.request(
        reqwest::Method::PUT,
        "/1/functions/hello",
        Some(&json!({"source": "return 1;"})),
        true,
    )
    .await
    .expect("deploy");
    cluster
        .client(0)
        .request(
            reqwest::Method::POST,
            "/1/functions/hello",
            Some(&json!({})),
            false,
        )
        .await
        .expect("call");
    let text = reqwest::get(format!("http://{metrics_addr}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let calls: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("basalt_function_calls_total"))
        .collect();
    assert!(!calls.is_empty(), "{text}");
    assert!(
        calls
            .iter()
            .all(|l| !l.contains(&cluster.keys.application_id) && !l.contains("hello")),
        "{calls:?}"
    );

    let health: Value = reqwest::get(format!("{}/health", cluster.url(0)))
        .await
        .expect("health")
        .json()
        .await
        .expect("json");
    assert_eq!(health["insecure"], true, "{health}");
    assert_eq!(health["peerTls"], false, "{health}");
}

fn common_free_port() -> u16 {
    super::common::free_port()
}

/// With two of three nodes stopped, the third's `/health` does not claim its groups have
/// leaders: a leader not heard from for an election timeout cannot commit (503, degraded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_degraded_when_no_quorum_answers() {
    let mut cluster = TestCluster::start(3, &["--shards", "2"], &[]).await;
    let url = format!("{}/health", cluster.url(0));
    assert_eq!(reqwest::get(&url).await.expect("health").status(), 200);
    cluster.stop(1);
    cluster.stop(2);
    // Each group turns once its leader has not been heard from for an election timeout.
    let mut last: Value;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let r = reqwest::get(&url).await.expect("health");
        let status = r.status();
        last = r.json().await.expect("json");
        if status == 503 && last["groupsWithLeader"] == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still claims leaders: {last}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    assert_eq!(last["status"], "degraded", "{last}");
    assert_eq!(last["groupsWithLeader"], 0, "{last}");
    let problems = last["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 3, "{last}");
    assert!(
        problems
            .iter()
            .all(|p| p["problem"] == "leaderUnreachable" || p["problem"] == "noLeader"),
        "{last}"
    );
}

/// `/admin/logs`: an app's master key reads that app's requests only (route templates, never
/// paths), filtered by status class; the console account reads every app's and the node's
/// warn and error lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_show_each_caller_what_it_may_see() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let other = cluster.create_app(0, "other").await;
    let other = cluster.app_client(0, &other);
    let created = cluster
        .client(0)
        .create_object("Log", &json!({"a": 1}))
        .await
        .unwrap();
    let _ = cluster.client(0).get_object("Log", "nosuchobject").await;
    other.create_object("Log", &json!({"a": 2})).await.unwrap();
    let get = |c: basalt_client::Client, query: &'static str| async move {
        let path = format!("/admin/logs{query}");
        c.request(basalt_client::Method::GET, &path, None, true)
            .await
            .unwrap()
            .body
    };
    let own = get(cluster.master_client(0), "").await;
    let requests = own["requests"].as_array().unwrap();
    let app = cluster.keys.application_id.clone();
    assert!(requests.iter().all(|r| r["app"] == json!(app)), "{own}");
    assert!(requests
        .iter()
        .any(|r| r["route"] == "/1/classes/{class}" && r["status"] == 201));
    assert!(
        !own.to_string().contains(&created.object_id),
        "a path leaked: {own}"
    );
    assert!(
        own.get("lines").is_none(),
        "a master key reads no node lines"
    );
    let failed = get(cluster.master_client(0), "?status=4").await;
    let failed = failed["requests"].as_array().unwrap();
    assert!(
        !failed.is_empty() && failed.iter().all(|r| r["status"] == 404),
        "{failed:?}"
    );
    let console = cluster.console_client(0);
    let all = console
        .request(
            basalt_client::Method::GET,
            "/admin/logs?limit=1000",
            None,
            false,
        )
        .await
        .unwrap()
        .body;
    let apps: std::collections::BTreeSet<String> = all["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["app"].as_str().map(str::to_string))
        .collect();
    assert!(
        apps.len() >= 2,
        "the console reads every app's requests: {apps:?}"
    );
    assert!(all["lines"].is_array(), "{all}");
}
