//! A push webhook on loopback for tests: keeps every batch POSTed to it (its idempotency key,
//! whether its signature checks out under the secret, its body) and answers 200, naming the
//! messages to tokens starting with `dead` as dead tokens. It can be told to answer 503 to the
//! next requests (a provider having trouble) and to hold each answer back a while (a slow
//! provider, so that a fan-out can be interrupted midway).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

pub const SECRET: &str = "push-webhook-secret";

/// One batch as received.
#[derive(Debug, Clone)]
pub struct Batch {
    pub received_at: chrono::DateTime<chrono::Utc>,
    pub idempotency_key: String,
    pub signed: bool,
    pub body: Value,
}

#[derive(Default)]
struct Shared {
    batches: Mutex<Vec<Batch>>,
    fail_next: AtomicUsize,
    delay_ms: AtomicU64,
    requests: AtomicUsize,
}

#[derive(Clone)]
pub struct PushWebhook {
    pub port: u16,
    shared: Arc<Shared>,
}

fn signature_ok(headers: &HeaderMap, body: &[u8]) -> bool {
    let Some(sent) = headers
        .get("x-basalt-signature")
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Ok(mut mac) = <Hmac<Sha256> as Mac>::new_from_slice(SECRET.as_bytes()) else {
        return false;
    };
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    sent == format!("sha256={hex}")
}

async fn receive(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let failing = shared
        .fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if failing {
        return (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "0")]).into_response();
    }
    let Ok(parsed) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let batch = Batch {
        received_at: chrono::Utc::now(),
        idempotency_key: headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        signed: signature_ok(&headers, &body),
        body: parsed.clone(),
    };
    if let Ok(mut b) = shared.batches.lock() {
        b.push(batch);
    }
    let delay = shared.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let failed: Vec<Value> = parsed["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| {
            m["deviceToken"]
                .as_str()
                .is_some_and(|t| t.starts_with("dead"))
        })
        .map(|m| json!({"id": m["id"], "error": "Unregistered", "deadToken": true}))
        .collect();
    Json(json!({"failed": failed})).into_response()
}

impl PushWebhook {
    pub async fn start() -> PushWebhook {
        let shared: Arc<Shared> = Arc::default();
        let app = Router::new()
            .route("/push", post(receive))
            .with_state(Arc::clone(&shared));
        let port = super::serve_on_loopback(app).await;
        PushWebhook { port, shared }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/push", self.port)
    }

    /// The app settings that send every push to this webhook.
    pub fn settings(&self) -> Value {
        json!({"push": {"webhook": {"url": self.url(), "secret": SECRET}}})
    }

    /// Answers 503 to the next `n` requests.
    pub fn fail_next(&self, n: usize) {
        self.shared.fail_next.store(n, Ordering::SeqCst);
    }

