//! Outgoing SMS: the `SmsProvider` trait and its two implementations. `WebhookProvider` POSTs
//! each message as JSON to the operator's URL (`--sms-webhook-url`), which hands it to a real
//! SMS gateway; a 2xx answer counts as delivered. Without one, `OutboxProvider` writes each
//! message to `<data-dir>/sms-outbox/` and logs it (development). Caller: `sms`.

use std::path::PathBuf;
use std::time::Duration;

use basalt_cluster::names::AppId;
use serde::Serialize;

/// One message, as the webhook receives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sms {
    pub sms_id: i64,
    pub app_id: AppId,
    pub app_name: String,
    pub mobile_phone_number: String,
    pub template: String,
    pub content: String,
    /// Counted length: characters plus the 6 of the signature (spec 8).
    pub counted_length: usize,
    /// Billed messages: 1 up to 70 counted characters, else 67-character segments.
    pub segments: usize,
}

#[derive(Debug, thiserror::Error)]
#[error("SMS delivery failed: {0}")]
pub struct SmsError(pub String);

/// Sends SMS.
#[async_trait::async_trait]
pub trait SmsProvider: Send + Sync {
    async fn send(&self, sms: &Sms) -> Result<(), SmsError>;
}

/// Delivery by an HTTP POST of the message as JSON.
pub struct WebhookProvider {
    url: String,
    http: reqwest::Client,
}

impl WebhookProvider {
    pub fn new(url: &str) -> anyhow::Result<Self> {
        if !url.starts_with("http://") && !url.starts_with("https://") {
            anyhow::bail!("--sms-webhook-url must be an http:// or https:// URL");
        }
        Ok(WebhookProvider {
            url: url.to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
        })
    }
}

#[async_trait::async_trait]
impl SmsProvider for WebhookProvider {
    async fn send(&self, sms: &Sms) -> Result<(), SmsError> {
        let resp = self
            .http
            .post(&self.url)
            .json(sms)
            .send()
            .await
            .map_err(|e| SmsError(e.to_string()))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(SmsError(format!("webhook answered {}", resp.status())))
        }
    }
}

/// Development delivery: one JSON file per message in a directory, and a log line.
pub struct OutboxProvider {
    dir: PathBuf,
}

impl OutboxProvider {
    pub fn new(dir: PathBuf) -> Self {
        OutboxProvider { dir }
    }
}

#[async_trait::async_trait]
impl SmsProvider for OutboxProvider {
    async fn send(&self, sms: &Sms) -> Result<(), SmsError> {
        let name = format!(
            "{}-{}.json",
            chrono::Utc::now().format("%Y%m%dT%H%M%S%.3f"),
            sms.sms_id
        );
        let text = serde_json::to_vec_pretty(sms).map_err(|e| SmsError(e.to_string()))?;
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join(name), text)
        })
        .await
        .map_err(|e| SmsError(e.to_string()))?
        .map_err(|e| SmsError(e.to_string()))?;
        tracing::info!(to = %sms.mobile_phone_number, content = %sms.content, "SMS written to the dev outbox");
        Ok(())
    }
}
