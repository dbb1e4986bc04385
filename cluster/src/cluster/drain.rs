//! Draining this node before it stops (issue 51): asked by the node crate on SIGTERM, or by an
//! administrator (`AdminRequest::Drain`, which `drain_requested` tells the node crate of). A
//! drain records itself in the node's member record (`NodeRecord::draining_since_ms`), so that
//! placement on every node gives it no leadership, then hands over the leaderships it holds
//! (`services::placement::hand_over_leaderships`). The node's next start clears the record
//! (`bootstrap::register_self`). Neighbours: `membership` answers the admin request, the node
//! crate's `drain` runs the steps around the HTTP server.

use std::time::Duration;

use super::Cluster;
use crate::ids::GroupId;

impl Cluster {
    /// Asks this node to drain and stop, as SIGTERM does (`AdminRequest::Drain`).
    pub fn request_drain(&self) {
        self.inner.drain_asked.send_replace(true);
    }

    /// Waits until an administrator asked this node to drain (`request_drain`).
    pub async fn drain_requested(&self) {
        let mut asked = self.inner.drain_asked.subscribe();
        // The sender lives as long as the cluster: an error cannot come while this waits.
        let _ = asked.wait_for(|asked| *asked).await;
    }

    /// Records that this node is draining (every node's placement then gives it no
    /// leadership, and it refuses leaderships handed to it), then hands its leaderships over
    /// to other voters, for at most `within`: the groups it still leads (with no other live
    /// voter, or that would not move in time).
    pub async fn drain(&self, within: Duration) -> Vec<GroupId> {
        let deadline = std::time::Instant::now() + within;
        self.replicas().set_draining();
        // Recorded before any leadership moves, so that the new leaders do not hand it back;
        // a metadata group that cannot commit (its quorum gone) does not hold the drain up.
        let me = self.node_id();
        let since = crate::replicas::now_ms();
        let mut recorded = false;
        for _ in 0..RECORD_ATTEMPTS {
            let update = self.update_node_record(me, |r| {
                r.draining_since_ms.get_or_insert(since);
            });
            match tokio::time::timeout(RECORD_WAIT, update).await {
                Ok(Ok(())) => {
                    recorded = true;
                    break;
                }
                Ok(Err(e)) => tracing::debug!("recording the drain in the member record: {e}"),
                Err(_) => tracing::debug!("recording the drain in the member record: timed out"),
            }
        }
        if !recorded {
            tracing::warn!("the member record does not say this node drains: handing its leaderships over anyway");
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        crate::services::placement::hand_over_leaderships(self.replicas(), left).await
    }
}

/// Tries at recording a drain in the member record, each of at most `RECORD_WAIT`.
const RECORD_ATTEMPTS: usize = 3;
const RECORD_WAIT: Duration = Duration::from_secs(1);
