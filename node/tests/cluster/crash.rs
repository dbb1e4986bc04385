//! Crashes at the fail points of the write path (`basalt_cluster::failpoints`, armed through
//! `BASALT_FAILPOINTS`): a node that dies after a log append, in the middle of applying
//! committed entries, or in the middle of installing a snapshot comes back with nothing lost —
//! every acknowledged write is there, a write that was in flight is there at most once, and a
//! replica ends with exactly the state of its peers. On the read path: a node whose part of a
//! query fails ends the query, and the other nodes stop reading theirs.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use super::common::TestCluster;

/// Writes through node 0 until it dies (bounded): creates and increments in turn. Answers the
/// acknowledged creates (id, body), acknowledged increments and increments sent.
async fn write_until_crash(
    cluster: &mut TestCluster,
    counter: &str,
) -> (Vec<(String, Value)>, u64, u64) {
    let client = cluster.client(0);
    let (mut created, mut acked, mut sent) = (Vec::new(), 0u64, 0u64);
    for i in 0..2_000u64 {
        let body = json!({"i": i, "text": format!("object {i}")});
        let create = client.create_object("Note", &body).await;
        if let Ok(c) = &create {
            created.push((c.object_id.clone(), body));
        }
        sent += 1;
        let increment = client.increment("Counter", counter, "n", 1).await;
        if increment.is_ok() {
            acked += 1;
        }
        if create.is_err() || increment.is_err() {
            let status = cluster.wait_exit(0, Duration::from_secs(10)).await;
            assert!(
                status.is_some_and(|s| !s.success()),
                "a write failed but the node did not crash: {create:?} {increment:?}"
            );
            return (created, acked, sent);
        }
    }
    panic!("the node did not reach its fail point");
}

/// One node (so its replica is the only copy) crashes at each point of the write path in turn;
/// after each restart every acknowledged create reads back as written and the counter holds
/// every acknowledged increment, and at most the ones sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_crashes_while_writing_recovers_every_acknowledged_write() {
    let mut cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    let counter = cluster
        .client(0)
        .create_object("Counter", &json!({"n": 0}))
        .await
        .expect("create the counter")
        .object_id;
    let (mut created, mut acked, mut sent) = (Vec::new(), 0, 0);
    for point in ["log-append", "apply-staged", "apply-written"] {
        cluster.stop(0);
        // Past the start's own writes (elections, registration), then a crash.
        cluster.restart_with_failpoints(0, &format!("{point}=30*off->panic"));
        cluster.wait_healthy(0, Duration::from_secs(60)).await;
        let (c, a, s) = write_until_crash(&mut cluster, &counter).await;
        created.extend(c);
        acked += a;
        sent += s;
        assert!(
            cluster
                .log_text(0)
                .contains(&format!("failpoint {point} panic: aborting")),
            "the node died at {point}"
        );
        cluster.restart(0).await;
        cluster.wait_healthy(0, Duration::from_secs(60)).await;
        let client = cluster.client(0);
        for (id, body) in &created {
            let got = client
                .get_object("Note", id)
                .await
                .expect("read")
                .unwrap_or_else(|| panic!("after a crash at {point}: acknowledged {id} is lost"));
            assert_eq!(got["i"], body["i"], "{id} after a crash at {point}");
            assert_eq!(got["text"], body["text"]);
        }
        let n = client
            .get_object("Counter", &counter)
            .await
            .expect("read the counter")
            .expect("the counter")["n"]
            .as_u64()
            .expect("n");
        assert!(
            (acked..=sent).contains(&n),
            "after a crash at {point}: counter {n}, acknowledged {acked}, sent {sent}"
        );
    }
}

