//! Values of rendered objects: lookup by dot path and the total order of JSON values that
//! filters (`filter`) and row orders (`order`) compare with.
//!
//! Values of different JSON types order by type (null < bool < number < string < array <
//! object); Dates compare by their `iso` string, which sorts chronologically in wire format.

use std::cmp::Ordering;

use serde_json::Value;

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
            // -0.0 equals 0, as in the index.
            _ => {
                let (a, b) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                a.partial_cmp(&b).unwrap_or_else(|| a.total_cmp(&b))
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Object(x), Value::Object(y)) => match (x.get("iso"), y.get("iso")) {
            (Some(i), Some(j)) => compare_values(i, j),
            _ => Ordering::Equal,
        },
        _ => type_rank(a).cmp(&type_rank(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_compare_across_int_and_float() {
        assert_eq!(compare_values(&json!(1), &json!(1.5)), Ordering::Less);
        assert_eq!(compare_values(&json!(-3), &json!(2)), Ordering::Less);
        assert_eq!(compare_values(&json!("b"), &json!(5)), Ordering::Greater);
    }
}
