//! WNS (Windows Push Notification Services): an access token for the app's package
//! (`clientId`, `clientSecret`) from `login.live.com` by the OAuth2 client-credentials grant
//! (`oauth2` crate, scope `notify.windows.com`; kept until it expires), then one `POST` per
//! device to its `notificationUri` with `X-WNS-Type` by the push's `wp`: 0 (default) raw, the
//! payload as JSON; 1 a toast of `wpAlert` (or `alert`) under `title`; 2 a tile of
//! `backTitle`/`backContent` (or `title`/`alert`) over `backgroundImage`, with `count` as its
//! badge. `X-WNS-TTL` is the time left until the push's expiry.
//!
//! Notification uris are written by clients, and the request carries the app's token: only
//! `https://*.notify.windows.com/` uris are sent to — or, with `--push-endpoint wns=URL` (the
//! token endpoint of a proxy or a test's fake), uris of that URL's origin. 404 and 410 are
//! dead channels; 401 renews the token once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oauth2::basic::BasicClient;
use oauth2::{AuthType, ClientId, ClientSecret, Scope, TokenResponse, TokenUrl};
use serde_json::Value;
use tokio::sync::Mutex;

use crate::push::delivery::{
    in_order, origin, secret_digest, Batch, Delivery, HttpSender, Message, Provider,
};
use crate::push::settings::WnsSettings;

const TOKEN_URL: &str = "https://login.live.com/accesstoken.srf";
/// How long a token request may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(15);
const IN_FLIGHT: usize = 32;

/// A package's access token and until when it is good.
type Slot = Arc<Mutex<Option<(Instant, String)>>>;

/// Access tokens by package (client id and a digest of its secret), each behind its own lock:
/// a package's token is asked for once however many messages need it, and a slow token
/// endpoint holds up only its own package.
#[derive(Default)]
pub struct AccessTokens(std::sync::Mutex<HashMap<(String, String), Slot>>);

impl AccessTokens {
    fn slot(&self, s: &WnsSettings) -> Slot {
        let id = (s.client_id.clone(), secret_digest(&s.client_secret));
        let mut slots = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slots.entry(id).or_default().clone()
    }
}

pub struct Wns {
    sender: HttpSender,
    settings: WnsSettings,
    token_url: String,
    /// What a notification uri must start with (`None`: `https://*.notify.windows.com/`).
    origin: Option<String>,
    tokens: Arc<AccessTokens>,
}

impl Wns {
    pub fn new(
        sender: HttpSender,
        settings: WnsSettings,
        endpoint: Option<&str>,
        tokens: Arc<AccessTokens>,
    ) -> Wns {
        Wns {
            sender,
            settings,
            token_url: endpoint.unwrap_or(TOKEN_URL).to_string(),
            origin: endpoint.and_then(origin),
            tokens,
        }
    }

    /// Whether the app's token may be sent to `uri`.
    fn allowed(&self, uri: &str) -> bool {
        match &self.origin {
            Some(o) => origin(uri).as_deref() == Some(o.as_str()),
            None => url::Url::parse(uri).is_ok_and(|u| {
                u.scheme() == "https"
                    && u.host_str()
                        .is_some_and(|h| h.ends_with(".notify.windows.com"))
            }),
        }
    }

    /// The package's access token: the one held unless it expired or is `refused` (WNS
    /// answered 401 to it), else a new one.
    async fn token(&self, refused: Option<&str>) -> Result<String, String> {
        let slot = self.tokens.slot(&self.settings);
        let mut held = slot.lock().await;
        if let Some((until, t)) = held.as_ref() {
            if Instant::now() < *until && Some(t.as_str()) != refused {
                return Ok(t.clone());
            }
        }
        let url = TokenUrl::new(self.token_url.clone()).map_err(|e| e.to_string())?;
        let client = BasicClient::new(ClientId::new(self.settings.client_id.clone()))
            .set_client_secret(ClientSecret::new(self.settings.client_secret.clone()))
            .set_auth_type(AuthType::RequestBody)
            .set_token_uri(url);
        let request = client
            .exchange_client_credentials()
            .add_scope(Scope::new("notify.windows.com".into()))
            .request_async(&self.sender.http);
        let answer = tokio::time::timeout(TOKEN_TIMEOUT, request)
            .await
            .map_err(|_| "no WNS access token: the token endpoint did not answer".to_string())?
            .map_err(|e| format!("no WNS access token: {e}"))?;
        let token = answer.access_token().secret().clone();
        let lasts = answer
            .expires_in()
            .unwrap_or(Duration::from_secs(3600))
            .saturating_sub(Duration::from_secs(60));
        *held = Some((Instant::now() + lasts, token.clone()));
        Ok(token)
    }

    async fn send_one(
        &self,
        note: &Notification,
        m: &Message,
        ttl: Option<i64>,
        until: Option<i64>,
    ) -> Delivery {
        if !self.allowed(&m.token) {
            return Delivery::Failed(format!(
                "{} is not a WNS channel uri (https://*.notify.windows.com/)",
                m.token
            ));
        }
        let mut refused: Option<String> = None;
        loop {
            let token = match self.token(refused.as_deref()).await {
                Ok(t) => t,
                Err(e) => return Delivery::Failed(e),
            };
            let answer = self
                .sender
                .send_with_retries(until, |http| {
                    let mut req = http
                        .post(&m.token)
                        .bearer_auth(&token)
                        .header("x-wns-type", note.kind)
                        .header("content-type", note.content_type)
                        .body(note.body.clone());
                    if let Some(ttl) = ttl {
                        req = req.header("x-wns-ttl", ttl.to_string());
                    }
                    req
                })
                .await;
            let resp = match answer {
                Ok(r) => r,
                Err(e) => return Delivery::Failed(format!("WNS unreachable: {e}")),
            };
            let status = resp.status().as_u16();
            match status {
                200..=299 => return Delivery::Sent,
                401 if refused.is_none() => refused = Some(token),
                404 | 410 => return Delivery::DeadToken(format!("WNS answered {status}")),
                _ => {
                    let why = resp
                        .headers()
                        .get("x-wns-error-description")
                        .and_then(|v| v.to_str().ok())
                        .map(|d| format!("WNS answered {status}: {d}"))
                        .unwrap_or_else(|| format!("WNS answered {status}"));
                    return Delivery::Failed(why);
                }
            }
        }
    }
}

