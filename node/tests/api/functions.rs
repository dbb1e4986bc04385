//! Cloud functions (spec 4.11, decisions/0023), black-box on real nodes: every endpoint's
//! answers and codes as a table (107, 310, 311, 10061); deploy, list and delete through one node
//! and call through every other at once; `request.params`, `user` and `master`; the data API as the caller (ACLs hold) or
//! with the master key, batch, counts, aggregates, user lookups and nested calls; runaway loops
//! and allocation bombs stopped at their limits while the node serves others; 200 concurrent
//! calls through 3 nodes; triggers that change, refuse and observe writes; scheduled functions
//! across a scheduler hand-over.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use basalt_client::Client;
use reqwest::Method;
use serde_json::{json, Value};

use crate::common::scenario::{run_rows, As, Row};
use crate::common::{assert_api_error, register_user, TestCluster};

/// Deploys `source` as `name` (JSON form, with `options` merged in) with the master key.
async fn deploy(m: &Client, name: &str, source: &str, options: Value) -> Value {
    let mut body = json!({ "source": source });
    if let Value::Object(o) = options {
        for (k, v) in o {
            body[k] = v;
        }
    }
    m.request(
        Method::PUT,
        &format!("/1/functions/{name}"),
        Some(&body),
        true,
    )
    .await
    .unwrap_or_else(|e| panic!("deploy {name}: {e}"))
    .body
}

async fn call(c: &Client, name: &str, params: Value) -> Result<Value, basalt_client::Error> {
    c.request(
        Method::POST,
        &format!("/1/functions/{name}"),
        Some(&params),
        false,
    )
    .await
    .map(|r| r.body)
}

async fn result(c: &Client, name: &str, params: Value) -> Value {
    let body = call(c, name, params)
        .await
        .unwrap_or_else(|e| panic!("call {name}: {e}"));
    body["result"].clone()
}

/// Every `/1/functions` endpoint as a table: calls with the app's keys, deploys, lists, shows
/// and deletes with the master key only (10061 otherwise), and each refusal's code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_endpoints_answer_as_their_table_says() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let m = cluster.master_client(0);
    deploy(&m, "echo", "return request.params;", json!({})).await;
    deploy(&m, "fails", "throw new Error('no luck');", json!({})).await;
    deploy(
        &m,
        "refuses",
        "throw new Basalt.Error(4321, 'not today');",
        json!({}),
    )
    .await;
    deploy(&m, "yearly", "return 1;", json!({"cron": "0 0 1 1 *"})).await;
    let put = |name: &'static str, path: &str, body: &str| {
        Row::new(name, Method::PUT, path)
            .auth(As::Master)
            .body(body.to_string())
    };
    let rows = vec![
        Row::new("call", Method::POST, "/1/functions/echo")
            .body(r#"{"a": 1}"#)
            .succeeds(200),
        Row::new(
            "call with the master key",
            Method::POST,
            "/1/functions/echo",
        )
        .auth(As::Master)
        .body("{}")
        .succeeds(200),
        Row::new("call without keys", Method::POST, "/1/functions/echo")
            .auth(As::Nobody)
            .body("{}")
            .unauthorized(),
        Row::new("call with a wrong key", Method::POST, "/1/functions/echo")
            .auth(As::WrongKey)
            .body("{}")
            .unauthorized(),
        Row::new(
            "call with parameters that are not an object",
            Method::POST,
            "/1/functions/echo",
        )
        .body("[1]")
        .fails(400, 107),
        Row::new(
            "call with malformed JSON",
            Method::POST,
            "/1/functions/echo",
        )
        .body("{")
        .fails(400, 107),
        Row::new(
            "call an unknown function",
            Method::POST,
            "/1/functions/nothing",
        )
        .body("{}")
        .fails(404, 311),
        Row::new(
            "call a name no function may have",
            Method::POST,
            "/1/functions/9bad",
        )
        .body("{}")
        .fails(404, 311),
        Row::new("a function that throws", Method::POST, "/1/functions/fails")
            .body("{}")
            .fails(400, 310),
        Row::new(
            "a Basalt.Error keeps its code",
            Method::POST,
            "/1/functions/refuses",
        )
        .body("{}")
        .fails(400, 4321),
        Row::new(
            "a scheduled function started by a client",
            Method::POST,
            "/1/functions/yearly",
        )
        .body("{}")
        .fails(400, 10061),
        Row::new(
            "deploy without the master key",
            Method::PUT,
            "/1/functions/x",
        )
        .body(r#"{"source": "return 1;"}"#)
        .fails(400, 10061),
        put(
            "deploy a source that does not compile",
            "/1/functions/x",
            r#"{"source": "return (;"}"#,
        )
        .fails(400, 107),
        put(
            "deploy an empty source",
            "/1/functions/x",
            r#"{"source": "  "}"#,
        )
        .fails(400, 107),
        put(
            "deploy under a name no function may have",
            "/1/functions/9bad",
            r#"{"source": "return 1;"}"#,
        )
        .fails(400, 107),
        put(
            "deploy with a cron that is none",
            "/1/functions/x",
            r#"{"source": "return 1;", "cron": "every minute"}"#,
        )
        .fails(400, 107),
        put(
            "deploy a trigger without its class",
            "/1/functions/x",
            r#"{"source": "return 1;", "trigger": "beforeSave"}"#,
        )
        .fails(400, 107),
        put(
            "deploy with an unknown member",
            "/1/functions/x",
            r#"{"source": "return 1;", "other": 1}"#,
        )
        .fails(400, 107),
        Row::new("list without the master key", Method::GET, "/1/functions").fails(400, 10061),
        Row::new(
            "show without the master key",
            Method::GET,
            "/1/functions/echo",
        )
        .fails(400, 10061),
        Row::new(
            "delete without the master key",
            Method::DELETE,
            "/1/functions/echo",
        )
        .fails(400, 10061),
        Row::new("list", Method::GET, "/1/functions")
            .auth(As::Master)
            .succeeds(200),
        Row::new("show", Method::GET, "/1/functions/echo")
            .auth(As::Master)
            .succeeds(200),
        Row::new(
            "show an unknown function",
            Method::GET,
            "/1/functions/nothing",
        )
        .auth(As::Master)
        .fails(404, 311),
        Row::new(
            "delete an unknown function",
            Method::DELETE,
            "/1/functions/nothing",
        )
        .auth(As::Master)
        .fails(404, 311),
        put("deploy", "/1/functions/later", r#"{"source": "return 2;"}"#).succeeds(200),
        Row::new("delete", Method::DELETE, "/1/functions/later")
            .auth(As::Master)
            .succeeds(200),
    ];
    run_rows(&cluster, &rows).await;
    // What must not happen: no refused deploy left a function behind.
    let listed = m
        .request(Method::GET, "/1/functions", None, true)
        .await
        .expect("list");
    let names: BTreeSet<&str> = listed.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["echo", "fails", "refuses", "yearly"]),
        "functions left"
    );
}