    /// Holds each answer back `ms` milliseconds (after the batch is kept).
    pub fn delay(&self, ms: u64) {
        self.shared.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Requests received, refused ones included.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    pub fn batches(&self) -> Vec<Batch> {
        self.shared
            .batches
            .lock()
            .map(|b| b.clone())
            .unwrap_or_default()
    }

    /// The batches of one push.
    pub fn batches_of(&self, push_id: &str) -> Vec<Batch> {
        self.batches()
            .into_iter()
            .filter(|b| b.body["pushId"] == push_id)
            .collect()
    }

    /// Each message of a push as received (repeats included), by installation objectId.
    pub fn messages_of(&self, push_id: &str) -> BTreeMap<String, Vec<Value>> {
        let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for b in self.batches_of(push_id) {
            for m in b.body["messages"].as_array().into_iter().flatten() {
                let id = m["installation"].as_str().unwrap_or_default().to_string();
                out.entry(id).or_default().push(m.clone());
            }
        }
        out
    }

    /// The installations a push reached (each once), waiting until `n` are reached.
    pub async fn wait_reached(
        &self,
        push_id: &str,
        n: usize,
        timeout: Duration,
    ) -> BTreeSet<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let reached: BTreeSet<String> = self.messages_of(push_id).into_keys().collect();
            if reached.len() >= n {
                return reached;
            }
            assert!(
                Instant::now() < deadline,
                "push {push_id} reached {} of {n} installations",
                reached.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What the fake APNs received of one message.
#[derive(Debug, Clone)]
pub struct ApnsRequest {
    pub http2: bool,
    pub token: String,
    pub topic: String,
    pub apns_id: String,
    pub push_type: String,
    pub priority: String,
    pub expiration: Option<i64>,
    /// The bearer token checked out: ES256 under the test key, its key id and team.
    pub authorized: bool,
    pub body: Value,
}

/// The team and key id the fake APNs accepts provider tokens of.
pub const APNS_TEAM: &str = "TEAM123456";
pub const APNS_KEY_ID: &str = "KEY1234567";
pub const APNS_TOPIC: &str = "com.example.app";

/// An APNs on loopback: HTTP/2 over TLS with the test CA's certificate
/// (`fixtures/push-test-server.pem`), checking provider tokens with the test key's public
/// half; tokens starting with `dead` are unregistered (410).
#[derive(Clone)]
pub struct FakeApns {
    pub port: u16,
    received: Arc<Mutex<Vec<ApnsRequest>>>,
}

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", super::package_dir().display())
}

fn apns_authorized(headers: &HeaderMap) -> bool {
    use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
    let Some(token) = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bearer "))
    else {
        return false;
    };
    let Ok(pem) = std::fs::read(fixture("apns-test-key.pub.pem")) else {
        return false;
    };
    let Ok(key) = DecodingKey::from_ec_pem(&pem) else {
        return false;
    };
    let kid_ok = decode_header(token).is_ok_and(|h| h.kid.as_deref() == Some(APNS_KEY_ID));
    let mut v = Validation::new(Algorithm::ES256);
    v.required_spec_claims.clear();
    v.validate_exp = false;
    let claims = decode::<Value>(token, &key, &v).map(|d| d.claims);
    kid_ok && claims.is_ok_and(|c| c["iss"] == APNS_TEAM && c["iat"].is_i64())
}

async fn apns_receive(
    State(received): State<Arc<Mutex<Vec<ApnsRequest>>>>,
    axum::extract::Path(token): axum::extract::Path<String>,
    request: axum::extract::Request,
) -> Response {
    let http2 = request.version() == axum::http::Version::HTTP_2;
    let headers = request.headers().clone();
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let bytes = axum::body::to_bytes(request.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let got = ApnsRequest {
        http2,
        token: token.clone(),
        topic: header("apns-topic"),
        apns_id: header("apns-id"),
        push_type: header("apns-push-type"),
        priority: header("apns-priority"),
        expiration: header("apns-expiration").parse().ok(),
        authorized: apns_authorized(&headers),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    let authorized = got.authorized;
    let apns_id = got.apns_id.clone();
    if let Ok(mut r) = received.lock() {
        r.push(got);
    }
    if !authorized {
        return (
            StatusCode::FORBIDDEN,
            Json(json!({"reason": "InvalidProviderToken"})),
        )
            .into_response();
    }
    if token.starts_with("dead") {
        return (
            StatusCode::GONE,
            Json(json!({"reason": "Unregistered", "timestamp": 1_700_000_000_000u64})),
        )
            .into_response();
    }
    (StatusCode::OK, [("apns-id", apns_id)]).into_response()
}

impl FakeApns {
    pub async fn start() -> FakeApns {
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(fixture("push-test-server.pem"))
                .expect("server certificate")
                .collect::<Result<_, _>>()
                .expect("server certificate");
        let key = PrivateKeyDer::from_pem_file(fixture("push-test-server.key")).expect("key");
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("tls config");
        config.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let received: Arc<Mutex<Vec<ApnsRequest>>> = Arc::default();
        let app = Router::new()
            .route("/3/device/{token}", post(apns_receive))
            .with_state(Arc::clone(&received));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
                });
            }
        });
        FakeApns { port, received }
    }

    /// The nodes' options that send APNs pushes here and trust its certificate.
    pub fn args(&self) -> Vec<String> {
        vec![
            "--push-endpoint".into(),
            format!("apns=https://127.0.0.1:{}", self.port),
            "--push-ca-file".into(),
            fixture("push-test-ca.pem"),
        ]
    }

    /// The app settings of an APNs key this fake accepts.
    pub fn settings() -> Value {
        let key = std::fs::read_to_string(fixture("apns-test-key.p8")).expect("key");
        json!({"keyId": APNS_KEY_ID, "teamId": APNS_TEAM, "bundleId": APNS_TOPIC, "key": key})
    }

    pub fn received(&self) -> Vec<ApnsRequest> {
        self.received.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// What a fake FCM or WNS received of one message.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request's path (FCM: `/v1/projects/<p>/messages:send`; WNS: `/channel/<id>`).
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Default)]
pub struct OAuthShared {
    /// Access tokens handed out and still good.
    issued: Mutex<BTreeSet<String>>,
    token_requests: AtomicUsize,
    /// Form bodies of the token requests.
    grants: Mutex<Vec<BTreeMap<String, String>>>,
    received: Mutex<Vec<Received>>,
}

