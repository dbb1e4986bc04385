//! Fake third-party platforms on loopback, speaking each platform's verification protocol:
//! WeChat (`/sns/auth`, `/sns/jscode2session`), QQ (`/oauth2.0/me`), Weibo
//! (`/oauth2/get_token_info`), Toutiao (`/api/apps/v2/jscode2session`) and Apple (`/auth/keys`,
//! with a test RSA key whose identity tokens `apple_token` signs). Tests grant tokens and codes
//! for accounts, then point basalt at the fake with `--auth-endpoint PLATFORM=URL`.
//! A token or code named `down` answers 500 (a platform failing).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Form, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// The mini-program credentials the fake expects (`appid`, `secret`).
pub const MINI_APP_ID: &str = "mini-app";
pub const MINI_APP_SECRET: &str = "mini-secret";
/// The client id / app key the fake's QQ and Weibo tokens are issued to.
pub const OAUTH_APP_ID: &str = "oauth-app";
/// The key id of the fake Apple key set.
pub const APPLE_KID: &str = "basalt-test-key";
/// The test key's modulus (base64url), matching `fixtures/apple_test_key.der`.
const APPLE_N: &str = "5oW5j2zNrqUwZdn_j7yyK4AJB6ksnhNCDtHvjRcr_18N-FhQa_nflXywP4lpI4mVQ8sWO86T92S9tzVhVyHU-se3-44Ub_3koARGfOPrgbJ8vGht100Y9voki9E2CiMqVDi6gAuVVdmv-w9eLhhefBOq7guAWUd4QLN12iplXaZeEu7awicIAScGwzW9TkHGWFcq-nlSrl_2CLiEEp0f1C13Q2P6D-RtC-eWrI4OU1xzszSuOiT-C8ppTazZT3PSKKIJirxE9geX4zwBNB9dJGAVg6gKW85RUaFpy-vrHdSB7wXW-0TNuxBBiareLWndE1tUixIQQYzdz86JrwhLmQ";
const APPLE_KEY_DER: &[u8] = include_bytes!("fixtures/apple_test_key.der");

#[derive(Default)]
struct Grants {
    /// Access token → account id.
    tokens: HashMap<String, String>,
    /// Login code → account id (each code works once).
    codes: HashMap<String, String>,
}

type Shared = Arc<Mutex<Grants>>;

#[derive(Clone)]
pub struct FakePlatforms {
    pub port: u16,
    grants: Shared,
}

fn token_owner(g: &Shared, token: &str) -> Option<String> {
    g.lock().ok()?.tokens.get(token).cloned()
}

fn take_code(g: &Shared, code: &str) -> Option<String> {
    g.lock().ok()?.codes.remove(code)
}

fn failing() -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, "upstream broke").into_response()
}

async fn weixin_auth(
    State(g): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let token = q.get("access_token").cloned().unwrap_or_default();
    if token == "down" {
        return failing();
    }
    match token_owner(&g, &token) {
        Some(owner) if Some(&owner) == q.get("openid") => {
            Json(json!({"errcode": 0, "errmsg": "ok"})).into_response()
        }
        _ => Json(json!({"errcode": 40003, "errmsg": "invalid openid"})).into_response(),
    }
}

async fn jscode2session(
    State(g): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let code = q.get("js_code").cloned().unwrap_or_default();
    if code == "down" {
        return failing();
    }
    let creds_ok = q.get("appid").map(String::as_str) == Some(MINI_APP_ID)
        && q.get("secret").map(String::as_str) == Some(MINI_APP_SECRET);
    if !creds_ok {
        return Json(json!({"errcode": 40125, "errmsg": "invalid appsecret"})).into_response();
    }
    match take_code(&g, &code) {
        Some(openid) => Json(json!({"openid": openid, "session_key": "sk"})).into_response(),
        None => Json(json!({"errcode": 40029, "errmsg": "invalid code"})).into_response(),
    }
}

async fn qq_me(State(g): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    let token = q.get("access_token").cloned().unwrap_or_default();
    let body = match token_owner(&g, &token) {
        Some(openid) => json!({"client_id": OAUTH_APP_ID, "openid": openid}),
        None => json!({"error": 100016, "error_description": "access token check failed"}),
    };
    // QQ answers JSONP unless asked for JSON; Basalt asks, but reads either.
    format!("callback( {body} );").into_response()
}

