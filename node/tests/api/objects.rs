//! Objects (spec 4.1, 4.2): create, read, update, delete, list, and their errors.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::TestCluster;

/// One request and what must come back.
struct Scenario {
    name: &'static str,
    method: Method,
    path: String,
    body: Option<&'static str>,
    status: u16,
    code: Option<i64>,
}

async fn run_raw(cluster: &TestCluster, s: &Scenario) {
    let client = reqwest::Client::new();
    let mut req = client
        .request(
            s.method.clone(),
            format!("http://{}{}", cluster.nodes[0].http, s.path),
        )
        .header("X-Service-Application-Id", &cluster.keys.application_id)
        .header("X-Service-REST-API-Key", &cluster.keys.rest_key);
    if let Some(b) = s.body {
        req = req.header("Content-Type", "application/json").body(b);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    assert_eq!(status, s.status, "{}: status, body {body}", s.name);
    if let Some(code) = s.code {
        assert_eq!(
            body["code"].as_i64(),
            Some(code),
            "{}: code, body {body}",
            s.name
        );
        assert!(body["error"].is_string(), "{}: error message", s.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_lifecycle_and_errors() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);

    // Create: 201, Location, createdAt + objectId, the committing log index.
    let body = json!({"score": 10, "name": "alice", "tags": ["a"], "stats": {"wins": 1}, "items": [{"n": "x"}]});
    let raw = client
        .request(Method::POST, "/1/classes/GameScore", Some(&body), false)
        .await
        .expect("create");
    assert_eq!(raw.status, 201);
    let id = raw.body["objectId"].as_str().expect("objectId").to_string();
    assert_eq!(id.len(), 10);
    assert!(id.chars().all(|c| c.is_ascii_alphanumeric()));
    assert!(raw
        .location
        .as_deref()
        .is_some_and(|l| l.ends_with(&format!("/1/classes/GameScore/{id}"))));
    let created_at = raw.body["createdAt"].as_str().expect("createdAt");
    assert_eq!(created_at.len(), 19, "YYYY-mm-dd HH:ii:ss");
    let v1 = raw.version.expect("X-Basalt-Version");

    // Read: all fields plus the reserved ones.
    let obj = client
        .get_object("GameScore", &id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(obj["score"], 10);
    assert_eq!(obj["createdAt"], created_at);
    assert_eq!(obj["updatedAt"], created_at);

    // Update with every operator; other keys untouched.
    let changes = json!({
        "score": {"__op": "Increment", "amount": -3},
        "tags": {"__op": "AddUnique", "objects": ["a", "b"]},
        "stats.wins": {"__op": "Increment", "amount": 2},
        "items.0.n": "y",
        "extra": {"__op": "Add", "objects": [1, 2, 2]},
        "gone": {"__op": "Delete"},
        "owner": {"__type": "Pointer", "className": "_User", "objectId": "u1"},
        "when": {"__type": "Date", "iso": "2024-05-06T07:08:09.000Z"},
        "place": {"__type": "GeoPoint", "latitude": 30.5, "longitude": 114.3},
        "likes": {"__op": "AddRelation", "objects": [{"__type": "Pointer", "className": "_User", "objectId": "u2"}]},
    });
    let up = client
        .update_object("GameScore", &id, &changes)
        .await
        .expect("update");
    assert!(up.body["updatedAt"].is_string());
    assert!(up.version.expect("version") > v1);
    client
        .update_object(
            "GameScore",
            &id,
            &json!({"extra": {"__op": "Remove", "objects": [2]}}),
        )
        .await
        .expect("remove");
    let obj = client
        .get_object("GameScore", &id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(obj["score"], 7);
    assert_eq!(obj["name"], "alice");
    assert_eq!(obj["tags"], json!(["a", "b"]));
    assert_eq!(obj["stats"], json!({"wins": 3}));
    assert_eq!(obj["items"], json!([{"n": "y"}]));
    assert_eq!(obj["extra"], json!([1]));
    assert_eq!(
        obj["when"],
        json!({"__type": "Date", "iso": "2024-05-06 07:08:09"})
    );
    assert_eq!(obj["place"]["latitude"], 30.5);
    assert_eq!(
        obj["likes"],
        json!({"__type": "Relation", "className": "_User"})
    );
    assert_eq!(obj["owner"]["objectId"], "u1");

    // A failing update changes nothing.
    let err = client.update_object("GameScore", &id, &json!({"score": {"__op": "Increment", "amount": 1}, "name": {"__op": "Increment", "amount": 1}})).await.expect_err("type mismatch");
    assert_eq!(err.code(), Some(111));
    let after = client
        .get_object("GameScore", &id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(after["score"], 7, "no partial write");

    let p = format!("/1/classes/GameScore/{id}");
    let table = [
        Scenario {
            name: "empty body",
            method: Method::POST,
            path: "/1/classes/GameScore".into(),
            body: Some(""),
            status: 400,
            code: Some(107),
        },
        Scenario {
            name: "invalid JSON",
            method: Method::POST,
            path: "/1/classes/GameScore".into(),
            body: Some("{bad"),
            status: 400,
            code: Some(107),
        },
        Scenario {
            name: "not an object",
            method: Method::POST,
            path: "/1/classes/GameScore".into(),
            body: Some("[1,2]"),
            status: 400,
            code: Some(107),
        },
        Scenario {
            name: "reserved field",
            method: Method::POST,
            path: "/1/classes/GameScore".into(),
            body: Some(r#"{"objectId":"abc"}"#),
            status: 400,
            code: Some(105),
        },
        Scenario {
            name: "reserved createdAt on update",
            method: Method::PUT,
            path: p.clone(),
            body: Some(r#"{"createdAt":"x"}"#),
            status: 400,
            code: Some(105),
        },
        Scenario {
            name: "invalid key",
            method: Method::POST,
            path: "/1/classes/GameScore".into(),
            body: Some(r#"{"bad-key":1}"#),
            status: 400,
            code: Some(105),
        },
        Scenario {
            name: "invalid class",
            method: Method::POST,
            path: "/1/classes/1Game".into(),
            body: Some(r#"{"a":1}"#),
            status: 400,
            code: Some(103),
        },
        Scenario {
            name: "bad pointer",
            method: Method::POST,
            path: "/1/classes/GameScore".into(),
            body: Some(r#"{"p":{"__type":"Pointer","className":"X"}}"#),
            status: 400,
            code: Some(106),
        },
        Scenario {
            name: "geopoint out of range",
            method: Method::POST,
            path: "/1/classes/GameScore".into(),
            body: Some(r#"{"g":{"__type":"GeoPoint","latitude":91,"longitude":0}}"#),
            status: 400,
            code: Some(117),
        },
        Scenario {
            name: "bad date",
            method: Method::POST,
            path: "/1/classes/GameScore".into(),
            body: Some(r#"{"d":{"__type":"Date","iso":"tomorrow"}}"#),
            status: 400,
            code: Some(107),
        },
        Scenario {
            name: "unknown operator",
            method: Method::PUT,
            path: p.clone(),
            body: Some(r#"{"a":{"__op":"Explode"}}"#),
            status: 400,
            code: Some(107),
        },
        Scenario {
            name: "bad ACL",
            method: Method::POST,
            path: "/1/classes/GameScore".into(),
            body: Some(r#"{"ACL":{"*":{"read":false}}}"#),
            status: 400,
            code: Some(107),
        },
        Scenario {
            name: "array op on a number",
            method: Method::PUT,
            path: p.clone(),
            body: Some(r#"{"score":{"__op":"Add","objects":[1]}}"#),
            status: 400,
            code: Some(111),
        },
        Scenario {
            name: "get missing",
            method: Method::GET,
            path: "/1/classes/GameScore/nope123456".into(),
            body: None,
            status: 404,
            code: Some(101),
        },
        Scenario {
            name: "update missing",
            method: Method::PUT,
            path: "/1/classes/GameScore/nope123456".into(),
            body: Some(r#"{"a":1}"#),
            status: 404,
            code: Some(101),
        },
        Scenario {
            name: "delete missing",
            method: Method::DELETE,
            path: "/1/classes/GameScore/nope123456".into(),
            body: None,
            status: 404,
            code: Some(101),
        },
        Scenario {
            name: "bad where",
            method: Method::GET,
            path: "/1/classes/GameScore?where=[1]".into(),
            body: None,
            status: 400,
            code: Some(102),
        },
        Scenario {
            name: "bad limit",
            method: Method::GET,
            path: "/1/classes/GameScore?limit=ten".into(),
            body: None,
            status: 400,
            code: Some(102),
        },
    ];
    for s in &table {
        run_raw(&cluster, s).await;
    }
    // Nothing above created an object.
    let count = client
        .query("GameScore", &[("count", "1"), ("limit", "0")])
        .await
        .expect("count");
    assert_eq!(count["count"], 1);

    // Delete.
    let del = client
        .delete_object("GameScore", &id)
        .await
        .expect("delete");
    assert_eq!(del.body, json!({"msg": "ok"}));
    assert!(client
        .get_object("GameScore", &id)
        .await
        .expect("get")
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_keys_are_required() {
    let cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    let http = reqwest::Client::new();
    let url = format!("http://{}/1/classes/Thing", cluster.nodes[0].http);
    let cases: Vec<Vec<(&str, String)>> = vec![
        vec![],
        vec![(
            "X-Service-Application-Id",
            cluster.keys.application_id.clone(),
        )],
        vec![
            (
                "X-Service-Application-Id",
                cluster.keys.application_id.clone(),
            ),
            ("X-Service-REST-API-Key", "wrong".into()),
        ],
        vec![
            ("X-Service-Application-Id", "unknown-app".into()),
            ("X-Service-REST-API-Key", cluster.keys.rest_key.clone()),
        ],
        vec![
            (
                "X-Service-Application-Id",
                cluster.keys.application_id.clone(),
            ),
            ("X-Service-Master-Key", "wrong".into()),
        ],
    ];
    for headers in cases {
        let mut req = http.post(&url).body(r#"{"a":1}"#);
        for (k, v) in &headers {
            req = req.header(*k, v);
        }
        let resp = req.send().await.expect("send");
        assert_eq!(resp.status().as_u16(), 401, "{headers:?}");
        assert_eq!(
            resp.json::<Value>().await.expect("json"),
            json!({"error": "unauthorized"})
        );
    }
    // Header names are case-insensitive, and the master key stands in for the REST key.
    let resp = http
        .post(&url)
        .header("x-service-application-id", &cluster.keys.application_id)
        .header("X-SERVICE-REST-API-KEY", &cluster.keys.rest_key)
        .body(r#"{"a":1}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 201);
    let master = cluster.master_client(0);
    let r = master
        .request(
            Method::POST,
            "/1/classes/Thing",
            Some(&json!({"a": 2})),
            true,
        )
        .await
        .expect("master create");
    assert_eq!(r.status, 201);
    let listed = cluster
        .client(0)
        .query("Thing", &[("count", "1")])
        .await
        .expect("list");
    assert_eq!(listed["count"], 2, "refused requests wrote nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_orders_pages_and_counts_across_shards() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    for i in 0..150 {
        client
            .create_object("Row", &json!({"n": i, "even": i % 2 == 0}))
            .await
            .expect("create");
    }
    let all = client.query("Row", &[]).await.expect("list");
    assert_eq!(
        all["results"].as_array().map(Vec::len),
        Some(100),
        "default limit 100"
    );
    assert!(all.get("count").is_none(), "count only when asked");
    let page = client
        .query("Row", &[("order", "-n"), ("skip", "10"), ("limit", "5")])
        .await
        .expect("page");
    let ns: Vec<i64> = page["results"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["n"].as_i64().expect("n"))
        .collect();
    assert_eq!(ns, [139, 138, 137, 136, 135]);
    let only_count = client
        .query("Row", &[("count", "1"), ("limit", "0")])
        .await
        .expect("count");
    assert_eq!(only_count["count"], 150);
    assert_eq!(only_count["results"], json!([]));
    let evens = client
        .query(
            "Row",
            &[
                ("where", r#"{"even":true}"#),
                ("count", "1"),
                ("limit", "1000"),
            ],
        )
        .await
        .expect("where");
    assert_eq!(evens["count"], 75);
    assert_eq!(
        evens["results"].as_array().map(Vec::len),
        Some(75),
        "limit above 500 is capped, not refused"
    );
}
