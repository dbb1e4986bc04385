//! Opening a connection to a peer over mutual TLS: TCP (from `--rpc-source-ip` when given, with
//! TCP_NODELAY), then a TLS handshake presenting this process's certificate and checking that
//! the peer's names the node it is dialed as (or, when that is not known, some node of the
//! cluster's CA). tonic's `Endpoint` uses a [`TlsDialer`] as its connector, so every channel,
//! stream and call to that peer rides the authenticated connection. `router` builds them.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;

use crate::tls::PeerTls;

/// A tonic connector that dials one peer over mutual TLS.
#[derive(Clone)]
pub struct TlsDialer {
    pub tls: Arc<PeerTls>,
    /// The name the peer's certificate must carry.
    pub name: ServerName<'static>,
    pub source_ip: Option<IpAddr>,
}

type Dialed = TokioIo<TlsStream<TcpStream>>;

impl tower::Service<http::Uri> for TlsDialer {
    type Response = Dialed;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Dialed>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let dialer = self.clone();
        Box::pin(async move {
            let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
            let port = uri.port_u16().unwrap_or(443);
            let tcp = connect_tcp(host, port, dialer.source_ip).await?;
            let connector = tokio_rustls::TlsConnector::from(dialer.tls.client_config());
            let tls = connector.connect(dialer.name.clone(), tcp).await?;
            Ok(TokioIo::new(tls))
        })
    }
}

/// A TCP connection to `host:port`, trying each address the host resolves to.
async fn connect_tcp(
    host: &str,
    port: u16,
    source_ip: Option<IpAddr>,
) -> std::io::Result<TcpStream> {
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        match connect_one(addr, source_ip).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{host} has no address"),
        )
    }))
}

async fn connect_one(addr: SocketAddr, source_ip: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    if let Some(ip) = source_ip {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    let stream = socket.connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}
