//! Verifying `authData` with the platform that issued it: knowing a user's openid must not be
//! enough to log in as them. Each platform has its own check, against its own service:
//! - `weixin` (app login): `GET /sns/auth?access_token&openid` answers `errcode` 0.
//! - `qq`: `GET /oauth2.0/me?access_token&fmt=json` names the openid (and, when the app set an
//!   `appId`, its `client_id`).
//! - `weibo`: `POST /oauth2/get_token_info` (form `access_token`) names the `uid` (and the
//!   `appkey`).
//! - `weapp`, `qqapp` (mini-programs): the `code` of `wx.login()` / `qq.login()` is exchanged
//!   with the app's `appId` and `appSecret` at `GET /sns/jscode2session`, which names the openid.
//! - `toutiao`: the same exchange at `POST /api/apps/v2/jscode2session` (`data.openid`).
//! - `apple`: the identity `token` is a JWT signed with one of Apple's keys (`GET /auth/keys`),
//!   issued by `https://appleid.apple.com` for `aud` = the app's `appId`, `sub` = the uid.
//! - `anonymous` is never asked anywhere: its id is a secret the device made up.
//!
//! Unless the app sets `allowUnverifiedAuthData`, an account that fails its check is refused
//! before anything is read or written. Base URLs are the platforms' own, replaceable per node
//! (`--auth-endpoint`, for a proxy or a test's fake). Caller: `api::users`. Neighbours:
//! `apps::AuthProvider` (an app's credentials), `third_party` (parsing `authData`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use basalt_cluster::error::clip;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use super::Link;
use crate::apps::{AppRecord, AuthProvider};

/// Platforms whose accounts can be verified (all but `anonymous`).
pub const VERIFIED_PLATFORMS: [&str; 7] = [
    "weibo", "apple", "qq", "weixin", "weapp", "qqapp", "toutiao",
];

/// The `iss` of Apple's identity tokens.
const APPLE_ISSUER: &str = "https://appleid.apple.com";
/// Largest answer read from a platform.
const MAX_ANSWER_BYTES: usize = 256 << 10;
/// How long Apple's key set is used before it is fetched again.
const APPLE_KEYS_TTL: Duration = Duration::from_secs(3600);
/// A token signed with an unknown key fetches the key set again at most this often.
const APPLE_KEYS_REFETCH: Duration = Duration::from_secs(60);

/// The platform's own service.
fn default_endpoint(platform: &str) -> &'static str {
    match platform {
        "weixin" | "weapp" => "https://api.weixin.qq.com",
        "qq" => "https://graph.qq.com",
        "qqapp" => "https://api.q.qq.com",
        "weibo" => "https://api.weibo.com",
        "toutiao" => "https://developer.toutiao.com",
        "apple" => "https://appleid.apple.com",
        _ => "",
    }
}

/// Why an account was not verified.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The app lacks the credentials this platform's check needs.
    #[error("{platform} accounts cannot be verified for this app: {missing}.")]
    NotConfigured {
        platform: &'static str,
        missing: String,
    },
    /// The platform refused the credentials, or they name another account.
    #[error("the {platform} account could not be verified: {reason}")]
    Rejected {
        platform: &'static str,
        reason: String,
    },
    /// The platform did not answer usably (the cause is for the log).
    #[error("{platform} did not answer: {cause}")]
    Unreachable {
        platform: &'static str,
        cause: String,
    },
}

impl VerifyError {
    fn label(&self) -> &'static str {
        match self {
            VerifyError::NotConfigured { .. } => "not_configured",
            VerifyError::Rejected { .. } => "rejected",
            VerifyError::Unreachable { .. } => "unreachable",
        }
    }
}

fn rejected(platform: &'static str, reason: impl Into<String>) -> VerifyError {
    VerifyError::Rejected {
        platform,
        reason: reason.into(),
    }
}

/// Apple's public keys as last fetched.
#[derive(Default)]
struct AppleKeys {
    keys: Vec<Value>,
    fetched: Option<Instant>,
}

/// The claims of an Apple identity token Basalt reads (`iss`, `aud` and `exp` are checked by
/// the validation).
#[derive(Deserialize)]
struct AppleClaims {
    sub: String,
}

/// This node's client of the platforms.
pub struct IdentityProviders {
    http: reqwest::Client,
    endpoints: HashMap<&'static str, String>,
    apple_keys: Mutex<AppleKeys>,
}

