//! `PeerRouter`: the client side of node-to-node gRPC. It keeps one lazily connected channel
//! per peer, shared by every group (openraft-multi's `GroupRouter`), and sends forwarded
//! proposals, reads and admin requests.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::AnyError;
use openraft_multi::GroupRouter;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::AsyncReadExt;
use tonic::transport::{Channel, Endpoint};

use super::convert::{from_reply, group_message, transport_error};
use super::dial::TlsDialer;
use super::pb::node_service_client::NodeServiceClient;
use super::pb::raft_service_client::RaftServiceClient;
use super::pb::{ChangesRequest, GroupMessage, Reply, SnapshotChunk};
use super::raft_link::RaftLink;
use super::MAX_MESSAGE_BYTES;
use crate::admin::{AdminRequest, AdminResponse};
use crate::command::{Command, Proposed, ReadRequest, ReadResponse};
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId, META_GROUP};
use crate::raft::{TypeConfig, Vote};
use crate::statemachine::SnapshotFile;
use crate::tls::PeerTls;

const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;
/// Deadline of a forwarded proposal or read: longer than an election, so a forward that
/// waits for a new leader still answers.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(8);

/// The unary Raft RPCs.
#[derive(Clone, Copy)]
enum RaftRpc {
    AppendEntries,
    Vote,
    PreVote,
    TransferLeader,
}

/// The `NodeService` RPCs.
#[derive(Clone, Copy)]
enum NodeRpc {
    Propose,
    Read,
    Admin,
}

/// How a peer is reached: its address, the connection of Raft traffic and admin requests, a
/// second one for forwarded proposals, reads and change streams, and a third for the bytes of
/// stored files (`rpc::file_client`), so that Raft messages never wait behind them. Each
/// connection is driven (framed, and with peer TLS encrypted) by a task of its own, so the
/// work of forwarded reads and of replication runs on different cores.
struct Peer {
    addr: String,
    channel: Channel,
    forward: Channel,
    bulk: Channel,
}

/// The replication stream to a peer, or what stopped this node from opening one.
#[derive(Clone, Default)]
enum Link {
    #[default]
    None,
    Stream(Arc<RaftLink>),
    /// The peer serves no replication stream (a node of an older version): its appends go one
    /// by one, until it is asked again after `REPROBE`.
    Unary(Instant),
    /// Opening failed at this moment: not tried again before `REOPEN`.
    Failed(Instant),
}

/// How long after a failed open a peer's replication stream is not tried again.
const REOPEN: Duration = Duration::from_millis(500);
/// How often a peer that served no replication stream is asked again (it may have been
/// upgraded).
const REPROBE: Duration = Duration::from_secs(60);
/// How long opening a replication stream may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Clone, Default)]
pub struct PeerRouter {
    peers: Arc<Mutex<HashMap<NodeId, Peer>>>,
    /// Replication streams by peer, opened on first use and replaced when they fail; each
    /// peer's behind its own lock, so opening one never holds up another's.
    links: Arc<Mutex<HashMap<NodeId, Arc<tokio::sync::Mutex<Link>>>>>,
    /// When each peer's replication stream last broke or could not be opened (the peer
    /// stopped, restarted or was cut off): placement hands no leadership to a peer that
    /// failed lately (`failed_within`).
    failures: Arc<Mutex<HashMap<NodeId, Instant>>>,
    /// The pace of the snapshots this node sends, over all peers and groups.
    snapshot_pace: Arc<super::pace::BytePace>,
    /// Local address outgoing peer connections are made from (None: the system's choice).
    source_ip: Option<IpAddr>,
    /// Mutual TLS of peer links (None: plaintext).
    tls: Option<Arc<PeerTls>>,
}

