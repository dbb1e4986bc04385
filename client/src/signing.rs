//! Encrypted mode (spec 5.2): the signature headers a client sends instead of the REST key.
//!
//! Two formulas exist in the wild and the server accepts both: the spec's
//! `md5(path + timestamp + safeToken + nonce)` with a millisecond timestamp, and the JS SDK's
//! `md5(path + timestamp + safeToken + nonce + body + sdkVersion)` with a second timestamp and
//! SDK version `10`.

use std::time::{SystemTime, UNIX_EPOCH};

use md5::{Digest, Md5};
use rand::distr::{Alphanumeric, SampleString};

/// Which signature formula to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Formula {
    /// The spec's: millisecond timestamp, no body.
    Spec,
    /// The JS SDK's: second timestamp, raw body and SDK version `10` appended.
    JsSdk,
}

/// What a client needs for encrypted mode: the app's secret key and its safe token (which is
/// never sent).
#[derive(Debug, Clone)]
pub struct SignedKeys {
    pub secret_key: String,
    pub safe_token: String,
    pub formula: Formula,
    /// Sent as `X-<Brand>-SDK-Type`.
    pub sdk_type: String,
}

impl SignedKeys {
    pub fn new(secret_key: &str, safe_token: &str, formula: Formula) -> Self {
        SignedKeys {
            secret_key: secret_key.to_string(),
            safe_token: safe_token.to_string(),
            formula,
            sdk_type: match formula {
                Formula::Spec => "API".into(),
                Formula::JsSdk => "wechatApp".into(),
            },
        }
    }
}

/// The SDK version the JS SDK sends (and signs).
pub const JS_SDK_VERSION: &str = "10";

/// A fresh 16-character nonce.
pub fn new_nonce() -> String {
    Alphanumeric.sample_string(&mut rand::rng(), 16)
}

/// The current time as the formula sends it (seconds or milliseconds).
pub fn timestamp_now(formula: Formula) -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    match formula {
        Formula::Spec => d.as_millis().to_string(),
        Formula::JsSdk => d.as_secs().to_string(),
    }
}

/// The headers (names without the `X-<Brand>-` prefix) of a signed request for `path` (no
/// query string) with the exact `body` bytes sent.
pub fn sign(
    keys: &SignedKeys,
    path: &str,
    body: &[u8],
    timestamp: &str,
    nonce: &str,
) -> Vec<(&'static str, String)> {
    let mut h = Md5::new();
    h.update(path.as_bytes());
    h.update(timestamp.as_bytes());
    h.update(keys.safe_token.as_bytes());
    h.update(nonce.as_bytes());
    let mut headers = vec![
        ("SDK-Type", keys.sdk_type.clone()),
        ("Safe-Timestamp", timestamp.to_string()),
        ("Noncestr-Key", nonce.to_string()),
        ("Secret-Key", keys.secret_key.clone()),
    ];
    if keys.formula == Formula::JsSdk {
        h.update(body);
        h.update(JS_SDK_VERSION.as_bytes());
        headers.push(("SDK-Version", JS_SDK_VERSION.to_string()));
    }
    headers.push(("Safe-Sign", format!("{:x}", h.finalize())));
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_follow_their_formulas() {
        let spec = SignedKeys::new("s", "tok123", Formula::Spec);
        let h = sign(&spec, "/1/classes/A", b"{}", "1700000000000", "n");
        let sign_of =
            |h: &[(&str, String)]| h.iter().find(|(k, _)| *k == "Safe-Sign").unwrap().1.clone();
        let mut want = Md5::new();
        want.update(b"/1/classes/A1700000000000tok123n");
        assert_eq!(sign_of(&h), format!("{:x}", want.finalize()));
        let js = SignedKeys::new("s", "tok123", Formula::JsSdk);
        let h = sign(&js, "/1/classes/A", b"{}", "1700000000", "n");
        let mut want = Md5::new();
        want.update(b"/1/classes/A1700000000tok123n{}10");
        assert_eq!(sign_of(&h), format!("{:x}", want.finalize()));
        assert_eq!(new_nonce().len(), 16);
    }
}
