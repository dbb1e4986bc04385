//! `RaftService`: hands Raft messages (votes, appends, snapshots streamed in chunks) to the
//! addressed group's local replica (the replication stream of pipelined appends of all groups
//! is served by `raft_stream`), noting each accepted append as contact with the leader
//! (`replicas::freshness`). A node that started within a leader lease refuses votes until the
//! lease is over (decisions/0015), and a replica erased after its removal until it is a voter
//! again (`replicas::erase`).

use futures::StreamExt;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, TransferLeaderRequest, VoteRequest,
};
use tokio::io::AsyncWriteExt;
use tonic::{Request, Response, Status, Streaming};

use super::authorize::check_sender;
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId};
use crate::raft::{SnapshotMeta, TypeConfig, Vote};
use crate::replicas::Replicas;
use crate::rpc::convert::{decode, reply};
use crate::rpc::pb::raft_service_server::RaftService;
use crate::rpc::pb::{GroupMessage, RaftFrame, Reply, SnapshotChunk};
use crate::statemachine::SnapshotFile;

pub struct RaftServiceImpl {
    pub(super) replicas: Replicas,
    pub(super) auth: super::authorize::PeerAuth,
}

impl RaftServiceImpl {
    /// Refuses votes and pre-votes while this node's vote hold after its start lasts
    /// (`RaftTuning::vote_hold`): the candidate sees an unreachable voter and tries again.
    /// Refuses them too in a group whose replica here was erased after its removal and is not
    /// a voter again since (`Replicas::may_vote_in`).
    fn vote_allowed(&self, group: GroupId) -> Result<()> {
        let refused = if !self.replicas.may_vote() {
            "this node started within a leader lease and does not vote yet".to_string()
        } else if !self.replicas.may_vote_in(group) {
            format!("this node's replica of group {group} was removed and is not a voter again")
        } else {
            return Ok(());
        };
        metrics::counter!("basalt_raft_votes_refused_total").increment(1);
        Err(Error::Unavailable(refused))
    }

    async fn install_snapshot_stream(
        &self,
        sender: Option<NodeId>,
        mut stream: Streaming<SnapshotChunk>,
    ) -> Result<openraft::raft::SnapshotResponse<TypeConfig>> {
        let first = stream
            .next()
            .await
            .ok_or_else(|| Error::InvalidOperation("empty snapshot stream".into()))?
            .map_err(|s| Error::Unavailable(s.message().to_string()))?;
        let (vote, meta): (Vote, SnapshotMeta) = decode(&first.header)?;
        check_sender(sender, &vote)?;
        let group = GroupId::new(first.group);
        let raft = self.replicas.peer_group(group).await?;
        let path = self
            .replicas
            .incoming_dir()
            .join(format!("g{group}-{}.part", rand::random::<u64>()));
        let mut file = tokio::fs::File::create(&path).await?;
        file.write_all(&first.data).await?;
        let received: Result<()> = async {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|s| Error::Unavailable(s.message().to_string()))?;
                file.write_all(&chunk.data).await?;
            }
            file.flush().await?;
            file.sync_all().await?;
            Ok(())
        }
        .await;
        if let Err(e) = received {
            let _ = tokio::fs::remove_file(&path).await;
            return Err(e);
        }
        metrics::counter!("basalt_raft_snapshots_received_total").increment(1);
        let snapshot = openraft::alias::SnapshotOf::<TypeConfig, SnapshotFile> {
            meta,
            snapshot: SnapshotFile { path: path.clone() },
        };
        let resp = raft
            .install_full_snapshot(vote, snapshot)
            .await
            .map_err(|e| Error::Unavailable(e.to_string()));
        // The install moved the file; a refused snapshot leaves it here.
        let _ = tokio::fs::remove_file(&path).await;
        resp
    }
}

type RpcResult = std::result::Result<Response<Reply>, Status>;

type FrameStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = std::result::Result<RaftFrame, Status>> + Send>>;

