//! Settling a write on every member of its group: what nodes read from their own replica (roles
//! and app settings in the metadata group; a user's sessions in its shard, `freshness`) answers a
//! write only once each reachable member has applied it, so the next request through any node
//! sees it.

use std::time::{Duration, Instant};

use crate::admin::{AdminRequest, AdminResponse, GroupStatus, NodeState};
use crate::ids::{GroupId, NodeId, META_GROUP};

use super::Replicas;

/// Deadline of one status question to a member while settling.
const SETTLE_POLL_TIMEOUT: Duration = Duration::from_millis(500);

impl Replicas {
    /// Waits until every node that is a member of `group` in its own view (asked: the active
    /// nodes, and removed ones still in this node's view of the group) has applied `index` or
    /// does not vouch for its replica, or the settle timeout passes (a member that is down or
    /// cut off catches up when it returns; it cannot be told sooner, and it stops vouching for
    /// its replica meanwhile: `freshness`). Answers the members still behind.
    pub async fn settle(&self, group: GroupId, index: u64) -> Vec<NodeId> {
        let deadline = Instant::now() + self.inner.contact.settle_timeout();
        let mut behind = self.settle_targets(group);
        loop {
            let checks = behind.iter().map(|node| async move {
                if *node == self.node_id() {
                    let local = self.status_of(group);
                    return local.is_none_or(|s| settled(&s, *node, index));
                }
                match self
                    .router()
                    .admin(*node, &AdminRequest::Status, SETTLE_POLL_TIMEOUT)
                    .await
                {
                    Ok(AdminResponse::Status(s)) => s
                        .groups
                        .iter()
                        .any(|g| g.group == group && settled(g, *node, index)),
                    _ => false,
                }
            });
            let done = futures::future::join_all(checks).await;
            let mut i = 0;
            behind.retain(|_| {
                i += 1;
                !done[i - 1]
            });
            if behind.is_empty() || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !behind.is_empty() {
            tracing::warn!(
                ?behind,
                %group,
                index,
                "change not yet applied on every member"
            );
        }
        behind
    }
}

impl Replicas {
    /// The nodes a write of `group` settles on: every active node, and any other (a removed
    /// node being drained) that this node's view of the group's membership still names.
    fn settle_targets(&self, group: GroupId) -> Vec<NodeId> {
        let in_group: Vec<NodeId> = self
            .status_of(group)
            .map(|s| s.voters.into_iter().chain(s.learners).collect())
            .unwrap_or_default();
        self.local_nodes()
            .into_iter()
            .filter(|n| n.state == NodeState::Active || in_group.contains(&n.id))
            .map(|n| {
                self.router().learn(n.id, &n.rpc_addr);
                n.id
            })
            .collect()
    }
}

/// Whether `node`'s replica, as its status shows it, has applied `index`, or cannot answer a
/// read alone: no member in its own view, or — in a data group — not vouching for being current
/// (it learns of the write before it vouches again: the leader's next message carries the new
/// commit index). Every node reads the metadata group as its replica stands, without asking
/// whether it is current (roles, app settings): there only applying counts.
fn settled(status: &GroupStatus, node: NodeId, index: u64) -> bool {
    status.applied >= index
        || !status.hosts(node)
        || (status.group != META_GROUP && !status.current)
}
