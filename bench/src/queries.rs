//! The query workloads of `basalt-bench`: loading a class of N generated objects through
//! `POST /1/batch`, declaring its indexes, and the parameters of each query workload (indexed
//! equality, range with order+limit, the newest 20 with and without a count, the first page,
//! count, groupby aggregation). `main` times them.
//!
//! Every object is a function of its number `i`, so a load can resume and every query's
//! selectivity is known: `k = i mod N/10` (10 objects per value), `score` a spread of `i` over
//! 0..1,000,000 (`rank` the same values in a column never declared indexed, to compare a query
//! with and without its index in one run), `team` one of 20 values.

use std::time::{Duration, Instant};

use anyhow::Context;
use basalt_client::{Client, Method};
use serde_json::{json, Value};

/// The class the query workloads read.
pub const CLASS: &str = "QueryItem";
/// Columns `declare_indexes` indexes.
pub const INDEXED: [&str; 2] = ["k", "score"];
const SCORES: u64 = 1_000_000;
const TEAMS: u64 = 20;

/// Width of the score ranges of the workloads, as a share of all scores.
const RANGE_WIDTH: u64 = SCORES / 100;
const COUNT_WIDTH: u64 = SCORES / 20;
const GROUP_WIDTH: u64 = SCORES / 10;

/// The `i`-th object of the class.
pub fn item(i: u64, objects: u64) -> Value {
    json!({
        "k": i % (objects / 10).max(1),
        "score": spread(i) % SCORES,
        "rank": spread(i) % SCORES,
        "team": format!("t{:02}", i % TEAMS),
        "payload": "q".repeat(64),
    })
}

/// A fixed bijective mix of `i`, so neighbouring objects get unrelated scores.
fn spread(i: u64) -> u64 {
    let mut x = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1330_11EB);
    x ^ (x >> 31)
}

/// The query string parameters of query workload `name` for random number `r`, or `None` when
/// `name` is not a query workload.
pub fn params(name: &str, r: u64, objects: u64) -> Option<Vec<(&'static str, String)>> {
    let lo = |width: u64| spread(r) % (SCORES - width);
    let between = |width: u64| {
        let lo = lo(width);
        json!({"score": {"$gte": lo, "$lt": lo + width}}).to_string()
    };
    Some(match name {
        // 10 matching objects.
        "q-eq" => vec![(
            "where",
            json!({"k": spread(r) % (objects / 10).max(1)}).to_string(),
        )],
        // 1% of the objects match; the 20 highest scores.
        "q-range" => vec![
            ("where", between(RANGE_WIDTH)),
            ("order", "-score".into()),
            ("limit", "20".into()),
        ],
        // The 20 best scores above a random one (the query): walks the score index.
        "q-top" => vec![
            ("where", json!({"score": {"$gt": lo(0)}}).to_string()),
            ("order", "-score".into()),
            ("limit", "20".into()),
        ],
        // The same on `rank`, which has no index: every object is read.
        "q-top-unindexed" => vec![
            ("where", json!({"rank": {"$gt": lo(0)}}).to_string()),
            ("order", "-rank".into()),
            ("limit", "20".into()),
        ],
        // The 20 newest objects (the most common app query): walks the createdAt index.
        "q-newest" => vec![("order", "-createdAt".into()), ("limit", "20".into())],
        // The same with the count of the class: every object is read.
        "q-newest-counted" => vec![
            ("order", "-createdAt".into()),
            ("limit", "20".into()),
            ("count", "1".into()),
        ],
        // The first page in the default order (objectId).
        "q-list" => vec![("limit", "20".into())],
        // 5% of the objects counted.
        "q-count" => vec![
            ("where", between(COUNT_WIDTH)),
            ("count", "1".into()),
            ("limit", "0".into()),
        ],
        // The whole class counted (from the shards' class counts).
        "q-count-all" => vec![("count", "1".into()), ("limit", "0".into())],
        // 5% of the objects counted on `rank`, without an index: every object is read.
        "q-count-unindexed" => vec![
            (
                "where",
                json!({"rank": {"$gte": lo(COUNT_WIDTH), "$lt": lo(COUNT_WIDTH) + COUNT_WIDTH}})
                    .to_string(),
            ),
            ("count", "1".into()),
            ("limit", "0".into()),
        ],
        // 10% of the objects summed and averaged per team.
        "q-groupby" => vec![
            ("where", between(GROUP_WIDTH)),
            ("groupby", "team".into()),
            ("sum", "score".into()),
            ("average", "score".into()),
            ("groupcount", "true".into()),
        ],
        // Every object summed per team (bench-peers' `groupby sum`).
        "q-groupby-all" => vec![("groupby", "team".into()), ("sum", "score".into())],
        // Every object counted per team (from the `team` entries, without reading objects).
        "q-groupcount-all" => vec![("groupby", "team".into()), ("groupcount", "true".into())],
        _ => return None,
    })
}

/// Objects of the class the cluster holds now.
pub async fn count(client: &Client) -> anyhow::Result<u64> {
    let v = client
        .query(CLASS, &[("count", "1"), ("limit", "0")])
        .await
        .context("counting the query class")?;
    v["count"].as_u64().context("count missing")
}

/// Creates objects `have..objects` in batches of 50 over `concurrency` tasks spread across the
/// clients, printing progress; answers the failed creates.
pub async fn load(
    clients: &[Client],
    have: u64,
    objects: u64,
    concurrency: usize,
) -> anyhow::Result<u64> {
    crate::batches::load(clients, have, objects, concurrency, "objects", |i, total| {
        json!({"method": "POST", "path": format!("/1/classes/{CLASS}"), "body": item(i, total)})
    })
    .await
}

/// Declares the indexes of `INDEXED` (master key; each builds over the existing objects before
/// it answers) and answers how long each took.
pub async fn declare_indexes(client: &Client) -> anyhow::Result<Vec<(String, Duration, u64)>> {
    let long = client.clone().with_timeout(Duration::from_secs(3600))?;
    let mut out = Vec::new();
    for field in INDEXED {
        let t = Instant::now();
        let v = long
            .request(
                Method::POST,
                &format!("/1/schemas/{CLASS}/indexes"),
                Some(&json!({ "field": field })),
                true,
            )
            .await
            .with_context(|| format!("declaring the index on {field}"))?;
        out.push((
            field.to_string(),
            t.elapsed(),
            v.body["indexed"].as_u64().unwrap_or(0),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_spread_and_queries_select_what_they_say() {
        let n = 10_000;
        let items: Vec<Value> = (0..n).map(|i| item(i, n)).collect();
        let k7 = items.iter().filter(|o| o["k"] == json!(7)).count();
        assert_eq!(k7, 10);
        let p = params("q-range", 3, n).expect("a query workload");
        let w: Value = serde_json::from_str(&p[0].1).expect("where json");
        let (lo, hi) = (
            w["score"]["$gte"].as_u64().expect("lo"),
            w["score"]["$lt"].as_u64().expect("hi"),
        );
        assert_eq!(hi - lo, RANGE_WIDTH);
        let inside = items
            .iter()
            .filter(|o| (lo..hi).contains(&o["score"].as_u64().unwrap_or(0)))
            .count();
        // 1% of 10,000 objects, give or take the spread's unevenness.
        assert!((50..200).contains(&inside), "{inside} in range");
        assert!(params("create", 1, n).is_none());
    }
}
