//! Schemas (spec 4.9, 2.8) and schema inference (spec 2.2): the master key, every column type,
//! type mismatches (111), one geo column, relation targets (104), the schema endpoints' codes
//! (10061–10073), and column/class deletion removing the data on every shard.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::{assert_api_error, assert_unauthorized, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_are_inferred_managed_and_enforced() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let master = cluster.master_client(0);
    let m = |method: Method, path: &str, body: Option<Value>| {
        let (c, path) = (master.clone(), path.to_string());
        async move { c.request(method, &path, body.as_ref(), true).await }
    };

    // The first write fixes each column's type.
    let game = client
        .create_object(
            "Game",
            &json!({
                "score": 1, "name": "x", "done": true, "tags": ["a"], "meta": {"k": 1},
                "when": {"__type": "Date", "iso": "2024-05-06T07:08:09.000Z"},
                "loc": {"__type": "GeoPoint", "latitude": 10, "longitude": 20},
                "owner": {"__type": "Pointer", "className": "_User", "objectId": "u1"},
                "pic": {"__type": "File", "filename": "a.png", "url": "http://f/a.png", "group": "g"},
                "likes": {"__op": "AddRelation", "objects": [{"__type": "Pointer", "className": "_User", "objectId": "u1"}]},
            }),
        )
        .await
        .expect("create");
    let schema = m(Method::GET, "/1/schemas/Game", None)
        .await
        .expect("schema")
        .body;
    assert_eq!(schema["className"], "Game");
    let f = &schema["fields"];
    for (col, ty) in [
        ("score", "Number"),
        ("name", "String"),
        ("done", "Bool"),
        ("tags", "Array"),
        ("meta", "Object"),
        ("when", "Date"),
        ("loc", "Geo"),
        ("owner", "Pointer"),
        ("pic", "File"),
        ("likes", "Relation"),
        ("objectId", "String"),
        ("createdAt", "Date"),
        ("updatedAt", "Date"),
        ("ACL", "Object"),
    ] {
        assert_eq!(f[col]["type"], ty, "{col}: {schema}");
    }
    assert_eq!(f["owner"]["targetClass"], "_User");
    assert_eq!(f["likes"]["targetClass"], "_User");

    // Later writes of another type are refused with 111, and change nothing.
    let id = &game.object_id;
    for (body, what) in [
        (json!({"score": "high"}), "string into Number"),
        (
            json!({"name": {"__op": "Increment", "amount": 1}}),
            "Increment on String",
        ),
        (
            json!({"score": {"__op": "Add", "objects": [1]}}),
            "Add on Number",
        ),
        (
            json!({"owner": {"__type": "Pointer", "className": "Game", "objectId": "x"}}),
            "Pointer to another class",
        ),
        (
            json!({"spot": {"__type": "GeoPoint", "latitude": 1, "longitude": 1}}),
            "a second geo column",
        ),
        (json!({"score.sub": 1}), "dot path into a Number"),
        (json!({"ok": 1, "done": "yes"}), "one bad key of several"),
    ] {
        assert_api_error(
            client.update_object("Game", id, &body).await,
            400,
            111,
            what,
        );
    }
    let after = client.get_object("Game", id).await.unwrap().unwrap();
    assert_eq!(after["score"], 1);
    assert!(after.get("ok").is_none(), "no partial write");
    assert_api_error(
        client
            .create_object("Game", &json!({"rel": {"__op": "AddRelation", "objects": [{"__type": "Pointer", "className": "Nowhere", "objectId": "x"}]}}))
            .await,
        400,
        104,
        "relation to a class that does not exist",
    );
    // Null fixes no type; deleting a field needs none.
    client
        .update_object(
            "Game",
            id,
            &json!({"later": null, "name": {"__op": "Delete"}}),
        )
        .await
        .unwrap();
    client
        .update_object("Game", id, &json!({"later": "text"}))
        .await
        .unwrap();

    // Master key required: 10061 for a missing or wrong master key, 401 for unknown apps.
    assert_api_error(
        client.request(Method::GET, "/1/schemas", None, false).await,
        400,
        10061,
        "REST key only",
    );
    let mut wrong = cluster.keys.clone();
    wrong.master_key = Some("wrong".into());
    let wrong =
        basalt_client::Client::new(&format!("http://{}", cluster.nodes[0].http), Some(wrong))
            .unwrap();
    assert_api_error(
        wrong
            .request(Method::GET, "/1/schemas/Game", None, true)
            .await,
        400,
        10061,
        "wrong master key",
    );
    assert_unauthorized(
        cluster
            .anonymous_client(0)
            .request(Method::GET, "/1/schemas", None, false)
            .await,
        "no app",
    );

    // Create a class explicitly, with every rule checked.
    let item = json!({"className": "Item", "fields": {
        "price": {"type": "Number"},
        "game": {"type": "Pointer", "targetClass": "Game"},
        "fans": {"type": "Relation", "targetClass": "_User"},
        "where": {"type": "Geo"},
    }});
    let created = m(Method::POST, "/1/schemas/Item", Some(item.clone()))
        .await
        .expect("create class")
        .body;
    assert_eq!(created["fields"]["game"]["targetClass"], "Game");
    assert_eq!(created["fields"]["objectId"]["type"], "String");
    assert_api_error(
        m(Method::POST, "/1/schemas/Item", Some(item)).await,
        400,
        103,
        "class exists",
    );
    for (body, code, what) in [
        (json!({"className": "Other"}), 10062, "class name mismatch"),
        (
            json!({"fields": {"objectId": {"type": "String"}}}),
            10063,
            "reserved field",
        ),
        (
            json!({"fields": {"p": {"type": "Pointer"}}}),
            10065,
            "no targetClass",
        ),
        (
            json!({"fields": {"p": {"type": "Relation", "targetClass": "Ghost"}}}),
            10066,
            "missing target",
        ),
        (
            json!({"fields": {"p": {"type": "Blob"}}}),
            10069,
            "unknown type",
        ),
        (
            json!({"fields": {"a": {"type": "Geo"}, "b": {"type": "Geo"}}}),
            111,
            "two geo columns",
        ),
    ] {
        assert_api_error(
            m(Method::POST, "/1/schemas/Fresh", Some(body)).await,
            400,
            code,
            what,
        );
    }
    assert_api_error(
        m(Method::GET, "/1/schemas/Fresh", None).await,
        400,
        104,
        "nothing was created",
    );
    assert_api_error(
        m(Method::POST, "/1/schemas/9bad", Some(json!({}))).await,
        400,
        103,
        "bad class name",
    );

    // Typed objects must match the declared columns.
    assert_api_error(
        client
            .create_object("Item", &json!({"price": "free"}))
            .await,
        400,
        111,
        "declared type",
    );
    let i1 = client
        .create_object("Item", &json!({"price": 5, "note": "keep"}))
        .await
        .unwrap();

    // PUT: add and delete columns; a deleted column's values are removed from the objects.
    assert_api_error(
        m(
            Method::PUT,
            "/1/schemas/Item",
            Some(json!({"fields": {"price": {"type": "Number"}}})),
        )
        .await,
        400,
        10064,
        "field exists",
    );
    assert_api_error(
        m(
            Method::PUT,
            "/1/schemas/Item",
            Some(json!({"fields": {"ghost": {"__op": "Delete"}}})),
        )
        .await,
        400,
        10071,
        "unknown field",
    );
    assert_api_error(
        m(
            Method::PUT,
            "/1/schemas/_User",
            Some(json!({"fields": {"username": {"__op": "Delete"}}})),
        )
        .await,
        400,
        10073,
        "_User built-in column",
    );
    let altered = m(
        Method::PUT,
        "/1/schemas/Item",
        Some(json!({"className": "Item", "fields": {"price": {"type": "Number", "__op": "Delete"}, "size": {"type": "String"}}})),
    )
    .await
    .expect("alter")
    .body;
    assert!(altered["fields"].get("price").is_none());
    assert_eq!(altered["fields"]["size"]["type"], "String");
    let i1v = client
        .get_object("Item", &i1.object_id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        i1v.get("price").is_none(),
        "the deleted column's value is gone: {i1v}"
    );
    assert_eq!(i1v["note"], "keep");
    client
        .update_object("Item", &i1.object_id, &json!({"price": "now a string"}))
        .await
        .expect("new type after delete");

    // List.
    let all = m(Method::GET, "/1/schemas", None).await.unwrap().body;
    let names: Vec<&str> = all["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["className"].as_str())
        .collect();
    assert!(
        names.contains(&"Game") && names.contains(&"Item"),
        "{names:?}"
    );
    let user = m(Method::GET, "/1/schemas/_User", None).await.unwrap().body;
    assert_eq!(user["fields"]["username"]["type"], "String");

    // DELETE a class: its objects go on every shard; the class may come back with new types.
    for n in 0..20 {
        client
            .create_object("Temp", &json!({"n": n}))
            .await
            .unwrap();
    }
    assert_eq!(
        m(Method::DELETE, "/1/schemas/Temp", None)
            .await
            .unwrap()
            .body,
        json!({"msg": "ok"})
    );
    assert_eq!(
        client
            .query("Temp", &[("count", "1"), ("limit", "0")])
            .await
            .unwrap()["count"],
        0
    );
    assert_api_error(
        m(Method::GET, "/1/schemas/Temp", None).await,
        400,
        104,
        "deleted class",
    );
    assert_api_error(
        m(Method::DELETE, "/1/schemas/Temp", None).await,
        400,
        104,
        "deleted twice",
    );
    client
        .create_object("Temp", &json!({"n": "text now"}))
        .await
        .expect("recreated with a new type");
}

