//! A property test of the query engine: random objects spread over every shard of a 3-node
//! cluster, and random `where` / `order` / `skip` / `limit`, answer exactly what a naive
//! in-memory evaluation written here (independently of the engine) selects.

use std::cmp::Ordering;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};

use super::common::TestCluster;
use super::queries::{create_many, get, urlencode};

const WORDS: [&str; 4] = ["x", "y", "z", "xy"];
const QUERIES: usize = 150;

fn random_value(rng: &mut StdRng, field: &str) -> Value {
    match field {
        "a" => json!(rng.random_range(0..20)),
        "b" => json!(WORDS[rng.random_range(0..WORDS.len())]),
        _ => json!((rng.random_range(0..400) as f64) / 8.0),
    }
}

/// Kind rank for ordering: missing < number < string.
fn rank(v: Option<&Value>) -> u8 {
    match v {
        None | Some(Value::Null) => 0,
        Some(Value::Number(_)) => 2,
        Some(_) => 3,
    }
}

fn cmp(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            x.as_f64().unwrap().total_cmp(&y.as_f64().unwrap())
        }
        (Some(Value::String(x)), Some(Value::String(y))) => x.cmp(y),
        _ => rank(a).cmp(&rank(b)),
    }
}

fn same_kind(a: &Value, b: &Value) -> bool {
    (a.is_number() && b.is_number()) || (a.is_string() && b.is_string())
}

/// One field condition, naively.
fn holds(v: Option<&Value>, op: &str, arg: &Value) -> bool {
    let eq = |x: &Value| v.is_some_and(|v| same_kind(v, x) && cmp(Some(v), Some(x)).is_eq());
    let ord = |want: &[Ordering]| {
        v.is_some_and(|v| same_kind(v, arg) && want.contains(&cmp(Some(v), Some(arg))))
    };
    match op {
        "$eq" => eq(arg),
        "$ne" => !eq(arg),
        "$lt" => ord(&[Ordering::Less]),
        "$lte" => ord(&[Ordering::Less, Ordering::Equal]),
        "$gt" => ord(&[Ordering::Greater]),
        "$gte" => ord(&[Ordering::Greater, Ordering::Equal]),
        "$in" => arg.as_array().unwrap().iter().any(eq),
        "$nin" => !arg.as_array().unwrap().iter().any(eq),
        "$exists" => v.is_some() == arg.as_bool().unwrap(),
        _ => unreachable!(),
    }
}

/// A random condition: its `where` JSON and the naive predicate's parts.
fn random_condition(rng: &mut StdRng) -> (Value, Vec<(String, String, Value)>) {
    let mut parts = Vec::new();
    let mut w = Map::new();
    for _ in 0..rng.random_range(1..=2) {
        let field = ["a", "b", "c"][rng.random_range(0..3)].to_string();
        if w.contains_key(&field) {
            continue;
        }
        let ops = [
            "$eq", "$ne", "$lt", "$lte", "$gt", "$gte", "$in", "$nin", "$exists",
        ];
        let op = ops[rng.random_range(0..ops.len())];
        let arg = match op {
            "$in" | "$nin" => json!((0..rng.random_range(1..4))
                .map(|_| random_value(rng, &field))
                .collect::<Vec<_>>()),
            "$exists" => json!(rng.random_bool(0.5)),
            _ => random_value(rng, &field),
        };
        let cond = if op == "$eq" {
            arg.clone()
        } else {
            json!({ op: arg.clone() })
        };
        w.insert(field.clone(), cond);
        parts.push((field, op.to_string(), arg));
    }
    (Value::Object(w), parts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queries_answer_like_a_naive_evaluation() {
    let seed: u64 = std::env::var("BASALT_QUERY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261122);
    eprintln!("query model seed {seed} (set BASALT_QUERY_SEED to replay)");
    let mut rng = StdRng::seed_from_u64(seed);
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let c = cluster.spread_client();

    let mut bodies = Vec::new();
    for _ in 0..120 {
        let mut o = Map::new();
        for f in ["a", "b", "c"] {
            if rng.random_bool(0.9) {
                o.insert(f.to_string(), random_value(&mut rng, f));
            }
        }
        bodies.push(Value::Object(o));
    }
    let ids = create_many(&c, "Obj", &bodies).await;
    let objects: Vec<(String, Value)> = ids.into_iter().zip(bodies).collect();

    for q in 0..QUERIES {
        let (w, preds) = if rng.random_bool(0.25) {
            let (w1, p1) = random_condition(&mut rng);
            let (w2, p2) = random_condition(&mut rng);
            (json!({"$or": [w1, w2]}), vec![p1, p2])
        } else {
            let (w, p) = random_condition(&mut rng);
            (w, vec![p])
        };
        let order_field = ["a", "b", "c"][rng.random_range(0..3)];
        let descending = rng.random_bool(0.5);
        let skip = rng.random_range(0..10);
        let limit = rng.random_range(1..50);

        let mut want: Vec<&(String, Value)> = objects
            .iter()
            .filter(|(_, o)| {
                preds.iter().any(|conj| {
                    conj.iter()
                        .all(|(f, op, arg)| holds(o.get(f.as_str()), op, arg))
                })
            })
            .collect();
        let total = want.len();
        want.sort_by(|(ia, a), (ib, b)| {
            let o = cmp(a.get(order_field), b.get(order_field));
            let o = if descending { o.reverse() } else { o };
            o.then_with(|| ia.cmp(ib))
        });
        let want: Vec<&str> = want
            .iter()
            .skip(skip)
            .take(limit)
            .map(|(id, _)| id.as_str())
            .collect();

        let order = if descending {
            format!("-{order_field}")
        } else {
            order_field.to_string()
        };
        let path = format!(
            "/1/classes/Obj?count=1&order={order}&skip={skip}&limit={limit}&where={}",
            urlencode(&w.to_string())
        );
        let r = get(&c, &path).await;
        let got: Vec<&str> = r["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["objectId"].as_str().unwrap())
            .collect();
        assert_eq!(got, want, "query {q}: {path}");
        assert_eq!(r["count"], total, "query {q}: {path}");
    }
}
