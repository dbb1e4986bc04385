//! A Rust client for Basalt's REST API (spec `rest-api.md`), used by the CLI, the tests, the
//! jepsen harness and the benchmarks. It speaks only the public HTTP API.
//!
//! Errors separate what the server answered ([`Error::Api`], definite) from a request whose
//! outcome is unknown ([`Error::Transport`]: the write may or may not have happened).

pub mod ports;
pub mod signing;
pub mod volumes;

use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::Value;

pub use reqwest::Method;
pub use signing::{Formula, SignedKeys};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error status.
    #[error("HTTP {status}: code {code:?}: {message}")]
    Api {
        status: u16,
        code: Option<i64>,
        message: String,
        body: Value,
        /// `Retry-After` in seconds, when the server sent one (429, 503 of a busy node).
        retry_after: Option<u64>,
    },
    /// The connection could not be opened: the request was never sent.
    #[error("connect: {0}")]
    Connect(String),
    /// No answer (reset, timeout): the outcome is unknown.
    #[error("transport: {0}")]
    Transport(String),
    /// The server answered something this client does not understand.
    #[error("unexpected response: {0}")]
    Decode(String),
    /// The client was set up wrongly (no request was sent).
    #[error("invalid client configuration: {0}")]
    Config(String),
}

impl Error {
    /// The API error code, if the server sent one.
    pub fn code(&self) -> Option<i64> {
        match self {
            Error::Api { code, .. } => *code,
            _ => None,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when the request may have taken effect although no success was seen.
    pub fn is_indeterminate(&self) -> bool {
        // 507 (10081, a disk nearly full) is answered before anything is proposed.
        matches!(self, Error::Transport(_))
            || matches!(
                self,
                Error::Api {
                    status: 500..=506 | 508..=599,
                    ..
                }
            )
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// App credentials of standard mode (and optionally the master key).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppKeys {
    pub application_id: String,
    pub rest_key: String,
    #[serde(default)]
    pub master_key: Option<String>,
}

/// A raw response: status, headers of interest, JSON body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: Value,
    pub location: Option<String>,
    /// `X-Basalt-Version`: the Raft log index that committed a write.
    pub version: Option<u64>,
    /// `X-Basalt-Group`: the group that committed a write.
    pub group: Option<u32>,
    /// `X-Basalt-Push-Id`: the id of a push just accepted (`POST /1/push`).
    pub push_id: Option<String>,
}

/// A created object.
#[derive(Debug, Clone)]
pub struct Created {
    pub object_id: String,
    pub created_at: String,
    pub location: Option<String>,
    pub version: Option<u64>,
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    /// Further nodes: API requests rotate over `base` and these (`over_nodes`).
    others: std::sync::Arc<Vec<String>>,
    next: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    keys: Option<AppKeys>,
    signing: Option<SignedKeys>,
    console: Option<(String, String)>,
    session: Option<String>,
    brand: String,
    /// A PEM certificate (bundle) trusted besides the system's, for a server whose HTTPS
    /// certificate a private CA signed.
    ca: Option<std::sync::Arc<Vec<u8>>>,
    timeout: Duration,
}

impl Client {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:8080`), authenticating as `keys`.
    pub fn new(base: &str, keys: Option<AppKeys>) -> Result<Self> {
        Ok(Client {
            http: http_client(DEFAULT_TIMEOUT, None)?,
            base: base.trim_end_matches('/').to_string(),
            others: Default::default(),
            next: Default::default(),
            keys,
            signing: None,
            console: None,
            session: None,
            brand: "Service".into(),
            ca: None,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// A client spreading its API requests round-robin over several nodes of one cluster
    /// (every node serves the whole API). `base()`, health and metrics use the first.
    pub fn over_nodes(bases: &[String], keys: Option<AppKeys>) -> Result<Self> {
        let first = bases
            .first()
            .ok_or_else(|| Error::Config("over_nodes needs at least one node".into()))?;
        let mut c = Client::new(first, keys)?;
        c.others = std::sync::Arc::new(
            bases[1..]
                .iter()
                .map(|b| b.trim_end_matches('/').to_string())
                .collect(),
        );
        Ok(c)
    }

    /// The node the next API request goes to.
    fn node(&self) -> &str {
        if self.others.is_empty() {
            return &self.base;
        }
        let i =
            self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % (self.others.len() + 1);
        if i == 0 {
            &self.base
        } else {
            &self.others[i - 1]
        }
    }

    /// The same client signing its requests (encrypted mode) instead of sending the REST key.
    pub fn with_signing(mut self, keys: SignedKeys) -> Self {
        self.signing = Some(keys);
        self
    }

    /// The same client sending console-account headers (app management).
    pub fn with_console(mut self, email: &str, password: &str) -> Self {
        self.console = Some((email.to_string(), password.to_string()));
        self
    }

    /// The same client sending a session token.
    pub fn with_session(mut self, token: Option<&str>) -> Self {
        self.session = token.map(str::to_string);
        self
    }

    /// The same client with another request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Result<Self> {
        self.http = http_client(timeout, self.ca.as_deref().map(Vec::as_slice))?;
        self.timeout = timeout;
        Ok(self)
    }

    /// The same client trusting the PEM certificates `ca` (a private CA's) besides the
    /// system's, for a server on HTTPS.
    pub fn with_ca(mut self, ca: &[u8]) -> Result<Self> {
        self.http = http_client(self.timeout, Some(ca))?;
        self.ca = Some(std::sync::Arc::new(ca.to_vec()));
        Ok(self)
    }

    /// The same client using another header brand word (`X-<brand>-...`).
    pub fn with_brand(mut self, brand: &str) -> Self {
        self.brand = brand.to_string();
        self
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request with the app's keys (master key instead of the REST key when `master`).
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        master: bool,
    ) -> Result<Response> {
        let body_text = body.map(Value::to_string);
        let signed_body = body_text.as_deref().unwrap_or("").as_bytes();
        let mut req = self.prepared(method, path, signed_body, master);
        if let Some(b) = body_text {
            req = req.header("Content-Type", "application/json").body(b);
        }
        self.send(req).await
    }

    /// Uploads `body` as a file named `name` (`POST /2/files/<name>`, the body raw with
    /// `content_type`): the answer's body is `{filename, url, cdn}`.
    pub async fn upload_file(
        &self,
        name: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> Result<Response> {
        let mut url = reqwest::Url::parse("http://host/2/files/")
            .map_err(|e| Error::Config(e.to_string()))?;
        url.path_segments_mut()
            .map_err(|()| Error::Config("no path".into()))?
            .pop_if_empty()
            .push(name);
        // An upload's signature leaves its body out (the bytes stream to storage).
        let req = self
            .prepared(Method::POST, url.path(), b"", false)
            .header("Content-Type", content_type)
            .body(body);
        self.send(req).await
    }

    /// Downloads the stored file at `path` (its url's path, `/<cdn>/YYYY/MM/DD/<id>.<ext>`, with
    /// any query) from the next node, handing each piece of the body to `piece` as it arrives
    /// (nothing is held whole); answers the bytes received.
    pub async fn download_file(&self, path: &str, mut piece: impl FnMut(&[u8])) -> Result<u64> {
        let transport = |e: reqwest::Error| Error::Transport(chain(&e));
        let mut resp = self
            .http
            .get(format!("{}{}", self.node(), path))
            .send()
            .await
            .map_err(|e| sending_failed(&e))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.map_err(transport)?;
            let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
            return Err(api_error(status, body));
        }
        let mut received = 0u64;
        while let Some(bytes) = resp.chunk().await.map_err(transport)? {
            received += bytes.len() as u64;
            piece(&bytes);
        }
        Ok(received)
    }

    /// A request to the next node with the app's (or console's) credentials and session; when
    /// signing, `signed_body` is what the signature covers.
    fn prepared(
        &self,
        method: Method,
        path: &str,
        signed_body: &[u8],
        master: bool,
    ) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .request(method, format!("{}{}", self.node(), path));
        let brand = &self.brand;
        if let Some(s) = &self.signing {
            let bare_path = path.split('?').next().unwrap_or(path);
            let ts = signing::timestamp_now(s.formula);
            for (name, value) in
                signing::sign(s, bare_path, signed_body, &ts, &signing::new_nonce())
            {
                req = req.header(format!("X-{brand}-{name}"), value);
            }
            if let (Some(mk), true) = (
                self.keys.as_ref().and_then(|k| k.master_key.as_ref()),
                master,
            ) {
                req = req.header(format!("X-{brand}-Master-Key"), mk);
            }
        } else if let Some(k) = &self.keys {
            req = req.header(format!("X-{brand}-Application-Id"), &k.application_id);
            match (&k.master_key, master) {
                (Some(mk), true) => req = req.header(format!("X-{brand}-Master-Key"), mk),
                _ => req = req.header(format!("X-{brand}-REST-API-Key"), &k.rest_key),
            }
        }
        if let Some((email, password)) = &self.console {
            req = req
                .header(format!("X-{brand}-Email"), email)
                .header(format!("X-{brand}-Password"), password);
        }
        if let Some(t) = &self.session {
            req = req.header(format!("X-{brand}-Session-Token"), t);
        }
        req
    }

    /// Sends `req` and reads its answer: the JSON body of a success, else `Error::Api`.
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Response> {
        let resp = req.send().await.map_err(|e| sending_failed(&e))?;
        let status = resp.status();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let location = header("location");
        let version = header("x-basalt-version").and_then(|v| v.parse().ok());
        let group = header("x-basalt-group").and_then(|v| v.parse().ok());
        let push_id = header("x-basalt-push-id");
        let retry_after: Option<u64> = header("retry-after").and_then(|v| v.parse().ok());
        let text = resp.text().await.map_err(|e| Error::Transport(chain(&e)))?;
        let body: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if !status.is_success() {
            let mut e = api_error(status, body);
            if let Error::Api { retry_after: r, .. } = &mut e {
                *r = retry_after;
            }
            return Err(e);
        }
        Ok(Response {
            status: status.as_u16(),
            body,
            location,
            version,
            group,
            push_id,
        })
    }

    pub async fn create_object(&self, class: &str, fields: &Value) -> Result<Created> {
        let r = self
            .request(
                Method::POST,
                &format!("/1/classes/{class}"),
                Some(fields),
                false,
            )
            .await?;
        let object_id = str_field(&r.body, "objectId")?;
        let created_at = str_field(&r.body, "createdAt")?;
        Ok(Created {
            object_id,
            created_at,
            location: r.location,
            version: r.version,
        })
    }

    /// The object, or `None` when the server answers 101 (not found).
    pub async fn get_object(&self, class: &str, object_id: &str) -> Result<Option<Value>> {
        match self
            .request(
                Method::GET,
                &format!("/1/classes/{class}/{object_id}"),
                None,
                false,
            )
            .await
        {
            Ok(r) => Ok(Some(r.body)),
            Err(e) if e.code() == Some(101) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn update_object(
        &self,
        class: &str,
        object_id: &str,
        changes: &Value,
    ) -> Result<Response> {
        self.request(
            Method::PUT,
            &format!("/1/classes/{class}/{object_id}"),
            Some(changes),
            false,
        )
        .await
    }

    pub async fn delete_object(&self, class: &str, object_id: &str) -> Result<Response> {
        self.request(
            Method::DELETE,
            &format!("/1/classes/{class}/{object_id}"),
            None,
            false,
        )
        .await
    }

    /// Atomically adds `amount` to a numeric field.
    pub async fn increment(
        &self,
        class: &str,
        object_id: &str,
        field: &str,
        amount: i64,
    ) -> Result<Response> {
        let body = serde_json::json!({ field: {"__op": "Increment", "amount": amount} });
        self.update_object(class, object_id, &body).await
    }

    /// Lists objects of a class; `params` are query parameters (`where`, `limit`, `order`, ...).
    pub async fn query(&self, class: &str, params: &[(&str, &str)]) -> Result<Value> {
        let mut url = reqwest::Url::parse(&format!("{}/1/classes/{class}", self.node()))
            .map_err(|e| Error::Decode(e.to_string()))?;
        url.query_pairs_mut().extend_pairs(params);
        let path = format!("{}?{}", url.path(), url.query().unwrap_or(""));
        Ok(self.request(Method::GET, &path, None, false).await?.body)
    }

    /// True when `GET /health` answers 200 (every hosted group has a leader).
    pub async fn healthy(&self) -> bool {
        matches!(self.http.get(format!("{}/health", self.base)).send().await, Ok(r) if r.status() == StatusCode::OK)
    }

    /// The Prometheus text of `GET /metrics`.
    pub async fn metrics(&self) -> Result<String> {
        let r = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .map_err(|e| Error::Transport(chain(&e)))?;
        r.text().await.map_err(|e| Error::Transport(chain(&e)))
    }
}

/// A request that got no answer: `Connect` when it was never sent, else `Transport`.
fn sending_failed(e: &reqwest::Error) -> Error {
    if e.is_connect() {
        Error::Connect(chain(e))
    } else {
        Error::Transport(chain(e))
    }
}

/// An error with its causes ("error sending request: … : operation timed out"), so a
/// transport failure says whether it was a timeout, a reset or a refused connection.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// How long a request may take by default: longer than a node's own query deadline (30 s), so
/// a node that gives up answers its 503 before the client stops listening.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(40);

/// How long a pooled connection may sit idle before the client drops it: below a node's idle
/// limit (its header timeout, 10 s by default), so the client never reuses a connection just as
/// the node closes it.
pub const POOL_IDLE: Duration = Duration::from_secs(5);

/// The HTTP client every `Client` uses: pooled connections, one request timeout, and the
/// certificates of `ca` trusted besides the system's.
fn http_client(timeout: Duration, ca: Option<&[u8]>) -> Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .pool_max_idle_per_host(64)
        .pool_idle_timeout(POOL_IDLE);
    if let Some(pem) = ca {
        for cert in reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| Error::Config(format!("CA certificates: {}", chain(&e))))?
        {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build().map_err(|e| Error::Transport(chain(&e)))
}

fn str_field(body: &Value, name: &str) -> Result<String> {
    body.get(name)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| Error::Decode(format!("missing {name} in {body}")))
}

fn api_error(status: StatusCode, body: Value) -> Error {
    let code = body.get("code").and_then(Value::as_i64);
    let message = body
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    Error::Api {
        status: status.as_u16(),
        code,
        message,
        body,
        retry_after: None,
    }
}
