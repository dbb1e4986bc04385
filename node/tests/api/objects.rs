//! Objects (spec 4.1, 4.2): create, read, update, delete, list, and their errors.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::scenario::{run_rows, After, Row};
use super::common::TestCluster;

/// An object's life: created (201, Location, a 10-character objectId, createdAt, the
/// committing log index as its version), read with its reserved fields, updated (a newer
/// version; every operator: `every_operator_changes_its_key_only`), deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_is_created_read_updated_and_deleted() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let body = json!({"score": 10, "name": "alice", "tags": ["a"], "stats": {"wins": 1}, "items": [{"n": "x"}]});
    let raw = client
        .request(Method::POST, "/1/classes/GameScore", Some(&body), false)
        .await;
    let raw = raw.expect("create");
    assert_eq!(raw.status, 201);
    let id = raw.body["objectId"].as_str().expect("objectId").to_string();
    assert!(
        id.len() == 10 && id.chars().all(|c| c.is_ascii_alphanumeric()),
        "{id}"
    );
    let location = raw.location.as_deref().unwrap_or_default();
    assert!(
        location.ends_with(&format!("/1/classes/GameScore/{id}")),
        "{location}"
    );
    let created_at = raw.body["createdAt"].as_str().expect("createdAt");
    assert_eq!(created_at.len(), 19, "YYYY-mm-dd HH:ii:ss");
    let v1 = raw.version.expect("X-Basalt-Version");
    let obj = client
        .get_object("GameScore", &id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(
        (&obj["score"], &obj["createdAt"]),
        (&json!(10), &json!(created_at))
    );
    assert_eq!(obj["updatedAt"], created_at);

    let up = client
        .update_object("GameScore", &id, &json!({"score": 8}))
        .await
        .expect("update");
    assert!(up.version.expect("version") > v1);
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

/// Every update operator changes its own key and no other; each update is a newer version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operator_changes_its_key_only() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let body = json!({"score": 10, "name": "alice", "tags": ["a"], "stats": {"wins": 1}, "items": [{"n": "x"}], "gone": 1});
    let made = client
        .create_object("GameScore", &body)
        .await
        .expect("create");
    let (id, v1) = (made.object_id, made.version.expect("version"));
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
    let remove = json!({"extra": {"__op": "Remove", "objects": [2]}});
    client
        .update_object("GameScore", &id, &remove)
        .await
        .expect("remove");
    let obj = client
        .get_object("GameScore", &id)
        .await
        .expect("get")
        .expect("exists");
    for (key, want) in [
        ("score", json!(7)),
        ("name", json!("alice")),
        ("tags", json!(["a", "b"])),
        ("stats", json!({"wins": 3})),
        ("items", json!([{"n": "y"}])),
        ("extra", json!([1])),
        (
            "when",
            json!({"__type": "Date", "iso": "2024-05-06 07:08:09"}),
        ),
        ("likes", json!({"__type": "Relation", "className": "_User"})),
    ] {
        assert_eq!(obj[key], want, "{key}");
    }
    assert_eq!(
        (&obj["place"]["latitude"], &obj["owner"]["objectId"]),
        (&json!(30.5), &json!("u1"))
    );
    assert!(obj.get("gone").is_none());
}

