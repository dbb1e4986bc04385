//! The realtime transports over `realtime::connection` (decisions/0024), each authenticating
//! itself (open routes of `api::table`):
//!
//! - `GET /1/realtime`: a plain WebSocket whose text frames are the JSON messages of
//!   `realtime::wire`; the app's keys on the upgrade request's headers or, for browsers, in its
//!   query (`applicationId` + `restKey`, or `masterKey`, or the signed form; `sessionToken`).
//! - socket.io 0.9, as the hosted service's SDKs speak it: `GET|POST /socket.io/1/` answers
//!   `<sid>:60:60:websocket`, then `GET /socket.io/1/websocket/<sid>` is a WebSocket of `5:::`
//!   event frames and `2:::` heartbeats; keys in the query are optional (without them each
//!   `client_sub` names its app by `appKey`).
//! - `GET /1/realtime/events`: Server-Sent Events of one subscription given in the query; its
//!   events' ids are their cursors, so a browser's `Last-Event-ID` resumes where it was.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame as WsFrame;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use super::context::{admit, ApiPath, ApiQuery, AppState};
use super::error::{ApiError, CommonError};
use crate::auth::{self, AuthError, HeaderNames, RequestCtx};
use crate::connections::ConnectionSlot;
use crate::drain::DrainState;
use crate::realtime::connection::{Connection, Refusal};
use crate::realtime::outbox::{Outbox, OutboxReceiver};
use crate::realtime::wire::{Action, Frame, Outbound, Pieces, SubRequest};

use super::websocket::{Socket, Upgrade};

/// Largest message a client may send.
const MAX_CLIENT_MESSAGE: usize = 64 * 1024;
/// What a WebSocket reads into at once (tungstenite keeps it for the connection's life).
const READ_BUFFER: usize = 16 * 1024;
/// Server-Sent Events streams send a comment this often, so proxies keep them open.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);
/// socket.io heartbeats: the node sends one this often and closes a connection it heard
/// nothing from for `SOCKET_IO_TIMEOUT` (both announced in the handshake).
const SOCKET_IO_HEARTBEAT: Duration = Duration::from_secs(25);
const SOCKET_IO_TIMEOUT: Duration = Duration::from_secs(60);
/// Plain WebSockets are pinged this often and closed after `PLAIN_TIMEOUT` without a frame.
const PLAIN_PING: Duration = Duration::from_secs(30);
const PLAIN_TIMEOUT: Duration = Duration::from_secs(75);
/// How long a client that fell behind has to take its `server_resync` before the close.
const FAREWELL: Duration = Duration::from_secs(30);
/// How long a client whose connection is stuck on a message it does not read has to take the
/// resync: that message's bytes are held until the connection closes.
const STUCK_FAREWELL: Duration = Duration::from_secs(1);

type Query = ApiQuery<HashMap<String, String>>;

