//! Field updates: what a create or update body asks the state machine to do to an object.
//!
//! The API layer calls [`parse_updates`] on a JSON body; the result travels inside the command
//! and the state machine applies it (`statemachine::ops`). Parsing validates everything that
//! does not depend on stored state (field names, operator shapes, typed values), so a command
//! that reaches the log can fail only on the object's current content (type mismatches).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

use crate::error::{Error, Result};
use crate::limits::{nesting, MAX_BODY_KEYS, MAX_NESTING};
use crate::object::{parse_wire_time, validate_field_name, RESERVED_FIELDS, WIRE_TIME_FORMAT};

/// One change to one field, addressed by a dot path (`score`, `stats.wins`, `items.0.name`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldUpdate {
    pub path: Vec<String>,
    pub op: UpdateOp,
}

/// The update operators of spec 4.2, plus a plain set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum UpdateOp {
    Set(Value),
    Delete,
    /// Adds the amount; an integer plus a floating amount may leave the 64-bit range as a
    /// float. What committed entries of earlier builds carry (kept so they apply as they did).
    Increment(Number),
    /// Adds the amount, refusing to carry a stored integer outside the signed 64-bit range,
    /// however large a floating amount is: what `parse_updates` builds now.
    IncrementInRange(Number),
    Add(Vec<Value>),
    AddUnique(Vec<Value>),
    Remove(Vec<Value>),
    /// Pointers to add to a Relation: the target class and the objectIds.
    AddRelation {
        class_name: String,
        ids: Vec<String>,
    },
    RemoveRelation {
        class_name: String,
        ids: Vec<String>,
    },
}

/// Parses a create or update body into field updates.
pub fn parse_updates(body: &Map<String, Value>) -> Result<Vec<FieldUpdate>> {
    if body.len() > MAX_BODY_KEYS {
        return Err(Error::InvalidValue(format!(
            "a body may set at most {} keys (this one sets {})",
            MAX_BODY_KEYS,
            body.len()
        )));
    }
    let mut updates = Vec::with_capacity(body.len());
    for (key, value) in body {
        let path = parse_path(key)?;
        let op = parse_op(key, value)?;
        updates.push(FieldUpdate { path, op });
    }
    check_updates(&updates)?;
    Ok(updates)
}

fn parse_path(key: &str) -> Result<Vec<String>> {
    let path: Vec<String> = key.split('.').map(str::to_string).collect();
    let column = path.first().map(String::as_str).unwrap_or_default();
    if RESERVED_FIELDS.contains(&column) {
        return Err(Error::ReservedKey(column.to_string()));
    }
    if column == "ACL" && path.len() == 1 {
        return Ok(path);
    }
    for seg in &path {
        validate_field_name(seg)?;
    }
    Ok(path)
}

fn parse_op(key: &str, value: &Value) -> Result<UpdateOp> {
    // An ACL is an object of principals whatever the class's schema says (107, not 111);
    // only `Delete` applies to it as an operator.
    if key == "ACL" {
        match value {
            Value::Null => {}
            Value::Object(obj) if obj.get("__op").is_none() => {}
            Value::Object(obj) if obj.get("__op").and_then(Value::as_str) == Some("Delete") => {}
            _ => {
                return Err(Error::InvalidValue(
                    "malformed ACL: it must be an object like {\"*\": {\"read\": true}}".into(),
                ))
            }
        }
    }
    let Some(obj) = value.as_object() else {
        return Ok(UpdateOp::Set(normalize_value(value)?));
    };
    let Some(op) = obj.get("__op") else {
        if key == "ACL" {
            validate_acl(obj)?;
            return Ok(UpdateOp::Set(value.clone()));
        }
        return Ok(UpdateOp::Set(normalize_value(value)?));
    };
    let op = op
        .as_str()
        .ok_or_else(|| Error::InvalidValue(format!("{key}: __op must be a string")))?;
    let objects = || -> Result<Vec<Value>> {
        match obj.get("objects") {
            Some(Value::Array(items)) => items.iter().map(normalize_value).collect(),
            _ => Err(Error::InvalidValue(format!(
                "{key}: {op} needs an array `objects`"
            ))),
        }
    };
    Ok(match op {
        "Increment" => match obj.get("amount") {
            Some(Value::Number(n)) => UpdateOp::IncrementInRange(n.clone()),
            _ => {
                return Err(Error::InvalidValue(format!(
                    "{key}: Increment needs a number `amount`"
                )))
            }
        },
        "Delete" => UpdateOp::Delete,
        "Add" => UpdateOp::Add(objects()?),
        "AddUnique" => UpdateOp::AddUnique(objects()?),
        "Remove" => UpdateOp::Remove(objects()?),
        "AddRelation" | "RemoveRelation" => {
            let (class_name, ids) = relation_targets(key, &objects()?)?;
            if op == "AddRelation" {
                UpdateOp::AddRelation { class_name, ids }
            } else {
                UpdateOp::RemoveRelation { class_name, ids }
            }
        }
        other => {
            return Err(Error::InvalidValue(format!(
                "{key}: unknown operator {other:?}"
            )))
        }
    })
}

