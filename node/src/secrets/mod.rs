//! Secrets at rest (decisions/0032): app keys and platform and push credentials are sealed
//! (XChaCha20-Poly1305, from the RustCrypto `chacha20poly1305` crate) before they enter the
//! Raft log, under a key kept outside the replicated state (`--secrets-key-file`, 32 random
//! bytes in hex, mode 0600): a snapshot, a backup or a copy of the metadata group's records
//! gives no working key. Each sealed value is bound to its app and field (the AEAD's associated
//! data), so one cannot be moved to another app or field. The key is installed once per
//! process ([`install`]); `apps` seals what it writes and opens what it reads, and indexes the
//! app by a keyed digest of its secret key instead of the key. Values written before sealing
//! existed are read as they are, and `apps::seal_stored_apps` rewrites them
//! once sealing starts.

pub mod node_key;

use std::path::Path;
use std::sync::OnceLock;

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::XChaCha20Poly1305;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// How a sealed value starts (then the base64url of nonce and ciphertext).
const SEALED: &str = "$sealed:v1:";
const NONCE_LEN: usize = 24;
/// What the cluster's key check record is the digest of.
const CHECK_LABEL: &[u8] = b"basalt secrets key check v1";

/// Why a secret could not be sealed, opened, or its key read.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("{path}: {message}")]
    KeyFile { path: String, message: String },
    #[error("a sealed value does not open with this node's secrets key ({0})")]
    WontOpen(String),
    #[error("sealing failed")]
    Seal,
}

/// The key secrets are sealed under.
pub struct SecretsKey {
    bytes: [u8; 32],
}

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretsKey(..)")
    }
}