/// The query members that stand for authentication headers (for clients that cannot set
/// headers), with the header each stands for.
fn query_headers(names: &HeaderNames) -> [(&'static str, &HeaderName); 10] {
    [
        ("applicationId", &names.application_id),
        ("restKey", &names.rest_key),
        ("masterKey", &names.master_key),
        ("sessionToken", &names.session_token),
        ("secretKey", &names.secret_key),
        ("safeTimestamp", &names.safe_timestamp),
        ("noncestrKey", &names.noncestr_key),
        ("safeSign", &names.safe_sign),
        ("sdkType", &names.sdk_type),
        ("sdkVersion", &names.sdk_version),
    ]
}

/// The request's authentication, from its headers completed by its query. `None` when it
/// carries no app id, secret key or master key at all.
async fn authenticate(
    state: &AppState,
    path: &str,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<Option<RequestCtx>, ApiError> {
    let mut all = headers.clone();
    for (member, header) in query_headers(&state.headers) {
        if all.contains_key(header) {
            continue;
        }
        if let Some(v) = query
            .get(member)
            .and_then(|v| HeaderValue::from_str(v).ok())
        {
            all.insert(header.clone(), v);
        }
    }
    let names = &state.headers;
    let carried = [&names.application_id, &names.secret_key, &names.master_key]
        .iter()
        .any(|h| auth::header(&all, h).is_some());
    if !carried {
        return Ok(None);
    }
    let creds = auth::Request {
        method: &Method::GET,
        path,
        headers: &all,
        body: b"",
    };
    let ctx = match auth::authenticate(&state.cluster, names, &creds, false).await {
        Ok(ctx) => ctx,
        Err(AuthError::Unauthorized(why)) => {
            tracing::debug!(reason = why, path, "realtime: unauthorized");
            return Err(CommonError::Unauthorized.into());
        }
        Err(e) => return Err(e.into()),
    };
    admit(&ctx, headers)?;
    Ok(Some(ctx))
}

/// `GET /1/realtime`: the plain WebSocket (the app's keys required).
pub async fn plain_websocket(
    State(state): State<AppState>,
    slot: Option<axum::Extension<ConnectionSlot>>,
    headers: HeaderMap,
    ApiQuery(query): Query,
    ws: Upgrade,
) -> Response {
    let ctx = match authenticate(&state, "/1/realtime", &headers, &query).await {
        Ok(Some(ctx)) => ctx,
        Ok(None) => return CommonError::Unauthorized.into_response(),
        Err(e) => return e.into_response(),
    };
    let conn = Connection::new(state.realtime.clone(), Some(ctx), None);
    upgrade(ws, slot, conn, Framing::Plain, state.drain.clone())
}

/// `GET|POST /socket.io/1/`: the socket.io 0.9 handshake. The session id names nothing kept:
/// the WebSocket may reach any node.
pub async fn socket_io_handshake(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(query): Query,
) -> Response {
    if let Err(e) = authenticate(&state, "/socket.io/1", &headers, &query).await {
        return e.into_response();
    }
    let sid = basalt_cluster::object::random_alphanumeric(20);
    let body = format!(
        "{sid}:{}:{}:websocket",
        SOCKET_IO_TIMEOUT.as_secs(),
        SOCKET_IO_TIMEOUT.as_secs()
    );
    ([(axum::http::header::CONTENT_TYPE, "text/plain")], body).into_response()
}

/// `GET /socket.io/1/websocket/<sid>`: the socket.io 0.9 WebSocket.
pub async fn socket_io_websocket(
    State(state): State<AppState>,
    slot: Option<axum::Extension<ConnectionSlot>>,
    headers: HeaderMap,
    ApiPath(sid): ApiPath<String>,
    ApiQuery(query): Query,
    ws: Upgrade,
) -> Response {
    let path = format!("/socket.io/1/websocket/{sid}");
    let origin = headers
        .get(axum::http::header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .map(str::to_string);
    let ctx = match authenticate(&state, &path, &headers, &query).await {
        Ok(ctx) => ctx,
        Err(e) => return e.into_response(),
    };
    let conn = Connection::new(state.realtime.clone(), ctx, origin);
    upgrade(ws, slot, conn, Framing::SocketIo, state.drain.clone())
}

/// Upgrades to a WebSocket served as `framing` for `conn`, keeping the connection's place
/// (`slot`) while it lasts, until the node stops (`drain`); 107 for a request that is no
/// upgrade.
fn upgrade(
    ws: Upgrade,
    slot: Option<axum::Extension<ConnectionSlot>>,
    (conn, rx): (Connection, OutboxReceiver),
    framing: Framing,
    drain: DrainState,
) -> Response {
    let ws = match ws.handshake() {
        Ok(ws) => ws,
        Err(why) => {
            return CommonError::InvalidBody(format!(
                "this address takes a WebSocket upgrade: {why}."
            ))
            .into_response()
        }
    };
    // Messages are written eagerly, a piece at a time: a connection's write buffer holds at
    // most about one piece.
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_CLIENT_MESSAGE))
        .max_frame_size(Some(MAX_CLIENT_MESSAGE))
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(0);
    let open = drain.socket();
    ws.accept(config, move |socket| async move {
        let (_slot, _open) = (slot, open);
        serve_socket(conn, rx, socket, framing, drain).await;
    })
}

/// The `server_error` of a refused client message.
fn refused((e, req): Refusal) -> Outbound {
    let e = ApiError::from(e);
    Outbound::error(e.code(), &e.to_string(), req.as_ref())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Plain,
    SocketIo,
}

impl Framing {
    fn pieces(self, m: &Outbound) -> Pieces {
        match self {
            Framing::Plain => Frame::websocket(m),
            Framing::SocketIo => Frame::socket_io(m),
        }
    }
}

/// How a message's writing ended.
enum Sent {
    Whole,
    /// Stopped, the message cut short (`open`: amid its fragments).
    Stopped {
        open: bool,
    },
    Failed,
}

/// A message being written: its pieces left, and whether a fragment of it went out without
/// its last (no other message may be written before the rest).
struct Writing {
    pieces: std::iter::Peekable<Pieces>,
    open: bool,
}

impl Writing {
    fn new(framing: Framing, m: &Outbound) -> Writing {
        Writing {
            pieces: framing.pieces(m).peekable(),
            open: false,
        }
    }

    /// The next frame: the whole message as one text frame, or its next fragment.
    fn next_frame(&mut self) -> Option<(Message, bool)> {
        let piece = self.pieces.next()?;
        let last = self.pieces.peek().is_none();
        let frame = match (self.open, last) {
            (false, true) => Message::Text(piece.into()),
            (false, false) => {
                Message::Frame(WsFrame::message(piece, OpCode::Data(Data::Text), false))
            }
            (true, _) => {
                Message::Frame(WsFrame::message(piece, OpCode::Data(Data::Continue), last))
            }
        };
        Some((frame, last))
    }
}

/// Writes what is left of `w`, a frame at a time, stopping when `stop` resolves first: a
/// frame is handed to the socket only once it has room, so `w.open` says exactly whether the
/// client got part of the message.
async fn send_message<S>(
    sink: &mut S,
    w: &mut Writing,
    stop: impl std::future::Future<Output = ()>,
) -> Sent
where
    S: futures::Sink<Message> + Unpin,
{
    let mut stop = std::pin::pin!(stop);
    while let Some((frame, last)) = w.next_frame() {
        let ready = tokio::select! {
            r = std::future::poll_fn(|cx| sink.poll_ready_unpin(cx)) => r.is_ok(),
            () = stop.as_mut() => return Sent::Stopped { open: w.open },
        };
        if !ready || sink.start_send_unpin(frame).is_err() {
            return Sent::Failed;
        }
        w.open = !last;
        let flushed = tokio::select! {
            r = std::future::poll_fn(|cx| sink.poll_flush_unpin(cx)) => r.is_ok(),
            () = stop.as_mut() => return Sent::Stopped { open: w.open },
        };
        if !flushed {
            return Sent::Failed;
        }
    }
    Sent::Whole
}

/// Writes `m` whole (the hello and the resync).
async fn send_whole<S>(sink: &mut S, framing: Framing, m: &Outbound) -> bool
where
    S: futures::Sink<Message> + Unpin,
{
    let mut w = Writing::new(framing, m);
    matches!(
        send_message(sink, &mut w, std::future::pending()).await,
        Sent::Whole
    )
}

/// What a socket.io frame from the client asks.
#[derive(Debug, PartialEq)]
enum SocketIoFrame<'a> {
    Event(&'a str),
    Disconnect,
    Other,
}

/// Reads `type:id:endpoint:data`: events (`5:::{..}`, `5:1+::{..}`), disconnects; heartbeats,
/// connects and the rest only show the client is alive.
fn socket_io_frame(text: &str) -> SocketIoFrame<'_> {
    let mut parts = text.splitn(4, ':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("5"), _, _, Some(data)) => SocketIoFrame::Event(data),
        (Some("0"), ..) => SocketIoFrame::Disconnect,
        _ => SocketIoFrame::Other,
    }
}

