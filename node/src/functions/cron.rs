//! Scheduled functions: a function deployed with a cron expression runs once per tick,
//! cluster-wide, with the master key, on the node that runs the leader-elected scheduler
//! (`Cluster::runs_scheduler`). Each function's schedule state is a record of the metadata
//! group (namespace `function_run`, key `app/name`): the last tick claimed, who claimed it and
//! whether its run finished, and the counts of runs and failures. A tick is claimed by
//! compare-and-set before it runs and marked done after, so a scheduler hand-over neither
//! skips a tick (the new scheduler runs every tick after the last one claimed) nor doubles one
//! (a tick claimed by another node is left to it while that node may still be running it: for
//! twice the app's wall time, which bounds a run's wait for a slot and the run, plus
//! `STALE_AFTER`; after that the claiming node is taken to have stopped and the tick runs again
//! — at least once when a node dies in the middle of a run, exactly once across a hand-over
//! between live nodes). A run whose end could not be written is written again by its node
//! before it claims anything more of that function. A schedule more than `CATCH_UP` behind
//! (the cluster was down) runs its latest tick only. Runs go through `Invoke`, which
//! `api::functions` provides.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use basalt_cluster::ids::META_GROUP;
use basalt_cluster::namespace::Namespace;
use basalt_cluster::{Cluster, Error as ClusterError};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::engine::RunError;
use super::record::{self, FunctionRecord};
use super::settings::FunctionSettings;
use super::FunctionsError;

const TICK: Duration = Duration::from_millis(250);
/// How long past its wall time a claimed run may go unfinished before another node runs its
/// tick again.
const STALE_AFTER: Duration = Duration::from_secs(30);
/// How far behind a schedule may be and still run every tick it missed.
const CATCH_UP: Duration = Duration::from_secs(3600);

/// Runs a scheduled function of an app (with the master key) and answers its outcome; its
/// wall time limit comes with it.
pub type Invoke = Arc<
    dyn Fn(String, FunctionRecord, Value) -> BoxFuture<'static, (Duration, Result<Value, RunError>)>
        + Send
        + Sync,
>;

/// Parses a cron expression (5 fields, or 6 with seconds first; `@hourly` and the like), in UTC.
pub fn parse(expr: &str) -> Result<croner::Cron, String> {
    if expr.len() > 200 {
        return Err("cron: the expression is too long.".into());
    }
    croner::Cron::from_str(expr).map_err(|e| format!("cron: {e}."))
}

/// A schedule's state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunState {
    /// The last tick claimed (ms).
    pub tick_ms: i64,
    /// Who claimed it (a node's scheduler, for as long as that node runs).
    pub runner: String,
    /// Whether the claimed tick's run finished.
    pub done: bool,
    pub started_ms: i64,
    pub runs: u64,
    pub failures: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default)]
    pub last_duration_ms: u64,
    /// Ticks not run because the schedule was more than `CATCH_UP` behind.
    #[serde(default)]
    pub skipped: u64,
}

fn key(app: &str, name: &str) -> String {
    format!("{app}/{name}")
}

