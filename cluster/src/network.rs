//! `GroupNetwork`: openraft's network factory for one group, over the node's shared
//! `PeerRouter` (one connection per peer for all groups; every message carries its group).
//! Its clients (`GroupClient`) send AppendEntries on the peer's replication stream
//! (`rpc::raft_link`), pipelined and batched with every other group's, and everything else
//! (votes, snapshots, leadership transfers) as single calls.

use std::future::Future;

use futures::{Stream, StreamExt};
use openraft::base::{BoxFuture, BoxStream};
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::v2::RaftNetworkV2;
use openraft::network::{stream_append_sequential, RPCOption};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult,
    TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{AnyError, BasicNode, RaftNetworkFactory};
use openraft_multi::GroupRouter;

use crate::ids::{GroupId, NodeId};
use crate::raft::{TypeConfig, Vote};
use crate::rpc::router::PeerRouter;
use crate::statemachine::SnapshotFile;

pub struct GroupNetwork {
    router: PeerRouter,
    group: GroupId,
}

impl GroupNetwork {
    pub fn new(router: PeerRouter, group: GroupId) -> Self {
        GroupNetwork { router, group }
    }
}

impl RaftNetworkFactory<TypeConfig> for GroupNetwork {
    type Network = GroupClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        self.router.learn(target, &node.addr);
        GroupClient {
            router: self.router.clone(),
            target,
            group: self.group,
        }
    }
}

/// One group's Raft traffic to one peer.
pub struct GroupClient {
    router: PeerRouter,
    target: NodeId,
    group: GroupId,
}

fn unreachable(e: impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(&AnyError::error(e.to_string())))
}

/// A failed session as openraft should weigh it: a peer that cannot be reached is backed off
/// from; a stall or a refused session is retried sooner.
fn session_error(e: crate::error::Error) -> RPCError<TypeConfig> {
    match e {
        crate::error::Error::PeerUnreachable(_) => unreachable(e),
        other => RPCError::Network(NetworkError::from_string(other)),
    }
}

impl RaftNetworkV2<TypeConfig> for GroupClient {
    type SnapshotData = SnapshotFile;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.router
            .append_entries(self.target, self.group, rpc, option)
            .await
    }

    /// Appends on the peer's replication stream: sent as openraft produces them, several in
    /// flight, answered in order; one at a time when the peer has no such stream.
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<
        's,
        Result<
            BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>,
            RPCError<TypeConfig>,
        >,
    >
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        Box::pin(async move {
            match self.router.raft_link(self.target).await {
                Ok(Some(link)) => {
                    let answers = link
                        .session(self.group, input)
                        .map(|r| r.map_err(session_error));
                    let answers: BoxStream<'s, _> = Box::pin(answers);
                    Ok(answers)
                }
                Ok(None) => stream_append_sequential(self, input, option).await,
                Err(e) => Err(unreachable(e)),
            }
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.router.vote(self.target, self.group, rpc, option).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.router
            .pre_vote(self.target, self.group, rpc, option)
            .await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: openraft::alias::SnapshotOf<TypeConfig, SnapshotFile>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        self.router
            .full_snapshot(self.target, self.group, vote, snapshot, cancel, option)
            .await
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.router
            .transfer_leader(self.target, self.group, req, option)
            .await
    }
}
