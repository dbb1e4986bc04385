//! The HTTP server: the middleware stack (trailing-slash trimming, per-route latency metrics,
//! body limit) around `api::routes()`, served until shutdown.
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
    metrics::histogram!("basalt_http_request_seconds", "method" => method, "route" => route, "status" => status)
        .record(started.elapsed().as_secs_f64());
    resp
}

/// `/1/timestamp/` and `/1/classes/X/` address the same resources as without the slash
/// (decisions.md). Runs before routing.
fn trim_trailing_slash(mut req: Request) -> Request {
    let path = req.uri().path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
        let rebuilt = match req.uri().query() {
            Some(q) => format!("{trimmed}?{q}"),
            None => trimmed.to_string(),
        };
        if let Ok(uri) = rebuilt.parse::<Uri>() {
            *req.uri_mut() = uri;
        }
    }
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
    let service = tower::util::MapRequestLayer::new(trim_trailing_slash).layer(app(state));
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

    fn trimmed(uri: &str) -> String {
        let req = Request::builder()
            .uri(uri)
            .body(axum::body::Body::empty())
            .unwrap();
        trim_trailing_slash(req).uri().to_string()
    }

    #[test]
    fn trailing_slashes_are_trimmed_and_queries_kept() {
        assert_eq!(trimmed("/1/timestamp/"), "/1/timestamp");
        assert_eq!(trimmed("/1/classes/A//?limit=1"), "/1/classes/A?limit=1");
        assert_eq!(trimmed("/"), "/");
        assert_eq!(trimmed("/1/classes/A"), "/1/classes/A");
    }
}
