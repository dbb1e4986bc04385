//! `POST /1/batch` (spec 4.1): operations in order, each on its own shard, per-slot errors,
//! and the envelope errors 112/113/114 that run nothing.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::{assert_api_error, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_run_in_order_with_per_operation_results() {
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

    // Envelope errors run nothing.
    let count = || async {
        client
            .query("Doc", &[("count", "1"), ("limit", "0")])
            .await
            .unwrap()["count"]
            .clone()
    };
    let before = count().await;
    let op = json!({"method": "POST", "path": "/1/classes/Doc", "body": {"n": 0}});
    assert_api_error(
        batch(json!({"requests": op.clone()})).await,
        400,
        112,
        "not an array",
    );
    assert_api_error(batch(json!({})).await, 400, 112, "no requests");
    let many: Vec<Value> = (0..51).map(|_| op.clone()).collect();
    assert_api_error(
        batch(json!({ "requests": many })).await,
        400,
        114,
        "51 operations",
    );
    assert_api_error(
        batch(json!({"requests": [op.clone(), {"method": "GET", "path": "/1/classes/Doc"}]})).await,
        400,
        113,
        "bad method",
    );
    assert_api_error(
        batch(json!({"requests": [op.clone(), {"method": "POST", "path": "/1/apps"}]})).await,
        400,
        113,
        "bad path",
    );
    assert_api_error(
        batch(json!({"requests": [op.clone(), 7]})).await,
        400,
        113,
        "not an object",
    );
    assert_api_error(
        client.request(Method::POST, "/1/batch", None, false).await,
        400,
        107,
        "empty body",
    );
    assert_eq!(count().await, before, "nothing ran");

    // Fifty operations are allowed and all land.
    let fifty: Vec<Value> = (0..50)
        .map(|i| json!({"method": "POST", "path": "/1/classes/Fifty", "body": {"i": i}}))
        .collect();
    let r = batch(json!({ "requests": fifty })).await.expect("50");
    assert!(r
        .body
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["success"]["objectId"].is_string()));
    let listed = client
        .query("Fifty", &[("count", "1"), ("limit", "0")])
        .await
        .unwrap();
    assert_eq!(listed["count"], 50);
}
