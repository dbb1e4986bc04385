//! What one request may carry and ask for (docs/api.md, "Limits"): nesting depth (dot paths
//! included), keys per body, columns per class, 64-bit integers, answer size and sub-query count
//! — each refused with its code and nothing written — and the attacks that used to halt a Raft
//! group for good: on 3 nodes, every group keeps a leader, `/health` stays ok, and the cluster
//! restarts on its data.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::{assert_api_error, TestCluster};

/// `[[[...1...]]]` nested `levels` deep.
fn arrays(levels: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!([v]);
    }
    v
}

/// A raw POST of `text` (which may not be what serde_json would write).
async fn post_text(cluster: &TestCluster, node: usize, path: &str, text: String) -> (u16, Value) {
    let keys = &cluster.keys;
    let resp = reqwest::Client::new()
        .post(format!("http://{}{path}", cluster.nodes[node].http))
        .header("X-Service-Application-Id", &keys.application_id)
        .header("X-Service-REST-API-Key", &keys.rest_key)
        .header("Content-Type", "application/json")
        .body(text)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn health(cluster: &TestCluster, node: usize) -> Value {
    reqwest::get(format!("http://{}/health", cluster.nodes[node].http))
        .await
        .expect("health")
        .json()
        .await
        .expect("json")
}

/// Story — an attack: writes made to halt groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_writes_are_refused_and_every_group_keeps_serving() {
    let mut cluster = TestCluster::start(3, &["--shards", "2"], &[]).await;
    let c = cluster.spread_client();

    // The reported attack: arrays nested 118..126 deep (the log entry added the levels that
    // broke decoding), and far deeper than serde_json can parse.
    for levels in [33, 118, 122, 124, 126, 127, 200, 5000] {
        let body = format!("{{\"a\":{}}}", "[".repeat(levels) + &"]".repeat(levels));
        let (status, err) = post_text(&cluster, levels % 3, "/1/classes/Deep", body).await;
        assert_eq!(
            (status, err["code"].clone()),
            (400, json!(107)),
            "{levels}: {err}"
        );
        assert!(
            err["error"].as_str().unwrap_or("").contains("nest"),
            "says what is wrong: {err}"
        );
    }
    // The deepest admitted value is stored and read back whole, through every node.
    let deepest = json!({"a": arrays(32)});
    let ok = c.create_object("Deep", &deepest).await.expect("32 levels");
    for i in 0..3 {
        let got = cluster
            .client(i)
            .get_object("Deep", &ok.object_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got["a"], deepest["a"]);
    }

    // Dot paths count as levels: 150 segments (the second reported attack) and 34 are refused,
    // 33 segments (32 levels below the column) are admitted.
    let path = |n: usize| vec!["a"; n].join(".");
    for n in [150, 34] {
        assert_api_error(
            c.update_object("Deep", &ok.object_id, &json!({ path(n): 1 }))
                .await,
            400,
            107,
            &format!("dot path of {n}"),
        );
    }
    let id2 = c
        .create_object("Deep", &json!({"b": 1}))
        .await
        .unwrap()
        .object_id;
    c.update_object("Deep", &id2, &json!({ path(33).replacen('a', "b2", 1): 1 }))
        .await
        .expect("33 segments");
    // A value nested into a deep path adds up: 10 segments (9 levels) + 24 is one too many.
    assert_api_error(
        c.update_object("Deep", &id2, &json!({ path(10): arrays(24) }))
            .await,
        400,
        107,
        "path plus value",
    );

    // Keys per body and columns per class: refused before anything is proposed.
    let wide = |n: usize, prefix: &str| {
        Value::Object((0..n).map(|i| (format!("{prefix}{i}"), json!(i))).collect())
    };
    assert_api_error(
        c.create_object("Wide", &wide(100_000, "k")).await,
        400,
        107,
        "100,000 keys",
    );
    assert_api_error(
        c.create_object("Wide", &wide(1001, "k")).await,
        400,
        107,
        "1,001 keys",
    );
    c.create_object("Wide", &wide(600, "a"))
        .await
        .expect("600 columns");
    assert_api_error(
        c.create_object("Wide", &wide(600, "b")).await,
        400,
        10074,
        "1,200 columns",
    );
    let schema = cluster
        .master_client(0)
        .request(Method::GET, "/1/schemas/Wide", None, true)
        .await
        .unwrap()
        .body;
    let columns = schema["fields"].as_object().map_or(0, |m| m.len());
    assert!(columns < 620, "no b column was added: {columns}");

    // Nothing halted: every node healthy with no group problem, no entry failed to apply,
    // and queries of every class answer.
    for i in 0..3 {
        let h = health(&cluster, i).await;
        assert_eq!(h["status"], "ok", "node {}: {h}", i + 1);
        assert_eq!(h["problems"], json!([]), "node {}: {h}", i + 1);
        assert_eq!(
            cluster.metric(i, "basalt_apply_failures_total").await,
            0.0,
            "node {}",
            i + 1
        );
    }
    for class in ["Deep", "Wide", "Other"] {
        c.query(class, &[("limit", "5")]).await.expect(class);
    }

    // The cluster restarts on its data and serves what it admitted.
    cluster.restart_all().await;
    let got = cluster
        .client(1)
        .get_object("Deep", &ok.object_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got["a"], deepest["a"]);
    let got = cluster
        .client(2)
        .get_object("Deep", &id2)
        .await
        .unwrap()
        .unwrap();
    let mut v = &got["b2"];
    for _ in 0..32 {
        v = &v["a"];
    }
    assert_eq!(v, &json!(1), "{got}");
}

