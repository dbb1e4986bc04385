//! Workloads: what clients do, what is read back after healing, and which checker judges it.
//!
//! - `register`: writes and reads of one field on a handful of objects (linearizability).
//! - `counter`: Increments by random amounts, also negative, and reads (bounds).
//! - `set`: creates of unique objects; after healing a listing and a read by id through every
//!   node must find every acknowledged create and nothing never attempted, the listing each
//!   object once, and a count through every node as many as it listed.
//! - `list-append`: `Add` of unique values to an array field on a few objects, and reads
//!   (prefix consistency, no duplicates, no lost appends).
//! - `unique-users`: concurrent registrations of the same usernames through every node (each
//!   round of ten operations per client draws from `USERNAMES_PER_ROUND` fresh names, so names
//!   stay contested all run long); after healing no two users share a name and no acknowledged
//!   registration is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use basalt_client::Client;
use futures::StreamExt;
use rand::Rng;
use serde_json::{json, Value};

use crate::checker::{self, Verdict};
use crate::history::{Kind, Op};

pub const REGISTER_KEYS: usize = 5;
pub const LIST_KEYS: usize = 3;
/// Usernames the unique-users workload contends for in each round of ten operations.
pub const USERNAMES_PER_ROUND: u32 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Register,
    Counter,
    Set,
    ListAppend,
    UniqueUsers,
}

impl Workload {
    pub const ALL: [Workload; 5] = [
        Workload::Register,
        Workload::Counter,
        Workload::Set,
        Workload::ListAppend,
        Workload::UniqueUsers,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Workload::Register => "register",
            Workload::Counter => "counter",
            Workload::Set => "set",
            Workload::ListAppend => "list-append",
            Workload::UniqueUsers => "unique-users",
        }
    }

    pub fn parse(s: &str) -> anyhow::Result<Workload> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| anyhow::anyhow!("unknown workload {s:?}"))
    }

    fn class(&self) -> &'static str {
        match self {
            Workload::Register => "JRegister",
            Workload::Counter => "JCounter",
            Workload::Set => "JSetElement",
            Workload::ListAppend => "JList",
            Workload::UniqueUsers => "_User",
        }
    }
}

/// Objects a workload works on: key name → objectId.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    pub keys: BTreeMap<String, String>,
}

/// Creates the workload's objects before the run.
pub async fn setup(w: Workload, client: &Client) -> anyhow::Result<Setup> {
    let mut keys = BTreeMap::new();
    let (n, init) = match w {
        Workload::Register => (REGISTER_KEYS, json!({"v": 0})),
        Workload::Counter => (1, json!({"value": 0})),
        Workload::ListAppend => (LIST_KEYS, json!({"items": []})),
        Workload::Set | Workload::UniqueUsers => (0, Value::Null),
    };
    for i in 0..n {
        let created = client.create_object(w.class(), &init).await?;
        keys.insert(format!("k{i}"), created.object_id);
    }
    Ok(Setup { keys })
}

/// One operation chosen by a client: function, key, invoked value.
pub fn next_op(
    w: Workload,
    setup: &Setup,
    process: u64,
    seq: u64,
    rng: &mut impl Rng,
) -> (String, Option<String>, Value) {
    let key = |rng: &mut dyn rand::RngCore| {
        let keys: Vec<&String> = setup.keys.keys().collect();
        keys.get(rng.random_range(0..keys.len().max(1)))
            .map(|k| k.to_string())
    };
    let unique = json!(format!("{process}-{seq}"));
    match w {
        Workload::Register => {
            if rng.random_bool(0.5) {
                (
                    "write".into(),
                    key(rng),
                    json!(process as i64 * 1_000_000 + seq as i64),
                )
            } else {
                ("read".into(), key(rng), Value::Null)
            }
        }
        Workload::Counter => {
            if rng.random_bool(0.7) {
                ("incr".into(), key(rng), json!(rng.random_range(-5..=10)))
            } else {
                ("read".into(), key(rng), Value::Null)
            }
        }
        Workload::Set => ("add".into(), None, unique),
        Workload::UniqueUsers => (
            "register".into(),
            None,
            json!(format!(
                "user{}x{}",
                seq / 10,
                rng.random_range(0..USERNAMES_PER_ROUND)
            )),
        ),
        Workload::ListAppend => {
            if rng.random_bool(0.6) {
                ("append".into(), key(rng), unique)
            } else {
                ("read".into(), key(rng), Value::Null)
            }
        }
    }
}

