//! Captchas (spec 4.10): `requestCaptcha` stores a captcha (its text, picture size and drawing
//! seed) under a random token until its ttl; the picture is drawn on demand at `captcha_url`
//! (`image`). `verifyCaptcha` takes the captcha — one attempt per captcha, right or wrong — and,
//! when the text matches, stores a single-use `validate_token` that `requestSmsCode` takes for
//! templates needing a captcha. Both records live in the shard owning their token and expire by
//! the TTL sweep of the leader-elected scheduler. Callers: `api::captcha`, `sms`.

pub mod image;

use basalt_cluster::ids::GroupId;
use basalt_cluster::names::AppId;
use basalt_cluster::namespace::Namespace;
use basalt_cluster::object::random_alphanumeric;
use basalt_cluster::{now_ms, Cluster, Error as ClusterError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Why a captcha operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptchaError {
    /// A request parameter outside its range (107).
    #[error("{0}")]
    InvalidParams(String),
    /// A wrong text, or an unknown, expired or used captcha (10023).
    #[error("the captcha does not match")]
    Failed,
    /// A stored captcha that does not decode.
    #[error("a captcha record")]
    Record(#[from] serde_json::Error),
    /// A captcha that cannot be drawn.
    #[error("drawing a captcha: {0}")]
    Render(String),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// How long a validate token works.
pub const PASS_TTL_MS: i64 = 10 * 60 * 1000;

/// Length of captcha and validate tokens.
const TOKEN_LEN: usize = 32;

/// The picture and lifetime a client asked for (spec 8 ranges).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptchaParams {
    pub width: u32,
    pub height: u32,
    pub size: u32,
    pub ttl_s: u32,
}

impl CaptchaParams {
    /// From a `requestCaptcha` body: defaults 85×30, 4 characters, 60 s; 107 outside the
    /// ranges 60–200, 30–100, 3–6, 60–180.
    pub fn from_body(body: &Map<String, Value>) -> Result<Self, CaptchaError> {
        let field = |name: &str, default: u32, lo: u32, hi: u32| -> Result<u32, CaptchaError> {
            let out_of_range = || {
                CaptchaError::InvalidParams(format!("{name} must be an integer from {lo} to {hi}."))
            };
            match body.get(name) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => {
                    let n = v
                        .as_u64()
                        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
                        .ok_or_else(out_of_range)?;
                    u32::try_from(n)
                        .ok()
                        .filter(|n| (lo..=hi).contains(n))
                        .ok_or_else(out_of_range)
                }
            }
        };
        Ok(CaptchaParams {
            width: field("width", 85, 60, 200)?,
            height: field("height", 30, 30, 100)?,
            size: field("size", 4, 3, 6)?,
            ttl_s: field("ttl", 60, 60, 180)?,
        })
    }
}

/// What a captcha record holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Captcha {
    pub app: AppId,
    pub text: String,
    pub seed: u64,
    pub width: u32,
    pub height: u32,
}

fn group(cluster: &Cluster, token: &str) -> GroupId {
    cluster.record_group(Namespace::Captcha, token)
}

fn well_formed(token: &str) -> bool {
    token.len() == TOKEN_LEN && token.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Stores a new captcha for `app`; answers its token and text.
pub async fn issue(
    cluster: &Cluster,
    app: &AppId,
    p: CaptchaParams,
) -> Result<(String, String), CaptchaError> {
    let token = random_alphanumeric(TOKEN_LEN);
    let captcha = Captcha {
        app: app.clone(),
        text: image::random_text(p.size as usize),
        seed: rand::random(),
        width: p.width,
        height: p.height,
    };
    let value = serde_json::to_value(&captcha)?;
    let expires = now_ms() + i64::from(p.ttl_s) * 1000;
    cluster
        .put_record(
            group(cluster, &token),
            Namespace::Captcha,
            &token,
            value,
            Some(expires),
        )
        .await?;
    Ok((token, captcha.text))
}

/// The PNG of a live captcha, if any.
pub async fn picture(cluster: &Cluster, token: &str) -> Result<Option<Vec<u8>>, CaptchaError> {
    if !well_formed(token) {
        return Ok(None);
    }
    let Some(v) = cluster
        .get_record(group(cluster, token), Namespace::Captcha, token)
        .await?
    else {
        return Ok(None);
    };
    let c: Captcha = serde_json::from_value(v)?;
    image::render_png(&c.text, c.width, c.height, c.seed)
        .map(Some)
        .map_err(CaptchaError::Render)
}

/// Checks a captcha's text (ignoring case) and ends the captcha; on a match answers a new
/// validate token. 10023 for a wrong text or an unknown, expired or used captcha.
pub async fn verify(
    cluster: &Cluster,
    app: &AppId,
    token: &str,
    text: &str,
) -> Result<String, CaptchaError> {
    if !well_formed(token) {
        return Err(CaptchaError::Failed);
    }
    let taken = cluster
        .take_record(group(cluster, token), Namespace::Captcha, token)
        .await?;
    let captcha: Captcha = match taken.map(serde_json::from_value) {
        Some(Ok(c)) => c,
        Some(Err(e)) => return Err(e.into()),
        None => return Err(CaptchaError::Failed),
    };
    if captcha.app != *app || !captcha.text.eq_ignore_ascii_case(text.trim()) {
        return Err(CaptchaError::Failed);
    }
    let pass = random_alphanumeric(TOKEN_LEN);
    cluster
        .put_record(
            group(cluster, &pass),
            Namespace::CaptchaPass,
            &pass,
            serde_json::json!({ "app": app }),
            Some(now_ms() + PASS_TTL_MS),
        )
        .await?;
    Ok(pass)
}

/// Takes a validate token of `app`: true once per token, while it is live.
pub async fn take_pass(cluster: &Cluster, app: &AppId, pass: &str) -> Result<bool, CaptchaError> {
    if !well_formed(pass) {
        return Ok(false);
    }
    let taken = cluster
        .take_record(group(cluster, pass), Namespace::CaptchaPass, pass)
        .await?;
    Ok(taken.is_some_and(|v| v["app"].as_str() == Some(app)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: Value) -> Result<CaptchaParams, CaptchaError> {
        CaptchaParams::from_body(v.as_object().unwrap())
    }

    #[test]
    fn parameters_default_and_stay_in_range() {
        assert_eq!(
            params(json!({})).unwrap(),
            CaptchaParams {
                width: 85,
                height: 30,
                size: 4,
                ttl_s: 60
            }
        );
        let p = params(json!({"width": 200, "height": "100", "size": 6, "ttl": 180})).unwrap();
        assert_eq!((p.width, p.height, p.size, p.ttl_s), (200, 100, 6, 180));
        for bad in [
            json!({"width": 59}),
            json!({"width": 201}),
            json!({"height": 29}),
            json!({"size": 7}),
            json!({"size": 2}),
            json!({"ttl": 59}),
            json!({"ttl": 181}),
            json!({"width": -1}),
            json!({"width": 1.5}),
            json!({"width": "wide"}),
            json!({"width": 4294967396u64}),
        ] {
            assert!(
                matches!(params(bad.clone()), Err(CaptchaError::InvalidParams(_))),
                "{bad}"
            );
        }
    }
}