/// Serves one WebSocket: client messages to the connection, the outbox to the client, until
/// either side ends, the client falls behind (one `server_resync`, then close) or the node
/// stops (a reconnect hint, then close).
async fn serve_socket(
    conn: Connection,
    rx: OutboxReceiver,
    socket: Socket,
    framing: Framing,
    drain: DrainState,
) {
    let (sink, stream) = socket.split();
    let writer = Writer {
        outbox: Arc::clone(conn.outbox()),
        resync: conn.slow_resync(),
        framing,
        drain,
    };
    let writer = tokio::spawn(writer.run(sink, rx));
    read_client(conn, stream, framing, writer).await;
}

/// The writing half of a WebSocket: the outbox's messages, heartbeats, the farewell of a
/// client that fell behind, and the reconnect hint when the node stops.
struct Writer {
    outbox: Arc<Outbox>,
    resync: Outbound,
    framing: Framing,
    drain: DrainState,
}

/// How a socket's writing stopped.
enum Stopped {
    /// The connection ended.
    Ended,
    /// The socket failed (or the client left amid a message): nothing more can be written.
    Failed,
    /// The client fell behind: it has `within` to take the rest of the message it was on
    /// (`rest`) and the resync.
    Behind {
        within: Duration,
        rest: Option<Writing>,
    },
    /// The node is stopping (between messages): the client is told to reconnect.
    NodeStopping,
}

