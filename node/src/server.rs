//! The HTTP server: the middleware stack (path normalization: trailing slashes and system-class
//! aliases; per-route latency metrics; body limit) around `api::routes()`, served until
//! shutdown.
//!
//! The finished router is also handed to `AppState::router`, through which `/1/batch` runs its
//! operations.

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::Uri;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use axum::ServiceExt;
use tower::Layer;

use crate::api::{self, context::AppState};

/// Requests slower than this are logged (they are also in the latency histogram).
const SLOW_REQUEST: std::time::Duration = std::time::Duration::from_secs(5);

async fn observe(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let resp = next.run(req).await;
    let status = resp.status().as_u16().to_string();
    let took = started.elapsed();
    if took >= SLOW_REQUEST {
        tracing::warn!(%method, %route, %status, "slow request: {:.1} s", took.as_secs_f64());
    }
    metrics::histogram!("basalt_http_request_seconds", "method" => method, "route" => route, "status" => status)
        .record(took.as_secs_f64());
    resp
}

/// The path a client sent, before `normalize_path` rewrote it (a signature covers it).
#[derive(Debug, Clone)]
pub struct SentPath(pub String);

/// System classes addressed as classes, and the endpoints they stand for (decisions.md).
const CLASS_ALIASES: [(&str, &str); 3] = [
    ("/1/classes/_User", "/1/users"),
    ("/1/classes/_Role", "/1/roles"),
    ("/1/classes/_Installation", "/1/installations"),
];

/// The path routed for a sent path: without trailing slashes (`/1/timestamp/`), and with
/// `/1/classes/_User[/<id>]` as `/1/users[/<id>]` (likewise `_Role`, `_Installation`).
pub fn routed_path(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
    for (alias, target) in CLASS_ALIASES {
        if let Some(rest) = trimmed.strip_prefix(alias) {
            if rest.is_empty() || rest.starts_with('/') {
                return format!("{target}{rest}");
            }
        }
    }
    trimmed.to_string()
}

/// Rewrites a request's path to its routed form (runs before routing), keeping the sent one.
fn normalize_path(mut req: Request) -> Request {
    let sent = req.uri().path().to_string();
    let routed = routed_path(&sent);
    if routed != sent {
        let rebuilt = match req.uri().query() {
            Some(q) => format!("{routed}?{q}"),
            None => routed,
        };
        if let Ok(uri) = rebuilt.parse::<Uri>() {
            *req.uri_mut() = uri;
        }
    }
    req.extensions_mut().insert(SentPath(sent));
    req
}

pub fn app(state: AppState) -> Router {
    let limit = state.max_body_bytes;
    let router = api::routes(state.clone())
        .route_layer(middleware::from_fn(observe))
        .layer(DefaultBodyLimit::max(limit));
    let _ = state.router.set(router.clone());
    router
}

/// Serves HTTP on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let service = tower::util::MapRequestLayer::new(normalize_path).layer(app(state));
    axum::serve(
        listener,
        <_ as ServiceExt<Request>>::into_make_service(service),
    )
    .with_graceful_shutdown(shutdown)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routed(uri: &str) -> String {
        let req = Request::builder()
            .uri(uri)
            .body(axum::body::Body::empty())
            .unwrap();
        normalize_path(req).uri().to_string()
    }

    #[test]
    fn trailing_slashes_are_trimmed_and_queries_kept() {
        assert_eq!(routed("/1/timestamp/"), "/1/timestamp");
        assert_eq!(routed("/1/classes/A//?limit=1"), "/1/classes/A?limit=1");
        assert_eq!(routed("/"), "/");
        assert_eq!(routed("/1/classes/A"), "/1/classes/A");
    }

    #[test]
    fn system_classes_are_aliases_of_their_endpoints() {
        assert_eq!(routed("/1/classes/_User"), "/1/users");
        assert_eq!(routed("/1/classes/_User/abc?x=1"), "/1/users/abc?x=1");
        assert_eq!(routed("/1/classes/_Role/r1"), "/1/roles/r1");
        assert_eq!(routed("/1/classes/_Installation/"), "/1/installations");
        assert_eq!(routed("/1/classes/_Users"), "/1/classes/_Users");
    }
}
