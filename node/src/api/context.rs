//! Request context: the shared state of the HTTP server, the authentication middleware of app
//! requests (which stores an `auth::RequestCtx` for the handlers), the console-account
//! extractor of app management, and extractors that answer malformed input with API codes.
//!
//! A signed (encrypted-mode) request's body is part of its signature, so the middleware reads
//! it, within the body limit, before the handler runs and hands it on unchanged — except a
//! file upload's, whose signature leaves the body out and whose bytes stream to the handler.

use std::sync::{Arc, OnceLock};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use basalt_cluster::names::{ClassName, ObjectId};
use basalt_cluster::Cluster;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::error::{ApiError, CommonError, ObjectsApiError};
use crate::auth::{self, header, AuthError};
pub use crate::auth::{HeaderNames, RequestCtx};

/// The shared state of the HTTP server; cloned for every extractor of every request, so it is
/// one reference-counted pointer to [`Shared`].
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub struct Shared {
    pub cluster: Cluster,
    pub headers: HeaderNames,
    pub max_body_bytes: usize,
    /// The finished router, for `/1/batch` and functions' data calls to run their requests
    /// through (set once at start).
    pub router: Arc<OnceLock<Router>>,
    /// Where emailed links go (SMTP relay or the dev outbox).
    pub mailer: Arc<dyn crate::mail::Mailer>,
    /// Where SMS go (webhook or the dev outbox).
    pub sms: Arc<dyn crate::sms::provider::SmsProvider>,
    /// The base URL of links in mails, captcha pictures and stored files (`--public-url`).
    pub public_url: String,
    /// How stored files are named and bounded.
    pub files: crate::files::FilesConfig,
    /// Per-client-IP attempt counts of this node (logins, SMS, mails).
    pub limiter: crate::throttle::IpLimiter,
    /// Per-app request rates of this node (`requestsPerSecond`).
    pub rates: crate::app_rate::AppRates,
    /// The node's memory for request bodies in flight, and each app's share of it.
    pub body_budget: crate::body_budget::BodyBudget,
    /// Each app's stored bytes as this node last read them, for storage quotas.
    pub storage_quotas: crate::storage_quota::StorageQuotas,
    /// Verifies third-party `authData` with its platform.
    pub identity: crate::users::third_party::providers::IdentityProviders,
    /// Each app's role graph as this node's metadata replica holds it.
    pub roles: Arc<crate::users::roles::RoleGraphs>,
    /// Thumbnails and watermarks of stored images, with this node's cache of them.
    pub images: crate::files::images::Images,
    /// Runs cloud functions for callers (on this node's slots for them).
    pub functions: crate::functions::invoke::Invoker,
    /// What realtime connections work with (this node's hub among them).
    pub realtime: crate::realtime::connection::Services,
    /// The bearer token operator routes (`/metrics`) ask of callers (`--metrics-token`);
    /// without one they answer only callers on the node's own machine.
    pub metrics_token: Option<String>,
    /// Where backups go (`--backup-to`), also those the console asks for.
    pub backups: Option<crate::backups::BackupSchedule>,
    /// Whether the node is draining before it stops (`drain`).
    pub drain: crate::drain::DrainState,
}

/// What the API hands work to besides the cluster: the services outside the node it talks to,
/// and the runner of cloud functions.
pub struct Outside {
    pub mailer: Arc<dyn crate::mail::Mailer>,
    pub sms: Arc<dyn crate::sms::provider::SmsProvider>,
    pub identity: crate::users::third_party::providers::IdentityProviders,
    pub functions: crate::functions::runner::Runner,
    /// Where backups go (`--backup-to`), also those the console asks for.
    pub backups: Option<crate::backups::BackupSchedule>,
}