fn iso(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

fn next_tick(cron: &croner::Cron, after_ms: i64) -> Option<i64> {
    let after = DateTime::<Utc>::from_timestamp_millis(after_ms)?;
    cron.find_next_occurrence(&after, false)
        .ok()
        .map(|t| t.timestamp_millis())
}

fn latest_tick(cron: &croner::Cron, at_ms: i64) -> Option<i64> {
    let at = DateTime::<Utc>::from_timestamp_millis(at_ms)?;
    cron.find_previous_occurrence(&at, true)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// What `GET /1/functions` shows of a scheduled function's runs.
pub async fn runs_of(
    cluster: &Cluster,
    app: &str,
    name: &str,
) -> Result<Option<Value>, FunctionsError> {
    let Some(v) = cluster
        .get_record(META_GROUP, Namespace::FunctionRun, &key(app, name))
        .await?
    else {
        return Ok(Some(json!({"runs": 0, "failures": 0})));
    };
    let s: RunState =
        serde_json::from_value(v).map_err(|e| FunctionsError::Corrupt(e.to_string()))?;
    let mut o = json!({
        "runs": s.runs,
        "failures": s.failures,
        "lastTick": iso(s.tick_ms),
        "running": !s.done,
        "lastDurationMs": s.last_duration_ms,
        "skipped": s.skipped,
    });
    if let Some(e) = s.last_error {
        o["lastError"] = json!(e);
    }
    Ok(Some(o))
}

/// Runs scheduled functions while this node runs the scheduler, forever.
pub async fn run(cluster: Cluster, invoke: Invoke) {
    let me = format!("{}-{}", cluster.node_id(), crate::apps::random_key(8));
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    // Runs that ended but whose end is not recorded yet: (claimed state, finished state).
    let unrecorded: Unrecorded = Arc::default();
    loop {
        tokio::time::sleep(TICK).await;
        if !cluster.runs_scheduler() {
            continue;
        }
        let scheduled = match record::local_scheduled(&cluster) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("scheduled functions not read: {e}");
                continue;
            }
        };
        for (app, function) in scheduled {
            let k = key(&app, &function.name);
            if running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&k)
            {
                continue;
            }
            let pending = unrecorded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&k);
            if let Some((claimed, done)) = pending {
                if !record_end(&cluster, &k, &claimed, &done, 1).await {
                    unrecorded
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(k.clone(), (claimed, done));
                }
                continue;
            }
            match claim(&cluster, &app, &function, &me).await {
                Ok(Some((state, tick))) => {
                    running
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(k.clone());
                    let (cluster, invoke, running, unrecorded) = (
                        cluster.clone(),
                        invoke.clone(),
                        running.clone(),
                        unrecorded.clone(),
                    );
                    tokio::spawn(async move {
                        if let Some(end) =
                            run_tick(&cluster, &invoke, &app, function, state, tick).await
                        {
                            unrecorded
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(k.clone(), end);
                        }
                        running.lock().unwrap_or_else(|p| p.into_inner()).remove(&k);
                    });
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(function = %k, "schedule not claimed: {e}"),
            }
        }
    }
}

type Unrecorded = Arc<Mutex<HashMap<String, (RunState, RunState)>>>;

