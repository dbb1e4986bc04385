//! Authentication of app requests (spec 5): standard mode (application id + REST key), the
//! master key, encrypted mode (signed requests, `signature`), and the session-token header.
//!
//! `api::context`'s middleware calls [`authenticate`] once per request and stores the
//! resulting [`RequestCtx`] for the handlers. Lookups go to `apps`; the nonce of a signed
//! request is claimed cluster-wide with an `InsertRecord` on the shard that owns it, so a
//! replay is refused on every node for the whole freshness window.

mod secret;
pub mod signature;

use axum::http::{HeaderMap, HeaderName, Method};
use basalt_cluster::names::AppId;
use basalt_cluster::namespace::Namespace;
use basalt_cluster::{now_ms, Cluster, Error as ClusterError};
use serde_json::json;

use crate::apps::{find_app, find_app_by_secret, AppRecord, AppsError};
pub use secret::same_secret;
use signature::{is_fresh, parse_timestamp, Signed, FRESHNESS_MS, MAX_NONCE_LEN, SDK_TYPES};
pub use signature::{BodyDigests, PendingSignature};

/// Session-token header values that mean "no session" (decisions.md).
const NO_SESSION: [&str; 1] = ["bmob"];

/// Names of the authentication headers for one brand word (`X-<Brand>-...`).
#[derive(Debug, Clone)]
pub struct HeaderNames {
    pub application_id: HeaderName,
    pub rest_key: HeaderName,
    pub master_key: HeaderName,
    pub session_token: HeaderName,
    pub sdk_type: HeaderName,
    pub sdk_version: HeaderName,
    pub safe_timestamp: HeaderName,
    pub noncestr_key: HeaderName,
    pub secret_key: HeaderName,
    pub safe_sign: HeaderName,
    pub email: HeaderName,
    pub password: HeaderName,
}

impl HeaderNames {
    pub fn for_brand(brand: &str) -> anyhow::Result<Self> {
        let name = |suffix: &str| {
            HeaderName::try_from(format!("x-{}-{suffix}", brand.to_ascii_lowercase()))
        };
        Ok(HeaderNames {
            application_id: name("application-id")?,
            rest_key: name("rest-api-key")?,
            master_key: name("master-key")?,
            session_token: name("session-token")?,
            sdk_type: name("sdk-type")?,
            sdk_version: name("sdk-version")?,
            safe_timestamp: name("safe-timestamp")?,
            noncestr_key: name("noncestr-key")?,
            secret_key: name("secret-key")?,
            safe_sign: name("safe-sign")?,
            email: name("email")?,
            password: name("password")?,
        })
    }
}

/// The app a request acts for and the credentials it carried.
#[derive(Debug, Clone)]
pub struct RequestCtx {
    /// Shared: handlers take the context out of the request's extensions by cloning.
    pub app: std::sync::Arc<AppRecord>,
    /// The request carried the app's master key.
    pub master: bool,
    /// The request was signed (encrypted mode).
    pub encrypted: bool,
    /// The session token, unless absent, empty or a "no session" placeholder.
    pub session_token: Option<String>,
    /// Who the request acts as, found at most once per request (`users::session::principals`).
    pub principals: std::sync::Arc<tokio::sync::OnceCell<Principals>>,
    /// A file upload's signature over its body, which only the upload can check, once the
    /// body streamed past (`api::files::upload`). Only `POST /2/files/<name>` carries one.
    pub body_signature: Option<std::sync::Arc<PendingSignature>>,
}

impl RequestCtx {
    /// The context of one operation of a batch: its own session token when it carries one, and
    /// its principals found anew (an earlier operation may have changed a role).
    pub fn for_operation(&self, session_token: Option<String>) -> RequestCtx {
        RequestCtx {
            app: self.app.clone(),
            master: self.master,
            encrypted: self.encrypted,
            session_token: session_token.or_else(|| self.session_token.clone()),
            principals: Default::default(),
            body_signature: None,
        }
    }
}

/// Who a request acts as, for ACLs: the master key's (no ACL applies), or `*` and, with a live
/// session, the user's objectId and the roles it holds (`role:<name>`).
pub use basalt_cluster::acl::Principals;

