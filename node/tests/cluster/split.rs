//! Splits (`basalt admin split`, hash slots): a data group splits in two while it is written.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::common::TestCluster;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next message named one of `names` on `ws` (its name and argument), skipping others;
/// `None` after `within`.
async fn next_named(ws: &mut Ws, names: &[&str], within: Duration) -> Option<(String, Value)> {
    use futures::StreamExt;
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let m = tokio::time::timeout_at(deadline, ws.next())
            .await
            .ok()??
            .ok()?;
        let Ok(text) = m.into_text() else { continue };
        let Ok(v) = serde_json::from_str::<Value>(text.as_str()) else {
            continue;
        };
        if let Some(name) = v["name"].as_str().filter(|n| names.contains(n)) {
            return Some((name.to_string(), v["args"][0].clone()));
        }
    }
}

/// A live query of class `Item` through node `i` (`/1/realtime`): the socket and the
/// acknowledgement (`server_sub`, with the cursor).
async fn subscribe_items(cluster: &TestCluster, i: usize, cursor: Option<&str>) -> (Ws, Value) {
    use futures::SinkExt;
    let url = format!(
        "ws://{}/1/realtime?applicationId={}&restKey={}",
        cluster.nodes[i].http, cluster.keys.application_id, cluster.keys.rest_key
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("connect");
    let mut sub = json!({"appKey": cluster.keys.application_id, "tableName": "Item",
        "action": "updateTable"});
    if let Some(c) = cursor {
        sub["cursor"] = json!(c);
    }
    let msg = json!({"name": "client_sub", "args": [sub]}).to_string();
    ws.send(tokio_tungstenite::tungstenite::Message::Text(msg.into()))
        .await
        .expect("send");
    let ack = next_named(&mut ws, &["server_sub", "error"], Duration::from_secs(20))
        .await
        .expect("an answer to client_sub");
    assert_eq!(
        ack.0, "server_sub",
        "subscribing through node {i}: {}",
        ack.1
    );
    (ws, ack.1)
}

/// Reads `ws` in a task from now on: each `create` event's objectId and cursor, in order.
fn read_creates(mut ws: Ws) -> mpsc::UnboundedReceiver<(String, String)> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some((_, e)) =
            next_named(&mut ws, &["server_pub"], Duration::from_secs(120)).await
        {
            if e["event"] == "create" {
                let id = e["data"]["objectId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let cursor = e["cursor"].as_str().unwrap_or_default().to_string();
                if tx.send((id, cursor)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// The creates read so far and those that come until every one of `want` has (or 30 s pass
/// without one): objectIds in order, and the last cursor.
async fn creates_until(
    rx: &mut mpsc::UnboundedReceiver<(String, String)>,
    want: &BTreeSet<String>,
) -> (Vec<String>, String) {
    let (mut ids, mut cursor) = (Vec::new(), String::new());
    while !want.iter().all(|w| ids.contains(w)) {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
            Ok(Some((id, c))) => {
                ids.push(id);
                cursor = c;
            }
            _ => break,
        }
    }
    (ids, cursor)
}

/// Runs `basalt admin <args>` through node `node` while `spawn_writers` write (`n` from
/// `base`), and stops them once it is done: the slot map it printed (it must succeed) and the
/// writers, to be joined.
async fn admin_while_writing(
    cluster: &TestCluster,
    node: usize,
    args: &[&str],
    base: usize,
) -> (Value, Vec<tokio::task::JoinHandle<Vec<String>>>) {
    let done = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(cluster, &done, base);
    let run = {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"));
        cmd.args(["admin", "--rpc", &cluster.rpc(node)]).args(args);
        tokio::task::spawn_blocking(move || cmd.output())
    };
    let out = run.await.expect("join").expect("run basalt admin");
    done.store(true, Ordering::SeqCst);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view = serde_json::from_slice(&out.stdout).expect("slots json");
    (view, writers)
}

/// A writer through each node creating `Item`s (`n` from `base`) every 20 ms until `done`:
/// each answers the objectIds it was acknowledged; a write that fails fails the test.
fn spawn_writers(
    cluster: &TestCluster,
    done: &Arc<AtomicBool>,
    base: usize,
) -> Vec<tokio::task::JoinHandle<Vec<String>>> {
    (0..3)
        .map(|node| {
            let client = cluster.client(node);
            let done = Arc::clone(done);
            tokio::spawn(async move {
                let mut acked = Vec::new();
                for i in 0..2_000 {
                    if done.load(Ordering::SeqCst) {
                        break;
                    }
                    let created = client
                        .create_object("Item", &json!({"n": base + node * 10_000 + i}))
                        .await
                        .unwrap_or_else(|e| panic!("a write through node {node} failed: {e}"));
                    acked.push(created.object_id);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                acked
            })
        })
        .collect()
}

/// A metric (`name`, labels included) summed over every node.
async fn summed(cluster: &TestCluster, name: &str) -> f64 {
    let mut n = 0.0;
    for i in 0..cluster.nodes.len() {
        n += cluster.metric(i, name).await;
    }
    n
}

/// Batches of splits and merges done (`basalt_split_batches_total`).
async fn batches(cluster: &TestCluster) -> f64 {
    summed(cluster, "basalt_split_batches_total").await
}

/// Objects entered into the groups' slot indexes as they were built
/// (`basalt_slot_index_entered_total`).
async fn entered(cluster: &TestCluster) -> f64 {
    summed(cluster, "basalt_slot_index_entered_total").await
}

/// Keys the copies of splits and merges read `via` the slot index or a scan of every object
/// (`basalt_split_keys_read_total`).
async fn read_via(cluster: &TestCluster, via: &str) -> f64 {
    summed(
        cluster,
        &format!("basalt_split_keys_read_total{{via=\"{via}\"}}"),
    )
    .await
}

/// Waits until the node running the timed work reports every data group's slot index
/// complete (`basalt_slot_index_pending_groups 0`).
async fn wait_indexed(cluster: &TestCluster) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut done = false;
        for i in 0..cluster.nodes.len() {
            let text = cluster.client(i).metrics().await.unwrap_or_default();
            done |= text
                .lines()
                .any(|l| l == "basalt_slot_index_pending_groups 0");
        }
        if done {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the slot indexes were not complete within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Each of `want` is among `got` exactly once.
fn each_once(got: &[String], want: &BTreeSet<String>, what: &str) {
    for w in want {
        let n = got.iter().filter(|g| *g == w).count();
        assert_eq!(n, 1, "{what}: the create of {w} came {n} times");
    }
}

/// Story — a split under writes (3 nodes, 2 data groups of 256 slots each): while writers
/// create objects through every node, group 1 splits in 4 batches of 32 slots (`--batch-slots
/// 32`), each read through the group's slot index; the new group 3 holds half its slots, the split ends, no write fails
/// (one to a frozen slot waits out its batch's copy), every
/// acknowledged object is read through every node and listed and counted exactly once, and
/// objects written afterwards are counted too; a live query opened before the split hears of
/// every object created after it (the new group's too), one resumed from a cursor of before
/// the split replays them, and new cursors name the new group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_splits_under_writes_and_every_object_is_counted_once() {
    let cluster = TestCluster::start(3, &["--shards", "2"], &[]).await;
    crate::wait_slots_feature(&cluster).await;
    let first: BTreeSet<String> =
        crate::create_numbered(&cluster.client(0), "Item", 150, |i| json!({"n": i}))
            .await
            .into_iter()
            .collect();
    let mut ids = first.clone();
    // Every group's slot index is complete (the node running the timed work saw to it)
    // before the split: its batches are copied through it.
    wait_indexed(&cluster).await;
    // A live query from before the split, and its cursor (one position per group: 0, 1, 2).
    let (live, ack) = subscribe_items(&cluster, 2, None).await;
    let old_cursor = ack["cursor"].as_str().expect("cursor").to_string();
    assert_eq!(old_cursor.split('.').count(), 3, "{ack}");
    let mut live = read_creates(live);

    // Writers through each node until the split is done.
    let (view, writers) = admin_while_writing(
        &cluster,
        1,
        &["split", "1", "--wait-secs", "120", "--batch-slots", "32"],
        1_000,
    )
    .await;
    assert_eq!(view["splits"], json!([]), "{view}");
    assert_eq!(view["epoch"], json!(4), "one epoch a batch: {view}");
    assert!(batches(&cluster).await >= 4.0, "four batches counted");
    assert!(
        read_via(&cluster, "index").await > 0.0 && read_via(&cluster, "scan").await == 0.0,
        "the batches were read through the slot index"
    );
    assert_eq!(
        view["groups"],
        json!({"1": 128, "2": 256, "3": 128}),
        "group 1 gave half its slots to group 3: {view}"
    );
    assert!(view["epoch"].as_u64() >= Some(1), "{view}");
    let mut written = 0;
    for w in writers {
        let acked = w.await.expect("writer");
        written += acked.len();
        ids.extend(acked);
    }
    assert!(
        written > 30,
        "the writers wrote during the split: {written}"
    );
    // Every node routes by the new map within a refresh.
    TestCluster::eventually(
        Duration::from_secs(10),
        "every node took up the map",
        || {
            (0..3).all(|i| {
                serde_json::from_str::<Value>(&cluster.admin(i, &["slots"]))
                    .is_ok_and(|v| v["epoch"] == view["epoch"])
            })
        },
    )
    .await;

    // Group 1 dropped what it gave away: the objects of its old slots are counted once, in
    // group 3.
    for node in 0..3 {
        let client = cluster.client(node);
        for id in &ids {
            let got = client.get_object("Item", id).await.expect("read");
            assert!(got.is_some(), "{id} through node {node}");
        }
        // Pages of 500 (a query's most) in objectId order.
        let mut listed: Vec<String> = Vec::new();
        for page in 0..4 {
            let skip = (page * 500).to_string();
            let part = client
                .query(
                    "Item",
                    &[
                        ("count", "1"),
                        ("limit", "500"),
                        ("skip", &skip),
                        ("order", "objectId"),
                    ],
                )
                .await
                .expect("list");
            assert_eq!(part["count"], json!(ids.len()), "through node {node}");
            listed.extend(
                part["results"]
                    .as_array()
                    .expect("results")
                    .iter()
                    .filter_map(|r| r["objectId"].as_str().map(String::from)),
            );
        }
        let unique: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
        assert_eq!(listed.len(), unique.len(), "an object listed twice");
        assert_eq!(unique.len(), ids.len());
        let counted = client
            .query("Item", &[("count", "1"), ("limit", "0")])
            .await
            .expect("count");
        assert_eq!(counted["count"], json!(ids.len()));
    }

    let status: Value = serde_json::from_str(&cluster.admin(2, &["status"])).expect("status");
    assert_eq!(status["Slots"]["groups"], view["groups"], "{status}");

    // Writes after the split land in every group, the new one included, and the live query
    // from before the split hears of every one; a subscription resumed from its cursor of
    // three groups replays them too, and new cursors name group 3.
    let after: BTreeSet<String> =
        crate::create_numbered(&cluster.client(2), "Item", 60, |i| json!({"n": 50_000 + i}))
            .await
            .into_iter()
            .collect();
    // Every create since the live query began: the writers' during the split and these.
    let since: BTreeSet<String> = ids
        .iter()
        .filter(|id| !first.contains(*id))
        .cloned()
        .chain(after.iter().cloned())
        .collect();
    let (heard, last_cursor) = creates_until(&mut live, &since).await;
    each_once(&heard, &since, "the live query");
    assert_eq!(last_cursor.split('.').count(), 4, "{last_cursor}");
    // A cursor of after the split, through a node whose hub has not started yet.
    let (_, ack) = subscribe_items(&cluster, 0, Some(&last_cursor)).await;
    assert_eq!(ack["cursor"], json!(last_cursor));
    let (resumed, _) = subscribe_items(&cluster, 1, Some(&old_cursor)).await;
    let (replayed, _) = creates_until(&mut read_creates(resumed), &since).await;
    each_once(
        &replayed,
        &since,
        "the replay from a cursor of before the split",
    );
    let (_, fresh) = subscribe_items(&cluster, 1, None).await;
    assert_eq!(
        fresh["cursor"].as_str().map(|c| c.split('.').count()),
        Some(4),
        "{fresh}"
    );
    ids.extend(after);
    let counted = cluster
        .client(0)
        .query("Item", &[("count", "1"), ("limit", "0")])
        .await
        .expect("count");
    assert_eq!(counted["count"], json!(ids.len()));
}

/// The slot map through the first node that answers (`basalt admin slots`).
fn slots_through_any(cluster: &TestCluster) -> Option<Value> {
    (0..3).find_map(|i| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args(["admin", "--rpc", &cluster.rpc(i), "slots"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    })
}

/// Story — a split and then a merge, each in four batches (`--batch-slots 32`), interrupted by
/// crashes at each of their fail points (before the freeze, after a copied page, after the
/// seal or before the switch, after a dropped page): every node is armed to crash at its
/// second pass there, so the node running the step dies in a later batch than the first
/// (the third, when the metadata leader changed after the first), then the next may; each is
/// started again without the point, and the split resumes from what the map's record saved
/// and completes, every object counted once through every node.
/// Armed again, every node restarts, and the merge of the new group back into its parent
/// crashes, resumes and completes the same way, the merged group retired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_or_merge_that_crashes_at_each_step_resumes_and_completes() {
    for point in [
        "split-before-freeze",
        "split-copied-page",
        "split-sealed",
        "split-dropped-page",
    ] {
        let armed = format!("{point}=1*off->1*panic");
        let mut cluster = TestCluster::start_with_env(
            3,
            &["--shards", "2"],
            &[],
            &[("BASALT_FAILPOINTS", armed.as_str())],
        )
        .await;
        for i in 0..3 {
            cluster.set_env(i, &[]);
        }
        crate::wait_slots_feature(&cluster).await;
        let ids =
            crate::create_numbered(&cluster.client(0), "Item", 120, |i| json!({"n": i})).await;
        cluster.admin(0, &["split", "1", "--batch-slots", "32"]);
        let split_done = |v: &Value| v["splits"] == json!([]) && v["groups"]["3"] == json!(128);
        let crashes = crash_until(&mut cluster, point, "split", split_done).await;
        assert!(crashes >= 1, "{point}: no node crashed in the split");
        counted_through_every_node(&mut cluster, point, &ids).await;

        for i in 0..3 {
            cluster.stop(i);
        }
        for i in 0..3 {
            cluster.restart_with_failpoints(i, &armed);
        }
        for i in 0..3 {
            cluster.wait_healthy(i, Duration::from_secs(60)).await;
        }
        // Placement hands leaderships back to their preferred nodes a few seconds after a
        // start: the merge begins once that is done.
        tokio::time::sleep(Duration::from_secs(5)).await;
        cluster.admin(1, &["merge", "3", "--batch-slots", "32"]);
        let merge_done = |v: &Value| {
            v["splits"] == json!([])
                && v["retired"] == json!([3])
                && v["groups"] == json!({"1": 256, "2": 256})
        };
        let crashes = crash_until(&mut cluster, point, "merge", merge_done).await;
        assert!(crashes >= 1, "{point}: no node crashed in the merge");
        counted_through_every_node(&mut cluster, point, &ids).await;
    }
}

/// Starts again (without fail points) every node that exits until the slot map through any
/// node is `done` (180 s at most): how many exited.
async fn crash_until(
    cluster: &mut TestCluster,
    point: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let mut crashes = 0;
    loop {
        for i in 0..3 {
            if cluster
                .wait_exit(i, Duration::from_millis(20))
                .await
                .is_some()
            {
                crashes += 1;
                cluster.restart(i).await;
            }
        }
        if slots_through_any(cluster).is_some_and(|v| done(&v)) {
            return crashes;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{point}: the {what} did not complete ({crashes} crashes)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every node healthy, and each of `ids` read and counted once through every node.
async fn counted_through_every_node(cluster: &mut TestCluster, point: &str, ids: &[String]) {
    for i in 0..3 {
        cluster.wait_healthy(i, Duration::from_secs(60)).await;
    }
    for node in 0..3 {
        let client = cluster.client(node);
        let mut counted = Value::Null;
        for _ in 0..50 {
            if let Ok(c) = client
                .query("Item", &[("count", "1"), ("limit", "0")])
                .await
            {
                counted = c;
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert_eq!(
            counted["count"],
            json!(ids.len()),
            "{point}: through node {node}"
        );
        for id in ids {
            let got = client.get_object("Item", id).await.expect("read");
            assert!(got.is_some(), "{point}: {id} through node {node}");
        }
    }
}

/// Story — groups split by themselves under sustained load: with the size limit off and the
/// load limit at 2 writes a second (`basalt admin slots --split-above-...`), a client writing
/// steadily through every node makes a group split within a couple of minutes, counted as a
/// split by load; the map then names the new group, and every object is read and counted once
/// through every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_under_sustained_load_splits_by_itself() {
    let cluster = TestCluster::start(3, &["--shards", "2"], &[]).await;
    crate::wait_slots_feature(&cluster).await;
    let set: Value = serde_json::from_str(&cluster.admin(
        1,
        &[
            "slots",
            "--split-above-mb",
            "0",
            "--split-above-writes-per-s",
            "2",
        ],
    ))
    .expect("slots json");
    assert_eq!(
        set["auto"],
        json!({"splitAboveMb": 0, "splitAboveWritesPerS": 2, "mergeBelowMb": 64, "settleSecs": 600, "moveBatchKb": 2048, "moveKbPerS": 1024}),
        "{set}"
    );
    let mut ids = Vec::new();
    // Writes answered 503 (a write to moving objects told to try again, or one whose outcome
    // the node could not wait for): each may or may not have been applied.
    let mut unsure = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let mut map = Value::Null;
    let mut sent = 0usize;
    while std::time::Instant::now() < deadline {
        sent += 1;
        let client = cluster.client(sent % 3);
        match client.create_object("Busy", &json!({"n": sent})).await {
            Ok(created) => ids.push(created.object_id),
            Err(e) => {
                assert!(e.to_string().contains("503"), "create: {e}");
                unsure += 1;
            }
        }
        if sent.is_multiple_of(40) {
            map = slots_through_any(&cluster).unwrap_or(Value::Null);
            if map["groups"]["3"].as_u64().is_some() && map["splits"] == json!([]) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert_eq!(
        map["groups"]["3"],
        json!(128),
        "a group split by itself: {map}"
    );
    let by_load: f64 = {
        let mut sum = 0.0;
        for i in 0..3 {
            sum += cluster
                .metric(i, "basalt_splits_auto_total{reason=\"load\"}")
                .await;
        }
        sum
    };
    assert!(by_load >= 1.0, "counted as a split by load");
    for node in 0..3 {
        let client = cluster.client(node);
        let listed = crate::all_ids(&client, "Busy").await;
        let counted = client
            .query("Busy", &[("count", "1"), ("limit", "0")])
            .await
            .expect("count");
        assert_eq!(counted["count"], json!(listed.len()), "through node {node}");
        assert!(
            ids.iter().all(|id| listed.contains(id)),
            "every acknowledged write is there, through node {node}"
        );
        assert!(listed.len() <= ids.len() + unsure, "through node {node}");
        for id in ids.iter().step_by(7) {
            assert!(client.get_object("Busy", id).await.expect("read").is_some());
        }
    }
}

/// Story — two administrators split at once through different nodes: exactly one split is
/// begun (the other is refused: one split at a time, the map's record written by
/// compare-and-set), for different groups and for the same group; each time the map ends with
/// one new group holding half of its parent's slots. Then two merges at once, of different
/// groups and of the same group: exactly one begins each time, and the map ends with one
/// group fewer, the merged one retired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_splits_asked_at_once_through_different_nodes_begin_one() {
    let cluster = TestCluster::start(3, &["--shards", "2"], &[]).await;
    crate::wait_slots_feature(&cluster).await;
    let admin_through = |node: usize, verb: &str, group: &str| {
        let rpc = cluster.rpc(node);
        let (verb, group) = (verb.to_string(), group.to_string());
        std::thread::spawn(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
                .args(["admin", "--rpc", &rpc, &verb, &group])
                .output()
                .expect("basalt admin")
        })
    };
    let split_through = |node: usize, group: &str| admin_through(node, "split", group);
    let mut before: std::collections::BTreeMap<String, u64> =
        [("1".to_string(), 256), ("2".to_string(), 256)].into();
    for (round, asks) in [(1, [(0, "1"), (1, "2")]), (2, [(1, "2"), (2, "2")])] {
        let runs: Vec<_> = asks.iter().map(|&(n, g)| split_through(n, g)).collect();
        let outs: Vec<_> = tokio::task::block_in_place(|| {
            runs.into_iter()
                .map(|r| r.join().expect("the admin thread"))
                .collect()
        });
        let begun = outs.iter().filter(|o| o.status.success()).count();
        let said: Vec<String> = outs
            .iter()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .collect();
        assert_eq!(begun, 1, "round {round}: one split begins: {said:?}");
        let refusal = outs
            .iter()
            .find(|o| !o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .unwrap_or_default();
        assert!(
            refusal.contains("one split or merge at a time") || refusal.contains("onflict"),
            "round {round}: the other is refused for the split under way: {refusal}"
        );
        // The one begun completes: a new group holds half of its parent's slots, the other
        // groups keep theirs.
        let child = (round + 2).to_string();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let after = loop {
            let map = slots_through_any(&cluster).unwrap_or(Value::Null);
            if map["splits"] == json!([]) && map["groups"][&child].is_u64() {
                break serde_json::from_value::<std::collections::BTreeMap<String, u64>>(
                    map["groups"].clone(),
                )
                .expect("slots per group");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: the split completes: {map}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert_eq!(
            after.len(),
            before.len() + 1,
            "round {round}: one new group: {after:?}"
        );
        let halved: Vec<&String> = before.keys().filter(|g| after[*g] != before[*g]).collect();
        assert_eq!(
            halved.len(),
            1,
            "round {round}: one parent: {before:?} → {after:?}"
        );
        let parent = halved[0];
        assert_eq!(
            after[parent] * 2,
            before[parent],
            "round {round}: {after:?}"
        );
        assert_eq!(after[&child], after[parent], "round {round}: {after:?}");
        before = after;
    }

    // Merges at once: of groups 3 and 4 (different sources), then of the one left, twice.
    let mut retired = 0;
    for (round, asks) in [(3, [(0, "3"), (2, "4")]), (4, [(1, "?"), (2, "?")])] {
        let left = if before.contains_key("3") { "3" } else { "4" };
        let runs: Vec<_> = asks
            .iter()
            .map(|&(n, g)| admin_through(n, "merge", if g == "?" { left } else { g }))
            .collect();
        let outs: Vec<_> = tokio::task::block_in_place(|| {
            runs.into_iter()
                .map(|r| r.join().expect("the admin thread"))
                .collect()
        });
        let said: Vec<String> = outs
            .iter()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .collect();
        assert_eq!(
            outs.iter().filter(|o| o.status.success()).count(),
            1,
            "round {round}: one merge begins: {said:?}"
        );
        assert!(
            said.iter()
                .any(|e| e.contains("one split or merge at a time")
                    || e.contains("onflict")
                    || e.contains("no slot")
                    || e.contains("no group to merge into")),
            "round {round}: the other is refused: {said:?}"
        );
        retired += 1;
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let map = loop {
            let map = slots_through_any(&cluster).unwrap_or(Value::Null);
            if map["splits"] == json!([])
                && map["retired"].as_array().map(Vec::len) == Some(retired)
            {
                break map;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: the merge completes: {map}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        let after: std::collections::BTreeMap<String, u64> =
            serde_json::from_value(map["groups"].clone()).expect("slots per group");
        assert_eq!(after.len(), before.len() - 1, "round {round}: {map}");
        assert_eq!(after.values().sum::<u64>(), 512, "round {round}: {map}");
        before = after;
    }
    assert_eq!(
        before,
        [("1".to_string(), 256), ("2".to_string(), 256)].into()
    );
}

/// The groups node `i` holds a replica of (`basalt admin status`).
fn groups_held(cluster: &TestCluster, i: usize) -> BTreeSet<u64> {
    let status: Value = serde_json::from_str(&cluster.admin(i, &["status"])).expect("status");
    status["Status"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["group"].as_u64())
        .collect()
}

/// Every object of `ids` is read, listed and counted exactly once through every node.
async fn each_counted_once(cluster: &TestCluster, class: &str, ids: &BTreeSet<String>) {
    for node in 0..3 {
        let client = cluster.client(node);
        let listed = crate::all_ids(&client, class).await;
        assert!(
            ids.iter().all(|id| listed.contains(id)),
            "every acknowledged write is there, through node {node}"
        );
        assert_eq!(listed.len(), ids.len(), "through node {node}");
        let counted = client
            .query(class, &[("count", "1"), ("limit", "0")])
            .await
            .expect("count");
        assert_eq!(counted["count"], json!(ids.len()), "through node {node}");
        for id in ids.iter().step_by(5) {
            let got = client.get_object(class, id).await.expect("read");
            assert!(got.is_some(), "{id} through node {node}");
        }
    }
}

/// Story — merges (3 nodes, 2 data groups): group 1 splits into 1 and 3; then, while writers
/// create objects through every node, `basalt admin merge 3 --batch-slots 48` gives every slot
/// of group 3 back to group 1 in three batches (48, 48, 32): no write fails, the map holds groups 1 and 2 only with group 3 retired, every
/// node erased its replica of group 3, every object is read, listed and counted once through
/// every node, and live queries from before the merge and from after it hear every new create
/// once. Then group 2 splits into 2 and 4 (the id 3 is not taken again), and
/// with merges allowed right after a split (`--settle-secs 1`), group 4 — small and quiet —
/// merges back into group 2 by itself, counted as a merge of a small group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_merges_back_into_its_parent_and_is_retired() {
    let cluster = TestCluster::start(3, &["--shards", "2"], &[]).await;
    crate::wait_slots_feature(&cluster).await;
    let mut ids: BTreeSet<String> =
        crate::create_numbered(&cluster.client(0), "Item", 150, |i| json!({"n": i}))
            .await
            .into_iter()
            .collect();
    let split: Value =
        serde_json::from_str(&cluster.admin(1, &["split", "1", "--wait-secs", "120"]))
            .expect("split json");
    assert_eq!(
        split["groups"],
        json!({"1": 128, "2": 256, "3": 128}),
        "{split}"
    );
    ids.extend(
        crate::create_numbered(&cluster.client(1), "Item", 60, |i| json!({"n": 1_000 + i})).await,
    );
    // A live query from before the merge, through node 1.
    let (live, _) = subscribe_items(&cluster, 1, None).await;
    let mut live = read_creates(live);

    let before = batches(&cluster).await;
    let (view, writers) = admin_while_writing(
        &cluster,
        2,
        &["merge", "3", "--wait-secs", "120", "--batch-slots", "48"],
        100_000,
    )
    .await;
    assert!(
        batches(&cluster).await - before >= 3.0,
        "three batches counted"
    );
    assert_eq!(
        view["epoch"].as_u64(),
        split["epoch"].as_u64().map(|e| e + 3),
        "one epoch a batch: {view}"
    );
    assert_eq!(view["groups"], json!({"1": 256, "2": 256}), "{view}");
    assert_eq!(view["retired"], json!([3]), "{view}");
    let mut written = 0;
    for w in writers {
        let acked = w.await.expect("writer");
        written += acked.len();
        ids.extend(acked);
    }
    assert!(
        written > 30,
        "the writers wrote during the merge: {written}"
    );
    TestCluster::eventually(
        Duration::from_secs(20),
        "every node erased its replica of group 3",
        || (0..3).all(|i| !groups_held(&cluster, i).contains(&3)),
    )
    .await;
    each_counted_once(&cluster, "Item", &ids).await;
    // Live queries go on: the one from before the merge, and one through a node whose hub
    // starts after it (group 3 keeps its place in cursors, followed no more), hear every
    // create made now, once.
    let (fresh, ack) = subscribe_items(&cluster, 0, None).await;
    assert_eq!(
        ack["cursor"].as_str().map(|c| c.split('.').count()),
        Some(4),
        "{ack}"
    );
    let mut fresh = read_creates(fresh);
    let after: BTreeSet<String> =
        crate::create_numbered(&cluster.client(2), "Item", 30, |i| json!({"n": 70_000 + i}))
            .await
            .into_iter()
            .collect();
    let (heard, _) = creates_until(&mut fresh, &after).await;
    each_once(&heard, &after, "a live query begun after the merge");
    let (heard, _) = creates_until(&mut live, &after).await;
    each_once(&heard, &after, "a live query begun before the merge");
    ids.extend(after);
    let mut merges = 0.0;
    for i in 0..3 {
        merges += cluster.metric(i, "basalt_merges_total").await;
    }
    assert!(merges >= 1.0, "counted as a merge");

    // Group 2 splits; the new group is 4, never 3 again.
    let split: Value =
        serde_json::from_str(&cluster.admin(0, &["split", "2", "--wait-secs", "120"]))
            .expect("split json");
    assert_eq!(
        split["groups"],
        json!({"1": 256, "2": 128, "4": 128}),
        "{split}"
    );
    ids.extend(
        crate::create_numbered(&cluster.client(2), "Item", 40, |i| json!({"n": 90_000 + i})).await,
    );
    let set: Value = serde_json::from_str(
        &cluster.admin(1, &["slots", "--split-above-mb", "0", "--settle-secs", "1"]),
    )
    .expect("slots json");
    assert_eq!(set["auto"]["settleSecs"], json!(1), "{set}");
    // Group 4 is watched for a minute (its writes a second), then merges back by itself.
    let mut map = Value::Null;
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while std::time::Instant::now() < deadline {
        map = slots_through_any(&cluster).unwrap_or(Value::Null);
        if map["retired"] == json!([3, 4]) && map["splits"] == json!([]) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert_eq!(map["groups"], json!({"1": 256, "2": 256}), "{map}");
    assert_eq!(map["retired"], json!([3, 4]), "{map}");
    let mut small = 0.0;
    for i in 0..3 {
        small += cluster
            .metric(i, "basalt_merges_auto_total{reason=\"small\"}")
            .await;
    }
    assert!(small >= 1.0, "counted as a merge of a small group");
    each_counted_once(&cluster, "Item", &ids).await;
}

/// Story — a cluster whose build keeps no slot index (`BASALT_TESTING_WITHOUT_FEATURES=
/// slot-index`) stores 210 objects; rolled to this build, the feature turns on and the node
/// running the timed work enters every stored object into its group's slot index; group 1
/// then splits in batches read through it (no key read by a scan of the group), and every
/// object is read, listed and counted once through every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slot_index_is_built_for_objects_stored_before_it() {
    let without = [("BASALT_TESTING_WITHOUT_FEATURES", "slot-index")];
    let mut cluster = TestCluster::start_with_env(3, &["--shards", "2"], &[], &without).await;
    crate::wait_slots_feature(&cluster).await;
    // Through every node: a node gives new objects ids of the groups it leads, and group 1's
    // leader is one of them.
    let mut ids: BTreeSet<String> = BTreeSet::new();
    for i in 0..3 {
        ids.extend(
            crate::create_numbered(&cluster.client(i), "Item", 70, |n| json!({"n": n})).await,
        );
    }
    assert_eq!(entered(&cluster).await, 0.0, "no index before the feature");
    for i in 0..3 {
        cluster.stop(i);
        cluster.set_env(i, &[]);
        cluster.restart(i).await;
        cluster.wait_healthy(i, Duration::from_secs(60)).await;
    }
    wait_indexed(&cluster).await;
    assert!(
        entered(&cluster).await >= 210.0,
        "every stored object entered: {}",
        entered(&cluster).await
    );
    let view: Value = serde_json::from_str(&cluster.admin(
        1,
        &["split", "1", "--wait-secs", "120", "--batch-slots", "64"],
    ))
    .expect("split json");
    assert_eq!(
        view["groups"],
        json!({"1": 128, "2": 256, "3": 128}),
        "{view}"
    );
    let (index, scan) = (
        read_via(&cluster, "index").await,
        read_via(&cluster, "scan").await,
    );
    assert!(
        index > 0.0 && scan == 0.0,
        "the batches were read through the slot index: {index} keys through it, {scan} by scans"
    );
    each_counted_once(&cluster, "Item", &ids).await;
}