/// What bounds clients of the node: per-IP limits, and the token of operator routes.
pub struct Guards {
    pub ip_limits: crate::throttle::IpLimits,
    /// `--request-memory-mb`, in bytes (`body_budget`).
    pub body_memory: usize,
    /// `--metrics-token`.
    pub metrics_token: Option<String>,
}

impl AppState {
    pub fn new(
        cluster: Cluster,
        headers: HeaderNames,
        max_body_bytes: usize,
        outside: Outside,
        public_url: String,
        files: crate::files::FilesConfig,
        guards: Guards,
    ) -> Self {
        let roles: Arc<crate::users::roles::RoleGraphs> = Default::default();
        let realtime = crate::realtime::connection::Services {
            cluster: cluster.clone(),
            roles: Arc::clone(&roles),
            hub: crate::realtime::hub::Hub::new(cluster.clone()),
        };
        let router: Arc<OnceLock<Router>> = Default::default();
        let functions = crate::functions::invoke::Invoker::new(
            outside.functions,
            cluster.clone(),
            Arc::clone(&roles),
            Arc::clone(&router),
        );
        AppState(Arc::new(Shared {
            cluster,
            headers,
            max_body_bytes,
            router,
            mailer: outside.mailer,
            sms: outside.sms,
            public_url,
            files,
            limiter: crate::throttle::IpLimiter::new(guards.ip_limits),
            rates: Default::default(),
            storage_quotas: Default::default(),
            body_budget: crate::body_budget::BodyBudget::new(guards.body_memory),
            identity: outside.identity,
            roles,
            images: Default::default(),
            functions,
            realtime,
            metrics_token: guards.metrics_token,
            backups: outside.backups,
            drain: Default::default(),
        }))
    }
}

/// Middleware of operator routes (`/metrics`): the bearer token of `--metrics-token` when the
/// node has one, else a caller on the node's own machine (a loopback peer address; a reverse
/// proxy on the same machine makes every client one: give a token then). Refused: 401.
pub async fn require_operator(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let allowed = match state.metrics_token.as_deref().filter(|t| !t.is_empty()) {
        Some(token) => req
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|sent| crate::auth::same_secret(sent.trim(), token)),
        None => req
            .extensions()
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .is_some_and(|c| c.0.ip().is_loopback()),
    };
    match allowed {
        true => next.run(req).await,
        false => CommonError::Unauthorized.into_response(),
    }
}

/// Middleware of app data routes: authenticates with app keys or a signature.
pub async fn require_app(State(state): State<AppState>, req: Request, next: Next) -> Response {
    authenticated(state, req, next, false).await
}

/// Middleware of routes the console account or an app's master key may read (`/admin/logs`):
/// with the console account's email and password headers, the account (`ConsoleAccount` in the
/// extensions: every app); otherwise as `require_master` (the app of its `RequestCtx` only).
pub async fn require_master_or_console(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if !req.headers().contains_key(&state.headers.email) {
        return authenticated(state, req, next, true).await;
    }
    let (mut parts, body) = req.into_parts();
    match ConsoleAccount::from_request_parts(&mut parts, &state).await {
        Ok(account) => {
            parts.extensions.insert(account);
            next.run(Request::from_parts(parts, body)).await
        }
        Err(refused) => refused.into_response(),
    }
}

/// Middleware of master-key routes (schemas): as `require_app`, plus the master key (10061).
pub async fn require_master(State(state): State<AppState>, req: Request, next: Next) -> Response {
    authenticated(state, req, next, true).await
}

