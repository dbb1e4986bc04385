//! `POST /1/batch` (spec 4.1): operations in order, each on its own shard, per-slot errors,
//! and the envelope errors 112/113/114 that run nothing.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::{self, TestCluster};

/// A batch runs its operations in order, each on its own shard with its own result: creates,
/// updates and deletes succeed or fail alone (101, 111, 105, 107), and their effects land in
/// order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_each_operation_in_order_with_its_own_result() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let batch = |body: Value| {
        let c = client.clone();
        async move {
            c.request(Method::POST, "/1/batch", Some(&body), false)
                .await
        }
    };
    let existing = client.create_object("Doc", &json!({"n": 1})).await.unwrap();
    let doomed = client.create_object("Doc", &json!({"n": 2})).await.unwrap();

    let r = batch(json!({"requests": [
        {"method": "POST", "path": "/1/classes/Doc", "body": {"n": 10}},
        {"method": "post", "path": "/1/classes/Other", "body": {"s": "x"}},
        {"method": "PUT", "path": format!("/1/classes/Doc/{}", existing.object_id), "body": {"n": {"__op": "Increment", "amount": 5}}},
        {"method": "PUT", "path": "/1/classes/Doc/missing000", "body": {"n": 1}},
        {"method": "PUT", "path": format!("/1/classes/Doc/{}", existing.object_id), "body": {"n": "text"}},
        {"method": "Delete", "path": format!("/1/classes/Doc/{}", doomed.object_id)},
        {"method": "POST", "path": "/1/classes/Doc", "body": {"bad-key": 1}},
        {"method": "POST", "path": "/1/classes/Doc"},
        {"method": "PUT", "path": format!("/1/classes/Doc/{}", existing.object_id), "body": {"n": {"__op": "Increment", "amount": 1}}},
    ]}))
    .await
    .expect("batch");
    assert_eq!(r.status, 200);
    let slots = r.body.as_array().expect("array").clone();
    assert_eq!(slots.len(), 9);
    let created = &slots[0]["success"];
    assert!(
        created["objectId"].is_string() && created["createdAt"].is_string(),
        "{created}"
    );
    assert!(slots[1]["success"]["objectId"].is_string());
    assert!(slots[2]["success"]["updatedAt"].is_string());
    assert_eq!(slots[3]["error"]["code"], 101);
    assert_eq!(slots[4]["error"]["code"], 111);
    assert!(slots[4]["error"]["error"].is_string());
    assert_eq!(slots[5]["success"], json!({"msg": "ok"}));
    assert_eq!(slots[6]["error"]["code"], 105);
    assert_eq!(slots[7]["error"]["code"], 107);
    assert!(slots[8]["success"]["updatedAt"].is_string());

    // The effects, in order.
    let e = client
        .get_object("Doc", &existing.object_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e["n"], 7, "both increments ran, the failed set did not");
    assert!(client
        .get_object("Doc", &doomed.object_id)
        .await
        .unwrap()
        .is_none());
    let new_id = created["objectId"].as_str().unwrap();
    assert_eq!(
        client.get_object("Doc", new_id).await.unwrap().unwrap()["n"],
        10
    );
}