/// A lazily connected channel to the peer at `addr`: over mutual TLS with `tls`, verifying
/// that the peer is `node` (any node of the cluster's CA when `None`), else in plaintext.
pub fn channel_for_addr(
    addr: &str,
    node: Option<NodeId>,
    source_ip: Option<IpAddr>,
    tls: Option<&Arc<PeerTls>>,
) -> Result<Channel> {
    // The scheme stays http: TLS is the connector's business (tonic's own would need its
    // static configuration).
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| Error::InvalidOperation(format!("bad peer address {addr:?}: {e}")))?
        .local_address(source_ip)
        .connect_timeout(Duration::from_millis(500))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(5));
    Ok(match tls {
        Some(tls) => endpoint.connect_with_connector_lazy(TlsDialer {
            tls: Arc::clone(tls),
            name: crate::tls::peer::server_name(node)
                .map_err(|e| Error::InvalidOperation(e.to_string()))?,
            source_ip,
        }),
        None => endpoint.connect_lazy(),
    })
}

fn with_timeout<T>(msg: T, timeout: Duration) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(timeout);
    req
}

fn unreachable(e: impl std::fmt::Display) -> Unreachable<TypeConfig> {
    Unreachable::new(&AnyError::error(e.to_string()))
}

impl PeerRouter {
    pub fn new(source_ip: Option<IpAddr>, tls: Option<Arc<PeerTls>>) -> Self {
        PeerRouter {
            peers: Arc::default(),
            links: Arc::default(),
            failures: Arc::default(),
            snapshot_pace: Arc::default(),
            source_ip,
            tls,
        }
    }

    /// Sets the bytes per second this node may send in snapshots, over all of them (0: no
    /// limit).
    pub fn set_snapshot_rate(&self, bytes_per_second: u64) {
        self.snapshot_pace.set_rate(bytes_per_second);
    }

