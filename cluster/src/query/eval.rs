//! Value lookup by dot path and the sort order of rendered objects (the `where` itself is
//! `filter`).
//!
//! Values of different JSON types order by type (null < bool < number < string < array <
//! object); Dates compare by their `iso` string, which sorts chronologically in wire format.

use std::cmp::Ordering;

use serde_json::Value;

use super::filter::{Filter, GeoPoint};
use super::SortKey;

/// The value at a dot path of an object.
pub fn lookup<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(object, |v, seg| match v {
        Value::Object(m) => m.get(seg),
        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

fn type_rank(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Number(_) => 2,
        Value::String(_) => 3,
        Value::Array(_) => 4,
        Value::Object(_) => 5,
    }
}

/// Total order on JSON values used for sorting.
pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i.cmp(&j),
            _ => x
                .as_f64()
                .unwrap_or(0.0)
                .total_cmp(&y.as_f64().unwrap_or(0.0)),
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Object(x), Value::Object(y)) => match (x.get("iso"), y.get("iso")) {
            (Some(i), Some(j)) => compare_values(i, j),
            _ => Ordering::Equal,
        },
        _ => type_rank(a).cmp(&type_rank(b)),
    }
}

/// The order of a query's rows: its `order` keys, or, when it has none and its `where` has a
/// `$nearSphere`, distance from that point (nearest first). Ties break on objectId so that the
/// merge of shard results is deterministic.
#[derive(Debug, Clone)]
pub struct RowOrder {
    keys: Vec<SortKey>,
    near: Option<(String, GeoPoint)>,
}

impl RowOrder {
    pub fn new(keys: &[SortKey], filter: &Filter) -> RowOrder {
        RowOrder {
            keys: keys.to_vec(),
            near: if keys.is_empty() {
                filter.near().map(|(p, g)| (p.to_string(), g))
            } else {
                None
            },
        }
    }

    pub fn compare(&self, a: &Value, b: &Value) -> Ordering {
        match &self.near {
            Some((path, point)) => {
                let d = |v: &Value| {
                    lookup(v, path)
                        .and_then(GeoPoint::from_value)
                        .map_or(f64::INFINITY, |g| point.radians_to(&g))
                };
                d(a).total_cmp(&d(b))
                    .then_with(|| object_id(a).cmp(object_id(b)))
            }
            None => compare_objects(a, b, &self.keys),
        }
    }
}

fn object_id(v: &Value) -> &str {
    v.get("objectId")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Order of two objects under `order`; ties break on objectId.
pub fn compare_objects(a: &Value, b: &Value, order: &[SortKey]) -> Ordering {
    for key in order {
        let x = lookup(a, &key.field).unwrap_or(&Value::Null);
        let y = lookup(b, &key.field).unwrap_or(&Value::Null);
        let o = compare_values(x, y);
        let o = if key.descending { o.reverse() } else { o };
        if o != Ordering::Equal {
            return o;
        }
    }
    object_id(a).cmp(object_id(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ordering_by_several_keys() {
        let mut rows = [
            json!({"objectId": "c", "a": 1, "b": 2}),
            json!({"objectId": "a", "a": 2, "b": 1}),
            json!({"objectId": "b", "a": 1, "b": 3}),
        ];
        let order = crate::query::ScanRequest::parse_order("a,-b");
        rows.sort_by(|x, y| compare_objects(x, y, &order));
        let ids: Vec<_> = rows
            .iter()
            .map(|r| r["objectId"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["b", "c", "a"]);
    }

    #[test]
    fn numbers_compare_across_int_and_float() {
        assert_eq!(compare_values(&json!(1), &json!(1.5)), Ordering::Less);
        assert_eq!(compare_values(&json!(-3), &json!(2)), Ordering::Less);
        assert_eq!(compare_values(&json!("b"), &json!(5)), Ordering::Greater);
    }
}