async fn weibo_token_info(
    State(g): State<Shared>,
    Form(f): Form<HashMap<String, String>>,
) -> Response {
    let token = f.get("access_token").cloned().unwrap_or_default();
    match token_owner(&g, &token).and_then(|uid| uid.parse::<u64>().ok()) {
        Some(uid) => {
            Json(json!({"uid": uid, "appkey": OAUTH_APP_ID, "expire_in": 3600})).into_response()
        }
        None => (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_access_token", "error_code": 21332})),
        )
            .into_response(),
    }
}

async fn toutiao_session(State(g): State<Shared>, Json(b): Json<Value>) -> Response {
    let creds_ok = b["appid"] == MINI_APP_ID && b["secret"] == MINI_APP_SECRET;
    let code = b["code"].as_str().unwrap_or_default();
    match take_code(&g, code).filter(|_| creds_ok) {
        Some(openid) => Json(json!({"err_no": 0, "err_tips": "success",
            "data": {"openid": openid, "session_key": "sk"}}))
        .into_response(),
        None => Json(json!({"err_no": 40018, "err_tips": "bad code"})).into_response(),
    }
}

async fn apple_keys() -> Json<Value> {
    Json(json!({"keys": [
        {"kty": "RSA", "kid": APPLE_KID, "use": "sig", "alg": "RS256", "n": APPLE_N, "e": "AQAB"}
    ]}))
}

impl FakePlatforms {
    pub async fn start() -> FakePlatforms {
        let grants: Shared = Arc::default();
        let app = Router::new()
            .route("/sns/auth", get(weixin_auth))
            .route("/sns/jscode2session", get(jscode2session))
            .route("/oauth2.0/me", get(qq_me))
            .route("/oauth2/get_token_info", post(weibo_token_info))
            .route("/api/apps/v2/jscode2session", post(toutiao_session))
            .route("/auth/keys", get(apple_keys))
            .with_state(Arc::clone(&grants));
        let port = super::serve_on_loopback(app).await;
        FakePlatforms { port, grants }
    }

    /// A cluster of `nodes` nodes and `shards` shards whose platforms are this fake.
    pub async fn cluster(&self, nodes: usize, shards: &str) -> super::TestCluster {
        let args = self.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        super::TestCluster::start(nodes, &["--shards", shards], &args).await
    }

    /// `--auth-endpoint` arguments sending every platform to this fake.
    pub fn args(&self) -> Vec<String> {
        [
            "weixin", "weapp", "qq", "qqapp", "weibo", "toutiao", "apple",
        ]
        .iter()
        .flat_map(|p| {
            [
                "--auth-endpoint".to_string(),
                format!("{p}=http://127.0.0.1:{}", self.port),
            ]
        })
        .collect()
    }

    /// A new access token of account `id`.
    pub fn grant_token(&self, id: &str) -> String {
        let token = format!("tok-{id}-{}", rand_suffix());
        if let Ok(mut g) = self.grants.lock() {
            g.tokens.insert(token.clone(), id.to_string());
        }
        token
    }

    /// A new one-time login code of account `id`.
    pub fn grant_code(&self, id: &str) -> String {
        let code = format!("code-{id}-{}", rand_suffix());
        if let Ok(mut g) = self.grants.lock() {
            g.codes.insert(code.clone(), id.to_string());
        }
        code
    }

    /// An identity token signed with the fake Apple key: about `sub`, for `aud`, expiring
    /// `expires_in` seconds from now (negative: expired).
    pub fn apple_token(&self, sub: &str, aud: &str, expires_in: i64) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64;
        let claims = json!({
            "iss": "https://appleid.apple.com", "aud": aud, "sub": sub,
            "iat": now, "exp": now + expires_in,
        });
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some(APPLE_KID.into());
        let key = jsonwebtoken::EncodingKey::from_rsa_der(APPLE_KEY_DER);
        jsonwebtoken::encode(&header, &claims, &key).expect("sign identity token")
    }
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed).to_string()
}
