//! An app's push credentials (`push` in its app record, set through app management): the
//! operator's webhook, APNs token authentication (a `.p8` key), an FCM service account and WNS
//! client credentials. `check` refuses what could never authenticate — keys that do not parse,
//! urls that are not http(s), missing members — when they are set, not when a push is sent.

use jsonwebtoken::EncodingKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The providers an app pushes through; each optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PushSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apns: Option<ApnsSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fcm: Option<FcmSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wns: Option<WnsSettings>,
}

impl crate::apps::AppSettings for PushSettings {
    fn stored(app: &crate::apps::AppRecord) -> Option<&crate::apps::FeatureSettings> {
        app.push.as_ref()
    }
}

/// The operator's endpoint that receives each batch of messages as JSON, signed with `secret`
/// (HMAC-SHA256 of the body) when one is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookSettings {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// APNs token-based authentication: the `.p8` key (PEM) with its key id, the team id, the
/// app's bundle id (the topic), and which APNs (sandbox unless `production`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApnsSettings {
    pub key_id: String,
    pub team_id: String,
    pub bundle_id: String,
    pub key: String,
    #[serde(default)]
    pub production: bool,
}

/// FCM HTTP v1: the Firebase project's service-account key file, as downloaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FcmSettings {
    pub service_account: Value,
}

/// WNS: the app's package security identifier and client secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WnsSettings {
    pub client_id: String,
    pub client_secret: String,
}

/// An http(s) url of at most 2,048 characters.
fn http_url(url: &str) -> bool {
    url.len() <= 2048
        && ["http://", "https://"]
            .iter()
            .any(|s| url.strip_prefix(s).is_some_and(|rest| !rest.is_empty()))
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// 1 to `max` characters.
fn short(s: &str, max: usize) -> bool {
    !s.trim().is_empty() && s.len() <= max
}

impl PushSettings {
    /// Parses and checks the `push` member of an app-management body.
    pub fn parse(v: &Value) -> Result<PushSettings, String> {
        let settings: PushSettings = serde_json::from_value(v.clone()).map_err(|e| {
            format!("push: {e} (members: webhook {{url, secret?}}, apns {{keyId, teamId, bundleId, key, production?}}, fcm {{serviceAccount}}, wns {{clientId, clientSecret}}).")
        })?;
        settings.check()?;
        Ok(settings)
    }

    /// What would keep a provider from ever authenticating.
    pub fn check(&self) -> Result<(), String> {
        if let Some(w) = &self.webhook {
            if !http_url(&w.url) {
                return Err("push.webhook.url must be an http(s) url.".into());
            }
            if w.secret.as_deref().is_some_and(|s| !short(s, 256)) {
                return Err("push.webhook.secret holds 1 to 256 characters.".into());
            }
        }
        if let Some(a) = &self.apns {
            if !(short(&a.key_id, 64) && short(&a.team_id, 64) && short(&a.bundle_id, 256)) {
                return Err("push.apns: keyId, teamId and bundleId are required.".into());
            }
            if a.key.len() > 16_384 || EncodingKey::from_ec_pem(a.key.as_bytes()).is_err() {
                return Err(
                    "push.apns.key must be the .p8 key's text (an EC P-256 private key in PEM)."
                        .into(),
                );
            }
        }
        if let Some(f) = &self.fcm {
            let member = |name: &str| f.service_account.get(name).and_then(Value::as_str);
            for name in ["project_id", "client_email", "private_key", "token_uri"] {
                if !member(name).is_some_and(|v| short(v, 16_384)) {
                    return Err(format!(
                        "push.fcm.serviceAccount must be the service account's key file: {name} is missing."
                    ));
                }
            }
            if !member("token_uri").is_some_and(http_url) {
                return Err("push.fcm.serviceAccount.token_uri must be an http(s) url.".into());
            }
            let key = member("private_key").unwrap_or_default();
            if EncodingKey::from_rsa_pem(key.as_bytes()).is_err() {
                return Err(
                    "push.fcm.serviceAccount.private_key is not an RSA private key in PEM.".into(),
                );
            }
        }
        if let Some(w) = &self.wns {
            if !(short(&w.client_id, 512) && short(&w.client_secret, 512)) {
                return Err("push.wns: clientId and clientSecret are required.".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Throwaway keys made for the tests (node/tests/fixtures).
    const EC_KEY: &str = include_str!("../../tests/fixtures/apns-test-key.p8");
    const RSA_KEY: &str = include_str!("../../tests/fixtures/fcm-test-key.pem");

    #[test]
    fn each_provider_is_checked_when_set() {
        assert!(PushSettings::parse(&json!({})).is_ok());
        let all = json!({
            "webhook": {"url": "https://ops.example/push", "secret": "s3cret"},
            "apns": {"keyId": "ABC123DEFG", "teamId": "DEF123GHIJ", "bundleId": "com.example.app", "key": EC_KEY},
            "fcm": {"serviceAccount": {"type": "service_account", "project_id": "p", "client_email": "a@p.iam.gserviceaccount.com", "private_key": RSA_KEY, "token_uri": "https://oauth2.googleapis.com/token"}},
            "wns": {"clientId": "ms-app://s-1-15", "clientSecret": "x"}
        });
        let parsed = PushSettings::parse(&all).unwrap();
        assert_eq!(
            serde_json::to_value(&parsed).unwrap()["apns"]["production"],
            false
        );
        let mut wrong_key = all.clone();
        wrong_key["fcm"]["serviceAccount"]["private_key"] = json!(EC_KEY);
        assert!(PushSettings::parse(&wrong_key).is_err());
        for bad in [
            json!({"webhook": {"url": "ops.example"}}),
            json!({"webhook": {"url": "https://x", "secret": ""}}),
            json!({"webhook": {"url": "https://x", "extra": 1}}),
            json!({"gcm": {}}),
            json!({"apns": {"keyId": "K", "teamId": "T", "bundleId": "b", "key": "not a key"}}),
            json!({"apns": {"keyId": "", "teamId": "T", "bundleId": "b", "key": EC_KEY}}),
            json!({"fcm": {"serviceAccount": {"project_id": "p"}}}),
            json!({"wns": {"clientId": "c"}}),
            json!("webhook"),
        ] {
            assert!(PushSettings::parse(&bad).is_err(), "{bad}");
        }
    }
}
