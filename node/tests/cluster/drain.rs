//! Draining a node before it stops (`src/drain.rs`): on SIGTERM and on `basalt admin drain`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

use crate::common::TestCluster;

/// Node `i`'s `/health`, with `query`: its status code and body.
async fn health(cluster: &TestCluster, i: usize, query: &str) -> (u16, Value) {
    let resp = reqwest::get(format!("{}/health{query}", cluster.url(i)))
        .await
        .expect("health");
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

/// The member records as node `i` holds them (`basalt admin members`).
fn members(cluster: &TestCluster, i: usize) -> Vec<Value> {
    let out: Value = serde_json::from_str(&cluster.admin(i, &["members"])).expect("members json");
    out["ClusterInfo"]["nodes"]
        .as_array()
        .expect("nodes")
        .clone()
}

fn draining(members: &[Value], id: u64) -> bool {
    members
        .iter()
        .any(|n| n["id"] == json!(id) && !n["draining_since_ms"].is_null())
}

/// Story — a node told to stop (SIGTERM, `--drain-wait 3`): at once its `/health?ready=1`
/// answers 503 ("draining") while plain `/health` and requests through it still succeed; then
/// its member record says it drains, it hands its leaderships over, closes a WebSocket on it
/// with 1012 "service restart" and exits 0, while creates through the other nodes never fail;
/// started again, it is ready and no longer draining. `basalt admin drain 3` through node 1
/// stops node 3 the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_drains_before_it_stops() {
    let mut cluster = TestCluster::start(3, &["--shards", "4"], &["--drain-wait", "3"]).await;
    assert_eq!(health(&cluster, 1, "?ready=1").await.0, 200);
    let url = format!(
        "ws://{}/1/realtime?applicationId={}&restKey={}",
        cluster.nodes[1].http, cluster.keys.application_id, cluster.keys.rest_key
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("connect");
    // Creates through nodes 1 and 3 all along.
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let writers: Vec<_> = [0usize, 2]
        .into_iter()
        .map(|i| {
            let (c, stop) = (cluster.client(i), Arc::clone(&stop));
            let (done, failed) = (Arc::clone(&done), Arc::clone(&failed));
            tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    match c.create_object("Steady", &json!({"n": n})).await {
                        Ok(_) => done.fetch_add(1, Ordering::SeqCst),
                        Err(e) => {
                            eprintln!("create through node {}: {e}", i + 1);
                            failed.fetch_add(1, Ordering::SeqCst)
                        }
                    };
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    cluster.terminate(1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (code, body) = health(&cluster, 1, "?ready=1").await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["status"], json!("draining"), "{body}");
    let (code, body) = health(&cluster, 1, "").await;
    assert_eq!((code, &body["draining"]), (200, &json!(true)), "{body}");
    cluster
        .client(1)
        .create_object("Steady", &json!({"through": "the draining node"}))
        .await
        .expect("a request to a draining node is served");
    let exit = cluster
        .wait_exit(1, Duration::from_secs(30))
        .await
        .expect("the drained node exits");
    assert!(exit.success(), "{exit:?}");
    // The mark stays until the node's next start.
    assert!(
        draining(&members(&cluster, 0), 2),
        "node 2's member record does not say it drained"
    );
    assert!(
        cluster
            .log_text(1)
            .contains("leaderships handed over: stopping"),
        "node 2 stopped still leading groups"
    );
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(m) = ws.next().await {
            if let Ok(Message::Close(frame)) = m {
                return frame.map(|f| f.code);
            }
        }
        None
    })
    .await
    .expect("the WebSocket was closed");
    assert_eq!(closed, Some(CloseCode::Restart));
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.await.unwrap();
    }
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "creates failed during the drain"
    );
    assert!(done.load(Ordering::SeqCst) > 0);

    cluster.restart(1).await;
    cluster.wait_healthy(1, Duration::from_secs(60)).await;
    let mut cleared = false;
    for _ in 0..100 {
        if !draining(&members(&cluster, 0), 2) && health(&cluster, 1, "?ready=1").await.0 == 200 {
            cleared = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(cleared, "the restarted node still drains");

    let out = cluster.admin(0, &["drain", "3"]);
    assert!(out.contains("node 3 stopped"), "{out}");
    let exit = cluster
        .wait_exit(2, Duration::from_secs(30))
        .await
        .expect("node 3 exits");
    assert!(exit.success(), "{exit:?}");
    assert!(cluster
        .log_text(2)
        .contains("leaderships handed over: stopping"));
}
