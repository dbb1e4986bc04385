//! The update operators of spec 4.2, applied to an object's fields inside `apply`.
//!
//! Operators read the stored value and write the new one in one step of the state machine, so
//! concurrent Increments or Adds on one object never lose an update. A failing update leaves
//! the object untouched: callers apply to a copy and keep it only on success.

use serde_json::{Map, Number, Value};

use crate::error::{Error, Result};
use crate::update::{FieldUpdate, UpdateOp};

/// Applies `updates` in order to `fields`.
pub fn apply_updates(fields: &mut Map<String, Value>, updates: &[FieldUpdate]) -> Result<()> {
    for u in updates {
        apply_one(fields, &u.path, &u.op)?;
    }
    Ok(())
}

fn apply_one(fields: &mut Map<String, Value>, path: &[String], op: &UpdateOp) -> Result<()> {
    let Some((column, rest)) = path.split_first() else {
        return Err(Error::InvalidKey("empty field name".into()));
    };
    if rest.is_empty() {
        return set_in_map(fields, column, op);
    }
    if matches!(op, UpdateOp::Delete) && !fields.contains_key(column) {
        return Ok(());
    }
    let child = fields
        .entry(column.clone())
        .or_insert_with(|| Value::Object(Map::new()));
    apply_nested(child, rest, op, column)
}

