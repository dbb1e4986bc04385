//! Finalizes the cluster's version (`services::upgrade::round`) once every member's build
//! has a feature that is not on yet, unless an administrator holds the upgrade.

use std::time::Duration;

use futures::future::BoxFuture;

use super::job::Job;
use crate::error::Result;
use crate::replicas::Replicas;

pub struct Upgrade {
    pub every: Duration,
}

impl Job for Upgrade {
    fn name(&self) -> &'static str {
        "upgrade"
    }

    fn period(&self) -> Duration {
        self.every
    }

    fn run<'a>(&'a self, replicas: &'a Replicas) -> BoxFuture<'a, Result<()>> {
        Box::pin(crate::services::upgrade::round(replicas))
    }
}