/// Story — through every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_deploy_call_list_and_delete_through_every_node() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let m0 = cluster.master_client(0);
    let clients: Vec<Client> = (0..3).map(|i| cluster.client(i)).collect();

    // The simplest source: the body of an async function of `request`, deployed as raw text.
    let raw = reqwest::Client::new()
        .put(format!("http://{}/1/functions/add", cluster.nodes[0].http))
        .header("X-Service-Application-Id", &cluster.keys.application_id)
        .header("X-Service-REST-API-Key", &cluster.keys.rest_key)
        .header("X-Service-Master-Key", cluster.master_key())
        .header("Content-Type", "application/javascript")
        .body("return request.params.a + request.params.b;")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
    let deployed: Value = raw.json().await.unwrap();
    assert_eq!(
        (&deployed["name"], &deployed["version"]),
        (&json!("add"), &json!(1))
    );
    // Callable through every node at once.
    for c in &clients {
        assert_eq!(result(c, "add", json!({"a": 1, "b": 2})).await, 3);
    }
    // A new version replaces it everywhere at once.
    let v2 = deploy(
        &m0,
        "add",
        "return request.params.a * 10 + request.params.b;",
        json!({}),
    )
    .await;
    assert_eq!(v2["version"], 2);
    for c in &clients {
        assert_eq!(result(c, "add", json!({"a": 1, "b": 2})).await, 12);
    }
    deploy(
        &m0,
        "hello",
        "return 'hi ' + (request.params.name || 'there');",
        json!({}),
    )
    .await;
    let listed = cluster
        .master_client(2)
        .request(Method::GET, "/1/functions", None, true)
        .await
        .unwrap()
        .body;
    let names: Vec<(&str, u64)> = listed["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["version"].as_u64().unwrap()))
        .collect();
    assert_eq!(names, [("add", 2), ("hello", 1)]);
    let one = cluster
        .master_client(1)
        .request(Method::GET, "/1/functions/add", None, true)
        .await
        .unwrap()
        .body;
    assert_eq!(
        one["source"],
        "return request.params.a * 10 + request.params.b;"
    );

    // The codes: a body that is not a JSON object 107, unknown 311, a throw 310 with its
    // message, management without the master key 10061, a source that does not compile 107.
    for body in ["", "[]", "\"x\"", "{"] {
        let r = reqwest::Client::new()
            .post(format!(
                "http://{}/1/functions/hello",
                cluster.nodes[1].http
            ))
            .header("X-Service-Application-Id", &cluster.keys.application_id)
            .header("X-Service-REST-API-Key", &cluster.keys.rest_key)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body:?}");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["code"], 107, "{body:?}");
    }
    assert_api_error(
        call(&clients[1], "nothing", json!({})).await,
        404,
        311,
        "unknown",
    );
    assert_api_error(
        call(&clients[1], "bad name!", json!({})).await,
        404,
        311,
        "bad name",
    );
    deploy(
        &m0,
        "fails",
        "throw new Error('no luck: ' + request.params.n);",
        json!({}),
    )
    .await;
    match call(&clients[2], "fails", json!({"n": 7})).await {
        Err(basalt_client::Error::Api { code, message, .. }) => {
            assert_eq!(code, Some(310));
            assert_eq!(message, "no luck: 7");
        }
        other => panic!("a throw: {other:?}"),
    }
    // A `Basalt.Error` the function throws itself fails the call with its code.
    deploy(
        &m0,
        "refuses",
        "throw new Basalt.Error(4321, 'not today');",
        json!({}),
    )
    .await;
    match call(&clients[1], "refuses", json!({})).await {
        Err(basalt_client::Error::Api {
            status,
            code,
            message,
            ..
        }) => {
            assert_eq!((status, code), (400, Some(4321)));
            assert_eq!(message, "not today");
        }
        other => panic!("a Basalt.Error: {other:?}"),
    }
    // 200 concurrent calls through the 3 nodes, each answered with its own result.
    let calls = (0..200).map(|i| {
        let c = clients[i % 3].clone();
        async move { (i, result(&c, "add", json!({"a": i, "b": 1})).await) }
    });
    for (i, r) in futures::future::join_all(calls).await {
        assert_eq!(r, json!(i * 10 + 1), "call {i}");
    }

    // Deploys racing through the three nodes: each gets its own version, the last one wins.
    let deploys = (0..12).map(|i| {
        let m = cluster.master_client(i % 3);
        async move {
            let body = json!({"source": format!("return {i};")});
            let r = m
                .request(Method::PUT, "/1/functions/racy", Some(&body), true)
                .await
                .unwrap();
            (r.body["version"].as_u64().unwrap(), i)
        }
    });
    let mut versions: Vec<(u64, usize)> = futures::future::join_all(deploys).await;
    versions.sort();
    let numbers: Vec<u64> = versions.iter().map(|v| v.0).collect();
    assert_eq!(
        numbers,
        (1..=12).collect::<Vec<u64>>(),
        "one version per deploy"
    );
    let last = versions[11].1;
    for c in &clients {
        assert_eq!(result(c, "racy", json!({})).await, json!(last));
    }

    // Deleted through one node: unknown through every node at once.
    let r = cluster
        .master_client(1)
        .request(Method::DELETE, "/1/functions/add", None, true)
        .await
        .unwrap();
    assert_eq!(r.body["msg"], "ok");
    for c in &clients {
        assert_api_error(
            call(c, "add", json!({"a": 1, "b": 2})).await,
            404,
            311,
            "deleted",
        );
    }
    let again = m0
        .request(Method::DELETE, "/1/functions/add", None, true)
        .await;
    assert_api_error(again, 404, 311, "deleted twice");
    let calls = cluster.metric(0, "basalt_function_calls_total").await
        + cluster.metric(1, "basalt_function_calls_total").await
        + cluster.metric(2, "basalt_function_calls_total").await;
    assert!(calls >= 200.0, "calls counted: {calls}");
}

