//! Encrypted mode's request signature (spec 5.2, decisions "Headers and authentication").
//!
//! A signed request carries a timestamp (unix seconds or milliseconds), a nonce and
//! `md5(path + timestamp + safeToken + nonce)` — or, as the JS SDK signs,
//! `md5(path + timestamp + safeToken + nonce + rawBody + sdkVersion)`. Both are accepted. The
//! nonce's replay check needs the cluster and lives in `auth::authenticate`.

use md5::{Digest, Md5};

/// How far a request's timestamp may be from the server's clock.
pub const FRESHNESS_MS: i64 = 10_000;

/// Longest nonce accepted (the SDKs send 16 characters).
pub const MAX_NONCE_LEN: usize = 64;

/// SDK types the service accepts in `X-<Brand>-SDK-Type`.
pub const SDK_TYPES: [&str; 5] = ["API", "nodejs", "wechatApp", "toutiao", "qqApp"];

/// Lowercase hex MD5 of the concatenated parts.
pub fn md5_hex(parts: &[&[u8]]) -> String {
    let mut h = Md5::new();
    for p in parts {
        h.update(p);
    }
    format!("{:x}", h.finalize())
}

/// A request's timestamp header in milliseconds: 10 digits are seconds, 13 milliseconds.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = s.parse().ok()?;
    match s.len() {
        0..=11 => n.checked_mul(1000),
        _ => Some(n),
    }
}

/// True when `ts_ms` lies within the freshness window around `now_ms`.
pub fn is_fresh(ts_ms: i64, now_ms: i64) -> bool {
    (now_ms - ts_ms).abs() <= FRESHNESS_MS
}

/// What a signature covers.
pub struct Signed<'a> {
    pub path: &'a str,
    pub timestamp: &'a str,
    pub safe_token: &'a str,
    pub nonce: &'a str,
    /// The exact request bytes for POST/PUT; empty for GET/DELETE (and for file uploads).
    pub body: &'a [u8],
    pub sdk_version: &'a str,
}

impl Signed<'_> {
    /// The spec's formula: path + timestamp + safe token + nonce.
    pub fn short_sign(&self) -> String {
        md5_hex(&[
            self.path.as_bytes(),
            self.timestamp.as_bytes(),
            self.safe_token.as_bytes(),
            self.nonce.as_bytes(),
        ])
    }

    /// The JS SDK's formula: the short one followed by the raw body and the SDK version.
    pub fn long_sign(&self) -> String {
        md5_hex(&[
            self.path.as_bytes(),
            self.timestamp.as_bytes(),
            self.safe_token.as_bytes(),
            self.nonce.as_bytes(),
            self.body,
            self.sdk_version.as_bytes(),
        ])
    }

    /// Whether `sign` (hex, any case) matches either formula.
    pub fn verify(&self, sign: &str) -> bool {
        let sign = sign.to_ascii_lowercase();
        [self.short_sign(), self.long_sign()]
            .iter()
            .any(|want| super::secret::same_secret(want, &sign))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_matches_the_reference_value() {
        // RFC 1321 test vector.
        assert_eq!(md5_hex(&[b"abc"]), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(md5_hex(&[b"a", b"bc"]), "900150983cd24fb0d6963f7d28e17f72");
    }

    #[test]
    fn timestamps_in_seconds_or_milliseconds() {
        assert_eq!(parse_timestamp("1700000000"), Some(1_700_000_000_000));
        assert_eq!(parse_timestamp("1700000000123"), Some(1_700_000_000_123));
        assert_eq!(parse_timestamp("-5"), None);
        assert_eq!(parse_timestamp("12a"), None);
        assert_eq!(parse_timestamp(""), None);
        assert_eq!(parse_timestamp("99999999999999999999999"), None);
        assert!(is_fresh(1_000_000, 1_009_999));
        assert!(!is_fresh(1_000_000, 1_010_001));
        assert!(!is_fresh(1_020_000, 1_000_000));
    }

    #[test]
    fn both_formulas_verify() {
        let s = Signed {
            path: "/1/classes/Game",
            timestamp: "1700000000",
            safe_token: "abc123",
            nonce: "0123456789abcdef",
            body: br#"{"a":1}"#,
            sdk_version: "10",
        };
        let short = md5_hex(&[b"/1/classes/Game1700000000abc1230123456789abcdef"]);
        let long = md5_hex(&[b"/1/classes/Game1700000000abc1230123456789abcdef{\"a\":1}10"]);
        assert!(s.verify(&short));
        assert!(s.verify(&long.to_ascii_uppercase()));
        assert!(!s.verify(&md5_hex(&[b"something else"])));
    }
}
