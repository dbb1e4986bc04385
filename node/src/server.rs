//! The HTTP server: the middleware stack (path normalization: trailing slashes and system-class
//! aliases; CORS for requests with an `Origin`; the `edge` layer: a request id, its log span and
//! the body read under its limits; per-route latency metrics) around `api::routes()`, served by
//! `connections` until shutdown.
//!
//! The finished router is also handed to `AppState::router`, through which `/1/batch` runs its
//! operations.

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{header, HeaderName, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures::future::Either;
use tower::{Layer, ServiceExt};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::api::error::{closing, CommonError};
use crate::body_budget::{BodyBudget, Held, DRAIN_BYTES};
use crate::connections::ConnectionLimits;
use crate::paths::normalize_path;

use crate::api::{self, context::AppState};

/// Requests slower than this are logged (they are also in the latency histogram).
const SLOW_REQUEST: std::time::Duration = std::time::Duration::from_secs(5);

async fn observe(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let at_ms = chrono::Utc::now().timestamp_millis();
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let app = req
        .headers()
        .get(&state.headers.application_id)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let client = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip().to_string());
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    let took = started.elapsed();
    if took >= SLOW_REQUEST {
        tracing::warn!(%method, %route, %status, "slow request: {:.1} s", took.as_secs_f64());
    }
    crate::request_log::record(crate::request_log::RequestEntry {
        at_ms,
        app,
        method: method.clone(),
        route: route.clone(),
        status,
        latency_ms: took.as_secs_f64() * 1000.0,
        client,
        request_id: basalt_cluster::request_id::current().unwrap_or_default(),
    });
    metrics::histogram!("basalt_http_request_seconds", "method" => method, "route" => route, "status" => status.to_string())
        .record(took.as_secs_f64());
    resp
}

const REQUEST_ID_HEADER: &str = basalt_cluster::request_id::METADATA_KEY;

/// The id of one request: the client's `X-Request-Id` when it is short and plain, else a random
/// one. Every log line of the request carries it (a `request` span) and the answer repeats it.
fn request_id_of(req: &Request) -> String {
    req.headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|s| basalt_cluster::request_id::is_plain(s))
        .map(str::to_string)
        .unwrap_or_else(|| format!("{:016x}", rand::random::<u64>()))
}

pub fn app(state: AppState) -> Router {
    let limit = state.max_body_bytes;
    let router = api::routes(state.clone())
        .route_layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(DefaultBodyLimit::max(limit));
    let _ = state.router.set(router.clone());
    router
}

/// The body limits every request is read under.
#[derive(Clone)]
struct BodyRules {
    max_bytes: usize,
    deadline: std::time::Duration,
    budget: BodyBudget,
}

/// The outermost layer of every request: gives it an id and a `request` log span (the answer
/// repeats the id in `X-Request-Id`), and reads its whole body within the deadline (408) and
/// the size limit (413) before any handler runs. One layer rather than two: each layer costs
/// every request a clone of the service below it.
async fn edge(
    axum::extract::State(rules): axum::extract::State<BodyRules>,
    req: Request,
    next: Next,
) -> Response {
    let id = request_id_of(&req);
    let span = tracing::info_span!("request", id = %id);
    // The id also travels with the work this request forwards to other nodes.
    let work = basalt_cluster::request_id::scope(id.clone(), read_body_then(rules, req, next));
    let mut resp = tracing::Instrument::instrument(work, span).await;
    if let Ok(v) = axum::http::HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    resp
}

/// How reading a request's body ended.
enum BodyRead {
    Whole(bytes::Bytes),
    /// Over the limit; `drained`: the client sent its whole body, which was dropped.
    TooLarge {
        drained: bool,
    },
    /// The connection failed in the middle of the body.
    Broken,
    /// The node's budget of request memory stayed spent (`body_budget`).
    Spent,
}

/// Reads `body` whole when it fits in `max` bytes; past that, drops what follows (up to
/// `DRAIN_BYTES`). `seen` counts the bytes read, also when the read is cut short.
async fn read_limited(
    body: axum::body::Body,
    max: usize,
    seen: &mut usize,
    budget: &BodyBudget,
    held: &mut Held,
) -> BodyRead {
    let mut frames = body.into_data_stream();
    let mut buf = bytes::BytesMut::new();
    while let Some(chunk) = futures::StreamExt::next(&mut frames).await {
        let Ok(chunk) = chunk else {
            return BodyRead::Broken;
        };
        *seen = seen.saturating_add(chunk.len());
        if *seen <= max && budget.hold(held, *seen).await.is_err() {
            return BodyRead::Spent;
        }
        if *seen <= max {
            buf.extend_from_slice(&chunk);
        } else if *seen - max > DRAIN_BYTES {
            return BodyRead::TooLarge { drained: false };
        } else if !buf.is_empty() {
            buf = bytes::BytesMut::new();
        }
    }
    if *seen > max {
        BodyRead::TooLarge { drained: true }
    } else {
        BodyRead::Whole(buf.freeze())
    }
}