/// A function sees its caller: the user of the session (no password, no internal fields),
/// the params as sent, nobody without a session, the master key's call as the master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_sees_its_caller() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let m = cluster.master_client(0);
    let anon = cluster.client(1);
    let (alice_id, alice_token) = register_user(&cluster.client(0), "alice").await;
    let alice = cluster.client(1).with_session(Some(&alice_token));
    deploy(
        &m,
        "whoami",
        "return { user: request.user && request.user.username, id: request.user && \
         request.user.objectId, master: request.master, params: request.params, \
         password: request.user && 'password' in request.user, \
         sessions: request.user && Object.keys(request.user).filter((k) => k.startsWith('_')) };",
        json!({}),
    )
    .await;
    let me = result(&alice, "whoami", json!({"x": [1, {"y": null}]})).await;
    assert_eq!(
        me,
        json!({"user": "alice", "id": alice_id, "master": false, "params": {"x": [1, {"y": null}]},
            "password": false, "sessions": []})
    );
    let nobody = result(&anon, "whoami", json!({})).await;
    assert_eq!(
        (&nobody["user"], &nobody["master"]),
        (&Value::Null, &json!(false))
    );
    let master = cluster
        .master_client(2)
        .request(Method::POST, "/1/functions/whoami", Some(&json!({})), true)
        .await
        .unwrap()
        .body;
    assert_eq!(master["result"]["master"], true);
}

/// A function reads and writes as its caller: a private note written through it is read back
/// by its owner only (another user meets 101 as a `Basalt.Error`, unless the function uses
/// the master key); an error the function does not catch is its own failure, 310.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_reads_and_writes_as_its_caller() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let m = cluster.master_client(0);
    let (_, alice_token) = register_user(&cluster.client(0), "alice").await;
    let (_, bob_token) = register_user(&cluster.client(0), "bob").await;
    let alice = cluster.client(1).with_session(Some(&alice_token));
    let bob = cluster.client(2).with_session(Some(&bob_token));
    deploy(
        &m,
        "writeNote",
        "const me = request.user.objectId;\n\
         const acl = {}; acl[me] = {read: true, write: true};\n\
         const made = await Basalt.create('Note', {text: request.params.text, n: 1, ACL: acl});\n\
         await Basalt.update('Note', made.objectId, {n: {__op: 'Increment', amount: 4}});\n\
         return made.objectId;",
        json!({}),
    )
    .await;
    deploy(
        &m,
        "readNote",
        "try { const o = await Basalt.get('Note', request.params.id, \
         {useMasterKey: request.params.master}); return {text: o.text, n: o.n}; } \
         catch (e) { return {code: e.code, message: e.message, isError: e instanceof Basalt.Error}; }",
        json!({}),
    )
    .await;
    let id = result(&alice, "writeNote", json!({"text": "mine"})).await;
    let id = id.as_str().unwrap().to_string();
    assert_eq!(
        result(&alice, "readNote", json!({"id": id})).await,
        json!({"text": "mine", "n": 5})
    );
    let refused = result(&bob, "readNote", json!({"id": id})).await;
    assert_eq!(
        (&refused["code"], &refused["isError"]),
        (&json!(101), &json!(true))
    );
    assert_eq!(
        result(&bob, "readNote", json!({"id": id, "master": true})).await,
        json!({"text": "mine", "n": 5})
    );
    // An error the function does not catch is its own failure: 310 with the message.
    deploy(
        &m,
        "getMissing",
        "return await Basalt.get('Note', 'nosuchid00');",
        json!({}),
    )
    .await;
    assert_api_error(
        call(&alice, "getMissing", json!({})).await,
        400,
        310,
        "uncaught",
    );
}