/// Claims the function's next due tick, if one is due and nobody else holds it: the state
/// as claimed and the tick.
async fn claim(
    cluster: &Cluster,
    app: &str,
    function: &FunctionRecord,
    me: &str,
) -> Result<Option<(RunState, i64)>, FunctionsError> {
    let Some(cron) = function.cron.as_deref().and_then(|c| parse(c).ok()) else {
        return Ok(None);
    };
    let k = key(app, &function.name);
    let old = cluster
        .get_record(META_GROUP, Namespace::FunctionRun, &k)
        .await?;
    let state: Option<RunState> = old
        .clone()
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| FunctionsError::Corrupt(e.to_string()))?;
    let now = chrono::Utc::now().timestamp_millis();
    let wall = crate::apps::find_app(cluster, app)
        .await
        .ok()
        .flatten()
        .and_then(|a| a.settings::<FunctionSettings>().ok())
        .unwrap_or_default()
        .limits()
        .wall;
    let stale_ms = (wall * 2 + STALE_AFTER).as_millis() as i64;
    let mut new = state.clone().unwrap_or_default();
    let tick = match &state {
        // A tick this node claimed but did not run (its claim's answer was lost): run now.
        Some(s) if !s.done && s.runner == me => return Ok(Some((s.clone(), s.tick_ms))),
        // A run claimed and unfinished: left to its runner unless it has surely stopped.
        Some(s) if !s.done => {
            if now - s.started_ms < stale_ms {
                return Ok(None);
            }
            s.tick_ms
        }
        _ => {
            // Ticks after the last claimed (or after the deploy, for a new schedule).
            let base = state
                .as_ref()
                .map_or(function.updated_ms, |s| s.tick_ms.max(function.updated_ms));
            let Some(mut due) = next_tick(&cron, base) else {
                return Ok(None);
            };
            if due > now {
                return Ok(None);
            }
            if now - due > CATCH_UP.as_millis() as i64 {
                let latest = latest_tick(&cron, now).unwrap_or(due);
                new.skipped += 1;
                due = latest;
            }
            due
        }
    };
    new.tick_ms = tick;
    new.runner = me.to_string();
    new.done = false;
    new.started_ms = now;
    let value = serde_json::to_value(&new).map_err(|e| FunctionsError::Corrupt(e.to_string()))?;
    match cluster
        .cas_record(META_GROUP, Namespace::FunctionRun, &k, old, Some(value))
        .await
    {
        Ok(_) => Ok(Some((new, tick))),
        Err(ClusterError::Conflict(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Runs a claimed tick and records its end; answers the end when it could not be recorded.
async fn run_tick(
    cluster: &Cluster,
    invoke: &Invoke,
    app: &str,
    function: FunctionRecord,
    claimed: RunState,
    tick: i64,
) -> Option<(RunState, RunState)> {
    let name = function.name.clone();
    let request = json!({
        "functionName": name,
        "params": {},
        "user": null,
        "master": true,
        "schedule": {"cron": function.cron, "tick": iso(tick)},
    });
    let (took, outcome) = invoke(app.to_string(), function, request).await;
    let mut done = claimed.clone();
    done.done = true;
    done.last_duration_ms = took.as_millis() as u64;
    let outcome_label = match &outcome {
        Ok(_) => {
            done.runs += 1;
            done.last_error = None;
            "ok"
        }
        Err(e) => {
            done.runs += 1;
            done.failures += 1;
            done.last_error = Some(e.to_string());
            tracing::warn!(app, function = %name, tick = %iso(tick), "scheduled run failed: {e}");
            "error"
        }
    };
    let mut labels = super::metric_labels(app, &name);
    labels.push(("outcome", outcome_label.to_string()));
    metrics::counter!("basalt_function_scheduled_runs_total", &labels).increment(1);
    let k = key(app, &name);
    match record_end(cluster, &k, &claimed, &done, 10).await {
        true => None,
        false => Some((claimed, done)),
    }
}

/// Writes a run's end over its claim (up to `tries` times); whether it is recorded (or need
/// not be: another node took the tick over, or the function is gone).
async fn record_end(
    cluster: &Cluster,
    k: &str,
    claimed: &RunState,
    done: &RunState,
    tries: u32,
) -> bool {
    let (Ok(expected), Ok(value)) = (serde_json::to_value(claimed), serde_json::to_value(done))
    else {
        return true;
    };
    for attempt in 0..tries {
        match cluster
            .cas_record(
                META_GROUP,
                Namespace::FunctionRun,
                k,
                Some(expected.clone()),
                Some(value.clone()),
            )
            .await
        {
            Ok(_) => return true,
            Err(ClusterError::Conflict(_)) => {
                // A retried write that committed finds its own value; else another node took
                // the tick over (this one was thought stopped), or the function was deleted.
                let now = cluster
                    .get_record(META_GROUP, Namespace::FunctionRun, k)
                    .await
                    .ok()
                    .flatten();
                if now.as_ref() != Some(&value) {
                    tracing::warn!(
                        function = k,
                        "a scheduled run's end was not recorded: its tick was taken over"
                    );
                }
                return true;
            }
            Err(e) => {
                tracing::debug!(function = k, "scheduled run not recorded yet: {e}");
                tokio::time::sleep(Duration::from_millis(200 << attempt.min(4))).await;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_parse_and_give_ticks() {
        let every_2s = parse("*/2 * * * * *").unwrap();
        let t0 = 1_700_000_000_000; // an even second
        assert_eq!(next_tick(&every_2s, t0), Some(t0 + 2_000));
        assert_eq!(next_tick(&every_2s, t0 + 1), Some(t0 + 2_000));
        assert_eq!(latest_tick(&every_2s, t0 + 3_500), Some(t0 + 2_000));
        let hourly = parse("0 * * * *").unwrap();
        let h = 1_699_999_200_000; // on the hour
        assert_eq!(next_tick(&hourly, h), Some(h + 3_600_000));
        assert!(parse("@hourly").is_ok());
        for bad in ["", "not cron", "61 * * * *", "* * * * * * * *"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