/// A node that crashes in the middle of installing a snapshot (the group's old state cleared,
/// the snapshot's table not yet ingested) redoes the install when it restarts, and ends with exactly the state of
/// its peers (equal digests at the same applied index).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_crashes_installing_a_snapshot_ends_with_its_peers_state() {
    let tuning = ["--snapshot-logs", "100", "--keep-logs", "10"];
    let mut cluster = TestCluster::start(3, &["--shards", "1"], &tuning).await;
    cluster.stop(2);
    let client = cluster.client(0);
    // A few MiB of state, and enough entries to purge the log.
    let big = "x".repeat(100_000);
    let mut ids = Vec::new();
    for i in 0..60 {
        let body = json!({"i": i, "blob": big});
        let id = client
            .create_object("Blob", &body)
            .await
            .expect("create")
            .object_id;
        ids.push(("Blob", id));
    }
    for i in 0..150 {
        let id = client
            .create_object("Note", &json!({"i": i}))
            .await
            .expect("create")
            .object_id;
        ids.push(("Note", id));
    }
    cluster.wait_logs_purged(&[0, 1]).await;
    cluster.restart_with_failpoints(2, "snapshot-install-batch=panic");
    let status = cluster.wait_exit(2, Duration::from_secs(90)).await;
    assert!(
        status.is_some_and(|s| !s.success()),
        "node 3 crashes installing the snapshot"
    );
    assert!(cluster
        .log_text(2)
        .contains("failpoint snapshot-install-batch panic: aborting"));
    cluster.restart(2).await;
    cluster.wait_healthy(2, Duration::from_secs(60)).await;
    cluster
        .wait_same_state(
            "node 3 holds the same state as its peers",
            Duration::from_secs(60),
        )
        .await;
    let data = cluster.digests(2)[&1].clone();
    assert!(
        data.1 >= ids.len() as u64,
        "node 3's data group holds {} records, fewer than the {} objects",
        data.1,
        ids.len()
    );
    for (class, id) in ids.iter().step_by(17) {
        assert!(
            cluster
                .client(2)
                .get_object(class, id)
                .await
                .expect("read")
                .is_some(),
            "{class} {id} readable through node 3"
        );
    }
}

