//! Realtime subscriptions (decisions/0024), black-box on real nodes: subscribed through one node,
//! written through the others, events arrive in commit order per object with the right action
//! and data; unsubscribing stops them; ACLs and `where` (enter/leave) decide who sees what; the
//! plain WebSocket, socket.io 0.9 (handshake, `5:::` frames, heartbeats) and SSE; a node killed
//! while subscribed (a leader of groups, and the source another node follows them from) loses
//! and repeats nothing; a reconnect with a cursor gets the gap, one too old a resync; a slow
//! subscriber is dropped with a resync while writes and others go on.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::common::scenario::{run_rows, As, Row};
use crate::common::{self, register_user, TestCluster};

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A realtime client over the plain WebSocket or socket.io.
struct Rt {
    ws: Ws,
    socket_io: bool,
}

fn keys_query(cluster: &TestCluster) -> String {
    format!(
        "applicationId={}&restKey={}",
        cluster.keys.application_id, cluster.keys.rest_key
    )
}

impl Rt {
    async fn plain(cluster: &TestCluster, node: usize) -> Rt {
        let url = format!(
            "ws://{}/1/realtime?{}",
            cluster.nodes[node].http,
            keys_query(cluster)
        );
        let (ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("connect");
        Rt {
            ws,
            socket_io: false,
        }
    }

    /// Connects by socket.io 0.9 as the hosted service's SDKs do (no keys: each subscription
    /// names its app).
    async fn socket_io(cluster: &TestCluster, node: usize) -> Rt {
        let hs = reqwest::get(format!(
            "http://{}/socket.io/1/?t=1",
            cluster.nodes[node].http
        ))
        .await
        .unwrap();
        assert_eq!(hs.status(), 200);
        let text = hs.text().await.unwrap();
        let parts: Vec<&str> = text.split(':').collect();
        assert_eq!(parts.len(), 4, "{text}");
        assert_eq!(&parts[1..], ["60", "60", "websocket"]);
        let url = format!(
            "ws://{}/socket.io/1/websocket/{}?",
            cluster.nodes[node].http, parts[0]
        );
        let (mut ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("connect");
        let first = ws.next().await.unwrap().unwrap();
        assert_eq!(first.into_text().unwrap().as_str(), "1::");
        let mut rt = Rt {
            ws,
            socket_io: true,
        };
        let (name, _) = rt
            .next(Duration::from_secs(5))
            .await
            .expect("client_send_data");
        assert_eq!(name, "client_send_data");
        rt
    }

    async fn send(&mut self, name: &str, arg: Value) {
        let text = match self.socket_io {
            false => json!({"name": name, "args": [arg]}).to_string(),
            true => format!("5:::{}", json!({"name": name, "args": [arg.to_string()]})),
        };
        self.ws.send(Message::Text(text.into())).await.unwrap();
    }

    /// The next message (name, argument), skipping pings and heartbeats; `None` on timeout or
    /// when the connection closes.
    async fn next(&mut self, within: Duration) -> Option<(String, Value)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let m = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .ok()??;
            let text = match m.ok()? {
                Message::Text(t) => t.to_string(),
                Message::Close(_) => return None,
                _ => continue,
            };
            let body = match self.socket_io {
                false => text,
                true => match text.strip_prefix("5:::") {
                    Some(b) => b.to_string(),
                    None => continue,
                },
            };
            let v: Value = serde_json::from_str(&body).unwrap();
            let arg = match &v["args"][0] {
                Value::String(s) if self.socket_io => serde_json::from_str(s).unwrap(),
                a => {
                    assert!(!self.socket_io, "socket.io args are JSON strings: {body}");
                    a.clone()
                }
            };
            return Some((v["name"].as_str().unwrap().to_string(), arg));
        }
    }

    async fn expect(&mut self, name: &str) -> Value {
        let (n, arg) = self
            .next(Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("no {name} came"));
        assert_eq!(n, name, "{arg}");
        arg
    }

    /// Subscribes and waits for the acknowledgement.
    async fn sub(&mut self, arg: Value) -> Value {
        self.send("client_sub", arg).await;
        self.expect("server_sub").await
    }

    /// The next `n` events (`server_pub`).
    async fn events(&mut self, n: usize) -> Vec<Value> {
        let mut out = Vec::new();
        while out.len() < n {
            let arg = self.expect("server_pub").await;
            out.push(arg);
        }
        out
    }

