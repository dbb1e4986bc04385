//! ACLs (spec 2.6, 5.6): an object's ACL decides who reads and writes it, on every path that
//! touches data — get, list, count, update, delete, include and batch — and the master key
//! bypasses it. A denied read or write answers as if the object were absent (101).

use reqwest::Method;
use serde_json::{json, Value};

use super::common::scenario::{run_rows, After, As, Row};
use super::common::{register_user, TestCluster};

/// Two users and four documents of ann's: one without ACL, one private, one public-read,
/// one shared with bob for reading.
struct Docs {
    client: basalt_client::Client,
    ann_t: String,
    bob_t: String,
    public: String,
    private: String,
    readable: String,
    shared: String,
}

async fn ann_docs(cluster: &TestCluster) -> Docs {
    let client = cluster.spread_client();
    let (ann, ann_t) = register_user(&client, "ann").await;
    let (bob, bob_t) = register_user(&client, "bob").await;
    let as_ann = client.clone().with_session(Some(&ann_t));
    let make = |acl: Option<Value>, label: &str| {
        let c = as_ann.clone();
        let mut body = json!({"label": label});
        if let Some(acl) = acl {
            body["ACL"] = acl;
        }
        async move { c.create_object("Doc", &body).await.unwrap().object_id }
    };
    Docs {
        public: make(None, "public").await,
        private: make(
            Some(json!({ann.clone(): {"read": true, "write": true}})),
            "private",
        )
        .await,
        readable: make(
            Some(json!({"*": {"read": true}, ann.clone(): {"write": true}})),
            "readable",
        )
        .await,
        shared: make(
            Some(json!({ann.clone(): {"read": true, "write": true}, bob.clone(): {"read": true}})),
            "shared",
        )
        .await,
        client,
        ann_t,
        bob_t,
    }
}

/// Who may get an object, as a table: a denied read is absent (101); the master key reads
/// everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_decides_who_reads_an_object() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let Docs {
        ann_t,
        bob_t,
        public,
        private,
        readable,
        shared,
        ..
    } = ann_docs(&cluster).await;
    let doc = |id: &str| format!("/1/classes/Doc/{id}");
    let anon_as = As::App;
    let ann_as = As::Session(ann_t.clone());
    let bob_as = As::Session(bob_t.clone());
    let get = |name: &'static str, who: &As, id: &str| {
        Row::new(name, Method::GET, doc(id)).auth(who.clone())
    };
    run_rows(
        &cluster,
        &[
            get("anyone reads an object without ACL", &anon_as, &public).succeeds(200),
            get("anyone reads a public-read object", &anon_as, &readable).succeeds(200),
            get("anonymous reads a private object", &anon_as, &private).fails(404, 101),
            get("anonymous reads a shared object", &anon_as, &shared).fails(404, 101),
            get("the owner reads her private object", &ann_as, &private).succeeds(200),
            get("the owner reads a shared object", &ann_as, &shared).succeeds(200),
            get("another user reads a private object", &bob_as, &private).fails(404, 101),
            get("a reader reads a shared object", &bob_as, &shared).succeeds(200),
            get(
                "the master key reads a private object",
                &As::Master,
                &private,
            )
            .succeeds(200),
            get("no keys", &As::Nobody, &public).unauthorized(),
        ],
    )
    .await;
}