async fn authenticated(state: AppState, req: Request, next: Next, need_master: bool) -> Response {
    // A batch operation runs with its batch's already-authenticated context.
    if let Some(ctx) = req.extensions().get::<RequestCtx>() {
        if need_master && !ctx.master {
            return CommonError::MasterKeyRequired.into_response();
        }
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let (ctx, body) = match authenticate_parts(&state, &parts, body, need_master).await {
        Ok(admitted) => admitted,
        Err(refused) => return refused.into_response(),
    };
    // The app's share of the node's request memory, for as long as the request runs: one
    // app's large bodies in flight cannot take the room of all.
    let body_bytes = axum::body::HttpBody::size_hint(&body).exact().unwrap_or(0) as usize;
    let _share = match hold_app_share(&state, &ctx, body_bytes).await {
        Ok(share) => share,
        Err(refused) => return refused.into_response(),
    };
    parts.extensions.insert(ctx);
    next.run(Request::from_parts(parts, body)).await
}

/// Authenticates a request from its parts (and, when signed over its body, the body, read
/// within the limit and handed back whole), then admits it: the app enabled, the browser's
/// origin allowed, the app's request rate not exceeded.
async fn authenticate_parts(
    state: &AppState,
    parts: &Parts,
    body: Body,
    need_master: bool,
) -> Result<(RequestCtx, Body), ApiError> {
    let signed = auth::is_signed(&state.headers, &parts.headers);
    let sent = parts
        .extensions
        .get::<crate::paths::SentPath>()
        .map(|p| p.0.clone());
    let path = sent.as_deref().unwrap_or(parts.uri.path());
    let (bytes, body) = if signed && auth::signs_body(&parts.method, path) {
        match axum::body::to_bytes(body, state.max_body_bytes).await {
            Ok(b) => (b, None),
            Err(_) => return Err(CommonError::BodyTooLarge(state.max_body_bytes).into()),
        }
    } else {
        (Bytes::new(), Some(body))
    };
    let creds = auth::Request {
        method: &parts.method,
        path,
        headers: &parts.headers,
        body: &bytes,
    };
    let ctx = match auth::authenticate(&state.cluster, &state.headers, &creds, need_master).await {
        Ok(ctx) => ctx,
        Err(AuthError::Unauthorized(why)) => {
            tracing::debug!(reason = why, path = parts.uri.path(), "unauthorized");
            return Err(CommonError::Unauthorized.into());
        }
        Err(e) => return Err(e.into()),
    };
    admit(&ctx, &parts.headers)?;
    take_app_rate(state, &ctx)?;
    Ok((ctx, body.unwrap_or_else(|| Body::from(bytes))))
}

/// Counts a request against its app's `requestsPerSecond` (this node's share of it): 429 when
/// the app is over.
fn take_app_rate(state: &AppState, ctx: &RequestCtx) -> Result<(), ApiError> {
    let Some(per_second) = ctx.app.requests_per_second else {
        return Ok(());
    };
    let members = state.cluster.active_members().len();
    let app = ctx.app.application_id.as_str();
    if let Err(retry_after_secs) = state.rates.take(app, per_second, members) {
        metrics::counter!("basalt_app_requests_limited_total").increment(1);
        return Err(CommonError::AppRateExceeded {
            per_second,
            retry_after_secs,
        }
        .into());
    }
    Ok(())
}

/// Holds the app's share of the node's request memory for a body of `body_bytes` (none for a
/// body of unknown size; 503 when the app's bodies in flight already take its share).
async fn hold_app_share(
    state: &AppState,
    ctx: &RequestCtx,
    body_bytes: usize,
) -> Result<Option<crate::body_budget::Held>, ApiError> {
    if body_bytes == 0 {
        return Ok(None);
    }
    let app = ctx.app.application_id.as_str();
    match state.body_budget.hold_for_app(app, body_bytes).await {
        Ok(held) => Ok(Some(held)),
        Err(_) => {
            metrics::counter!("basalt_requests_shed_total", "reason" => "app_memory").increment(1);
            Err(CommonError::Overloaded(
                "this app has as many request bodies in flight on this node as its share \
                 allows; retry shortly."
                    .into(),
            )
            .into())
        }
    }
}

/// True when a browser at `origin` may call the app (it lists no `allowedOrigins`, lists `*`,
/// or lists the origin).
/// Refuses an authenticated request of a disabled app (10008), or from a browser origin the app
/// does not allow (403).
pub fn admit(ctx: &RequestCtx, headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    if ctx.app.status == 0 {
        return Err(CommonError::AppDisabled.into());
    }
    if let Some(origin) = headers.get(axum::http::header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !ctx.app.allows_origin(origin) {
            return Err(CommonError::OriginNotAllowed(origin.to_string()).into());
        }
    }
    Ok(())
}

impl<S: Send + Sync> FromRequestParts<S> for RequestCtx {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<RequestCtx>()
            .cloned()
            .ok_or_else(|| ApiError::internal("route without authentication middleware"))
    }
}

