//! List append: `Add` of unique values to an array per key, and reads of the array. Checks per
//! key: no value appears twice; every read is a prefix of the longest read (appends only ever
//! extend the list); no read contains a value never attempted or a failed one; an append
//! acknowledged before a read was invoked is in that read; every acknowledged append is in the
//! final read.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::Verdict;
use crate::history::{Kind, Op};

fn as_list(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

/// `finals` maps each key to its final read (after healing).
pub fn check(ops: &[Op], finals: &BTreeMap<String, Value>) -> Verdict {
    let mut by_key = crate::history::by_key(ops);
    for key in finals.keys() {
        by_key.entry(key.clone()).or_default();
    }
    for (key, key_ops) in &by_key {
        let attempted: BTreeSet<String> = key_ops
            .iter()
            .filter(|o| o.f == "append" && o.outcome != Kind::Fail)
            .map(|o| o.value.to_string())
            .collect();
        let failed: BTreeSet<String> = key_ops
            .iter()
            .filter(|o| o.f == "append" && o.outcome == Kind::Fail)
            .map(|o| o.value.to_string())
            .collect();
        let mut reads: Vec<(&Op, Vec<Value>)> = key_ops
            .iter()
            .filter(|o| o.f == "read" && o.outcome == Kind::Ok)
            .map(|o| (*o, as_list(&o.value)))
            .collect();
        let final_list = finals.get(key).map(as_list);
        let longest: Vec<Value> = reads
            .iter()
            .map(|(_, l)| l.clone())
            .chain(final_list.clone())
            .max_by_key(Vec::len)
            .unwrap_or_default();
        let anomaly = |kind: &str, detail: Value| Verdict::Invalid {
            anomaly: json!({"kind": kind, "key": key, "detail": detail}),
        };
        for (r, list) in reads
            .iter()
            .map(|(o, l)| (Some(*o), l))
            .chain(final_list.iter().map(|l| (None, l)))
        {
            let mut seen = BTreeSet::new();
            for v in list.iter() {
                let s = v.to_string();
                if !seen.insert(s.clone()) {
                    return anomaly("duplicate", json!({"value": v, "read": list}));
                }
                if !attempted.contains(&s) {
                    let what = if failed.contains(&s) {
                        "failed-append-visible"
                    } else {
                        "never-attempted"
                    };
                    return anomaly(what, json!({"value": v}));
                }
            }
            if list.len() > longest.len() || longest[..list.len()] != list[..] {
                return anomaly("not-a-prefix", json!({"read": list, "longest": longest}));
            }
            if let Some(r) = r {
                for a in key_ops
                    .iter()
                    .filter(|a| a.f == "append" && a.outcome == Kind::Ok && a.ret < r.call)
                {
                    if !list.contains(&a.value) {
                        return anomaly(
                            "stale-read",
                            json!({"missing": a.value, "read": list, "read_call_ms": r.call as f64 / 1e6}),
                        );
                    }
                }
            }
        }
        if let Some(fl) = &final_list {
            for a in key_ops
                .iter()
                .filter(|a| a.f == "append" && a.outcome == Kind::Ok)
            {
                if !fl.contains(&a.value) {
                    return anomaly("lost-append", json!({"missing": a.value}));
                }
            }
        }
        reads.clear();
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(f: &str, value: Value, outcome: Kind, call: u64, ret: u64) -> Op {
        Op {
            process: 0,
            f: f.into(),
            key: Some("k".into()),
            value,
            outcome,
            result: serde_json::Value::Null,
            call,
            ret,
        }
    }

    fn finals(v: Value) -> BTreeMap<String, Value> {
        BTreeMap::from([("k".to_string(), v)])
    }

    #[test]
    fn valid_history() {
        let h = [
            op("append", json!(1), Kind::Ok, 0, 1),
            op("append", json!(2), Kind::Info, 2, u64::MAX),
            op("read", json!([1]), Kind::Ok, 3, 4),
            op("read", json!([1, 2]), Kind::Ok, 5, 6),
        ];
        assert_eq!(check(&h, &finals(json!([1, 2]))), Verdict::Valid);
    }

    #[test]
    fn anomalies() {
        let base = || {
            vec![
                op("append", json!(1), Kind::Ok, 0, 1),
                op("append", json!(2), Kind::Ok, 0, 1),
            ]
        };
        let mut h = base();
        h.push(op("read", json!([2, 1]), Kind::Ok, 3, 4));
        assert!(
            matches!(check(&h, &finals(json!([1, 2]))), Verdict::Invalid { .. }),
            "not a prefix"
        );
        let mut h = base();
        h.push(op("read", json!([1]), Kind::Ok, 3, 4));
        assert!(
            matches!(check(&h, &finals(json!([1, 2]))), Verdict::Invalid { .. }),
            "stale read misses an acknowledged append"
        );
        assert!(
            matches!(check(&base(), &finals(json!([1]))), Verdict::Invalid { .. }),
            "lost append"
        );
        assert!(
            matches!(
                check(&base(), &finals(json!([1, 2, 2]))),
                Verdict::Invalid { .. }
            ),
            "duplicate"
        );
        assert!(
            matches!(
                check(&base(), &finals(json!([1, 2, 9]))),
                Verdict::Invalid { .. }
            ),
            "never attempted"
        );
    }
}