/// Story — a fault: one part of a read fails.
///
/// An aggregation whose part on one node fails answers the error without waiting for the
/// other parts, and the nodes reading those stop (they count the abandoned read in
/// `basalt_reads_cancelled_total`) instead of reading on for an answer nobody waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_part_of_a_read_cancels_the_other_parts() {
    let mut cluster = TestCluster::start(3, &["--shards", "6"], &[]).await;
    let client = cluster.client(0);
    for i in 0..30 {
        client
            .create_object("Tally", &json!({"k": i % 3}))
            .await
            .expect("create");
    }
    // Node 2 fails its aggregation reads at once; node 3 starts its own 5 s late.
    cluster.stop(1);
    cluster.restart_with_failpoints(1, "aggregate-read=return");
    cluster.stop(2);
    cluster.restart_with_failpoints(2, "aggregate-read=sleep(5000)");
    cluster.wait_healthy(1, Duration::from_secs(60)).await;
    cluster.wait_healthy(2, Duration::from_secs(60)).await;
    // On a timeout the placement, the members and the rebalancer's state say why.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let placement = cluster.placement(0);
        let leaders: BTreeSet<u64> = placement
            .as_object()
            .map(|groups| {
                groups
                    .iter()
                    .filter(|(g, _)| g.as_str() != "0")
                    .filter_map(|(_, s)| s["leader"].as_u64())
                    .collect()
            })
            .unwrap_or_default();
        if leaders.contains(&2) && leaders.contains(&3) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nodes 2 and 3 do not both lead data groups: placement {placement}\nmembers {}\nrebalance {}",
            cluster.admin(0, &["members"]),
            cluster.admin(0, &["rebalance", "status"]),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let aggregate = || {
        client.request(
            Method::GET,
            "/1/classes/Tally?groupby=k&groupcount=true",
            None,
            false,
        )
    };
    // Leadership may still be moving to its preferred nodes: node 3 abandons a part only once
    // it holds one, so the query is asked again (a few times at most) until it does.
    cluster
        .wait_leaders_spread(3, Duration::from_secs(60))
        .await;
    let mut abandoned = false;
    for _ in 0..5 {
        let before = cluster.metric(2, "basalt_reads_cancelled_total").await;
        let r = aggregate().await;
        assert!(r.is_err(), "node 2's failed part fails the query: {r:?}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline && !abandoned {
            abandoned = cluster.metric(2, "basalt_reads_cancelled_total").await > before;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if abandoned {
            break;
        }
    }
    assert!(abandoned, "node 3 abandons its part once node 2's failed");
    // Without the fail points every part answers again.
    cluster.stop(1);
    cluster.restart(1).await;
    cluster.stop(2);
    cluster.restart(2).await;
    cluster.wait_healthy(1, Duration::from_secs(60)).await;
    cluster.wait_healthy(2, Duration::from_secs(60)).await;
    let r = aggregate().await.expect("aggregation");
    let counts: Vec<u64> = r
        .body
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row["_count"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(counts, vec![10, 10, 10]);
}

/// A write that meets a full disk (the store failing writes as RocksDB does without space,
/// armed by the `store-write-nospace` fail point) waits for room instead of stopping its group:
/// once writes go through again, every group serves and every acknowledged write reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_meets_a_full_disk_waits_and_no_group_halts() {
    let mut cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    cluster.stop(0);
    // Past the start's own writes, five writes in a row fail for want of space.
    cluster.restart_with_failpoints(0, "store-write-nospace=60*off->5*return->off");
    cluster.wait_healthy(0, Duration::from_secs(60)).await;
    let client = cluster.client(0);
    let mut ids = Vec::new();
    for i in 0..60 {
        let id = client
            .create_object("Note", &json!({"i": i}))
            .await
            .unwrap_or_else(|e| panic!("write {i}: {e}"))
            .object_id;
        ids.push(id);
    }
    assert!(
        cluster
            .log_text(0)
            .contains("the disk is full: writes wait"),
        "the fail point was never reached"
    );
    cluster.wait_healthy(0, Duration::from_secs(30)).await;
    let (_, health) = {
        let r = reqwest::get(format!("http://{}/health", cluster.nodes[0].http))
            .await
            .expect("health");
        (
            r.status(),
            r.json::<serde_json::Value>().await.expect("json"),
        )
    };
    assert!(!health.to_string().contains("halted"), "{health}");
    for id in &ids {
        assert!(
            client.get_object("Note", id).await.unwrap().is_some(),
            "{id}"
        );
    }
}

/// A snapshot whose file meets a full disk (the `snapshot-build-nospace` fail point) is built
/// again once there is room, instead of stopping its group for good as a failed build did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_meets_a_full_disk_is_built_again_and_no_group_halts() {
    let mut cluster = TestCluster::start(1, &["--shards", "2"], &["--snapshot-logs", "20"]).await;
    cluster.stop(0);
    cluster.restart_with_failpoints(0, "snapshot-build-nospace=3*return->off");
    cluster.wait_healthy(0, Duration::from_secs(60)).await;
    let client = cluster.client(0);
    let mut ids = Vec::new();
    for i in 0..100 {
        let id = client
            .create_object("Note", &json!({"i": i}))
            .await
            .unwrap_or_else(|e| panic!("write {i}: {e}"))
            .object_id;
        ids.push(id);
    }
    TestCluster::eventually(
        Duration::from_secs(30),
        "a snapshot met the full disk",
        || {
            cluster
                .log_text(0)
                .contains("building a snapshot: the disk is full")
        },
    )
    .await;
    cluster.wait_healthy(0, Duration::from_secs(30)).await;
    let r = reqwest::get(format!("http://{}/health", cluster.nodes[0].http))
        .await
        .expect("health");
    let health: serde_json::Value = r.json().await.expect("json");
    assert!(!health.to_string().contains("halted"), "{health}");
    for id in &ids {
        assert!(
            client.get_object("Note", id).await.unwrap().is_some(),
            "{id}"
        );
    }
    let more = client
        .create_object("Note", &json!({"after": true}))
        .await
        .expect("a write after the snapshots");
    assert!(client
        .get_object("Note", &more.object_id)
        .await
        .unwrap()
        .is_some());
}

