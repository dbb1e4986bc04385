//! `RaftLink`: the client side of the replication stream to one peer (`RaftService.Replicate`).
//!
//! One long-lived gRPC stream per peer carries the AppendEntries of every group this node
//! leads towards that peer. Each openraft replication session (`stream_append`: a run of
//! pipelined appends to one follower of one group, or a single heartbeat) is a numbered
//! session on the link: its appends go out as they are produced, without waiting for answers,
//! and its answers come back in order. Messages queued while the stream could not send are
//! drained into one `RaftFrame` (one write for many messages and groups). A link that fails or
//! stalls (an append unanswered for `STALL`) is dropped with all its sessions, which end with
//! an error so that openraft backs off and starts new ones on a new link. The server side is
//! `peer_service::raft_stream`; `rpc::router` keeps the links, `network` hands openraft's
//! sessions to them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use openraft::raft::{AppendEntriesRequest, StreamAppendResult};
use tokio::sync::{mpsc, watch};
use tonic::transport::Channel;

use super::convert::{decode_raft, encode_raft};
use super::pb::raft_envelope::Kind;
use super::pb::raft_service_client::RaftServiceClient;
use super::pb::{RaftEnvelope, RaftFrame};
use super::MAX_MESSAGE_BYTES;
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::raft::TypeConfig;

/// Messages queued for a peer before the sessions producing them wait.
pub(crate) const LINK_QUEUE: usize = 4096;
/// Most messages in one frame.
pub(crate) const FRAME_MESSAGES: usize = 512;
/// A frame is closed once its payloads reach this many bytes.
pub(crate) const FRAME_BYTES: usize = 4 << 20;
/// How long an append may go unanswered before its link is taken for dead.
pub(crate) const STALL: Duration = Duration::from_secs(5);

/// A message waiting for the stream, with when it was queued.
pub(crate) struct Queued {
    pub(crate) at: Instant,
    pub(crate) message: RaftEnvelope,
}

impl Queued {
    pub(crate) fn now(message: RaftEnvelope) -> Queued {
        Queued {
            at: Instant::now(),
            message,
        }
    }

    /// The message, stamped with how long it waited.
    fn stamped(self) -> RaftEnvelope {
        let mut m = self.message;
        m.waited_us = self.at.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
        m
    }
}

/// The next frame from `rx`: waits for one message, then takes every message already queued,
/// up to `FRAME_MESSAGES` or `FRAME_BYTES`. `None` once the queue is closed and empty.
pub(crate) async fn next_frame(rx: &mut mpsc::Receiver<Queued>) -> Option<RaftFrame> {
    let first = rx.recv().await?.stamped();
    let mut bytes = first.payload.len();
    let mut messages = vec![first];
    while messages.len() < FRAME_MESSAGES && bytes < FRAME_BYTES {
        match rx.try_recv() {
            Ok(m) => {
                let m = m.stamped();
                bytes += m.payload.len();
                messages.push(m);
            }
            Err(_) => break,
        }
    }
    metrics::counter!("basalt_raft_frames_sent_total").increment(1);
    metrics::counter!("basalt_raft_frame_messages_sent_total").increment(messages.len() as u64);
    Some(RaftFrame { messages })
}

/// The frames of everything sent to `rx`, as a stream for a gRPC body.
pub(crate) fn frames(rx: mpsc::Receiver<Queued>) -> impl Stream<Item = RaftFrame> {
    futures::stream::unfold(rx, |mut rx| async move {
        let frame = next_frame(&mut rx).await?;
        Some((frame, rx))
    })
}

/// What a session hears back.
enum Inbound {
    /// The answer to its next append.
    Result(Vec<u8>),
    /// The peer closed it (after its input ended, or after a refusal it answered).
    Closed,
    /// The peer cannot go on with it.
    Failed(Error),
}

type Sessions = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Inbound>>>>;

/// The replication stream to one peer.
pub(crate) struct RaftLink {
    tx: mpsc::Sender<Queued>,
    sessions: Sessions,
    next_session: AtomicU64,
    broken: watch::Sender<bool>,
}