/// Walks `path` below a column. Object members are created on the way when missing; array
/// elements must exist.
fn apply_nested(container: &mut Value, path: &[String], op: &UpdateOp, column: &str) -> Result<()> {
    let Some((seg, rest)) = path.split_first() else {
        return Ok(());
    };
    match container {
        Value::Object(map) => {
            if rest.is_empty() {
                return set_in_map(map, seg, op);
            }
            if matches!(op, UpdateOp::Delete) && !map.contains_key(seg) {
                return Ok(());
            }
            let child = map
                .entry(seg.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            apply_nested(child, rest, op, column)
        }
        Value::Array(items) => {
            let idx: usize = seg.parse().map_err(|_| {
                Error::TypeMismatch(format!("{column}: {seg:?} is not an index into an array"))
            })?;
            let len = items.len();
            let slot = items.get_mut(idx).ok_or_else(|| {
                Error::InvalidValue(format!(
                    "{column}: index {idx} is beyond the array's {len} elements"
                ))
            })?;
            if rest.is_empty() {
                match compute(Some(slot), op, column)? {
                    Some(v) => *slot = v,
                    None => *slot = Value::Null,
                }
                Ok(())
            } else {
                apply_nested(slot, rest, op, column)
            }
        }
        _ => Err(Error::TypeMismatch(format!(
            "{column}: a member can only be set inside an object or array"
        ))),
    }
}

fn set_in_map(map: &mut Map<String, Value>, key: &str, op: &UpdateOp) -> Result<()> {
    match compute(map.get(key), op, key)? {
        Some(v) => {
            map.insert(key.to_string(), v);
        }
        None => {
            map.remove(key);
        }
    }
    Ok(())
}

/// The new value of a field under `op`; `None` removes the field.
fn compute(current: Option<&Value>, op: &UpdateOp, name: &str) -> Result<Option<Value>> {
    let current = current.filter(|v| !v.is_null());
    let mismatch = |what: &str| Error::TypeMismatch(format!("{name}: {what}"));
    Ok(match op {
        UpdateOp::Set(v) => Some(v.clone()),
        UpdateOp::Delete => None,
        UpdateOp::Increment(amount) | UpdateOp::IncrementInRange(amount) => match current {
            None => Some(Value::Number(amount.clone())),
            Some(Value::Number(n)) => {
                let in_range = matches!(op, UpdateOp::IncrementInRange(_));
                Some(Value::Number(add_numbers(n, amount, name, in_range)?))
            }
            Some(_) => return Err(mismatch("Increment needs a number field")),
        },
        UpdateOp::Add(objects) => match current {
            None => Some(Value::Array(objects.clone())),
            Some(Value::Array(items)) => {
                let mut items = items.clone();
                items.extend(objects.iter().cloned());
                Some(Value::Array(items))
            }
            Some(_) => return Err(mismatch("Add needs an array field")),
        },
        UpdateOp::AddUnique(objects) => {
            let mut items = match current {
                None => Vec::new(),
                Some(Value::Array(items)) => items.clone(),
                Some(_) => return Err(mismatch("AddUnique needs an array field")),
            };
            for o in objects {
                if !items.contains(o) {
                    items.push(o.clone());
                }
            }
            Some(Value::Array(items))
        }
        UpdateOp::Remove(objects) => match current {
            None => Some(Value::Array(Vec::new())),
            Some(Value::Array(items)) => Some(Value::Array(
                items
                    .iter()
                    .filter(|v| !objects.contains(v))
                    .cloned()
                    .collect(),
            )),
            Some(_) => return Err(mismatch("Remove needs an array field")),
        },
        UpdateOp::AddRelation { class_name, ids } => {
            let mut members = relation_members(current, class_name, name)?;
            for id in ids {
                if !members.contains(id) {
                    members.push(id.clone());
                }
            }
            Some(relation_value(class_name, members))
        }
        UpdateOp::RemoveRelation { class_name, ids } => {
            let members = relation_members(current, class_name, name)?;
            Some(relation_value(
                class_name,
                members.into_iter().filter(|m| !ids.contains(m)).collect(),
            ))
        }
    })
}

fn relation_members(current: Option<&Value>, class_name: &str, name: &str) -> Result<Vec<String>> {
    let Some(v) = current else {
        return Ok(Vec::new());
    };
    let is_relation = v.get("__type").and_then(Value::as_str) == Some("Relation");
    if !is_relation {
        return Err(Error::TypeMismatch(format!(
            "{name}: the field is not a Relation"
        )));
    }
    if v.get("className").and_then(Value::as_str) != Some(class_name) {
        return Err(Error::TypeMismatch(format!(
            "{name}: the Relation points to another class than {class_name}"
        )));
    }
    Ok(v.get("objects")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}

fn relation_value(class_name: &str, members: Vec<String>) -> Value {
    serde_json::json!({"__type": "Relation", "className": class_name, "objects": members})
}

/// Adds `b` to the stored number `a`: exact for integers, which stay signed 64-bit (a sum
/// outside that range is an error, never a float), floating otherwise — and `in_range`, a
/// stored integer never leaves the signed 64-bit range by a floating amount either
/// (`i64::MAX` + 1e308 is an overflow, not the float 1e308). Entries of earlier builds
/// (`UpdateOp::Increment`) apply without that rule, as they did when they were committed.
fn add_numbers(a: &Number, b: &Number, name: &str, in_range: bool) -> Result<Number> {
    let overflow = || {
        Error::InvalidValue(format!(
            "{name}: Increment overflows the signed 64-bit integer range"
        ))
    };
    if !a.is_f64() && !b.is_f64() {
        let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) else {
            return Err(overflow());
        };
        return x.checked_add(y).map(Number::from).ok_or_else(overflow);
    }
    let sum = a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0);
    // 2^63 as f64: every f64 at or above it (or below -2^63) lies outside i64.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if in_range && !a.is_f64() && !(-LIMIT..LIMIT).contains(&sum) {
        return Err(overflow());
    }
    Number::from_f64(sum).ok_or_else(|| Error::InvalidValue(format!("{name}: Increment overflows")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::update::parse_updates;
    use serde_json::json;

    fn run(start: Value, body: Value) -> Result<Value> {
        let mut fields = start.as_object().unwrap().clone();
        let updates = parse_updates(body.as_object().unwrap())?;
        apply_updates(&mut fields, &updates)?;
        Ok(Value::Object(fields))
    }

    #[test]
    fn increment_adds_and_creates() {
        assert_eq!(
            run(
                json!({"n": 5}),
                json!({"n": {"__op": "Increment", "amount": 3}})
            )
            .unwrap(),
            json!({"n": 8})
        );
        assert_eq!(
            run(
                json!({"n": 5}),
                json!({"n": {"__op": "Increment", "amount": -7}})
            )
            .unwrap(),
            json!({"n": -2})
        );
        assert_eq!(
            run(json!({}), json!({"n": {"__op": "Increment", "amount": 2}})).unwrap(),
            json!({"n": 2})
        );
        assert_eq!(
            run(
                json!({"n": 1.5}),
                json!({"n": {"__op": "Increment", "amount": 1}})
            )
            .unwrap(),
            json!({"n": 2.5})
        );
    }

    #[test]
    fn increment_on_a_string_is_a_type_mismatch() {
        let e = run(
            json!({"n": "five"}),
            json!({"n": {"__op": "Increment", "amount": 1}}),
        )
        .unwrap_err();
        assert!(matches!(e, Error::TypeMismatch(_)), "{e:?}");
    }

    #[test]
    fn increment_overflow_is_refused() {
        let e = run(
            json!({"n": i64::MAX}),
            json!({"n": {"__op": "Increment", "amount": 1}}),
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidValue(_)));
        // An integer beyond i64 (older data) never turns the sum into a float.
        let e = run(
            json!({"n": u64::MAX}),
            json!({"n": {"__op": "Increment", "amount": -1}}),
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidValue(_)));
        assert_eq!(
            run(
                json!({"n": 1}),
                json!({"n": {"__op": "Increment", "amount": 0.5}})
            )
            .unwrap(),
            json!({"n": 1.5})
        );
        // A floating amount does not carry an integer out of range either.
        for (start, amount) in [
            (json!(i64::MAX), json!(1e308)),
            (json!(5), json!(1e19)),
            (json!(i64::MIN), json!(-1e6)),
        ] {
            let e = run(
                json!({"n": start}),
                json!({"n": {"__op": "Increment", "amount": amount}}),
            )
            .unwrap_err();
            assert!(
                matches!(e, Error::InvalidValue(_)),
                "{start} + {amount}: {e:?}"
            );
        }
        // An entry committed by an earlier build applies as it did then.
        let old = vec![crate::update::FieldUpdate {
            path: vec!["n".into()],
            op: UpdateOp::Increment(serde_json::Number::from_f64(1e308).unwrap()),
        }];
        let mut obj = json!({"n": i64::MAX});
        apply_updates(obj.as_object_mut().unwrap(), &old).unwrap();
        assert_eq!(obj, json!({"n": 1e308}));
        // A floating field stays floating.
        assert_eq!(
            run(
                json!({"n": 1e300}),
                json!({"n": {"__op": "Increment", "amount": 1}})
            )
            .unwrap(),
            json!({"n": 1e300})
        );
    }

    #[test]
    fn delete_removes_fields_and_members() {
        assert_eq!(
            run(json!({"a": 1, "b": 2}), json!({"a": {"__op": "Delete"}})).unwrap(),
            json!({"b": 2})
        );
        assert_eq!(
            run(
                json!({"o": {"x": 1, "y": 2}}),
                json!({"o.x": {"__op": "Delete"}})
            )
            .unwrap(),
            json!({"o": {"y": 2}})
        );
        assert_eq!(
            run(json!({}), json!({"o.x": {"__op": "Delete"}})).unwrap(),
            json!({})
        );
    }

    #[test]
    fn array_operators() {
        let start = json!({"a": [1, 2, 2, 3]});
        assert_eq!(
            run(
                start.clone(),
                json!({"a": {"__op": "Add", "objects": [2, 4]}})
            )
            .unwrap(),
            json!({"a": [1, 2, 2, 3, 2, 4]})
        );
        assert_eq!(
            run(
                start.clone(),
                json!({"a": {"__op": "AddUnique", "objects": [2, 4, 4]}})
            )
            .unwrap(),
            json!({"a": [1, 2, 2, 3, 4]})
        );
        assert_eq!(
            run(
                start.clone(),
                json!({"a": {"__op": "Remove", "objects": [2, 9]}})
            )
            .unwrap(),
            json!({"a": [1, 3]})
        );
        assert_eq!(
            run(json!({}), json!({"a": {"__op": "Add", "objects": ["x"]}})).unwrap(),
            json!({"a": ["x"]})
        );
        assert_eq!(
            run(
                json!({}),
                json!({"a": {"__op": "Remove", "objects": ["x"]}})
            )
            .unwrap(),
            json!({"a": []})
        );
    }

    #[test]
    fn array_operators_on_non_arrays_are_type_mismatches() {
        for op in ["Add", "AddUnique", "Remove"] {
            let e = run(json!({"a": 1}), json!({"a": {"__op": op, "objects": [1]}})).unwrap_err();
            assert!(matches!(e, Error::TypeMismatch(_)), "{op}: {e:?}");
        }
    }

    #[test]
    fn add_unique_matches_objects_by_value() {
        let p = json!({"__type": "Pointer", "className": "X", "objectId": "1"});
        let out = run(
            json!({"a": [p.clone()]}),
            json!({"a": {"__op": "AddUnique", "objects": [p.clone()]}}),
        )
        .unwrap();
        assert_eq!(out, json!({"a": [p]}));
    }

    #[test]
    fn relations_add_and_remove_members() {
        let ptr = |id: &str| json!({"__type": "Pointer", "className": "_User", "objectId": id});
        let out = run(
            json!({}),
            json!({"likes": {"__op": "AddRelation", "objects": [ptr("a"), ptr("b"), ptr("a")]}}),
        )
        .unwrap();
        assert_eq!(out["likes"]["objects"], json!(["a", "b"]));
        let out = run(
            out,
            json!({"likes": {"__op": "RemoveRelation", "objects": [ptr("a")]}}),
        )
        .unwrap();
        assert_eq!(
            out["likes"],
            json!({"__type": "Relation", "className": "_User", "objects": ["b"]})
        );
        let other = json!({"__type": "Pointer", "className": "Post", "objectId": "p"});
        let e = run(
            out,
            json!({"likes": {"__op": "AddRelation", "objects": [other]}}),
        )
        .unwrap_err();
        assert!(matches!(e, Error::TypeMismatch(_)));
        let e = run(
            json!({"likes": 3}),
            json!({"likes": {"__op": "AddRelation", "objects": [ptr("a")]}}),
        )
        .unwrap_err();
        assert!(matches!(e, Error::TypeMismatch(_)));
    }

    #[test]
    fn dot_paths_set_members_of_objects_and_array_elements() {
        let out = run(json!({"o": {"x": 1}}), json!({"o.y": 2})).unwrap();
        assert_eq!(out, json!({"o": {"x": 1, "y": 2}}));
        let out = run(json!({}), json!({"o.y": 2})).unwrap();
        assert_eq!(out, json!({"o": {"y": 2}}));
        let out = run(
            json!({"items": [{"n": "a"}, {"n": "b"}]}),
            json!({"items.1.n": "c"}),
        )
        .unwrap();
        assert_eq!(out, json!({"items": [{"n": "a"}, {"n": "c"}]}));
        let out = run(
            json!({"o": {"c": 1}}),
            json!({"o.c": {"__op": "Increment", "amount": 2}}),
        )
        .unwrap();
        assert_eq!(out, json!({"o": {"c": 3}}));
    }

    #[test]
    fn bad_dot_paths_are_refused() {
        let e = run(json!({"s": "text"}), json!({"s.x": 1})).unwrap_err();
        assert!(matches!(e, Error::TypeMismatch(_)));
        let e = run(json!({"items": [1]}), json!({"items.5.n": 1})).unwrap_err();
        assert!(matches!(e, Error::InvalidValue(_)));
        let e = run(json!({"items": [1]}), json!({"items.x": 1})).unwrap_err();
        assert!(matches!(e, Error::TypeMismatch(_)));
    }

    #[test]
    fn pointer_set_and_delete() {
        let p = json!({"__type": "Pointer", "className": "Game", "objectId": "g1"});
        let out = run(json!({}), json!({"game": p.clone()})).unwrap();
        assert_eq!(out["game"], p);
        let out = run(out, json!({"game": {"__op": "Delete"}})).unwrap();
        assert_eq!(out, json!({}));
    }
}
