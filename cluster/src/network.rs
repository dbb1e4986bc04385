//! `GroupNetwork`: openraft's network factory for one group, over the node's shared
//! `PeerRouter` (one connection per peer for all groups; every message carries its group).

use openraft::{BasicNode, RaftNetworkFactory};
use openraft_multi::GroupNetworkAdapter;

use crate::ids::{GroupId, NodeId};
use crate::raft::TypeConfig;
use crate::rpc::router::PeerRouter;

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
    type Network = GroupNetworkAdapter<TypeConfig, GroupId, PeerRouter>;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        self.router.learn(target, &node.addr);
        GroupNetworkAdapter::new(self.router.clone(), target, self.group)
    }
}