/// Who may change or delete an object, as a table: a denied write is 101 and changes
/// nothing; an ACL that is not an object is 107.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_decides_who_writes_an_object() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let Docs {
        ann_t,
        bob_t,
        public,
        private,
        readable,
        shared,
        ..
    } = ann_docs(&cluster).await;
    let doc = |id: &str| format!("/1/classes/Doc/{id}");
    let (anon_as, ann_as, bob_as) = (
        As::App,
        As::Session(ann_t.clone()),
        As::Session(bob_t.clone()),
    );
    let x_of = |id: &str, value: Value| After::Field {
        class: "Doc",
        id: id.to_string(),
        field: "x",
        value,
    };
    let docs = |n: u64| After::Count("Doc", n);
    let put = |name: &'static str, who: &As, id: &str| {
        Row::new(name, Method::PUT, doc(id))
            .auth(who.clone())
            .body(r#"{"x":1}"#)
    };
    let delete = |name: &'static str, who: &As, id: &str| {
        Row::new(name, Method::DELETE, doc(id)).auth(who.clone())
    };
    run_rows(
        &cluster,
        &[
            put("anonymous writes a public-read object", &anon_as, &readable)
                .fails(404, 101)
                .after(x_of(&readable, Value::Null)),
            put("a reader writes a shared object", &bob_as, &shared)
                .fails(404, 101)
                .after(x_of(&shared, Value::Null)),
            put("a stranger writes a private object", &bob_as, &private)
                .fails(404, 101)
                .after(x_of(&private, Value::Null)),
            delete("a stranger deletes a private object", &bob_as, &private)
                .fails(404, 101)
                .after(docs(4)),
            delete("a reader deletes a shared object", &bob_as, &shared)
                .fails(404, 101)
                .after(docs(4)),
            put("the owner writes a shared object", &ann_as, &shared)
                .succeeds(200)
                .after(x_of(&shared, json!(1))),
            put("anyone writes an object without ACL", &anon_as, &public)
                .succeeds(200)
                .after(x_of(&public, json!(1))),
            put(
                "the master key writes a private object",
                &As::Master,
                &private,
            )
            .succeeds(200)
            .after(x_of(&private, json!(1))),
            Row::new("an ACL that is not an object", Method::PUT, doc(&shared))
                .auth(ann_as.clone())
                .body(r#"{"ACL":[{"*":{"read":true}}]}"#)
                .fails(400, 107)
                .after(x_of(&shared, json!(1))),
        ],
    )
    .await;
}

/// Listings and counts are filtered before paging, so pages are full; an include the caller
/// may not read stays a Pointer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_hold_in_listings_and_includes() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let Docs {
        client,
        ann_t,
        bob_t,
        public,
        private,
        ..
    } = ann_docs(&cluster).await;
    let as_ann = client.clone().with_session(Some(&ann_t));
    let as_bob = client.clone().with_session(Some(&bob_t));
    let anon = client.clone();
    let labels = |c: &basalt_client::Client, params: Vec<(&'static str, &'static str)>| {
        let c = c.clone();
        async move {
            let r = c.query("Doc", &params).await.unwrap();
            let mut l: Vec<String> = r["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["label"].as_str().unwrap().to_string())
                .collect();
            l.sort();
            (l, r["count"].clone())
        }
    };
    assert_eq!(
        labels(&anon, vec![("count", "1")]).await,
        (vec!["public".into(), "readable".into()], json!(2))
    );
    assert_eq!(labels(&as_bob, vec![("count", "1")]).await.1, json!(3));
    assert_eq!(labels(&as_ann, vec![("count", "1")]).await.1, json!(4));
    assert_eq!(
        labels(
            &anon,
            vec![("limit", "1"), ("skip", "1"), ("order", "label")]
        )
        .await
        .0,
        vec!["readable".to_string()]
    );

    let ptr = |id: &str| json!({"__type": "Pointer", "className": "Doc", "objectId": id});
    let holder = anon
        .create_object("Holder", &json!({"a": ptr(&private), "b": ptr(&public)}))
        .await
        .unwrap()
        .object_id;
    let path = format!("/1/classes/Holder/{holder}?include=a,b");
    let h = anon
        .request(Method::GET, &path, None, false)
        .await
        .unwrap()
        .body;
    assert_eq!(h["a"], ptr(&private));
    assert_eq!(h["b"]["label"], "public");
    let h = as_ann
        .request(Method::GET, &path, None, false)
        .await
        .unwrap()
        .body;
    assert_eq!(h["a"]["label"], "private");
}