/// A console account authenticated by `X-<Brand>-Email` / `X-<Brand>-Password`.
#[derive(Debug, Clone)]
pub struct ConsoleAccount {
    pub email: String,
}

impl FromRequestParts<AppState> for ConsoleAccount {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        use crate::throttle::{self, ClientIp, IpKind};
        let Ok(ClientIp(ip)) = ClientIp::from_request_parts(parts, state).await;
        let email =
            header(&parts.headers, &state.headers.email).ok_or(CommonError::Unauthorized)?;
        let password =
            header(&parts.headers, &state.headers.password).ok_or(CommonError::Unauthorized)?;
        let console_throttled = |e: throttle::ThrottleError| match e {
            throttle::ThrottleError::Throttled {
                retry_after_secs, ..
            } => ApiError::from(CommonError::ConsoleThrottled { retry_after_secs }),
            other => other.into(),
        };
        state
            .limiter
            .take(IpKind::Login, ip)
            .map_err(console_throttled)?;
        let key = format!("console/{}", email.to_lowercase());
        // A console account has no captcha: past its cluster-wide allowance only the addresses
        // it logged in from lately may try (`throttle::take_login`).
        let attempt = throttle::take_login(&state.cluster, "console login", &key, ip, false)
            .await
            .map_err(|refusal| match refusal {
                throttle::LoginRefusal::Throttled(e) => console_throttled(e),
                throttle::LoginRefusal::ProofNeeded => {
                    ApiError::from(CommonError::ConsoleThrottled {
                        retry_after_secs: 900,
                    })
                }
            })?;
        if crate::apps::verify_account(&state.cluster, email, password).await? {
            state.limiter.refund(IpKind::Login, ip);
            attempt.succeeded(&state.cluster).await;
            Ok(ConsoleAccount {
                email: email.to_string(),
            })
        } else {
            Err(CommonError::Unauthorized.into())
        }
    }
}

/// Path parameters; a path that does not decode answers 107 instead of axum's plain text.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| ApiPath(t))
            .map_err(|e| {
                ApiError::from(CommonError::InvalidBody(format!(
                    "invalid request path: {}",
                    e.body_text()
                )))
            })
    }
}

/// `…/<class>`: a user class, checked (103). Handlers take `ApiQuery` before any of these path
/// extractors, so a query string that does not decode answers 102 first.
pub struct ClassPath(pub ClassName);

impl<S: Send + Sync> FromRequestParts<S> for ClassPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let ApiPath(class) = ApiPath::<String>::from_request_parts(parts, state).await?;
        Ok(ClassPath(ClassName::user(&class)?))
    }
}

/// `/1/schemas/<class>…`: a user class or a system class, checked (103).
pub struct SchemaPath(pub ClassName);

impl<S: Send + Sync> FromRequestParts<S> for SchemaPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let ApiPath(class) = ApiPath::<String>::from_request_parts(parts, state).await?;
        Ok(SchemaPath(ClassName::user_or_system(&class)?))
    }
}

/// `…/<class>/<objectId>`: the class checked first (103), then the id (101: an id that cannot
/// exist is simply not found, and never reaches the key layout).
pub struct ObjectPath(pub ClassName, pub ObjectId);

