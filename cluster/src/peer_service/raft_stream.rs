//! The server side of a replication stream (`RaftService.Replicate`; the client side is
//! `rpc::raft_link`): every session the sending node opens is fed, in order, to the addressed
//! group's local replica through openraft's pipelined `stream_append`, and its answers go back
//! on the stream, drained into frames like the appends that came. Each accepted append (or
//! heartbeat) answered within a heartbeat interval of being sent (its wait on the sender plus
//! here) counts as contact with the leader (`replicas::freshness`), as a single call answered
//! within its deadline does.
//! A session whose queue fills up (its replica stopped taking appends) fails alone, so one
//! stuck group never holds up the others on the same stream.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use openraft::raft::{AppendEntriesRequest, StreamAppendError, StreamAppendResult};
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use super::authorize::check_sender;
use crate::error::Error;
use crate::ids::{GroupId, NodeId};
use crate::raft::TypeConfig;
use crate::replicas::Replicas;
use crate::rpc::convert::{decode_raft, encode_raft};
use crate::rpc::pb::raft_envelope::Kind;
use crate::rpc::pb::{RaftEnvelope, RaftFrame};
use crate::rpc::raft_link::{frames, Queued, LINK_QUEUE};

/// Appends of one session received but not yet taken by its replica.
pub(crate) const SESSION_QUEUE: usize = 1024;

fn envelope(session: u64, group: GroupId, kind: Kind, payload: Vec<u8>) -> RaftEnvelope {
    RaftEnvelope {
        session,
        group: group.get(),
        kind: kind as i32,
        payload,
        waited_us: 0,
    }
}

/// An append received for a session: its encoding, when it arrived, and how long it had
/// waited on the sender.
struct Received {
    payload: Vec<u8>,
    at: Instant,
    waited: Duration,
}

impl Received {
    fn new(m: RaftEnvelope) -> Received {
        Received {
            at: Instant::now(),
            waited: Duration::from_micros(m.waited_us),
            payload: m.payload,
        }
    }
}

fn failed(session: u64, group: GroupId, e: &Error) -> RaftEnvelope {
    let payload = serde_json::to_vec(e).unwrap_or_default();
    envelope(session, group, Kind::Failed, payload)
}

/// Serves one replication stream: answers frames until the sender hangs up.
pub(super) fn serve(
    replicas: Replicas,
    sender: Option<NodeId>,
    mut inbound: Streaming<RaftFrame>,
) -> impl Stream<Item = Result<RaftFrame, Status>> + Send + 'static {
    let (out, out_rx) = mpsc::channel(LINK_QUEUE);
    tokio::spawn(async move {
        let mut sessions: HashMap<u64, mpsc::Sender<Received>> = HashMap::new();
        while let Ok(Some(frame)) = inbound.message().await {
            metrics::counter!("basalt_raft_frames_received_total").increment(1);
            for m in frame.messages {
                let group = GroupId::new(m.group);
                let id = m.session;
                match m.kind() {
                    Kind::Open => {
                        let raft = match replicas.peer_group(group).await {
                            Ok(raft) => raft,
                            Err(e) => {
                                let _ = out.send(Queued::now(failed(id, group, &e))).await;
                                continue;
                            }
                        };
                        let (tx, rx) = mpsc::channel(SESSION_QUEUE);
                        let _ = tx.try_send(Received::new(m));
                        sessions.insert(id, tx);
                        tokio::spawn(run_session(
                            replicas.clone(),
                            raft.clone(),
                            Session { group, id, sender },
                            rx,
                            out.clone(),
                        ));
                    }
                    Kind::Append => {
                        let Some(tx) = sessions.get(&id) else {
                            continue; // the session already ended; its sender hears so
                        };
                        match tx.try_send(Received::new(m)) {
                            Ok(()) => {}
                            Err(mpsc::error::TrySendError::Full(_)) => {
                                sessions.remove(&id);
                                metrics::counter!("basalt_raft_stream_sessions_overrun_total")
                                    .increment(1);
                                let e = Error::Unavailable(format!(
                                    "group {group} takes no appends (queue full)"
                                ));
                                let _ = out.send(Queued::now(failed(id, group, &e))).await;
                            }
                            Err(mpsc::error::TrySendError::Closed(_)) => {
                                sessions.remove(&id);
                            }
                        }
                    }
                    Kind::End => {
                        sessions.remove(&id);
                    }
                    Kind::Result | Kind::Closed | Kind::Failed | Kind::Unspecified => {}
                }
            }
        }
        // The sender hung up: every session's input ends with the stream.
    });
    frames(out_rx).map(Ok)
}

/// Feeds one session's appends to its replica and sends the answers back in order, then
/// `CLOSED` (or `FAILED` when an append could not be read or the replica stopped).
/// One replication session of a stream: its group, its number, and the node that sent it
/// (its certificate's, with peer TLS).
struct Session {
    group: GroupId,
    id: u64,
    sender: Option<NodeId>,
}

async fn run_session(
    replicas: Replicas,
    raft: crate::replicas::GroupRaft,
    session: Session,
    rx: mpsc::Receiver<Received>,
    out: mpsc::Sender<Queued>,
) {
    let Session { group, id, sender } = session;
    let bad: Arc<Mutex<Option<Error>>> = Arc::default();
    // When each append handed to the replica arrived and how long it had waited, in order:
    // answers come back in the same order.
    let arrivals: Arc<Mutex<VecDeque<(Instant, Duration)>>> = Arc::default();
    let (bad_input, arrivals_input) = (Arc::clone(&bad), Arc::clone(&arrivals));
    let input = futures::stream::unfold(rx, move |mut rx| {
        let (bad, arrivals) = (Arc::clone(&bad_input), Arc::clone(&arrivals_input));
        async move {
            let received = rx.recv().await?;
            let decoded = decode_raft::<AppendEntriesRequest<TypeConfig>>(&received.payload)
                .and_then(|req| check_sender(sender, &req.vote).map(|()| req));
            match decoded {
                Ok(req) => {
                    if let Ok(mut a) = arrivals.lock() {
                        a.push_back((received.at, received.waited));
                    }
                    Some((req, rx))
                }
                Err(e) => {
                    if let Ok(mut bad) = bad.lock() {
                        *bad = Some(e);
                    }
                    None
                }
            }
        }
    });
    let answers = raft.stream_append(input);
    futures::pin_mut!(answers);
    while let Some(answer) = answers.next().await {
        let answer: StreamAppendResult<TypeConfig> = match answer {
            Ok(answer) => answer,
            Err(fatal) => {
                let e = Error::Unavailable(fatal.to_string());
                let _ = out.send(Queued::now(failed(id, group, &e))).await;
                return;
            }
        };
        let arrival = arrivals.lock().ok().and_then(|mut a| a.pop_front());
        // Anything but a higher vote means the sender is this replica's leader; it counts as
        // contact only when answered within a Raft message's deadline of being sent.
        if !matches!(answer, Err(StreamAppendError::HigherVote(_))) {
            if let Some((at, waited)) = arrival {
                replicas.note_leader_contact_within(group, waited + at.elapsed());
            }
        }
        let m = match encode_raft(&answer) {
            Ok(payload) => envelope(id, group, Kind::Result, payload),
            Err(e) => failed(id, group, &e),
        };
        if out.send(Queued::now(m)).await.is_err() {
            return;
        }
    }
    let bad = bad.lock().ok().and_then(|mut b| b.take());
    let last = match bad {
        Some(e) => failed(id, group, &e),
        None => envelope(id, group, Kind::Closed, Vec::new()),
    };
    let _ = out.send(Queued::now(last)).await;
}
