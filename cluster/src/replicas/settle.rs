//! Settling a write on every member of its group: what nodes read from their own replica (roles
//! and app settings in the metadata group; a user's sessions in its shard, `freshness`) answers a
//! write only once each reachable member has applied it, so the next request through any node
//! sees it.

use std::time::{Duration, Instant};

use crate::admin::{AdminRequest, AdminResponse, GroupStatus};
use crate::ids::{GroupId, NodeId};

use super::Replicas;

/// How long a change that nodes read from their own replica waits for the members to apply it
/// (longer than `freshness`'s lease plus a Raft message's deadline).
pub(super) const SETTLE_TIMEOUT: Duration = Duration::from_secs(3);
/// Deadline of one status question to a member while settling.
const SETTLE_POLL_TIMEOUT: Duration = Duration::from_millis(500);

impl Replicas {
    /// Waits until every active node that is a member of `group` (in its own view) has applied
    /// `index`, or `timeout` passes (a member that is down or cut off catches up when it
    /// returns; it cannot be told sooner, and it stops vouching for its replica meanwhile:
    /// `freshness`). Answers the members still behind.
    pub async fn settle(&self, group: GroupId, index: u64, timeout: Duration) -> Vec<NodeId> {
        let deadline = Instant::now() + timeout;
        let mut behind: Vec<NodeId> = self.member_addrs().into_keys().collect();
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
                group,
                index,
                "change not yet applied on every member"
            );
        }
        behind
    }
}

/// Whether `node`'s replica, as its status shows it, has applied `index` or is no member.
fn settled(status: &GroupStatus, node: NodeId, index: u64) -> bool {
    status.applied >= index || !(status.voters.contains(&node) || status.learners.contains(&node))
}