/// Each element of a batch acts with its own token; an unknown session acts as anonymous;
/// the owner may delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_element_acts_with_its_token_and_an_unknown_session_as_nobody() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let Docs {
        client,
        ann_t,
        bob_t,
        private,
        shared,
        ..
    } = ann_docs(&cluster).await;
    let as_ann = client.clone().with_session(Some(&ann_t));
    let anon = client.clone();
    let r = anon
        .request(Method::POST, "/1/batch", Some(&json!({"requests": [
            {"method": "PUT", "path": format!("/1/classes/Doc/{private}"), "body": {"y": 1}},
            {"method": "PUT", "path": format!("/1/classes/Doc/{private}"), "body": {"y": 2}, "token": ann_t},
            {"method": "DELETE", "path": format!("/1/classes/Doc/{shared}"), "token": bob_t},
        ]})), false)
        .await
        .unwrap();
    assert_eq!(r.body[0]["error"]["code"], 101);
    assert!(r.body[1]["success"]["updatedAt"].is_string());
    assert_eq!(r.body[2]["error"]["code"], 101);
    assert_eq!(
        as_ann.get_object("Doc", &private).await.unwrap().unwrap()["y"],
        2
    );
    assert!(as_ann.get_object("Doc", &shared).await.unwrap().is_some());

    let sees = |c: &basalt_client::Client, id: &str| {
        let (c, id) = (c.clone(), id.to_string());
        async move { c.get_object("Doc", &id).await.unwrap().is_some() }
    };
    let forged = client
        .clone()
        .with_session(Some("0123456789abcdef0123456789abcdefXXXXXXXXXX"));
    assert!(!sees(&forged, &private).await);
    as_ann
        .delete_object("Doc", &private)
        .await
        .expect("owner delete");
    assert!(!sees(&as_ann, &private).await);
}

/// Story — events in order: a grant inside a batch counts for the operations after it.
///
/// A request finds who it acts as once (one session check, however many objects, includes or
/// shards it touches), and each operation of a batch finds it anew: a role granted by one
/// operation counts for the next (a batch runs writes only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_are_found_once_per_request_and_anew_per_batch_operation() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let (owner, owner_t) = register_user(&cluster.client(0), "owner").await;
    let as_owner = || cluster.client(0).with_session(Some(&owner_t));
    let role = as_owner()
        .request(
            Method::POST,
            "/1/roles",
            Some(&json!({"name": "readers"})),
            false,
        )
        .await
        .expect("create the role")
        .body["objectId"]
        .as_str()
        .expect("role id")
        .to_string();
    let mut docs = Vec::new();
    for i in 0..8 {
        let body = json!({"i": i, "ACL": {"role:readers": {"read": true, "write": true}}});
        docs.push(
            as_owner()
                .create_object("Shelf", &body)
                .await
                .expect("create")
                .object_id,
        );
    }
    let checks = || cluster.metric(0, "basalt_session_checks_total");

    let before = checks().await;
    let listed = as_owner()
        .request(Method::GET, "/1/classes/Shelf", None, false)
        .await
        .expect("list");
    assert_eq!(
        listed.body["results"].as_array().map(Vec::len),
        Some(0),
        "not a reader yet"
    );
    assert_eq!(
        checks().await - before,
        1.0,
        "one session check for a listing of 4 shards"
    );

    let doc_path = format!("/1/classes/Shelf/{}", docs[0]);
    let add_owner = json!({"users": {"__op": "AddRelation", "objects": [
        {"__type": "Pointer", "className": "_User", "objectId": owner}]}});
    let before = checks().await;
    let r = as_owner()
        .request(
            Method::POST,
            "/1/batch",
            Some(&json!({"requests": [
                {"method": "PUT", "path": doc_path, "body": {"seen": true}},
                {"method": "PUT", "path": format!("/1/roles/{role}"), "body": add_owner},
                {"method": "PUT", "path": doc_path, "body": {"seen": true}},
            ]})),
            false,
        )
        .await
        .expect("batch");
    let slots = r.body.as_array().expect("slots").clone();
    assert_eq!(slots[0]["error"]["code"], 101, "{slots:?}");
    assert!(slots[1]["success"]["updatedAt"].is_string(), "{slots:?}");
    assert!(
        slots[2]["success"]["updatedAt"].is_string(),
        "the grant of the operation before counts: {slots:?}"
    );
    assert_eq!(
        checks().await - before,
        3.0,
        "one session check per operation"
    );

    let before = checks().await;
    let listed = as_owner()
        .request(Method::GET, "/1/classes/Shelf?limit=100", None, false)
        .await
        .expect("list");
    assert_eq!(listed.body["results"].as_array().map(Vec::len), Some(8));
    assert_eq!(
        checks().await - before,
        1.0,
        "one session check for a listing of 4 shards"
    );
}