    /// Every message that comes within `d`.
    async fn quiet(&mut self, d: Duration) -> Vec<(String, Value)> {
        let deadline = Instant::now() + d;
        let mut out = Vec::new();
        while let Some(m) = self
            .next(deadline.saturating_duration_since(Instant::now()))
            .await
        {
            out.push(m);
        }
        out
    }
}

fn position(e: &Value) -> (u64, u64) {
    let p = e["position"].as_str().unwrap();
    let (g, i) = p.split_once(':').unwrap();
    (g.parse().unwrap(), i.parse().unwrap())
}

/// Story — events in order through every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_writes_through_every_node_arrive_in_commit_order() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let app = cluster.keys.application_id.clone();
    let mut rt = Rt::plain(&cluster, 0).await;
    let ack = rt
        .sub(json!({"appKey": app, "tableName": "Game", "action": "updateTable"}))
        .await;
    assert_eq!(ack["action"], "updateTable");
    assert_eq!(
        ack["cursor"].as_str().unwrap().split('.').count(),
        17,
        "{ack}"
    );
    rt.sub(json!({"appKey": app, "tableName": "Game", "action": "deleteTable"}))
        .await;

    // Writes through the two other nodes, each object's through both.
    let writers = [cluster.client(1), cluster.client(2)];
    let mut ids = Vec::new();
    for i in 0..10usize {
        let c = &writers[i % 2];
        let id = c
            .create_object("Game", &json!({"score": 0, "i": i}))
            .await
            .unwrap()
            .object_id;
        for s in 1..=2 {
            writers[(i + s) % 2]
                .update_object("Game", &id, &json!({"score": s}))
                .await
                .unwrap();
        }
        if i % 2 == 0 {
            writers[(i + 1) % 2]
                .delete_object("Game", &id)
                .await
                .unwrap();
        }
        ids.push(id);
    }
    let events = rt.events(35).await;
    let mut per_object: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for e in events {
        assert_eq!(e["tableName"], "Game");
        assert_eq!(e["appKey"].as_str(), Some(app.as_str()));
        let id = e["data"]["objectId"].as_str().unwrap().to_string();
        per_object.entry(id).or_default().push(e);
    }
    for (i, id) in ids.iter().enumerate() {
        let seen = &per_object[id];
        let kinds: Vec<(&str, &str)> = seen
            .iter()
            .map(|e| (e["action"].as_str().unwrap(), e["event"].as_str().unwrap()))
            .collect();
        let mut want = vec![
            ("updateTable", "create"),
            ("updateTable", "update"),
            ("updateTable", "update"),
        ];
        if i % 2 == 0 {
            want.push(("deleteTable", "delete"));
        }
        assert_eq!(kinds, want, "object {id}");
        let scores: Vec<&Value> = seen.iter().map(|e| &e["data"]["score"]).collect();
        assert_eq!(scores[..3], [&json!(0), &json!(1), &json!(2)]);
        assert_eq!(seen[0]["data"]["i"], json!(i));
        // One group per object, positions in commit order.
        let positions: Vec<(u64, u64)> = seen.iter().map(position).collect();
        assert!(
            positions
                .windows(2)
                .all(|w| w[0].0 == w[1].0 && w[0].1 < w[1].1),
            "{positions:?}"
        );
        assert!(seen
            .iter()
            .all(|e| e["cursor"].as_str().unwrap().split('.').count() == 17));
    }

    // A row subscription sees its object's updates only.
    let row = ids[1].clone();
    rt.sub(json!({"appKey": app, "tableName": "Game", "objectId": row, "action": "updateRow"}))
        .await;
    writers[0]
        .update_object("Game", &row, &json!({"score": 7}))
        .await
        .unwrap();
    let mut got = rt.events(2).await;
    got.sort_by_key(|e| e["action"].as_str().unwrap().to_string());
    assert_eq!(got[0]["action"], "updateRow");
    assert_eq!(got[0]["objectId"].as_str(), Some(row.as_str()));
    assert_eq!(got[0]["data"]["score"], 7);
    assert_eq!(got[1]["action"], "updateTable");
    assert_eq!(
        got[1]["objectId"], "",
        "table events name no object: {}",
        got[1]
    );

    // Unsubscribed: the creates stop, the deletes go on (one object: one group, in order).
    rt.send(
        "client_unsub",
        json!({"appKey": app, "tableName": "Game", "action": "unsub_updateTable"}),
    )
    .await;
    rt.send(
        "client_sub",
        json!({"appKey": app, "tableName": "Game", "objectId": row, "action": "unsub_updateRow"}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let x = writers[1]
        .create_object("Game", &json!({"score": 1}))
        .await
        .unwrap()
        .object_id;
    writers[0]
        .update_object("Game", &row, &json!({"score": 8}))
        .await
        .unwrap();
    writers[0].delete_object("Game", &x).await.unwrap();
    let next = rt.expect("server_pub").await;
    assert_eq!(
        (next["action"].as_str(), next["event"].as_str()),
        (Some("deleteTable"), Some("delete"))
    );
    assert_eq!(next["data"]["objectId"].as_str(), Some(x.as_str()));
    assert!(rt.quiet(Duration::from_millis(500)).await.is_empty());

    // SSE on node 3: the event's id is its cursor.
    let url = format!(
        "http://{}/1/realtime/events?{}&tableName=Game&action=updateTable",
        cluster.nodes[2].http,
        keys_query(&cluster)
    );
    let mut sse = reqwest::get(url).await.unwrap();
    assert_eq!(sse.status(), 200);
    assert!(sse.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut text = String::new();
    // The acknowledgement first, then the create made after it.
    while !text.contains("event: server_sub") {
        text.push_str(&String::from_utf8_lossy(
            &sse.chunk().await.unwrap().unwrap(),
        ));
    }
    let y = writers[0]
        .create_object("Game", &json!({"score": 3}))
        .await
        .unwrap()
        .object_id;
    while !text
        .find("event: server_pub")
        .is_some_and(|at| text[at..].contains("\n\n"))
    {
        let chunk = tokio::time::timeout(Duration::from_secs(20), sse.chunk())
            .await
            .expect("an SSE event")
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let block = &text[text.find("event: server_pub").unwrap()..];
    let field = |name: &str| {
        block
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap()
            .to_string()
    };
    let data: Value = serde_json::from_str(&field("data")).unwrap();
    assert_eq!(data["data"]["objectId"].as_str(), Some(y.as_str()));
    assert_eq!(field("id"), data["cursor"].as_str().unwrap());

    // socket.io 0.9: keys optional, the app named by appKey, arguments as JSON strings.
    let mut io = Rt::socket_io(&cluster, 1).await;
    io.ws.send(Message::Text("2::".into())).await.unwrap();
    let ack = io
        .sub(json!({"appKey": app, "tableName": "Game", "objectId": "", "action": "updateTable"}))
        .await;
    assert_eq!(ack["tableName"], "Game");
    let z = writers[1]
        .create_object("Game", &json!({"score": 4}))
        .await
        .unwrap()
        .object_id;
    let e = io.expect("server_pub").await;
    assert_eq!(
        (e["action"].as_str(), e["objectId"].as_str()),
        (Some("updateTable"), Some(""))
    );
    assert_eq!(e["data"]["objectId"].as_str(), Some(z.as_str()));
    // An unknown app is refused in-band; a disconnect frame closes the socket.
    io.send(
        "client_sub",
        json!({"appKey": "nope", "tableName": "Game", "action": "updateTable"}),
    )
    .await;
    let err = io.expect("server_error").await;
    assert_eq!(err["error"], "unauthorized", "{err}");
    io.ws.send(Message::Text("0::".into())).await.unwrap();
    assert!(io.quiet(Duration::from_secs(3)).await.is_empty());

    assert!(cluster.metric(0, "basalt_realtime_events_total").await >= 35.0);
}

/// Story — through every node: a subscriber sees only what its session may read (a private
/// note reaches its owner only, a public one everyone), and an object made private leaves the
/// others' view, shown as they last could read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_see_only_what_their_session_may_read() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let app = cluster.keys.application_id.clone();
    let c = cluster.client(1);
    let (alice, alice_token) = register_user(&c, "alice").await;
    let (_bob, bob_token) = register_user(&c, "bob").await;
    let as_alice = cluster.client(2).with_session(Some(&alice_token));
    let mut a = Rt::plain(&cluster, 0).await;
    let mut b = Rt::plain(&cluster, 1).await;
    let mut anyone = Rt::plain(&cluster, 2).await;
    for (rt, token) in [
        (&mut a, Some(&alice_token)),
        (&mut b, Some(&bob_token)),
        (&mut anyone, None),
    ] {
        let mut arg = json!({"appKey": app, "tableName": "Note", "action": "updateTable"});
        if let Some(t) = token {
            arg["sessionToken"] = json!(t);
        }
        rt.sub(arg).await;
    }
    let private = as_alice
        .create_object(
            "Note",
            &json!({"t": "mine", "ACL": {alice.clone(): {"read": true, "write": true}}}),
        )
        .await
        .unwrap()
        .object_id;
    let public = as_alice
        .create_object("Note", &json!({"t": "ours"}))
        .await
        .unwrap()
        .object_id;
    let seen_by_a: HashSet<String> = a
        .events(2)
        .await
        .iter()
        .map(|e| e["data"]["objectId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(seen_by_a, HashSet::from([private.clone(), public.clone()]));
    for rt in [&mut b, &mut anyone] {
        let e = rt.expect("server_pub").await;
        assert_eq!(e["data"]["objectId"].as_str(), Some(public.as_str()));
        assert!(rt.quiet(Duration::from_millis(300)).await.is_empty());
    }
    as_alice
        .update_object(
            "Note",
            &public,
            &json!({"t": "hidden", "ACL": {alice.clone(): {"read": true}}}),
        )
        .await
        .unwrap();
    let left = b.expect("server_pub").await;
    assert_eq!(
        (left["event"].as_str(), left["data"]["t"].as_str()),
        (Some("leave"), Some("ours"))
    );
    let left = anyone.expect("server_pub").await;
    assert_eq!(
        (left["event"].as_str(), left["data"]["t"].as_str()),
        (Some("leave"), Some("ours"))
    );
    let upd = a.expect("server_pub").await;
    assert_eq!(
        (upd["event"].as_str(), upd["data"]["t"].as_str()),
        (Some("update"), Some("hidden"))
    );
}

/// A filtered subscription sees objects enter, change inside and leave its filter, and new
/// ones created inside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_subscription_sees_objects_enter_and_leave() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let app = cluster.keys.application_id.clone();
    let mut a = Rt::plain(&cluster, 0).await;
    let master = cluster.master_client(0);
    a.sub(
        json!({"appKey": app, "tableName": "Score", "action": "updateTable",
        "where": {"points": {"$gte": 10}}}),
    )
    .await;
    let s = master
        .create_object("Score", &json!({"points": 5}))
        .await
        .unwrap()
        .object_id;
    for p in [15, 20, 3] {
        master
            .update_object("Score", &s, &json!({"points": p}))
            .await
            .unwrap();
    }
    let big = master
        .create_object("Score", &json!({"points": 12}))
        .await
        .unwrap()
        .object_id;
    let got: Vec<(String, i64, String)> = a
        .events(4)
        .await
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["data"]["points"].as_i64().unwrap(),
                e["data"]["objectId"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mine: Vec<(String, i64)> = got
        .iter()
        .filter(|g| g.2 == s)
        .map(|g| (g.0.clone(), g.1))
        .collect();
    assert_eq!(
        mine,
        [
            ("enter".to_string(), 15),
            ("update".to_string(), 20),
            ("leave".to_string(), 3)
        ]
    );
    assert!(got
        .iter()
        .any(|g| g.2 == big && g.0 == "create" && g.1 == 12));
}

/// Users' protected fields reach only the user itself: another user's subscription sees the
/// change without the email, the sessions or the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_protected_fields_reach_only_itself() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let app = cluster.keys.application_id.clone();
    let c = cluster.client(1);
    let (alice, alice_token) = register_user(&c, "alice").await;
    let (_bob, bob_token) = register_user(&c, "bob").await;
    let as_alice = cluster.client(2).with_session(Some(&alice_token));
    let mut b = Rt::plain(&cluster, 1).await;
    b.sub(json!({"appKey": app, "tableName": "_User", "action": "updateTable", "sessionToken": bob_token}))
        .await;
    as_alice
        .request(
            reqwest::Method::PUT,
            &format!("/1/users/{alice}"),
            Some(&json!({"email": "a@example.com", "nick": "al"})),
            false,
        )
        .await
        .unwrap();
    let e = b.expect("server_pub").await;
    assert_eq!(e["data"]["nick"], "al");
    assert!(e["data"].get("email").is_none(), "{e}");
    assert!(e["data"].get("_sessions").is_none() && e["data"].get("password").is_none());
}

/// Table — subscriptions refused in band, each with its code: a `where` on a hidden or
/// protected field or with a sub-query (102), an invalid table (103), an unknown action or a
/// malformed cursor (107), a message that is no JSON (107), another app's key (unauthorized),
/// a 101st subscription on one connection (107).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_refused_in_band_with_their_codes() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let app = cluster.keys.application_id.clone();
    let mut anyone = Rt::plain(&cluster, 0).await;
    for (arg, code) in [
        (
            json!({"appKey": app, "tableName": "Score", "action": "updateTable", "where": {"_password": 1}}),
            102,
        ),
        (
            json!({"appKey": app, "tableName": "_User", "action": "updateTable", "where": {"email": "x"}}),
            102,
        ),
        (
            json!({"appKey": app, "tableName": "Score", "action": "updateTable", "where": {"p": {"$inQuery": {"className": "X", "where": {}}}}}),
            102,
        ),
        (
            json!({"appKey": app, "tableName": "1bad", "action": "updateTable"}),
            103,
        ),
        (
            json!({"appKey": app, "tableName": "Score", "action": "updateRow"}),
            107,
        ),
        (
            json!({"appKey": app, "tableName": "Score", "action": "explode"}),
            107,
        ),
        (
            json!({"appKey": app, "tableName": "Score", "action": "updateTable", "cursor": "1.2"}),
            107,
        ),
    ] {
        anyone.send("client_sub", arg.clone()).await;
        let err = anyone.expect("server_error").await;
        assert_eq!(err["code"], code, "{arg} → {err}");
    }
    anyone
        .ws
        .send(Message::Text("not json".into()))
        .await
        .unwrap();
    assert_eq!(anyone.expect("server_error").await["code"], 107);
    anyone
        .send(
            "client_sub",
            json!({"appKey": "other", "tableName": "Score", "action": "updateTable"}),
        )
        .await;
    assert_eq!(anyone.expect("server_error").await["error"], "unauthorized");

    // At most 100 subscriptions per connection.
    for i in 0..100 {
        anyone
            .sub(json!({"appKey": app, "tableName": format!("C{i}"), "action": "deleteTable"}))
            .await;
    }
    anyone
        .send(
            "client_sub",
            json!({"appKey": app, "tableName": "C100", "action": "deleteTable"}),
        )
        .await;
    assert_eq!(anyone.expect("server_error").await["code"], 107);
    assert!(cluster.metric(0, "basalt_realtime_subscriptions").await >= 100.0);
}

/// Without keys, or with wrong ones, the plain WebSocket and SSE are refused before upgrading
/// (401); an app that requires its keys refuses socket.io subscriptions naming only the app.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_without_keys_is_refused_before_upgrading() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let app = cluster.keys.application_id.clone();
    for path in [
        "/1/realtime".to_string(),
        format!("/1/realtime?applicationId={app}&restKey=wrong"),
        "/1/realtime/events?tableName=Score".to_string(),
    ] {
        let r = reqwest::get(format!("http://{}{path}", cluster.nodes[0].http))
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    // An app that requires its keys refuses socket.io subscriptions naming only the app.
    cluster
        .set_app_settings(json!({"realtimeKeysRequired": true}))
        .await;
    let mut io = Rt::socket_io(&cluster, 0).await;
    io.send(
        "client_sub",
        json!({"appKey": app, "tableName": "Score", "action": "updateTable"}),
    )
    .await;
    assert_eq!(io.expect("server_error").await["error"], "unauthorized");
}

/// The realtime endpoints' answers before a socket or a stream opens: who may connect, and
/// what a request that is no upgrade, or an event stream asking no valid subscription, gets.
/// (What flows once connected is told by the stories above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_endpoints_answer_as_their_table_says() {
    use basalt_client::Method;
    let cluster = TestCluster::start(1, &[], &[]).await;
    let events = |name: &'static str, query: &str| {
        Row::new(name, Method::GET, format!("/1/realtime/events?{query}"))
    };
    let rows = vec![
        Row::new(
            "the plain socket asked with no upgrade",
            Method::GET,
            "/1/realtime",
        )
        .fails(400, 107),
        Row::new("the plain socket without keys", Method::GET, "/1/realtime")
            .auth(As::Nobody)
            .unauthorized(),
        Row::new(
            "the plain socket with a wrong key",
            Method::GET,
            "/1/realtime",
        )
        .auth(As::WrongKey)
        .unauthorized(),
        Row::new("the socket.io handshake", Method::GET, "/socket.io/1/").answers(200),
        Row::new(
            "the socket.io handshake posted",
            Method::POST,
            "/socket.io/1/",
        )
        .answers(200),
        Row::new(
            "the socket.io handshake without keys",
            Method::GET,
            "/socket.io/1/",
        )
        .auth(As::Nobody)
        .answers(200),
        Row::new(
            "the socket.io handshake with a wrong key",
            Method::GET,
            "/socket.io/1/",
        )
        .auth(As::WrongKey)
        .unauthorized(),
        Row::new(
            "the socket.io socket asked with no upgrade",
            Method::GET,
            "/socket.io/1/websocket/abc",
        )
        .fails(400, 107),
        events("events without keys", "tableName=Score")
            .auth(As::Nobody)
            .unauthorized(),
        events("events with a wrong key", "tableName=Score")
            .auth(As::WrongKey)
            .unauthorized(),
        events("events of no class", "action=updateTable").fails(400, 107),
        events("events of an unknown action", "tableName=Score&action=nope").fails(400, 107),
        events(
            "events that unsubscribe",
            "tableName=Score&action=unsub_updateTable",
        )
        .fails(400, 107),
        events(
            "events of a row without its objectId",
            "tableName=Score&action=updateRow",
        )
        .fails(400, 107),
        events("events where no query is", "tableName=Score&where=%5B1%5D").fails(400, 102),
        events(
            "events of a row with a where",
            "tableName=Score&action=updateRow&objectId=abc&where=%7B%7D",
        )
        .fails(400, 102),
    ];
    run_rows(&cluster, &rows).await;
    // What must not happen: a refused request left a subscription behind.
    assert_eq!(
        cluster.metric(0, "basalt_realtime_subscriptions").await,
        0.0
    );
}