    fn note_failure(&self, node: NodeId) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.insert(node, Instant::now());
        }
    }

    /// Whether this node's replication stream to `node` broke, or could not be opened,
    /// within the last `window`.
    pub fn failed_within(&self, node: NodeId, window: Duration) -> bool {
        self.failures
            .lock()
            .ok()
            .and_then(|f| f.get(&node).map(|at| at.elapsed() < window))
            .unwrap_or(false)
    }

    /// Records (or updates) the gRPC address of a node.
    pub fn learn(&self, node: NodeId, addr: &str) {
        let Ok(mut peers) = self.peers.lock() else {
            return;
        };
        if peers.get(&node).is_some_and(|p| p.addr == addr) {
            return;
        }
        let open = || channel_for_addr(addr, Some(node), self.source_ip, self.tls.as_ref());
        let channels = open().and_then(|ch| Ok((ch, open()?, open()?)));
        match channels {
            Ok((channel, forward, bulk)) => {
                // A stream to the old address goes with it.
                if let Ok(mut links) = self.links.lock() {
                    links.remove(&node);
                }
                peers.insert(
                    node,
                    Peer {
                        addr: addr.to_string(),
                        channel,
                        forward,
                        bulk,
                    },
                );
            }
            Err(e) => tracing::warn!(%node, addr, "cannot use peer address: {e}"),
        }
    }

    fn peer_channel(&self, node: NodeId, pick: fn(&Peer) -> &Channel) -> Result<Channel> {
        self.peers
            .lock()
            .map_err(|_| Error::Internal("peer table poisoned".into()))?
            .get(&node)
            .map(|p| pick(p).clone())
            .ok_or_else(|| Error::Unavailable(format!("no address known for node {node}")))
    }

    fn channel(&self, node: NodeId) -> Result<Channel> {
        self.peer_channel(node, |p| &p.channel)
    }

    /// The connection forwarded proposals, reads and change streams to `node` ride.
    fn forward_channel(&self, node: NodeId) -> Result<Channel> {
        self.peer_channel(node, |p| &p.forward)
    }

    /// The replication stream to `target`, opened when there is none usable; `None` when
    /// `target` serves no replication stream (its appends go as single calls).
    pub(crate) async fn raft_link(&self, target: NodeId) -> Result<Option<Arc<RaftLink>>> {
        let slot = {
            let mut links = self
                .links
                .lock()
                .map_err(|_| Error::Internal("link table poisoned".into()))?;
            Arc::clone(links.entry(target).or_default())
        };
        let mut link = slot.lock().await;
        match &*link {
            Link::Stream(l) if l.usable() => return Ok(Some(Arc::clone(l))),
            Link::Stream(_) => self.note_failure(target),
            Link::Unary(at) if at.elapsed() < REPROBE => return Ok(None),
            Link::Failed(at) if at.elapsed() < REOPEN => {
                return Err(Error::PeerUnreachable(format!(
                    "replication stream to {target} failed just now"
                )))
            }
            _ => {}
        }
        let channel = self.channel(target)?;
        let opened = match tokio::time::timeout(OPEN_TIMEOUT, RaftLink::open(channel)).await {
            Ok(opened) => opened,
            Err(_) => Err(Error::PeerUnreachable(format!(
                "opening a replication stream to {target} timed out"
            ))),
        };
        match opened {
            Ok(Some(l)) => {
                metrics::counter!("basalt_raft_streams_opened_total").increment(1);
                *link = Link::Stream(Arc::clone(&l));
                Ok(Some(l))
            }
            Ok(None) => {
                tracing::info!(%target, "peer has no replication stream; appends go one by one");
                *link = Link::Unary(Instant::now());
                Ok(None)
            }
            Err(e) => {
                *link = Link::Failed(Instant::now());
                self.note_failure(target);
                Err(e)
            }
        }
    }

    /// The connection to `node` that carries the bytes of stored files.
    pub(crate) fn bulk_channel(&self, node: NodeId) -> Result<Channel> {
        self.peer_channel(node, |p| &p.bulk)
    }

    async fn raft_call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        target: NodeId,
        group: GroupId,
        rpc: &Req,
        timeout: Duration,
        kind: RaftRpc,
    ) -> std::result::Result<Resp, RPCError<TypeConfig>> {
        let ch = self.channel(target).map_err(unreachable)?;
        let mut client = RaftServiceClient::new(ch)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let msg = group_message(group, rpc).map_err(unreachable)?;
        let req = with_timeout(msg, timeout);
        let reply: std::result::Result<tonic::Response<Reply>, tonic::Status> = match kind {
            RaftRpc::AppendEntries => client.append_entries(req).await,
            RaftRpc::Vote => client.vote(req).await,
            RaftRpc::PreVote => client.pre_vote(req).await,
            RaftRpc::TransferLeader => client.transfer_leader(req).await,
        };
        let reply = reply.map_err(unreachable)?;
        from_reply(reply.into_inner()).map_err(|e| RPCError::Unreachable(unreachable(e)))
    }

    fn node_client(ch: Channel) -> NodeServiceClient<Channel> {
        NodeServiceClient::new(ch)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Calls one `NodeService` method on `ch` and decodes its reply.
    async fn node_call<Resp: DeserializeOwned>(
        ch: Channel,
        method: NodeRpc,
        msg: GroupMessage,
        timeout: Duration,
    ) -> Result<Resp> {
        let mut client = Self::node_client(ch);
        let mut msg = with_timeout(msg, timeout);
        // The peer logs the work under the id of the client request it serves.
        if let Some(v) = crate::request_id::current().and_then(|id| id.parse().ok()) {
            msg.metadata_mut()
                .insert(crate::request_id::METADATA_KEY, v);
        }
        let reply = match method {
            NodeRpc::Propose => client.propose(msg).await,
            NodeRpc::Read => client.read(msg).await,
            NodeRpc::Admin => client.admin(msg).await,
        };
        from_reply(reply.map_err(|s| transport_error(&s))?.into_inner())
    }

    /// Asks `node` to propose `cmd` to `group` as its leader (no further forwarding).
    pub async fn propose(&self, node: NodeId, group: GroupId, cmd: &Command) -> Result<Proposed> {
        Self::node_call(
            self.forward_channel(node)?,
            NodeRpc::Propose,
            group_message(group, cmd)?,
            FORWARD_TIMEOUT,
        )
        .await
    }

    /// Asks `node` to serve a linearizable read of `group` as its leader within `timeout`.
    pub async fn read(
        &self,
        node: NodeId,
        group: GroupId,
        req: &ReadRequest,
        timeout: Duration,
    ) -> Result<ReadResponse> {
        self.read_groups(node, &[group], req, timeout).await
    }

    /// Asks `node` to serve a linearizable read of `groups` (a scan or aggregation of several
    /// shards), as the leader of each, within `timeout`.
    pub async fn read_groups(
        &self,
        node: NodeId,
        groups: &[GroupId],
        req: &ReadRequest,
        timeout: Duration,
    ) -> Result<ReadResponse> {
        let (&first, more) = groups
            .split_first()
            .ok_or_else(|| Error::InvalidOperation("a read names no group".into()))?;
        let mut msg = group_message(first, req)?;
        msg.more_groups = more.iter().map(|g| g.get()).collect();
        Self::node_call(self.forward_channel(node)?, NodeRpc::Read, msg, timeout).await
    }

    /// Follows `group`'s changes after `after` (none: from where `node`'s replica stands) on
    /// `node`, passing its pages to `tx` until the stream ends or fails (Err), or `tx` closes.
    pub async fn watch_changes(
        &self,
        node: NodeId,
        group: GroupId,
        after: Option<u64>,
        tx: &tokio::sync::mpsc::Sender<Result<crate::changes::RawPage>>,
    ) -> Result<()> {
        let mut client = Self::node_client(self.forward_channel(node)?);
        let req = ChangesRequest {
            group: group.get(),
            after: after.unwrap_or(0),
            from_head: after.is_none(),
        };
        let mut stream = client
            .watch_changes(req)
            .await
            .map_err(|s| transport_error(&s))?
            .into_inner();
        loop {
            let page = tokio::select! {
                p = stream.message() => p.map_err(|s| transport_error(&s))?,
                () = tx.closed() => return Ok(()),
            };
            let Some(page) = page else {
                return Err(Error::Unavailable(format!("node {node} ended its changes")));
            };
            if page.indexes.len() != page.changes.len() {
                return Err(Error::Internal("a page of changes out of step".into()));
            }
            let page = crate::changes::RawPage {
                upto: page.upto,
                gap: page.gap,
                floor: page.floor,
                entries: page.indexes.into_iter().zip(page.changes).collect(),
            };
            if tx.send(Ok(page)).await.is_err() {
                return Ok(());
            }
        }
    }

    /// Sends an admin request to the node at `addr` (over mutual TLS with `tls`, to whichever
    /// node of the cluster's CA answers there).
    pub async fn admin_at(
        addr: &str,
        req: &AdminRequest,
        timeout: Duration,
        tls: Option<&Arc<PeerTls>>,
    ) -> Result<AdminResponse> {
        Self::node_call(
            channel_for_addr(addr, None, None, tls)?,
            NodeRpc::Admin,
            group_message(META_GROUP, req)?,
            timeout,
        )
        .await
    }

    pub async fn admin(
        &self,
        node: NodeId,
        req: &AdminRequest,
        timeout: Duration,
    ) -> Result<AdminResponse> {
        Self::node_call(
            self.channel(node)?,
            NodeRpc::Admin,
            group_message(META_GROUP, req)?,
            timeout,
        )
        .await
    }

    async fn send_snapshot(
        &self,
        target: NodeId,
        group: GroupId,
        vote: Vote,
        snapshot: openraft::alias::SnapshotOf<TypeConfig, SnapshotFile>,
        timeout: Duration,
    ) -> Result<SnapshotResponse<TypeConfig>> {
        let mut client = RaftServiceClient::new(self.channel(target)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let header = serde_json::to_vec(&(vote, &snapshot.meta))?;
        let mut file = tokio::fs::File::open(&snapshot.snapshot.path).await?;
        let (tx, rx) = tokio::sync::mpsc::channel::<SnapshotChunk>(4);
        let pace = Arc::clone(&self.snapshot_pace);
        // The peer has `timeout` to take each chunk, and to answer after the last one: the
        // time the pace (shared by every snapshot this node sends) spreads them over is not
        // its to answer in. The reader says when the peer took too long.
        let (stalled_tx, stalled_rx) = tokio::sync::oneshot::channel::<&'static str>();
        // Read the file in chunks as the stream is consumed: memory stays at a few chunks.
        let reader = tokio::spawn(async move {
            let mut first = Some(header);
            loop {
                let mut buf = vec![0u8; SNAPSHOT_CHUNK_BYTES];
                let n = match file.read(&mut buf).await {
                    Ok(n) => n,
                    Err(_) => {
                        let _ = stalled_tx.send("reading the snapshot file failed");
                        return;
                    }
                };
                buf.truncate(n);
                pace.take(n as u64).await;
                let chunk = SnapshotChunk {
                    group: group.get(),
                    header: first.take().unwrap_or_default(),
                    data: buf,
                };
                match tokio::time::timeout(timeout, tx.send(chunk)).await {
                    Err(_) => {
                        let _ = stalled_tx.send("the peer took no chunk in time");
                        return;
                    }
                    // The call ended.
                    Ok(Err(_)) => return,
                    Ok(Ok(())) if n == 0 => break,
                    Ok(Ok(())) => {}
                }
            }
            // The stream ends here (the peer reads to its end before it installs).
            drop(tx);
            tokio::time::sleep(timeout).await;
            let _ = stalled_tx.send("the peer did not answer after the last chunk in time");
        });
        // The reader stops with the call, however it ends (openraft may drop it).
        let _reader = AbortOnDrop(reader);
        let stalled = async {
            match stalled_rx.await {
                Ok(why) => why,
                // The reader ended without a word: the call's own answer says how it went.
                Err(_) => std::future::pending().await,
            }
        };
        let req = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        let result = tokio::select! {
            r = client.install_snapshot(req) => r,
            why = stalled => {
                return Err(Error::Unavailable(format!(
                    "snapshot of group {group} to node {target}: {why}"
                )))
            }
        };
        let reply = result.map_err(|s| transport_error(&s))?;
        metrics::counter!("basalt_raft_snapshots_sent_total").increment(1);
        from_reply(reply.into_inner())
    }
}

/// A task stopped when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl GroupRouter<TypeConfig, GroupId> for PeerRouter {
    type SnapshotData = SnapshotFile;

    async fn append_entries(
        &self,
        target: NodeId,
        group: GroupId,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> std::result::Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.raft_call(
            target,
            group,
            &rpc,
            option.hard_ttl(),
            RaftRpc::AppendEntries,
        )
        .await
    }

    async fn vote(
        &self,
        target: NodeId,
        group: GroupId,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> std::result::Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.raft_call(target, group, &rpc, option.hard_ttl(), RaftRpc::Vote)
            .await
    }

    async fn pre_vote(
        &self,
        target: NodeId,
        group: GroupId,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> std::result::Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.raft_call(target, group, &rpc, option.hard_ttl(), RaftRpc::PreVote)
            .await
    }

    async fn full_snapshot(
        &self,
        target: NodeId,
        group: GroupId,
        vote: Vote,
        snapshot: openraft::alias::SnapshotOf<TypeConfig, SnapshotFile>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> std::result::Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let send = self.send_snapshot(target, group, vote, snapshot, option.hard_ttl());
        tokio::select! {
            r = send => r.map_err(|e| StreamingError::Unreachable(unreachable(e))),
            closed = cancel => Err(StreamingError::Closed(closed)),
        }
    }

    async fn transfer_leader(
        &self,
        target: NodeId,
        group: GroupId,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> std::result::Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.raft_call(
            target,
            group,
            &req,
            option.hard_ttl(),
            RaftRpc::TransferLeader,
        )
        .await
    }
}
