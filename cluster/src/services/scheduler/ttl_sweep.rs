//! Deletes expired records in every group: proposes `ExpireRecords { now }`, so every replica
//! deletes the same records.

use std::time::Duration;

use futures::future::BoxFuture;

use super::job::Job;
use crate::command::{Command, CommandResult};
use crate::error::Result;
use crate::replicas::{now_ms, Replicas};

pub struct TtlSweep {
    pub every: Duration,
}

impl Job for TtlSweep {
    fn name(&self) -> &'static str {
        "ttl_sweep"
    }

    fn period(&self) -> Duration {
        self.every
    }

    fn run<'a>(&'a self, replicas: &'a Replicas) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let now = now_ms();
            let sweeps = replicas
                .group_ids()
                .into_iter()
                .map(|g| replicas.propose(g, Command::ExpireRecords { now_ms: now }));
            let mut first_error = None;
            for r in futures::future::join_all(sweeps).await {
                match r {
                    Ok(p) => {
                        if let CommandResult::Expired { count } = p.result {
                            metrics::counter!("basalt_ttl_expired_records_total").increment(count);
                        }
                    }
                    Err(e) => first_error = first_error.or(Some(e)),
                }
            }
            first_error.map_or(Ok(()), Err)
        })
    }
}