/// Performs an operation; returns the outcome and (for reads) the value read.
pub async fn perform(
    w: Workload,
    client: &Client,
    setup: &Setup,
    f: &str,
    key: Option<&str>,
    value: &Value,
) -> (Kind, Value) {
    let id = key
        .and_then(|k| setup.keys.get(k))
        .cloned()
        .unwrap_or_default();
    let class = w.class();
    let result: Result<Value, basalt_client::Error> = match (w, f) {
        (Workload::Register, "write") => client
            .update_object(class, &id, &json!({"v": value}))
            .await
            .map(|_| Value::Null),
        (Workload::Counter, "incr") => client
            .increment(class, &id, "value", value.as_i64().unwrap_or(0))
            .await
            .map(|_| Value::Null),
        (Workload::ListAppend, "append") => client
            .update_object(
                class,
                &id,
                &json!({"items": {"__op": "Add", "objects": [value]}}),
            )
            .await
            .map(|_| Value::Null),
        (Workload::UniqueUsers, "register") => client
            .request(
                basalt_client::Method::POST,
                "/1/users",
                Some(&json!({"username": value, "password": "jepsen"})),
                false,
            )
            .await
            .map(|r| r.body["objectId"].clone()),
        (Workload::Set, "add") => client
            .create_object(class, &json!({"tag": value}))
            .await
            .map(|c| json!(c.object_id)),
        (_, "read") => {
            let field = match w {
                Workload::Register => "v",
                Workload::Counter => "value",
                _ => "items",
            };
            client
                .get_object(class, &id)
                .await
                .map(|o| o.map(|o| o[field].clone()).unwrap_or(Value::Null))
        }
        _ => return (Kind::Fail, Value::Null),
    };
    match result {
        Ok(v) => (Kind::Ok, v),
        // A read changes nothing: any failure is a definite failure.
        Err(_) if f == "read" => (Kind::Fail, Value::Null),
        Err(e) if e.is_indeterminate() => (Kind::Info, Value::Null),
        Err(_) => (Kind::Fail, Value::Null),
    }
}

/// What the final reads after healing returned.
#[derive(Debug, Clone, Default)]
pub struct Finals {
    /// Per key: the value read through the first node.
    pub values: BTreeMap<String, Value>,
    /// For `set`: every tag found by listing and by reading acknowledged ids through every node.
    pub elements: BTreeSet<String>,
    /// For `unique-users`: every `(username, objectId)` the final listing returned.
    pub users: Vec<(String, String)>,
    /// Problems the final reads found directly (an acknowledged object missing on some node).
    pub problems: Vec<Value>,
}

