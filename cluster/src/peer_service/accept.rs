//! Accepting peer connections: TCP_NODELAY on every socket, then, with peer TLS, the mutual
//! TLS handshake — each on a task of its own, so a slow or silent client holds nothing but its
//! own place. Handshakes in progress are bounded per node and per client address and must end
//! within `HANDSHAKE_TIMEOUT`; connections beyond the bounds are closed at once. Only finished
//! handshakes whose certificate names an identity (`tls::identity`) reach the gRPC server
//! (`peer_service::serve`), as a [`PeerConn`] that hands each request that identity: the
//! certificate is read once per connection, not per request.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;

use crate::tls::identity::identity_of;
use crate::tls::{PeerIdentity, PeerTls};

/// Who the other end of a peer connection proved to be: what every request on it carries
/// (tonic's connection info; `authorize` reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerInfo {
    pub identity: PeerIdentity,
}

/// A peer connection after its mutual TLS handshake, with the identity its certificate names.
pub struct PeerConn {
    io: TlsStream<TcpStream>,
    info: PeerInfo,
}

impl tonic::transport::server::Connected for PeerConn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info
    }
}

impl tokio::io::AsyncRead for PeerConn {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for PeerConn {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// How long a client has to finish its TLS handshake (a peer on any sane network takes
/// milliseconds).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Handshakes in progress at once on a node.
pub const MAX_HANDSHAKES: usize = 256;
/// Handshakes in progress at once from one client address (an IPv6 client: from its /64,
/// which one holder commonly has whole).
pub const MAX_HANDSHAKES_PER_IP: usize = 16;

/// The address handshakes are counted under: an IPv4 address, or an IPv6 address's /64.
fn counted_as(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::from([s[0], s[1], s[2], s[3], 0, 0, 0, 0])
            }
        },
    }
}

/// Accepted TCP connections, with TCP_NODELAY (the builder's setting only applies to
/// listeners it binds: without it, small Raft messages wait for delayed ACKs, ~40 ms).
pub fn plain(
    listener: TcpListener,
) -> impl Stream<Item = std::io::Result<TcpStream>> + Send + 'static {
    use futures::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        conn.inspect(|stream| {
            let _ = stream.set_nodelay(true);
        })
    })
}

/// Handshakes in progress, per node and per client address.
#[derive(Default)]
struct InProgress {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// One handshake's place; given back when dropped.
struct Place {
    open: Arc<Mutex<InProgress>>,
    ip: IpAddr,
}

impl Place {
    fn take(open: &Arc<Mutex<InProgress>>, ip: IpAddr) -> Option<Place> {
        let mut o = open.lock().unwrap_or_else(|p| p.into_inner());
        let mine = o.per_ip.get(&ip).copied().unwrap_or(0);
        if o.total >= MAX_HANDSHAKES || mine >= MAX_HANDSHAKES_PER_IP {
            return None;
        }
        o.total += 1;
        o.per_ip.insert(ip, mine + 1);
        Some(Place {
            open: Arc::clone(open),
            ip,
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut o = self.open.lock().unwrap_or_else(|p| p.into_inner());
        o.total = o.total.saturating_sub(1);
        if let Some(n) = o.per_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                o.per_ip.remove(&self.ip);
            }
        }
    }
}

fn handshake_failed(reason: &'static str) {
    metrics::counter!("basalt_peer_handshakes_failed_total", "reason" => reason).increment(1);
}

/// Whether a refused handshake may be logged now: at most one line a second, so a stranger
/// knocking cannot fill the log (the metric counts them all).
fn may_log() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0);
    LAST.swap(now, Ordering::Relaxed) != now
}

/// Connections that finished the mutual TLS handshake with a certificate of the cluster's CA
/// naming an identity. The accepting task ends with the listener's stream (when the server
/// drops it).
pub fn mutual_tls(
    listener: TcpListener,
    tls: Arc<PeerTls>,
) -> impl Stream<Item = std::io::Result<PeerConn>> + Send + 'static {
    let (tx, rx) = mpsc::channel::<std::io::Result<PeerConn>>(64);
    tokio::spawn(async move {
        let open = Arc::new(Mutex::new(InProgress::default()));
        loop {
            let (tcp, peer) = tokio::select! {
                () = tx.closed() => return,
                accepted = listener.accept() => match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!("accepting a peer connection: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Some(place) = Place::take(&open, counted_as(peer.ip())) else {
                handshake_failed("busy");
                drop(tcp);
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
            let tx = tx.clone();
            tokio::spawn(async move {
                let _place = place;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let named = stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|certs| certs.first())
                            .map(|leaf| identity_of(leaf));
                        match named {
                            Some(Ok(identity)) => {
                                let conn = PeerConn {
                                    io: stream,
                                    info: PeerInfo { identity },
                                };
                                let _ = tx.send(Ok(conn)).await;
                            }
                            // A certificate of the CA that names no identity: nobody.
                            _ => {
                                handshake_failed("no identity");
                                if may_log() {
                                    tracing::warn!(%peer, "peer certificate names no identity: refused");
                                }
                            }
                        }
                    }
                    Ok(Err(e)) => {
                        handshake_failed("refused");
                        if may_log() {
                            tracing::warn!(%peer, "peer TLS handshake refused: {e}");
                        }
                    }
                    Err(_) => {
                        handshake_failed("timeout");
                        tracing::debug!(%peer, "peer TLS handshake timed out");
                    }
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
