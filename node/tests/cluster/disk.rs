//! Full disks, on nodes whose data lives on small filesystems of their own (`Volumes`): one
//! client filling them gets 507/10081 before any group halts; reads, deletes and `/health`
//! go on; a node restarted with its disk full starts and serves; the ballast is released by
//! `basalt admin release-ballast`; once space is freed, writes resume; no acknowledged write is
//! lost. A disk filled behind the watcher's back (another program) stops no group: writes that
//! meet it wait, the node gives its ballast back by itself, and all goes on once space returns.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::TestCluster;

async fn health(cluster: &TestCluster, i: usize) -> (u16, Value) {
    let r = reqwest::get(format!("http://{}/health", cluster.nodes[i].http))
        .await
        .expect("health");
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// A string of `n` bytes that compresses poorly (a disk fills with what RocksDB cannot shrink).
fn noise(n: usize, seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

/// Waits until node `i` answers `/health` 200 with no problem; a `halted` group fails at once.
async fn wait_serving(cluster: &TestCluster, i: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, h) = health(cluster, i).await;
        let problems = h["problems"].to_string();
        assert!(!problems.contains("halted"), "node {}: {h}", i + 1);
        if status == 200 && h["problems"] == json!([]) {
            return h;
        }
        assert!(Instant::now() < deadline, "node {}: {h}", i + 1);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writes 256 KiB objects through `c` until `refusals` in a row are refused for want of disk
/// (507, 10081; the store's own files come and go as it flushes: a full disk is one that stays
/// full); the acknowledged objectIds.
async fn fill_until_refused(c: &basalt_client::Client, refusals: usize) -> Vec<String> {
    let mut acked: Vec<String> = Vec::new();
    let (mut refused, mut in_a_row) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(180);
    for i in 0..4000u64 {
        assert!(Instant::now() < deadline, "the disks never filled");
        match c
            .create_object("Big", &json!({"i": i, "blob": noise(256 << 10, i)}))
            .await
        {
            Ok(o) => {
                acked.push(o.object_id);
                in_a_row = 0;
            }
            Err(basalt_client::Error::Api {
                status: 507,
                code: Some(10081),
                ..
            }) => {
                refused += 1;
                in_a_row += 1;
                if in_a_row == refusals {
                    return acked;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("write {i}: {e}"),
        }
    }
    panic!(
        "{refused} refused, {} acknowledged: the disks never filled",
        acked.len()
    );
}

/// Story — a fault: a full disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_growth_and_keeps_every_group_serving() {
    // 3 nodes on 512 MiB each: low under 60 % free, critical under 50 % (256 MiB: room for the
    // store to flush and compact, and for what arrives while a full disk is being said), an
    // 80 MiB ballast (more than a node can be below the mark when writes stop: a follower still
    // applying, a compaction's files).
    const BALLAST: &str = "83886080";
    let mut cluster = TestCluster::start_on_volumes(
        3,
        512,
        &["--shards", "2"],
        &[
            "--disk-low",
            "60",
            "--disk-critical",
            "50",
            "--disk-critical-bytes",
            "0",
            "--ballast-bytes",
            BALLAST,
        ],
    )
    .await;
    let c = cluster.client(0);
    // Writes of 256 KiB until the cluster has refused 20 in a row for want of disk.
    let mut acked = fill_until_refused(&c, 20).await;
    assert!(
        acked.len() > 20,
        "{} writes before the disk filled",
        acked.len()
    );
    // Every node: still serving, every group healthy, the alarm raised; no write ever met a
    // disk with no space left.
    for i in 0..3 {
        let h = wait_serving(&cluster, i).await;
        assert!(
            h["alarms"].as_array().is_some_and(|a| !a.is_empty()),
            "node {}: {h}",
            i + 1
        );
        assert!(
            !cluster.log_text(i).contains("No space left"),
            "node {}",
            i + 1
        );
    }
    let alarms = cluster.admin(0, &["alarms"]);
    assert!(alarms.contains("disk critical"), "{alarms}");
    // Reads and deletes go on.
    for id in acked.iter().take(5) {
        assert!(cluster
            .client(1)
            .get_object("Big", id)
            .await
            .unwrap()
            .is_some());
    }
    let deleted = acked.pop().expect("one to delete");
    c.delete_object("Big", &deleted)
        .await
        .expect("a delete on a full disk");

    // A node restarted with its disk full (filled to its last 96 MiB while it was down, well
    // under the critical mark: a restart gives back what the store held at once, such as its
    // preallocated log; the rest is the room the store takes to open) starts, giving its
    // ballast back, and serves reads.
    cluster.kill(1);
    cluster
        .volumes()
        .fill(1, 96 << 20)
        .expect("fill node 2's disk");
    cluster.restart(1).await;
    cluster.wait_healthy(1, Duration::from_secs(60)).await;
    assert!(cluster
        .client(1)
        .get_object("Big", &acked[0])
        .await
        .unwrap()
        .is_some());
    assert!(cluster.log_text(1).contains("ballast released"));
    cluster.volumes().empty().expect("empty node 2's disk");

    // Space is freed as an operator would — the others' ballasts given back on asking, a
    // quarter of the objects deleted (a node can hold more than its peers for a while: a
    // compaction's files, a longer log) — and writes resume.
    for i in [0, 2] {
        let released = cluster.admin(i, &["release-ballast"]);
        assert!(
            released.contains("BallastReleased") && released.contains(BALLAST),
            "{released}"
        );
    }
    let mut deleted = vec![deleted];
    for _ in 0..acked.len() / 4 {
        let id = acked.pop().expect("one to delete");
        c.delete_object("Big", &id)
            .await
            .expect("a delete on a full disk");
        deleted.push(id);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match c.create_object("Big", &json!({"after": true})).await {
            Ok(o) => {
                acked.push(o.object_id);
                break;
            }
            Err(basalt_client::Error::Api { status: 507, .. }) => {
                if Instant::now() > deadline {
                    let mut disks = Vec::new();
                    for i in 0..3 {
                        disks.push(health(&cluster, i).await.1["disk"].clone());
                    }
                    panic!("writes never resumed: {disks:?}");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    // Nothing acknowledged was lost, on any node; the deleted objects stay deleted.
    for i in 0..3 {
        wait_serving(&cluster, i).await;
        for id in &acked {
            assert!(
                cluster
                    .client(i)
                    .get_object("Big", id)
                    .await
                    .unwrap()
                    .is_some(),
                "node {}: {id}",
                i + 1
            );
        }
        for id in &deleted {
            assert!(cluster
                .client(i)
                .get_object("Big", id)
                .await
                .unwrap()
                .is_none());
        }
    }
}

/// Free bytes of node `i`'s data disk, as `/health` says.
async fn free_bytes(cluster: &TestCluster, i: usize) -> u64 {
    let (_, h) = health(cluster, i).await;
    h["disk"]["freeBytes"].as_u64().unwrap_or(0)
}

/// Space that deletes free comes back: a node whose disk objects filled to its critical mark
/// gets most of it back within a minute or two of the objects' deletes — their data compacted
/// away, the change log cut by bytes, the Raft log purged behind a snapshot — and takes writes
/// again (on the old build the Raft and change logs kept every deleted object). The critical
/// mark leaves the room RocksDB's own compactions take at once (moving level 0 down writes the
/// table again beside itself, plus a preallocated log and output file): at 50 % free they
/// sometimes filled the disk while the objects were written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_give_their_space_back() {
    let cluster = TestCluster::start_on_volumes(
        1,
        512,
        &["--shards", "2"],
        &[
            "--disk-low",
            "70",
            "--disk-critical",
            "60",
            "--disk-critical-bytes",
            "0",
        ],
    )
    .await;
    let c = cluster.client(0);
    eprintln!("{} MiB free at start", free_bytes(&cluster, 0).await >> 20);
    let acked = fill_until_refused(&c, 10).await;
    let full = free_bytes(&cluster, 0).await;
    let written = acked.len() as u64 * (256 << 10);
    for id in &acked {
        c.delete_object("Big", id)
            .await
            .expect("a delete on a full disk");
    }
    // Most of what the objects took comes back.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut free = free_bytes(&cluster, 0).await;
    while free < full + written / 2 {
        assert!(
            Instant::now() < deadline,
            "{} MiB free after deleting {} MiB of objects, {} MiB when full",
            free >> 20,
            written >> 20,
            full >> 20
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        free = free_bytes(&cluster, 0).await;
    }
    // And the node takes writes again.
    wait_serving(&cluster, 0).await;
    loop {
        match c
            .create_object("Big", &json!({"after": noise(256 << 10, 1)}))
            .await
        {
            Ok(_) => break,
            Err(basalt_client::Error::Api { status: 507, .. }) => {
                let free = free_bytes(&cluster, 0).await;
                assert!(
                    Instant::now() < deadline,
                    "writes never resumed: {} MiB free after deleting {} MiB of objects, {} MiB when full",
                    free >> 20,
                    written >> 20,
                    full >> 20
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    eprintln!(
        "{} MiB free after deleting {} MiB of objects, {} MiB when full",
        free_bytes(&cluster, 0).await >> 20,
        written >> 20,
        full >> 20
    );
    assert!(!cluster.log_text(0).contains("No space left"));
}

/// Story — a fault: a disk filled behind the watcher's back.
///
/// A disk filled to its last byte behind the watcher's back (another program filled it, and
/// the marks are off, so nothing refuses writes before RocksDB meets the full disk): the
/// writes that meet it in RocksDB and the Raft log wait instead of stopping their groups for
/// good (as they did before), the node releases its ballast by itself, and once the filler is
/// removed every node serves with every group, writes go on, and every acknowledged write is
/// on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_filled_behind_the_watchers_back_stops_no_group() {
    let mut cluster = TestCluster::start_on_volumes(
        3,
        512,
        &["--shards", "2"],
        &[
            "--disk-low",
            "0",
            "--disk-critical",
            "0",
            "--disk-critical-bytes",
            "0",
            "--ballast-bytes",
            "100663296",
        ],
    )
    .await;
    let writer = cluster.client(1);
    let mut acked = Vec::new();
    for i in 0..20u64 {
        let o = writer
            .create_object("Big", &json!({"i": i, "blob": noise(64 << 10, i)}))
            .await
            .expect("a write before the disk fills");
        acked.push(o.object_id);
    }
    // Node 1's disk: full to the last byte at once (its ballast aside).
    cluster.volumes().fill(0, 0).expect("fill node 1's disk");
    // Writes go on through node 2 (each group has node 1 among its voters) until node 1 has
    // met the full disk: acknowledged ones (the other two nodes have room), and others cut off;
    // none may be lost.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut i = 1000u64;
    while !cluster.log_text(0).contains("the ballast is released") {
        assert!(
            Instant::now() < deadline,
            "node 1 never met its full disk, or never gave its ballast back"
        );
        i += 1;
        let body = json!({"i": i, "blob": noise(256 << 10, i)});
        let write = writer.create_object("Big", &body);
        if let Ok(Ok(o)) = tokio::time::timeout(Duration::from_secs(5), write).await {
            acked.push(o.object_id);
        }
    }
    assert!(cluster
        .log_text(0)
        .contains("the disk is full: writes wait"));
    cluster.volumes().empty().expect("empty the disks");
    // Every node serves, no group ever halted, and writes go on through every node.
    for n in 0..3 {
        wait_serving(&cluster, n).await;
        let c = cluster.client(n);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match c.create_object("Big", &json!({"after": n})).await {
                Ok(o) => {
                    acked.push(o.object_id);
                    break;
                }
                Err(e) => {
                    assert!(Instant::now() < deadline, "node {}: {e}", n + 1);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
    for n in 0..3 {
        for id in &acked {
            assert!(
                cluster
                    .client(n)
                    .get_object("Big", id)
                    .await
                    .unwrap()
                    .is_some(),
                "node {}: {id} was acknowledged",
                n + 1
            );
        }
    }
    cluster
        .wait_same_state("every node holds the same state", Duration::from_secs(60))
        .await;

    // Full again, and killed while writes wait: the restart loses nothing either.
    cluster
        .volumes()
        .fill(0, 0)
        .expect("fill node 1's disk again");
    for i in 0..40u64 {
        let body = json!({"again": i, "blob": noise(256 << 10, 5000 + i)});
        let write = writer.create_object("Big", &body);
        if let Ok(Ok(o)) = tokio::time::timeout(Duration::from_secs(5), write).await {
            acked.push(o.object_id);
        }
    }
    cluster.kill(0);
    cluster.volumes().empty().expect("empty the disks");
    cluster.restart(0).await;
    cluster.wait_healthy(0, Duration::from_secs(60)).await;
    wait_serving(&cluster, 0).await;
    for id in &acked {
        assert!(
            cluster
                .client(0)
                .get_object("Big", id)
                .await
                .unwrap()
                .is_some(),
            "node 1 after its restart: {id} was acknowledged"
        );
    }
    cluster
        .wait_same_state(
            "every node holds the same state after the restart",
            Duration::from_secs(60),
        )
        .await;
}
