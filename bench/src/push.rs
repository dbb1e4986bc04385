//! Push workloads: `load-installations` registers `--objects` android installations (resuming a
//! partial load) in batches of 50 through `/1/batch`; `push-broadcast` points the app's push
//! webhook at a receiver this process serves on loopback (it answers each batch at once and
//! counts its messages), sends one push to every installation, and times it: the answer to
//! `POST /1/push`, the first and the last message received, and the push's status reaching
//! `succeeded`. The webhook takes each page of 1,000 messages in one request: the rate is
//! Basalt's fan-out (reading the installations, recording progress), not a platform
//! service's.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use basalt_client::{Client, Method};
use serde_json::{json, Value};

/// Installations registered so far (master key).
pub async fn count(client: &Client) -> anyhow::Result<u64> {
    let r = client
        .request(Method::GET, "/1/installations?count=1&limit=0", None, true)
        .await
        .context("counting installations")?;
    r.body["count"].as_u64().context("count missing")
}

/// Registers installations `have..objects` over `concurrency` tasks; answers the failures.
pub async fn load(
    clients: &[Client],
    have: u64,
    objects: u64,
    concurrency: usize,
) -> anyhow::Result<u64> {
    crate::batches::load(
        clients,
        have,
        objects,
        concurrency,
        "installations",
        |i, _| {
            json!({"method": "POST", "path": "/1/installations", "body": {
            "deviceType": "android", "installationId": format!("bench-{i}"),
            "deviceToken": format!("bench-token-{i}"), "channels": ["all"]}})
        },
    )
    .await
}

#[derive(Default)]
struct Receiver {
    messages: AtomicU64,
    batches: AtomicU64,
    /// Installations reached (a page sent again is counted once).
    reached: Mutex<HashSet<String>>,
    first: Mutex<Option<Instant>>,
    last: Mutex<Option<Instant>>,
}

async fn receive(State(r): State<Arc<Receiver>>, body: Bytes) -> Json<Value> {
    let now = Instant::now();
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let messages = v["messages"].as_array().cloned().unwrap_or_default();
    r.batches.fetch_add(1, Ordering::Relaxed);
    r.messages
        .fetch_add(messages.len() as u64, Ordering::Relaxed);
    if let Ok(mut reached) = r.reached.lock() {
        for m in &messages {
            if let Some(id) = m["installation"].as_str() {
                reached.insert(id.to_string());
            }
        }
    }
    if let Ok(mut f) = r.first.lock() {
        f.get_or_insert(now);
    }
    if let Ok(mut l) = r.last.lock() {
        *l = Some(now);
    }
    Json(json!({"failed": []}))
}

/// What one broadcast took.
pub struct Broadcast {
    pub installations: u64,
    pub accepted: Duration,
    pub first: Duration,
    pub last: Duration,
    pub finished: Duration,
    pub batches: u64,
    pub messages: u64,
}

/// Sends one push to every installation through a webhook served here, and times it.
pub async fn broadcast(
    client: &Client,
    console: &Client,
    app_id: &str,
    installations: u64,
) -> anyhow::Result<Broadcast> {
    let receiver = Arc::new(Receiver::default());
    let app = Router::new()
        .route("/push", post(receive))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    console
        .request(
            Method::PUT,
            &format!("/1/apps/{app_id}"),
            Some(&json!({"push": {"webhook": {"url": format!("http://127.0.0.1:{port}/push")}}})),
            false,
        )
        .await
        .context("setting the app's push webhook")?;
    let started = Instant::now();
    let r = client
        .request(
            Method::POST,
            "/1/push",
            Some(&json!({"data": {"alert": "benchmark", "n": 1}})),
            true,
        )
        .await
        .context("POST /1/push")?;
    let accepted = started.elapsed();
    let push_id = r.push_id.context("no push id")?;
    let deadline = started + Duration::from_secs(3600);
    let finished = loop {
        // A poll that fails (a node busy sending) is tried again until the deadline.
        let s = match client
            .request(Method::GET, &format!("/1/push/{push_id}"), None, true)
            .await
        {
            Ok(r) => r.body,
            Err(e) => json!({"status": format!("unread: {e}")}),
        };
        match s["status"].as_str() {
            Some("succeeded") => break started.elapsed(),
            Some("failed" | "expired") => bail!("the push ended {s}"),
            _ => {}
        }
        if Instant::now() > deadline {
            bail!("the push did not finish within an hour: {s}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let reached = receiver.reached.lock().map(|r| r.len()).unwrap_or(0) as u64;
    if reached != installations {
        bail!("the push reached {reached} of {installations} installations");
    }
    let at = |m: &Mutex<Option<Instant>>| {
        m.lock()
            .ok()
            .and_then(|t| *t)
            .map_or(Duration::ZERO, |t| t.duration_since(started))
    };
    Ok(Broadcast {
        installations,
        accepted,
        first: at(&receiver.first),
        last: at(&receiver.last),
        finished,
        batches: receiver.batches.load(Ordering::Relaxed),
        messages: receiver.messages.load(Ordering::Relaxed),
    })
}