impl IdentityProviders {
    /// `overrides` are the `PLATFORM=URL` values of `--auth-endpoint`.
    pub fn new(overrides: &[String]) -> anyhow::Result<Self> {
        let mut endpoints: HashMap<&'static str, String> = VERIFIED_PLATFORMS
            .iter()
            .map(|p| (*p, default_endpoint(p).to_string()))
            .collect();
        for o in overrides {
            let (name, url) = o
                .split_once('=')
                .ok_or_else(|| anyhow!("--auth-endpoint takes PLATFORM=URL, not {o:?}"))?;
            let platform = VERIFIED_PLATFORMS
                .iter()
                .find(|p| **p == name)
                .ok_or_else(|| {
                    anyhow!(
                        "--auth-endpoint: unknown platform {name:?} (one of {})",
                        VERIFIED_PLATFORMS.join(", ")
                    )
                })?;
            if !url.starts_with("http://") && !url.starts_with("https://") {
                bail!("--auth-endpoint {name}: {url:?} is not an http:// or https:// URL");
            }
            endpoints.insert(platform, url.trim_end_matches('/').to_string());
        }
        Ok(IdentityProviders {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .connect_timeout(Duration::from_secs(5))
                .build()?,
            endpoints,
            apple_keys: Mutex::new(AppleKeys::default()),
        })
    }

    /// Verifies every account `links` links for `app` (unlinking needs no check).
    pub async fn verify(&self, app: &AppRecord, links: &[Link]) -> Result<(), VerifyError> {
        for link in links {
            let Link::Set { platform, id, data } = link else {
                continue;
            };
            if *platform == "anonymous" || app.allow_unverified_auth_data {
                metrics::counter!("basalt_auth_data_checks_total",
                    "platform" => *platform, "outcome" => "unverified")
                .increment(1);
                continue;
            }
            let outcome = self.verify_one(app, platform, id, data).await;
            let label = outcome
                .as_ref()
                .map_or_else(VerifyError::label, |_| "verified");
            metrics::counter!("basalt_auth_data_checks_total",
                "platform" => *platform, "outcome" => label)
            .increment(1);
            outcome?;
        }
        Ok(())
    }

    async fn verify_one(
        &self,
        app: &AppRecord,
        platform: &'static str,
        id: &str,
        data: &Value,
    ) -> Result<(), VerifyError> {
        let creds = app
            .auth_providers
            .get(platform)
            .cloned()
            .unwrap_or_default();
        let base = self
            .endpoints
            .get(platform)
            .map(String::as_str)
            .unwrap_or_default();
        match platform {
            "weixin" => self.weixin(base, id, data).await,
            "qq" => self.qq(base, id, data, &creds).await,
            "weibo" => self.weibo(base, id, data, &creds).await,
            "weapp" | "qqapp" => self.mini_program(platform, base, id, data, &creds).await,
            "toutiao" => self.toutiao(base, id, data, &creds).await,
            "apple" => self.apple(base, id, data, &creds).await,
            _ => Err(VerifyError::NotConfigured {
                platform,
                missing: "no check exists for this platform".into(),
            }),
        }
    }

    /// `weixin`: the access token is valid for this openid.
    async fn weixin(&self, base: &str, id: &str, data: &Value) -> Result<(), VerifyError> {
        let p = "weixin";
        let token = member(p, data, &["access_token"])?;
        let v = self
            .answer(
                p,
                self.http
                    .get(format!("{base}/sns/auth"))
                    .query(&[("access_token", token), ("openid", id)]),
            )
            .await?;
        match v.get("errcode").and_then(Value::as_i64) {
            Some(0) => Ok(()),
            _ => Err(rejected(p, platform_message(&v, "errmsg"))),
        }
    }

    /// `qq`: the access token belongs to this openid (and to the app's client id).
    async fn qq(
        &self,
        base: &str,
        id: &str,
        data: &Value,
        creds: &AuthProvider,
    ) -> Result<(), VerifyError> {
        let p = "qq";
        let token = member(p, data, &["access_token"])?;
        let v = self
            .answer(
                p,
                self.http
                    .get(format!("{base}/oauth2.0/me"))
                    .query(&[("access_token", token), ("fmt", "json")]),
            )
            .await?;
        if v.get("openid").and_then(Value::as_str) != Some(id) {
            return Err(rejected(p, platform_message(&v, "error_description")));
        }
        same_app(p, &v, "client_id", creds)
    }

    /// `weibo`: the access token belongs to this uid (and to the app's key).
    async fn weibo(
        &self,
        base: &str,
        id: &str,
        data: &Value,
        creds: &AuthProvider,
    ) -> Result<(), VerifyError> {
        let p = "weibo";
        let token = member(p, data, &["access_token"])?;
        let v = self
            .answer(
                p,
                self.http
                    .post(format!("{base}/oauth2/get_token_info"))
                    .form(&[("access_token", token)]),
            )
            .await?;
        if id_text(v.get("uid")).as_deref() != Some(id) {
            return Err(rejected(p, platform_message(&v, "error")));
        }
        same_app(p, &v, "appkey", creds)
    }

