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
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        // Objects with an `iso` (Dates) first, by it; the others tie.
        (Value::Object(x), Value::Object(y)) => match (x.get("iso"), y.get("iso")) {
            (Some(i), Some(j)) => compare_values(i, j),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        },
        _ => type_rank(a).cmp(&type_rank(b)),
    }
}

/// Exact order of two JSON numbers (integers of any size against floats included, -0.0 equal
/// to 0), so that sorting sees a total order.
fn compare_numbers(x: &serde_json::Number, y: &serde_json::Number) -> Ordering {
    let int = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (int(x), int(y)) {
        (Some(i), Some(j)) => i.cmp(&j),
        (Some(i), None) => int_against_float(i, y.as_f64().unwrap_or(0.0)),
        (None, Some(j)) => int_against_float(j, x.as_f64().unwrap_or(0.0)).reverse(),
        (None, None) => {
            let (a, b) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            a.partial_cmp(&b).unwrap_or_else(|| a.total_cmp(&b))
        }
    }
}

/// Exact order of an integer and a float.
fn int_against_float(i: i128, f: f64) -> Ordering {
    // Beyond ±2^100 no JSON integer (at most 64 bits) reaches.
    const FAR: f64 = 1.267_650_600_228_229_4e30;
    if f >= FAR {
        return Ordering::Less;
    }
    if f <= -FAR {
        return Ordering::Greater;
    }
    let floor = f.floor();
    match i.cmp(&(floor as i128)) {
        Ordering::Equal if f > floor => Ordering::Less,
        o => o,
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
        // Exact across integers and floats, so the order is total.
        let big = json!(9_007_199_254_740_993i64);
        assert_eq!(
            compare_values(&big, &json!(9_007_199_254_740_992.0)),
            Ordering::Greater
        );
        assert_eq!(compare_values(&json!(-0.0), &json!(0)), Ordering::Equal);
        assert_eq!(compare_values(&json!(2.5), &json!(2)), Ordering::Greater);
        assert_eq!(compare_values(&json!(-2.5), &json!(-2)), Ordering::Less);
        assert_eq!(
            compare_values(&json!(u64::MAX), &json!(1e300)),
            Ordering::Less
        );
        assert_eq!(
            compare_values(&json!({"iso": "a"}), &json!({})),
            Ordering::Less
        );
    }
}