/// `path` with `where` as its query string.
fn where_path(path: &str, w: &Value) -> String {
    let w: String = url::form_urlencoded::byte_serialize(w.to_string().as_bytes()).collect();
    format!("{path}?where={w}")
}

/// Refusals of queries and numbers as a table: negative or unreadable paging (102; `limit=0`
/// counts), a `where` nested past its depth, unreadable or with more than 20 sub-queries (102);
/// integer literals past 64 bits (107, nothing written), an Increment past the range (107,
/// the value unchanged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_and_numbers_past_their_bounds_are_refused() {
    use super::common::scenario::{run_rows, After, Row};
    let cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    let c = cluster.client(0);
    let max = c
        .create_object("Num", &json!({"n": i64::MAX, "f": 1.5e300}))
        .await
        .unwrap();
    let mut deep = json!({"a": 1});
    for _ in 0..70 {
        deep = json!({ "$or": [deep] });
    }
    let sub = |i: usize| json!({"n": {"$select": {"query": {"className": "Num", "where": {"i": i}}, "key": "n"}}});
    let ors = json!({"$or": (0..21).map(sub).collect::<Vec<_>>()});
    let query = |name: &'static str, path: String| Row::new(name, Method::GET, path);
    let literal = |name: &'static str, body: &str| {
        Row::new(name, Method::POST, "/1/classes/Num")
            .body(body.to_string())
            .fails(400, 107)
            .after(After::Count("Num", 1))
    };
    let rows = vec![
        query("a negative limit", "/1/classes/Echo?limit=-1".into()).fails(400, 102),
        query("a negative skip", "/1/classes/Echo?skip=-1".into()).fails(400, 102),
        query(
            "a limit that is no number",
            "/1/classes/Echo?limit=x".into(),
        )
        .fails(400, 102),
        query(
            "limit=0 with a count",
            "/1/classes/Echo?limit=0&count=1".into(),
        )
        .succeeds(200),
        query(
            "a where nested 70 deep",
            where_path("/1/classes/Echo", &deep),
        )
        .fails(400, 102),
        query(
            "a where that is no JSON",
            "/1/classes/Echo?where=%7Bbad".into(),
        )
        .fails(400, 102),
        query("21 sub-queries", where_path("/1/classes/Num", &ors)).fails(400, 102),
        literal(
            "an integer literal past 64 bits",
            r#"{"n": 123456789012345678901234567890}"#,
        ),
        literal(
            "an integer literal of 2^63",
            r#"{"n": 9223372036854775808}"#,
        ),
        Row::new(
            "an Increment past i64::MAX",
            Method::PUT,
            format!("/1/classes/Num/{}", max.object_id),
        )
        .body(r#"{"n": {"__op": "Increment", "amount": 1}}"#)
        .fails(400, 107)
        .after(After::Field {
            class: "Num",
            id: max.object_id.clone(),
            field: "n",
            value: json!(i64::MAX),
        }),
    ];
    run_rows(&cluster, &rows).await;
    let got = c.get_object("Num", &max.object_id).await.unwrap().unwrap();
    assert!(got["n"].is_i64(), "{got}");
}

