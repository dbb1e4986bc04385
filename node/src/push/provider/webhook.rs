//! The operator's webhook: each page's messages for it go in one JSON `POST` to the app's
//! `push.webhook.url`:
//!
//! ```json
//! {"pushId": "..", "page": 1, "expiresAt": "2026-..Z" | null, "data": {..},
//!  "messages": [{"id": "..", "installation": "<objectId>", "deviceType": "ios",
//!                "deviceToken": "..", "installationId": ".."}]}
//! ```
//!
//! with `Idempotency-Key: <pushId>/<page>` (a page resent after a scheduler hand-over carries
//! the same key and the same message ids) and, when the app set a secret,
//! `X-Basalt-Signature: sha256=<hex HMAC-SHA256 of the body>`. A 2xx answer delivers the page;
//! its body may name messages that failed, `{"failed": [{"id": "..", "error": "..",
//! "deadToken": true}]}` (a dead token is removed from its installation). Other answers fail
//! the page, after retries for 429 and 5xx (`Providers::send_with_retries`).

use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::Sha256;

use crate::push::delivery::{hex, Batch, Delivery, HttpSender, Provider};
use crate::push::settings::WebhookSettings;

/// The longest answer body read.
const MAX_ANSWER_BYTES: usize = 4 << 20;

pub struct Webhook {
    sender: HttpSender,
    settings: WebhookSettings,
}

impl Webhook {
    pub fn new(sender: HttpSender, settings: WebhookSettings) -> Webhook {
        Webhook { sender, settings }
    }
}

#[derive(Debug, Default, Deserialize)]
struct Answer {
    #[serde(default)]
    failed: Vec<FailedMessage>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FailedMessage {
    id: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    dead_token: bool,
}

/// The body of a batch.
fn body(batch: &Batch<'_>) -> Value {
    let messages: Vec<Value> = batch
        .messages
        .iter()
        .map(|m| {
            let mut v = json!({
                "id": m.id,
                "installation": m.installation,
                "deviceType": m.device_type,
                "deviceToken": m.token,
            });
            if let Some(id) = &m.installation_id {
                v["installationId"] = json!(id);
            }
            v
        })
        .collect();
    json!({
        "pushId": batch.push_id,
        "page": batch.page,
        "expiresAt": batch.expires_ms.map(basalt_cluster::object::format_wire_time),
        "data": batch.data,
        "messages": messages,
    })
}

/// `sha256=<hex>` of `body` under `secret`.
pub fn signature(secret: &str, body: &[u8]) -> Option<String> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).ok()?;
    mac.update(body);
    Some(format!("sha256={}", hex(&mac.finalize().into_bytes())))
}

#[async_trait::async_trait]
impl Provider for Webhook {
    fn name(&self) -> &'static str {
        "webhook"
    }

    async fn send(&self, batch: &Batch<'_>) -> Vec<Delivery> {
        let all = |d: Delivery| vec![d; batch.messages.len()];
        let bytes = match serde_json::to_vec(&body(batch)) {
            Ok(b) => b,
            Err(e) => return all(Delivery::Failed(format!("webhook body: {e}"))),
        };
        let sig = self
            .settings
            .secret
            .as_deref()
            .and_then(|s| signature(s, &bytes));
        let key = format!("{}/{}", batch.push_id, batch.page);
        let answer = self
            .sender
            .send_with_retries(batch.expires_ms, |http| {
                let mut req = http
                    .post(&self.settings.url)
                    .header("content-type", "application/json")
                    .header("idempotency-key", &key)
                    .body(bytes.clone());
                if let Some(sig) = &sig {
                    req = req.header("x-basalt-signature", sig);
                }
                req
            })
            .await;
        let resp = match answer {
            Ok(resp) => resp,
            Err(e) => return all(Delivery::Failed(format!("webhook unreachable: {e}"))),
        };
        let status = resp.status();
        if !status.is_success() {
            return all(Delivery::Failed(format!("webhook answered {status}")));
        }
        let text = match crate::outbound::read_capped(resp, MAX_ANSWER_BYTES).await {
            Ok(b) => b,
            // Delivered: what failed inside could not be read.
            _ => return all(Delivery::Sent),
        };
        let answer: Answer = serde_json::from_slice(&text).unwrap_or_default();
        let mut deliveries = all(Delivery::Sent);
        let at: std::collections::HashMap<&str, usize> = batch
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id.as_str(), i))
            .collect();
        for f in answer.failed {
            let Some(d) = at.get(f.id.as_str()).and_then(|&i| deliveries.get_mut(i)) else {
                continue;
            };
            let why = f
                .error
                .unwrap_or_else(|| "refused by the webhook".to_string());
            *d = match f.dead_token {
                true => Delivery::DeadToken(why),
                false => Delivery::Failed(why),
            };
        }
        deliveries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_hmac_sha256_hex() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?").unwrap(),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
