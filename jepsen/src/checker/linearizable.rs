//! Linearizability of registers: Wing & Gong's search with Lowe's memoization, run per key
//! (registers are independent, so a history is linearizable iff each key's is).
//!
//! Operations: `write v` and `read → v` on a register with a known initial value. Failed
//! operations did not happen and are dropped; reads with unknown results constrain nothing and
//! are dropped; writes with unknown results may take effect at any point after their call, or
//! never. The search places operations one at a time in an order that respects real time
//! (an op may go next only if no unplaced required op returned before it was called) and the
//! register's semantics, memoizing (placed set, register value) configurations already seen.

use std::collections::HashSet;
use std::time::Instant;

use serde_json::{json, Value};

use super::Verdict;
use crate::history::{Kind, Op};

/// One operation on one register, prepared for the search.
#[derive(Debug, Clone)]
struct RegOp {
    write: bool,
    value: Value,
    call: u64,
    ret: u64,
    /// Ok operations must be placed; indeterminate writes may be left out.
    required: bool,
    index: usize,
}

/// Drops what cannot constrain the search: failed ops, reads without a result, and
/// indeterminate writes whose value no read returned (if such a write took effect, no read
/// observed it before it was overwritten, so leaving it out changes no read).
fn prepare(ops: &[&Op]) -> Vec<RegOp> {
    let read_values: HashSet<String> = ops
        .iter()
        .filter(|o| o.f == "read" && o.outcome == Kind::Ok)
        .map(|o| o.value.to_string())
        .collect();
    ops.iter()
        .enumerate()
        .filter(|(_, o)| o.outcome != Kind::Fail)
        .filter(|(_, o)| !(o.f == "read" && o.outcome != Kind::Ok))
        .filter(|(_, o)| o.outcome == Kind::Ok || read_values.contains(&o.value.to_string()))
        .map(|(i, o)| RegOp {
            write: o.f == "write",
            value: o.value.clone(),
            call: o.call,
            ret: o.ret,
            required: o.outcome == Kind::Ok,
            index: i,
        })
        .collect()
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn get(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// Outcome of checking one key.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyOutcome {
    Linearizable,
    /// Not linearizable: the ops of the key, and the longest linearizable prefix found.
    NotLinearizable {
        placed: usize,
        stuck_at: Vec<usize>,
    },
    Timeout,
}

/// Checks one register's history with initial value `initial`.
pub fn check_register(ops: &[&Op], initial: &Value, deadline: Instant) -> KeyOutcome {
    let ops = prepare(ops);
    let n = ops.len();
    let required_total = ops.iter().filter(|o| o.required).count();
    let mut placed = Bits::new(n);
    let mut placed_required = 0usize;
    let mut state = initial.clone();
    let mut memo: HashSet<(Bits, String)> = HashSet::new();
    // Each frame: the candidates at that depth, the next one to try, and what to undo.
    struct Frame {
        cands: Vec<usize>,
        next: usize,
        undo: Option<(usize, Value)>,
    }
    let candidates = |placed: &Bits| -> Vec<usize> {
        // The earliest return among unplaced required ops bounds which ops may go next.
        let horizon = (0..n)
            .filter(|&i| !placed.get(i) && ops[i].required)
            .map(|i| ops[i].ret)
            .min()
            .unwrap_or(u64::MAX);
        (0..n)
            .filter(|&i| !placed.get(i) && ops[i].call <= horizon)
            .collect()
    };
    let mut stack = vec![Frame {
        cands: candidates(&placed),
        next: 0,
        undo: None,
    }];
    let mut best = 0usize;
    let mut best_stuck: Vec<usize> = Vec::new();
    let mut steps = 0u64;
    loop {
        if placed_required == required_total {
            return KeyOutcome::Linearizable;
        }
        steps += 1;
        if steps.is_multiple_of(4096) && Instant::now() > deadline {
            return KeyOutcome::Timeout;
        }
        let depth = stack.len().saturating_sub(1);
        let Some(frame) = stack.last_mut() else {
            return KeyOutcome::NotLinearizable {
                placed: best,
                stuck_at: best_stuck,
            };
        };
        if frame.next >= frame.cands.len() {
            if depth >= best {
                best = depth;
                best_stuck = frame.cands.iter().map(|&i| ops[i].index).collect();
            }
            let Some(done) = stack.pop() else { continue };
            if let Some((i, prev)) = done.undo {
                placed.clear(i);
                if ops[i].required {
                    placed_required -= 1;
                }
                state = prev;
            }
            continue;
        }
        let i = frame.cands[frame.next];
        frame.next += 1;
        let op = &ops[i];
        let next_state = if op.write {
            op.value.clone()
        } else if op.value == state {
            state.clone()
        } else {
            continue;
        };
        placed.set(i);
        let key = (placed.clone(), next_state.to_string());
        if !memo.insert(key) {
            placed.clear(i);
            continue;
        }
        if op.required {
            placed_required += 1;
        }
        let prev = std::mem::replace(&mut state, next_state);
        let cands = candidates(&placed);
        stack.push(Frame {
            cands,
            next: 0,
            undo: Some((i, prev)),
        });
    }
}

/// Checks every key of a register history. `initial` is each register's initial value;
/// `budget_per_key` bounds the search on each key (exhausted: `unknown`, never `valid`).
pub fn check(ops: &[Op], initial: &Value, budget_per_key: std::time::Duration) -> Verdict {
    let by_key = crate::history::by_key(ops);
    let mut verdict = Verdict::Valid;
    for (key, key_ops) in &by_key {
        match check_register(key_ops, initial, Instant::now() + budget_per_key) {
            KeyOutcome::Linearizable => {}
            KeyOutcome::Timeout => {
                verdict = verdict.and(Verdict::Unknown {
                    reason: format!("time budget spent on key {key}"),
                });
            }
            KeyOutcome::NotLinearizable { placed, stuck_at } => {
                let stuck: Vec<Value> = stuck_at
                    .iter()
                    .take(10)
                    .map(|&i| {
                        let o = key_ops[i];
                        json!({"process": o.process, "f": o.f, "value": o.value, "type": o.outcome, "call_ms": o.call as f64 / 1e6, "ret_ms": if o.ret == u64::MAX { Value::Null } else { json!(o.ret as f64 / 1e6) }})
                    })
                    .collect();
                return Verdict::Invalid {
                    anomaly: json!({
                        "kind": "not-linearizable",
                        "key": key,
                        "ops_on_key": key_ops.len(),
                        "linearizable_prefix": placed,
                        "no_valid_next_among": stuck,
                    }),
                };
            }
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn op(process: u64, f: &str, value: i64, outcome: Kind, call: u64, ret: u64) -> Op {
        Op {
            process,
            f: f.into(),
            key: Some("k".into()),
            value: json!(value),
            outcome,
            result: serde_json::Value::Null,
            call,
            ret,
        }
    }

    fn lin(ops: &[Op]) -> bool {
        check(ops, &json!(0), Duration::from_secs(5)) == Verdict::Valid
    }

    #[test]
    fn sequential_histories() {
        assert!(lin(&[
            op(1, "write", 1, Kind::Ok, 0, 1),
            op(1, "read", 1, Kind::Ok, 2, 3)
        ]));
        assert!(
            !lin(&[
                op(1, "write", 1, Kind::Ok, 0, 1),
                op(1, "read", 0, Kind::Ok, 2, 3)
            ]),
            "stale read"
        );
        assert!(lin(&[op(1, "read", 0, Kind::Ok, 0, 1)]), "initial value");
        assert!(
            !lin(&[op(1, "read", 5, Kind::Ok, 0, 1)]),
            "value never written"
        );
    }

    #[test]
    fn concurrent_operations_may_take_either_order() {
        // The read overlaps the write: 0 and 1 are both fine.
        for v in [0, 1] {
            assert!(lin(&[
                op(1, "write", 1, Kind::Ok, 0, 10),
                op(2, "read", v, Kind::Ok, 5, 6)
            ]));
        }
        // Two reads in real-time order cannot see 1 then 0 (no write of 0 between).
        assert!(!lin(&[
            op(1, "write", 1, Kind::Ok, 0, 100),
            op(2, "read", 1, Kind::Ok, 10, 20),
            op(3, "read", 0, Kind::Ok, 30, 40),
        ]));
    }

    #[test]
    fn indeterminate_writes_may_happen_late_or_never() {
        let info_write = op(1, "write", 7, Kind::Info, 0, u64::MAX);
        assert!(
            lin(&[info_write.clone(), op(2, "read", 0, Kind::Ok, 10, 11)]),
            "never applied"
        );
        assert!(
            lin(&[info_write.clone(), op(2, "read", 7, Kind::Ok, 1000, 1001)]),
            "applied late"
        );
        assert!(lin(&[
            info_write.clone(),
            op(2, "read", 0, Kind::Ok, 10, 11),
            op(2, "read", 7, Kind::Ok, 20, 21)
        ]));
        assert!(
            !lin(&[
                info_write,
                op(2, "read", 7, Kind::Ok, 10, 11),
                op(2, "read", 0, Kind::Ok, 20, 21)
            ]),
            "cannot un-happen"
        );
    }

    #[test]
    fn failed_writes_never_happen() {
        assert!(!lin(&[
            op(1, "write", 3, Kind::Fail, 0, 1),
            op(2, "read", 3, Kind::Ok, 5, 6)
        ]));
    }

    #[test]
    fn keys_are_checked_independently_and_the_anomaly_names_its_key() {
        let mut a = op(1, "write", 1, Kind::Ok, 0, 1);
        a.key = Some("a".into());
        let mut b = op(2, "read", 1, Kind::Ok, 2, 3);
        b.key = Some("b".into());
        match check(&[a, b], &json!(0), Duration::from_secs(5)) {
            Verdict::Invalid { anomaly } => assert_eq!(anomaly["key"], "b"),
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    /// Brute force: try every permutation of the non-failed ops (and every subset of the
    /// indeterminate writes) for a legal sequential order respecting real time.
    fn brute_force(ops: &[Op]) -> bool {
        let prepared: Vec<&Op> = ops
            .iter()
            .filter(|o| o.outcome != Kind::Fail && !(o.f == "read" && o.outcome != Kind::Ok))
            .collect();
        let n = prepared.len();
        let optional: Vec<usize> = (0..n)
            .filter(|&i| prepared[i].outcome != Kind::Ok)
            .collect();
        for mask in 0..(1u32 << optional.len()) {
            let chosen: Vec<usize> = (0..n)
                .filter(|&i| match optional.iter().position(|&j| j == i) {
                    Some(p) => mask >> p & 1 == 1,
                    None => true,
                })
                .collect();
            if permute_ok(&prepared, &chosen, &mut Vec::new(), &json!(0)) {
                return true;
            }
        }
        false
    }

    fn permute_ok(ops: &[&Op], left: &[usize], order: &mut Vec<usize>, state: &Value) -> bool {
        if left.is_empty() {
            return true;
        }
        for (k, &i) in left.iter().enumerate() {
            // Real time: nothing left may have returned before i was called.
            if left.iter().any(|&j| j != i && ops[j].ret < ops[i].call) {
                continue;
            }
            let next = if ops[i].f == "write" {
                ops[i].value.clone()
            } else if &ops[i].value == state {
                state.clone()
            } else {
                continue;
            };
            let rest: Vec<usize> = left
                .iter()
                .enumerate()
                .filter(|&(m, _)| m != k)
                .map(|(_, &j)| j)
                .collect();
            order.push(i);
            if permute_ok(ops, &rest, order, &next) {
                return true;
            }
            order.pop();
        }
        false
    }

    #[test]
    fn random_small_histories_agree_with_brute_force() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut seen = [0usize; 2];
        for _ in 0..1500 {
            let n = rng.random_range(1..=6);
            let mut ops = Vec::new();
            for p in 0..n {
                let call = rng.random_range(0..20u64);
                let ret = call + rng.random_range(1..10u64);
                let write = rng.random_bool(0.5);
                let value = rng.random_range(0..3i64);
                let outcome = match rng.random_range(0..10) {
                    0 => Kind::Info,
                    1 => Kind::Fail,
                    _ => Kind::Ok,
                };
                let ret = if outcome == Kind::Info { u64::MAX } else { ret };
                ops.push(op(
                    p as u64,
                    if write { "write" } else { "read" },
                    value,
                    outcome,
                    call,
                    ret,
                ));
            }
            let expected = brute_force(&ops);
            seen[usize::from(expected)] += 1;
            assert_eq!(lin(&ops), expected, "history {ops:#?}");
        }
        assert!(
            seen[0] > 100 && seen[1] > 100,
            "both outcomes exercised: {seen:?}"
        );
    }

    #[test]
    fn an_exhausted_budget_is_unknown_not_valid() {
        // Many concurrent writes of distinct values and a read of a value nobody wrote: the
        // search must try a large space before failing.
        let mut ops: Vec<Op> = (0..60)
            .map(|i| op(i, "write", i as i64 + 1, Kind::Info, 0, u64::MAX))
            .collect();
        ops.push(op(999, "read", 1000, Kind::Ok, 1, 2));
        let v = check(&ops, &json!(0), Duration::from_millis(1));
        assert!(
            matches!(v, Verdict::Unknown { .. } | Verdict::Invalid { .. }),
            "{v:?}"
        );
        assert_ne!(v, Verdict::Valid);
    }
}