impl OAuthShared {
    fn issue(&self, prefix: &str) -> String {
        let n = self.token_requests.fetch_add(1, Ordering::SeqCst);
        let token = format!("{prefix}-access-{n}");
        if let Ok(mut i) = self.issued.lock() {
            i.insert(token.clone());
        }
        token
    }

    fn bearer_ok(&self, headers: &HeaderMap) -> bool {
        let sent = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            });
        sent.is_some_and(|t| self.issued.lock().is_ok_and(|i| i.contains(t)))
    }

    fn keep(&self, path: String, headers: HeaderMap, body: Bytes) {
        if let Ok(mut r) = self.received.lock() {
            r.push(Received {
                path,
                headers,
                body: body.to_vec(),
            });
        }
    }
}

fn form(body: &[u8]) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

/// What the fake token-guarded services (FCM, WNS) saw.
pub trait OAuthFake {
    fn shared(&self) -> &OAuthShared;

    /// Token requests received.
    fn token_requests(&self) -> usize {
        self.shared().token_requests.load(Ordering::SeqCst)
    }

    /// Messages received, in order.
    fn received(&self) -> Vec<Received> {
        self.shared()
            .received
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }
}

impl OAuthFake for FakeFcm {
    fn shared(&self) -> &OAuthShared {
        &self.shared
    }
}

impl OAuthFake for FakeWns {
    fn shared(&self) -> &OAuthShared {
        &self.shared
    }
}

/// Google's token endpoint and FCM's send endpoint on loopback (HTTP/1.1). The token endpoint
/// takes the JWT-bearer grant of the test service account (its assertion checked with the
/// key's public half); a send needs a token it handed out; tokens starting with `dead` are
/// unregistered.
#[derive(Clone)]
pub struct FakeFcm {
    pub port: u16,
    shared: Arc<OAuthShared>,
}

pub const FCM_PROJECT: &str = "basalt-test";
pub const FCM_CLIENT: &str = "pusher@basalt-test.iam.gserviceaccount.com";

async fn fcm_token(State(shared): State<Arc<OAuthShared>>, body: Bytes) -> Response {
    use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
    let grant = form(&body);
    if let Ok(mut g) = shared.grants.lock() {
        g.push(grant.clone());
    }
    // yup-oauth2 pads its base64 (Google takes both); jsonwebtoken reads it unpadded.
    let assertion = grant
        .get("assertion")
        .map(|a| a.replace('=', ""))
        .unwrap_or_default();
    let key = std::fs::read(fixture("fcm-test-key.pub.pem"))
        .ok()
        .and_then(|pem| DecodingKey::from_rsa_pem(&pem).ok());
    let mut v = Validation::new(Algorithm::RS256);
    v.validate_aud = false;
    let claims = key.and_then(|k| match decode::<Value>(&assertion, &k, &v) {
        Ok(d) => Some(d.claims),
        Err(e) => {
            eprintln!("fake FCM: assertion refused: {e}");
            None
        }
    });
    let good = grant.get("grant_type").map(String::as_str)
        == Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
        && claims.is_some_and(|c| {
            c["iss"] == FCM_CLIENT
                && c["scope"]
                    .as_str()
                    .is_some_and(|s| s.contains("firebase.messaging"))
        });
    if !good {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    }
    let token = shared.issue("fcm");
    Json(json!({"access_token": token, "expires_in": 3600, "token_type": "Bearer"})).into_response()
}