    /// `weapp`, `qqapp`: the login code, exchanged with the app's credentials, names this openid.
    async fn mini_program(
        &self,
        p: &'static str,
        base: &str,
        id: &str,
        data: &Value,
        creds: &AuthProvider,
    ) -> Result<(), VerifyError> {
        let (app_id, secret) = credentials(p, creds)?;
        let code = member(p, data, &["code"])?;
        let v = self
            .answer(
                p,
                self.http.get(format!("{base}/sns/jscode2session")).query(&[
                    ("appid", app_id),
                    ("secret", secret),
                    ("js_code", code),
                    ("grant_type", "authorization_code"),
                ]),
            )
            .await?;
        if v.get("errcode").and_then(Value::as_i64).unwrap_or(0) != 0 {
            return Err(rejected(p, platform_message(&v, "errmsg")));
        }
        match v.get("openid").and_then(Value::as_str) {
            Some(openid) if openid == id => Ok(()),
            Some(_) => Err(rejected(p, "the code belongs to another account.")),
            None => Err(rejected(p, "the platform named no account for the code.")),
        }
    }

    /// `toutiao`: the login code, exchanged with the app's credentials, names this openid.
    async fn toutiao(
        &self,
        base: &str,
        id: &str,
        data: &Value,
        creds: &AuthProvider,
    ) -> Result<(), VerifyError> {
        let p = "toutiao";
        let (app_id, secret) = credentials(p, creds)?;
        let code = member(p, data, &["code"])?;
        let v = self
            .answer(
                p,
                self.http
                    .post(format!("{base}/api/apps/v2/jscode2session"))
                    .json(&json!({"appid": app_id, "secret": secret, "code": code})),
            )
            .await?;
        if v.get("err_no").and_then(Value::as_i64) != Some(0) {
            return Err(rejected(p, platform_message(&v, "err_tips")));
        }
        match v.pointer("/data/openid").and_then(Value::as_str) {
            Some(openid) if openid == id => Ok(()),
            _ => Err(rejected(p, "the code belongs to another account.")),
        }
    }

    /// `apple`: the identity token is Apple's, for this app, about this uid, and unexpired.
    async fn apple(
        &self,
        base: &str,
        id: &str,
        data: &Value,
        creds: &AuthProvider,
    ) -> Result<(), VerifyError> {
        let p = "apple";
        let audience = creds
            .app_id
            .as_deref()
            .ok_or_else(|| VerifyError::NotConfigured {
                platform: p,
                missing: "authProviders.apple needs appId (the bundle or services id)".into(),
            })?;
        let token = member(p, data, &["token", "identity_token"])?;
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| rejected(p, "the identity token is not a JWT."))?;
        if header.alg != Algorithm::RS256 {
            return Err(rejected(p, "the identity token is not signed with RS256."));
        }
        let kid = header
            .kid
            .ok_or_else(|| rejected(p, "the identity token names no key."))?;
        let jwk = self
            .apple_key(base, &kid)
            .await?
            .ok_or_else(|| rejected(p, "the identity token is signed with an unknown key."))?;
        let (Some(n), Some(e)) = (
            jwk.get("n").and_then(Value::as_str),
            jwk.get("e").and_then(Value::as_str),
        ) else {
            return Err(VerifyError::Unreachable {
                platform: p,
                cause: format!("key {kid:?} is not an RSA key"),
            });
        };
        let key = DecodingKey::from_rsa_components(n, e).map_err(|e| VerifyError::Unreachable {
            platform: p,
            cause: format!("key {kid:?}: {e}"),
        })?;
        let mut validation = Validation::new(Algorithm::RS256);
        validation.set_issuer(&[APPLE_ISSUER]);
        validation.set_audience(&[audience]);
        let claims = jsonwebtoken::decode::<AppleClaims>(token, &key, &validation)
            .map_err(|e| rejected(p, format!("the identity token is not valid ({e}).")))?
            .claims;
        if claims.sub != id {
            return Err(rejected(p, "the identity token is about another account."));
        }
        Ok(())
    }

    /// Apple's key `kid`, from the key set fetched at most an hour ago (fetched again, at most
    /// once a minute, when it lacks the key).
    async fn apple_key(&self, base: &str, kid: &str) -> Result<Option<Value>, VerifyError> {
        let find = |keys: &[Value]| {
            keys.iter()
                .find(|k| k.get("kid").and_then(Value::as_str) == Some(kid))
                .cloned()
        };
        let mut cache = self.apple_keys.lock().await;
        let age = cache.fetched.map(|t| t.elapsed());
        let fresh = age.is_some_and(|a| a < APPLE_KEYS_TTL);
        if fresh {
            if let Some(k) = find(&cache.keys) {
                return Ok(Some(k));
            }
            if age.is_some_and(|a| a < APPLE_KEYS_REFETCH) {
                return Ok(None);
            }
        }
        let v = self
            .answer("apple", self.http.get(format!("{base}/auth/keys")))
            .await?;
        cache.keys = v
            .get("keys")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        cache.fetched = Some(Instant::now());
        Ok(find(&cache.keys))
    }

    /// The platform's JSON answer to `req` (QQ's `callback( … );` wrapping removed). Client
    /// errors carry the platform's refusal and are answers too; no answer, a server error or
    /// something not JSON is `Unreachable`.
    async fn answer(
        &self,
        platform: &'static str,
        req: reqwest::RequestBuilder,
    ) -> Result<Value, VerifyError> {
        let down = |cause: String| VerifyError::Unreachable { platform, cause };
        let resp = req.send().await.map_err(|e| down(e.to_string()))?;
        let status = resp.status();
        if status.is_server_error() {
            return Err(down(format!("status {status}")));
        }
        let body = crate::outbound::read_capped(resp, MAX_ANSWER_BYTES)
            .await
            .map_err(|e| down(e.to_string()))?;
        let text = String::from_utf8_lossy(&body);
        let text = text.trim();
        let json = text
            .strip_prefix("callback(")
            .and_then(|t| t.trim_end_matches(';').trim().strip_suffix(')'))
            .unwrap_or(text);
        serde_json::from_str(json).map_err(|_| down(format!("status {status}, not JSON")))
    }
}

