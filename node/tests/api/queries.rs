//! Query operators of spec 4.3 on a 3-node cluster, objects spread over every shard: each
//! `where` answers exactly the objects a direct computation over the created data selects.

use std::collections::{BTreeMap, BTreeSet};

use basalt_client::Client;
use reqwest::Method;
use serde_json::{json, Value};

use super::common::{self, assert_api_error, TestCluster};

const WORDS: [&str; 4] = ["Alpha", "beta", "Gamma", "delta"];

fn date(day: u32) -> Value {
    json!({"__type": "Date", "iso": format!("2026-01-{day:02}T00:00:00.000Z")})
}

fn geo(lat: f64, lng: f64) -> Value {
    json!({"__type": "GeoPoint", "latitude": lat, "longitude": lng})
}

/// The `name`s of the objects a `where` selects (limit 500).
async fn names(c: &Client, class: &str, w: Value) -> BTreeSet<String> {
    let path = format!(
        "/1/classes/{class}?limit=500&where={}",
        urlencode(&w.to_string())
    );
    let r = c
        .request(Method::GET, &path, None, false)
        .await
        .unwrap_or_else(|e| panic!("{w}: {e}"));
    r.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect()
}

pub(super) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn set(items: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    items.into_iter().collect()
}

/// Table — each `where` operator (comparisons, sets, existence, arrays, dates, dot paths,
/// pointers, sub-queries, `$or`/`$and`, regex) with the items it must select, over 40 items
/// on four shards of three nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_operators_select_exactly_the_matching_objects() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &super::common::SPREAD_CREATES).await;
    let c = cluster.spread_client();

    // Owners, and 40 items pointing at them.
    let mut owners = Vec::new();
    for o in ["ann", "bob", "cy"] {
        let id = c
            .create_object("Owner", &json!({"name": o}))
            .await
            .unwrap()
            .object_id;
        owners.push(id);
    }
    let owner_ptr =
        |i: usize| json!({"__type": "Pointer", "className": "Owner", "objectId": owners[i % 3]});
    let mut items = Vec::new();
    for n in 0..40usize {
        let mut body = json!({
            "name": format!("item{n:02}"),
            "n": n,
            "half": n as f64 / 2.0,
            "word": WORDS[n % 4],
            "tags": [format!("t{}", n % 3), format!("u{}", n % 5)],
            "day": date(1 + (n as u32 % 28)),
            "nested": {"a": {"b": n % 3}},
            "owner": owner_ptr(n),
        });
        if n % 7 == 0 {
            body["rare"] = json!(true);
        }
        let id = c.create_object("Item", &body).await.unwrap().object_id;
        items.push((n, id));
    }
    let all = |pred: &dyn Fn(usize) -> bool| {
        set((0..40).filter(|&n| pred(n)).map(|n| format!("item{n:02}")))
    };

    let cases: Vec<(Value, BTreeSet<String>)> = vec![
        (json!({"n": 5}), all(&|n| n == 5)),
        (json!({"n": {"$lt": 3}}), all(&|n| n < 3)),
        (
            json!({"n": {"$lte": 3, "$gt": 1}}),
            all(&|n| n > 1 && n <= 3),
        ),
        (json!({"half": {"$gte": 19.0}}), all(&|n| n >= 38)),
        (json!({"n": {"$ne": 0}}), all(&|n| n != 0)),
        (
            json!({"n": {"$in": [1, 2, 39, 77]}}),
            all(&|n| [1, 2, 39].contains(&n)),
        ),
        (json!({"n": {"$nin": [1, 2]}}), all(&|n| n != 1 && n != 2)),
        (json!({"rare": {"$exists": true}}), all(&|n| n % 7 == 0)),
        (json!({"rare": {"$exists": false}}), all(&|n| n % 7 != 0)),
        (json!({"tags": "t1"}), all(&|n| n % 3 == 1)),
        (
            json!({"tags": {"$all": ["t0", "u0"]}}),
            all(&|n| n % 15 == 0),
        ),
        (
            json!({"tags": {"$in": ["u4", "t2"]}}),
            all(&|n| n % 5 == 4 || n % 3 == 2),
        ),
        (json!({"word": {"$regex": "^[ab]"}}), all(&|n| n % 4 == 1)),
        (
            json!({"word": {"$regex": "^[ab]", "$options": "i"}}),
            all(&|n| n % 4 < 2),
        ),
        (json!({"word": {"$regex": "^(a+)+$"}}), all(&|_| false)),
        (
            json!({"day": {"$gte": date(20)}}),
            all(&|n| 1 + (n % 28) >= 20),
        ),
        (json!({"day": {"$lt": date(3)}}), all(&|n| 1 + (n % 28) < 3)),
        (json!({"nested.a.b": 2}), all(&|n| n % 3 == 2)),
        (json!({"owner": owner_ptr(1)}), all(&|n| n % 3 == 1)),
        (
            json!({"$or": [{"n": {"$lt": 2}}, {"n": {"$gt": 37}}]}),
            all(&|n| !(2..=37).contains(&n)),
        ),
        (
            json!({"$and": [{"n": {"$gt": 10}}, {"n": {"$lt": 13}}], "word": "Gamma"}),
            all(&|n| n > 10 && n < 13 && n % 4 == 2),
        ),
        (
            json!({"owner": {"$inQuery": {"className": "Owner", "where": {"name": {"$in": ["ann", "cy"]}}}}}),
            all(&|n| n % 3 != 1),
        ),
        (
            json!({"owner": {"$notInQuery": {"className": "Owner", "where": {"name": "ann"}}}}),
            all(&|n| n % 3 != 0),
        ),
        (
            json!({"n": {"$select": {"query": {"className": "Item", "where": {"rare": true}}, "key": "n"}}}),
            all(&|n| n % 7 == 0),
        ),
        (
            json!({"n": {"$dontSelect": {"query": {"className": "Item", "where": {"n": {"$gt": 5}}}, "key": "n"}}}),
            all(&|n| n <= 5),
        ),
    ];
    for (w, want) in cases {
        assert_eq!(names(&c, "Item", w.clone()).await, want, "{w}");
    }

    // createdAt compares with Dates (timestamps have whole seconds, so the expected sets come
    // from the stored values).
    let listed = c
        .request(Method::GET, "/1/classes/Item?limit=500", None, false)
        .await
        .unwrap()
        .body;
    let created: Vec<(String, String)> = listed["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["name"].as_str().unwrap().to_string(),
                o["createdAt"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let pivot = created
        .iter()
        .find(|(name, _)| name == "item20")
        .unwrap()
        .1
        .clone();
    let iso = pivot.replace(' ', "T") + ".000Z";
    let since = json!({"createdAt": {"$gte": {"__type": "Date", "iso": iso}}});
    let before = json!({"createdAt": {"$lt": {"__type": "Date", "iso": iso}}});
    let want_since = set(created
        .iter()
        .filter(|(_, t)| *t >= pivot)
        .map(|(n, _)| n.clone()));
    let want_before = set(created
        .iter()
        .filter(|(_, t)| *t < pivot)
        .map(|(n, _)| n.clone()));
    assert!(want_since.contains("item20") && want_since.contains("item39"));
    assert_eq!(names(&c, "Item", since).await, want_since);
    assert_eq!(names(&c, "Item", before).await, want_before);

    // count with a where, and count only.
    let r = c
        .request(
            Method::GET,
            &format!(
                "/1/classes/Item?count=1&limit=0&where={}",
                urlencode(r#"{"n":{"$lt":10}}"#)
            ),
            None,
            false,
        )
        .await
        .unwrap()
        .body;
    assert_eq!(r["count"], 10);
    assert_eq!(r["results"], json!([]));

    // $relatedTo after AddRelation.
    let post = c
        .create_object("Post", &json!({"name": "p"}))
        .await
        .unwrap()
        .object_id;
    let likers: Vec<Value> = [3usize, 17, 29]
        .iter()
        .map(|&n| json!({"__type": "Pointer", "className": "Item", "objectId": items[n].1}))
        .collect();
    c.request(
        Method::PUT,
        &format!("/1/classes/Post/{post}"),
        Some(&json!({"likes": {"__op": "AddRelation", "objects": likers}})),
        false,
    )
    .await
    .unwrap();
    let related = json!({"$relatedTo": {"object": {"__type": "Pointer", "className": "Post", "objectId": post}, "key": "likes"}});
    assert_eq!(
        names(&c, "Item", related).await,
        set(["item03", "item17", "item29"].map(String::from))
    );

    // Geo: distances from SFO.
    for (name, lat, lng) in [
        ("sf", 37.7749, -122.4194),
        ("sacramento", 38.5816, -121.4944),
        ("honolulu", 21.3069, -157.8583),
    ] {
        c.create_object("Place", &json!({"name": name, "loc": geo(lat, lng)}))
            .await
            .unwrap();
    }
    let sfo = geo(37.6189, -122.3750);
    let near = |km: f64| json!({"loc": {"$nearSphere": sfo, "$maxDistanceInKilometers": km}});
    let places = |v: &[&str]| set(v.iter().map(|s| s.to_string()));
    assert_eq!(
        names(&c, "Place", near(4800.0)).await,
        places(&["sf", "sacramento", "honolulu"])
    );
    assert_eq!(
        names(&c, "Place", near(3700.0)).await,
        places(&["sf", "sacramento"])
    );
    assert_eq!(names(&c, "Place", near(100.0)).await, places(&["sf"]));
    assert_eq!(names(&c, "Place", near(10.0)).await, places(&[]));
    let boxed = json!({"loc": {"$within": {"$box": [geo(37.0, -123.0), geo(39.0, -121.0)]}}});
    assert_eq!(
        names(&c, "Place", boxed).await,
        places(&["sf", "sacramento"])
    );

    // $nearSphere orders by distance unless order says otherwise.
    let ordered = |w: Value, order: &'static str| {
        let c = c.clone();
        async move {
            let path = format!(
                "/1/classes/Place?order={order}&where={}",
                urlencode(&w.to_string())
            );
            let r = c.request(Method::GET, &path, None, false).await.unwrap();
            r.body["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["name"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        ordered(near(4800.0), "").await,
        ["sf", "sacramento", "honolulu"]
    );
    assert_eq!(ordered(near(3700.0), "").await, ["sf", "sacramento"]);
    assert_eq!(
        ordered(near(4800.0), "-name").await,
        ["sf", "sacramento", "honolulu"]
    );
    assert_eq!(
        ordered(near(4800.0), "name").await,
        ["honolulu", "sacramento", "sf"]
    );
    // Nearest first across every node's rows, with `keys` leaving the point out.
    let spots: Vec<Value> = (0..12)
        .map(|i| json!({"rank": i, "at": geo(0.0, f64::from(i) * 0.05)}))
        .collect();
    create_many(&c, "Spot", &spots).await;
    let w = json!({"at": {"$nearSphere": geo(0.0, 0.0)}});
    let path = format!(
        "/1/classes/Spot?keys=rank&skip=2&limit=5&where={}",
        urlencode(&w.to_string())
    );
    let rows = get(&c, &path).await;
    let ranks: Vec<i64> = rows["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["rank"].as_i64().unwrap())
        .collect();
    assert_eq!(ranks, [2, 3, 4, 5, 6], "{rows}");
    assert!(rows["results"][0].get("at").is_none(), "{rows}");

    // Malformed wheres are 102.
    for bad in [
        json!({"n": {"$bogus": 1}}),
        json!({"n": {"$in": 3}}),
        json!({"s": {"$regex": "("}}),
        json!({"$or": {"n": 1}}),
        json!({"$or": [{"n": 1, "limit": 3}]}),
        json!({"_password": "x"}),
        json!({"owner": {"$inQuery": {"className": "Owner", "limit": 1}}}),
        json!({"loc": {"$nearSphere": geo(100.0, 0.0)}}),
    ] {
        let path = format!("/1/classes/Item?where={}", urlencode(&bad.to_string()));
        assert_api_error(
            c.request(Method::GET, &path, None, false).await,
            400,
            102,
            &bad.to_string(),
        );
    }
}

/// Creates `n` objects `{i, pad}` in `class` (`pad`: `i` in five digits, then `width` x's),
/// with `pad` taken out of the indexes before the class has objects: a filter on it reads
/// and checks every object of each shard.
async fn create_unindexed_pads(cluster: &TestCluster, class: &str, n: usize, width: usize) {
    let path = format!("/1/schemas/{class}/indexes/pad");
    let r = cluster
        .master_client(0)
        .request(Method::DELETE, &path, None, true)
        .await
        .unwrap();
    assert_eq!(r.body["msg"], "ok");
    let bodies: Vec<Value> = (0..n)
        .map(|i| json!({"i": i, "pad": format!("{i:05}{}", "x".repeat(width))}))
        .collect();
    create_many(&cluster.spread_client(), class, &bodies).await;
}

/// Creates `objects` in `class` through `/1/batch`, 50 at a time; their objectIds in order.
pub(super) async fn create_many(c: &Client, class: &str, objects: &[Value]) -> Vec<String> {
    let mut ids = Vec::new();
    // Batches of 10: a spread client sends each to the next node, and a node gives new
    // objects ids on the shards it leads (decisions/0025), so every node (and so every
    // shard) gets some of even a few dozen objects.
    for chunk in objects.chunks(10) {
        let requests: Vec<Value> = chunk
            .iter()
            .map(|b| json!({"method": "POST", "path": format!("/1/classes/{class}"), "body": b}))
            .collect();
        for slot in common::batch(c, requests).await {
            ids.push(slot["success"]["objectId"].as_str().unwrap().to_string());
        }
    }
    ids
}

pub(super) async fn get(c: &Client, path: &str) -> Value {
    c.request(Method::GET, path, None, false)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .body
}

/// Paging, order and keys across shards: no limit gives 100, a limit is capped at 500, count
/// counts every object; order by several keys with skip and limit; createdAt orders to the
/// millisecond although it shows whole seconds; keys keeps objectId, createdAt and updatedAt;
/// `GET /1/users` takes the same parameters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_order_and_keys_hold_across_shards() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &super::common::SPREAD_CREATES).await;
    let c = cluster.spread_client();
    // 150 objects: no limit gives 100, limit is capped at 500, count counts them all.
    let bodies: Vec<Value> = (0..150)
        .map(|i| json!({"i": i, "grp": i % 4, "label": format!("L{:03}", 149 - i)}))
        .collect();
    create_many(&c, "Row", &bodies).await;
    let r = get(&c, "/1/classes/Row").await;
    assert_eq!(r["results"].as_array().unwrap().len(), 100);
    assert!(r.get("count").is_none());
    let r = get(&c, "/1/classes/Row?limit=9999&count=1").await;
    assert_eq!(r["results"].as_array().unwrap().len(), 150);
    assert_eq!(r["count"], 150);
    let r = get(&c, "/1/classes/Row?count=1&limit=0").await;
    assert_eq!(r, json!({"results": [], "count": 150}));

    // order by several keys with skip and limit, across shards.
    let ints = |r: &Value| -> Vec<i64> {
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["i"].as_i64().unwrap())
            .collect()
    };
    let r = get(&c, "/1/classes/Row?order=-grp,i&skip=3&limit=5").await;
    let mut want: Vec<i64> = (0..150).collect();
    want.sort_by_key(|&i| (-(i % 4), i));
    assert_eq!(ints(&r), want[3..8]);
    let r = get(&c, "/1/classes/Row?order=label&limit=3").await;
    assert_eq!(ints(&r), [149, 148, 147]);
    // createdAt orders to the millisecond although it shows whole seconds.
    for i in 0..6 {
        c.create_object("Seq", &json!({"i": i})).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let r = get(&c, "/1/classes/Seq?order=-createdAt").await;
    assert_eq!(ints(&r), [5, 4, 3, 2, 1, 0]);
    let r = get(&c, "/1/classes/Seq?order=createdAt").await;
    assert_eq!(ints(&r), [0, 1, 2, 3, 4, 5]);
    assert_eq!(r["results"][0]["createdAt"].as_str().unwrap().len(), 19);

    // keys restricts fields; objectId, createdAt and updatedAt stay.
    let r = get(&c, "/1/classes/Row?keys=i&limit=1&order=i").await;
    let row = r["results"][0].as_object().unwrap();
    let mut fields: Vec<&str> = row.keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(fields, ["createdAt", "i", "objectId", "updatedAt"]);

    super::common::register_user(&c, "ola").await;
    // GET /1/users takes the same parameters.
    let w = urlencode(&json!({"username": {"$in": ["ola", "nobody"]}}).to_string());
    let r = get(&c, &format!("/1/users?where={w}&keys=username&count=1")).await;
    assert_eq!(r["count"], 1);
    assert_eq!(r["results"][0]["username"], "ola");
    assert!(r["results"][0].get("password").is_none());
}

/// Nested include: arrays of pointers, fields restricted per level, users shown without their
/// secrets, an include of a non-pointer ignored; without include pointers stay pointers; a
/// malformed include key is 102.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_include_expands_and_restricts_each_level() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &super::common::SPREAD_CREATES).await;
    let c = cluster.spread_client();
    let users: Vec<(String, String)> = {
        let mut v = Vec::new();
        for name in ["wen", "ola"] {
            v.push(super::common::register_user(&c, name).await);
        }
        v
    };
    let user_ptr =
        |i: usize| json!({"__type": "Pointer", "className": "_User", "objectId": users[i].0});
    let tags = create_many(
        &c,
        "Tag",
        &[
            json!({"t": "x", "by": user_ptr(0)}),
            json!({"t": "y", "by": user_ptr(1)}),
        ],
    )
    .await;
    let tag_ptr = |i: usize| json!({"__type": "Pointer", "className": "Tag", "objectId": tags[i]});
    let post = c
        .create_object(
            "Post",
            &json!({"title": "hello", "likes": 7, "secret": "s", "author": user_ptr(0), "tags": [tag_ptr(0), tag_ptr(1)]}),
        )
        .await
        .unwrap()
        .object_id;
    c.create_object(
        "Comment",
        &json!({"text": "hi", "post": {"__type": "Pointer", "className": "Post", "objectId": post}, "n": 3}),
    )
    .await
    .unwrap();
    let r = get(
        &c,
        "/1/classes/Comment?include=post[likes].author[username|email],post.tags.by,n",
    )
    .await;
    let p = &r["results"][0]["post"];
    assert_eq!(p["__type"], "Object");
    assert_eq!(p["className"], "Post");
    assert_eq!(p["likes"], 7);
    assert!(p.get("title").is_none() && p.get("secret").is_none(), "{p}");
    assert_eq!(p["author"]["__type"], "Object");
    assert_eq!(p["author"]["username"], "wen");
    assert!(p["author"].get("password").is_none());
    assert!(p["author"].get("sessionToken").is_none());
    let tag_names: Vec<&str> = p["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["t"].as_str().unwrap())
        .collect();
    assert_eq!(tag_names, ["x", "y"]);
    assert_eq!(p["tags"][1]["by"]["username"], "ola");
    assert_eq!(
        r["results"][0]["n"], 3,
        "include on a non-pointer is ignored"
    );
    // Without include, pointers stay pointers.
    let r = get(&c, "/1/classes/Comment").await;
    assert_eq!(r["results"][0]["post"]["__type"], "Pointer");
    // A malformed include key is 102.
    assert_api_error(
        c.request(
            Method::GET,
            "/1/classes/Comment?include=post[likes",
            None,
            false,
        )
        .await,
        400,
        102,
        "bad include",
    );
}

/// Shard queries answered through an index (candidates read from an index plan, or a count
/// from index entries) and by scanning the class, over every node.
async fn plans(cluster: &TestCluster) -> (f64, f64) {
    let (mut p, mut s) = (0.0, 0.0);
    for i in 0..3 {
        p += cluster.metric(i, "basalt_query_index_plans_total").await;
        p += cluster
            .metric(i, "basalt_query_counted_from_index_total")
            .await;
        s += cluster.metric(i, "basalt_query_scans_total").await;
    }
    (p, s)
}

/// Each node is asked for about its share of a page: when one shard holds the whole page
/// (its objects score highest), the node leading it sends all it was asked for, is asked
/// again, and the page is still exactly the best rows, with skip and with count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_held_by_one_node_is_complete() {
    const SHARDS: u32 = 4;
    // Placement spreads leadership over the nodes: no node then leads every shard, and each
    // is asked for less than a whole page.
    let cluster = TestCluster::start_spread(3, &["--shards", "4"], &[], 2).await;
    let c = cluster.spread_client();
    let bodies: Vec<Value> = (0..200).map(|i| json!({"score": i})).collect();
    let ids = create_many(&c, "Skew", &bodies).await;
    let app = cluster.keys.application_id.clone();
    let shard = |id: &str| basalt_cluster::ids::shard_for(&app, "Skew", id, SHARDS);
    // The shard holding most of them holds at least a quarter (50).
    let mut sizes: BTreeMap<u32, usize> = BTreeMap::new();
    for id in &ids {
        *sizes.entry(shard(id).get()).or_default() += 1;
    }
    let hot = sizes
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(g, _)| *g)
        .unwrap();
    let mut want: Vec<(i64, String)> = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let mut score = i as i64;
        if shard(id).get() == hot {
            let body = json!({"score": {"__op": "Increment", "amount": 1000}});
            let r = c
                .request(
                    Method::PUT,
                    &format!("/1/classes/Skew/{id}"),
                    Some(&body),
                    false,
                )
                .await
                .unwrap();
            assert_eq!(r.status, 200, "{:?}", r.body);
            score += 1000;
        }
        want.push((score, id.clone()));
    }
    want.sort_by(|a, b| b.cmp(a));
    let hot_objects = want.iter().filter(|(s, _)| *s >= 1000).count();
    assert!(hot_objects >= 50, "{hot_objects} objects in the hot shard");
    let read_again = || async {
        let mut n = 0.0;
        for i in 0..3 {
            n += cluster
                .metric(i, "basalt_query_parts_read_again_total")
                .await;
        }
        n
    };
    let before = read_again().await;
    for (skip, limit) in [(0, 30), (10, 25), (35, 5)] {
        let path = format!("/1/classes/Skew?order=-score&skip={skip}&limit={limit}&count=1");
        let r = get(&c, &path).await;
        let got: Vec<(i64, String)> = r["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["score"].as_i64().unwrap(),
                    o["objectId"].as_str().unwrap().into(),
                )
            })
            .collect();
        let page: Vec<(i64, String)> = want.iter().skip(skip).take(limit).cloned().collect();
        assert_eq!(got, page, "{path}");
        assert_eq!(r["count"], 200, "{path}");
    }
    assert!(
        read_again().await >= before + 3.0,
        "the node holding each page was asked again"
    );
}

