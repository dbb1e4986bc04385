//! `include`: replaces Pointer values of the named keys with the objects they point at
//! (spec 2.2 and 4.3), one level deep.
//!
//! Used by the object handlers after a get or a query. Targets are read linearizably from their
//! shards, each distinct target once, concurrently, with the caller's principals. An expanded value is the whole object with
//! `__type: "Object"` and its `className`; a pointer whose target is gone stays a Pointer.

use std::collections::HashMap;

use basalt_cluster::update::pointer_parts;
use basalt_cluster::Cluster;
use serde_json::{Map, Value};

use crate::api::error::ApiError;

/// Fields never shown when a user is expanded.
const HIDDEN_USER_FIELDS: [&str; 2] = ["password", "sessionToken"];

/// One `include` entry: a key and, optionally (`key[a|b]`), the fields to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct IncludeKey {
    pub key: String,
    pub fields: Option<Vec<String>>,
}

/// Parses an `include` parameter (`a,b[x|y],c.d`). Nested paths are expanded at their first
/// key only.
pub fn parse_include(s: &str) -> Vec<IncludeKey> {
    let mut out: Vec<IncludeKey> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let first = part.split('.').next().unwrap_or_default();
        let (key, fields) = match first.split_once('[') {
            Some((k, rest)) => (
                k,
                Some(
                    rest.trim_end_matches(']')
                        .split('|')
                        .map(str::trim)
                        .filter(|f| !f.is_empty())
                        .map(str::to_string)
                        .collect(),
                ),
            ),
            None => (first, None),
        };
        if !key.is_empty() && !out.iter().any(|k| k.key == key) {
            out.push(IncludeKey {
                key: key.to_string(),
                fields,
            });
        }
    }
    out
}

fn pointers_of<'a>(v: &'a Value, out: &mut Vec<(&'a str, &'a str)>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| {
            if let Some(p) = pointer_parts(i) {
                out.push(p);
            }
        }),
        other => {
            if let Some(p) = pointer_parts(other) {
                out.push(p);
            }
        }
    }
}

/// Expands the included keys of every object in `objects`, as `principals` may read them (a
/// target they may not read stays a Pointer).
pub async fn expand(
    cluster: &Cluster,
    app: &str,
    objects: &mut [Value],
    include: &[IncludeKey],
    principals: Option<Vec<String>>,
) -> Result<(), ApiError> {
    if include.is_empty() {
        return Ok(());
    }
    let mut wanted: Vec<(String, String)> = Vec::new();
    for obj in objects.iter() {
        for inc in include {
            let mut found = Vec::new();
            if let Some(v) = obj.get(&inc.key) {
                pointers_of(v, &mut found);
            }
            for (c, id) in found {
                let t = (c.to_string(), id.to_string());
                if !wanted.contains(&t) {
                    wanted.push(t);
                }
            }
        }
    }
    let reads = wanted
        .iter()
        .map(|(c, id)| cluster.get_object_as(app, c, id, principals.clone()));
    let mut targets: HashMap<(String, String), Value> = HashMap::new();
    for (t, r) in wanted.iter().zip(futures::future::join_all(reads).await) {
        if let Some(o) = r? {
            targets.insert(t.clone(), o);
        }
    }
    for obj in objects.iter_mut() {
        for inc in include {
            if let Some(v) = obj.get_mut(&inc.key) {
                replace(v, inc, &targets);
            }
        }
    }
    Ok(())
}

fn replace(v: &mut Value, inc: &IncludeKey, targets: &HashMap<(String, String), Value>) {
    if let Value::Array(items) = v {
        items.iter_mut().for_each(|i| replace(i, inc, targets));
        return;
    }
    let Some((c, id)) = pointer_parts(v) else {
        return;
    };
    let Some(target) = targets.get(&(c.to_string(), id.to_string())) else {
        return;
    };
    *v = expanded(c, target, inc.fields.as_deref());
}

fn expanded(class: &str, target: &Value, fields: Option<&[String]>) -> Value {
    let mut m: Map<String, Value> = target.as_object().cloned().unwrap_or_default();
    if class == "_User" {
        HIDDEN_USER_FIELDS.iter().for_each(|f| {
            m.remove(*f);
        });
    }
    if let Some(keep) = fields {
        let always = ["objectId", "createdAt", "updatedAt"];
        m.retain(|k, _| always.contains(&k.as_str()) || keep.iter().any(|f| f == k));
    }
    m.insert("__type".into(), Value::String("Object".into()));
    m.insert("className".into(), Value::String(class.to_string()));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_keys_field_lists_and_nested_paths() {
        let k = parse_include("author, post[likes|title].author ,author,,");
        assert_eq!(
            k,
            vec![
                IncludeKey {
                    key: "author".into(),
                    fields: None
                },
                IncludeKey {
                    key: "post".into(),
                    fields: Some(vec!["likes".into(), "title".into()])
                },
            ]
        );
    }

    #[test]
    fn expanded_objects_carry_type_and_class_and_hide_user_secrets() {
        let target =
            json!({"objectId": "u1", "username": "a", "password": "x", "sessionToken": "t"});
        let v = expanded("_User", &target, None);
        assert_eq!(v["__type"], "Object");
        assert_eq!(v["className"], "_User");
        assert!(v.get("password").is_none() && v.get("sessionToken").is_none());
        let v = expanded(
            "Post",
            &json!({"objectId": "p", "a": 1, "b": 2}),
            Some(&["a".into()]),
        );
        assert_eq!(v["a"], 1);
        assert!(v.get("b").is_none());
        assert_eq!(v["objectId"], "p");
    }
}