#[tonic::async_trait]
impl RaftService for RaftServiceImpl {
    type ReplicateStream = FrameStream;

    async fn replicate(
        &self,
        req: Request<Streaming<RaftFrame>>,
    ) -> std::result::Result<Response<FrameStream>, Status> {
        let sender = self.auth.node(&req, "replicate")?;
        let answers = super::raft_stream::serve(self.replicas.clone(), sender, req.into_inner());
        Ok(Response::new(Box::pin(answers)))
    }

    async fn append_entries(&self, req: Request<GroupMessage>) -> RpcResult {
        let sender = self.auth.node(&req, "append entries")?;
        let msg = req.into_inner();
        let result = async {
            let rpc: AppendEntriesRequest<TypeConfig> = decode(&msg.payload)?;
            check_sender(sender, &rpc.vote)?;
            let resp = self
                .replicas
                .peer_group(GroupId::new(msg.group))
                .await?
                .append_entries(rpc)
                .await
                .map_err(|e| Error::Unavailable(e.to_string()))?;
            // Anything but a higher vote means the sender is this replica's leader.
            if !matches!(resp, AppendEntriesResponse::HigherVote(_)) {
                self.replicas.note_leader_contact(GroupId::new(msg.group));
            }
            Ok(resp)
        }
        .await;
        Ok(Response::new(reply(result)))
    }

    async fn vote(&self, req: Request<GroupMessage>) -> RpcResult {
        let sender = self.auth.node(&req, "ask for votes")?;
        let msg = req.into_inner();
        let result = async {
            self.vote_allowed(GroupId::new(msg.group))?;
            let rpc: VoteRequest<TypeConfig> = decode(&msg.payload)?;
            check_sender(sender, &rpc.vote)?;
            let raft = self.replicas.peer_group(GroupId::new(msg.group)).await?;
            // Again: the replica may have been erased (and made anew) meanwhile.
            self.vote_allowed(GroupId::new(msg.group))?;
            raft.vote(rpc)
                .await
                .map_err(|e| Error::Unavailable(e.to_string()))
        }
        .await;
        Ok(Response::new(reply(result)))
    }

    async fn pre_vote(&self, req: Request<GroupMessage>) -> RpcResult {
        let sender = self.auth.node(&req, "ask for votes")?;
        let msg = req.into_inner();
        let result = async {
            self.vote_allowed(GroupId::new(msg.group))?;
            let rpc: VoteRequest<TypeConfig> = decode(&msg.payload)?;
            check_sender(sender, &rpc.vote)?;
            let raft = self.replicas.peer_group(GroupId::new(msg.group)).await?;
            // Again: the replica may have been erased (and made anew) meanwhile.
            self.vote_allowed(GroupId::new(msg.group))?;
            raft.pre_vote(rpc)
                .await
                .map_err(|e| Error::Unavailable(e.to_string()))
        }
        .await;
        Ok(Response::new(reply(result)))
    }

    async fn transfer_leader(&self, req: Request<GroupMessage>) -> RpcResult {
        let sender = self.auth.node(&req, "transfer leadership")?;
        let msg = req.into_inner();
        let result = async {
            let rpc: TransferLeaderRequest<TypeConfig> = decode(&msg.payload)?;
            check_sender(sender, rpc.from_leader())?;
            if self.replicas.draining() {
                // A leader that has not seen the drain yet: it keeps the group.
                return Err(Error::Unavailable(
                    "this node is draining: it takes no leadership".into(),
                ));
            }
            self.replicas
                .peer_group(GroupId::new(msg.group))
                .await?
                .handle_transfer_leader(rpc)
                .await
                .map_err(|e| Error::Unavailable(e.to_string()))
        }
        .await;
        Ok(Response::new(reply(result)))
    }

    async fn install_snapshot(&self, req: Request<Streaming<SnapshotChunk>>) -> RpcResult {
        let sender = self.auth.node(&req, "install snapshots")?;
        let result = self.install_snapshot_stream(sender, req.into_inner()).await;
        Ok(Response::new(reply(result)))
    }
}
