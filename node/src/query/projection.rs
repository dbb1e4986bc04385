//! `include`: replaces Pointer values of the named keys with the objects they point at
//! (spec 2.2 and 4.3), to any depth (`post.author`), in arrays of pointers too, with field
//! restriction per level (`post[likes].author[username|email]`).
//!
//! Used by the object handlers after a get or a query. Each level's targets are read
//! linearizably from their shards, each distinct target once, concurrently, with the caller's
//! principals; the next level expands inside the objects just read. An expanded value is the
//! object with `__type: "Object"` and its `className`; a pointer whose target is gone or
//! unreadable stays a Pointer, and a key that holds no pointer is left as it is.

use std::collections::HashMap;

use basalt_cluster::acl::Principals;
use basalt_cluster::names::{AppId, ClassName, ObjectId};
use basalt_cluster::update::pointer_parts;
use basalt_cluster::Cluster;
use futures::future::BoxFuture;
use serde_json::{Map, Value};

use super::error::QueryError;
use crate::users::protected::UserView;

/// Fields never shown when a user is expanded.
const HIDDEN_USER_FIELDS: [&str; 2] = ["password", "sessionToken"];

/// Deepest `include` path, in keys.
pub const MAX_INCLUDE_DEPTH: usize = 5;

/// One `include` key: the key, optionally (`key[a|b]`) the fields to keep of what it points at,
/// and the keys to expand inside that.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IncludeKey {
    pub key: String,
    pub fields: Option<Vec<String>>,
    pub children: Vec<IncludeKey>,
}

fn parse_segment(seg: &str) -> Result<(String, Option<Vec<String>>), QueryError> {
    let bad = || QueryError::Invalid(format!("invalid include key {seg:?}."));
    let (key, fields) = match seg.split_once('[') {
        Some((k, rest)) => {
            let list = rest.strip_suffix(']').ok_or_else(bad)?;
            let fields: Vec<String> = list
                .split('|')
                .map(str::trim)
                .filter(|f| !f.is_empty())
                .map(str::to_string)
                .collect();
            (k.trim(), Some(fields))
        }
        None => (seg.trim(), None),
    };
    if key.is_empty() || key.contains(['[', ']']) {
        return Err(bad());
    }
    Ok((key.to_string(), fields))
}

/// Parses an `include` parameter (`a,b[x|y],c.d,post[likes].author[username|email]`) into a
/// tree; paths sharing a prefix share its node. 102 for a malformed key or a path deeper than
/// `MAX_INCLUDE_DEPTH`.
pub fn parse_include(s: &str) -> Result<Vec<IncludeKey>, QueryError> {
    let mut roots: Vec<IncludeKey> = Vec::new();
    for path in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let segments: Vec<&str> = path.split('.').collect();
        if segments.len() > MAX_INCLUDE_DEPTH {
            return Err(QueryError::Invalid(format!(
                "include paths have at most {MAX_INCLUDE_DEPTH} keys."
            )));
        }
        let mut level = &mut roots;
        for seg in segments {
            let (key, fields) = parse_segment(seg)?;
            let i = match level.iter().position(|k| k.key == key) {
                Some(i) => i,
                None => {
                    level.push(IncludeKey {
                        key,
                        ..Default::default()
                    });
                    level.len() - 1
                }
            };
            if fields.is_some() {
                level[i].fields = fields;
            }
            level = &mut level[i].children;
        }
    }
    Ok(roots)
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

/// Expands the included keys of every object in `objects`, as `principals` may read them.
pub async fn expand(
    cluster: &Cluster,
    app: &AppId,
    objects: &mut [Value],
    include: &[IncludeKey],
    principals: &Principals,
    view: &UserView<'_>,
) -> Result<(), QueryError> {
    let refs: Vec<&mut Value> = objects.iter_mut().collect();
    expand_level(cluster, app, refs, include, principals, view).await
}