/// Refused object requests as a table, each leaving the class as it was (one object, its
/// score unchanged): malformed bodies (107), reserved and invalid keys (105), an invalid class
/// (103), bad typed values (106, 117, 107), an operator against the column's type (111, also
/// when another key of the update is fine), an integer pushed out of the signed 64-bit range
/// by any amount (107, the value kept), unknown objects (101), bad query parameters (102).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_object_requests_change_nothing() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let body = json!({"score": 7, "name": "alice"});
    let id = client
        .create_object("GameScore", &body)
        .await
        .expect("create")
        .object_id;
    let big = client
        .create_object("BigNumber", &json!({"n": i64::MAX}))
        .await
        .expect("big")
        .object_id;
    let big_path = format!("/1/classes/BigNumber/{big}");
    let overflow = |name: &'static str, amount: &str| {
        Row::new(name, Method::PUT, big_path.clone())
            .body(format!(
                r#"{{"n": {{"__op": "Increment", "amount": {amount}}}}}"#
            ))
            .fails(400, 107)
            .after(After::Field {
                class: "BigNumber",
                id: big.clone(),
                field: "n",
                value: json!(i64::MAX),
            })
    };
    let rows = [
        overflow("an integer past the range", "1"),
        overflow("an integer past the range by a huge float", "1e308"),
        overflow("an integer past the range by a float one", "1.0"),
    ];
    run_rows(&cluster, &rows).await;
    let p = format!("/1/classes/GameScore/{id}");
    // Every refused request leaves the class as it was: one object, its score unchanged.
    let unchanged = || After::Field {
        class: "GameScore",
        id: id.clone(),
        field: "score",
        value: json!(7),
    };
    let rows = [
        Row::new("a type mismatch beside a fine change", Method::PUT, &p)
            .body(r#"{"score": {"__op": "Increment", "amount": 1}, "name": {"__op": "Increment", "amount": 1}}"#)
            .fails(400, 111)
            .after(unchanged()),
        Row::new("empty body", Method::POST, "/1/classes/GameScore")
            .body("")
            .fails(400, 107)
            .after(After::Count("GameScore", 1)),
        Row::new("invalid JSON", Method::POST, "/1/classes/GameScore")
            .body("{bad")
            .fails(400, 107)
            .after(After::Count("GameScore", 1)),
        Row::new("not an object", Method::POST, "/1/classes/GameScore")
            .body("[1,2]")
            .fails(400, 107)
            .after(After::Count("GameScore", 1)),
        Row::new("reserved field", Method::POST, "/1/classes/GameScore")
            .body(r#"{"objectId":"abc"}"#)
            .fails(400, 105)
            .after(After::Count("GameScore", 1)),
        Row::new("reserved createdAt on update", Method::PUT, &p)
            .body(r#"{"createdAt":"x"}"#)
            .fails(400, 105)
            .after(unchanged()),
        Row::new("invalid key", Method::POST, "/1/classes/GameScore")
            .body(r#"{"bad-key":1}"#)
            .fails(400, 105)
            .after(After::Count("GameScore", 1)),
        Row::new("invalid class", Method::POST, "/1/classes/1Game")
            .body(r#"{"a":1}"#)
            .fails(400, 103)
            .after(After::Count("GameScore", 1)),
        Row::new("bad pointer", Method::POST, "/1/classes/GameScore")
            .body(r#"{"p":{"__type":"Pointer","className":"X"}}"#)
            .fails(400, 106)
            .after(After::Count("GameScore", 1)),
        Row::new(
            "geopoint out of range",
            Method::POST,
            "/1/classes/GameScore",
        )
        .body(r#"{"g":{"__type":"GeoPoint","latitude":91,"longitude":0}}"#)
        .fails(400, 117)
        .after(After::Count("GameScore", 1)),
        Row::new("bad date", Method::POST, "/1/classes/GameScore")
            .body(r#"{"d":{"__type":"Date","iso":"tomorrow"}}"#)
            .fails(400, 107)
            .after(After::Count("GameScore", 1)),
        Row::new("unknown operator", Method::PUT, &p)
            .body(r#"{"a":{"__op":"Explode"}}"#)
            .fails(400, 107)
            .after(unchanged()),
        Row::new("bad ACL", Method::POST, "/1/classes/GameScore")
            .body(r#"{"ACL":{"*":{"read":false}}}"#)
            .fails(400, 107)
            .after(After::Count("GameScore", 1)),
        Row::new(
            "ACL that is an array (malformed, not a type mismatch)",
            Method::POST,
            "/1/classes/GameScore",
        )
        .body(r#"{"ACL":[{"*":{"read":true}}]}"#)
        .fails(400, 107)
        .after(After::Count("GameScore", 1)),
        Row::new("ACL that is a string", Method::PUT, &p)
            .body(r#"{"ACL":"public"}"#)
            .fails(400, 107)
            .after(unchanged()),
        Row::new("array op on a number", Method::PUT, &p)
            .body(r#"{"score":{"__op":"Add","objects":[1]}}"#)
            .fails(400, 111)
            .after(unchanged()),
        Row::new(
            "get missing",
            Method::GET,
            "/1/classes/GameScore/nope123456",
        )
        .fails(404, 101),
        Row::new(
            "update missing",
            Method::PUT,
            "/1/classes/GameScore/nope123456",
        )
        .body(r#"{"a":1}"#)
        .fails(404, 101)
        .after(After::Count("GameScore", 1)),
        Row::new(
            "delete missing",
            Method::DELETE,
            "/1/classes/GameScore/nope123456",
        )
        .fails(404, 101),
        Row::new("bad where", Method::GET, "/1/classes/GameScore?where=[1]").fails(400, 102),
        Row::new("bad limit", Method::GET, "/1/classes/GameScore?limit=ten").fails(400, 102),
    ];
    run_rows(&cluster, &rows).await;
    let count = client
        .query("GameScore", &[("count", "1"), ("limit", "0")])
        .await;
    assert_eq!(
        count.expect("count")["count"],
        1,
        "no refused request created an object"
    );
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

/// Typed values round-trip: dates in all three input forms come back in the wire form; every
/// typed value, nested objects and arrays as written (a Pointer stays a Pointer without
/// include, a Relation hides its members); dot paths change values inside objects and array
/// elements and nothing beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_values_round_trip_and_dot_paths_reach_inside() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    for (iso, want) in [
        ("2024-05-06T07:08:09.123Z", "2024-05-06 07:08:09"),
        ("2024-05-06T07:08:09", "2024-05-06 07:08:09"),
        ("2024-05-06 07:08:09", "2024-05-06 07:08:09"),
    ] {
        let c = client
            .create_object("Event", &json!({"at": {"__type": "Date", "iso": iso}}))
            .await
            .unwrap_or_else(|e| panic!("{iso}: {e}"));
        let o = client
            .get_object("Event", &c.object_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(o["at"], json!({"__type": "Date", "iso": want}), "{iso}");
    }

    let author = client
        .create_object("Author", &json!({"name": "ann", "age": 40}))
        .await
        .unwrap();
    let author_ptr =
        json!({"__type": "Pointer", "className": "Author", "objectId": author.object_id});
    let ghost_ptr = json!({"__type": "Pointer", "className": "Author", "objectId": "ghost00000"});
    let file =
        json!({"__type": "File", "group": "g", "filename": "a.png", "url": "http://files/a.png"});
    let geo = json!({"__type": "GeoPoint", "latitude": -33.5, "longitude": 151.25});
    let post = client
        .create_object(
            "Post",
            &json!({
                "author": author_ptr, "editor": ghost_ptr, "cover": file, "place": geo,
                "readers": [author_ptr, ghost_ptr],
                "stats": {"views": 1, "by": {"day": 2}},
                "items": [{"name": "a", "n": 1}, {"name": "b", "n": 2}],
                "fans": {"__op": "AddRelation", "objects": [author_ptr]},
            }),
        )
        .await
        .expect("create post");
    let p = client
        .get_object("Post", &post.object_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        p["author"], author_ptr,
        "without include a Pointer stays a Pointer"
    );
    assert_eq!(p["cover"], file);
    assert_eq!(p["place"], geo);
    assert_eq!(
        p["fans"],
        json!({"__type": "Relation", "className": "Author"})
    );

    client
        .update_object(
            "Post",
            &post.object_id,
            &json!({"stats.views": {"__op": "Increment", "amount": 4}, "stats.by.week": 9, "items.1.name": "B"}),
        )
        .await
        .expect("dot paths");
    let p = client
        .get_object("Post", &post.object_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p["stats"], json!({"views": 5, "by": {"day": 2, "week": 9}}));
    assert_eq!(p["items"][1], json!({"name": "B", "n": 2}));
    assert_eq!(p["items"][0]["name"], "a");
}

/// `include` expands pointers (and arrays of pointers) one level, in gets and listings; a
/// missing target stays a Pointer; `key[a|b]` keeps only those fields. Trailing slashes address
/// the same resources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_expands_pointers_one_level() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let author = client
        .create_object("Author", &json!({"name": "ann", "age": 40}))
        .await
        .unwrap();
    let author_ptr =
        json!({"__type": "Pointer", "className": "Author", "objectId": author.object_id});
    let ghost_ptr = json!({"__type": "Pointer", "className": "Author", "objectId": "ghost00000"});
    let body =
        json!({"author": author_ptr, "editor": ghost_ptr, "readers": [author_ptr, ghost_ptr]});
    let post = client
        .create_object("Post", &body)
        .await
        .expect("create post");
    let q = format!(
        "/1/classes/Post/{}?include=author,editor,readers",
        post.object_id
    );
    let p = client
        .request(Method::GET, &q, None, false)
        .await
        .unwrap()
        .body;
    assert_eq!(p["author"]["__type"], "Object");
    assert_eq!(p["author"]["className"], "Author");
    assert_eq!(p["author"]["name"], "ann");
    assert_eq!(p["author"]["objectId"], author.object_id.as_str());
    assert_eq!(p["editor"], ghost_ptr);
    assert_eq!(p["readers"][0]["name"], "ann");
    assert_eq!(p["readers"][1], ghost_ptr);
    let q = format!("/1/classes/Post/{}?include=author[name]", post.object_id);
    let p = client
        .request(Method::GET, &q, None, false)
        .await
        .unwrap()
        .body;
    assert_eq!(p["author"]["name"], "ann");
    assert!(p["author"].get("age").is_none());
    let listed = client
        .query("Post", &[("include", "author")])
        .await
        .unwrap();
    assert_eq!(listed["results"][0]["author"]["name"], "ann");

    let r = client
        .request(
            Method::GET,
            &format!("/1/classes/Post/{}/", post.object_id),
            None,
            false,
        )
        .await
        .expect("trailing slash");
    assert_eq!(r.body["objectId"], post.object_id.as_str());
    assert!(client
        .request(Method::GET, "/1/classes/Post/", None, false)
        .await
        .is_ok());
}

/// Bodies over `--max-body-bytes` are 413 with code 107 and write nothing, also when the
/// client writes a body far over the limit before reading its answer (as Python's
/// http.client does); a malformed path or query string gets a code (107, 102), an unknown
/// method 405.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_bodies_and_malformed_requests_are_answered_with_codes() {
    use super::common::scenario::As;
    let cluster = TestCluster::start(1, &["--shards", "4"], &["--max-body-bytes", "65536"]).await;
    let client = cluster.client(0);
    let big = format!(r#"{{"blob": "{}"}}"#, "x".repeat(70_000));
    let rows = [
        Row::new("a body over the limit", Method::POST, "/1/classes/Big")
            .body(big)
            .fails(413, 107)
            .after(After::Count("Big", 0)),
        Row::new(
            "a path that is no UTF-8",
            Method::GET,
            "/1/classes/Post/%FF%FE",
        )
        .fails(400, 107),
        Row::new(
            "a query string that is no UTF-8",
            Method::GET,
            "/1/classes/Post?limit=%FF",
        )
        .fails(400, 102),
        Row::new("an unknown method", Method::PATCH, "/1/classes/Post")
            .auth(As::Nobody)
            .answers(405),
    ];
    run_rows(&cluster, &rows).await;
    // A body far over the limit is read and dropped, so a client that writes its whole body
    // before reading (as Python's http.client does) still gets its answer rather than a reset
    // connection.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = format!("{{\"blob\":\"{}\"}}", "x".repeat(8 << 20));
        let head = format!(
            "POST /1/classes/Big HTTP/1.1\r\nHost: x\r\nX-Service-Application-Id: {}\r\n\
             X-Service-REST-API-Key: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            cluster.keys.application_id,
            cluster.keys.rest_key,
            body.len()
        );
        let mut conn = tokio::net::TcpStream::connect(&cluster.nodes[0].http)
            .await
            .expect("connect");
        conn.write_all(head.as_bytes()).await.expect("write head");
        conn.write_all(body.as_bytes())
            .await
            .expect("the whole oversize body is taken");
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&answer).contains("\"code\"") {
            let n = conn.read(&mut buf).await.expect("read the answer");
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
        }
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(answer.contains("\"code\":107"), "{answer}");
    }
    let count = client.query("Big", &[("count", "1")]).await.unwrap();
    assert_eq!(count["count"], 0);
}
