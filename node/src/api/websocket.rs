//! The WebSocket upgrade of an HTTP/1.1 request (RFC 6455 §4.2), done here rather than by
//! axum's extractor so that the realtime transports write through `tokio-tungstenite` itself
//! and can send a large message as fragments (axum's `WebSocket` lets no frame through).
//! Neighbours: `api::realtime` (its only user); the node's HTTP server (`connections`) keeps
//! upgrades on HTTP/1.1 connections possible.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Version};
use axum::response::Response;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

/// A served WebSocket.
pub type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// A request's WebSocket upgrade: `Err` says why the request is none.
pub struct Upgrade(Result<Handshake, &'static str>);

pub struct Handshake {
    key: HeaderValue,
    on_upgrade: OnUpgrade,
}

fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

fn handshake(parts: &mut Parts) -> Result<Handshake, &'static str> {
    if parts.method != Method::GET || parts.version > Version::HTTP_11 {
        return Err("a WebSocket upgrade is an HTTP/1.1 GET");
    }
    if !has_token(&parts.headers, header::CONNECTION, "upgrade")
        || !has_token(&parts.headers, header::UPGRADE, "websocket")
    {
        return Err("the request asks for no WebSocket upgrade");
    }
    if parts
        .headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return Err("Sec-WebSocket-Version must be 13");
    }
    let key = parts
        .headers
        .get(header::SEC_WEBSOCKET_KEY)
        .cloned()
        .ok_or("Sec-WebSocket-Key is missing")?;
    let on_upgrade = parts
        .extensions
        .remove::<OnUpgrade>()
        .ok_or("the connection cannot be upgraded")?;
    Ok(Handshake { key, on_upgrade })
}

impl<S: Send + Sync> FromRequestParts<S> for Upgrade {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Upgrade(handshake(parts)))
    }
}

impl Upgrade {
    /// The handshake, or why the request is no upgrade.
    pub fn handshake(self) -> Result<Handshake, &'static str> {
        self.0
    }
}

impl Handshake {
    /// Answers `101 Switching Protocols` and, once the client has it, serves the socket with
    /// `serve` (on its own task).
    pub fn accept<F, Fut>(self, config: WebSocketConfig, serve: F) -> Response
    where
        F: FnOnce(Socket) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let accept = derive_accept_key(self.key.as_bytes());
        let on_upgrade = self.on_upgrade;
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(upgraded) => {
                    let io = TokioIo::new(upgraded);
                    let socket =
                        WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
                    serve(socket).await;
                }
                Err(e) => tracing::debug!(error = %e, "websocket: the upgrade failed"),
            }
        });
        let mut response = Response::new(axum::body::Body::empty());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        if let Ok(v) = HeaderValue::from_str(&accept) {
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, v);
        }
        response
    }
}
