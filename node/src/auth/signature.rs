//! Encrypted mode's request signature (spec 5.2, decisions "Headers and authentication").
//!
//! A signed request carries a timestamp (unix seconds or milliseconds), a nonce and
//! `md5(path + timestamp + safeToken + nonce)` — or, as the JS SDK signs,
//! `md5(path + timestamp + safeToken + nonce + rawBody + sdkVersion)`. Both are accepted. A
//! file upload's body is checked as it streams past (`PendingSignature`, `BodyDigests`). The
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
#[derive(Clone, Copy)]
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

    /// Whether `sign` matches a file upload's formulas that leave its bytes out: either
    /// formula without a body, or the long one over `{}` (what the JS SDK signs for a
    /// browser's File or Blob). Otherwise the upload checks its body as it streams
    /// (`PendingSignature`).
    pub fn verify_upload(&self, sign: &str) -> bool {
        let blob = Signed {
            body: b"{}",
            ..*self
        };
        self.verify(sign)
            || super::secret::same_secret(&blob.long_sign(), &sign.to_ascii_lowercase())
    }
}

/// An upload signed over its body, as the JS SDK signs one from Node: the body streams to its
/// holders rather than being read first, so the signature is checked once the last byte went
/// past (`BodyDigests`), before the file is recorded.
#[derive(Debug, Clone)]
pub struct PendingSignature {
    /// path + timestamp + safe token + nonce.
    head: Vec<u8>,
    sdk_version: String,
    /// The signature sent, lowercase.
    sign: String,
}

impl PendingSignature {
    /// The check of `signed`'s body against `sign`.
    pub fn new(signed: &Signed<'_>, sign: &str) -> PendingSignature {
        let head = [
            signed.path.as_bytes(),
            signed.timestamp.as_bytes(),
            signed.safe_token.as_bytes(),
            signed.nonce.as_bytes(),
        ]
        .concat();
        PendingSignature {
            head,
            sdk_version: signed.sdk_version.to_string(),
            sign: sign.to_ascii_lowercase(),
        }
    }

    /// The digests to feed the body to.
    pub fn digests(&self) -> BodyDigests {
        let start = |rendering_start: &[u8]| {
            let mut h = Md5::new();
            h.update(&self.head);
            h.update(rendering_start);
            h
        };
        BodyDigests {
            raw: start(b""),
            buffer: start(br#"{"type":"Buffer","data":["#),
            text: start(b"\""),
            bytes: 0,
            scratch: Vec::new(),
            pending: self.clone(),
        }
    }
}

/// A body's renderings that a signature may cover, digested as the body streams: its raw
/// bytes (`rawBody` of the long formula), `JSON.stringify` of a Node `Buffer` of them
/// (`{"type":"Buffer","data":[104,105]}`, what the JS SDK signs when a file's data is a
/// Buffer) and of a string of them (`"hi\n"` escaped, when the data is a string).
pub struct BodyDigests {
    raw: Md5,
    buffer: Md5,
    text: Md5,
    /// Bytes fed so far.
    bytes: u64,
    /// The renderings of the piece being fed.
    scratch: Vec<u8>,
    pending: PendingSignature,
}

impl BodyDigests {
    /// Feeds the next bytes of the body.
    pub fn update(&mut self, piece: &[u8]) {
        self.raw.update(piece);
        // A Buffer's bytes as decimal numbers, comma-separated.
        let out = &mut self.scratch;
        out.clear();
        for (i, &b) in piece.iter().enumerate() {
            if self.bytes > 0 || i > 0 {
                out.push(b',');
            }
            if b >= 100 {
                out.push(b'0' + b / 100);
            }
            if b >= 10 {
                out.push(b'0' + b / 10 % 10);
            }
            out.push(b'0' + b % 10);
        }
        self.buffer.update(&*out);
        // A string's characters, escaped as JSON.stringify escapes them: bytes of multi-byte
        // UTF-8 characters are all 0x80 or above and pass unchanged.
        out.clear();
        for &b in piece {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x09 => out.extend_from_slice(b"\\t"),
                0x0a => out.extend_from_slice(b"\\n"),
                0x0c => out.extend_from_slice(b"\\f"),
                0x0d => out.extend_from_slice(b"\\r"),
                0x00..=0x1f => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xf)]);
                }
                _ => out.push(b),
            }
        }
        self.text.update(&*out);
        self.bytes += piece.len() as u64;
    }

    /// Whether the signature covers the body fed, in any of its renderings.
    pub fn verify(&self) -> bool {
        let version = self.pending.sdk_version.as_bytes();
        let end = |h: &Md5, tail: &[u8]| {
            let mut h = h.clone();
            h.update(tail);
            h.update(version);
            format!("{:x}", h.finalize())
        };
        [
            end(&self.raw, b""),
            end(&self.buffer, b"]}"),
            end(&self.text, b"\""),
        ]
        .iter()
        .any(|want| super::secret::same_secret(want, &self.pending.sign))
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
    /// An upload's body fed in pieces of any size verifies against a signature over its raw
    /// bytes, over `JSON.stringify` of a Node Buffer of them, or of a string of them, and
    /// nothing else.
    #[test]
    fn an_upload_body_verifies_in_each_rendering_the_js_sdk_signs() {
        let signed = Signed {
            path: "/2/files/a.txt",
            timestamp: "1700000000",
            safe_token: "tok",
            nonce: "n1",
            body: b"",
            sdk_version: "10",
        };
        let head = "/2/files/a.txt1700000000tokn1";
        let text = "he said \"hi\" \\ \n\t\r\x08\x0c\x01\x1f \u{7f} 你好";
        let binary: Vec<u8> = (0..=255u8).rev().collect();
        for body in [text.as_bytes(), &binary] {
            let numbers: Vec<String> = body.iter().map(u8::to_string).collect();
            let buffer = format!(r#"{{"type":"Buffer","data":[{}]}}"#, numbers.join(","));
            let mut signs = vec![
                md5_hex(&[head.as_bytes(), body, b"10"]),
                md5_hex(&[head.as_bytes(), buffer.as_bytes(), b"10"]),
            ];
            if let Ok(s) = std::str::from_utf8(body) {
                // serde_json escapes a string exactly as JSON.stringify does.
                let json = serde_json::to_string(s).unwrap();
                assert!(
                    json.contains(r#"\u0001"#) && json.contains(r#"\b"#),
                    "{json}"
                );
                signs.push(md5_hex(&[head.as_bytes(), json.as_bytes(), b"10"]));
            }
            for sign in &signs {
                for piece in [1, 7, body.len()] {
                    let pending = PendingSignature::new(&signed, &sign.to_ascii_uppercase());
                    let mut digests = pending.digests();
                    body.chunks(piece).for_each(|p| digests.update(p));
                    assert!(digests.verify(), "{piece}-byte pieces, {sign}");
                }
            }
            let mut digests = PendingSignature::new(&signed, &signs[0]).digests();
            digests.update(&body[1..]);
            assert!(!digests.verify(), "another body");
            let wrong = md5_hex(&[head.as_bytes(), body]);
            let mut digests = PendingSignature::new(&signed, &wrong).digests();
            digests.update(body);
            assert!(!digests.verify(), "no version");
        }
    }
}