impl RaftLink {
    /// Opens the stream on `channel`; answers once the peer accepted it, or `None` when the
    /// peer serves no replication stream (an older version).
    pub(crate) async fn open(channel: Channel) -> Result<Option<Arc<RaftLink>>> {
        let mut client = RaftServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let (tx, rx) = mpsc::channel(LINK_QUEUE);
        let (broken, _) = watch::channel(false);
        let link = Arc::new(RaftLink {
            tx,
            sessions: Arc::default(),
            next_session: AtomicU64::new(1),
            broken,
        });
        let mut answers = match client.replicate(frames(rx)).await {
            Ok(answers) => answers.into_inner(),
            Err(s) if s.code() == tonic::Code::Unimplemented => return Ok(None),
            Err(s) => return Err(super::convert::transport_error(&s)),
        };
        let reader = Arc::downgrade(&link);
        let mut broken = link.broken.subscribe();
        tokio::spawn(async move {
            loop {
                let frame = tokio::select! {
                    f = answers.message() => f,
                    () = until_broken(&mut broken) => break,
                };
                let Some(link) = reader.upgrade() else { break };
                match frame {
                    Ok(Some(frame)) => link.dispatch(frame),
                    Ok(None) => break,
                    Err(status) => {
                        tracing::debug!("replication stream failed: {status}");
                        break;
                    }
                }
            }
            if let Some(link) = reader.upgrade() {
                link.fail();
            }
        });
        Ok(Some(link))
    }

    /// Whether the link can take new sessions.
    pub(crate) fn usable(&self) -> bool {
        !*self.broken.borrow() && !self.tx.is_closed()
    }

    /// Takes the link down: every session ends with an error.
    fn fail(&self) {
        self.broken.send_replace(true);
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.clear();
        }
    }

    fn dispatch(&self, frame: RaftFrame) {
        let Ok(mut sessions) = self.sessions.lock() else {
            return;
        };
        for m in frame.messages {
            let inbound = match m.kind() {
                Kind::Result => Inbound::Result(m.payload),
                Kind::Closed => Inbound::Closed,
                Kind::Failed => Inbound::Failed(
                    serde_json::from_slice(&m.payload)
                        .unwrap_or_else(|e| Error::Internal(format!("bad failure: {e}"))),
                ),
                Kind::Append | Kind::Open | Kind::End | Kind::Unspecified => continue,
            };
            let last = !matches!(inbound, Inbound::Result(_));
            // A session that already ended (its answers are no longer awaited) is skipped.
            if let Some(s) = sessions.get(&m.session) {
                let _ = s.send(inbound);
            }
            if last {
                sessions.remove(&m.session);
            }
        }
    }

    /// Runs one replication session of `group`: sends the appends of `input` as they come
    /// and yields their answers in order, ending when the peer closed the session.
    pub(crate) fn session<S>(
        self: &Arc<Self>,
        group: GroupId,
        input: S,
    ) -> impl Stream<Item = std::result::Result<StreamAppendResult<TypeConfig>, Error>> + Send + 'static
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        let id = self.next_session.fetch_add(1, Ordering::Relaxed);
        let (in_tx, in_rx) = mpsc::unbounded_channel();
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.insert(id, in_tx.clone());
        }
        let sent = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(send_session(
            Arc::clone(self),
            id,
            group,
            input,
            in_tx,
            stopped,
            Arc::clone(&sent),
        ));
        let guard = SessionGuard {
            link: Arc::clone(self),
            id,
            sent,
            _stop: stop,
        };
        let state = Answers {
            rx: in_rx,
            broken: self.broken.subscribe(),
            answered: 0,
            guard,
            done: false,
        };
        futures::stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            let item = st.next().await?;
            if item.is_err() || matches!(item, Ok(Err(_))) {
                st.done = true;
            }
            Some((item, st))
        })
    }
}

/// Sends the appends of one session as `input` yields them, until it ends or the session is
/// dropped (`stopped`), then its `END` when the peer has the session: this task alone writes
/// the session's messages, so `END` always follows its last append. A session whose input
/// ends before it sent anything closes itself.
async fn send_session<S>(
    link: Arc<RaftLink>,
    id: u64,
    group: GroupId,
    mut input: S,
    local: mpsc::UnboundedSender<Inbound>,
    mut stopped: watch::Receiver<bool>,
    sent: Arc<AtomicU64>,
) where
    S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
{
    loop {
        let req = tokio::select! {
            biased;
            () = until_broken(&mut stopped) => break,
            req = input.next() => match req {
                Some(req) => req,
                None => break,
            },
        };
        let payload = match encode_raft(&req) {
            Ok(p) => p,
            Err(e) => {
                let _ = local.send(Inbound::Failed(e));
                break;
            }
        };
        let kind = match sent.load(Ordering::Relaxed) {
            0 => Kind::Open,
            _ => Kind::Append,
        };
        let m = Queued::now(RaftEnvelope {
            session: id,
            group: group.get(),
            kind: kind as i32,
            payload,
            waited_us: 0,
        });
        // Cancel-safe: a send given up on queued nothing.
        let queued = tokio::select! {
            biased;
            () = until_broken(&mut stopped) => break,
            r = link.tx.send(m) => r,
        };
        if queued.is_err() {
            let _ = local.send(Inbound::Failed(Error::PeerUnreachable(
                "replication stream closed".into(),
            )));
            return;
        }
        sent.fetch_add(1, Ordering::Relaxed);
    }
    match sent.load(Ordering::Relaxed) {
        0 => {
            let _ = local.send(Inbound::Closed);
        }
        _ => {
            let _ = link.tx.send(Queued::now(end(id, group))).await;
        }
    }
}