/// The schema endpoints as a table, on one node: who may call them (the master key only), each
/// refused declaration with its code, and what must not happen (a refused create leaves no
/// class behind; a class created once is not created twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_endpoints_answer_as_their_table_says() {
    use crate::common::scenario::{run_rows, As, Row};
    let cluster = TestCluster::start(1, &[], &[]).await;
    let master = |name: &'static str, method: Method, path: &str| {
        Row::new(name, method, path.to_string()).auth(As::Master)
    };
    let declare = |name: &'static str, body: &str| {
        master(name, Method::POST, "/1/schemas/Fresh").body(body.to_string())
    };
    let rows = vec![
        Row::new("the list with the app's keys", Method::GET, "/1/schemas").fails(400, 10061),
        Row::new(
            "a class with the app's keys",
            Method::GET,
            "/1/schemas/_User",
        )
        .fails(400, 10061),
        Row::new("the list without keys", Method::GET, "/1/schemas")
            .auth(As::Nobody)
            .unauthorized(),
        master("the list", Method::GET, "/1/schemas").succeeds(200),
        master("a built-in class", Method::GET, "/1/schemas/_User").succeeds(200),
        master("a class created", Method::POST, "/1/schemas/Item")
            .body(r#"{"className": "Item", "fields": {"price": {"type": "Number"}}}"#)
            .succeeds(200),
        master("a class created twice", Method::POST, "/1/schemas/Item")
            .body(r#"{"className": "Item"}"#)
            .fails(400, 103),
        declare(
            "a class named otherwise in its body",
            r#"{"className": "Other"}"#,
        )
        .fails(400, 10062),
        declare(
            "a reserved column",
            r#"{"fields": {"objectId": {"type": "String"}}}"#,
        )
        .fails(400, 10063),
        declare(
            "a Pointer without its targetClass",
            r#"{"fields": {"p": {"type": "Pointer"}}}"#,
        )
        .fails(400, 10065),
        declare(
            "a Relation to a class that does not exist",
            r#"{"fields": {"p": {"type": "Relation", "targetClass": "Ghost"}}}"#,
        )
        .fails(400, 10066),
        declare(
            "a column of an unknown type",
            r#"{"fields": {"p": {"type": "Blob"}}}"#,
        )
        .fails(400, 10069),
        declare(
            "two geo columns",
            r#"{"fields": {"a": {"type": "Geo"}, "b": {"type": "Geo"}}}"#,
        )
        .fails(400, 111),
        master(
            "a class name that is no name",
            Method::POST,
            "/1/schemas/9bad",
        )
        .body("{}")
        .fails(400, 103),
        master("a column added again", Method::PUT, "/1/schemas/Item")
            .body(r#"{"fields": {"price": {"type": "Number"}}}"#)
            .fails(400, 10064),
        master("an unknown column deleted", Method::PUT, "/1/schemas/Item")
            .body(r#"{"fields": {"ghost": {"__op": "Delete"}}}"#)
            .fails(400, 10071),
        master(
            "a built-in column of users deleted",
            Method::PUT,
            "/1/schemas/_User",
        )
        .body(r#"{"fields": {"username": {"__op": "Delete"}}}"#)
        .fails(400, 10073),
        master(
            "an unknown class deleted",
            Method::DELETE,
            "/1/schemas/Nowhere",
        )
        .fails(400, 104),
        // What must not happen: none of the refused declarations created the class.
        master(
            "the class no declaration made",
            Method::GET,
            "/1/schemas/Fresh",
        )
        .fails(400, 104),
    ];
    run_rows(&cluster, &rows).await;
}
