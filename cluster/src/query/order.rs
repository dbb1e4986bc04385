//! The order of a query's rows: its sort keys, or distance from a `$nearSphere` point, with
//! ties broken on objectId so that merging shards' rows is deterministic.

use std::cmp::Ordering;

use serde_json::Value;

use super::eval::{compare_values, lookup};
use super::filter::{comparable, Filter, GeoPoint};
use super::SortKey;

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

    /// Whether rows are in objectId order (no `order` keys, no `$nearSphere`).
    pub fn is_by_object_id(&self) -> bool {
        self.keys.is_empty() && self.near.is_none()
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

/// Order of two sort values: Dates by their ISO string, Pointers by `className/objectId`,
/// Files by url (their comparable form, as filters compare them and indexes hold them),
/// other values by `compare_values`.
fn sort_compare(x: &Value, y: &Value) -> Ordering {
    if x.is_object() || y.is_object() {
        compare_values(&comparable(x), &comparable(y))
    } else {
        compare_values(x, y)
    }
}

/// Order of two objects under `order`; ties break on objectId.
pub fn compare_objects(a: &Value, b: &Value, order: &[SortKey]) -> Ordering {
    for key in order {
        let x = lookup(a, &key.field).unwrap_or(&Value::Null);
        let y = lookup(b, &key.field).unwrap_or(&Value::Null);
        let o = sort_compare(x, y);
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
}
