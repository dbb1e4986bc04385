//! Bulk loading through `/1/batch`: `load` sends the operations for items `have..total`, 50
//! to a batch, over several concurrent tasks spread across the clients, printing progress.
//! Callers: `queries` (objects of the query class), `push` (installations).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use basalt_client::{Client, Method};
use serde_json::{json, Value};

/// Operations per batch (the API's largest).
pub const BATCH: u64 = 50;

/// Sends `operation(i)` (a batch request: `{method, path, body}`) for each `i` in
/// `have..total`; `what` names the items in progress lines. Answers the failed operations.
pub async fn load(
    clients: &[Client],
    have: u64,
    total: u64,
    concurrency: usize,
    what: &'static str,
    operation: fn(u64, u64) -> Value,
) -> anyhow::Result<u64> {
    let next = Arc::new(AtomicU64::new(have));
    let failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency.max(1) {
        let (client, next, failed) = (
            clients[t % clients.len()].clone(),
            next.clone(),
            failed.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(BATCH, Ordering::Relaxed);
                if first >= total {
                    break;
                }
                let last = (first + BATCH).min(total);
                let requests: Vec<Value> = (first..last).map(|i| operation(i, total)).collect();
                let body = json!({ "requests": requests });
                let bad = match client
                    .request(Method::POST, "/1/batch", Some(&body), false)
                    .await
                {
                    Ok(v) => v.body.as_array().map_or(last - first, |a| {
                        a.iter().filter(|r| r.get("success").is_none()).count() as u64
                    }),
                    Err(_) => last - first,
                };
                failed.fetch_add(bad, Ordering::Relaxed);
                if last % 50_000 < BATCH && last > first {
                    eprintln!(
                        "loaded {last}/{total} {what} ({:.0}/s)",
                        (last - have) as f64 / started.elapsed().as_secs_f64()
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let secs = started.elapsed().as_secs_f64();
    let done = total.saturating_sub(have);
    eprintln!(
        "loaded {done} {what} in {secs:.0} s ({:.0}/s)",
        done as f64 / secs
    );
    Ok(failed.load(Ordering::Relaxed))
}