/// A 413 after which the connection closes, since part of the body may still be unread.
fn too_large_closing(max: usize) -> Response {
    closing(CommonError::BodyTooLarge(max).into_response())
}

async fn read_body_then(rules: BodyRules, req: Request, next: Next) -> Response {
    // Most reads carry no body: nothing to wait for. A file upload's body streams to its
    // handler, which reads it under the file limits (`files::store`).
    if axum::body::HttpBody::size_hint(req.body()).exact() == Some(0)
        || (req.method() == Method::POST && crate::auth::is_upload_path(req.uri().path()))
    {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let declared = axum::body::HttpBody::size_hint(&body).exact();
    if let Some(len) = declared.filter(|&n| n > rules.max_bytes as u64) {
        // A client that waits for `100 Continue` has sent nothing yet: refuse at once. So too
        // when even draining the body would not let it read the answer.
        let waits = parts
            .headers
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if waits || len - rules.max_bytes as u64 > DRAIN_BYTES as u64 {
            return too_large_closing(rules.max_bytes);
        }
    }
    // The body's share of the node's request memory, for as long as the request runs.
    let mut held = Held::default();
    let expected = declared.map_or(0, |n| n.min(rules.max_bytes as u64) as usize);
    if rules.budget.hold(&mut held, expected).await.is_err() {
        return closing(spent());
    }
    let mut seen = 0usize;
    let read = read_limited(body, rules.max_bytes, &mut seen, &rules.budget, &mut held);
    let bytes = match tokio::time::timeout(rules.deadline, read).await {
        Ok(BodyRead::Whole(b)) => b,
        Ok(BodyRead::TooLarge { drained: true }) => {
            return CommonError::BodyTooLarge(rules.max_bytes).into_response()
        }
        Ok(BodyRead::TooLarge { drained: false }) => return too_large_closing(rules.max_bytes),
        Ok(BodyRead::Broken) => {
            return CommonError::InvalidBody("the request body ended early.".into()).into_response()
        }
        Ok(BodyRead::Spent) => return closing(spent()),
        // Already over the limit: that is the answer, whatever the rest would have been.
        Err(_) if seen > rules.max_bytes => return too_large_closing(rules.max_bytes),
        Err(_) => return CommonError::BodyTimeout(rules.deadline.as_secs()).into_response(),
    };
    let resp = next
        .run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await;
    drop(held);
    resp
}

/// The 503 of a request the node's body budget had no room for.
fn spent() -> Response {
    metrics::counter!("basalt_requests_shed_total", "reason" => "body_memory").increment(1);
    CommonError::Overloaded(
        "the node is reading as many request bodies as its memory allows; retry shortly.".into(),
    )
    .into_response()
}

/// The console API (app management): no browser origin may call it.
fn is_console_path(path: &str) -> bool {
    path == "/1/apps" || path.starts_with("/1/apps/")
}

/// CORS: preflights of the app-key API are answered for any origin, with the app headers of
/// the configured brand allowed (an app that lists `allowedOrigins` refuses other origins when
/// the request itself arrives: `api::context`); the console API answers no origin.
fn cors(state: &AppState) -> CorsLayer {
    let h = &state.headers;
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(|_origin, parts| {
            !is_console_path(parts.uri.path())
        }))
        .allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
        .allow_headers([
            header::CONTENT_TYPE,
            HeaderName::from_static("x-requested-with"),
            HeaderName::from_static(REQUEST_ID_HEADER),
            h.application_id.clone(),
            h.rest_key.clone(),
            h.master_key.clone(),
            h.session_token.clone(),
            h.sdk_type.clone(),
            h.sdk_version.clone(),
            h.safe_timestamp.clone(),
            h.noncestr_key.clone(),
            h.secret_key.clone(),
            h.safe_sign.clone(),
        ])
        .expose_headers([
            header::LOCATION,
            header::RETRY_AFTER,
            HeaderName::from_static(REQUEST_ID_HEADER),
            HeaderName::from_static("x-basalt-version"),
            HeaderName::from_static("x-basalt-group"),
        ])
        .max_age(std::time::Duration::from_secs(86_400))
}

/// Serves HTTP (HTTPS with `tls`) on `listener` under `limits` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: ConnectionLimits,
    tls: Option<std::sync::Arc<crate::https::ServingTls>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let cors = cors(&state);
    let rules = BodyRules {
        max_bytes: state.max_body_bytes,
        deadline: limits.body_read,
        budget: state.body_budget.clone(),
    };
    let app = app(state).layer(middleware::from_fn_with_state(rules, edge));
    // CORS only concerns browsers, which always send `Origin`; other clients skip its layer.
    let with_cors = cors.layer(app.clone());
    let service = tower::service_fn(move |req: Request| {
        let req = normalize_path(req);
        if req.headers().contains_key(header::ORIGIN) {
            Either::Left(with_cors.clone().oneshot(req))
        } else {
            Either::Right(app.clone().oneshot(req))
        }
    });
    crate::connections::serve(listener, service, limits, tls, shutdown).await
}
