//! Settling a metadata-group write on every member: the classes and records that every node
//! reads from its own replica (roles, app settings) answer a write only once each reachable
//! member has applied it, so the next request through any node sees it.

use std::time::{Duration, Instant};

use crate::admin::{AdminRequest, AdminResponse};
use crate::ids::{NodeId, META_GROUP};

use super::Replicas;

/// How long a metadata change that every node reads locally waits for the members to apply it.
pub(super) const SETTLE_TIMEOUT: Duration = Duration::from_secs(3);
/// Deadline of one status question to a member while settling.
const SETTLE_POLL_TIMEOUT: Duration = Duration::from_millis(500);

impl Replicas {
    /// Waits until every active member's replica of the metadata group has applied `index`, or
    /// `timeout` passes (a member that is down or cut off catches up when it returns; it
    /// cannot be told sooner). Answers the members still behind.
    pub async fn settle_meta(&self, index: u64, timeout: Duration) -> Vec<NodeId> {
        let deadline = Instant::now() + timeout;
        let mut behind: Vec<NodeId> = self.member_addrs().into_keys().collect();
        loop {
            let checks = behind.iter().map(|node| async move {
                if *node == self.node_id() {
                    return self.meta_applied() >= index;
                }
                match self
                    .router()
                    .admin(*node, &AdminRequest::Status, SETTLE_POLL_TIMEOUT)
                    .await
                {
                    Ok(AdminResponse::Status(s)) => s
                        .groups
                        .iter()
                        .any(|g| g.group == META_GROUP && g.applied >= index),
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
                index,
                "metadata change not yet applied on every member"
            );
        }
        behind
    }
}
