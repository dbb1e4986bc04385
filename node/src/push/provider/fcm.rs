//! FCM (Firebase Cloud Messaging) HTTP v1: each message is a
//! `POST /v1/projects/<project_id>/messages:send` to `fcm.googleapis.com` (or
//! `--push-endpoint fcm=URL`) with a bearer token of the app's service account, which
//! `yup-oauth2` gets from the key file's own `token_uri` (a JWT-bearer grant signed with its
//! private key) and renews before it expires; one authenticator per service account is kept
//! by the node.
//!
//! The key file is the app's: its `token_uri` must be Google's (or, with `--push-endpoint
//! fcm=URL`, of that URL's origin), and the token request has a deadline, so that no app can
//! make the nodes call elsewhere or hold its pushes up.
//!
//! The message: `notification` from the push's `title` and `alert`; `data` (FCM takes strings
//! only) from every key not reserved for a platform or by FCM (`from`, `message_type`,
//! `google…`, `gcm…`), as text (JSON for what is not a string), plus `action` when given and
//! `push_id` / `message_id` (the same on a resend, so an app can drop repeats); `android.ttl`
//! the time left until the push's expiry (at most FCM's four weeks). `UNREGISTERED` (404) is a
//! dead token; other refusals fail the message with FCM's status and message.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::Mutex;
use yup_oauth2::authenticator::DefaultAuthenticator;

use crate::outbound::ERROR_ANSWER_BYTES;
use crate::push::delivery::{
    in_order, origin, Batch, Delivery, HttpSender, Message, Provider, RESERVED,
};
use crate::push::settings::FcmSettings;

const FCM: &str = "https://fcm.googleapis.com";
const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// How long a token request may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(15);
/// FCM keeps a message at most four weeks.
const MAX_TTL_SECS: i64 = 28 * 24 * 3600;
const SCOPE: &str = "https://www.googleapis.com/auth/firebase.messaging";
/// Messages in flight at once.
const IN_FLIGHT: usize = 64;

/// The node's authenticators, by service account (client email and key).
#[derive(Default)]
pub struct Authenticators(Mutex<HashMap<(String, String), Arc<DefaultAuthenticator>>>);

impl Authenticators {
    async fn get(
        &self,
        key: &yup_oauth2::ServiceAccountKey,
    ) -> Result<Arc<DefaultAuthenticator>, String> {
        let id = (key.client_email.clone(), key.private_key.clone());
        let mut held = self.0.lock().await;
        if let Some(a) = held.get(&id) {
            return Ok(a.clone());
        }
        let client = yup_oauth2::DefaultHyperClientBuilder::default().with_timeout(TOKEN_TIMEOUT);
        let auth = yup_oauth2::ServiceAccountAuthenticator::with_client(key.clone(), client)
            .build()
            .await
            .map_err(|e| format!("the FCM service account does not load: {e}"))?;
        let auth = Arc::new(auth);
        held.insert(id, auth.clone());
        Ok(auth)
    }
}

pub struct Fcm {
    sender: HttpSender,
    base: String,
    /// Where the key file's `token_uri` must be.
    token_origin: Option<String>,
    settings: FcmSettings,
    auths: Arc<Authenticators>,
}

impl Fcm {
    pub fn new(
        sender: HttpSender,
        settings: FcmSettings,
        endpoint: Option<&str>,
        auths: Arc<Authenticators>,
    ) -> Fcm {
        Fcm {
            sender,
            base: endpoint.unwrap_or(FCM).to_string(),
            token_origin: match endpoint {
                Some(url) => origin(url),
                None => origin(GOOGLE_TOKEN_URI),
            },
            settings,
            auths,
        }
    }

    /// A bearer token of the app's service account.
    async fn token(&self) -> Result<String, String> {
        let key: yup_oauth2::ServiceAccountKey =
            serde_json::from_value(self.settings.service_account.clone())
                .map_err(|e| format!("the FCM service account is not a key file: {e}"))?;
        if origin(&key.token_uri) != self.token_origin {
            return Err(format!(
                "the service account's token_uri must be {GOOGLE_TOKEN_URI}, not {}",
                key.token_uri
            ));
        }
        let auth = self.auths.get(&key).await?;
        let token = tokio::time::timeout(TOKEN_TIMEOUT, auth.token(&[SCOPE]))
            .await
            .map_err(|_| "no FCM access token: the token endpoint did not answer".to_string())?
            .map_err(|e| format!("no FCM access token: {e}"))?;
        token
            .token()
            .map(str::to_string)
            .ok_or_else(|| "the FCM token endpoint answered no access token".to_string())
    }

