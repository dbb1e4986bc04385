//! Accepting HTTP connections with limits that stop one client from holding a node: a cap on
//! open connections per node and per client IP (a connection over either is closed at once), a
//! header-read timeout (a client sending its request head slowly is dropped), an idle timeout
//! for keep-alive connections between requests, and graceful shutdown (stop accepting, let
//! requests in flight finish).
//!
//! hyper serves each connection (HTTP/1.1, with upgrades to WebSockets, which keep the
//! connection's place: `ConnectionSlot`; with `--tls-cert` over TLS, where ALPN may pick
//! HTTP/2 — the handshake must end within the header-read timeout, and an HTTP/2 connection
//! carries at most `MAX_STREAMS` requests at once); every request gets the peer address as
//! axum's `ConnectInfo<SocketAddr>`, which `api::throttle` keys per-client limits on.
//! Neighbours: `server` builds the service (middleware and routes) this module serves, `https`
//! the TLS configuration.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;
use tower::{Service, ServiceExt};

/// The connection limits of one node.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Time a client has to send a request's head, from when the connection opens or the
    /// request's first byte arrives.
    pub header_read: Duration,
    /// A keep-alive connection with no request in flight for this long is closed.
    pub idle: Duration,
    /// Time a client has to send a request's whole body once its head arrived (`server`
    /// enforces it; a body trickling in would otherwise hold the connection).
    pub body_read: Duration,
    /// Open connections per node.
    pub max_connections: usize,
    /// Open connections per client IP.
    pub max_per_ip: usize,
}

/// Open connections, per node and per client IP.
#[derive(Default)]
struct Open {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// A connection's place among the open ones, in each request's extensions: a handler that
/// takes the connection over (a WebSocket) keeps it for as long as it uses the connection.
#[derive(Clone)]
pub struct ConnectionSlot {
    _slot: Arc<Slot>,
}

/// One admitted connection; gives its place back when dropped.
struct Slot {
    open: Arc<Mutex<Open>>,
    ip: IpAddr,
}

impl Slot {
    fn take(open: &Arc<Mutex<Open>>, ip: IpAddr, limits: &ConnectionLimits) -> Option<Slot> {
        let mut o = open.lock().unwrap_or_else(|p| p.into_inner());
        let mine = o.per_ip.get(&ip).copied().unwrap_or(0);
        if o.total >= limits.max_connections || mine >= limits.max_per_ip {
            return None;
        }
        o.total += 1;
        o.per_ip.insert(ip, mine + 1);
        metrics::gauge!("basalt_http_connections").set(o.total as f64);
        Some(Slot {
            open: Arc::clone(open),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut o = self.open.lock().unwrap_or_else(|p| p.into_inner());
        o.total = o.total.saturating_sub(1);
        if let Some(n) = o.per_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                o.per_ip.remove(&self.ip);
            }
        }
        metrics::gauge!("basalt_http_connections").set(o.total as f64);
    }
}

/// When a connection last had a request in flight.
struct Activity {
    born: Instant,
    in_flight: AtomicUsize,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        self.born
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// Ends a request's in-flight mark when its response is produced (or the request is dropped).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        // Touch first: an idle check between the two must not see the request's start time.
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Requests one HTTP/2 connection may have in flight at once.
pub const MAX_STREAMS: u32 = 128;

/// Drives one connection until it ends, closing it gracefully when the node stops or it stays
/// idle (`shut` begins a graceful close of `conn`).
async fn drive<C, E>(
    conn: C,
    shut: impl Fn(std::pin::Pin<&mut C>),
    mut stop: watch::Receiver<bool>,
    activity: Arc<Activity>,
    idle: Duration,
    peer: std::net::SocketAddr,
) where
    C: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut conn = std::pin::pin!(conn);
    let mut tick = tokio::time::interval((idle / 4).max(Duration::from_millis(100)));
    let mut closing = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%peer, "http connection: {e}");
                }
                break;
            }
            _ = stop.changed(), if !closing => {
                closing = true;
                shut(conn.as_mut());
            }
            _ = tick.tick(), if !closing => {
                if activity.idle_for() >= idle {
                    closing = true;
                    shut(conn.as_mut());
                }
            }
        }
    }
}

/// Serves `service` on `listener` under `limits` (over TLS with `tls`) until `shutdown`
/// resolves, then waits for the open connections to finish their requests (at most 30 s).
pub async fn serve<S>(
    listener: tokio::net::TcpListener,
    service: S,
    limits: ConnectionLimits,
    tls: Option<Arc<crate::https::ServingTls>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()>
where
    S: Service<Request, Response = Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let mut h1 = http1::Builder::new();
    h1.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_headers(100);
    let mut auto = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    auto.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_headers(100);
    auto.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(64 << 10)
        // A client that vanished is noticed even while its connection holds open streams.
        .keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(20));
    let open = Arc::new(Mutex::new(Open::default()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        while conns.try_join_next().is_some() {}
        let Some(slot) = Slot::take(&open, peer.ip(), &limits) else {
            metrics::counter!("basalt_http_connections_refused_total").increment(1);
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let activity = Arc::new(Activity {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        });
        let seen = Arc::clone(&activity);
        let svc = service.clone();
        let slot = ConnectionSlot {
            _slot: Arc::new(slot),
        };
        let held = slot.clone();
        let per_request = tower::service_fn(move |req: http::Request<Incoming>| {
            seen.in_flight.fetch_add(1, Ordering::Relaxed);
            seen.touch();
            let mark = InFlight(Arc::clone(&seen));
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(ConnectInfo(peer));
            req.extensions_mut().insert(held.clone());
            let svc = svc.clone();
            async move {
                let resp = svc.oneshot(req).await;
                drop(mark);
                resp
            }
        });
        let (stop, idle, handshake) = (stop_rx.clone(), limits.idle, limits.header_read);
        let (h1, auto, tls) = (h1.clone(), auto.clone(), tls.clone());
        conns.spawn(async move {
            let _slot = slot;
            let svc = TowerToHyperService::new(per_request);
            let Some(tls) = tls else {
                let conn = h1.serve_connection(TokioIo::new(tcp), svc).with_upgrades();
                drive(conn, |c| c.graceful_shutdown(), stop, activity, idle, peer).await;
                return;
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
            let stream = match tokio::time::timeout(handshake, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    metrics::counter!("basalt_https_handshakes_failed_total", "reason" => "refused")
                        .increment(1);
                    tracing::debug!(%peer, "TLS handshake: {e}");
                    return;
                }
                Err(_) => {
                    metrics::counter!("basalt_https_handshakes_failed_total", "reason" => "timeout")
                        .increment(1);
                    return;
                }
            };
            let conn = auto
                .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                .into_owned();
            drive(conn, |c| c.graceful_shutdown(), stop, activity, idle, peer).await;
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(Duration::from_secs(30), async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        conns.abort_all();
    }
    Ok(())
}
