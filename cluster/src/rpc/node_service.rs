//! Server side of `NodeService`: proposals and reads forwarded by other nodes (served by the
//! local replica only, never forwarded again), and admin requests.

use tonic::{Request, Response, Status};

use super::convert::{decode, reply};
use super::pb::node_service_server::NodeService;
use super::pb::{GroupMessage, Reply};
use crate::admin::AdminRequest;
use crate::cluster::Cluster;
use crate::command::{Command, ReadRequest};

pub struct NodeServiceImpl {
    cluster: Cluster,
}

impl NodeServiceImpl {
    pub fn new(cluster: Cluster) -> Self {
        NodeServiceImpl { cluster }
    }
}

type RpcResult = std::result::Result<Response<Reply>, Status>;

#[tonic::async_trait]
impl NodeService for NodeServiceImpl {
    async fn propose(&self, req: Request<GroupMessage>) -> RpcResult {
        let msg = req.into_inner();
        let result = async {
            let cmd: Command = decode(&msg.payload)?;
            self.cluster.local_propose(msg.group, &cmd).await
        }
        .await;
        Ok(Response::new(reply(result)))
    }

    async fn read(&self, req: Request<GroupMessage>) -> RpcResult {
        let msg = req.into_inner();
        let result = async {
            let r: ReadRequest = decode(&msg.payload)?;
            self.cluster.local_read(msg.group, &r).await
        }
        .await;
        Ok(Response::new(reply(result)))
    }

    async fn admin(&self, req: Request<GroupMessage>) -> RpcResult {
        let msg = req.into_inner();
        let result = async {
            let r: AdminRequest = decode(&msg.payload)?;
            self.cluster.admin(r).await
        }
        .await;
        Ok(Response::new(reply(result)))
    }
}