/// Table — the batch envelope: a `requests` that is no array or absent (112), more than 50
/// operations (114), an operation of a method, path or shape a batch cannot hold (113), no
/// body (107) — each refused whole, running nothing; fifty operations all land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_envelope_runs_nothing() {
    use common::scenario::{run_rows, After, Row};
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    cluster
        .client(0)
        .create_object("Doc", &json!({"n": 1}))
        .await
        .unwrap();
    let op = json!({"method": "POST", "path": "/1/classes/Doc", "body": {"n": 0}});
    let envelope = |name: &'static str, body: Value, code: i64| {
        Row::new(name, Method::POST, "/1/batch")
            .body(body.to_string())
            .fails(400, code)
            .after(After::Count("Doc", 1))
    };
    let many: Vec<Value> = (0..51).map(|_| op.clone()).collect();
    let fifty: Vec<Value> = (0..50)
        .map(|i| json!({"method": "POST", "path": "/1/classes/Fifty", "body": {"i": i}}))
        .collect();
    let rows = vec![
        envelope(
            "requests that is no array",
            json!({"requests": op.clone()}),
            112,
        ),
        envelope("no requests", json!({}), 112),
        envelope("51 operations", json!({ "requests": many }), 114),
        envelope(
            "a GET inside",
            json!({"requests": [op.clone(), {"method": "GET", "path": "/1/classes/Doc"}]}),
            113,
        ),
        envelope(
            "a path no batch holds",
            json!({"requests": [op.clone(), {"method": "POST", "path": "/1/apps"}]}),
            113,
        ),
        envelope(
            "an operation that is no object",
            json!({"requests": [op.clone(), 7]}),
            113,
        ),
        Row::new("no body", Method::POST, "/1/batch")
            .fails(400, 107)
            .after(After::Count("Doc", 1)),
        Row::new("fifty operations", Method::POST, "/1/batch")
            .body(json!({ "requests": fifty }).to_string())
            .succeeds(200)
            .after(After::Count("Fifty", 50)),
    ];
    run_rows(&cluster, &rows).await;
}

/// Story — events in order across shards.
///
/// Runs `requests` as one `/1/batch` through `c`; answers its slots.
/// A batch of plain object writes goes to each shard as one command (at most one per shard),
/// the shards concurrently, while each operation answers as it would alone, in request order:
/// operations on one object apply in the order sent, a refused one leaves the rest of its
/// shard's command, a column two operations disagree on goes to the first, and an operation
/// that is not a plain object write (a sign-up) runs in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_go_to_each_shard_as_one_command_and_keep_each_objects_order() {
    let cluster = TestCluster::start(3, &["--shards", "8"], &[]).await;
    let client = cluster.client(1);
    let mut counters = Vec::new();
    for _ in 0..5 {
        let created = client
            .create_object("Doc", &json!({"seq": [], "n": 0}))
            .await
            .expect("create");
        counters.push(created.object_id);
    }
    let doomed = client
        .create_object("Doc", &json!({"n": -1}))
        .await
        .expect("create")
        .object_id;

    let mut ops = Vec::new();
    for round in 0..4 {
        for id in &counters {
            ops.push(json!({"method": "PUT", "path": format!("/1/classes/Doc/{id}"),
                "body": {"seq": {"__op": "Add", "objects": [round]}, "n": {"__op": "Increment", "amount": 1}}}));
        }
        for i in 0..5 {
            ops.push(
                json!({"method": "POST", "path": "/1/classes/Doc", "body": {"n": round * 10 + i}}),
            );
        }
    }
    // 40 so far; then refusals among them, a delete, another class, and a sign-up.
    let bad_update = ops.len();
    ops.push(json!({"method": "PUT", "path": format!("/1/classes/Doc/{}", counters[0]), "body": {"n": "text"}}));
    let missing = ops.len();
    ops.push(json!({"method": "PUT", "path": "/1/classes/Doc/missing000", "body": {"n": 1}}));
    let bad_key = ops.len();
    ops.push(json!({"method": "POST", "path": "/1/classes/Doc", "body": {"bad-key": 1}}));
    let delete = ops.len();
    ops.push(json!({"method": "DELETE", "path": format!("/1/classes/Doc/{doomed}")}));
    let signup = ops.len();
    ops.push(json!({"method": "POST", "path": "/1/users", "body": {"username": "batched", "password": "pw-123456"}}));
    let other = ops.len();
    ops.push(json!({"method": "POST", "path": "/1/classes/Other", "body": {"s": "x"}}));
    ops.push(
        json!({"method": "PUT", "path": format!("/1/classes/Doc/{}", counters[0]),
        "body": {"seq": {"__op": "Add", "objects": [4]}}}),
    );
    assert!(ops.len() <= 50);

    let commands = || cluster.metric(1, "basalt_batch_shard_commands_total");
    let grouped = || cluster.metric(1, "basalt_batch_grouped_operations_total");
    let (commands_before, grouped_before) = (commands().await, grouped().await);
    let slots = common::batch(&client, ops.clone()).await;
    assert_eq!(slots.len(), ops.len());
    for (i, s) in slots.iter().enumerate() {
        match i {
            i if i == bad_update => assert_eq!(s["error"]["code"], 111, "{s}"),
            i if i == missing => assert_eq!(s["error"]["code"], 101, "{s}"),
            i if i == bad_key => assert_eq!(s["error"]["code"], 105, "{s}"),
            i if i == delete => assert_eq!(s["success"], json!({"msg": "ok"})),
            i if i == signup || i == other => {
                assert!(s["success"]["objectId"].is_string(), "{i}: {s}")
            }
            _ => {
                let ok = &s["success"];
                assert!(
                    ok["updatedAt"].is_string()
                        || (ok["objectId"].is_string() && ok["createdAt"].is_string()),
                    "{i}: {s}"
                );
            }
        }
    }
    // The sign-up runs alone between two runs of grouped writes: each run is at most one
    // command per shard.
    let commands_used = commands().await - commands_before;
    assert!(
        (2.0..=16.0).contains(&commands_used),
        "{commands_used} shard commands for two runs over 8 shards"
    );
    // Grouped: all but the sign-up and the two refused before proposing (105, 111).
    assert_eq!(grouped().await - grouped_before, (ops.len() - 3) as f64);

    for (k, id) in counters.iter().enumerate() {
        let o = client.get_object("Doc", id).await.unwrap().unwrap();
        let want = if k == 0 {
            json!([0, 1, 2, 3, 4])
        } else {
            json!([0, 1, 2, 3])
        };
        assert_eq!(o["seq"], want, "the order sent, object {k}");
        assert_eq!(o["n"], 4, "the refused set changed nothing");
    }
    for (i, s) in slots.iter().enumerate().take(40) {
        if let Some(id) = s["success"]["objectId"].as_str() {
            let o = client.get_object("Doc", id).await.unwrap();
            assert!(o.is_some(), "created by slot {i}");
        }
    }
    assert!(client.get_object("Doc", &doomed).await.unwrap().is_none());

    // A new column the operations disagree on goes to the first, as in order.
    let slots = common::batch(
        &cluster.client(2),
        vec![
            json!({"method": "POST", "path": "/1/classes/Fresh", "body": {"v": 1}}),
            json!({"method": "POST", "path": "/1/classes/Fresh", "body": {"v": "x"}}),
            json!({"method": "POST", "path": "/1/classes/Fresh", "body": {"v": 2, "w": true}}),
        ],
    )
    .await;
    assert!(slots[0]["success"]["objectId"].is_string(), "{slots:?}");
    assert_eq!(slots[1]["error"]["code"], 111, "{slots:?}");
    assert!(slots[2]["success"]["objectId"].is_string(), "{slots:?}");
    let schema = cluster
        .master_client(0)
        .request(Method::GET, "/1/schemas/Fresh", None, true)
        .await
        .expect("schema")
        .body;
    assert_eq!(schema["fields"]["v"]["type"], "Number", "{schema}");
    assert_eq!(schema["fields"]["w"]["type"], "Bool", "{schema}");
}

