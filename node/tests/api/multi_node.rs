//! The write side on three nodes: every node serves every app, schema and signature check with
//! the same answer, whichever node holds the metadata or the shard.

use reqwest::Method;
use serde_json::{json, Value};

use basalt_client::signing::{self, Formula, SignedKeys};

use super::common::{self, assert_api_error, TestCluster};

/// Story — through every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_agree_on_apps_schemas_and_nonces() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &common::SPREAD_CREATES).await;

    // An app created through node 1 is usable at once through node 3.
    let app = cluster.create_app(0, "Everywhere").await;
    let on3 = cluster.app_client(2, &app);
    let c = on3
        .create_object("Thing", &json!({"n": 1}))
        .await
        .expect("write via node 3");
    for i in 0..3 {
        let o = cluster
            .app_client(i, &app)
            .get_object("Thing", &c.object_id)
            .await
            .unwrap();
        assert_eq!(o.expect("visible")["n"], 1, "node {}", i + 1);
    }

    // Concurrent first writes of one new column with different types, through different
    // nodes: exactly one type wins, and every later write of another type is refused.
    let values = [json!(1), json!("one"), json!(true)];
    let writes = (0..3).map(|i| {
        let client = cluster.app_client(i, &app);
        let v = values[i].clone();
        async move { client.create_object("Race", &json!({ "col": v })).await }
    });
    let results = futures::future::join_all(writes).await;
    let won: Vec<usize> = (0..3).filter(|&i| results[i].is_ok()).collect();
    assert_eq!(won.len(), 1, "exactly one type wins: {results:?}");
    for (i, r) in results.iter().enumerate() {
        if let Err(e) = r {
            assert_eq!(e.code(), Some(111), "node {}: {e}", i + 1);
        }
    }
    let schema = cluster
        .app_client(1, &app)
        .request(Method::GET, "/1/schemas/Race", None, true)
        .await
        .unwrap()
        .body;
    let want = ["Number", "String", "Bool"][won[0]];
    assert_eq!(schema["fields"]["col"]["type"], want);

    // A signed request's nonce is refused on every node once used on one.
    let keys = SignedKeys::new(
        app["secretKey"].as_str().unwrap(),
        app["safeToken"].as_str().unwrap(),
        Formula::JsSdk,
    );
    let ts = signing::timestamp_now(Formula::JsSdk);
    let send = |node: usize, nonce: &str| {
        let url = format!("http://{}/1/classes/Thing", cluster.nodes[node].http);
        let headers = signing::sign(&keys, "/1/classes/Thing", b"", &ts, nonce);
        async move {
            let mut req = reqwest::Client::new().get(url);
            for (name, value) in headers {
                req = req.header(format!("X-Service-{name}"), value);
            }
            req.send().await.unwrap().status().as_u16()
        }
    };
    let nonce = signing::new_nonce();
    assert_eq!(send(0, &nonce).await, 200);
    assert_eq!(send(1, &nonce).await, 401, "replayed on node 2");
    assert_eq!(send(2, &nonce).await, 401, "replayed on node 3");
    // Six requests with one fresh nonce at once through the three nodes: exactly one passes.
    let nonce = signing::new_nonce();
    let statuses = futures::future::join_all((0..6).map(|i| send(i % 3, &nonce))).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );

    // Batches through every node touch every shard (each node gives new objects to the
    // shards it leads, and leaders are spread); deleting the class through node 3 removes the
    // objects on every shard.
    let mut slots = Vec::new();
    for node in 0..3 {
        let ops: Vec<Value> = (0..14)
            .map(|i| json!({"method": "POST", "path": "/1/classes/Spread", "body": {"i": i}}))
            .collect();
        slots.extend(common::batch(&cluster.app_client(node, &app), ops).await);
    }
    let groups: std::collections::HashSet<u32> = {
        let ids: Vec<String> = slots
            .iter()
            .map(|s| s["success"]["objectId"].as_str().unwrap().to_string())
            .collect();
        let mut g = std::collections::HashSet::new();
        for id in ids {
            let resp = cluster
                .app_client(0, &app)
                .update_object("Spread", &id, &json!({"seen": true}))
                .await
                .unwrap();
            g.insert(resp.group.unwrap());
        }
        g
    };
    assert!(
        groups.len() >= 3,
        "42 objects spread over the shards: {groups:?}"
    );
    let master3 = cluster.app_client(2, &app);
    master3
        .request(Method::DELETE, "/1/schemas/Spread", None, true)
        .await
        .expect("drop");
    for i in 0..3 {
        let n = cluster
            .app_client(i, &app)
            .query("Spread", &[("count", "1"), ("limit", "0")])
            .await
            .unwrap();
        assert_eq!(n["count"], 0, "node {}", i + 1);
    }

    // Disabling the app through node 1 disables it everywhere.
    cluster
        .console_client(0)
        .request(
            Method::PUT,
            &format!("/1/apps/{}", app["applicationId"].as_str().unwrap()),
            Some(&json!({"status": 0})),
            false,
        )
        .await
        .unwrap();
    for i in 0..3 {
        let client = cluster.app_client(i, &app);
        let mut last = client.query("Thing", &[]).await;
        // A follower's metadata replica may lag by a heartbeat.
        for _ in 0..50 {
            if last.as_ref().err().and_then(|e| e.code()) == Some(10008) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            last = client.query("Thing", &[]).await;
        }
        assert_api_error(last, 400, 10008, &format!("node {}", i + 1));
    }
}