/// Why a request is not authenticated; `api::error` converts it into the API's codes.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No app, or wrong keys: 401 `{"error":"unauthorized"}`. The reason is only logged.
    #[error("unauthorized: {0}")]
    Unauthorized(&'static str),
    /// The app is known but the request needs its master key and lacks it or has a wrong one.
    #[error("this request needs the app's master key.")]
    MasterKeyRequired,
    /// The app lookup failed (the cluster is unavailable): the request may be retried.
    #[error(transparent)]
    Apps(#[from] AppsError),
    /// Claiming the nonce failed (the cluster is unavailable): the request may be retried.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// A header's trimmed value, unless absent, empty or not text.
pub fn header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// What `authenticate` looks at.
pub struct Request<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    /// The raw body, read only for signed requests.
    pub body: &'a [u8],
}

/// Whether the signature of a request covers its body: POST and PUT, except file uploads,
/// whose bytes stream to their holders rather than being read first (decisions.md).
pub fn signs_body(method: &Method, path: &str) -> bool {
    matches!(*method, Method::POST | Method::PUT) && !is_upload_path(path)
}

/// Whether `path` is a file upload's (`/2/files/<name>`).
pub fn is_upload_path(path: &str) -> bool {
    path.starts_with("/2/files/")
}

/// Whether a request is signed (encrypted mode); only then does its body need reading first.
pub fn is_signed(names: &HeaderNames, headers: &HeaderMap) -> bool {
    header(headers, &names.secret_key).is_some() || header(headers, &names.safe_sign).is_some()
}

/// Authenticates an app request. With `need_master`, a known app without a valid master key
/// is `MasterKeyRequired` (schema endpoints answer 10061); otherwise a wrong master key is
/// simply unauthorized.
pub async fn authenticate(
    cluster: &Cluster,
    names: &HeaderNames,
    req: &Request<'_>,
    need_master: bool,
) -> Result<RequestCtx, AuthError> {
    let h = req.headers;
    let encrypted = is_signed(names, h);
    let (app, body_signature) = if encrypted {
        signed_app(cluster, names, req).await?
    } else {
        let id = header(h, &names.application_id).ok_or(AuthError::Unauthorized("no app id"))?;
        let app = find_app(cluster, id)
            .await?
            .ok_or(AuthError::Unauthorized("unknown app id"))?;
        (app, None)
    };
    let master = match header(h, &names.master_key) {
        Some(mk) if same_secret(mk, &app.master_key) => true,
        Some(_) if need_master => return Err(AuthError::MasterKeyRequired),
        Some(_) => return Err(AuthError::Unauthorized("wrong master key")),
        None if need_master => return Err(AuthError::MasterKeyRequired),
        None => false,
    };
    if !encrypted && !master {
        let rest = header(h, &names.rest_key).ok_or(AuthError::Unauthorized("no REST key"))?;
        if !same_secret(rest, &app.rest_key) {
            return Err(AuthError::Unauthorized("wrong REST key"));
        }
        if app.disable_standard_mode {
            return Err(AuthError::Unauthorized("standard mode is off for this app"));
        }
    }
    let session_token = header(h, &names.session_token)
        .filter(|t| !NO_SESSION.contains(t))
        .map(str::to_string);
    Ok(RequestCtx {
        app: std::sync::Arc::new(app),
        master,
        encrypted,
        session_token,
        principals: Default::default(),
        body_signature: body_signature.map(std::sync::Arc::new),
    })
}

/// Encrypted mode: finds the app by secret key, checks freshness and signature, then claims
/// the nonce. A file upload whose signature is none of the formulas without its body is
/// signed over its body: that check is answered pending, for the upload to make.
async fn signed_app(
    cluster: &Cluster,
    names: &HeaderNames,
    req: &Request<'_>,
) -> Result<(AppRecord, Option<PendingSignature>), AuthError> {
    let h = req.headers;
    let get =
        |n: &HeaderName, what: &'static str| header(h, n).ok_or(AuthError::Unauthorized(what));
    let secret = get(&names.secret_key, "no secret key")?;
    let sdk_type = get(&names.sdk_type, "no SDK type")?;
    let timestamp = get(&names.safe_timestamp, "no timestamp")?;
    let nonce = get(&names.noncestr_key, "no nonce")?;
    let sign = get(&names.safe_sign, "no signature")?;
    let sdk_version = header(h, &names.sdk_version).unwrap_or("");
    if !SDK_TYPES.contains(&sdk_type) {
        return Err(AuthError::Unauthorized("unknown SDK type"));
    }
    if nonce.len() > MAX_NONCE_LEN {
        return Err(AuthError::Unauthorized("nonce too long"));
    }
    let ts_ms = parse_timestamp(timestamp).ok_or(AuthError::Unauthorized("bad timestamp"))?;
    let now = now_ms();
    if !is_fresh(ts_ms, now) {
        return Err(AuthError::Unauthorized("stale timestamp"));
    }
    let app = find_app_by_secret(cluster, secret)
        .await?
        .ok_or(AuthError::Unauthorized("unknown secret key"))?;
    if let Some(id) = header(h, &names.application_id) {
        if id != app.application_id.as_str() {
            return Err(AuthError::Unauthorized("app id and secret key disagree"));
        }
    }
    if app.safe_token.is_empty() {
        return Err(AuthError::Unauthorized("the app has no safe token"));
    }
    let with_body = signs_body(req.method, req.path);
    let signed = Signed {
        path: req.path,
        timestamp,
        safe_token: &app.safe_token,
        nonce,
        body: if with_body { req.body } else { b"" },
        sdk_version,
    };
    let upload = *req.method == Method::POST && is_upload_path(req.path);
    let pending = match upload {
        true if signed.verify_upload(sign) => None,
        true => Some(PendingSignature::new(&signed, sign)),
        false if signed.verify(sign) => None,
        false => return Err(AuthError::Unauthorized("bad signature")),
    };
    claim_nonce(cluster, &app.application_id, nonce, ts_ms.max(now)).await?;
    Ok((app, pending))
}

/// Records the nonce until the window in which its request could be replayed has passed;
/// a nonce already recorded is a replay.
async fn claim_nonce(
    cluster: &Cluster,
    app: &AppId,
    nonce: &str,
    from_ms: i64,
) -> Result<(), AuthError> {
    let group = cluster.app_record_group(Namespace::Nonce, app, nonce);
    let expires = from_ms + FRESHNESS_MS + 1_000;
    match cluster
        .insert_record(
            group,
            Namespace::Nonce,
            &format!("{app}/{nonce}"),
            json!(from_ms),
            Some(expires),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(ClusterError::Conflict(_)) => Err(AuthError::Unauthorized("replayed nonce")),
        Err(e) => Err(AuthError::Cluster(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brand_sets_header_names() {
        let h = HeaderNames::for_brand("Bmob").unwrap();
        assert_eq!(h.application_id.as_str(), "x-bmob-application-id");
        assert_eq!(h.rest_key.as_str(), "x-bmob-rest-api-key");
        assert_eq!(h.safe_sign.as_str(), "x-bmob-safe-sign");
        assert_eq!(h.email.as_str(), "x-bmob-email");
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
    }
}
