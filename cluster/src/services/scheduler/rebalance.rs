//! Runs a round of the rebalancer's planner (`services::rebalance`) every second.

use std::time::Duration;

use futures::future::BoxFuture;

use super::job::Job;
use crate::error::Result;
use crate::replicas::Replicas;
use crate::services::rebalance::Planner;

pub struct Rebalance {
    pub every: Duration,
    pub planner: Planner,
}

impl Job for Rebalance {
    fn name(&self) -> &'static str {
        "rebalance"
    }

    fn period(&self) -> Duration {
        self.every
    }

    fn run<'a>(&'a self, replicas: &'a Replicas) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.planner.round(replicas))
    }
}