fn key_error(path: &Path, message: impl std::fmt::Display) -> SecretsError {
    SecretsError::KeyFile {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

impl SecretsKey {
    /// A new random key.
    pub fn generate() -> SecretsKey {
        SecretsKey {
            bytes: rand::random(),
        }
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<SecretsKey> {
        Some(SecretsKey {
            bytes: bytes.try_into().ok()?,
        })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Reads a key file: 64 hexadecimal characters (surrounding whitespace ignored).
    pub fn read(path: &Path) -> Result<SecretsKey, SecretsError> {
        let text = std::fs::read_to_string(path).map_err(|e| key_error(path, e))?;
        let text = text.trim();
        let bytes: Vec<u8> = (0..text.len())
            .step_by(2)
            .map(|i| {
                text.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect::<Option<_>>()
            .ok_or_else(|| key_error(path, "not 64 hexadecimal characters"))?;
        SecretsKey::from_bytes(&bytes)
            .ok_or_else(|| key_error(path, "not 64 hexadecimal characters"))
    }

    /// Writes the key file (mode 0600); refuses to replace one.
    pub fn write(&self, path: &Path) -> Result<(), SecretsError> {
        let hex: String = self.bytes.iter().map(|b| format!("{b:02x}")).collect();
        basalt_cluster::tls::issue::write_private(path, format!("{hex}\n").as_bytes(), false)
            .map_err(|e| key_error(path, e))
    }

    /// The digest the cluster keeps to recognise its key (`check` of the `secrets` record):
    /// a node with another key refuses to start rather than write what others cannot open.
    pub fn check(&self) -> String {
        hex(&self.mac(CHECK_LABEL))
    }

    fn mac(&self, data: &[u8]) -> Vec<u8> {
        let mut mac = match <Hmac<Sha256> as Mac>::new_from_slice(&self.bytes) {
            Ok(m) => m,
            // A 32-byte key always fits HMAC; unreachable.
            Err(_) => return Vec::new(),
        };
        mac.update(data);
        mac.finalize().into_bytes().to_vec()
    }

    /// A keyed digest of `value` under `label`: what an index keeps instead of a secret.
    pub fn digest(&self, label: &str, value: &str) -> String {
        hex(&self.mac(format!("{label}\0{value}").as_bytes()))
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.bytes.into())
    }

    /// `plain` sealed for `place` (the app and field it belongs to).
    pub fn seal(&self, place: &str, plain: &str) -> Result<String, SecretsError> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher()
            .encrypt(
                &nonce,
                Payload {
                    msg: plain.as_bytes(),
                    aad: place.as_bytes(),
                },
            )
            .map_err(|_| SecretsError::Seal)?;
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        Ok(format!(
            "{SEALED}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
        ))
    }

    /// The plain text of a value sealed for `place`; a value that is not sealed is its own.
    pub fn open(&self, place: &str, value: &str) -> Result<String, SecretsError> {
        let Some(body) = value.strip_prefix(SEALED) else {
            return Ok(value.to_string());
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| SecretsError::WontOpen(place.to_string()))?;
        if bytes.len() < NONCE_LEN {
            return Err(SecretsError::WontOpen(place.to_string()));
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let plain = self
            .cipher()
            .decrypt(
                nonce.into(),
                Payload {
                    msg: sealed,
                    aad: place.as_bytes(),
                },
            )
            .map_err(|_| SecretsError::WontOpen(place.to_string()))?;
        String::from_utf8(plain).map_err(|_| SecretsError::WontOpen(place.to_string()))
    }
}

/// Whether a stored value is sealed.
pub fn is_sealed(value: &Value) -> bool {
    value.as_str().is_some_and(|s| s.starts_with(SEALED))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

static KEY: OnceLock<SecretsKey> = OnceLock::new();
static SEALING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static SEALING_STARTED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// The feature a member record names when its build opens sealed values: values are sealed
/// only once every active member's does (an older node would take a sealed key for the key).
pub const SEALING_FEATURE: &str = "sealed-secrets";

/// Makes `key` the process's secrets key (once; later calls keep the first).
pub fn install(key: SecretsKey) {
    let _ = KEY.set(key);
    SEALING_STARTED.notify_waiters();
}

/// The process's secrets key, once installed (a node installs it before serving): what
/// opens sealed values.
pub fn key() -> Option<&'static SecretsKey> {
    KEY.get()
}

/// Seals what is written from now on (every member can open it).
pub fn start_sealing() {
    SEALING.store(true, std::sync::atomic::Ordering::Relaxed);
    SEALING_STARTED.notify_waiters();
}

/// Returns once values are sealed (`start_sealing`): what rewrites stored secrets waits for.
pub async fn sealing_started() {
    loop {
        let started = SEALING_STARTED.notified();
        if sealing_key().is_some() {
            return;
        }
        started.await;
    }
}

/// The key new values are sealed under: the process's, once every member can open them.
pub fn sealing_key() -> Option<&'static SecretsKey> {
    match SEALING.load(std::sync::atomic::Ordering::Relaxed) {
        true => KEY.get(),
        false => None,
    }
}

/// The paths of an app record's secret members: top-level names, or `a.*.b` for member `b`
/// of every entry of object `a`, or `a.b.c`.
pub const APP_SECRET_PATHS: &[&str] = &[
    "restKey",
    "masterKey",
    "accessKey",
    "secretKey",
    "safeToken",
    "authProviders.*.appSecret",
    "push.webhook.secret",
    "push.apns.key",
    "push.fcm.serviceAccount",
    "push.wns.clientSecret",
];

/// Applies `f` to every secret member of an app record (`record` may also be a set of
/// members about to be merged into one), with the member's place (`<app>/<path>`).
pub fn each_secret(
    app: &str,
    record: &mut Value,
    f: &mut dyn FnMut(&str, &mut Value) -> Result<(), SecretsError>,
) -> Result<(), SecretsError> {
    for path in APP_SECRET_PATHS {
        let parts: Vec<&str> = path.split('.').collect();
        visit(record, &parts, String::new(), &mut |at, v| {
            f(&format!("{app}/{at}"), v)
        })?;
    }
    Ok(())
}

fn visit(
    v: &mut Value,
    parts: &[&str],
    at: String,
    f: &mut dyn FnMut(&str, &mut Value) -> Result<(), SecretsError>,
) -> Result<(), SecretsError> {
    let Some((first, rest)) = parts.split_first() else {
        return match v.is_null() {
            true => Ok(()),
            false => f(&at, v),
        };
    };
    let Some(obj) = v.as_object_mut() else {
        return Ok(());
    };
    let join = |name: &str| match at.is_empty() {
        true => name.to_string(),
        false => format!("{at}.{name}"),
    };
    if *first == "*" {
        for (name, child) in obj.iter_mut() {
            visit(child, rest, join(name), f)?;
        }
        return Ok(());
    }
    match obj.get_mut(*first) {
        Some(child) => visit(child, rest, join(first), f),
        None => Ok(()),
    }
}

/// Seals every secret member of `record` (app `app`) not sealed yet. A member that is not a
/// string (a service account's JSON) is sealed as its JSON text.
pub fn seal_app(key: &SecretsKey, app: &str, record: &mut Value) -> Result<(), SecretsError> {
    each_secret(app, record, &mut |place, v| {
        if is_sealed(v) {
            return Ok(());
        }
        let plain = match &*v {
            Value::String(s) => s.clone(),
            other => format!("\u{1}{other}"),
        };
        *v = Value::String(key.seal(place, &plain)?);
        Ok(())
    })
}

/// Opens every sealed member of `record` (app `app`).
pub fn open_app(key: &SecretsKey, app: &str, record: &mut Value) -> Result<(), SecretsError> {
    each_secret(app, record, &mut |place, v| {
        let Some(text) = v.as_str().filter(|_| is_sealed(v)) else {
            return Ok(());
        };
        let plain = key.open(place, text)?;
        *v = match plain.strip_prefix('\u{1}') {
            Some(json) => {
                serde_json::from_str(json).map_err(|_| SecretsError::WontOpen(place.to_string()))?
            }
            None => Value::String(plain),
        };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sealed_members_open_only_in_their_place() {
        let key = SecretsKey::generate();
        let mut app = json!({
            "applicationId": "a1",
            "appName": "demo",
            "masterKey": "mk",
            "restKey": "rk",
            "authProviders": {"weapp": {"appId": "wx1", "appSecret": "s3"}},
            "push": {"fcm": {"serviceAccount": {"private_key": "pk"}}, "webhook": {"url": "http://x"}},
        });
        let plain = app.clone();
        seal_app(&key, "a1", &mut app).expect("seal");
        let text = app.to_string();
        // Quoted: a sealed text is random base64, so a bare `s3` turns up in it by chance.
        for secret in ["\"mk\"", "\"rk\"", "\"s3\"", "\"pk\""] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(app["appName"], "demo");
        assert_eq!(app["authProviders"]["weapp"]["appId"], "wx1");
        // Sealing again changes nothing; opening gives the record back.
        let once = app.clone();
        seal_app(&key, "a1", &mut app).expect("seal again");
        assert_eq!(app, once);
        let mut opened = app.clone();
        open_app(&key, "a1", &mut opened).expect("open");
        assert_eq!(opened, plain);
        // Another app's place, another key, or a changed byte: nothing opens.
        assert!(open_app(&key, "a2", &mut app.clone()).is_err());
        assert!(open_app(&SecretsKey::generate(), "a1", &mut app.clone()).is_err());
        let mut moved = app.clone();
        moved["restKey"] = app["masterKey"].clone();
        assert!(open_app(&key, "a1", &mut moved).is_err());
    }

    #[test]
    fn key_files_round_trip_and_refuse_garbage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("secrets.key");
        let key = SecretsKey::generate();
        key.write(&path).expect("write");
        assert!(key.write(&path).is_err(), "never replaced");
        assert_eq!(SecretsKey::read(&path).expect("read").bytes(), key.bytes());
        assert_eq!(SecretsKey::read(&path).expect("read").check(), key.check());
        std::fs::write(dir.path().join("bad"), "xyz").expect("write bad");
        assert!(SecretsKey::read(&dir.path().join("bad")).is_err());
    }
}