/// One push as WNS takes it.
#[derive(Debug, Clone, PartialEq)]
struct Notification {
    kind: &'static str,
    content_type: &'static str,
    body: Vec<u8>,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

fn notification(data: &serde_json::Map<String, Value>) -> Notification {
    let text = |k: &str| match data.get(k) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Null) | None => None,
        Some(other) => Some(other.to_string()),
    };
    let first = |keys: &[&str]| keys.iter().find_map(|k| text(k)).unwrap_or_default();
    match data.get("wp").and_then(Value::as_i64).unwrap_or(0) {
        1 => Notification {
            kind: "wns/toast",
            content_type: "text/xml",
            body: format!(
                "<toast><visual><binding template=\"ToastText02\"><text id=\"1\">{}</text><text id=\"2\">{}</text></binding></visual></toast>",
                escape(&first(&["title"])),
                escape(&first(&["wpAlert", "alert"])),
            )
            .into_bytes(),
        },
        2 => {
            let image = match text("backgroundImage") {
                Some(src) => format!("<image id=\"1\" src=\"{}\"/>", escape(&src)),
                None => String::new(),
            };
            let badge = match text("count") {
                Some(c) => format!(" branding=\"badge\" hint-badge=\"{}\"", escape(&c)),
                None => String::new(),
            };
            Notification {
                kind: "wns/tile",
                content_type: "text/xml",
                body: format!(
                    "<tile><visual version=\"2\"{badge}><binding template=\"TileSquare150x150PeekImageAndText02\">{image}<text id=\"1\">{}</text><text id=\"2\">{}</text></binding></visual></tile>",
                    escape(&first(&["backTitle", "title"])),
                    escape(&first(&["backContent", "wpAlert", "alert"])),
                )
                .into_bytes(),
            }
        }
        _ => Notification {
            kind: "wns/raw",
            content_type: "application/octet-stream",
            body: serde_json::to_vec(data).unwrap_or_default(),
        },
    }
}

#[async_trait::async_trait]
impl Provider for Wns {
    fn name(&self) -> &'static str {
        "wns"
    }

    async fn send(&self, batch: &Batch<'_>) -> Vec<Delivery> {
        let note = notification(batch.data);
        let ttl = batch
            .expires_ms
            .map(|e| ((e - basalt_cluster::now_ms()).max(1000) + 999) / 1000);
        let sends: Vec<_> = batch
            .messages
            .iter()
            .map(|m| self.send_one(&note, m, ttl, batch.expires_ms))
            .collect();
        in_order(sends, IN_FLIGHT).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn n(v: Value) -> Notification {
        notification(v.as_object().unwrap())
    }

    #[test]
    fn the_kind_follows_wp() {
        let raw = n(json!({"alert": "a", "x": 1}));
        assert_eq!(
            (raw.kind, raw.content_type),
            ("wns/raw", "application/octet-stream")
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&raw.body).unwrap(),
            json!({"alert": "a", "x": 1})
        );
        let toast = n(json!({"wp": 1, "title": "T & U", "wpAlert": "<hi>"}));
        assert_eq!(toast.kind, "wns/toast");
        assert_eq!(
            String::from_utf8(toast.body).unwrap(),
            "<toast><visual><binding template=\"ToastText02\"><text id=\"1\">T &amp; U</text><text id=\"2\">&lt;hi&gt;</text></binding></visual></toast>"
        );
        let tile = n(
            json!({"wp": 2, "backTitle": "B", "backContent": "C", "count": 4, "backgroundImage": "https://x/i.png"}),
        );
        let body = String::from_utf8(tile.body).unwrap();
        assert_eq!(tile.kind, "wns/tile");
        assert!(body.contains("hint-badge=\"4\"") && body.contains("src=\"https://x/i.png\""));
        assert!(body.contains("<text id=\"1\">B</text><text id=\"2\">C</text>"));
    }

    #[test]
    fn the_token_goes_only_to_wns_channels() {
        let sender = HttpSender {
            http: reqwest::Client::new(),
            backoff: Duration::from_millis(1),
            tries: 1,
        };
        let settings = WnsSettings {
            client_id: "c".into(),
            client_secret: "s".into(),
        };
        let real = Wns::new(sender.clone(), settings.clone(), None, Arc::default());
        assert!(real.allowed("https://db5.notify.windows.com/?token=x"));
        assert!(!real.allowed("http://db5.notify.windows.com/?token=x"));
        assert!(!real.allowed("https://notify.windows.com.evil.example/"));
        assert!(!real.allowed("https://127.0.0.1/"));
        let fake = Wns::new(
            sender,
            settings,
            Some("http://127.0.0.1:9/token"),
            Arc::default(),
        );
        assert!(fake.allowed("http://127.0.0.1:9/channel/1"));
        assert!(!fake.allowed("http://127.0.0.1:10/channel/1"));
    }
}