/// The data API inside a function: queries, counts, aggregates, batches, deletes, user
/// lookups and nested calls; a function calling itself without end stops at the depth
/// limit, 310.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_query_write_and_call_each_other() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let m = cluster.master_client(0);
    let anon = cluster.client(1);
    register_user(&cluster.client(0), "bob").await;
    deploy(
        &m,
        "scores",
        "const made = await Basalt.batch([1, 2, 3, 4, 5, 6].map((i) => ({method: 'POST', \
         path: '/1/classes/Score', body: {points: i, team: i % 2 ? 'odd' : 'even'}})));\n\
         const top = await Basalt.find('Score', {where: {points: {$gte: 3}}, order: '-points', \
         limit: 2, keys: 'points'});\n\
         const count = await Basalt.count('Score', {team: 'odd'});\n\
         const sums = await Basalt.aggregate('Score', {groupby: 'team', sum: 'points', \
         order: 'team'});\n\
         await Basalt.delete('Score', made[0].success.objectId);\n\
         const left = await Basalt.count('Score');\n\
         const bob = await Basalt.users.first({where: {username: 'bob'}});\n\
         const doubled = await Basalt.run('double', {n: left});\n\
         return {made: made.length, top: top.map((o) => o.points), count, sums, left, \
         bob: bob.username, doubled};",
        json!({}),
    )
    .await;
    deploy(&m, "double", "return request.params.n * 2;", json!({})).await;
    let out = result(&cluster.client(2), "scores", json!({})).await;
    assert_eq!(out["made"], 6);
    assert_eq!(out["top"], json!([6, 5]));
    assert_eq!(out["count"], 3);
    let sums = out["sums"].as_array().unwrap_or_else(|| panic!("{out}"));
    let sums: Vec<(&str, i64)> = sums
        .iter()
        .map(|r| {
            (
                r["team"].as_str().unwrap(),
                r["_sumPoints"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(sums, [("even", 12), ("odd", 9)]);
    assert_eq!((&out["left"], &out["doubled"]), (&json!(5), &json!(10)));
    assert_eq!(out["bob"], "bob");

    // A function that calls itself without end is stopped at the depth limit: 310.
    deploy(
        &m,
        "forever",
        "return await Basalt.run('forever', {});",
        json!({}),
    )
    .await;
    assert_api_error(
        call(&anon, "forever", json!({})).await,
        400,
        310,
        "endless nesting",
    );
}

/// Story — a bound: `fetch` reaches the hosts the app allows and no other (310 naming
/// `fetchAllow`), and an allowed host answering without end is cut off at the cap as the
/// answer streams, the node's memory never holding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_reaches_allowed_hosts_only_and_is_cut_off_at_its_cap() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let m = cluster.master_client(0);
    let anon = cluster.client(0);
    let upstream = axum::Router::new().route(
        "/price",
        axum::routing::get(|| async { axum::Json(json!({"price": 42})) }),
    );
    let port = crate::common::serve_on_loopback(upstream).await;
    cluster
        .set_app_settings(json!({"functions": {"fetchAllow": [format!("127.0.0.1:{port}")]}}))
        .await;
    deploy(
        &m,
        "price",
        "const r = await fetch(request.params.url); return {status: r.status, body: await r.json()};",
        json!({}),
    )
    .await;
    let url = format!("http://127.0.0.1:{port}/price");
    assert_eq!(
        result(&anon, "price", json!({"url": url})).await,
        json!({"status": 200, "body": {"price": 42}})
    );
    let elsewhere = format!("http://localhost:{port}/price");
    match call(&anon, "price", json!({"url": elsewhere})).await {
        Err(basalt_client::Error::Api { code, message, .. }) => {
            assert_eq!(code, Some(310));
            assert!(message.contains("fetchAllow"), "{message}");
        }
        other => panic!("a host not allowed: {other:?}"),
    }

    // An allowed host answering without end (chunked, no length) is cut off at the cap as the
    // answer streams: the node's memory never holds it.
    let endless = axum::Router::new().route(
        "/endless",
        axum::routing::get(|| async {
            let piece = bytes::Bytes::from(vec![b'x'; 1 << 20]);
            let pieces = futures::stream::iter(
                (0..1536).map(move |_| Ok::<_, std::io::Error>(piece.clone())),
            );
            axum::body::Body::from_stream(pieces)
        }),
    );
    let endless_port = crate::common::serve_on_loopback(endless).await;
    cluster
        .set_app_settings(
            json!({"functions": {"fetchAllow": [format!("127.0.0.1:{endless_port}")]}}),
        )
        .await;
    deploy(
        &m,
        "swallow",
        "const r = await fetch(request.params.url); return (await r.text()).length;",
        json!({}),
    )
    .await;
    let (_, peak_before) = cluster.memory_kib(0);
    let url = format!("http://127.0.0.1:{endless_port}/endless");
    match call(&anon, "swallow", json!({"url": url})).await {
        Err(basalt_client::Error::Api { code, message, .. }) => {
            assert_eq!(code, Some(310));
            assert!(message.contains("larger than"), "{message}");
        }
        other => panic!("a 1.5 GiB answer: {other:?}"),
    }
    let (_, peak_after) = cluster.memory_kib(0);
    assert!(
        peak_after < peak_before + 200 * 1024,
        "peak RSS grew from {peak_before} to {peak_after} KiB"
    );
}

/// Timers wait, and console lines go to the node's log with the request id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_wait_and_console_lines_reach_the_log() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let m = cluster.master_client(0);
    deploy(
        &m,
        "later",
        "console.log('waiting for', request.params.ms);\n\
         await new Promise((r) => setTimeout(r, request.params.ms)); return 'done';",
        json!({}),
    )
    .await;
    let r = cluster
        .client(0)
        .request(
            Method::POST,
            "/1/functions/later",
            Some(&json!({"ms": 30})),
            false,
        )
        .await
        .unwrap();
    assert_eq!(r.body["result"], "done");
    let log = cluster.log_text(0);
    assert!(
        log.lines()
            .any(|l| l.contains("waiting for 30") && l.contains("request_id")),
        "the console line is in the node's log with its request id"
    );
}

/// Story — a bound: runaway code under load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_functions_are_stopped_at_their_limits_while_the_node_serves_others() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    cluster
        .set_app_settings(json!({"functions": {"timeoutMs": 1500, "memoryMb": 16}}))
        .await;
    let m = cluster.master_client(0);
    let c = cluster.client(0);
    deploy(&m, "spin", "while (true) {}", json!({})).await;
    deploy(
        &m,
        "hog",
        "const kept = []; while (true) kept.push('x'.repeat(100000) + kept.length);",
        json!({}),
    )
    .await;
    deploy(
        &m,
        "deep",
        "const f = (n) => f(n + 1) + 1; return f(0);",
        json!({}),
    )
    .await;
    // Stopped with data calls and timers in flight.
    deploy(
        &m,
        "busy",
        "Basalt.find('Thing', {}); setTimeout(() => {}, 60000); while (true) {}",
        json!({}),
    )
    .await;
    deploy(&m, "ok", "return request.params.n + 1;", json!({})).await;
    c.request(
        Method::POST,
        "/1/classes/Thing",
        Some(&json!({"a": 1})),
        false,
    )
    .await
    .unwrap();

    let started = Instant::now();
    let runaways = async {
        let (spin, hog) = tokio::join!(call(&c, "spin", json!({})), call(&c, "hog", json!({})));
        (spin, hog, started.elapsed())
    };
    // Meanwhile the node answers other requests, functions included.
    let others = async {
        let mut answered = 0;
        while started.elapsed() < Duration::from_millis(1200) {
            let r = c.query("Thing", &[]).await.unwrap();
            assert_eq!(r["results"].as_array().unwrap().len(), 1);
            assert_eq!(result(&c, "ok", json!({"n": answered})).await, answered + 1);
            answered += 1;
        }
        answered
    };
    let ((spin, hog, took), answered) = tokio::join!(runaways, others);
    assert!(
        answered >= 3,
        "other requests were served meanwhile: {answered}"
    );
    match spin {
        Err(basalt_client::Error::Api { code, message, .. }) => {
            assert_eq!(code, Some(310));
            assert!(message.contains("longer than its limit"), "{message}");
        }
        other => panic!("while(true): {other:?}"),
    }
    match hog {
        Err(basalt_client::Error::Api { code, message, .. }) => {
            assert_eq!(code, Some(310));
            assert!(message.contains("out of memory"), "{message}");
        }
        other => panic!("allocation bomb: {other:?}"),
    }
    assert!(
        took < Duration::from_secs(6),
        "stopped at the limit: {took:?}"
    );
    for _ in 0..3 {
        assert_api_error(
            call(&c, "busy", json!({})).await,
            400,
            310,
            "calls in flight",
        );
    }
    match call(&c, "deep", json!({})).await {
        Err(basalt_client::Error::Api { code, message, .. }) => {
            assert_eq!(code, Some(310));
            assert!(message.contains("stack"), "{message}");
        }
        other => panic!("endless recursion: {other:?}"),
    }
    // No state leaks between invocations.
    deploy(
        &m,
        "counter",
        "globalThis.seen = (globalThis.seen || 0) + 1; return [globalThis.seen, typeof require, \
         typeof process, typeof std];",
        json!({}),
    )
    .await;
    for _ in 0..3 {
        assert_eq!(
            result(&c, "counter", json!({})).await,
            json!([1, "undefined", "undefined", "undefined"])
        );
    }
    assert!(cluster.metric(0, "basalt_function_calls_total{").await >= 3.0);
}