/// A store that keeps refusing writes for want of space while its disk has room (what only
/// reopening the store clears: the `store-write-nospace` fail point, never disarmed) makes the
/// node exit with code 70 after a minute, so that a supervisor starts it again; started again,
/// it has every acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_stays_stopped_with_room_exits_to_start_again() {
    let mut cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    let client = cluster.client(0);
    let mut ids = Vec::new();
    for i in 0..10 {
        let id = client
            .create_object("Note", &json!({"i": i}))
            .await
            .expect("a write before the fail point")
            .object_id;
        ids.push(id);
    }
    cluster.stop(0);
    cluster.restart_with_failpoints(0, "store-write-nospace=60*off->return");
    cluster.wait_healthy(0, Duration::from_secs(60)).await;
    // Writes now wait for room that never comes.
    let waiting = client.clone();
    let stuck = tokio::spawn(async move {
        for i in 0..100 {
            let _ = tokio::time::timeout(
                Duration::from_secs(2),
                waiting.create_object("Note", &json!({"stuck": i})),
            )
            .await;
        }
    });
    let status = cluster
        .wait_exit(0, Duration::from_secs(150))
        .await
        .expect("the node exits by itself");
    stuck.abort();
    assert_eq!(status.code(), Some(70), "{status:?}");
    assert!(cluster
        .log_text(0)
        .contains("the store refuses writes although the disk has room again"));
    cluster.restart(0).await;
    cluster.wait_healthy(0, Duration::from_secs(60)).await;
    for id in &ids {
        assert!(
            client.get_object("Note", id).await.unwrap().is_some(),
            "{id}"
        );
    }
    client
        .create_object("Note", &json!({"after": true}))
        .await
        .expect("a write once started again");
}

/// One app's large writes take at most its share of a group's writes in flight (32 MiB at the
/// leader): on a slow group (each apply held 2.5 s by the `apply-staged` fail point), an app
/// sending 160 MiB at once has its writes past the share wait, then refused (503, never
/// proposed), while another app's writes to the same group all go through meanwhile. Before the
/// share, every write of the first app queued ahead of the other app's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_apps_large_writes_take_only_its_share_of_a_group() {
    let mut cluster = TestCluster::start(1, &["--shards", "1"], &[]).await;
    let other_app = cluster.create_app(0, "other").await;
    cluster.stop(0);
    cluster.restart_with_failpoints(0, "apply-staged=sleep(2500)");
    cluster.wait_healthy(0, Duration::from_secs(120)).await;
    let flooder = cluster.client(0);
    let other = cluster.app_client(0, &other_app);
    let blob = "x".repeat(4 << 20);
    let flood = tokio::spawn(futures::future::join_all((0..40).map(move |i| {
        let (c, body) = (flooder.clone(), json!({"i": i, "blob": blob.clone()}));
        async move { c.create_object("Big", &body).await.map(|o| o.object_id) }
    })));
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..5 {
        other
            .create_object("Small", &json!({"i": i}))
            .await
            .unwrap_or_else(|e| panic!("the other app's write {i}: {e}"));
    }
    let results = flood.await.expect("the flood");
    let refused = results
        .iter()
        .filter(|r| matches!(r, Err(e) if e.status() == Some(503)))
        .count();
    let written: Vec<&String> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert!(
        refused > 0,
        "no write of the flooding app was refused: {results:?}"
    );
    assert!(!written.is_empty(), "{results:?}");
    assert_eq!(refused + written.len(), 40, "{results:?}");
    eprintln!("{refused} of 40 writes refused, {} written", written.len());
    // What was acknowledged is there.
    let reader = cluster.client(0);
    for id in written {
        assert!(
            reader.get_object("Big", id).await.unwrap().is_some(),
            "{id}"
        );
    }
}