impl Writer {
    async fn run<S>(self, mut sink: S, mut rx: OutboxReceiver)
    where
        S: futures::Sink<Message> + Unpin,
    {
        if self.framing == Framing::SocketIo {
            let hello = Outbound::new("client_send_data", &serde_json::json!({}));
            if sink.send(Message::Text("1::".into())).await.is_err()
                || !send_whole(&mut sink, self.framing, &hello).await
            {
                return;
            }
        }
        let (within, rest) = match self.write_until_stopped(&mut sink, &mut rx).await {
            Stopped::Failed => return,
            Stopped::Ended => (None, None),
            Stopped::Behind { within, rest } => (Some(within), rest),
            Stopped::NodeStopping => {
                let _ = tokio::time::timeout(FAREWELL, self.reconnect_hint(&mut sink)).await;
                return;
            }
        };
        if let Some(within) = within {
            let goodbye = async {
                if let Some(mut rest) = rest {
                    let done = send_message(&mut sink, &mut rest, std::future::pending()).await;
                    if !matches!(done, Sent::Whole) {
                        return false;
                    }
                }
                send_whole(&mut sink, self.framing, &self.resync).await
            };
            if !matches!(tokio::time::timeout(within, goodbye).await, Ok(true)) {
                // Amid a message the client does not take: the connection just ends.
                return;
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), sink.send(Message::Close(None))).await;
    }

    /// Writes the outbox's messages and the heartbeats until the connection ends, the socket
    /// fails or the client falls behind. A client that stops reading blocks the writing: its
    /// outbox then overflows, and it has `STUCK_FAREWELL` to take the rest and the resync.
    async fn write_until_stopped<S>(&self, sink: &mut S, rx: &mut OutboxReceiver) -> Stopped
    where
        S: futures::Sink<Message> + Unpin,
    {
        let every = match self.framing {
            Framing::Plain => PLAIN_PING,
            Framing::SocketIo => SOCKET_IO_HEARTBEAT,
        };
        let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let (sent, rest) = tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => {
                        let mut w = Writing::new(self.framing, &m);
                        (send_message(sink, &mut w, self.outbox.overflowed()).await, Some(w))
                    }
                    None if self.outbox.is_overflowed() => {
                        return Stopped::Behind { within: FAREWELL, rest: None };
                    }
                    None => return Stopped::Ended,
                },
                _ = beat.tick() => (self.heartbeat(sink).await, None),
                () = self.drain.stopping() => return Stopped::NodeStopping,
            };
            match sent {
                Sent::Whole => continue,
                Sent::Stopped { open } => {
                    let rest = rest.filter(|_| open);
                    return Stopped::Behind {
                        within: STUCK_FAREWELL,
                        rest,
                    };
                }
                Sent::Failed => return Stopped::Failed,
            }
        }
    }

    /// Tells the client the node is stopping, so that it reconnects (through a proxy, to
    /// another node): socket.io's disconnect frame `0::`, then a close with code 1012
    /// "service restart".
    async fn reconnect_hint<S>(&self, sink: &mut S)
    where
        S: futures::Sink<Message> + Unpin,
    {
        use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
        use tokio_tungstenite::tungstenite::protocol::CloseFrame;
        if self.framing == Framing::SocketIo
            && sink.send(Message::Text("0::".into())).await.is_err()
        {
            return;
        }
        let close = CloseFrame {
            code: CloseCode::Restart,
            reason: "the node is restarting: reconnect".into(),
        };
        let _ = sink.send(Message::Close(Some(close))).await;
    }

    /// Sends one heartbeat (a ping, or socket.io's `2:::`), stopping if the outbox overflows.
    async fn heartbeat<S>(&self, sink: &mut S) -> Sent
    where
        S: futures::Sink<Message> + Unpin,
    {
        let beat = match self.framing {
            Framing::Plain => Message::Ping(Default::default()),
            Framing::SocketIo => Message::Text("2:::".into()),
        };
        tokio::select! {
            sent = sink.send(beat) => match sent {
                Ok(()) => Sent::Whole,
                Err(_) => Sent::Failed,
            },
            () = self.outbox.overflowed() => Sent::Stopped { open: false },
        }
    }
}

