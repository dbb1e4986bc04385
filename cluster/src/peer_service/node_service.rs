//! Server side of `NodeService`: proposals and reads forwarded by other nodes (served by the
//! local replica only, never forwarded again), and admin requests. Forwarded work runs in a
//! `request` span carrying the id of the client request it serves (`request_id`), so its log
//! lines match the forwarding node's.

use std::sync::Arc;

use futures::future::BoxFuture;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::admin::{AdminRequest, AdminResponse};
use crate::command::{Command, ReadRequest};
use crate::error::Result;
use crate::ids::GroupId;
use crate::replicas::Replicas;
use crate::rpc::convert::{decode, reply};
use crate::rpc::pb::node_service_server::NodeService;
use crate::rpc::pb::{GroupMessage, Reply};

/// Whoever answers admin requests addressed to this node.
pub trait AdminHandler: Send + Sync + 'static {
    fn handle(&self, req: AdminRequest) -> BoxFuture<'_, Result<AdminResponse>>;
}

pub struct NodeServiceImpl {
    pub(super) replicas: Replicas,
    pub(super) admin: Arc<dyn AdminHandler>,
}

type RpcResult = std::result::Result<Response<Reply>, Status>;

/// The span of forwarded work: the client request's id from the metadata ("-" without one).
fn request_span<T>(req: &Request<T>) -> tracing::Span {
    let id = req
        .metadata()
        .get(crate::request_id::METADATA_KEY)
        .and_then(|v| v.to_str().ok())
        .filter(|id| crate::request_id::is_plain(id))
        .unwrap_or("-");
    tracing::info_span!("request", id = %id)
}

#[tonic::async_trait]
impl NodeService for NodeServiceImpl {
    async fn propose(&self, req: Request<GroupMessage>) -> RpcResult {
        let span = request_span(&req);
        let msg = req.into_inner();
        let result = async {
            tracing::debug!(group = msg.group, "forwarded proposal");
            let cmd: Command = decode(&msg.payload)?;
            self.replicas
                .local_propose(GroupId::new(msg.group), &cmd)
                .await
        }
        .instrument(span)
        .await;
        Ok(Response::new(reply(result)))
    }

    async fn read(&self, req: Request<GroupMessage>) -> RpcResult {
        let span = request_span(&req);
        let msg = req.into_inner();
        let result = async {
            tracing::debug!(
                group = msg.group,
                more = msg.more_groups.len(),
                "forwarded read"
            );
            let r: ReadRequest = decode(&msg.payload)?;
            let groups: Vec<GroupId> = std::iter::once(msg.group)
                .chain(msg.more_groups.iter().copied())
                .map(GroupId::new)
                .collect();
            self.replicas.local_read_groups(&groups, &r).await
        }
        .instrument(span)
        .await;
        Ok(Response::new(reply(result)))
    }

    async fn admin(&self, req: Request<GroupMessage>) -> RpcResult {
        let msg = req.into_inner();
        let result = async {
            let r: AdminRequest = decode(&msg.payload)?;
            self.admin.handle(r).await
        }
        .await;
        Ok(Response::new(reply(result)))
    }
}
