//! APNs (Apple Push Notification service) over HTTP/2 with token-based authentication: each
//! message is a `POST /3/device/<token>` on one multiplexed connection to
//! `api.push.apple.com` (or `api.sandbox.push.apple.com` unless the app's settings say
//! `production`; `--push-endpoint apns=URL` replaces both), with `authorization: bearer <an
//! ES256 JWT signed with the app's .p8 key>` (made by `jsonwebtoken`, kept 50 minutes and
//! shared by the node's pushes with that key: APNs refuses tokens renewed more often than
//! every 20),
//! `apns-topic` (the bundle id), `apns-id` (the message id, the same on a resend),
//! `apns-push-type`, `apns-priority` and `apns-expiration`.
//!
//! The payload: `aps` from the push's `aps` object, or from its `alert`, `badge`, `sound` and
//! `content-available`; every key that is not reserved for a platform goes beside `aps` as it
//! is. 410 is a dead token; other refusals fail the message with APNs's `reason` (also
//! `BadDeviceToken`, which APNs answers as well for a token of its other environment: an app
//! set to the wrong one must not lose its devices).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Map, Value};

use crate::outbound::ERROR_ANSWER_BYTES;
use crate::push::delivery::{in_order, Batch, Delivery, HttpSender, Message, Provider, RESERVED};
use crate::push::settings::ApnsSettings;

/// Messages in flight at once on the connection (APNs allows many concurrent streams).
const IN_FLIGHT: usize = 64;
/// How long a provider token is used (APNs takes them for an hour).
const TOKEN_SECS: i64 = 50 * 60;

const PRODUCTION: &str = "https://api.push.apple.com";
const SANDBOX: &str = "https://api.sandbox.push.apple.com";

/// Provider tokens by (team, key id, digest of the key), with when they were made: shared by
/// a node's pushes with that key (the ids alone are not secret).
#[derive(Default)]
pub struct ProviderTokens(Mutex<HashMap<TokenId, (i64, String)>>);

/// Team, key id, digest of the key.
type TokenId = (String, String, String);

fn token_id(s: &ApnsSettings) -> TokenId {
    (
        s.team_id.clone(),
        s.key_id.clone(),
        crate::push::delivery::secret_digest(&s.key),
    )
}

impl ProviderTokens {
    /// A token for `s` made less than `TOKEN_SECS` ago, or a new one.
    fn get(&self, s: &ApnsSettings, now_secs: i64) -> Result<String, String> {
        let id = token_id(s);
        if let Ok(held) = self.0.lock() {
            if let Some((made, token)) = held.get(&id) {
                if now_secs - made < TOKEN_SECS {
                    return Ok(token.clone());
                }
            }
        }
        let key = EncodingKey::from_ec_pem(s.key.as_bytes())
            .map_err(|e| format!("the apns key does not load: {e}"))?;
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(s.key_id.clone());
        let claims = json!({"iss": s.team_id, "iat": now_secs});
        let token = jsonwebtoken::encode(&header, &claims, &key)
            .map_err(|e| format!("the apns provider token could not be signed: {e}"))?;
        if let Ok(mut held) = self.0.lock() {
            held.insert(id, (now_secs, token.clone()));
        }
        Ok(token)
    }

    /// Forgets the token of `s` if it is still `refused` (APNs refused it; several messages
    /// may say so at once, and one new token is enough).
    fn drop_token(&self, s: &ApnsSettings, refused: &str) {
        if let Ok(mut held) = self.0.lock() {
            let id = token_id(s);
            if held.get(&id).is_some_and(|(_, t)| t == refused) {
                held.remove(&id);
            }
        }
    }
}

pub struct Apns {
    sender: HttpSender,
    settings: ApnsSettings,
    base: String,
    tokens: Arc<ProviderTokens>,
}

impl Apns {
    /// `endpoint`: `--push-endpoint apns`, if given.
    pub fn new(
        sender: HttpSender,
        settings: ApnsSettings,
        endpoint: Option<&str>,
        tokens: Arc<ProviderTokens>,
    ) -> Apns {
        let base = match (endpoint, settings.production) {
            (Some(url), _) => url.to_string(),
            (None, true) => PRODUCTION.to_string(),
            (None, false) => SANDBOX.to_string(),
        };
        Apns {
            sender,
            settings,
            base,
            tokens,
        }
    }

    async fn send_one(
        &self,
        batch: &Batch<'_>,
        payload: &[u8],
        kind: Kind,
        m: &Message,
    ) -> Delivery {
        let now = chrono::Utc::now().timestamp();
        let token = match self.tokens.get(&self.settings, now) {
            Ok(t) => t,
            Err(e) => return Delivery::Failed(e),
        };
        let url = format!("{}/3/device/{}", self.base, m.token);
        let answer = self
            .sender
            .send_with_retries(batch.expires_ms, |http| {
                let mut req = http
                    .post(&url)
                    .header("authorization", format!("bearer {token}"))
                    .header("apns-topic", &self.settings.bundle_id)
                    .header("apns-id", &m.id)
                    .header("apns-push-type", kind.push_type())
                    .header("apns-priority", kind.priority())
                    .header("content-type", "application/json")
                    .body(payload.to_vec());
                if let Some(e) = batch.expires_ms {
                    req = req.header("apns-expiration", (e / 1000).to_string());
                }
                req
            })
            .await;
        let resp = match answer {
            Ok(r) => r,
            Err(e) => return Delivery::Failed(format!("APNs unreachable: {e}")),
        };
        let status = resp.status();
        if status.is_success() {
            return Delivery::Sent;
        }
        let reason = crate::outbound::read_capped(resp, ERROR_ANSWER_BYTES)
            .await
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_else(|| format!("APNs answered {status}"));
        match (status.as_u16(), reason.as_str()) {
            (410, _) => Delivery::DeadToken(reason),
            (403, "ExpiredProviderToken" | "InvalidProviderToken") => {
                self.tokens.drop_token(&self.settings, &token);
                Delivery::Failed(reason)
            }
            _ => Delivery::Failed(reason),
        }
    }
}

