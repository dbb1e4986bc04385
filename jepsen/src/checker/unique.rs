//! Unique users: concurrent registrations of a small pool of usernames through every node.
//! After healing, no two users may share a username, no name may be acknowledged twice, every
//! acknowledged registration must be found (with its objectId), and no user may exist whose
//! registration was never attempted or definitely failed.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::Verdict;
use crate::history::{Kind, Op};

/// `ops` are the `register` operations (value = username; result = objectId when acknowledged);
/// `users` is every `(username, objectId)` the final listing returned.
pub fn check(ops: &[Op], users: &[(String, String)]) -> Verdict {
    let mut by_name: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, id) in users {
        by_name.entry(name).or_default().push(id);
    }
    let duplicates: Vec<_> = by_name
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|(n, ids)| json!({"username": n, "objectIds": ids}))
        .collect();
    if !duplicates.is_empty() {
        return Verdict::Invalid {
            anomaly: json!({"kind": "duplicate-username", "users": duplicates}),
        };
    }
    let registers = ops.iter().filter(|o| o.f == "register");
    let mut acked: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut attempted: BTreeSet<&str> = BTreeSet::new();
    for o in registers {
        let Some(name) = o.value.as_str() else {
            continue;
        };
        if o.outcome != Kind::Fail {
            attempted.insert(name);
        }
        if o.outcome == Kind::Ok {
            acked
                .entry(name)
                .or_default()
                .push(o.result.as_str().unwrap_or_default());
        }
    }
    if let Some((name, ids)) = acked.iter().find(|(_, ids)| ids.len() > 1) {
        return Verdict::Invalid {
            anomaly: json!({"kind": "username-acknowledged-twice", "username": name, "objectIds": ids}),
        };
    }
    let lost: Vec<_> = acked
        .iter()
        .filter(|(name, ids)| by_name.get(*name).map(|found| found[0]) != Some(ids[0]))
        .map(|(name, ids)| json!({"username": name, "acknowledged": ids[0], "found": by_name.get(*name)}))
        .collect();
    if !lost.is_empty() {
        return Verdict::Invalid {
            anomaly: json!({"kind": "lost-registration", "users": lost}),
        };
    }
    let unexpected: Vec<&&str> = by_name.keys().filter(|n| !attempted.contains(*n)).collect();
    if !unexpected.is_empty() {
        return Verdict::Invalid {
            anomaly: json!({"kind": "unexpected-user", "usernames": unexpected}),
        };
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn reg(name: &str, outcome: Kind, id: &str) -> Op {
        Op {
            process: 0,
            f: "register".into(),
            key: None,
            value: Value::from(name),
            outcome,
            result: Value::from(id),
            call: 0,
            ret: 1,
        }
    }

    fn users(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn accepts_one_user_per_name_and_detects_each_anomaly() {
        let h = [
            reg("a", Kind::Ok, "id1"),
            reg("a", Kind::Fail, ""),
            reg("b", Kind::Info, ""),
            reg("c", Kind::Fail, ""),
        ];
        assert_eq!(check(&h, &users(&[("a", "id1")])), Verdict::Valid);
        assert_eq!(
            check(&h, &users(&[("a", "id1"), ("b", "id9")])),
            Verdict::Valid,
            "indeterminate may land"
        );
        let kind = |v: Verdict| match v {
            Verdict::Invalid { anomaly } => {
                anomaly["kind"].as_str().unwrap_or_default().to_string()
            }
            other => other.name().to_string(),
        };
        assert_eq!(
            kind(check(&h, &users(&[("a", "id1"), ("a", "id2")]))),
            "duplicate-username"
        );
        assert_eq!(kind(check(&h, &users(&[]))), "lost-registration");
        assert_eq!(
            kind(check(&h, &users(&[("a", "id7")]))),
            "lost-registration"
        );
        assert_eq!(
            kind(check(&h, &users(&[("a", "id1"), ("c", "id3")]))),
            "unexpected-user"
        );
        let twice = [reg("a", Kind::Ok, "id1"), reg("a", Kind::Ok, "id2")];
        assert_eq!(
            kind(check(&twice, &users(&[("a", "id1")]))),
            "username-acknowledged-twice"
        );
    }
}