/// Reads everything back through every node after the faults healed.
pub async fn final_reads(
    w: Workload,
    clients: &[Client],
    setup: &Setup,
    ops: &[Op],
) -> anyhow::Result<Finals> {
    let mut finals = Finals::default();
    let class = w.class();
    match w {
        Workload::Set => {
            // Listing through the first node, page by page in objectId order.
            let first = &clients[0];
            let mut skip = 0usize;
            let mut listed: BTreeSet<String> = BTreeSet::new();
            loop {
                let page = first
                    .query(
                        class,
                        &[
                            ("limit", "500"),
                            ("skip", &skip.to_string()),
                            ("order", "objectId"),
                        ],
                    )
                    .await?;
                let rows = page["results"].as_array().cloned().unwrap_or_default();
                for r in &rows {
                    if let Some(t) = r["tag"].as_str() {
                        finals.elements.insert(t.to_string());
                    }
                    // Each object once, across splits too.
                    if let Some(id) = r["objectId"].as_str() {
                        if !listed.insert(id.to_string()) {
                            finals
                                .problems
                                .push(json!({"kind": "listed-twice", "objectId": id}));
                        }
                    }
                }
                if rows.len() < 500 {
                    break;
                }
                skip += rows.len();
            }
            // A count through every node counts what the listing found, each object once.
            for (n, c) in clients.iter().enumerate() {
                let counted = c.query(class, &[("count", "1"), ("limit", "0")]).await?;
                if counted["count"].as_u64() != Some(listed.len() as u64) {
                    finals.problems.push(json!({"kind": "count-differs", "node": n + 1, "count": counted["count"], "listed": listed.len()}));
                }
            }
            // Every acknowledged create by id through every node, 16 reads in flight.
            let checks = ops
                .iter()
                .filter(|o| o.f == "add" && o.outcome == Kind::Ok)
                .filter_map(|o| Some((o.value.as_str()?.to_string(), acked_id(o)?)))
                .flat_map(|(tag, id)| {
                    clients
                        .iter()
                        .enumerate()
                        .map(move |(n, c)| (n, c, tag.clone(), id.clone()))
                });
            let results: Vec<anyhow::Result<Option<Value>>> = futures::stream::iter(checks)
                .map(|(n, c, tag, id)| async move {
                    match c.get_object(class, &id).await? {
                        Some(obj) if obj["tag"] == json!(tag) => Ok(None),
                        other => Ok(Some(json!({"kind": "missing-on-node", "node": n + 1, "tag": tag, "objectId": id, "read": other}))),
                    }
                })
                .buffer_unordered(16)
                .collect()
                .await;
            for r in results {
                if let Some(problem) = r? {
                    finals.problems.push(problem);
                }
            }
        }
        Workload::UniqueUsers => {
            finals.users = list_users(&clients[0]).await?;
            // Every acknowledged registration by id through every node.
            for o in ops
                .iter()
                .filter(|o| o.f == "register" && o.outcome == Kind::Ok)
            {
                let Some(id) = acked_id(o) else { continue };
                for (n, c) in clients.iter().enumerate() {
                    let found = c.get_object(class, &id).await?;
                    if found.as_ref().map(|u| &u["username"]) != Some(&o.value) {
                        finals.problems.push(json!({"kind": "missing-on-node", "node": n + 1, "username": o.value, "objectId": id, "read": found}));
                    }
                }
            }
        }
        _ => {
            let field = match w {
                Workload::Register => "v",
                Workload::Counter => "value",
                _ => "items",
            };
            for (key, id) in &setup.keys {
                let mut seen: Option<Value> = None;
                for (n, c) in clients.iter().enumerate() {
                    let v = c
                        .get_object(class, id)
                        .await?
                        .map(|o| o[field].clone())
                        .unwrap_or(Value::Null);
                    match &seen {
                        None => seen = Some(v),
                        Some(s) if s != &v => finals.problems.push(json!({"kind": "nodes-disagree", "key": key, "node": n + 1, "read": v, "first_node_read": s})),
                        _ => {}
                    }
                }
                finals
                    .values
                    .insert(key.clone(), seen.unwrap_or(Value::Null));
            }
        }
    }
    Ok(finals)
}

/// Every user, page by page in objectId order.
async fn list_users(client: &Client) -> anyhow::Result<Vec<(String, String)>> {
    let mut users = Vec::new();
    let mut skip = 0usize;
    loop {
        let page = client
            .query(
                "_User",
                &[
                    ("limit", "500"),
                    ("skip", &skip.to_string()),
                    ("order", "objectId"),
                ],
            )
            .await?;
        let rows = page["results"].as_array().cloned().unwrap_or_default();
        for r in &rows {
            if let (Some(n), Some(id)) = (r["username"].as_str(), r["objectId"].as_str()) {
                users.push((n.to_string(), id.to_string()));
            }
        }
        if rows.len() < 500 {
            return Ok(users);
        }
        skip += rows.len();
    }
}

/// The objectId an acknowledged set `add` or `register` returned.
fn acked_id(o: &Op) -> Option<String> {
    o.result.as_str().map(str::to_string)
}

/// Judges a run.
pub fn check(w: Workload, ops: &[Op], finals: &Finals, budget: Duration) -> Verdict {
    let direct = if finals.problems.is_empty() {
        Verdict::Valid
    } else {
        Verdict::Invalid {
            anomaly: json!({"kind": "final-reads", "problems": finals.problems.iter().take(10).collect::<Vec<_>>()}),
        }
    };
    let v = match w {
        Workload::Register => checker::linearizable::check(ops, &json!(0), budget),
        Workload::Counter => {
            let mut all = ops.to_vec();
            let end = ops
                .iter()
                .map(|o| if o.ret == u64::MAX { o.call } else { o.ret })
                .max()
                .unwrap_or(0)
                + 1;
            for v in finals.values.values() {
                all.push(Op {
                    process: u64::MAX,
                    f: "read".into(),
                    key: None,
                    value: v.clone(),
                    outcome: Kind::Ok,
                    result: serde_json::Value::Null,
                    call: end,
                    ret: end + 1,
                });
            }
            checker::counter::check(&all, 0)
        }
        Workload::Set => checker::set::check(ops, &finals.elements),
        Workload::ListAppend => checker::list_append::check(ops, &finals.values),
        Workload::UniqueUsers => checker::unique::check(ops, &finals.users),
    };
    direct.and(v)
}
