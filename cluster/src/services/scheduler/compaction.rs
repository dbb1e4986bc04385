//! Asks every active node to snapshot groups with a long log since their last snapshot and to
//! compact its Raft log (`Replicas::compact`), so logs stay short even for quiet groups.

use std::time::Duration;

use futures::future::BoxFuture;

use super::job::Job;
use crate::admin::AdminRequest;
use crate::error::Result;
use crate::replicas::Replicas;

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

    fn run<'a>(&'a self, replicas: &'a Replicas) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            for node in replicas.member_addrs().into_keys() {
                if node == replicas.node_id() {
                    replicas.compact().await;
                } else {
                    if let Err(e) = replicas
                        .router()
                        .admin(node, &AdminRequest::Compact, Duration::from_secs(30))
                        .await
                    {
                        tracing::info!(%node, "compaction request failed: {e}");
                    }
                }
            }
            Ok(())
        })
    }
}