    async fn send_one(&self, url: &str, bearer: &str, body: Value, until: Option<i64>) -> Delivery {
        let answer = self
            .sender
            .send_with_retries(until, |http| http.post(url).bearer_auth(bearer).json(&body))
            .await;
        let resp = match answer {
            Ok(r) => r,
            Err(e) => return Delivery::Failed(format!("FCM unreachable: {e}")),
        };
        let status = resp.status();
        if status.is_success() {
            return Delivery::Sent;
        }
        let error = crate::outbound::read_capped(resp, ERROR_ANSWER_BYTES)
            .await
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .unwrap_or(Value::Null);
        let error = &error["error"];
        let code = error["details"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|d| d["errorCode"].as_str())
            .or_else(|| error["status"].as_str())
            .unwrap_or_default()
            .to_string();
        let why = match error["message"].as_str() {
            Some(m) if !code.is_empty() => format!("{code}: {m}"),
            Some(m) => m.to_string(),
            None => format!("FCM answered {status}"),
        };
        match code.as_str() {
            "UNREGISTERED" => Delivery::DeadToken(why),
            _ => Delivery::Failed(why),
        }
    }
}

/// FCM's data values are strings.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The FCM message to `m` of a push.
fn message(batch: &Batch<'_>, m: &Message, now_ms: i64) -> Value {
    let data_in = batch.data;
    let fcm_reserved = |k: &str| {
        matches!(k, "from" | "message_type") || k.starts_with("google") || k.starts_with("gcm")
    };
    let mut data: Map<String, Value> = data_in
        .iter()
        .filter(|(k, _)| !RESERVED.contains(&k.as_str()) && !fcm_reserved(k))
        .map(|(k, v)| (k.clone(), Value::String(text(v))))
        .collect();
    if let Some(action) = data_in.get("action") {
        data.insert("action".into(), json!(text(action)));
    }
    data.insert("push_id".into(), json!(batch.push_id));
    data.insert("message_id".into(), json!(m.id));
    let mut message = json!({"token": m.token, "data": data, "android": {"priority": "high"}});
    let mut notification = Map::new();
    if let Some(title) = data_in.get("title") {
        notification.insert("title".into(), json!(text(title)));
    }
    if let Some(alert) = data_in.get("alert") {
        notification.insert("body".into(), json!(text(alert)));
    }
    if !notification.is_empty() {
        message["notification"] = Value::Object(notification);
    }
    if let Some(e) = batch.expires_ms {
        let secs = (((e - now_ms).max(0) + 999) / 1000).min(MAX_TTL_SECS);
        message["android"]["ttl"] = json!(format!("{secs}s"));
    }
    json!({ "message": message })
}

#[async_trait::async_trait]
impl Provider for Fcm {
    fn name(&self) -> &'static str {
        "fcm"
    }

    async fn send(&self, batch: &Batch<'_>) -> Vec<Delivery> {
        let bearer = match self.token().await {
            Ok(t) => t,
            Err(e) => return vec![Delivery::Failed(e); batch.messages.len()],
        };
        let project = self
            .settings
            .service_account
            .get("project_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let url = format!("{}/v1/projects/{project}/messages:send", self.base);
        let now = basalt_cluster::now_ms();
        let sends: Vec<_> = batch
            .messages
            .iter()
            .map(|m| self.send_one(&url, &bearer, message(batch, m, now), batch.expires_ms))
            .collect();
        in_order(sends, IN_FLIGHT).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_a_notification_and_string_data() {
        let data = json!({"alert": "hi", "title": "T", "action": "com.example.OPEN",
            "badge": 3, "score": 7, "tags": ["a"], "note": "x", "from": "me", "google.x": 1});
        let batch = Batch {
            push_id: "p1",
            page: 1,
            data: data.as_object().unwrap(),
            expires_ms: Some(61_500),
            messages: Vec::new(),
        };
        let m = Message {
            id: "m1".into(),
            installation: "i1".into(),
            device_type: "android".into(),
            token: "tok".into(),
            installation_id: None,
        };
        assert_eq!(
            message(&batch, &m, 1_000),
            json!({"message": {
                "token": "tok",
                "notification": {"title": "T", "body": "hi"},
                "data": {"action": "com.example.OPEN", "score": "7", "tags": "[\"a\"]", "note": "x",
                         "push_id": "p1", "message_id": "m1"},
                "android": {"priority": "high", "ttl": "61s"}
            }})
        );
    }
}