/// The first of `names` present in the account's data, as a non-empty string.
fn member<'a>(
    platform: &'static str,
    data: &'a Value,
    names: &[&str],
) -> Result<&'a str, VerifyError> {
    names
        .iter()
        .find_map(|n| {
            data.get(*n)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        })
        .ok_or_else(|| rejected(platform, format!("authData.{platform} needs {}.", names[0])))
}

/// The app's `appId` and `appSecret` at the platform.
fn credentials<'a>(
    platform: &'static str,
    creds: &'a AuthProvider,
) -> Result<(&'a str, &'a str), VerifyError> {
    match (creds.app_id.as_deref(), creds.app_secret.as_deref()) {
        (Some(id), Some(secret)) => Ok((id, secret)),
        _ => Err(VerifyError::NotConfigured {
            platform,
            missing: format!("authProviders.{platform} needs appId and appSecret"),
        }),
    }
}

/// When the app set an `appId`, the platform's `field` names it.
fn same_app(
    platform: &'static str,
    answer: &Value,
    field: &str,
    creds: &AuthProvider,
) -> Result<(), VerifyError> {
    match &creds.app_id {
        Some(app_id) if id_text(answer.get(field)).as_deref() != Some(app_id.as_str()) => Err(
            rejected(platform, "the token was issued to another application."),
        ),
        _ => Ok(()),
    }
}

/// A string or integer id as text.
fn id_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The platform's own message in `field`, clipped, or a generic one.
fn platform_message(answer: &Value, field: &str) -> String {
    match answer.get(field).and_then(Value::as_str) {
        Some(m) if !m.is_empty() => format!("the platform said {:?}.", clip(m)),
        _ => "the platform refused the credentials.".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_the_platforms_unless_replaced() {
        let p = IdentityProviders::new(&["weapp=http://127.0.0.1:9/".into()]).unwrap();
        assert_eq!(p.endpoints["weapp"], "http://127.0.0.1:9");
        assert_eq!(p.endpoints["weixin"], "https://api.weixin.qq.com");
        assert_eq!(p.endpoints["apple"], "https://appleid.apple.com");
        assert!(IdentityProviders::new(&["anonymous=http://x".into()]).is_err());
        assert!(IdentityProviders::new(&["weapp=ftp://x".into()]).is_err());
        assert!(IdentityProviders::new(&["weapp".into()]).is_err());
    }

    #[test]
    fn ids_compare_as_text() {
        assert_eq!(id_text(Some(&json!(123))), Some("123".into()));
        assert_eq!(id_text(Some(&json!("123"))), Some("123".into()));
        assert_eq!(id_text(Some(&json!(null))), None);
    }
}
