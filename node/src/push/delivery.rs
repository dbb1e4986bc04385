//! What providers exchange with `fanout`: a `Batch` of `Message`s (one page's devices for one
//! service) goes in, one `Delivery` per message comes out — sent, failed (with why), or a
//! dead token (which `fanout` removes from its installation). `HttpSender` is the HTTP client
//! every provider sends through, with the retry rule they share: 429 and 5xx answers and
//! connection failures are tried again with exponential backoff (honouring `Retry-After`),
//! anything else is final. Neighbours: `provider` (the services), `fanout`.

use std::time::Duration;

use serde_json::{Map, Value};

/// What one message carries besides the payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Derived from the push and the installation (`message_id`): the same on a resend.
    pub id: String,
    /// The installation's objectId.
    pub installation: String,
    pub device_type: String,
    /// The address the service knows the device by: `deviceToken` (ios, android) or
    /// `notificationUri` (windows phone).
    pub token: String,
    /// The installation's `installationId`, when it has one.
    pub installation_id: Option<String>,
}

/// One page's messages for one provider.
#[derive(Debug)]
pub struct Batch<'a> {
    pub push_id: &'a str,
    /// The page's number (1 for the first): with the push id, the batch's idempotency key.
    pub page: u64,
    pub data: &'a Map<String, Value>,
    pub expires_ms: Option<i64>,
    pub messages: Vec<Message>,
}

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Sent,
    Failed(String),
    /// The service says the device token is no longer valid.
    DeadToken(String),
}

/// A push service.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// The name counts and errors are kept under (`apns`, `fcm`, `wns`, `webhook`).
    fn name(&self) -> &'static str;
    /// Sends a batch; one delivery per message, in order.
    async fn send(&self, batch: &Batch<'_>) -> Vec<Delivery>;
}

/// The message id of an installation's copy of a push: a UUID-shaped digest of both ids, the
/// same every time the page is sent (APNs takes it as `apns-id`).
pub fn message_id(push_id: &str, installation: &str) -> String {
    use md5::{Digest, Md5};
    let d = Md5::digest(format!("{push_id}/{installation}").as_bytes());
    let h = hex(&d);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Runs a provider's sends, `at_once` at a time (a slow one does not hold up those after it),
/// and answers their deliveries in the order of `sends`.
pub async fn in_order<F>(sends: Vec<F>, at_once: usize) -> Vec<Delivery>
where
    F: std::future::Future<Output = Delivery>,
{
    use futures::StreamExt;
    let mut done: Vec<(usize, Delivery)> = futures::stream::iter(
        sends
            .into_iter()
            .enumerate()
            .map(|(i, f)| async move { (i, f.await) }),
    )
    .buffer_unordered(at_once)
    .collect()
    .await;
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, d)| d).collect()
}

/// Keys of a push's `data` that are some platform's, not the app's.
pub const RESERVED: [&str; 14] = [
    "alert",
    "badge",
    "sound",
    "content-available",
    "aps",
    "action",
    "title",
    "wp",
    "wpAlert",
    "backgroundImage",
    "count",
    "backBackgroundImage",
    "backTitle",
    "backContent",
];

/// `scheme://host[:port]` of a URL.
pub fn origin(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    Some(u.origin().ascii_serialization())
}

/// A digest naming a secret in a cache key (so that a cache entry is found only by whoever
/// holds the secret, not by its public ids alone).
pub fn secret_digest(secret: &str) -> String {
    use sha2::{Digest, Sha256};
    hex(&Sha256::digest(secret.as_bytes()))
}

/// Lowercase hex of bytes (digests, signatures).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The HTTP client of the providers, with their retry rule.
#[derive(Clone)]
pub struct HttpSender {
    pub http: reqwest::Client,
    /// First wait between tries; doubled each time.
    pub backoff: Duration,
    /// Tries of one request in all.
    pub tries: u32,
}

impl HttpSender {
    /// Sends with `request` until an answer is final (see the module's rule); answers the
    /// last response, or the last error. No try starts at or after `until_ms` (the push's
    /// expiry).
    pub async fn send_with_retries(
        &self,
        until_ms: Option<i64>,
        request: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, String> {
        let tries = self.tries.max(1);
        let mut wait = self.backoff;
        let mut last = String::new();
        for attempt in 1..=tries {
            if until_ms.is_some_and(|u| basalt_cluster::now_ms() >= u) {
                return Err("the push expired before it could be sent".into());
            }
            let retry_after = match request(&self.http).send().await {
                Ok(resp) => {
                    let status = resp.status();
                    if !(status.as_u16() == 429 || status.is_server_error()) || attempt == tries {
                        return Ok(resp);
                    }
                    resp.headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(|s| Duration::from_secs(s.min(30)))
                }
                Err(e) => {
                    last = format!("{e}");
                    None
                }
            };
            if attempt < tries {
                metrics::counter!("basalt_push_retries_total").increment(1);
                tokio::time::sleep(retry_after.unwrap_or(wait)).await;
                wait = wait.saturating_mul(2);
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_stable_and_distinct() {
        let a = message_id("p1", "i1");
        assert_eq!(a, message_id("p1", "i1"));
        assert_ne!(a, message_id("p1", "i2"));
        assert_ne!(a, message_id("p2", "i1"));
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
    }
}
