//! The HTTP server: the middleware stack (per-route latency metrics, body limit) around
//! `api::routes()`, served until shutdown.

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;

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

pub fn app(state: AppState) -> Router {
    let limit = state.max_body_bytes;
    api::routes(state)
        .route_layer(middleware::from_fn(observe))
        .layer(DefaultBodyLimit::max(limit))
}

/// Serves HTTP on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
