//! What one request may carry or ask for: how deeply an object's values nest (dot-path segments
//! included) and how many keys one body sets, checked before anything is proposed; and how
//! large one query's answer may grow.
//!
//! Every encoding the cluster uses (log entries, stored objects, snapshots, RPC messages) wraps
//! a value in a handful of levels of its own, and serde_json refuses to decode anything nested
//! more than 128 levels. A command that could be encoded but not decoded again would stop its
//! group, so no command nests a value deeper than [`MAX_NESTING`]; the tests below prove the
//! margin in every encoding. Neighbours: `update::check_updates` checks field updates against them,
//! and every proposal is checked (`Command::check_limits`).

use serde_json::Value;

use crate::error::{Error, Result};

/// Levels of objects and arrays a field's value may nest, counting each dot-path segment after
/// the first as one level (`{"a":{"b":[1]}}` nests 2; `"a.b.c": 1` nests 2).
pub const MAX_NESTING: usize = 32;

/// Keys one create or update body may set.
pub const MAX_BODY_KEYS: usize = 1000;

/// Levels of objects and arrays in `v`: 0 for a scalar, 1 for `[1]` or `{}`, 2 for `[[1]]`.
/// Iterative, so a deep value cannot exhaust the stack.
pub fn nesting(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(v, 0)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            Value::Array(items) => {
                deepest = deepest.max(depth + 1);
                stack.extend(items.iter().map(|i| (i, depth + 1)));
            }
            Value::Object(members) => {
                deepest = deepest.max(depth + 1);
                stack.extend(members.values().map(|m| (m, depth + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Refuses a record value nested deeper than the service's own records ever are.
pub fn check_value(v: &Value) -> Result<()> {
    if nesting(v) > MAX_NESTING + RECORD_ENVELOPE {
        return Err(Error::InvalidValue(format!(
            "a value may nest at most {MAX_NESTING} levels"
        )));
    }
    Ok(())
}

/// Bytes (approximately, as JSON) the rows of one query answer may hold, after `keys` and
/// `include`; a query over it is refused (ask for fewer rows with `limit`, or fewer fields with
/// `keys`). Checked by the coordinator on the merged answer.
pub const MAX_ANSWER_BYTES: usize = 32 << 20;

/// Roughly how many bytes `v` takes as JSON (iterative; never less than the truth by much).
pub fn approx_size(v: &Value) -> usize {
    let mut total = 0;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        total += match v {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 12,
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                stack.extend(items.iter());
                2 + items.len()
            }
            Value::Object(m) => {
                stack.extend(m.values());
                2 + m.keys().map(|k| k.len() + 4).sum::<usize>()
            }
        };
    }
    total
}

/// Bytes of whole rows one shard may hold for one query (rows travel whole to the coordinator,
/// which applies `keys`): a bound on a shard's memory per request, above the answer's own.
pub const MAX_SHARD_ROWS_BYTES: usize = 4 * MAX_ANSWER_BYTES;

/// Refuses rows larger than `max` bytes in all.
pub fn check_answer(rows: &[Value], max: usize) -> Result<()> {
    let mut total = 0usize;
    for r in rows {
        total = total.saturating_add(approx_size(r));
        if total > max {
            return Err(Error::InvalidValue(format!(
                "the answer would be larger than {} MiB: ask for fewer rows (limit) or fewer \
                 fields (keys)",
                max >> 20
            )));
        }
    }
    Ok(())
}

/// Levels the service's records add around a client's value (a record holding an object).
const RECORD_ENVELOPE: usize = 2;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::Principals;
    use crate::command::{Command, CommandResult, ReadResponse};
    use crate::object::StoredObject;
    use crate::raft::{Entry, LogId};
    use crate::update::{check_updates, FieldUpdate, UpdateOp};
    use openraft::entry::RaftEntry;
    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut v = json!(1);
        for i in 0..levels {
            v = if i % 2 == 0 {
                json!([v])
            } else {
                json!({ "k": v })
            };
        }
        v
    }

    fn roundtrip<T: Serialize + DeserializeOwned>(t: &T) {
        let bytes = serde_json::to_vec(t).expect("encodes");
        let back: T = serde_json::from_slice(&bytes).expect("decodes");
        assert_eq!(serde_json::to_vec(&back).expect("encodes again"), bytes);
        // The binary encoding of log entries and messages (crate::encoding) as well.
        let binary = crate::encoding::encode(t).expect("encodes");
        let back: T = crate::encoding::decode(&binary).expect("decodes");
        assert_eq!(
            crate::encoding::encode(&back).expect("encodes again"),
            binary
        );
    }

    #[test]
    fn answers_are_bounded() {
        let big = json!({"s": "x".repeat(MAX_ANSWER_BYTES / 4)});
        let m = MAX_ANSWER_BYTES;
        assert!(check_answer(&[big.clone(), big.clone(), big.clone()], m).is_ok());
        assert!(check_answer(
            &[big.clone(), big.clone(), big.clone(), big.clone(), big],
            m
        )
        .is_err());
        let s = serde_json::to_string(&json!({"a": [1, "bc", {"d": null}]})).unwrap();
        assert!(approx_size(&json!({"a": [1, "bc", {"d": null}]})) >= s.len() / 2);
    }

    #[test]
    fn nesting_counts_levels() {
        assert_eq!(nesting(&json!(1)), 0);
        assert_eq!(nesting(&json!({})), 1);
        assert_eq!(nesting(&json!({"a": [1, {"b": []}]})), 4);
        assert_eq!(nesting(&nested(200)), 200);
    }

    #[test]
    fn dot_paths_count_as_levels() {
        let path = |n: usize| vec!["a".to_string(); n];
        let set = |p: Vec<String>, v: Value| FieldUpdate {
            path: p,
            op: UpdateOp::Set(v),
        };
        assert!(check_updates(&[set(path(1), nested(MAX_NESTING))]).is_ok());
        assert!(check_updates(&[set(path(1), nested(MAX_NESTING + 1))]).is_err());
        assert!(check_updates(&[set(path(MAX_NESTING + 1), json!(1))]).is_ok());
        assert!(check_updates(&[set(path(MAX_NESTING + 2), json!(1))]).is_err());
        assert!(check_updates(&[set(path(11), nested(MAX_NESTING - 10))]).is_ok());
        assert!(check_updates(&[set(path(11), nested(MAX_NESTING - 9))]).is_err());
        let add = FieldUpdate {
            path: path(1),
            op: UpdateOp::Add(vec![nested(MAX_NESTING)]),
        };
        assert!(check_updates(&[add]).is_err());
        let many: Vec<_> = (0..=MAX_BODY_KEYS)
            .map(|i| set(vec![format!("k{i}")], json!(1)))
            .collect();
        assert!(check_updates(&many).is_err());
    }

    /// The margin: values nested twice as deep as admitted (plus the deepest dot path) survive
    /// every encoding that carries them — log entry, stored object, RPC answers — so nothing
    /// the API admits can fail to decode.
    #[test]
    fn every_encoding_carries_twice_the_admitted_nesting() {
        let deep = nested(2 * MAX_NESTING + 2);
        let cmd = Command::UpdateObject {
            app: "a".into(),
            class: "C".into(),
            object_id: "o".into(),
            now_ms: 1,
            updates: vec![FieldUpdate {
                path: vec!["f".into(); MAX_NESTING + 1],
                op: UpdateOp::Add(vec![deep.clone()]),
            }],
            principals: Principals::public(),
            unset: Vec::new(),
            holds: Vec::new(),
        };
        let leader = openraft::impls::leader_id_adv::LeaderId {
            term: 3u64,
            node_id: crate::ids::NodeId::new(1),
        };
        let entry = <Entry as RaftEntry>::new_normal(LogId::new(leader, 7), cmd);
        roundtrip(&entry);
        let mut obj = StoredObject::new(1);
        let mut v = deep.clone();
        for _ in 0..MAX_NESTING + 1 {
            v = json!({ "f": v });
        }
        obj.fields.insert("f".into(), v.clone());
        roundtrip(&obj);
        let stored = obj.encode().expect("encodes");
        assert_eq!(StoredObject::decode(&stored).expect("decodes"), obj);
        assert_eq!(
            StoredObject::decode_only(&stored, &|n| n == "f").expect("decodes"),
            obj
        );
        roundtrip(&ReadResponse::Stored(Some(obj.clone())));
        roundtrip(&ReadResponse::StoredObjects(vec![("o".into(), obj)]));
        roundtrip(&ReadResponse::Scan {
            rows: vec![json!({ "f": v.clone() })],
            count: 1,
        });
        roundtrip(&ReadResponse::Object(Some(v.clone())));
        roundtrip(&CommandResult::Record(v));
    }
}
