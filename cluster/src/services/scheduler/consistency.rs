//! Runs a consistency check of every group's replicas (`services::check`) now and then: a
//! finding is logged, counted and left as the metadata group's alarm record.

use std::time::Duration;

use futures::future::BoxFuture;

use super::job::Job;
use crate::error::Result;
use crate::replicas::Replicas;

pub struct ConsistencyCheck {
    pub every: Duration,
    /// A check is running (it runs on its own task: the other jobs do not wait for it).
    pub running: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Job for ConsistencyCheck {
    fn name(&self) -> &'static str {
        "consistency_check"
    }

    fn period(&self) -> Duration {
        self.every
    }

    fn run<'a>(&'a self, replicas: &'a Replicas) -> BoxFuture<'a, Result<()>> {
        use std::sync::atomic::Ordering;
        Box::pin(async move {
            if self.running.swap(true, Ordering::SeqCst) {
                return Ok(());
            }
            let (replicas, running) = (replicas.clone(), std::sync::Arc::clone(&self.running));
            tokio::spawn(async move {
                if let Err(e) = crate::services::check::run(&replicas).await {
                    tracing::warn!("consistency check: {e}");
                }
                running.store(false, Ordering::SeqCst);
            });
            Ok(())
        })
    }
}
