//! Statements against the `where` JSON they must mean.

use super::*;

fn q(src: &str) -> Query {
    parse(src, &[])
        .unwrap_or_else(|e| panic!("{src}: {e}"))
        .query
}

fn filter(w: Value) -> Filter {
    Filter::parse(w.as_object().unwrap()).unwrap()
}

#[test]
fn select_lists_where_limit_and_order() {
    let s = parse(
        "select name, score, include owner from Game where score >= 10 and (team = 'red' or team <> \"blue\") limit 5, 20 order by -score, name asc",
        &[],
    )
    .unwrap();
    let q = s.query;
    assert_eq!(q.class, "Game");
    assert_eq!(q.keys, ["name", "score"]);
    assert_eq!(q.include[0].key, "owner");
    assert_eq!(
        q.filter,
        filter(
            json!({"$and": [{"score": {"$gte": 10}}, {"$or": [{"team": "red"}, {"team": {"$ne": "blue"}}]}]})
        )
    );
    assert_eq!((q.skip, q.limit), (5, Some(20)));
    assert_eq!(
        q.order,
        basalt_cluster::query::ScanRequest::parse_order("-score,name")
    );
    assert!(!s.count);
    assert_eq!(q.max_limit, Some(MAX_ROWS));
}

#[test]
fn every_test_maps_to_its_operator() {
    let cases = [
        ("a != 1", json!({"a": {"$ne": 1}})),
        ("a < -2.5", json!({"a": {"$lt": -2.5}})),
        ("a <= 3", json!({"a": {"$lte": 3}})),
        ("a > 3", json!({"a": {"$gt": 3}})),
        (
            "name like 'a%b_c.'",
            json!({"name": {"$regex": "^a.*b.c\\.$"}}),
        ),
        ("name regexp '^x+'", json!({"name": {"$regex": "^x+"}})),
        ("a in (1, 'x', true)", json!({"a": {"$in": [1, "x", true]}})),
        ("a not in (1, 2)", json!({"a": {"$nin": [1, 2]}})),
        ("a is exists", json!({"a": {"$exists": true}})),
        ("a is not exists", json!({"a": {"$exists": false}})),
        (
            "d > date('2026-01-01T00:00:00.000Z')",
            json!({"d": {"$gt": {"__type": "Date", "iso": "2026-01-01T00:00:00.000Z"}}}),
        ),
        (
            "p = pointer('Owner', 'abc')",
            json!({"p": {"__type": "Pointer", "className": "Owner", "objectId": "abc"}}),
        ),
        (
            "loc near geopoint(-122.4, 37.6) max 10 km",
            json!({"loc": {"$nearSphere": {"__type": "GeoPoint", "latitude": 37.6, "longitude": -122.4}, "$maxDistanceInKilometers": 10}}),
        ),
        (
            "loc within geopoint(-123, 37) and geopoint(-121, 39)",
            json!({"loc": {"$within": {"$box": [
                {"__type": "GeoPoint", "latitude": 37, "longitude": -123},
                {"__type": "GeoPoint", "latitude": 39, "longitude": -121}]}}}),
        ),
        (
            "loc near [-122.4, 37.6] max 3700 km",
            json!({"loc": {"$nearSphere": {"__type": "GeoPoint", "latitude": 37.6, "longitude": -122.4}, "$maxDistanceInKilometers": 3700}}),
        ),
        (
            "loc within [-123, 37] and [-121, 39]",
            json!({"loc": {"$within": {"$box": [
                {"__type": "GeoPoint", "latitude": 37, "longitude": -123},
                {"__type": "GeoPoint", "latitude": 39, "longitude": -121}]}}}),
        ),
        (
            "owner in (select * from Owner where name = 'ann')",
            json!({"owner": {"$inQuery": {"className": "Owner", "where": {"name": "ann"}}}}),
        ),
        (
            "n not in (select n from Item where rare = true)",
            json!({"n": {"$dontSelect": {"query": {"className": "Item", "where": {"rare": true}}, "key": "n"}}}),
        ),
        (
            "related likes to pointer('Post', 'p1')",
            json!({"$relatedTo": {"object": {"__type": "Pointer", "className": "Post", "objectId": "p1"}, "key": "likes"}}),
        ),
    ];
    for (cond, want) in cases {
        let src = format!("select * from C where {cond}");
        assert_eq!(q(&src).filter, filter(want), "{src}");
    }
}

#[test]
fn placeholders_take_values_in_order() {
    let values = [
        json!("red"),
        json!({"__type": "Date", "iso": "2026-01-01 00:00:00"}),
        json!(7),
    ];
    let q = parse(
        "SELECT * FROM Game WHERE team = ? AND at < ? LIMIT ?",
        &values,
    )
    .unwrap()
    .query;
    assert_eq!(
        q.filter,
        filter(json!({"$and": [{"team": "red"}, {"at": {"$lt": values[1]}}]}))
    );
    assert_eq!(q.limit, Some(7));
    assert_eq!(
        parse("select * from C where a = ?", &[]).unwrap_err().pos,
        26
    );
    assert!(parse("select * from C where a = ?", &[json!(1), json!(2)]).is_err());
    assert!(parse("select * from C order by ?", &[json!("a")]).is_err());
}

#[test]
fn counts_and_aggregates() {
    let s = parse("select count(*) from C where a > 1", &[]).unwrap();
    assert!(s.count);
    assert_eq!(s.query.limit, Some(0));
    assert!(s.query.count);
    let s = parse("select team, sum(score), avg(score), count(*) from C group by team having sum(score) > 10 and count(*) >= 2 order by -sum(score) limit 3", &[]).unwrap();
    assert!(!s.count);
    let agg = s.query.aggregation.unwrap();
    assert_eq!(agg.spec.group_by, ["team"]);
    assert_eq!(
        agg.spec.metrics,
        [
            (Metric::Sum, "score".to_string()),
            (Metric::Average, "score".to_string())
        ]
    );
    assert!(agg.spec.group_count);
    assert_eq!(
        agg.having,
        filter(json!({"$and": [{"_sumScore": {"$gt": 10}}, {"_count": {"$gte": 2}}]}))
    );
    assert_eq!(s.query.order[0].field, "_sumScore");
    assert!(s.query.order[0].descending);
}

#[test]
fn faults_are_reported_where_they_are() {
    let at = |src: &str| parse(src, &[]).unwrap_err().pos;
    assert_eq!(at("selec * from C"), 0);
    assert_eq!(at("select * form C"), 9);
    assert_eq!(at("select * from C where"), 21);
    assert_eq!(at("select * from C where a ="), 25);
    assert_eq!(at("select * from C where a = 1 garbage"), 28);
    assert_eq!(at("select * from C where a ~ 1"), 24);
    assert_eq!(at("select * from C where a = 'open"), 26);
    assert_eq!(at("select * from C limit -1"), 22);
    assert_eq!(at("select * from C where a not like 'x'"), 28);
    assert!(parse("select * from C having a > 1", &[]).is_err());
    assert_eq!(at("select * from C where l near ['a', 1]"), 29);
    assert_eq!(at("select * from C where l near [1 2]"), 32);
    assert!(parse(
        &format!("select * from C where a = '{}'", "x".repeat(5000)),
        &[]
    )
    .is_err());
    let e = parse("select * from C where", &[]).unwrap_err();
    assert!(e.to_string().contains("position 21"), "{e}");
}