/// One app's 12 calls of a function that waits 4 s take only its share of a node's 4 slots
/// (half): another app's function, which may wait only 1 s for a slot, still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_apps_slow_functions_leave_slots_for_the_others() {
    let cluster = TestCluster::start(1, &[], &["--function-threads", "4"]).await;
    let hog_app = cluster.create_app(0, "hog").await;
    let hog = cluster.app_client(0, &hog_app);
    deploy(
        &hog,
        "slow",
        "await new Promise((r) => setTimeout(r, 4000)); return 1;",
        json!({}),
    )
    .await;
    cluster
        .set_app_settings(json!({"functions": {"timeoutMs": 1000}}))
        .await;
    let m = cluster.master_client(0);
    deploy(&m, "quick", "return request.params.n * 2;", json!({})).await;
    assert_api_error(
        cluster
            .try_app_settings(&json!({"functions": {"concurrency": 0}}))
            .await,
        400,
        107,
        "a share of no slot",
    );
    let calls: Vec<_> = (0..12)
        .map(|_| {
            let c = hog.clone();
            tokio::spawn(async move { call(&c, "slow", json!({})).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let c = cluster.client(0);
    for n in 0..3 {
        assert_eq!(result(&c, "quick", json!({"n": n})).await, n * 2);
    }
    let mut done = 0;
    for call in calls {
        if call.await.unwrap().is_ok() {
            done += 1;
        }
    }
    assert!(
        (1..=6).contains(&done),
        "two at a time, each waiting at most its 10 s wall time for its turn: {done}"
    );
}

/// One app's large bodies in flight hold at most a quarter of a node's request memory: with
/// 64 MiB, a 4 MiB body (counted four times) takes all of an app's share, so its three calls
/// of a function that waits 3 s run one after another and the one still waiting after 5 s
/// answers 503 — while another app's call with as large a body goes through at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_apps_bodies_in_flight_take_only_its_share_of_request_memory() {
    let cluster = TestCluster::start(1, &[], &["--request-memory-mb", "64"]).await;
    let hold = "await new Promise((r) => setTimeout(r, 3000)); return request.params.pad.length;";
    let a = cluster.master_client(0);
    deploy(&a, "hold", hold, json!({})).await;
    let other_app = cluster.create_app(0, "other").await;
    let b = cluster.app_client(0, &other_app);
    deploy(&b, "hold", hold, json!({})).await;
    let pad = "x".repeat(4 << 20);
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let (c, pad) = (cluster.client(0), pad.clone());
            tokio::spawn(async move { call(&c, "hold", json!({ "pad": pad })).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let other = call(&b, "hold", json!({ "pad": pad })).await;
    assert_eq!(other.expect("the other app's call")["result"], 4 << 20);
    let (mut ok, mut shed) = (0, 0);
    for c in calls {
        match c.await.unwrap() {
            Ok(_) => ok += 1,
            Err(basalt_client::Error::Api { status: 503, .. }) => shed += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(ok >= 1 && shed >= 1, "{ok} answered, {shed} shed");
}

/// `Post`'s beforeSave: trims and capitalises the title, marks creates, refuses a
/// forbidden title (142).
const CLEAN_TITLE: &str = "const o = request.object;\n\
     if (o.title === 'forbidden') throw new Basalt.Error(142, 'that title is not allowed');\n\
     if (typeof o.title === 'string') o.title = o.title.trim().toUpperCase();\n\
     if (!request.objectId) o.checked = true;";

/// `Post`'s beforeDelete: a pinned post stays (119).
const KEEP_PINNED: &str =
    "if (request.object.pinned) throw new Basalt.Error(119, 'pinned posts stay');";

/// Deploys `Post`'s beforeSave and beforeDelete triggers.
async fn deploy_before_triggers(m: &Client) {
    let before_save = json!({"trigger": "beforeSave", "className": "Post"});
    deploy(m, "cleanTitle", CLEAN_TITLE, before_save).await;
    let before_delete = json!({"trigger": "beforeDelete", "className": "Post"});
    deploy(m, "keepPinned", KEEP_PINNED, before_delete).await;
}

/// A trigger that writes its own class through a batch recurses only so deep; triggers are
/// not callable (311).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_recurse_only_so_deep_and_are_not_callable() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let (m, c) = (cluster.master_client(0), cluster.client(2));
    deploy(
        &m,
        "loop",
        "await Basalt.batch([{method: 'POST', path: '/1/classes/Loop', body: {n: 1}}]);",
        json!({"trigger": "beforeSave", "className": "Loop"}),
    )
    .await;
    let r = c
        .request(
            Method::POST,
            "/1/classes/Loop",
            Some(&json!({"n": 0})),
            false,
        )
        .await;
    assert!(r.is_ok(), "the outermost write goes through: {r:?}");
    let loops = c
        .query("Loop", &[("count", "1"), ("limit", "0")])
        .await
        .unwrap();
    let n = loops["count"].as_u64().unwrap();
    assert!((2..=10).contains(&n), "bounded recursion wrote {n} objects");
    assert_api_error(call(&c, "loop", json!({})).await, 404, 311, "a trigger");
}

/// beforeSave changes a create and an update, through any node; what the before-triggers
/// refuse (as a table: a create, an update, a delete) answers their code and writes nothing;
/// in a batch a refused operation fails alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_triggers_change_or_refuse_writes() {
    use crate::common::scenario::After;
    let cluster = TestCluster::start(3, &[], &[]).await;
    let (m, c) = (cluster.master_client(0), cluster.client(2));
    deploy_before_triggers(&m).await;
    let made = c
        .create_object("Post", &json!({"title": "  hello "}))
        .await
        .unwrap();
    let id = made.object_id;
    let got = cluster
        .client(1)
        .get_object("Post", &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (&got["title"], &got["checked"]),
        (&json!("HELLO"), &json!(true))
    );
    cluster
        .client(0)
        .update_object("Post", &id, &json!({"title": "again"}))
        .await
        .unwrap();
    let pinned = c
        .create_object("Post", &json!({"title": "p", "pinned": true}))
        .await
        .unwrap();
    let path = |id: &str| format!("/1/classes/Post/{id}");
    let title_is = |v: &str| After::Field {
        class: "Post",
        id: id.clone(),
        field: "title",
        value: json!(v),
    };
    let rows = vec![
        Row::new(
            "a create beforeSave refuses",
            Method::POST,
            "/1/classes/Post",
        )
        .body(r#"{"title": "forbidden"}"#)
        .fails(400, 142)
        .after(After::Count("Post", 2)),
        Row::new("an update beforeSave refuses", Method::PUT, path(&id))
            .body(r#"{"title": "forbidden"}"#)
            .fails(400, 142)
            .after(title_is("AGAIN")),
        Row::new(
            "a delete beforeDelete refuses",
            Method::DELETE,
            path(&pinned.object_id),
        )
        .fails(400, 119)
        .after(After::Count("Post", 2)),
    ];
    run_rows(&cluster, &rows).await;
    let kept = c.get_object("Post", &id).await.unwrap().unwrap();
    assert_eq!(kept["title"], "AGAIN", "as node 3 reads it");
    let batch = json!({"requests": [
        {"method": "POST", "path": "/1/classes/Post", "body": {"title": "b1"}},
        {"method": "POST", "path": "/1/classes/Post", "body": {"title": "forbidden"}},
    ]});
    let r = c
        .request(Method::POST, "/1/batch", Some(&batch), false)
        .await
        .unwrap()
        .body;
    assert_eq!(r[1]["error"]["code"], 142, "{r}");
    let b1 = r[0]["success"]["objectId"].as_str().unwrap();
    assert_eq!(
        c.get_object("Post", b1).await.unwrap().unwrap()["title"],
        "B1"
    );
}

/// Story — events in order: the after-triggers observe every committed write (a create, an
/// update, one operation of a batch, a delete) and none that a before-trigger refused; an
/// afterSave that fails does not undo its write; the triggers list with their class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_triggers_observe_every_committed_write_and_only_those() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let (m, c) = (cluster.master_client(0), cluster.client(2));
    deploy_before_triggers(&m).await;
    let log = |what: &str, id: &str| {
        format!(
            "await Basalt.create('Log', {{what: '{what}', post: {id}, \
             title: request.object.title}}, {{useMasterKey: true}});"
        )
    };
    let after_save = json!({"trigger": "afterSave", "className": "Post"});
    deploy(
        &m,
        "logSave",
        &log("saved", "request.object.objectId"),
        after_save.clone(),
    )
    .await;
    let after_delete = json!({"trigger": "afterDelete", "className": "Post"});
    deploy(
        &m,
        "logDelete",
        &log("deleted", "request.objectId"),
        after_delete,
    )
    .await;
    let id = c
        .create_object("Post", &json!({"title": "  hello "}))
        .await
        .unwrap()
        .object_id;
    cluster
        .client(0)
        .update_object("Post", &id, &json!({"title": "again"}))
        .await
        .unwrap();
    let refused = c
        .create_object("Post", &json!({"title": "forbidden"}))
        .await;
    assert_api_error(refused, 400, 142, "refused create");
    let refused = c
        .update_object("Post", &id, &json!({"title": "forbidden"}))
        .await;
    assert_api_error(refused, 400, 142, "refused update");
    let batch = json!({"requests": [
        {"method": "POST", "path": "/1/classes/Post", "body": {"title": "b1", "pinned": true}},
        {"method": "POST", "path": "/1/classes/Post", "body": {"title": "forbidden"}},
    ]});
    let r = c
        .request(Method::POST, "/1/batch", Some(&batch), false)
        .await
        .unwrap()
        .body;
    let pinned = r[0]["success"]["objectId"].as_str().unwrap().to_string();
    let kept = c
        .request(
            Method::DELETE,
            &format!("/1/classes/Post/{pinned}"),
            None,
            false,
        )
        .await;
    assert_api_error(kept, 400, 119, "refused delete");
    c.request(
        Method::DELETE,
        &format!("/1/classes/Post/{id}"),
        None,
        false,
    )
    .await
    .unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    let logged = loop {
        let logs = m
            .request(Method::GET, "/1/classes/Log?limit=100", None, true)
            .await;
        let rows: BTreeSet<(String, String, String)> = logs.unwrap().body["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let text = |k: &str| l[k].as_str().unwrap_or("").to_string();
                (text("what"), text("post"), text("title"))
            })
            .collect();
        if rows.len() >= 4 || Instant::now() > deadline {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let want: BTreeSet<(String, String, String)> = [
        ("saved", id.as_str(), "HELLO"),
        ("saved", id.as_str(), "AGAIN"),
        ("saved", pinned.as_str(), "B1"),
        ("deleted", id.as_str(), "AGAIN"),
    ]
    .into_iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(logged, want);

    deploy(
        &m,
        "logSave",
        "throw new Error('the log is down');",
        after_save,
    )
    .await;
    let kept = c
        .create_object("Post", &json!({"title": "kept"}))
        .await
        .unwrap();
    let stored = c
        .get_object("Post", &kept.object_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored["title"], "KEPT");
    let listed = m
        .request(Method::GET, "/1/functions", None, true)
        .await
        .unwrap()
        .body;
    let triggers: Vec<(&str, &str, &str)> = listed["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let text = |k: &str| f[k].as_str().unwrap_or("");
            (text("name"), text("trigger"), text("className"))
        })
        .collect();
    assert_eq!(
        triggers,
        [
            ("cleanTitle", "beforeSave", "Post"),
            ("keepPinned", "beforeDelete", "Post"),
            ("logDelete", "afterDelete", "Post"),
            ("logSave", "afterSave", "Post"),
        ]
    );
}

/// The ticks a scheduled function recorded (objects of `Tick`), as seconds since the epoch.
async fn ticks(m: &Client) -> Vec<i64> {
    let r = m
        .request(
            Method::GET,
            "/1/classes/Tick?limit=1000&order=at",
            None,
            true,
        )
        .await
        .unwrap()
        .body;
    r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let at = o["at"].as_str().unwrap();
            chrono::NaiveDateTime::parse_from_str(at, "%Y-%m-%d %H:%M:%S")
                .unwrap()
                .and_utc()
                .timestamp()
        })
        .collect()
}

/// Story — a fault: the scheduler hands over mid-schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_functions_run_each_tick_once_across_a_scheduler_handover() {
    let mut cluster = TestCluster::start(3, &[], &[]).await;
    let m = cluster.master_client(0);
    deploy(
        &m,
        "everySecond",
        "await Basalt.create('Tick', {at: request.schedule.tick, master: request.master});",
        json!({"cron": "* * * * * *"}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while ticks(&m).await.len() < 3 {
        assert!(Instant::now() < deadline, "the schedule did not start");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The node running the scheduler is killed; another takes over.
    let mut scheduler = None;
    for i in 0..3 {
        if cluster
            .metric(i, "basalt_function_scheduled_runs_total")
            .await
            > 0.0
        {
            scheduler = Some(i);
        }
    }
    let scheduler = scheduler.expect("the scheduler's node");
    cluster.kill(scheduler);
    let other = (scheduler + 1) % 3;
    let m = cluster.master_client(other);
    let before = ticks(&m).await;
    let last_before = *before.last().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = ticks(&m).await;
        if now.last().is_some_and(|t| *t >= last_before + 8) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the schedule did not resume: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Every second from the first tick to the last, each exactly once.
    let all = ticks(&m).await;
    let (first, last) = (all[0], *all.last().unwrap());
    let want: Vec<i64> = (first..=last).collect();
    assert_eq!(all, want, "ticks missing or doubled across the hand-over");
    let listed = m
        .request(Method::GET, "/1/functions", None, true)
        .await
        .unwrap()
        .body;
    let schedule = &listed["results"][0]["schedule"];
    assert!(
        schedule["runs"].as_u64().unwrap() >= all.len() as u64,
        "{listed}"
    );
    assert_eq!(schedule["failures"], 0, "{listed}");
    // A failing schedule's failures are visible.
    deploy(
        &m,
        "everySecond",
        "throw new Error('down');",
        json!({"cron": "* * * * * *"}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = m
            .request(Method::GET, "/1/functions/everySecond", None, true)
            .await
            .unwrap()
            .body;
        if listed["schedule"]["failures"].as_u64().unwrap_or(0) > 0 {
            assert_eq!(listed["schedule"]["lastError"], "down", "{listed}");
            break;
        }
        assert!(Instant::now() < deadline, "no failure recorded: {listed}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// `basalt-cli`, built beside `basalt` by a workspace build (`make test` does one).
fn cli() -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_BIN_EXE_basalt")).with_file_name("basalt-cli");
    assert!(
        path.exists(),
        "no {path:?}: build the workspace (cargo build --release --workspace)"
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_deploys_a_folder_of_functions() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("add.js"),
        "return request.params.a + request.params.b;\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("caps.js"),
        "// Titles in capitals.\n// @trigger beforeSave Post\nrequest.object.title = \
         String(request.object.title).toUpperCase();\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a function").unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(cli())
            .args([
                "--url",
                &format!("http://{}", cluster.nodes[0].http),
                "--app-id",
                &cluster.keys.application_id,
                "--rest-key",
                &cluster.keys.rest_key,
                "--master-key",
                &cluster.master_key(),
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let folder = dir.path().to_str().unwrap();
    let deployed = tokio::task::block_in_place(|| run(&["functions", "deploy", folder]));
    assert_eq!(
        deployed["deployed"],
        json!([{"name": "add", "version": 1}, {"name": "caps", "version": 1}])
    );
    let c = cluster.client(0);
    assert_eq!(result(&c, "add", json!({"a": 2, "b": 3})).await, 5);
    let called =
        tokio::task::block_in_place(|| run(&["functions", "call", "add", r#"{"a":1,"b":1}"#]));
    assert_eq!(called["result"], 2);
    let made = c
        .request(
            Method::POST,
            "/1/classes/Post",
            Some(&json!({"title": "quiet"})),
            false,
        )
        .await
        .unwrap();
    let id = made.body["objectId"].as_str().unwrap();
    assert_eq!(
        c.get_object("Post", id).await.unwrap().unwrap()["title"],
        "QUIET"
    );
    // Deployed again without add.js, pruning: add is gone, caps is at version 2.
    std::fs::remove_file(dir.path().join("add.js")).unwrap();
    let again = tokio::task::block_in_place(|| run(&["functions", "deploy", "--prune", folder]));
    assert_eq!(again["deployed"], json!([{"name": "caps", "version": 2}]));
    assert_eq!(again["deleted"], json!(["add"]));
    assert_api_error(call(&c, "add", json!({})).await, 404, 311, "pruned");
}