async fn fcm_send(
    State(shared): State<Arc<OAuthShared>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authorized = shared.bearer_ok(&headers);
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    shared.keep(uri.path().to_string(), headers, body);
    if !authorized {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": {"code": 401, "status": "UNAUTHENTICATED", "message": "bad token"}})),
        )
            .into_response();
    }
    let token = message["message"]["token"].as_str().unwrap_or_default();
    if token.starts_with("dead") {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": {"code": 404, "status": "NOT_FOUND",
                "message": "Requested entity was not found.",
                "details": [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "UNREGISTERED"}]}})),
        )
            .into_response();
    }
    Json(json!({"name": format!("projects/{FCM_PROJECT}/messages/{}", token)})).into_response()
}

impl FakeFcm {
    pub async fn start() -> FakeFcm {
        let shared: Arc<OAuthShared> = Arc::default();
        let app = Router::new()
            .route("/token", post(fcm_token))
            .route("/v1/projects/{project}/messages:send", post(fcm_send))
            .with_state(Arc::clone(&shared));
        let port = super::serve_on_loopback(app).await;
        FakeFcm { port, shared }
    }

    pub fn args(&self) -> Vec<String> {
        vec![
            "--push-endpoint".into(),
            format!("fcm=http://127.0.0.1:{}", self.port),
        ]
    }

    /// The app settings of the test service account, whose token endpoint is this fake.
    pub fn settings(&self) -> Value {
        let key = std::fs::read_to_string(fixture("fcm-test-key.pem")).expect("key");
        json!({"serviceAccount": {"type": "service_account", "project_id": FCM_PROJECT,
            "private_key_id": "k1", "private_key": key, "client_email": FCM_CLIENT,
            "token_uri": format!("http://127.0.0.1:{}/token", self.port)}})
    }
}

/// login.live.com's token endpoint and WNS channels on loopback (HTTP/1.1): the token endpoint
/// takes the client-credentials grant of `WNS_CLIENT`/`WNS_SECRET`; a channel (`/channel/<id>`)
/// needs a token it handed out (401 otherwise) and is gone (410) when its id starts with
/// `dead`.
#[derive(Clone)]
pub struct FakeWns {
    pub port: u16,
    shared: Arc<OAuthShared>,
}

pub const WNS_CLIENT: &str = "ms-app://s-1-15-2-test";
pub const WNS_SECRET: &str = "wns-secret";

async fn wns_token(State(shared): State<Arc<OAuthShared>>, body: Bytes) -> Response {
    let grant = form(&body);
    if let Ok(mut g) = shared.grants.lock() {
        g.push(grant.clone());
    }
    let field = |k: &str| grant.get(k).map(String::as_str);
    if field("grant_type") != Some("client_credentials")
        || field("client_id") != Some(WNS_CLIENT)
        || field("client_secret") != Some(WNS_SECRET)
        || field("scope") != Some("notify.windows.com")
    {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    let token = shared.issue("wns");
    Json(json!({"access_token": token, "token_type": "bearer", "expires_in": 86400}))
        .into_response()
}

async fn wns_channel(
    State(shared): State<Arc<OAuthShared>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authorized = shared.bearer_ok(&headers);
    shared.keep(uri.path().to_string(), headers, body);
    if !authorized {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if id.starts_with("dead") {
        return StatusCode::GONE.into_response();
    }
    (StatusCode::OK, [("x-wns-status", "received")]).into_response()
}

impl FakeWns {
    pub async fn start() -> FakeWns {
        let shared: Arc<OAuthShared> = Arc::default();
        let app = Router::new()
            .route("/token", post(wns_token))
            .route("/channel/{id}", post(wns_channel))
            .with_state(Arc::clone(&shared));
        let port = super::serve_on_loopback(app).await;
        FakeWns { port, shared }
    }

    pub fn args(&self) -> Vec<String> {
        vec![
            "--push-endpoint".into(),
            format!("wns=http://127.0.0.1:{}/token", self.port),
        ]
    }

    pub fn settings() -> Value {
        json!({"clientId": WNS_CLIENT, "clientSecret": WNS_SECRET})
    }

    /// A channel uri on this fake.
    pub fn channel(&self, id: &str) -> String {
        format!("http://127.0.0.1:{}/channel/{id}", self.port)
    }

    /// Makes every token handed out so far invalid (WNS answers 401 to them).
    pub fn expire_tokens(&self) {
        if let Ok(mut i) = self.shared.issued.lock() {
            i.clear();
        }
    }
}
