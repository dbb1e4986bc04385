//! Cases the jepsen runs found in the cluster, kept as regression tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use basalt_jepsen::db::Db;
use serde_json::Value;

/// Terms of every group as node `i` sees them, with each group's leader.
fn terms(db: &Db, i: usize) -> BTreeMap<u64, (u64, Option<u64>)> {
    let status: Value =
        serde_json::from_str(&db.admin(i, &["status"]).expect("status")).expect("json");
    status["Status"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| {
            (
                g["group"].as_u64().unwrap(),
                (g["term"].as_u64().unwrap(), g["leader"].as_u64()),
            )
        })
        .collect()
}

/// Found by the partition nemeses: a node cut off from its peers kept starting elections,
/// raising its term, and when the partition healed it deposed every healthy leader (all groups
/// stalled for seconds). With pre-vote, an isolated node cannot raise its term, so groups it
/// does not lead keep their leader and term across the heal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healed_partition_does_not_depose_healthy_leaders() {
    let dir = tempfile::tempdir().unwrap();
    let bin = basalt_jepsen::basalt_bin().unwrap();
    let mut db = Db::start(&bin, dir.path(), 3, 4).await.unwrap();
    let isolated = 2;
    let isolated_id = db.nodes[isolated].id;
    db.net.partition(&[isolated], &[0, 1]);
    // Long enough for many election timeouts on the isolated node (1.2–2.4 s each).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let before = terms(&db, 0);
    assert!(
        before
            .values()
            .all(|(_, l)| l.is_some() && *l != Some(isolated_id)),
        "the majority leads every group: {before:?}"
    );
    db.net.heal();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = terms(&db, 0);
    for (group, (term, leader)) in &after {
        // Placement may hand a group back to the returning node on purpose (a transfer is a
        // new term); every other group must be undisturbed.
        if *leader == Some(isolated_id) {
            continue;
        }
        assert_eq!(
            Some(&(*term, *leader)),
            before.get(group),
            "group {group} was disturbed by the returning node"
        );
    }
    db.stop_all();
}
