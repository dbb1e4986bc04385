//! `GET /1/cloudQuery` on a 3-node cluster: BQL statements answer the same rows as their REST
//! equivalents, counts and aggregates included; faults are 601 with their position.

use basalt_client::Client;
use reqwest::Method;
use serde_json::{json, Value};

use super::common::{assert_api_error, TestCluster};
use super::queries::{create_many, get, urlencode};

async fn bql(c: &Client, statement: &str, values: Option<Value>) -> Value {
    let mut path = format!("/1/cloudQuery?bql={}", urlencode(statement));
    if let Some(v) = values {
        path.push_str(&format!("&values={}", urlencode(&v.to_string())));
    }
    get(c, &path).await
}

fn ids(rows: &Value) -> Vec<String> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|o| o["objectId"].as_str().unwrap().to_string())
        .collect()
}

/// Story — a model check: each statement against its REST form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bql_answers_like_the_rest_form() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let c = cluster.spread_client();

    let owners = create_many(
        &c,
        "Owner",
        &[json!({"name": "ann"}), json!({"name": "bob"})],
    )
    .await;
    let bodies: Vec<Value> = (0..60)
        .map(|i| {
            let word = ["apple", "banana", "cherry"][i % 3];
            json!({
                "n": i,
                "word": word,
                "day": {"__type": "Date", "iso": format!("2026-03-{:02}T12:00:00.000Z", 1 + i % 9)},
                "owner": {"__type": "Pointer", "className": "Owner", "objectId": owners[i % 2]},
                "loc": {"__type": "GeoPoint", "latitude": 37.0 + (i as f64) / 100.0, "longitude": -122.0},
            })
        })
        .collect();
    create_many(&c, "Item", &bodies).await;

    let pairs: Vec<(&str, Value, &str)> = vec![
        (
            "n < 10 and word = 'apple'",
            json!({"n": {"$lt": 10}, "word": "apple"}),
            "n",
        ),
        (
            "(n >= 50 or n <= 2) and word <> 'banana'",
            json!({"$and": [{"$or": [{"n": {"$gte": 50}}, {"n": {"$lte": 2}}]}, {"word": {"$ne": "banana"}}]}),
            "-n",
        ),
        (
            "word like 'ch%'",
            json!({"word": {"$regex": "^ch.*$"}}),
            "n",
        ),
        (
            "word regexp 'an+a$'",
            json!({"word": {"$regex": "an+a$"}}),
            "n",
        ),
        (
            "n in (1, 2, 3) or n not in (select n from Item where n > 4)",
            json!({"$or": [{"n": {"$in": [1, 2, 3]}}, {"n": {"$dontSelect": {"query": {"className": "Item", "where": {"n": {"$gt": 4}}}, "key": "n"}}}]}),
            "n",
        ),
        (
            "owner in (select * from Owner where name = 'bob')",
            json!({"owner": {"$inQuery": {"className": "Owner", "where": {"name": "bob"}}}}),
            "n",
        ),
        (
            "day >= date('2026-03-08T00:00:00.000Z')",
            json!({"day": {"$gte": {"__type": "Date", "iso": "2026-03-08T00:00:00.000Z"}}}),
            "n",
        ),
        (
            "missing is not exists and n > 55",
            json!({"missing": {"$exists": false}, "n": {"$gt": 55}}),
            "n",
        ),
        (
            "loc within geopoint(-123, 37.1) and geopoint(-121, 37.2)",
            json!({"loc": {"$within": {"$box": [
                {"__type": "GeoPoint", "latitude": 37.1, "longitude": -123.0},
                {"__type": "GeoPoint", "latitude": 37.2, "longitude": -121.0}]}}}),
            "n",
        ),
        (
            "loc within [-123, 37.1] and [-121, 37.2]",
            json!({"loc": {"$within": {"$box": [
                {"__type": "GeoPoint", "latitude": 37.1, "longitude": -123.0},
                {"__type": "GeoPoint", "latitude": 37.2, "longitude": -121.0}]}}}),
            "n",
        ),
        (
            "loc near [-122, 37.3] max 3700 km",
            json!({"loc": {"$nearSphere": {"__type": "GeoPoint", "latitude": 37.3, "longitude": -122.0},
                "$maxDistanceInKilometers": 3700}}),
            "n",
        ),
    ];
    for (cond, w, order) in pairs {
        let rest = get(
            &c,
            &format!(
                "/1/classes/Item?limit=1000&order={order}&where={}",
                urlencode(&w.to_string())
            ),
        )
        .await;
        let order_by = order.to_string();
        let statement = format!("select * from Item where {cond} limit 1000 order by {order_by}");
        let got = bql(&c, &statement, None).await;
        assert!(!ids(&rest["results"]).is_empty(), "{cond}");
        assert_eq!(ids(&got["results"]), ids(&rest["results"]), "{statement}");
        assert!(got.get("count").is_none());
    }

    // near orders by distance like $nearSphere.
    let rest = get(
        &c,
        &format!(
            "/1/classes/Item?where={}",
            urlencode(&json!({"loc": {"$nearSphere": {"__type": "GeoPoint", "latitude": 37.3, "longitude": -122.0}, "$maxDistanceInKilometers": 12}}).to_string())
        ),
    )
    .await;
    let got = bql(
        &c,
        "select * from Item where loc near geopoint(-122, 37.3) max 12 km",
        None,
    )
    .await;
    assert_eq!(ids(&got["results"]), ids(&rest["results"]));
    assert_eq!(got["results"][0]["n"], 30);

    // Placeholders, keys, include, skip/limit.
    let got = bql(
        &c,
        "select n, include owner from Item where word = ? and n >= ? limit 1, 2 order by n",
        Some(json!(["cherry", 10])),
    )
    .await;
    let rows = got["results"].as_array().unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r["n"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [14, 17]
    );
    assert!(rows[0].get("word").is_none());
    assert_eq!(rows[0]["owner"]["__type"], "Object");
    assert_eq!(rows[0]["owner"]["name"], "ann");

    // count(*) alone, and with rows.
    let got = bql(&c, "select count(*) from Item where n < 7", None).await;
    assert_eq!(got, json!({"results": [], "count": 7}));
    let got = bql(&c, "select *, count(*) from Item where n < 7 limit 2", None).await;
    assert_eq!(got["count"], 7);
    assert_eq!(got["results"].as_array().unwrap().len(), 2);

    // group by, aggregates and having like the REST parameters.
    let having = urlencode(&json!({"_count": {"$gte": 20}}).to_string());
    let rest = get(
        &c,
        &format!("/1/classes/Item?groupby=word&sum=n&groupcount=1&having={having}&order=-_sumN"),
    )
    .await;
    let got = bql(
        &c,
        "select word, sum(n), count(*) from Item group by word having count(*) >= 20 order by -sum(n)",
        None,
    )
    .await;
    assert_eq!(got["results"], rest);
    assert_eq!(rest.as_array().unwrap().len(), 3);

    // System classes read like their REST listings: users without secrets or other users'
    // private fields, roles.
    let (ann_id, ann_token) = super::common::register_user(&c, "ann").await;
    let c_ann = c.clone().with_session(Some(&ann_token));
    c_ann
        .request(
            Method::PUT,
            &format!("/1/users/{ann_id}"),
            Some(&json!({"email": "ann@x.org"})),
            false,
        )
        .await
        .expect("ann sets her email");
    let users = bql(&c, "select * from _User where username = 'ann'", None).await;
    let rest = get(
        &c,
        &format!(
            "/1/users?where={}",
            urlencode(&json!({"username": "ann"}).to_string())
        ),
    )
    .await;
    assert_eq!(users["results"], rest["results"]);
    let ann = &users["results"][0];
    assert_eq!(ann["objectId"], ann_id.as_str());
    for secret in [
        "password",
        "_password",
        "sessionToken",
        "_sessions",
        "email",
    ] {
        assert!(ann.get(secret).is_none(), "{secret} shown: {ann}");
    }
    let own = bql(&c_ann, "select * from _User where username = 'ann'", None).await;
    assert_eq!(own["results"][0]["email"], "ann@x.org", "her own email");
    cluster
        .master_client(0)
        .request(
            Method::POST,
            "/1/roles",
            Some(&json!({"name": "editors", "ACL": {"*": {"read": true}}})),
            true,
        )
        .await
        .expect("create a role");
    let roles = bql(&c, "select name from _Role where name = 'editors'", None).await;
    assert_eq!(roles["results"][0]["name"], "editors");

    // Faults: 601 with the position.
    for (statement, pos) in [
        ("select * form Item", "position 9"),
        ("select * from Item where n = = 1", "position 29"),
        ("select * from Item where n = ?", "position 29"),
    ] {
        let r = c
            .request(
                Method::GET,
                &format!("/1/cloudQuery?bql={}", urlencode(statement)),
                None,
                false,
            )
            .await;
        match &r {
            Err(basalt_client::Error::Api { message, .. }) => {
                assert!(message.contains(pos), "{statement}: {message}")
            }
            other => panic!("{statement}: {other:?}"),
        }
        assert_api_error(r, 400, 601, statement);
    }
    assert_api_error(
        c.request(
            Method::GET,
            "/1/cloudQuery?bql=select%20*%20from%20Item&values=3",
            None,
            false,
        )
        .await,
        400,
        601,
        "values not an array",
    );
}

/// `/1/cloudQuery` as a table, on one node: statements it refuses (601), who may ask, and a
/// statement over a class that holds nothing yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_query_endpoint_answers_as_its_table_says() {
    use crate::common::scenario::{run_rows, As, Row};
    let cluster = TestCluster::start(1, &[], &[]).await;
    let ask = |name: &'static str, statement: &str| {
        Row::new(
            name,
            Method::GET,
            format!("/1/cloudQuery?bql={}", urlencode(statement)),
        )
    };
    let rows = vec![
        ask("a select", "select * from Item").succeeds(200),
        ask("a count", "select count(*) from Item").succeeds(200),
        ask("a statement that does not parse", "select * form Item").fails(400, 601),
        ask(
            "a placeholder without values",
            "select * from Item where n = ?",
        )
        .fails(400, 601),
        Row::new(
            "values that are no array",
            Method::GET,
            "/1/cloudQuery?bql=select%20*%20from%20Item&values=3",
        )
        .fails(400, 601),
        Row::new("no statement", Method::GET, "/1/cloudQuery").fails(400, 601),
        ask("a statement without keys", "select * from Item")
            .auth(As::Nobody)
            .unauthorized(),
    ];
    run_rows(&cluster, &rows).await;
}
