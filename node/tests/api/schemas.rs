//! Schemas (spec 4.9, 2.8) and schema inference (spec 2.2): the master key, every column type,
//! type mismatches (111), one geo column, relation targets (104), the schema endpoints' codes
//! (10061–10073), and column/class deletion removing the data on every shard.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::{assert_api_error, TestCluster};

/// The master key's request of a schema endpoint.
async fn schema_call(
    c: &basalt_client::Client,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Result<basalt_client::Response, basalt_client::Error> {
    c.request(method, path, body.as_ref(), true).await
}

/// The first write of a column fixes its type, each type of value its own; a Pointer and a
/// Relation keep their target class. Only the master key reads schemas (a wrong one: 10061).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_write_fixes_each_columns_type() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let user = json!({"__type": "Pointer", "className": "_User", "objectId": "u1"});
    client
        .create_object(
            "Game",
            &json!({
                "score": 1, "name": "x", "done": true, "tags": ["a"], "meta": {"k": 1},
                "when": {"__type": "Date", "iso": "2024-05-06T07:08:09.000Z"},
                "loc": {"__type": "GeoPoint", "latitude": 10, "longitude": 20},
                "owner": user,
                "pic": {"__type": "File", "filename": "a.png", "url": "http://f/a.png", "group": "g"},
                "likes": {"__op": "AddRelation", "objects": [user]},
            }),
        )
        .await
        .expect("create");
    let master = cluster.master_client(0);
    let schema = schema_call(&master, Method::GET, "/1/schemas/Game", None).await;
    let schema = schema.expect("schema").body;
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
    let mut wrong = cluster.keys.clone();
    wrong.master_key = Some("wrong".into());
    let url = format!("http://{}", cluster.nodes[0].http);
    let wrong = basalt_client::Client::new(&url, Some(wrong)).unwrap();
    let refused = schema_call(&wrong, Method::GET, "/1/schemas/Game", None).await;
    assert_api_error(refused, 400, 10061, "wrong master key");
}

/// Writes against a column's type, as a table: each refused with 111 (104 for a relation to
/// no class) and changing nothing; null fixes no type, and deleting a field needs none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_another_type_are_refused_and_change_nothing() {
    use crate::common::scenario::{run_rows, After, Row};
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let game = client
        .create_object("Game", &json!({"score": 1, "name": "x", "done": true, "owner": {"__type": "Pointer", "className": "_User", "objectId": "u1"}, "loc": {"__type": "GeoPoint", "latitude": 10, "longitude": 20}}))
        .await
        .expect("create");
    let path = format!("/1/classes/Game/{}", game.object_id);
    let holds = |field: &'static str, v: Value| After::Field {
        class: "Game",
        id: game.object_id.clone(),
        field,
        value: v,
    };
    let update = |name: &'static str, body: &str| {
        Row::new(name, Method::PUT, path.clone()).body(body.to_string())
    };
    let refused = |name: &'static str, body: &str, kept: After| {
        update(name, body).fails(400, 111).after(kept)
    };
    let score_is = |v: Value| holds("score", v);
    let owner = json!({"__type": "Pointer", "className": "_User", "objectId": "u1"});
    let rows = vec![
        refused("a string into a Number", r#"{"score": "high"}"#, score_is(json!(1))),
        refused("Increment on a String", r#"{"name": {"__op": "Increment", "amount": 1}}"#, holds("name", json!("x"))),
        refused("Add on a Number", r#"{"score": {"__op": "Add", "objects": [1]}}"#, score_is(json!(1))),
        refused(
            "a Pointer to another class",
            r#"{"owner": {"__type": "Pointer", "className": "Game", "objectId": "x"}}"#,
            holds("owner", owner),
        ),
        refused(
            "a second geo column",
            r#"{"spot": {"__type": "GeoPoint", "latitude": 1, "longitude": 1}, "score": 3}"#,
            score_is(json!(1)),
        ),
        refused("a dot path into a Number", r#"{"score.sub": 1}"#, score_is(json!(1))),
        refused("one bad key of several", r#"{"score": 2, "done": "yes"}"#, score_is(json!(1))),
        Row::new("a relation to no class", Method::POST, "/1/classes/Game")
            .body(r#"{"rel": {"__op": "AddRelation", "objects": [{"__type": "Pointer", "className": "Nowhere", "objectId": "x"}]}}"#)
            .fails(400, 104)
            .after(After::Count("Game", 1)),
        update("null fixes no type", r#"{"later": null, "name": {"__op": "Delete"}}"#)
            .succeeds(200),
        update("a first type after null", r#"{"later": "text"}"#).succeeds(200),
    ];
    run_rows(&cluster, &rows).await;
}

/// A declared class: its fields as declared (targets and built-ins), typed objects held to
/// them; a column added or deleted with PUT, a deleted column's values gone from the objects
/// and the column free for a new type; the list holds inferred and declared classes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_columns_govern_writes_and_a_deleted_column_takes_its_values() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let (client, master) = (cluster.client(0), cluster.master_client(0));
    client
        .create_object("Game", &json!({"n": 1}))
        .await
        .unwrap();
    let item = json!({"className": "Item", "fields": {
        "price": {"type": "Number"},
        "game": {"type": "Pointer", "targetClass": "Game"},
        "fans": {"type": "Relation", "targetClass": "_User"},
        "where": {"type": "Geo"},
    }});
    let created = schema_call(&master, Method::POST, "/1/schemas/Item", Some(item)).await;
    let created = created.expect("create class").body;
    assert_eq!(created["fields"]["game"]["targetClass"], "Game");
    assert_eq!(created["fields"]["objectId"]["type"], "String");
    let free = client
        .create_object("Item", &json!({"price": "free"}))
        .await;
    assert_api_error(free, 400, 111, "declared type");
    let i1 = client
        .create_object("Item", &json!({"price": 5, "note": "keep"}))
        .await
        .unwrap();
    let change = json!({"className": "Item", "fields": {"price": {"type": "Number", "__op": "Delete"}, "size": {"type": "String"}}});
    let altered = schema_call(&master, Method::PUT, "/1/schemas/Item", Some(change)).await;
    let altered = altered.expect("alter").body;
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
    let all = schema_call(&master, Method::GET, "/1/schemas", None)
        .await
        .unwrap()
        .body;
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
    let user = schema_call(&master, Method::GET, "/1/schemas/_User", None).await;
    assert_eq!(user.unwrap().body["fields"]["username"]["type"], "String");
}

/// A deleted class takes its objects on every shard (104 for it after, and for a second
/// delete), and may come back with new types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_class_takes_its_objects_from_every_shard() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let (client, master) = (cluster.client(0), cluster.master_client(0));
    for n in 0..20 {
        client
            .create_object("Temp", &json!({"n": n}))
            .await
            .unwrap();
    }
    let deleted = schema_call(&master, Method::DELETE, "/1/schemas/Temp", None).await;
    assert_eq!(deleted.unwrap().body, json!({"msg": "ok"}));
    let count = client
        .query("Temp", &[("count", "1"), ("limit", "0")])
        .await;
    assert_eq!(count.unwrap()["count"], 0);
    let read = schema_call(&master, Method::GET, "/1/schemas/Temp", None).await;
    assert_api_error(read, 400, 104, "deleted class");
    let again = schema_call(&master, Method::DELETE, "/1/schemas/Temp", None).await;
    assert_api_error(again, 400, 104, "deleted twice");
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