/// The target class and ids of a relation operator: a non-empty list of Pointers to one class.
fn relation_targets(key: &str, objects: &[Value]) -> Result<(String, Vec<String>)> {
    let mut class_name: Option<String> = None;
    let mut ids = Vec::with_capacity(objects.len());
    for o in objects {
        let (cls, id) = pointer_parts(o).ok_or_else(|| {
            Error::InvalidPointer(format!("{key}: relation members must be Pointers"))
        })?;
        match &class_name {
            Some(c) if c != cls => {
                return Err(Error::TypeMismatch(format!(
                    "{key}: relation members must all point to one class"
                )))
            }
            Some(_) => {}
            None => class_name = Some(cls.to_string()),
        }
        ids.push(id.to_string());
    }
    let class_name = class_name
        .ok_or_else(|| Error::InvalidValue(format!("{key}: relation operator needs members")))?;
    Ok((class_name, ids))
}

/// `(className, objectId)` of a Pointer value.
pub fn pointer_parts(v: &Value) -> Option<(&str, &str)> {
    let o = v.as_object()?;
    if o.get("__type")?.as_str()? != "Pointer" {
        return None;
    }
    let cls = o.get("className")?.as_str()?;
    let id = o.get("objectId")?.as_str()?;
    (!cls.is_empty() && !id.is_empty()).then_some((cls, id))
}

/// Validates a value and brings typed values to their stored form (Dates to the wire format,
/// Relations to an empty member list).
pub fn normalize_value(v: &Value) -> Result<Value> {
    match v {
        Value::Array(items) => Ok(Value::Array(
            items.iter().map(normalize_value).collect::<Result<_>>()?,
        )),
        Value::Object(m) => match m.get("__type") {
            None => Ok(Value::Object(
                m.iter()
                    .map(|(k, v)| Ok((k.clone(), normalize_value(v)?)))
                    .collect::<Result<_>>()?,
            )),
            Some(Value::String(t)) => normalize_typed(t, m, v),
            Some(_) => Err(Error::InvalidValue("__type must be a string".into())),
        },
        Value::Number(n) if n.as_f64().is_some_and(|f| !f.is_finite()) => {
            Err(Error::InvalidValue("numbers must be finite".into()))
        }
        other => Ok(other.clone()),
    }
}

fn normalize_typed(t: &str, m: &Map<String, Value>, v: &Value) -> Result<Value> {
    match t {
        "Pointer" => {
            pointer_parts(v).ok_or_else(|| {
                Error::InvalidPointer("a Pointer needs className and objectId strings".into())
            })?;
            Ok(v.clone())
        }
        "Date" => {
            let iso = m.get("iso").and_then(Value::as_str).unwrap_or_default();
            let t = parse_wire_time(iso)
                .ok_or_else(|| Error::InvalidValue(format!("invalid Date {iso:?}")))?;
            Ok(serde_json::json!({"__type": "Date", "iso": t.format(WIRE_TIME_FORMAT).to_string()}))
        }
        "GeoPoint" => {
            let lat = m.get("latitude").and_then(Value::as_f64);
            let lng = m.get("longitude").and_then(Value::as_f64);
            match (lat, lng) {
                (Some(lat), Some(lng))
                    if (-90.0..=90.0).contains(&lat) && (-180.0..=180.0).contains(&lng) =>
                {
                    Ok(serde_json::json!({"__type": "GeoPoint", "latitude": lat, "longitude": lng}))
                }
                (Some(_), Some(_)) => Err(Error::InvalidGeoPoint(
                    "latitude must lie in -90..90 and longitude in -180..180".into(),
                )),
                _ => Err(Error::InvalidValue(
                    "a GeoPoint needs numbers latitude and longitude".into(),
                )),
            }
        }
        "File" => {
            let ok = ["filename", "url"]
                .iter()
                .all(|k| m.get(*k).is_some_and(Value::is_string));
            if ok {
                Ok(v.clone())
            } else {
                Err(Error::InvalidValue(
                    "a File needs filename and url strings".into(),
                ))
            }
        }
        "Relation" => match m.get("className").and_then(Value::as_str) {
            Some(cls) if !cls.is_empty() => {
                Ok(serde_json::json!({"__type": "Relation", "className": cls, "objects": []}))
            }
            _ => Err(Error::InvalidValue("a Relation needs a className".into())),
        },
        other => Err(Error::InvalidValue(format!("unknown __type {other:?}"))),
    }
}

/// ACL shape of spec 2.6: keys map to `{read?: true, write?: true}`.
fn validate_acl(acl: &Map<String, Value>) -> Result<()> {
    for (who, perms) in acl {
        let ok = !who.is_empty()
            && perms.as_object().is_some_and(|p| {
                !p.is_empty()
                    && p.iter()
                        .all(|(k, v)| (k == "read" || k == "write") && v == &Value::Bool(true))
            });
        if !ok {
            return Err(Error::InvalidValue(format!(
                "invalid ACL entry for {who:?}"
            )));
        }
    }
    Ok(())
}