/// Creates `n` objects of `class` through `clients` in turn (4 at a time); answers the
/// objectIds of the acknowledged ones.
async fn create_many(
    clients: &[basalt_client::Client],
    class: &str,
    n: usize,
    from: usize,
) -> Vec<String> {
    let jobs = (0..n).map(|i| {
        let c = clients[i % clients.len()].clone();
        let class = class.to_string();
        async move {
            c.create_object(&class, &json!({"n": from + i}))
                .await
                .ok()
                .map(|c| c.object_id)
        }
    });
    futures::stream::iter(jobs)
        .buffer_unordered(4)
        .filter_map(|r| async move { r })
        .collect()
        .await
}

/// Story — a fault: a failover under subscribers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_loses_and_repeats_nothing_and_a_cursor_replays_the_gap() {
    let mut cluster = TestCluster::start_spread(4, &["--change-log-entries", "1024"], &[], 4).await;
    let app = cluster.keys.application_id.clone();
    let mut rt = Rt::plain(&cluster, 0).await;
    let first = rt
        .sub(json!({"appKey": app, "tableName": "Tick", "action": "updateTable"}))
        .await;
    let writers = [cluster.client(0), cluster.client(1)];
    let mut acked = create_many(&writers, "Tick", 150, 0).await;
    // Node 4 leads about a quarter of the groups, and node 1, which holds replicas of three
    // quarters of them, follows the others from their leaders: killed mid-stream.
    cluster.kill(3);
    acked.extend(create_many(&writers, "Tick", 150, 150).await);
    assert!(
        acked.len() >= 250,
        "most creates are acknowledged: {}",
        acked.len()
    );
    let want: HashSet<String> = acked.iter().cloned().collect();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut last = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !want.iter().all(|id| seen.contains_key(id)) {
        assert!(
            Instant::now() < deadline,
            "{} of {} events",
            seen.len(),
            want.len()
        );
        let e = rt.expect("server_pub").await;
        *seen
            .entry(e["data"]["objectId"].as_str().unwrap().to_string())
            .or_default() += 1;
        last = e;
    }
    for (_, e) in rt.quiet(Duration::from_secs(1)).await {
        *seen
            .entry(e["data"]["objectId"].as_str().unwrap().to_string())
            .or_default() += 1;
        last = e;
    }
    assert!(seen.values().all(|&n| n == 1), "an event came twice");

    // A reconnect with the last cursor, through another node, gets exactly the gap.
    drop(rt);
    let cursor = last["cursor"].as_str().unwrap().to_string();
    let gap = create_many(&writers, "Tick", 20, 1000).await;
    let mut again = Rt::plain(&cluster, 1).await;
    again
        .sub(json!({"appKey": app, "tableName": "Tick", "action": "updateTable", "cursor": cursor}))
        .await;
    let replayed: HashSet<String> = again
        .events(gap.len())
        .await
        .iter()
        .map(|e| e["data"]["objectId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(replayed, gap.iter().cloned().collect::<HashSet<_>>());
    assert!(again.quiet(Duration::from_secs(1)).await.is_empty());
    // Live events follow the replay.
    let live = writers[1]
        .create_object("Tick", &json!({"n": -1}))
        .await
        .unwrap()
        .object_id;
    assert_eq!(
        again.expect("server_pub").await["data"]["objectId"].as_str(),
        Some(live.as_str())
    );

    // One object updated 2,100 times, each its own log entry (a batch's updates of one
    // object would share one): its group cuts its log back to 1,024 entries, so the first
    // cursor is too old there (a resync) while the other groups replay.
    let hot = writers[0]
        .create_object("Hot", &json!({"n": 0}))
        .await
        .unwrap()
        .object_id;
    let increments = (0..2100).map(|i| {
        let (c, hot) = (writers[i % 2].clone(), hot.clone());
        async move { c.increment("Hot", &hot, "n", 1).await.unwrap() }
    });
    futures::stream::iter(increments)
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let mut old = Rt::plain(&cluster, 0).await;
    old.sub(
        json!({"appKey": app, "tableName": "Tick", "action": "updateTable",
        "cursor": first["cursor"]}),
    )
    .await;
    let messages = old.quiet(Duration::from_secs(5)).await;
    let resync = messages
        .iter()
        .find(|(n, _)| n == "server_resync")
        .expect("a resync for the cut group");
    assert_eq!(resync.1["reason"], "too_old");
    assert!(messages.iter().filter(|(n, _)| n == "server_pub").count() > 0);
}

/// The objectIds of the `server_pub` events among `messages`.
fn event_ids(messages: &[(String, Value)]) -> Vec<String> {
    messages
        .iter()
        .filter(|(n, _)| n == "server_pub")
        .map(|(_, e)| e["data"]["objectId"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_inside_a_batch_resumes_after_its_event_and_repeats_none() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let app = cluster.keys.application_id.clone();
    let mut rt = Rt::plain(&cluster, 0).await;
    rt.sub(json!({"appKey": app, "tableName": "Lot", "action": "updateTable"}))
        .await;
    // 50 creates in one batch: those landing on one shard are one log entry of it.
    let requests = (0..50)
        .map(|i| json!({"method": "POST", "path": "/1/classes/Lot", "body": {"n": i}}))
        .collect();
    let slots = common::batch(&cluster.client(1), requests).await;
    assert!(slots.iter().all(|s| s["success"].is_object()), "{slots:?}");
    let events = rt.events(50).await;
    let ids: Vec<String> = events
        .iter()
        .map(|e| e["data"]["objectId"].as_str().unwrap().to_string())
        .collect();
    let mut per_entry: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        per_entry
            .entry(e["position"].as_str().unwrap().to_string())
            .or_default()
            .push(i);
    }
    let largest = per_entry.values().max_by_key(|v| v.len()).unwrap().clone();
    assert!(
        largest.len() >= 3,
        "some shard's entry holds several creates: {per_entry:?}"
    );
    // From the first event of that entry, one in its middle, and the very last event: through
    // the other nodes, exactly the events that came after it, each once.
    for (n, k) in [largest[0], largest[largest.len() / 2], 49]
        .into_iter()
        .enumerate()
    {
        let mut again = Rt::plain(&cluster, 1 + n % 2).await;
        again
            .sub(
                json!({"appKey": app, "tableName": "Lot", "action": "updateTable",
                "cursor": events[k]["cursor"]}),
            )
            .await;
        let got = event_ids(&again.quiet(Duration::from_secs(2)).await);
        let unique: HashSet<&String> = got.iter().collect();
        assert_eq!(
            unique.len(),
            got.len(),
            "an event came twice from event {k}: {got:?}"
        );
        assert_eq!(
            unique,
            ids[k + 1..].iter().collect::<HashSet<_>>(),
            "resumed from event {k} (cursor {})",
            events[k]["cursor"]
        );
    }
}

/// 200 subscribers that never read, and three 2 MiB writes: what waits for them stays within
/// the node's budget of realtime bytes (256 MiB) instead of a copy of every event for each,
/// and a subscriber that reads still gets its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_that_never_read_hold_a_bounded_share_of_memory() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = TestCluster::start(1, &[], &["--max-connections-per-ip", "400"]).await;
    let app = cluster.keys.application_id.clone();
    let sub = json!({"appKey": app, "tableName": "Big", "action": "updateTable"});
    // 200 subscribers that keep their connections and never read: plain WebSockets,
    // socket.io and event streams.
    let mut idle = Vec::new();
    for i in 0..150 {
        let mut rt = match i % 3 {
            0 => Rt::socket_io(&cluster, 0).await,
            _ => Rt::plain(&cluster, 0).await,
        };
        rt.sub(sub.clone()).await;
        idle.push(rt);
    }
    let mut streams = Vec::new();
    for _ in 0..50 {
        let mut tcp = tokio::net::TcpStream::connect(&cluster.nodes[0].http)
            .await
            .unwrap();
        let request = format!(
            "GET /1/realtime/events?{}&tableName=Big HTTP/1.1\r\nHost: x\r\n\r\n",
            keys_query(&cluster)
        );
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("event: server_sub") {
            let mut buf = [0u8; 4096];
            let n = tcp.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "the stream ended: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
        streams.push(tcp);
    }
    // Two that read, on each WebSocket framing.
    let mut reader = Rt::plain(&cluster, 0).await;
    reader.sub(sub.clone()).await;
    let mut io_reader = Rt::socket_io(&cluster, 0).await;
    io_reader.sub(sub.clone()).await;
    let (before, _) = cluster.memory_kib(0);
    let c = cluster.client(0);
    let blob = "é".repeat(1 << 20);
    for i in 0..3 {
        c.create_object("Big", &json!({"i": i, "blob": blob}))
            .await
            .unwrap();
        // The readers take each event, whole, as it comes.
        for r in [&mut reader, &mut io_reader] {
            let e = r.expect("server_pub").await;
            assert_eq!(e["data"]["i"], i);
            assert_eq!(e["data"]["blob"].as_str(), Some(blob.as_str()));
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (now, peak) = cluster.memory_kib(0);
    // Before the bound, the same writes took about 1 GiB more.
    assert!(
        peak < before + 256 * 1024,
        "resident memory went from {before} KiB to a peak of {peak} KiB (now {now})"
    );
    assert!(cluster.metric(0, "basalt_realtime_outbox_bytes").await <= (128 << 20) as f64);
    drop(idle);
    drop(streams);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_is_dropped_with_a_resync_while_writes_go_on() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let app = cluster.keys.application_id.clone();
    // A client that subscribes and then reads nothing, through a small receive buffer.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket
        .connect(cluster.nodes[0].http.parse().unwrap())
        .await
        .unwrap();
    let url = format!(
        "ws://{}/1/realtime?{}",
        cluster.nodes[0].http,
        keys_query(&cluster)
    );
    let (ws, _) =
        tokio_tungstenite::client_async(url, tokio_tungstenite::MaybeTlsStream::Plain(tcp))
            .await
            .unwrap();
    let mut slow = Rt {
        ws,
        socket_io: false,
    };
    slow.sub(json!({"appKey": app, "tableName": "Big", "action": "updateTable"}))
        .await;
    let mut fast = Rt::plain(&cluster, 0).await;
    fast.sub(json!({"appKey": app, "tableName": "Big", "action": "updateTable"}))
        .await;

    let c = cluster.client(0);
    let blob = "x".repeat(4096);
    let total = 3000;
    let writer = {
        let c = c.clone();
        tokio::spawn(async move {
            for _ in 0..total / 50 {
                let requests: Vec<Value> = (0..50)
                    .map(|_| json!({"method": "POST", "path": "/1/classes/Big", "body": {"blob": blob}}))
                    .collect();
                common::batch(&c, requests).await;
            }
        })
    };
    // The fast subscriber keeps up with every write.
    let got = fast.events(total).await;
    assert_eq!(got.len(), total);
    writer.await.unwrap();
    // The slow one, read at last: what it had queued, then a resync, then the close.
    let mut last = None;
    while let Some(m) = slow.next(Duration::from_secs(10)).await {
        last = Some(m);
    }
    let (name, arg) = last.expect("messages");
    assert_eq!(
        (name.as_str(), arg["reason"].as_str()),
        ("server_resync", Some("slow"))
    );
    assert!(cluster.metric(0, "basalt_realtime_resyncs_total").await >= 1.0);
}
