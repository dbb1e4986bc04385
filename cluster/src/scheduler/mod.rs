//! The leader-elected scheduler: the leader of the metadata group runs every registered
//! periodic job. When it loses leadership the next leader starts running them within an
//! election timeout; jobs are idempotent, so a run repeated around a hand-over does no harm.

mod compaction;
mod ttl_sweep;

use openraft::async_runtime::WatchReceiver;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::cluster::Cluster;
use crate::error::Result;
use crate::ids::META_GROUP;

/// A periodic job run by the scheduler.
pub trait Job: Send + Sync {
    fn name(&self) -> &'static str;
    fn period(&self) -> Duration;
    fn run<'a>(&'a self, cluster: &'a Cluster) -> BoxFuture<'a, Result<()>>;
}

const TICK: Duration = Duration::from_millis(200);

fn jobs(cluster: &Cluster) -> Vec<Box<dyn Job>> {
    let opts = &cluster.inner.options;
    vec![
        Box::new(ttl_sweep::TtlSweep {
            every: opts.ttl_sweep_every,
        }),
        Box::new(compaction::Compaction {
            every: opts.compact_every,
        }),
    ]
}

pub async fn run(cluster: Cluster) {
    let mut shutdown = cluster.shutdown_signal();
    let jobs = jobs(&cluster);
    let mut next_due: Vec<Option<Instant>> = vec![None; jobs.len()];
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => return,
        }
        let leads = cluster
            .group(META_GROUP)
            .map(|r| r.metrics().borrow_watched().current_leader == Some(cluster.node_id()))
            .unwrap_or(false);
        if !leads {
            next_due.iter_mut().for_each(|d| *d = None);
            continue;
        }
        for (job, due) in jobs.iter().zip(next_due.iter_mut()) {
            let now = Instant::now();
            // A new leader waits one period before the first run, so a hand-over does not
            // double the rate.
            let when = *due.get_or_insert(now + job.period());
            if now < when {
                continue;
            }
            *due = Some(now + job.period());
            let started = Instant::now();
            let outcome = match job.run(&cluster).await {
                Ok(()) => "ok",
                Err(e) => {
                    tracing::warn!(job = job.name(), "scheduled job failed: {e}");
                    "error"
                }
            };
            metrics::counter!("basalt_scheduler_runs_total", "job" => job.name(), "outcome" => outcome).increment(1);
            metrics::histogram!("basalt_scheduler_run_seconds", "job" => job.name())
                .record(started.elapsed().as_secs_f64());
        }
    }
}
