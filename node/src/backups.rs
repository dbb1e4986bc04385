//! Scheduled backups (`--backup-to`, `--backup-schedule`, `--backup-keep`): on the node that
//! runs the cluster's timed work (`Cluster::runs_scheduler`), a backup of the whole cluster at
//! each tick of the schedule (cron, UTC, as scheduled functions take it), then the backups in
//! the destination but the newest `keep` scheduled ones removed (`services::backup::prune`:
//! backups taken by hand stay). Whether a tick is done goes by the cluster's last backup to
//! this destination as the metadata group records it (and by what this node took), so a
//! scheduler handed to another node neither repeats nor forgets one; a tick missed while no
//! node could run it is run once, late. A
//! backup that fails is tried again after `RETRY`. Neighbours: the cluster's backups
//! (`services::backup`), `functions::cron` (the cron syntax).

use std::time::Duration;

use basalt_cluster::admin::BackupRequest;
use basalt_cluster::Cluster;
use chrono::{DateTime, Utc};

/// The longest wait between two looks at the schedule (the next tick's time is waited for
/// when it is sooner).
const POLL: Duration = Duration::from_secs(20);
/// How long after a failed backup the next try waits.
const RETRY: Duration = Duration::from_secs(600);

/// A schedule of backups.
#[derive(Debug, Clone)]
pub struct BackupSchedule {
    pub dest: String,
    pub cron: croner::Cron,
    /// Backups kept in `dest` (at least 1).
    pub keep: usize,
    /// Bytes per second each node may write.
    pub rate: Option<u64>,
}

/// The latest tick of `cron` at or before `at_ms`.
fn latest_tick(cron: &croner::Cron, at_ms: i64) -> Option<i64> {
    let at = DateTime::<Utc>::from_timestamp_millis(at_ms)?;
    cron.find_previous_occurrence(&at, true)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// How long until the look after a tick: until the next tick of `cron` (a little after it),
/// at most `POLL`.
fn until_next(cron: &croner::Cron, now_ms: i64) -> Duration {
    let next = DateTime::<Utc>::from_timestamp_millis(now_ms)
        .and_then(|at| cron.find_next_occurrence(&at, false).ok())
        .map(|t| t.timestamp_millis().saturating_sub(now_ms).max(0) as u64 + 50);
    next.map_or(POLL, |ms| Duration::from_millis(ms).min(POLL))
}

/// Runs `schedule` for as long as the process lives.
pub async fn run(cluster: Cluster, schedule: BackupSchedule) {
    let mut failed_at: Option<tokio::time::Instant> = None;
    // The tick this node last backed up: a tick is done even when recording it failed.
    let mut done_here: Option<i64> = None;
    loop {
        let wait = until_next(&schedule.cron, Utc::now().timestamp_millis());
        tokio::time::sleep(wait.max(Duration::from_millis(200))).await;
        if !cluster.runs_scheduler() || failed_at.is_some_and(|t| t.elapsed() < RETRY) {
            continue;
        }
        let now = Utc::now().timestamp_millis();
        let Some(tick) = latest_tick(&schedule.cron, now) else {
            continue;
        };
        let recorded = cluster
            .last_backup()
            .is_some_and(|b| b.dest == schedule.dest && b.started_ms >= tick);
        let done = recorded || done_here.is_some_and(|t| t >= tick);
        if done {
            continue;
        }
        let req = BackupRequest {
            dest: schedule.dest.clone(),
            rate: schedule.rate,
            scheduled: true,
        };
        match cluster.backup(&req).await {
            Ok(manifest) => {
                failed_at = None;
                done_here = Some(tick);
                metrics::counter!("basalt_backups_scheduled_total", "outcome" => "ok").increment(1);
                match cluster
                    .prune_backups(&schedule.dest, schedule.keep.max(1))
                    .await
                {
                    Ok(removed) if !removed.is_empty() => {
                        tracing::info!(backup = %manifest.backup, ?removed, "old backups removed")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!("removing old backups: {e}"),
                }
            }
            Err(e) => {
                failed_at = Some(tokio::time::Instant::now());
                metrics::counter!("basalt_backups_scheduled_total", "outcome" => "failed")
                    .increment(1);
                tracing::error!(dest = %schedule.dest, "scheduled backup failed: {e}");
            }
        }
    }
}
