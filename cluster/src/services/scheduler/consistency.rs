//! Runs a consistency check of every group's replicas (`services::check`) now and then: a
//! finding is logged, counted and left as the metadata group's alarm record.

use std::time::Duration;

use futures::future::BoxFuture;

use super::job::Job;
use crate::error::Result;
use crate::replicas::Replicas;

pub struct ConsistencyCheck {
    pub every: Duration,
}

impl Job for ConsistencyCheck {
    fn name(&self) -> &'static str {
        "consistency_check"
    }

    fn period(&self) -> Duration {
        self.every
    }

    fn run<'a>(&'a self, replicas: &'a Replicas) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            crate::services::check::run(replicas).await?;
            Ok(())
        })
    }
}
