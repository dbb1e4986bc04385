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
use crate::rpc::pb::{ChangesPage, ChangesRequest, GroupMessage, Reply};

/// Whoever answers admin requests addressed to this node.
pub trait AdminHandler: Send + Sync + 'static {
    fn handle(&self, req: AdminRequest) -> BoxFuture<'_, Result<AdminResponse>>;
}

pub struct NodeServiceImpl {
    pub(super) replicas: Replicas,
    pub(super) admin: Arc<dyn AdminHandler>,
    pub(super) auth: super::authorize::PeerAuth,
}

type RpcResult = std::result::Result<Response<Reply>, Status>;
type PageStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = std::result::Result<ChangesPage, Status>> + Send>>;

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
        self.auth.node(&req, "propose")?;
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
        self.auth.node(&req, "read")?;
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

    type WatchChangesStream = PageStream;

    async fn watch_changes(
        &self,
        req: Request<ChangesRequest>,
    ) -> std::result::Result<Response<PageStream>, Status> {
        self.auth.node(&req, "follow changes")?;
        let r = req.into_inner();
        let group = GroupId::new(r.group);
        if !self.replicas.holds_member_replica(group) {
            return Err(Status::failed_precondition(format!(
                "node holds no replica of group {group}"
            )));
        }
        let after = (!r.from_head).then_some(r.after);
        let (pages_tx, mut pages) =
            tokio::sync::mpsc::channel::<crate::error::Result<crate::changes::RawPage>>(2);
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let replicas = self.replicas.clone();
        let out_tx = tx.clone();
        // Owns the receiver: when the caller hangs up, it ends and `follow_local` sees it.
        let forward = tokio::spawn(async move {
            while let Some(page) = pages.recv().await {
                let out = page
                    .map(|p| {
                        let (indexes, changes) = p.entries.into_iter().unzip();
                        ChangesPage {
                            upto: p.upto,
                            gap: p.gap,
                            floor: p.floor,
                            indexes,
                            changes,
                        }
                    })
                    .map_err(|e| Status::unavailable(e.to_string()));
                if out_tx.send(out).await.is_err() {
                    return;
                }
            }
        });
        tokio::spawn(async move {
            let followed = replicas.follow_local(group, after, &pages_tx).await;
            drop(pages_tx);
            let _ = forward.await;
            if let Err(e) = followed {
                let _ = tx.send(Err(Status::unavailable(e.to_string()))).await;
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn admin(&self, req: Request<GroupMessage>) -> RpcResult {
        let r: AdminRequest = match decode(&req.get_ref().payload) {
            Ok(r) => r,
            Err(e) => return Ok(Response::new(reply::<AdminResponse>(Err(e)))),
        };
        self.auth.admin(&req, &r)?;
        Ok(Response::new(reply(self.admin.handle(r).await)))
    }
}