impl<S: Send + Sync> FromRequestParts<S> for ObjectPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let ApiPath((class, id)) =
            ApiPath::<(String, String)>::from_request_parts(parts, state).await?;
        let class = ClassName::user(&class)?;
        Ok(ObjectPath(class, object_id(&id)?))
    }
}

/// `…/<objectId>` of a system class (users, roles): the id checked (101).
pub struct IdPath(pub ObjectId);

impl<S: Send + Sync> FromRequestParts<S> for IdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let ApiPath(id) = ApiPath::<String>::from_request_parts(parts, state).await?;
        Ok(IdPath(object_id(&id)?))
    }
}

/// An objectId from a path: 101 when no object can have it.
fn object_id(id: &str) -> Result<ObjectId, ApiError> {
    ObjectId::parse(id)
        .ok_or_else(|| ApiError::from(CommonError::ObjectNotFound(id.chars().take(64).collect())))
}

/// Query parameters; a query string that does not decode answers 102.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(t)| ApiQuery(t))
            .map_err(|e| {
                ApiError::from(ObjectsApiError::InvalidQuery(format!(
                    "invalid query string: {}",
                    e.body_text()
                )))
            })
    }
}

/// The body of a request, or the documented error for one over the limit.
fn body_bytes(body: Result<Bytes, BytesRejection>, state: &AppState) -> Result<Bytes, ApiError> {
    body.map_err(|r| match r.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::from(CommonError::BodyTooLarge(state.max_body_bytes))
        }
        _ => ApiError::from(CommonError::InvalidBody(r.body_text())),
    })
}

/// A request body, read within the body limit (413). Handlers parse it where their own checks
/// put it (`object()`), so a bad body never answers before, say, a missing session.
pub struct ApiBody(pub Bytes);

impl axum::extract::FromRequest<AppState> for ApiBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await;
        body_bytes(bytes, state).map(ApiBody)
    }
}

impl ApiBody {
    /// The body as a JSON object (107 when empty, malformed, nested too deeply or not an
    /// object).
    pub fn object(&self) -> Result<Map<String, Value>, ApiError> {
        json_object(&self.0)
    }
}

/// Levels of objects and arrays a request body may nest (an object's own values are limited
/// further by `basalt_cluster::limits`; a batch nests its operations' bodies 3 levels down).
pub const MAX_BODY_DEPTH: usize = 100;
/// Items (values and member names) a request body may hold in all: parsed, each costs tens of
/// bytes whatever its text.
pub const MAX_BODY_ITEMS: usize = 200_000;
/// Elements one array of a request body may hold.
pub const MAX_BODY_ARRAY: usize = 100_000;

/// Parses a request body that must be a JSON object (107 otherwise).
pub fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(CommonError::EmptyBody.into());
    }
    let limits = crate::json_text::TextLimits {
        max_depth: MAX_BODY_DEPTH,
        max_items: MAX_BODY_ITEMS,
        max_array: MAX_BODY_ARRAY,
    };
    crate::json_text::check_sized(body, limits)
        .map_err(|e| CommonError::InvalidBody(format!("{e}.")))?;
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(CommonError::InvalidBody("the body must be a JSON object.".into()).into()),
        Err(e) => Err(CommonError::InvalidBody(format!("invalid JSON: {e}")).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_must_be_json_objects() {
        assert!(matches!(
            json_object(b""),
            Err(ApiError::Common(CommonError::EmptyBody))
        ));
        assert!(matches!(
            json_object(b"  \n"),
            Err(ApiError::Common(CommonError::EmptyBody))
        ));
        assert!(matches!(
            json_object(b"{bad"),
            Err(ApiError::Common(CommonError::InvalidBody(_)))
        ));
        assert!(matches!(
            json_object(b"[1]"),
            Err(ApiError::Common(CommonError::InvalidBody(_)))
        ));
        assert!(json_object(br#"{"a":1}"#).is_ok());
    }
}
