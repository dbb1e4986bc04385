//! Aggregation queries (spec 4.4) on a 3-node cluster over data that spans every shard: each
//! answer equals a direct computation over the created objects.

use std::collections::BTreeMap;

use reqwest::Method;
use serde_json::json;

use super::common::{assert_api_error, TestCluster};
use super::queries::{create_many, get, urlencode};

const TEAMS: [&str; 5] = ["ash", "birch", "cedar", "elm", "fir"];

/// Deterministic pseudo-random numbers (a linear congruential generator).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[derive(Default, Debug)]
struct Direct {
    sum: i64,
    count: u64,
    max: Option<i64>,
    min_day: Option<String>,
}

/// Story — a model check: every aggregation against the same sums computed here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_equal_a_direct_computation() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &super::common::SPREAD_CREATES).await;
    let c = cluster.spread_client();

    let mut rng = Lcg(7);
    let mut bodies = Vec::new();
    let mut direct: BTreeMap<&str, Direct> = BTreeMap::new();
    let mut per_day: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..240 {
        let team = TEAMS[rng.next(5) as usize];
        let score = rng.next(1000) as i64 - 300;
        let day = format!("2026-02-{:02}", 1 + rng.next(6));
        let mut body = json!({
            "i": i,
            "team": team,
            "score": score,
            "when": {"__type": "Date", "iso": format!("{day}T{:02}:30:00.000Z", rng.next(24))},
        });
        if i % 11 == 0 {
            body.as_object_mut().unwrap().remove("score");
        }
        let d = direct.entry(team).or_default();
        d.count += 1;
        if i % 11 != 0 {
            d.sum += score;
            d.max = Some(d.max.map_or(score, |m| m.max(score)));
        }
        if d.min_day.as_ref().is_none_or(|m| day < *m) {
            d.min_day = Some(day.clone());
        }
        *per_day.entry(day).or_default() += 1;
        bodies.push(body);
    }
    create_many(&c, "Game", &bodies).await;

    // sum, average, max, min and _count per team.
    let r = get(
        &c,
        "/1/classes/Game?groupby=team&groupcount=true&sum=score&average=score&max=score&min=when",
    )
    .await;
    let rows = r.as_array().expect("a bare array");
    assert_eq!(rows.len(), TEAMS.len());
    for row in rows {
        let team = row["team"].as_str().unwrap();
        let d = &direct[team];
        let numbers = bodies
            .iter()
            .filter(|b| b["team"] == team && b.get("score").is_some())
            .count() as f64;
        assert_eq!(row["_sumScore"], d.sum, "{row}");
        assert_eq!(row["_count"], d.count, "{row}");
        assert_eq!(row["_maxScore"], d.max.unwrap(), "{row}");
        let avg = row["_avgScore"].as_f64().unwrap();
        assert!((avg - d.sum as f64 / numbers).abs() < 1e-9, "{row}");
        let min_when = row["_minWhen"]["iso"].as_str().unwrap();
        assert!(min_when.starts_with(d.min_day.as_ref().unwrap()), "{row}");
    }

    // having over a result column, order by it, skip and limit.
    let total = |t: &str| direct[t].sum;
    let mut by_sum: Vec<&str> = TEAMS.to_vec();
    by_sum.sort_by_key(|t| -total(t));
    let floor = total(by_sum[3]);
    let having = urlencode(&json!({"_sumScore": {"$gte": floor}}).to_string());
    let r = get(
        &c,
        &format!("/1/classes/Game?groupby=team&sum=score&having={having}&order=-_sumScore&skip=1&limit=2"),
    )
    .await;
    let teams: Vec<&str> = r
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["team"].as_str().unwrap())
        .collect();
    assert_eq!(teams, by_sum[1..3]);

    // A Date column groups by day; groupby alone gives the distinct values.
    let r = get(&c, "/1/classes/Game?groupby=when&groupcount=true&limit=500").await;
    let days: BTreeMap<String, u64> = r
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["when"].as_str().unwrap().to_string(),
                row["_count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(days, per_day);
    let r = get(&c, "/1/classes/Game?groupby=team").await;
    assert_eq!(
        r,
        json!(TEAMS.iter().map(|t| json!({"team": t})).collect::<Vec<_>>())
    );

    // where narrows what is aggregated; no groupby gives one row.
    let w = urlencode(&json!({"team": {"$in": ["ash", "fir"]}}).to_string());
    let r = get(
        &c,
        &format!("/1/classes/Game?where={w}&sum=score&groupcount=1"),
    )
    .await;
    assert_eq!(
        r,
        json!([{"_sumScore": total("ash") + total("fir"), "_count": direct["ash"].count + direct["fir"].count}])
    );

    // Bad having is 102.
    assert_api_error(
        c.request(
            Method::GET,
            "/1/classes/Game?groupby=team&having=[1]",
            None,
            false,
        )
        .await,
        400,
        102,
        "bad having",
    );

    // An app with wrapAggregates gets {results: [...]}.
    cluster
        .console_client(0)
        .request(
            Method::PUT,
            &format!("/1/apps/{}", cluster.keys.application_id),
            Some(&json!({"wrapAggregates": true})),
            false,
        )
        .await
        .expect("wrap aggregates");
    // The change answers once every node applied it: each node wraps at once.
    for node in 0..3 {
        let r = get(
            &cluster.client(node),
            "/1/classes/Game?groupby=team&groupcount=true",
        )
        .await;
        let rows = r["results"].as_array().expect("wrapped rows");
        assert_eq!(rows.len(), TEAMS.len(), "through node {}", node + 1);
        let counted: u64 = rows.iter().map(|r| r["_count"].as_u64().unwrap()).sum();
        assert_eq!(counted, 240);
    }
}