/// Story — a fault: a node dies under batches.
///
/// Batches streaming through every node while one node is killed and comes back: every
/// acknowledged create is there afterwards, and each object's array holds the values its
/// writer added in the order it added them (nothing acknowledged lost, nothing reordered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_through_every_node_lose_nothing_when_a_node_dies() {
    let mut cluster = TestCluster::start(3, &["--shards", "6"], &[]).await;
    let mut counters = Vec::new();
    for _ in 0..3 {
        let id = cluster
            .client(0)
            .create_object("Log", &json!({"seq": []}))
            .await
            .expect("create")
            .object_id;
        counters.push(id);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let client = cluster
                .client(w)
                .with_timeout(std::time::Duration::from_secs(15))
                .expect("client");
            let counter = counters[w].clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let (mut created, mut added) = (Vec::new(), Vec::new());
                let mut next = 0u64;
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
                for _ in 0..400 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed)
                        || std::time::Instant::now() > deadline
                    {
                        break;
                    }
                    let mut ops = Vec::new();
                    for i in 0..3 {
                        ops.push(json!({"method": "PUT", "path": format!("/1/classes/Log/{counter}"),
                            "body": {"seq": {"__op": "Add", "objects": [next + i]}}}));
                    }
                    for i in 0..12 {
                        ops.push(json!({"method": "POST", "path": "/1/classes/Item", "body": {"w": w, "i": i}}));
                    }
                    let r = client
                        .request(
                            Method::POST,
                            "/1/batch",
                            Some(&json!({ "requests": ops })),
                            false,
                        )
                        .await;
                    if let Ok(r) = r {
                        let slots = r.body.as_array().cloned().unwrap_or_default();
                        for (i, s) in slots.iter().enumerate() {
                            if i < 3 && s["success"]["updatedAt"].is_string() {
                                added.push(next + i as u64);
                            }
                            if let Some(id) = s["success"]["objectId"].as_str() {
                                created.push(id.to_string());
                            }
                        }
                    }
                    next += 3;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                (created, added)
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    cluster.kill(2);
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    cluster.restart(2).await;
    cluster
        .wait_healthy(2, std::time::Duration::from_secs(30))
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut all_created = Vec::new();
    for (w, writer) in writers.into_iter().enumerate() {
        let (created, added) = writer.await.expect("writer");
        let o = cluster
            .client(0)
            .get_object("Log", &counters[w])
            .await
            .expect("read")
            .expect("counter");
        let seq: Vec<u64> = o["seq"]
            .as_array()
            .expect("seq")
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        assert!(
            seq.windows(2).all(|p| p[0] < p[1]),
            "writer {w}: values applied out of the order sent: {seq:?}"
        );
        for v in &added {
            assert!(
                seq.contains(v),
                "writer {w}: acknowledged {v} lost: {seq:?}"
            );
        }
        assert!(!added.is_empty(), "writer {w} got nothing acknowledged");
        all_created.extend(created);
    }
    assert!(all_created.len() > 100, "{} creates", all_created.len());
    let reader = cluster.client(1);
    for id in &all_created {
        assert!(
            reader.get_object("Item", id).await.expect("read").is_some(),
            "acknowledged create {id} lost"
        );
    }
}

