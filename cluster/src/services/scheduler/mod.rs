//! The leader-elected scheduler: the leader of the metadata group runs every registered
//! periodic job. When it loses leadership the next leader starts running them within an
//! election timeout; jobs are idempotent, so a run repeated around a hand-over does no harm.

mod compaction;
mod consistency;
mod job;
mod rebalance;
mod splits;
mod ttl_sweep;
mod upgrade;

use std::time::{Duration, Instant};

use crate::ids::META_GROUP;
use crate::replicas::Replicas;
use job::Job;

const TICK: Duration = Duration::from_millis(200);
/// How often the rebalancer's planner looks at the cluster.
const REBALANCE_ROUND: Duration = Duration::from_secs(1);
/// How often the split under way goes a step further (`services::splits`).
const SPLITS_ROUND: Duration = Duration::from_millis(500);
/// How often the cluster's version is finalized when every member's build allows it.
const UPGRADE_ROUND: Duration = Duration::from_secs(1);

/// How often each job runs.
#[derive(Debug, Clone, Copy)]
pub struct Intervals {
    pub ttl_sweep: Duration,
    pub compaction: Duration,
    /// Consistency checks of every group's replicas (None: never).
    pub consistency_check: Option<Duration>,
}

fn jobs(every: Intervals) -> Vec<Box<dyn Job>> {
    let mut jobs: Vec<Box<dyn Job>> = vec![
        Box::new(ttl_sweep::TtlSweep {
            every: every.ttl_sweep,
        }),
        Box::new(compaction::Compaction {
            every: every.compaction,
        }),
        Box::new(rebalance::Rebalance {
            every: REBALANCE_ROUND,
            planner: Default::default(),
        }),
        Box::new(upgrade::Upgrade {
            every: UPGRADE_ROUND,
        }),
        Box::new(splits::Splits {
            every: SPLITS_ROUND,
            switched: Default::default(),
            auto: Default::default(),
            pace: Default::default(),
        }),
    ];
    if let Some(every) = every.consistency_check {
        jobs.push(Box::new(consistency::ConsistencyCheck {
            every,
            running: Default::default(),
        }));
    }
    jobs
}

/// Runs the jobs while this node leads the metadata group, until shutdown.
pub async fn run(replicas: Replicas, every: Intervals) {
    let mut shutdown = replicas.shutdown_signal();
    let jobs = jobs(every);
    let mut next_due: Vec<Option<Instant>> = vec![None; jobs.len()];
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => return,
        }
        if !replicas.leads(META_GROUP) {
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
            let outcome = match job.run(&replicas).await {
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