/// Reads the client's messages into `conn` (a refused one answered through its outbox) until
/// the client leaves, is quiet too long, or `writer` ends; then ends the writing too.
async fn read_client<R>(
    mut conn: Connection,
    mut stream: R,
    framing: Framing,
    mut writer: tokio::task::JoinHandle<()>,
) where
    R: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let quiet = match framing {
        Framing::Plain => PLAIN_TIMEOUT,
        Framing::SocketIo => SOCKET_IO_TIMEOUT,
    };
    loop {
        let next = tokio::select! {
            n = tokio::time::timeout(quiet, stream.next()) => n,
            _ = &mut writer => break,
        };
        let text = match next {
            Err(_) | Ok(None) | Ok(Some(Err(_))) => break,
            Ok(Some(Ok(Message::Text(t)))) => t,
            Ok(Some(Ok(Message::Close(_)))) => break,
            Ok(Some(Ok(_))) => continue,
        };
        let handled = match framing {
            Framing::Plain => conn.handle_text(text.as_str()).await,
            Framing::SocketIo => match socket_io_frame(text.as_str()) {
                SocketIoFrame::Event(data) => conn.handle_text(data).await,
                SocketIoFrame::Disconnect => break,
                SocketIoFrame::Other => Ok(()),
            },
        };
        if let Err(refusal) = handled {
            conn.outbox().offer(refused(refusal));
        }
    }
    drop(conn);
    writer.abort();
}