/// Whether a push shows something or only wakes the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Alert,
    Background,
}

impl Kind {
    fn push_type(self) -> &'static str {
        match self {
            Kind::Alert => "alert",
            Kind::Background => "background",
        }
    }

    /// APNs requires 5 for background pushes.
    fn priority(self) -> &'static str {
        match self {
            Kind::Alert => "10",
            Kind::Background => "5",
        }
    }
}

/// The APNs payload of a push's `data`, and its kind.
fn payload(data: &Map<String, Value>) -> (Value, Kind) {
    let mut aps = match data.get("aps") {
        Some(Value::Object(aps)) => aps.clone(),
        _ => Map::new(),
    };
    for key in ["alert", "badge", "sound"] {
        if let Some(v) = data.get(key) {
            aps.entry(key.to_string()).or_insert_with(|| v.clone());
        }
    }
    let wakes = |v: &Value| v.as_i64() == Some(1) || v.as_bool() == Some(true);
    if data.get("content-available").is_some_and(wakes) {
        aps.insert("content-available".into(), json!(1));
    }
    let shows = ["alert", "badge", "sound"]
        .iter()
        .any(|k| aps.contains_key(*k));
    let kind = match (shows, aps.get("content-available").is_some_and(wakes)) {
        (false, true) => Kind::Background,
        _ => Kind::Alert,
    };
    let mut body = Map::new();
    body.insert("aps".into(), Value::Object(aps));
    for (k, v) in data {
        if !RESERVED.contains(&k.as_str()) {
            body.insert(k.clone(), v.clone());
        }
    }
    (Value::Object(body), kind)
}

#[async_trait::async_trait]
impl Provider for Apns {
    fn name(&self) -> &'static str {
        "apns"
    }

    async fn send(&self, batch: &Batch<'_>) -> Vec<Delivery> {
        let (body, kind) = payload(batch.data);
        let bytes = match serde_json::to_vec(&body) {
            Ok(b) => b,
            Err(e) => {
                return vec![Delivery::Failed(format!("APNs payload: {e}")); batch.messages.len()]
            }
        };
        // Made first (futures do nothing until polled), then run `IN_FLIGHT` at a time.
        let sends: Vec<_> = batch
            .messages
            .iter()
            .map(|m| self.send_one(batch, &bytes, kind, m))
            .collect();
        in_order(sends, IN_FLIGHT).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn payloads_put_the_reserved_keys_in_aps_and_keep_custom_ones() {
        let (p, kind) = payload(&data(json!({"alert": "hi", "badge": 2, "sound": "ding",
            "title": "android only", "wp": 1, "score": {"a": 1}})));
        assert_eq!(
            p,
            json!({"aps": {"alert": "hi", "badge": 2, "sound": "ding"}, "score": {"a": 1}})
        );
        assert_eq!(kind, Kind::Alert);
        let (p, kind) = payload(&data(json!({"content-available": 1, "x": true})));
        assert_eq!(p, json!({"aps": {"content-available": 1}, "x": true}));
        assert_eq!(kind, Kind::Background);
        // An `aps` of the push's own wins over the shorthand keys.
        let (p, _) = payload(&data(
            json!({"aps": {"alert": {"title": "T", "body": "B"}}, "alert": "x"}),
        ));
        assert_eq!(p, json!({"aps": {"alert": {"title": "T", "body": "B"}}}));
    }

    #[test]
    fn provider_tokens_are_signed_es256_and_reused() {
        let settings = ApnsSettings {
            key_id: "KEY1234567".into(),
            team_id: "TEAM123456".into(),
            bundle_id: "com.example.app".into(),
            key: include_str!("../../../tests/fixtures/apns-test-key.p8").into(),
            production: false,
        };
        let tokens = ProviderTokens::default();
        let t = tokens.get(&settings, 1_000).unwrap();
        assert_eq!(tokens.get(&settings, 1_000 + TOKEN_SECS - 1).unwrap(), t);
        let header = jsonwebtoken::decode_header(&t).unwrap();
        assert_eq!(
            (header.alg, header.kid.as_deref()),
            (Algorithm::ES256, Some("KEY1234567"))
        );
        let public = jsonwebtoken::DecodingKey::from_ec_pem(include_bytes!(
            "../../../tests/fixtures/apns-test-key.pub.pem"
        ))
        .unwrap();
        let mut v = jsonwebtoken::Validation::new(Algorithm::ES256);
        v.required_spec_claims.clear();
        v.validate_exp = false;
        let claims = jsonwebtoken::decode::<Value>(&t, &public, &v)
            .unwrap()
            .claims;
        assert_eq!(claims, json!({"iss": "TEAM123456", "iat": 1_000}));
        assert_ne!(tokens.get(&settings, 1_000 + TOKEN_SECS).unwrap(), t);
    }
}