/// A request's id (`X-Request-Id`) goes with the work it forwards: the node that leads the
/// object's group logs the forwarded proposal under the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_work_logs_under_the_request_id() {
    let cluster = TestCluster::start_logging(
        3,
        &["--shards", "4"],
        &[],
        "info,openraft=error,basalt_cluster::peer_service=debug",
    )
    .await;
    let http = reqwest::Client::new();
    let ids: Vec<String> = (0..24).map(|n| format!("trace-{n}-x7")).collect();
    for id in &ids {
        let r = http
            .post(format!("http://{}/1/classes/Traced", cluster.nodes[2].http))
            .header("X-Service-Application-Id", &cluster.keys.application_id)
            .header("X-Service-REST-API-Key", &cluster.keys.rest_key)
            .header("X-Request-Id", id)
            .json(&serde_json::json!({"n": 1}))
            .send()
            .await
            .expect("create");
        assert_eq!(r.status(), 201);
        assert_eq!(
            r.headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok()),
            Some(id.as_str()),
            "the answer repeats the id"
        );
    }
    // Node 3 joined last and leads few groups (or none): it forwards creates to the leaders.
    let peers = cluster.log_text(0) + &cluster.log_text(1);
    let forwarded: Vec<&String> = ids
        .iter()
        .filter(|id| peers.contains(&format!("request{{id={id}}}")))
        .collect();
    assert!(
        !forwarded.is_empty(),
        "no forwarded proposal logged under its request id:\n{peers}"
    );
    assert!(peers.contains("forwarded proposal"), "{peers}");
}

/// A node's new objects go to the data shards it leads one at a time, the shards taking
/// turns (decisions/0028): creates made one after another through it for a second and a
/// half land only on shards it leads, in long runs on one shard, and on every shard it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_creates_take_turns_on_the_shards_it_leads() {
    const SHARDS: u32 = 4;
    let cluster = TestCluster::start_spread(3, &["--shards", "4"], &[], 3).await;
    // Four shards on three nodes: one node leads two of them.
    let mut led = Vec::new();
    for i in 0..3 {
        led.push(cluster.led_shards(i).await);
    }
    let node = (0..3).max_by_key(|&i| led[i].len()).unwrap();
    let before = led[node].clone();
    assert!(before.len() >= 2, "no node leads two shards: {led:?}");

    let c = cluster.client(node);
    let app = cluster.keys.application_id.clone();
    let mut shards = Vec::new();
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_millis(1500) && shards.len() < 3000 {
        let id = c
            .create_object("Lane", &json!({"n": shards.len()}))
            .await
            .expect("create")
            .object_id;
        shards.push(basalt_cluster::ids::shard_for(&app, "Lane", &id, SHARDS).get());
    }
    assert_eq!(
        cluster.led_shards(node).await,
        before,
        "leadership moved during the test"
    );
    assert!(shards.len() >= 40, "only {} creates", shards.len());
    let on: std::collections::BTreeSet<u32> = shards.iter().copied().collect();
    assert_eq!(
        on, before,
        "creates landed on {on:?}, the node leads {before:?}"
    );
    // Turns of 100 ms: the shard changes about once per turn, not every other create as it
    // would with each create's shard drawn at random among the led ones.
    let switches = shards.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        switches * 4 < shards.len(),
        "{switches} switches in {} creates",
        shards.len()
    );
}

/// Creates made at once through one node queue behind the proposal in flight of their group
/// and go to its log together (decisions/0029): each still answers with its own object, which
/// every node then reads with what was sent, and the node submitted fewer batches than it
/// made proposals.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_share_log_appends_and_each_gets_its_own_answer() {
    use futures::StreamExt;
    const CREATES: usize = 240;
    let cluster = TestCluster::start_spread(3, &["--shards", "4"], &[], 3).await;
    let node = 1;
    let c = cluster.client(node);
    let created: Vec<(usize, String)> = futures::stream::iter(0..CREATES)
        .map(|n| {
            let c = &c;
            async move {
                let body = json!({"n": n, "tag": format!("t{n}")});
                let o = c.create_object("Queued", &body).await.expect("create");
                (n, o.object_id)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let ids: std::collections::BTreeSet<&str> = created.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids.len(), CREATES, "every create has its own object");
    for (n, id) in &created {
        let o = cluster
            .client(n % 3)
            .get_object("Queued", id)
            .await
            .expect("get")
            .expect("created object is there");
        assert_eq!(
            (o["n"].clone(), o["tag"].clone()),
            (json!(n), json!(format!("t{n}")))
        );
    }
    let proposals = cluster
        .metric(node, "basalt_raft_proposal_batch_size_sum")
        .await;
    let batches = cluster
        .metric(node, "basalt_raft_proposal_batch_size_count")
        .await;
    assert!(
        proposals >= CREATES as f64,
        "{proposals} proposals for {CREATES} creates"
    );
    assert!(
        batches * 2.0 < proposals,
        "{batches} appends for {proposals} proposals"
    );
}