/// Error messages say what is wrong and no more: a huge invalid key is not echoed whole; a
/// `where` too deep says it is nested, one that is no JSON says so; an answer past its size
/// says MiB (and asking fewer keys fits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_messages_say_what_is_wrong_and_no_more() {
    let cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    let c = cluster.client(0);
    let key = "ö".repeat(50_000);
    let (status, err) = post_text(
        &cluster,
        0,
        "/1/classes/Echo",
        json!({ key: 1 }).to_string(),
    )
    .await;
    assert_eq!((status, err["code"].clone()), (400, json!(105)), "{err}");
    let shown = err["error"].as_str().unwrap_or("");
    assert!(shown.chars().count() < 300, "{} chars", shown.len());
    let mut deep = json!({"a": 1});
    for _ in 0..70 {
        deep = json!({ "$or": [deep] });
    }
    let e = c
        .query("Echo", &[("where", &deep.to_string())])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("nested"), "{e}");
    let e = c.query("Echo", &[("where", "{bad")]).await.unwrap_err();
    assert!(e.to_string().contains("not valid JSON"), "{e}");
    let chunk = "x".repeat(12 << 20);
    for _ in 0..3 {
        c.create_object("Big", &json!({ "s": chunk }))
            .await
            .expect("12 MB object");
    }
    let e = c.query("Big", &[]).await.unwrap_err();
    assert_eq!(e.code(), Some(102), "{e}");
    assert!(e.to_string().contains("MiB"), "{e}");
    let small = c.query("Big", &[("keys", "objectId")]).await.expect("keys");
    assert_eq!(small["results"].as_array().map(Vec::len), Some(3));
}

/// Bodies that are small as text and huge once parsed (`{"x":[0,0,…]}` of 15 MiB: 8 million
/// values) are refused before they are parsed; eight sent at once to a node with 64 MiB of
/// request memory are read one or two at a time, each answered, and the node's memory stays
/// far below what one parsed body would take, while another app's small writes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_explode_when_parsed_are_refused_and_queue_for_memory() {
    let cluster = TestCluster::start(1, &[], &["--request-memory-mb", "64"]).await;
    let zeros = |n: usize| format!("{{\"x\":[{}0]}}", "0,".repeat(n - 1));
    // At the limits: 100,000 elements pass the text check (the stored object's own limits
    // decide the rest), 100,001 do not.
    let (status, err) = post_text(&cluster, 0, "/1/classes/Bomb", zeros(100_001)).await;
    assert_eq!((status, err["code"].clone()), (400, json!(107)), "{err}");
    assert!(
        err["error"]
            .as_str()
            .unwrap_or("")
            .contains("100000 elements"),
        "{err}"
    );
    let many_names = format!(
        "{{{}}}",
        (0..200_001)
            .map(|i| format!("\"k{i}\":0"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let (status, err) = post_text(&cluster, 0, "/1/classes/Bomb", many_names).await;
    assert_eq!((status, err["code"].clone()), (400, json!(107)), "{err}");

    let (before, _) = cluster.memory_kib(0);
    let bomb = zeros(8_000_000);
    assert!(bomb.len() > 15 << 20);
    let sends = (0..8).map(|_| {
        let (cluster, bomb) = (&cluster, bomb.clone());
        async move { post_text(cluster, 0, "/1/classes/Bomb", bomb).await }
    });
    let writes = async {
        let c = cluster.client(0);
        for i in 0..5 {
            c.create_object("Small", &json!({"i": i}))
                .await
                .expect("a small write");
        }
    };
    let (answers, ()) = tokio::join!(futures::future::join_all(sends), writes);
    for (status, err) in answers {
        assert!(
            (status, err["code"].clone()) == (400, json!(107)) || status == 503,
            "{status} {err}"
        );
    }
    let (_, peak) = cluster.memory_kib(0);
    assert!(
        peak < before + 400 * 1024,
        "resident memory went from {before} KiB to a peak of {peak} KiB"
    );
}