/// Story — a model check: indexed answers against a scan's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_and_automatic_indexes_answer_like_a_scan() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &super::common::SPREAD_CREATES).await;
    let c = cluster.spread_client();
    let master = cluster.master_client(1);
    // The class's index listing, and a declaration (answered by the master key).
    let indexes = || async {
        master
            .request(Method::GET, "/1/schemas/Row/indexes", None, true)
            .await
            .unwrap()
            .body
    };
    let declare = |field: &'static str| {
        let master = &master;
        async move {
            master
                .request(
                    Method::POST,
                    "/1/schemas/Row/indexes",
                    Some(&json!({ "field": field })),
                    true,
                )
                .await
                .unwrap()
        }
    };

    let bodies: Vec<Value> = (0..200)
        .map(|i| json!({"i": i, "score": i % 10, "tags": [format!("t{}", i % 3)]}))
        .collect();
    let ids = create_many(&c, "Row", &bodies).await;

    // Declaring an index builds it for the existing objects on every shard.
    let r = declare("score").await;
    assert_eq!(r.body["indexed"], 200);
    let listed = indexes().await;
    assert_eq!(listed["results"], json!(["score"]));
    // The other columns are indexed by themselves; `score`, now declared, is not listed twice.
    assert_eq!(listed["automatic"], json!(["i", "tags"]));
    assert_eq!(listed["optedOut"], json!([]));
    assert_eq!(listed["automaticFull"], json!(false));
    assert_api_error(
        c.request(
            Method::POST,
            "/1/schemas/Row/indexes",
            Some(&json!({"field": "score"})),
            false,
        )
        .await,
        400,
        10061,
        "indexes need the master key",
    );
    for reserved in ["objectId", "ACL", "createdAt"] {
        assert_api_error(
            master
                .request(
                    Method::POST,
                    "/1/schemas/Row/indexes",
                    Some(&json!({ "field": reserved })),
                    true,
                )
                .await,
            400,
            105,
            "a reserved name is no column to index",
        );
    }

    let count = |w: Value| {
        let c = c.clone();
        async move {
            get(
                &c,
                &format!(
                    "/1/classes/Row?count=1&limit=0&where={}",
                    urlencode(&w.to_string())
                ),
            )
            .await["count"]
                .as_u64()
                .unwrap()
        }
    };
    let (p0, s0) = plans(&cluster).await;
    assert_eq!(count(json!({"score": 3})).await, 20);
    assert_eq!(count(json!({"score": {"$in": [1, 2]}})).await, 40);
    assert_eq!(count(json!({"score": {"$gt": 6, "$lte": 8}})).await, 40);
    let (p1, s1) = plans(&cluster).await;
    // Three queries on four shards, all through the index.
    assert_eq!(p1 - p0, 12.0);
    assert_eq!(s1 - s0, 0.0);

    // Writes keep the index: move ten objects from 3 to 4, delete five with score 4.
    for id in ids.iter().skip(3).step_by(10).take(10) {
        c.request(
            Method::PUT,
            &format!("/1/classes/Row/{id}"),
            Some(&json!({"score": {"__op": "Increment", "amount": 1}})),
            false,
        )
        .await
        .unwrap();
    }
    for id in ids.iter().skip(4).step_by(10).take(5) {
        c.request(Method::DELETE, &format!("/1/classes/Row/{id}"), None, false)
            .await
            .unwrap();
    }
    assert_eq!(count(json!({"score": 3})).await, 10);
    assert_eq!(count(json!({"score": 4})).await, 25);
    // A column nobody declared is indexed by itself: its counts and listings read entries.
    let (p2, s2) = plans(&cluster).await;
    assert_eq!(count(json!({"i": {"$lt": 10}})).await, 9);
    let (p3, s3) = plans(&cluster).await;
    assert_eq!((p3 - p2, s3 - s2), (4.0, 0.0));
    let walks = || async {
        let mut n = 0.0;
        for i in 0..3 {
            n += cluster.metric(i, "basalt_query_ordered_walks_total").await;
        }
        n
    };
    let top = |order: &'static str| {
        let c = c.clone();
        async move {
            let rows = get(&c, &format!("/1/classes/Row?order={order}&limit=3")).await;
            rows["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["i"].as_i64().unwrap())
                .collect::<Vec<_>>()
        }
    };
    let w0 = walks().await;
    assert_eq!(top("-i").await, [199, 198, 197]);
    assert!(
        walks().await > w0,
        "an ordered listing walks an automatic column"
    );

    // Opted out: its entries go, later writes do not index it, answers stay the same.
    assert_api_error(
        master
            .request(
                Method::DELETE,
                "/1/schemas/Row/indexes/createdAt",
                None,
                true,
            )
            .await,
        400,
        105,
        "createdAt is always indexed",
    );
    let r = master
        .request(Method::DELETE, "/1/schemas/Row/indexes/i", None, true)
        .await
        .unwrap();
    assert_eq!(
        r.body["removed"], 195,
        "one entry per object left: {:?}",
        r.body
    );
    create_many(&c, "Row", &[json!({"i": -1, "score": 0, "tags": []})]).await;
    let listed = indexes().await;
    assert_eq!(listed["automatic"], json!(["tags"]));
    assert_eq!(listed["optedOut"], json!(["i"]));
    let (_, s2) = plans(&cluster).await;
    assert_eq!(count(json!({"i": {"$lt": 10}})).await, 10);
    let (_, s3) = plans(&cluster).await;
    assert_eq!(s3 - s2, 4.0, "an opted-out column scans");
    let w1 = walks().await;
    assert_eq!(top("-i").await, [199, 198, 197]);
    assert_eq!(top("i").await, [-1, 0, 1]);
    assert_eq!(walks().await, w1, "an opted-out column is not walked");
    // Declared again: back in, built for every object.
    let r = declare("i").await;
    assert_eq!(r.body["indexed"], 196);
    let listed = indexes().await;
    assert_eq!(listed["results"], json!(["score", "i"]));
    assert_eq!(listed["optedOut"], json!([]));
    let (p2, s2) = plans(&cluster).await;
    assert_eq!(count(json!({"i": {"$lt": 10}})).await, 10);
    let (p3, s3) = plans(&cluster).await;
    assert_eq!((p3 - p2, s3 - s2), (4.0, 0.0));

    // createdAt is always indexed: a range on it is planned, and order + limit still hold.
    let listed = get(&c, "/1/classes/Row?order=createdAt&limit=1000").await;
    let rows = listed["results"].as_array().unwrap();
    let pivot = rows[100]["createdAt"].as_str().unwrap().to_string();
    let want = rows
        .iter()
        .filter(|o| o["createdAt"].as_str().unwrap() < pivot.as_str())
        .count() as u64;
    let (p4, _) = plans(&cluster).await;
    let before = json!({"createdAt": {"$lt": {"__type": "Date", "iso": pivot}}});
    assert_eq!(count(before).await, want);
    let (p5, _) = plans(&cluster).await;
    assert_eq!(p5 - p4, 4.0);

    // Dropping the class drops its declarations and opt-outs: a class made again under the
    // name starts without them, its columns indexed by themselves. (80 objects: every shard
    // gets some, so that every shard has the class's index metadata and plans.)
    master
        .request(Method::DELETE, "/1/schemas/Row", None, true)
        .await
        .unwrap();
    let listed = indexes().await;
    assert_eq!(listed["results"], json!([]));
    create_many(&c, "Row", &bodies[..80]).await;
    let listed = indexes().await;
    assert_eq!(listed["automatic"], json!(["i", "score", "tags"]));
    let (p4, s4) = plans(&cluster).await;
    assert_eq!(count(json!({"score": 3})).await, 8);
    let (p5, s5) = plans(&cluster).await;
    assert_eq!((p5 - p4, s5 - s4), (4.0, 0.0));
}

