//! A push webhook on loopback for tests: keeps every batch POSTed to it (its idempotency key,
//! whether its signature checks out under the secret, its body) and answers 200, naming the
//! messages to tokens starting with `dead` as dead tokens. It can be told to answer 503 to the
//! next requests (a provider having trouble) and to hold each answer back a while (a slow
//! provider, so that a fan-out can be interrupted midway).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

pub const SECRET: &str = "push-webhook-secret";

/// One batch as received.
#[derive(Debug, Clone)]
pub struct Batch {
    pub idempotency_key: String,
    pub signed: bool,
    pub body: Value,
}

#[derive(Default)]
struct Shared {
    batches: Mutex<Vec<Batch>>,
    fail_next: AtomicUsize,
    delay_ms: AtomicU64,
    requests: AtomicUsize,
}

#[derive(Clone)]
pub struct PushWebhook {
    pub port: u16,
    shared: Arc<Shared>,
}

fn signature_ok(headers: &HeaderMap, body: &[u8]) -> bool {
    let Some(sent) = headers
        .get("x-basalt-signature")
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Ok(mut mac) = <Hmac<Sha256> as Mac>::new_from_slice(SECRET.as_bytes()) else {
        return false;
    };
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    sent == format!("sha256={hex}")
}

async fn receive(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let failing = shared
        .fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if failing {
        return (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "0")]).into_response();
    }
    let Ok(parsed) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let batch = Batch {
        idempotency_key: headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        signed: signature_ok(&headers, &body),
        body: parsed.clone(),
    };
    if let Ok(mut b) = shared.batches.lock() {
        b.push(batch);
    }
    let delay = shared.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let failed: Vec<Value> = parsed["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| {
            m["deviceToken"]
                .as_str()
                .is_some_and(|t| t.starts_with("dead"))
        })
        .map(|m| json!({"id": m["id"], "error": "Unregistered", "deadToken": true}))
        .collect();
    Json(json!({"failed": failed})).into_response()
}

impl PushWebhook {
    pub async fn start() -> PushWebhook {
        let shared: Arc<Shared> = Arc::default();
        let app = Router::new()
            .route("/push", post(receive))
            .with_state(Arc::clone(&shared));
        let port = super::serve_on_loopback(app).await;
        PushWebhook { port, shared }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/push", self.port)
    }

    /// The app settings that send every push to this webhook.
    pub fn settings(&self) -> Value {
        json!({"push": {"webhook": {"url": self.url(), "secret": SECRET}}})
    }

    /// Answers 503 to the next `n` requests.
    pub fn fail_next(&self, n: usize) {
        self.shared.fail_next.store(n, Ordering::SeqCst);
    }

    /// Holds each answer back `ms` milliseconds (after the batch is kept).
    pub fn delay(&self, ms: u64) {
        self.shared.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Requests received, refused ones included.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    pub fn batches(&self) -> Vec<Batch> {
        self.shared
            .batches
            .lock()
            .map(|b| b.clone())
            .unwrap_or_default()
    }

    /// The batches of one push.
    pub fn batches_of(&self, push_id: &str) -> Vec<Batch> {
        self.batches()
            .into_iter()
            .filter(|b| b.body["pushId"] == push_id)
            .collect()
    }

    /// Each message of a push as received (repeats included), by installation objectId.
    pub fn messages_of(&self, push_id: &str) -> BTreeMap<String, Vec<Value>> {
        let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for b in self.batches_of(push_id) {
            for m in b.body["messages"].as_array().into_iter().flatten() {
                let id = m["installation"].as_str().unwrap_or_default().to_string();
                out.entry(id).or_default().push(m.clone());
            }
        }
        out
    }

    /// The installations a push reached (each once), waiting until `n` are reached.
    pub async fn wait_reached(
        &self,
        push_id: &str,
        n: usize,
        timeout: Duration,
    ) -> BTreeSet<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let reached: BTreeSet<String> = self.messages_of(push_id).into_keys().collect();
            if reached.len() >= n {
                return reached;
            }
            assert!(
                Instant::now() < deadline,
                "push {push_id} reached {} of {n} installations",
                reached.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
