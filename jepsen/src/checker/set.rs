//! Set (no lost writes): creates of unique elements, then final reads after healing. Every
//! acknowledged element must be found, and nothing that was never attempted may appear.

use std::collections::BTreeSet;

use serde_json::json;

use super::Verdict;
use crate::history::{Kind, Op};

/// `ops` are the `add` operations (value = the element); `found` is every element the final
/// reads returned; `reads_agree` says whether every node's final read agreed.
pub fn check(ops: &[Op], found: &BTreeSet<String>) -> Verdict {
    let attempted: BTreeSet<String> = ops
        .iter()
        .filter(|o| o.f == "add" && o.outcome != Kind::Fail)
        .filter_map(|o| o.value.as_str().map(str::to_string))
        .collect();
    let acknowledged: BTreeSet<String> = ops
        .iter()
        .filter(|o| o.f == "add" && o.outcome == Kind::Ok)
        .filter_map(|o| o.value.as_str().map(str::to_string))
        .collect();
    let failed: BTreeSet<String> = ops
        .iter()
        .filter(|o| o.f == "add" && o.outcome == Kind::Fail)
        .filter_map(|o| o.value.as_str().map(str::to_string))
        .collect();
    let lost: Vec<&String> = acknowledged.difference(found).collect();
    let unexpected: Vec<&String> = found.iter().filter(|e| !attempted.contains(*e)).collect();
    if !lost.is_empty() || !unexpected.is_empty() {
        return Verdict::Invalid {
            anomaly: json!({
                "kind": if !lost.is_empty() { "lost-writes" } else { "unexpected-elements" },
                "lost": lost.iter().take(20).collect::<Vec<_>>(),
                "lost_count": lost.len(),
                "unexpected": unexpected.iter().take(20).collect::<Vec<_>>(),
                "failed_but_present": unexpected.iter().filter(|e| failed.contains(**e)).count(),
                "acknowledged": acknowledged.len(),
            }),
        };
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn add(e: &str, outcome: Kind) -> Op {
        Op {
            process: 0,
            f: "add".into(),
            key: None,
            value: Value::from(e),
            outcome,
            result: serde_json::Value::Null,
            call: 0,
            ret: 1,
        }
    }

    #[test]
    fn detects_lost_and_unexpected_elements() {
        let h = [
            add("a", Kind::Ok),
            add("b", Kind::Info),
            add("c", Kind::Fail),
        ];
        let found = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(check(&h, &found(&["a"])), Verdict::Valid);
        assert_eq!(
            check(&h, &found(&["a", "b"])),
            Verdict::Valid,
            "indeterminate may be present"
        );
        assert!(
            matches!(check(&h, &found(&["b"])), Verdict::Invalid { .. }),
            "a lost"
        );
        assert!(
            matches!(check(&h, &found(&["a", "c"])), Verdict::Invalid { .. }),
            "failed add present"
        );
        assert!(
            matches!(check(&h, &found(&["a", "zzz"])), Verdict::Invalid { .. }),
            "never attempted"
        );
    }
}