/// Levels an update would give the stored object below its top-level field.
fn update_nesting(u: &FieldUpdate) -> usize {
    let below_path = match &u.op {
        UpdateOp::Set(v) => nesting(v),
        // The objects become (or are compared with) elements of an array.
        UpdateOp::Add(vs) | UpdateOp::AddUnique(vs) | UpdateOp::Remove(vs) => {
            1 + vs.iter().map(nesting).max().unwrap_or(0)
        }
        UpdateOp::AddRelation { .. } | UpdateOp::RemoveRelation { .. } => 2,
        UpdateOp::Delete | UpdateOp::Increment(_) | UpdateOp::IncrementInRange(_) => 0,
    };
    u.path.len().saturating_sub(1) + below_path
}

/// Refuses updates that set too many keys or nest too deeply.
pub fn check_updates(updates: &[FieldUpdate]) -> Result<()> {
    if updates.len() > MAX_BODY_KEYS {
        return Err(Error::InvalidValue(format!(
            "a body may set at most {MAX_BODY_KEYS} keys (this one sets {})",
            updates.len()
        )));
    }
    for u in updates {
        let n = update_nesting(u);
        if n > MAX_NESTING {
            return Err(Error::InvalidValue(format!(
                "{}: values may nest at most {MAX_NESTING} levels, dot-path segments included \
                 (this one nests {n})",
                crate::error::clip(&u.path.join("."))
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Vec<FieldUpdate>> {
        parse_updates(v.as_object().unwrap())
    }

    #[test]
    fn parses_every_operator() {
        let u = parse(json!({
            "a": 1,
            "b": {"__op": "Increment", "amount": -2},
            "c": {"__op": "Delete"},
            "d": {"__op": "Add", "objects": [1]},
            "e": {"__op": "AddUnique", "objects": [2]},
            "f": {"__op": "Remove", "objects": [3]},
            "g": {"__op": "AddRelation", "objects": [{"__type":"Pointer","className":"_User","objectId":"u1"}]},
            "h": {"__op": "RemoveRelation", "objects": [{"__type":"Pointer","className":"_User","objectId":"u1"}]},
            "obj.member": "x",
            "arr.0.name": "y",
        }))
        .unwrap();
        assert_eq!(u.len(), 10);
        assert!(u.iter().any(|f| f.path == ["arr", "0", "name"]));
        assert!(u.iter().any(|f| matches!(&f.op, UpdateOp::AddRelation { class_name, ids } if class_name == "_User" && ids == &["u1"])));
    }

    #[test]
    fn rejects_bad_input_with_the_documented_condition() {
        assert!(matches!(
            parse(json!({"objectId": "x"})),
            Err(Error::ReservedKey(_))
        ));
        assert!(matches!(
            parse(json!({"createdAt": "x"})),
            Err(Error::ReservedKey(_))
        ));
        assert!(matches!(
            parse(json!({"bad-key": 1})),
            Err(Error::InvalidKey(_))
        ));
        assert!(matches!(
            parse(json!({"a": {"__op": "Frobnicate"}})),
            Err(Error::InvalidValue(_))
        ));
        assert!(matches!(
            parse(json!({"a": {"__op": "Increment", "amount": "1"}})),
            Err(Error::InvalidValue(_))
        ));
        assert!(matches!(
            parse(json!({"a": {"__op": "Add", "objects": 1}})),
            Err(Error::InvalidValue(_))
        ));
        assert!(matches!(
            parse(json!({"p": {"__type": "Pointer", "className": "X"}})),
            Err(Error::InvalidPointer(_))
        ));
        assert!(matches!(
            parse(json!({"g": {"__type": "GeoPoint", "latitude": 91, "longitude": 0}})),
            Err(Error::InvalidGeoPoint(_))
        ));
        assert!(matches!(
            parse(json!({"d": {"__type": "Date", "iso": "soon"}})),
            Err(Error::InvalidValue(_))
        ));
        assert!(matches!(
            parse(json!({"ACL": {"*": {"read": false}}})),
            Err(Error::InvalidValue(_))
        ));
        assert!(matches!(
            parse(json!({"r": {"__op": "AddRelation", "objects": [1]}})),
            Err(Error::InvalidPointer(_))
        ));
        for acl in [
            json!([]),
            json!("public"),
            json!(1),
            json!({"__op": "Increment", "amount": 1}),
        ] {
            assert!(
                matches!(parse(json!({ "ACL": acl })), Err(Error::InvalidValue(_))),
                "{acl}"
            );
        }
        assert!(parse(json!({"ACL": {"__op": "Delete"}})).is_ok());
    }

    #[test]
    fn normalizes_dates() {
        let u =
            parse(json!({"when": {"__type": "Date", "iso": "2024-01-02T03:04:05.000Z"}})).unwrap();
        assert_eq!(
            u[0].op,
            UpdateOp::Set(json!({"__type":"Date","iso":"2024-01-02 03:04:05"}))
        );
    }

    #[test]
    fn accepts_a_valid_acl() {
        assert!(parse(
            json!({"ACL": {"*": {"read": true}, "role:admin": {"read": true, "write": true}}})
        )
        .is_ok());
    }
}
