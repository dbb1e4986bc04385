//! Asks every active node to snapshot groups with a long log since their last snapshot and to
//! compact its Raft log (`Cluster::compact`), so logs stay short even for quiet groups.

use std::time::Duration;

use futures::future::BoxFuture;

use super::Job;
use crate::admin::AdminRequest;
use crate::cluster::{member_addrs, Cluster};
use crate::error::Result;

pub struct Compaction {
    pub every: Duration,
}

impl Job for Compaction {
    fn name(&self) -> &'static str {
        "compaction"
    }

    fn period(&self) -> Duration {
        self.every
    }

    fn run<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            for (node, addr) in member_addrs(cluster) {
                if node == cluster.node_id() {
                    cluster.compact().await;
                } else {
                    cluster.inner.router.learn(node, &addr);
                    if let Err(e) = cluster
                        .inner
                        .router
                        .admin(node, &AdminRequest::Compact, Duration::from_secs(30))
                        .await
                    {
                        tracing::info!(node, "compaction request failed: {e}");
                    }
                }
            }
            Ok(())
        })
    }
}