/// `GET /1/realtime/events`: Server-Sent Events of the subscription its query describes
/// (`tableName`, `action`, `objectId`, `where`, `sessionToken`, `cursor` or `Last-Event-ID`).
pub async fn server_sent_events(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(query): Query,
) -> Response {
    let ctx = match authenticate(&state, "/1/realtime/events", &headers, &query).await {
        Ok(Some(ctx)) => ctx,
        Ok(None) => return CommonError::Unauthorized.into_response(),
        Err(e) => return e.into_response(),
    };
    let req = match event_subscription(&headers, &query) {
        Ok(req) => req,
        Err(e) => return e.into_response(),
    };
    let (mut conn, rx) = Connection::new(state.realtime.clone(), Some(ctx), None);
    if let Err(e) = conn.subscribe(&req).await {
        return ApiError::from(e).into_response();
    }
    let body = sse_body(conn, rx, state.drain.clone());
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/event-stream"),
            (axum::http::header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The `client_sub` an event stream's query and `Last-Event-ID` describe (an `update_table`
/// when no `action` is given), read as the WebSocket's would be.
fn event_subscription(
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<SubRequest, ApiError> {
    let mut arg = serde_json::Map::new();
    for member in [
        "tableName",
        "action",
        "objectId",
        "where",
        "sessionToken",
        "cursor",
    ] {
        if let Some(v) = query.get(member) {
            arg.insert(member.into(), serde_json::Value::String(v.clone()));
        }
    }
    if !arg.contains_key("action") {
        arg.insert("action".into(), Action::UpdateTable.name().into());
    }
    if let Some(last) = headers.get("last-event-id").and_then(|v| v.to_str().ok()) {
        arg.insert("cursor".into(), last.into());
    }
    let message = serde_json::json!({"name": "client_sub", "args": [arg]}).to_string();
    match crate::realtime::wire::parse_client(&message) {
        Ok(crate::realtime::wire::ClientMessage::Subscribe(r)) => Ok(r),
        Ok(_) => Err(CommonError::InvalidBody(
            "an event stream subscribes; it cannot unsubscribe.".into(),
        )
        .into()),
        Err(e) => Err(ApiError::from(e)),
    }
}

/// The body of an event stream: a task writes the connection's messages in pieces through a
/// channel of one piece, so a client that stops reading holds no more than the HTTP
/// connection's write buffer (a few hundred KiB) and a piece, and its outbox overflowing drops
/// the message it was on. The stream ends when the node stops (`drain`): a browser's
/// EventSource reconnects by itself, with its `Last-Event-ID`.
fn sse_body(conn: Connection, mut rx: OutboxReceiver, drain: DrainState) -> axum::body::Body {
    let (tx, chunks) = tokio::sync::mpsc::channel::<bytes::Bytes>(1);
    let outbox = Arc::clone(conn.outbox());
    let resync = conn.slow_resync();
    tokio::spawn(async move {
        let _conn = conn;
        let never = std::future::pending::<()>;
        let mut beat =
            tokio::time::interval_at(tokio::time::Instant::now() + SSE_KEEP_ALIVE, SSE_KEEP_ALIVE);
        let farewell = loop {
            let sent = tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => send_chunks(&tx, Frame::sse(&m), outbox.overflowed()).await,
                    None if outbox.is_overflowed() => break Some(FAREWELL),
                    None => break None,
                },
                _ = beat.tick() => {
                    send_chunks(&tx, std::iter::once(":\n\n".to_string()), outbox.overflowed()).await
                }
                () = tx.closed() => return,
                () = drain.stopping() => return,
            };
            match sent {
                Sent::Whole => continue,
                Sent::Stopped { open: false } => break Some(STUCK_FAREWELL),
                // Amid an event's data no other event can follow: the stream just ends (a
                // browser reconnects with its `Last-Event-ID`).
                Sent::Stopped { open: true } | Sent::Failed => return,
            }
        };
        if let Some(within) = farewell {
            let _ =
                tokio::time::timeout(within, send_chunks(&tx, Frame::sse(&resync), never())).await;
        }
    });
    axum::body::Body::from_stream(futures::stream::unfold(chunks, |mut chunks| async move {
        let chunk = chunks.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(chunk), chunks))
    }))
}

/// Sends `pieces` down `tx` one at a time, stopping when `stop` resolves first.
async fn send_chunks(
    tx: &tokio::sync::mpsc::Sender<bytes::Bytes>,
    pieces: impl Iterator<Item = String>,
    stop: impl std::future::Future<Output = ()>,
) -> Sent {
    let sent_any = std::sync::atomic::AtomicBool::new(false);
    let write = async {
        for piece in pieces {
            if tx.send(piece.into()).await.is_err() {
                return false;
            }
            sent_any.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        true
    };
    let outcome = tokio::select! {
        ok = write => Some(ok),
        () = stop => None,
    };
    match outcome {
        Some(true) => Sent::Whole,
        Some(false) => Sent::Failed,
        None => Sent::Stopped {
            open: sent_any.load(std::sync::atomic::Ordering::Relaxed),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_io_frames_are_read_as_the_protocol_writes_them() {
        assert_eq!(
            socket_io_frame(r#"5:::{"name":"client_sub"}"#),
            SocketIoFrame::Event(r#"{"name":"client_sub"}"#)
        );
        assert_eq!(
            socket_io_frame(r#"5:3+::{"a":"b:c"}"#),
            SocketIoFrame::Event(r#"{"a":"b:c"}"#)
        );
        assert_eq!(socket_io_frame("0::"), SocketIoFrame::Disconnect);
        for other in ["2::", "2:::", "1::", "8", "", "5"] {
            assert_eq!(socket_io_frame(other), SocketIoFrame::Other, "{other}");
        }
    }
}