/// Returns once `flag` turns true (the link is down, the session stopped) or its sender is
/// gone.
async fn until_broken(flag: &mut watch::Receiver<bool>) {
    loop {
        if *flag.borrow_and_update() {
            return;
        }
        if flag.changed().await.is_err() {
            return;
        }
    }
}

fn end(id: u64, group: GroupId) -> RaftEnvelope {
    RaftEnvelope {
        session: id,
        group: group.get(),
        kind: Kind::End as i32,
        payload: Vec::new(),
        waited_us: 0,
    }
}

/// Ends a session when openraft drops it: its sender stops (and sends `END`), and answers
/// still on their way are no longer awaited.
struct SessionGuard {
    link: Arc<RaftLink>,
    id: u64,
    sent: Arc<AtomicU64>,
    /// Dropped with the guard: tells the sender to stop.
    _stop: watch::Sender<bool>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Ok(mut sessions) = self.link.sessions.lock() {
            sessions.remove(&self.id);
        }
    }
}

/// The answering side of a session.
struct Answers {
    rx: mpsc::UnboundedReceiver<Inbound>,
    broken: watch::Receiver<bool>,
    answered: u64,
    guard: SessionGuard,
    done: bool,
}

impl Answers {
    /// The next answer; `None` once the peer closed the session. An append unanswered for
    /// `STALL` takes the link down.
    async fn next(&mut self) -> Option<std::result::Result<StreamAppendResult<TypeConfig>, Error>> {
        loop {
            let inbound = tokio::select! {
                biased;
                m = self.rx.recv() => m,
                () = until_broken(&mut self.broken) => None,
                () = tokio::time::sleep(STALL) => {
                    if self.guard.sent.load(Ordering::Relaxed) > self.answered {
                        metrics::counter!("basalt_raft_stream_stalls_total").increment(1);
                        self.guard.link.fail();
                        return Some(Err(Error::Timeout(format!(
                            "no answer from the peer in {} s", STALL.as_secs()
                        ))));
                    }
                    continue;
                }
            };
            return match inbound {
                Some(Inbound::Result(bytes)) => {
                    self.answered += 1;
                    Some(decode_raft::<StreamAppendResult<TypeConfig>>(&bytes))
                }
                Some(Inbound::Closed) => None,
                Some(Inbound::Failed(e)) => Some(Err(e)),
                None => Some(Err(Error::PeerUnreachable(
                    "replication stream closed".into(),
                ))),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(session: u64, n: usize) -> Queued {
        Queued::now(RaftEnvelope {
            session,
            group: 1,
            kind: Kind::Append as i32,
            payload: vec![0; n],
            waited_us: 0,
        })
    }

    #[tokio::test]
    async fn a_frame_takes_everything_queued_in_order() {
        let (tx, mut rx) = mpsc::channel(LINK_QUEUE);
        for i in 0..10 {
            tx.send(msg(i, 10)).await.unwrap();
        }
        let frame = next_frame(&mut rx).await.unwrap();
        let sessions: Vec<u64> = frame.messages.iter().map(|m| m.session).collect();
        assert_eq!(sessions, (0..10).collect::<Vec<_>>());
        // Nothing queued: the next frame waits for the next message.
        tx.send(msg(10, 1)).await.unwrap();
        assert_eq!(next_frame(&mut rx).await.unwrap().messages.len(), 1);
        drop(tx);
        assert!(next_frame(&mut rx).await.is_none());
    }

    #[tokio::test]
    async fn frames_are_capped_by_count_and_bytes_and_keep_the_order() {
        let (tx, mut rx) = mpsc::channel(LINK_QUEUE);
        for i in 0..(FRAME_MESSAGES as u64 + 3) {
            tx.send(msg(i, 1)).await.unwrap();
        }
        let first = next_frame(&mut rx).await.unwrap();
        assert_eq!(first.messages.len(), FRAME_MESSAGES);
        let second = next_frame(&mut rx).await.unwrap();
        assert_eq!(
            second
                .messages
                .iter()
                .map(|m| m.session)
                .collect::<Vec<_>>(),
            vec![512, 513, 514]
        );
        // A big payload closes its frame.
        tx.send(msg(1, FRAME_BYTES)).await.unwrap();
        tx.send(msg(2, 1)).await.unwrap();
        assert_eq!(next_frame(&mut rx).await.unwrap().messages.len(), 1);
        assert_eq!(next_frame(&mut rx).await.unwrap().messages[0].session, 2);
    }
}