fn expand_level<'a>(
    cluster: &'a Cluster,
    app: &'a AppId,
    objects: Vec<&'a mut Value>,
    include: &'a [IncludeKey],
    principals: &'a Principals,
    view: &'a UserView<'a>,
) -> BoxFuture<'a, Result<(), QueryError>> {
    Box::pin(async move {
        if include.is_empty() || objects.is_empty() {
            return Ok(());
        }
        let mut wanted: Vec<(ClassName, ObjectId)> = Vec::new();
        for obj in objects.iter() {
            for inc in include {
                let mut found = Vec::new();
                if let Some(v) = obj.get(&inc.key) {
                    pointers_of(v, &mut found);
                }
                for (c, id) in found {
                    // A class or an id that cannot exist names no object: its pointer stays
                    // as it is.
                    let (Some(c), Some(id)) = (ClassName::in_query(c), ObjectId::parse(id)) else {
                        continue;
                    };
                    let t = (c, id);
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
            if let Some(mut o) = r? {
                view.hide_rows(&t.0, std::slice::from_mut(&mut o));
                targets.insert((t.0.to_string(), t.1.to_string()), o);
            }
        }
        // Replace this level's pointers, collecting the expanded objects per include key for
        // the next level.
        let mut next: Vec<Vec<&'a mut Value>> = include.iter().map(|_| Vec::new()).collect();
        for obj in objects {
            let Some(m) = obj.as_object_mut() else {
                continue;
            };
            for (k, v) in m.iter_mut() {
                let Some(i) = include.iter().position(|inc| inc.key == *k) else {
                    continue;
                };
                replace(v, &include[i], &targets);
                if !include[i].children.is_empty() {
                    collect_expanded(v, &mut next[i]);
                }
            }
        }
        for (inc, subs) in include.iter().zip(next) {
            expand_level(cluster, app, subs, &inc.children, principals, view).await?;
        }
        Ok(())
    })
}

/// The expanded objects (`__type: "Object"`) held by `v` or its array elements.
fn collect_expanded<'a>(v: &'a mut Value, out: &mut Vec<&'a mut Value>) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(|i| {
            if is_expanded(i) {
                out.push(i);
            }
        }),
        other if is_expanded(other) => out.push(other),
        _ => {}
    }
}

fn is_expanded(v: &Value) -> bool {
    v.get("__type").and_then(Value::as_str) == Some("Object")
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
    *v = expanded(c, target, inc);
}

fn expanded(class: &str, target: &Value, inc: &IncludeKey) -> Value {
    let mut m: Map<String, Value> = target.as_object().cloned().unwrap_or_default();
    if class == "_User" {
        HIDDEN_USER_FIELDS.iter().for_each(|f| {
            m.remove(*f);
        });
    }
    if let Some(keep) = &inc.fields {
        // Keys expanded further down stay, so that the nested include has something to show.
        let always = ["objectId", "createdAt", "updatedAt"];
        m.retain(|k, _| {
            always.contains(&k.as_str())
                || keep.iter().any(|f| f == k)
                || inc.children.iter().any(|c| c.key == *k)
        });
    }
    m.insert("__type".into(), Value::String("Object".into()));
    m.insert("className".into(), Value::String(class.to_string()));
    Value::Object(m)
}

/// Restricts each row to `keys` (top-level names; `a.b` keeps `a`) plus `objectId`,
/// `createdAt` and `updatedAt`. An empty list keeps everything.
pub fn project(rows: &mut [Value], keys: &[String]) {
    if keys.is_empty() {
        return;
    }
    let always = ["objectId", "createdAt", "updatedAt"];
    for row in rows.iter_mut() {
        if let Some(m) = row.as_object_mut() {
            m.retain(|k, _| {
                always.contains(&k.as_str())
                    || keys
                        .iter()
                        .any(|want| want.split('.').next() == Some(k.as_str()))
            });
        }
    }
}

/// Parses a `keys` parameter (comma list).
pub fn parse_keys(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_keys_field_lists_and_nested_paths() {
        let k = parse_include("author, post[likes|title].author[username|email] ,post.editor,,")
            .unwrap();
        assert_eq!(k.len(), 2);
        assert_eq!(k[0].key, "author");
        assert_eq!(k[1].key, "post");
        assert_eq!(k[1].fields, Some(vec!["likes".into(), "title".into()]));
        let children: Vec<_> = k[1].children.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(children, ["author", "editor"]);
        assert_eq!(
            k[1].children[0].fields,
            Some(vec!["username".into(), "email".into()])
        );
        assert!(parse_include("a.b.c.d.e.f").is_err());
        assert!(parse_include("a[b").is_err());
        assert!(parse_include("a.[x]").is_err());
    }

    #[test]
    fn expanded_objects_carry_type_and_class_and_hide_user_secrets() {
        let target =
            json!({"objectId": "u1", "username": "a", "password": "x", "sessionToken": "t"});
        let v = expanded("_User", &target, &IncludeKey::default());
        assert_eq!(v["__type"], "Object");
        assert_eq!(v["className"], "_User");
        assert!(v.get("password").is_none() && v.get("sessionToken").is_none());
        let inc = &parse_include("p[a].c").unwrap()[0];
        let v = expanded(
            "Post",
            &json!({"objectId": "p", "a": 1, "b": 2, "c": 3}),
            inc,
        );
        assert_eq!(v["a"], 1);
        assert_eq!(v["c"], 3, "a key expanded further down is kept");
        assert!(v.get("b").is_none());
        assert_eq!(v["objectId"], "p");
    }

    #[test]
    fn keys_keep_the_reserved_fields() {
        let mut rows =
            vec![json!({"objectId": "x", "createdAt": "t", "a": 1, "b": {"c": 2}, "d": 3})];
        project(&mut rows, &parse_keys("a,b.c"));
        assert_eq!(
            rows[0],
            json!({"objectId": "x", "createdAt": "t", "a": 1, "b": {"c": 2}})
        );
    }
}
