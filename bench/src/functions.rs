//! Cloud function workloads (`functions`): `fn-trivial` calls a function that adds one to a
//! number, `fn-query` one that lists 5 objects of `FnItem` by an indexed value (1,000
//! objects, 100 values), `fn-write` one that creates an object. `prepare` deploys the three
//! functions with the master key and loads `FnItem` when a run asks for them.

use anyhow::Context;
use basalt_client::{Client, Method};
use serde_json::{json, Value};

/// Objects of the class `fn-query` lists, and how many values of `n` they spread over.
const ITEMS: u64 = 1_000;
const VALUES: u64 = 100;

/// The deployed functions: name and source (the body of an async function of `request`).
const FUNCTIONS: [(&str, &str); 3] = [
    ("benchTrivial", "return request.params.n + 1;"),
    (
        "benchQuery",
        "return (await Basalt.find('FnItem', {where: {n: request.params.n}, limit: 5})).length;",
    ),
    (
        "benchWrite",
        "return (await Basalt.create('FnWrite', {n: request.params.n})).objectId;",
    ),
];

/// The function a workload calls, when it is a function workload.
pub fn function_of(workload: &str) -> Option<&'static str> {
    match workload {
        "fn-trivial" => Some("benchTrivial"),
        "fn-query" => Some("benchQuery"),
        "fn-write" => Some("benchWrite"),
        _ => None,
    }
}

/// Deploys the functions and loads `FnItem` when `workloads` has a function workload.
pub async fn prepare(clients: &[Client], workloads: &[String]) -> anyhow::Result<()> {
    if !workloads.iter().any(|w| function_of(w).is_some()) {
        return Ok(());
    }
    let c = &clients[0];
    for (name, source) in FUNCTIONS {
        c.request(
            Method::PUT,
            &format!("/1/functions/{name}"),
            Some(&json!({ "source": source })),
            true,
        )
        .await
        .with_context(|| format!("deploying {name} (the credentials need the master key)"))?;
    }
    if workloads.iter().any(|w| w == "fn-query") {
        let have = c.query("FnItem", &[("count", "1"), ("limit", "0")]).await?["count"]
            .as_u64()
            .unwrap_or(0);
        crate::batches::load(clients, have, ITEMS, 8, "FnItem objects", item).await?;
    }
    Ok(())
}

fn item(i: u64, _total: u64) -> Value {
    json!({"method": "POST", "path": "/1/classes/FnItem", "body": {"n": i % VALUES, "i": i}})
}

/// One call of the workload's function; whether it answered as it should.
pub async fn call(client: &Client, function: &str, i: u64) -> bool {
    let n = i % VALUES;
    let path = format!("/1/functions/{function}");
    match client
        .request(Method::POST, &path, Some(&json!({ "n": n })), false)
        .await
    {
        Ok(r) => match function {
            "benchTrivial" => r.body["result"] == json!(n + 1),
            "benchQuery" => r.body["result"] == json!(5),
            _ => r.body["result"].is_string(),
        },
        Err(_) => false,
    }
}