/// `/1/batch` as a table, on one node: each envelope it refuses and its code, who may send one,
/// and what must not happen (a refused envelope runs none of its operations).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_endpoint_answers_as_its_table_says() {
    use common::scenario::{run_rows, After, As, Row};
    let cluster = TestCluster::start(1, &[], &[]).await;
    let op = json!({"method": "POST", "path": "/1/classes/Doc", "body": {"n": 0}});
    let envelope = |name: &'static str, body: Value| {
        Row::new(name, Method::POST, "/1/batch")
            .body(body.to_string())
            .after(After::Count("Doc", 0))
    };
    let fifty_one: Vec<Value> = (0..51).map(|_| op.clone()).collect();
    let rows = vec![
        envelope(
            "requests that are no array",
            json!({"requests": op.clone()}),
        )
        .fails(400, 112),
        envelope("no requests", json!({})).fails(400, 112),
        envelope("51 operations", json!({ "requests": fifty_one })).fails(400, 114),
        envelope(
            "an operation of a method a batch does not run",
            json!({"requests": [op.clone(), {"method": "GET", "path": "/1/classes/Doc"}]}),
        )
        .fails(400, 113),
        envelope(
            "an operation on a path a batch does not run",
            json!({"requests": [op.clone(), {"method": "POST", "path": "/1/apps"}]}),
        )
        .fails(400, 113),
        envelope(
            "an operation that is no object",
            json!({"requests": [op.clone(), 7]}),
        )
        .fails(400, 113),
        Row::new("no body", Method::POST, "/1/batch")
            .fails(400, 107)
            .after(After::Count("Doc", 0)),
        Row::new("a batch without keys", Method::POST, "/1/batch")
            .auth(As::Nobody)
            .body(json!({ "requests": [op.clone()] }).to_string())
            .unauthorized()
            .after(After::Count("Doc", 0)),
        Row::new("a batch", Method::POST, "/1/batch")
            .body(json!({ "requests": [op.clone(), op.clone()] }).to_string())
            .succeeds(200)
            .after(After::Count("Doc", 2)),
    ];
    run_rows(&cluster, &rows).await;
}