/// Story — a fault: the client leaves mid-listing.
///
/// A listing whose client hung up stops where its shards are read, on every node that reads
/// them: the nodes count the abandoned reads (`basalt_reads_cancelled_total`), and the same
/// listing still answers in full afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_whose_client_left_stops_on_every_node() {
    let cluster = TestCluster::start(3, &["--shards", "6"], &super::common::SPREAD_CREATES).await;
    let c = cluster.spread_client();
    // Enough to read that the coordinator's own part lasts a few milliseconds.
    create_unindexed_pads(&cluster, "Slow", 9_000, 1_000).await;
    let path = format!(
        "/1/classes/Slow?order=-pad&limit=3&where={}",
        urlencode(&json!({"pad": {"$regex": "^0"}}).to_string())
    );
    // (on the coordinating node 1, on its peers)
    let cancelled = || async {
        let mut peers = 0.0;
        for i in 1..3 {
            peers += cluster.metric(i, "basalt_reads_cancelled_total").await;
        }
        let here = cluster.metric(0, "basalt_reads_cancelled_total").await;
        (here, peers)
    };
    assert_eq!(cancelled().await, (0.0, 0.0));
    let both = |(here, peers): (f64, f64)| here >= 1.0 && peers >= 1.0;
    // How long the whole listing takes through node 1 here (the slowest of three tries).
    let mut whole = std::time::Duration::ZERO;
    for _ in 0..3 {
        let began = std::time::Instant::now();
        get(&cluster.client(0), &path).await;
        whole = whole.max(began.elapsed());
    }
    // Clients that send the listing and hang up after 4% to 96% of that time, to the
    // microsecond (a client library's timeout counts whole milliseconds, longer than the
    // coordinator's own read on a fast machine): the coordinator's own shards are read sooner
    // than its peers answer, so the earliest leavers catch its read and the later ones the
    // peers' (tried up to 96 times, as the machine's load moves both).
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nX-Service-Application-Id: {}\r\n\
         X-Service-REST-API-Key: {}\r\n\r\n",
        cluster.keys.application_id, cluster.keys.rest_key
    );
    let addr = cluster.nodes[0].http.clone();
    let mut abandoned = 0;
    for attempt in 0..96u32 {
        let patience = whole * (attempt % 24 + 1) / 25;
        let (addr, request) = (addr.clone(), request.clone());
        let answered = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut conn = std::net::TcpStream::connect(&addr).expect("connect");
            conn.write_all(request.as_bytes())
                .expect("send the listing");
            std::thread::sleep(patience);
            conn.set_nonblocking(true).expect("nonblocking");
            let mut buf = [0u8; 64];
            // Whether the answer had begun before the client hung up (drop closes it).
            matches!(conn.read(&mut buf), Ok(n) if n > 0)
        })
        .await
        .unwrap();
        if !answered {
            abandoned += 1;
        }
        if both(cancelled().await) {
            break;
        }
    }
    assert!(
        abandoned > 0,
        "some listing outlasted its client's patience"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !both(cancelled().await) {
        assert!(
            std::time::Instant::now() < deadline,
            "the nodes count abandoned reads, the coordinator's and a peer's: (here, peers) {:?} \
             after {abandoned} abandoned listings",
            cancelled().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let full = get(&c, &path).await;
    let names: Vec<&str> = full["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["pad"].as_str().unwrap()[..5])
        .collect();
    assert_eq!(names, ["08999", "08998", "08997"]);
}

/// A node runs at most `--max-queries-in-flight` queries: one more answers 503 with
/// `Retry-After` at once instead of queueing behind them, point reads go on meanwhile, and the
/// same query answers once the others are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_node_sheds_queries_with_a_retry_hint() {
    let cluster = TestCluster::start(1, &["--max-queries-in-flight", "2"], &[]).await;
    let c = cluster.client(0);
    let bodies: Vec<Value> = (0..4_000)
        .map(|i| json!({"i": i, "pad": format!("{i:05}{}", "x".repeat(400))}))
        .collect();
    let ids = create_many(&c, "Busy", &bodies).await;
    // Unindexed: every shard reads all of its objects.
    let path = format!(
        "/1/classes/Busy?order=-pad&limit=3&where={}",
        urlencode(&json!({"pad": {"$regex": "^0"}}).to_string())
    );
    let burst: Vec<_> = (0..16)
        .map(|_| {
            let (c, path) = (c.clone(), path.clone());
            tokio::spawn(async move { c.request(Method::GET, &path, None, false).await })
        })
        .collect();
    let point = c
        .request(
            Method::GET,
            &format!("/1/classes/Busy/{}", ids[0]),
            None,
            false,
        )
        .await
        .unwrap();
    assert_eq!(point.body["i"], 0);
    let (mut answered, mut shed) = (0, 0);
    for task in burst {
        match task.await.unwrap() {
            Ok(r) => {
                assert_eq!(r.body["results"].as_array().unwrap().len(), 3);
                answered += 1;
            }
            Err(basalt_client::Error::Api {
                status,
                code,
                retry_after,
                ..
            }) => {
                assert_eq!((status, code, retry_after), (503, Some(503), Some(1)));
                shed += 1;
            }
            Err(e) => panic!("neither an answer nor shed: {e}"),
        }
    }
    assert!(
        answered >= 1 && shed >= 1,
        "{answered} answered, {shed} shed"
    );
    assert!(cluster.metric(0, "basalt_queries_shed_total").await >= 1.0);
    let after = get(&c, &path).await;
    assert_eq!(after["results"][0]["i"], 3_999);
}

/// Listings from many clients at once over a big unindexed class: each node reads for them
/// on at most `--bulk-read-threads` threads (the rest wait their turn, counted), every one
/// answers, and the Raft heartbeats keep arriving meanwhile: no group's term moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_from_many_clients_take_turns_and_keep_every_leader() {
    let cluster = TestCluster::start(
        3,
        &["--shards", "6"],
        &["--bulk-read-threads", "2", "--create-lane-ms", "0"],
    )
    .await;
    create_unindexed_pads(&cluster, "Wide", 6_000, 600).await;
    let path = format!(
        "/1/classes/Wide?order=-pad&limit=2&count=1&where={}",
        urlencode(&json!({"pad": {"$regex": "^0"}}).to_string())
    );
    let terms = || -> Vec<Vec<(u64, u64)>> {
        (0..3)
            .map(|i| cluster.data_group_field(i, "term"))
            .collect()
    };
    // Placement may still move a leader to its preferred node: start once terms hold still.
    let mut before = terms();
    let mut settled = false;
    for _ in 0..10 {
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        let now = terms();
        settled = now == before;
        before = now;
        if settled {
            break;
        }
    }
    assert!(settled, "leaders still moving after 30 s: {before:?}");
    assert!(before.iter().all(|t| t.len() == 6), "terms {before:?}");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(6);
    let clients: Vec<_> = (0..48)
        .map(|k| {
            let (c, path) = (cluster.client(k % 3), path.clone());
            tokio::spawn(async move {
                let mut answered = 0;
                while std::time::Instant::now() < until {
                    let r = c.request(Method::GET, &path, None, false).await;
                    let r = r.unwrap_or_else(|e| panic!("a listing failed: {e}"));
                    assert_eq!(r.body["count"], 6_000);
                    assert_eq!(r.body["results"][0]["i"], 5_999);
                    answered += 1;
                }
                answered
            })
        })
        .collect();
    let mut answered = 0;
    for client in clients {
        answered += client.await.unwrap();
    }
    assert!(answered >= 48, "{answered} listings answered");
    let mut queued = 0.0;
    for i in 0..3 {
        queued += cluster
            .metric(i, "basalt_query_bulk_reads_queued_total")
            .await;
    }
    assert!(queued >= 1.0, "no bulk read waited for a thread");
    assert_eq!(
        terms(),
        before,
        "a group elected a leader while the scans ran"
    );
}
