//! Counter: increments by random amounts (also negative) and reads. Every read must lie in
//! the range the history allows: increments that completed before the read was invoked must be
//! counted; increments invoked before the read returned (ok or indeterminate) may be; failed
//! ones never are.

use serde_json::json;

use super::Verdict;
use crate::history::{Kind, Op};

pub fn check(ops: &[Op], initial: i64) -> Verdict {
    let incrs: Vec<&Op> = ops
        .iter()
        .filter(|o| o.f == "incr" && o.outcome != Kind::Fail)
        .collect();
    let reads = ops
        .iter()
        .filter(|o| o.f == "read" && o.outcome == Kind::Ok);
    let mut worst: Option<serde_json::Value> = None;
    for r in reads {
        let Some(value) = r.value.as_i64() else {
            return Verdict::Invalid {
                anomaly: json!({"kind": "non-numeric-read", "value": r.value}),
            };
        };
        let (mut lo, mut hi) = (initial, initial);
        for i in &incrs {
            let amount = i.value.as_i64().unwrap_or(0);
            let definite = i.outcome == Kind::Ok && i.ret < r.call;
            let possible = i.call < r.ret;
            if definite {
                lo += amount;
                hi += amount;
            } else if possible {
                lo += amount.min(0);
                hi += amount.max(0);
            }
        }
        if value < lo || value > hi {
            let off = if value < lo { lo - value } else { value - hi };
            let a = json!({"kind": "read-out-of-range", "read": value, "lower": lo, "upper": hi, "off_by": off, "process": r.process, "call_ms": r.call as f64 / 1e6});
            // Report the smallest violation.
            if worst
                .as_ref()
                .and_then(|w| w["off_by"].as_i64())
                .is_none_or(|w| off < w)
            {
                worst = Some(a);
            }
        }
    }
    match worst {
        Some(anomaly) => Verdict::Invalid { anomaly },
        None => Verdict::Valid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn op(f: &str, v: i64, outcome: Kind, call: u64, ret: u64) -> Op {
        Op {
            process: 0,
            f: f.into(),
            key: None,
            value: Value::from(v),
            outcome,
            result: serde_json::Value::Null,
            call,
            ret,
        }
    }

    #[test]
    fn reads_within_bounds_are_valid() {
        let h = [
            op("incr", 5, Kind::Ok, 0, 1),
            op("incr", -2, Kind::Info, 2, u64::MAX),
            op("read", 5, Kind::Ok, 10, 11),
            op("read", 3, Kind::Ok, 12, 13),
        ];
        assert_eq!(check(&h, 0), Verdict::Valid);
    }

    #[test]
    fn lost_and_phantom_increments_are_found() {
        let lost = [
            op("incr", 5, Kind::Ok, 0, 1),
            op("read", 0, Kind::Ok, 10, 11),
        ];
        assert!(matches!(check(&lost, 0), Verdict::Invalid { .. }));
        let failed_applied = [
            op("incr", 5, Kind::Fail, 0, 1),
            op("read", 5, Kind::Ok, 10, 11),
        ];
        assert!(matches!(check(&failed_applied, 0), Verdict::Invalid { .. }));
        let never = [op("read", 1, Kind::Ok, 0, 1)];
        assert!(matches!(check(&never, 0), Verdict::Invalid { .. }));
    }
}
