//! Property: any body the API accepts survives every encoding it goes through — the Raft log,
//! apply, a snapshot built on two nodes and installed on the third, and a restart of the whole
//! cluster — and reads back exactly as it read right after the write. Bodies are random JSON
//! (deep and shallow, unicode, escapes, number extremes, dot-path updates); those nested past
//! the limit must be refused (107) and write nothing. `BASALT_SURVIVAL_SEED` replays a run.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Map, Number, Value};

use super::common::TestCluster;

const STRINGS: [&str; 8] = [
    "",
    "plain",
    "quote \" backslash \\ slash /",
    "line\nbreak\ttab",
    "日本語のテキスト",
    "emoji 🦀🚀",
    "\u{0}nul and \u{1f}",
    "{\"looks\": [\"like json\"]}",
];

fn scalar(rng: &mut StdRng) -> Value {
    match rng.random_range(0..8) {
        0 => Value::Null,
        1 => json!(rng.random_bool(0.5)),
        2 => json!([i64::MIN, i64::MAX, 0, -1, 1 << 53][rng.random_range(0..5)]),
        3 => json!(rng.random_range(-1_000_000i64..1_000_000)),
        4 => Number::from_f64(rng.random_range(-1e300..1e300)).map_or(Value::Null, Value::Number),
        5 => json!(rng.random_range(-1.0f64..1.0) * 1e-300),
        _ => json!(STRINGS[rng.random_range(0..STRINGS.len())]),
    }
}

/// A random value nested exactly `depth` levels (0: a scalar).
fn value(rng: &mut StdRng, depth: usize) -> Value {
    if depth == 0 {
        return scalar(rng);
    }
    let width = rng.random_range(1..4);
    let deep_at = rng.random_range(0..width);
    let child = |rng: &mut StdRng, i: usize| {
        // Only one child goes deep; the others stay shallow, so a body nested 60 levels is
        // still far below the body limit (a body over it is refused before it is read).
        let d = if i == deep_at {
            depth - 1
        } else {
            rng.random_range(0..depth.min(4))
        };
        value(rng, d)
    };
    if rng.random_bool(0.5) {
        Value::Array((0..width).map(|i| child(rng, i)).collect())
    } else {
        let keys = [
            "k",
            "key with space",
            "ключ",
            "dot.in.key",
            "$dollar",
            "_under",
        ];
        Value::Object(
            (0..width)
                .map(|i| {
                    (
                        format!("{}{i}", keys[rng.random_range(0..keys.len())]),
                        child(rng, i),
                    )
                })
                .collect(),
        )
    }
}

/// Depths to try: mostly admitted, some at the limit, some past it.
fn depth(rng: &mut StdRng) -> usize {
    match rng.random_range(0..10) {
        0 => 32,
        1 => rng.random_range(33..60),
        _ => rng.random_range(0..12),
    }
}

/// Story — a fault: restarts after log, snapshot and compaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_bodies_survive_log_snapshot_and_restart() {
    let seed: u64 = std::env::var("BASALT_SURVIVAL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("BASALT_SURVIVAL_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let tuning = ["--snapshot-logs", "40", "--keep-logs", "5"];
    let mut cluster = TestCluster::start(3, &["--shards", "2"], &tuning).await;
    cluster.stop(2);
    let clients = [cluster.client(0), cluster.client(1)];

    // (objectId, what a read answered right after the write).
    let mut accepted: Vec<(String, Value)> = Vec::new();
    for i in 0..120 {
        let c = &clients[i % 2];
        let mut fields = Map::new();
        let mut deepest = 0;
        for f in 0..rng.random_range(1..4) {
            let d = depth(&mut rng);
            deepest = deepest.max(d);
            fields.insert(format!("c{i}x{f}"), value(&mut rng, d));
        }
        let body = Value::Object(fields);
        match c.create_object("Survive", &body).await {
            Ok(created) => {
                assert!(
                    deepest <= 32,
                    "seed {seed}: a body nested {deepest} was accepted"
                );
                let got = c
                    .get_object("Survive", &created.object_id)
                    .await
                    .unwrap()
                    .unwrap();
                for (k, v) in body.as_object().unwrap() {
                    assert_eq!(&got[k], v, "seed {seed}: {k} read back changed");
                }
                accepted.push((created.object_id, got));
            }
            Err(e) => {
                assert!(
                    deepest > 32,
                    "seed {seed}: refused a body nested {deepest}: {e}"
                );
                assert_eq!(e.code(), Some(107), "seed {seed}: {e}");
            }
        }
        // Now and then, a dot-path update of an accepted object.
        if i % 4 == 3 {
            if let Some((id, _)) = accepted.last().cloned() {
                let segments = rng.random_range(1..20);
                let below = rng.random_range(0..(34 - segments).max(1));
                let path = format!("u{i}.{}", vec!["p"; segments - 1].join("."));
                let path = path.trim_end_matches('.').to_string();
                let v = value(&mut rng, below);
                let nest = segments - 1 + below;
                match c.update_object("Survive", &id, &json!({ path: v })).await {
                    Ok(_) => {
                        assert!(nest <= 32, "seed {seed}: nesting {nest} accepted");
                        let got = c.get_object("Survive", &id).await.unwrap().unwrap();
                        if let Some(last) = accepted.last_mut() {
                            last.1 = got;
                        }
                    }
                    Err(e) => assert!(nest > 32, "seed {seed}: nesting {nest} refused: {e}"),
                }
            }
        }
    }
    assert!(
        accepted.len() > 60,
        "seed {seed}: only {} accepted",
        accepted.len()
    );

    // Node 3 catches up by snapshot: its peers purge the entries it missed (a leader purges
    // once replication to the stopped node has failed again after a snapshot, so poll).
    TestCluster::eventually(Duration::from_secs(60), "nodes 1 and 2 purge", || {
        (0..2).all(|n| cluster.lowest_data_group_field(n, "purged") > 0)
    })
    .await;
    cluster.restart(2).await;
    cluster.wait_healthy(2, Duration::from_secs(60)).await;
    let node3 = cluster.client(2);
    eprintln!("BASALT_SURVIVAL_SEED={seed}: waiting for node 3's snapshot catch-up");
    cluster.wait_caught_up_by_snapshot(2, 0, 0).await;

    // The whole cluster restarts; every accepted object reads the same through every node.
    cluster.restart_all().await;
    for (n, (id, before)) in accepted.iter().enumerate() {
        let c = if n % 3 == 2 { &node3 } else { &clients[n % 3] };
        let after = c.get_object("Survive", id).await.unwrap().unwrap();
        assert_eq!(
            &after, before,
            "seed {seed}: {id} changed across snapshot and restart"
        );
    }
    // The class's counts (kept per shard beside the objects) came through the snapshot and
    // the restart exact, asked through every node.
    for c in [&clients[0], &clients[1], &node3] {
        let r = c
            .request(
                Method::GET,
                "/1/classes/Survive?count=1&limit=0",
                None,
                false,
            )
            .await
            .unwrap();
        assert_eq!(r.body["count"], accepted.len(), "seed {seed}: the count");
    }
    for i in 0..3 {
        assert_eq!(
            cluster.metric(i, "basalt_apply_failures_total").await,
            0.0,
            "seed {seed}: node {}",
            i + 1
        );
    }
}
