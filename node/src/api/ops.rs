//! Operational endpoints: `/health` (ready when every hosted group has a leader, runs, and
//! applies what it commits, and — the first time — has the voters the cluster wants;
//! `cluster::health`; with `?ready=1`, the load balancer's question — does this node serve? —
//! answered by `serving`: not while it drains, `drain`) and `/metrics` (Prometheus text:
//! per-group Raft state, proposal and HTTP latency, storage size).

use std::sync::OnceLock;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;

use super::context::AppState;
use super::error::{ApiError, CommonError};

static PROMETHEUS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once).
pub fn install_metrics_recorder() -> anyhow::Result<()> {
    if PROMETHEUS.get().is_some() {
        return Ok(());
    }
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ])?
        .install_recorder()?;
    let _ = PROMETHEUS.set(handle);
    // Series without labels that may stay untouched for long are shown at 0 from the start,
    // so that a dashboard shows 0 rather than no data (a counter appears when first counted).
    metrics::counter!("basalt_raft_snapshots_sent_total").increment(0);
    metrics::counter!("basalt_raft_snapshots_received_total").increment(0);
    metrics::gauge!("basalt_realtime_connections").increment(0.0);
    Ok(())
}

/// The members whose peer links are plaintext (loopback without certificates, or
/// `--insecure`): while there is one, the cluster is insecure.
fn plaintext_members(state: &AppState) -> Vec<u64> {
    state
        .cluster
        .active_members()
        .into_iter()
        .filter(|n| n.plaintext)
        .map(|n| n.id.get())
        .collect()
}

/// The members' disk alarms and the last consistency check's finding, as the metadata
/// group's records say (`disk`, `services::check`).
fn alarms(state: &AppState) -> Vec<serde_json::Value> {
    let mut alarms: Vec<serde_json::Value> = state
        .cluster
        .active_members()
        .iter()
        .filter_map(|n| n.disk_alarm())
        .collect();
    if let Some(c) = state.cluster.consistency_alarm() {
        for (group, nodes) in &c.groups {
            alarms.push(
                json!({"alarm": "consistency", "group": group, "nodes": nodes,
                "check": c.check, "atMs": c.at_ms}),
            );
        }
    }
    alarms
}

/// Whether this node is ready now: once it was, only problems make it not; the first time,
/// also every hosted group with the voters the cluster wants (an object acknowledged before
/// would be lost with node 1), later a group short of voters (a member being replaced) is
/// reported and the node goes on serving. Answers (ready, was ready before).
fn readiness(health: &basalt_cluster::health::Health) -> (bool, bool) {
    static WAS_READY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let was_ready = WAS_READY.load(std::sync::atomic::Ordering::Relaxed);
    let ready = health.ok() && (was_ready || health.under_replicated.is_empty());
    if ready {
        WAS_READY.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    (ready, was_ready)
}

/// How long this node may not have heard from the metadata group's leader before a load
/// balancer's check fails: it is cut off from the cluster.
const META_SILENT_UNREADY_MS: u64 = 5_000;

/// Whether this node serves, as a load balancer asks (`?ready=1`): once it was first ready, a
/// group's problem does not take it out — every node has it (a group whose leader moves, or
/// that lost its quorum, is the same through any node), and a balancer that took every node
/// out would fail the requests of every other group too — unless its replica of the metadata
/// group halted or has not heard from that group's leader for `META_SILENT_UNREADY_MS` (this
/// node is cut off from the cluster); never while it drains or is removed (the caller).
fn serving(status: &basalt_cluster::admin::NodeStatus, ready: bool, was_ready: bool) -> bool {
    let meta_heard = status
        .groups
        .iter()
        .find(|g| g.group == basalt_cluster::ids::META_GROUP)
        .is_some_and(|g| {
            g.halted.is_none()
                && g.leader_heard_ms
                    .is_some_and(|ms| ms < META_SILENT_UNREADY_MS)
        });
    ready || (was_ready && meta_heard)
}

/// Whether a health query asks for readiness (`ready=1`, `ready=true` or `ready`): the check
/// of a load balancer, which a draining node fails.
fn asks_ready(query: Option<&str>) -> bool {
    query.unwrap_or("").split('&').any(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, "1"));
        name == "ready" && matches!(value, "1" | "true" | "")
    })
}

pub async fn health(State(state): State<AppState>, RawQuery(query): RawQuery) -> impl IntoResponse {
    let status = state.cluster.status();
    let health = state.cluster.health();
    let (ready, was_ready) = readiness(&health);
    let me = status.node_id;
    // A node removed from the cluster (`basalt admin remove-node`) is leaving too: its
    // replicas move away, then it is stopped.
    let removed = state
        .cluster
        .local_nodes()
        .iter()
        .any(|n| n.id == me && n.state == basalt_cluster::admin::NodeState::Removed);
    let draining = state.drain.is_draining() || removed;
    let code = if asks_ready(query.as_deref()) {
        if serving(&status, ready, was_ready) && !draining {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        }
    } else if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    // "starting" only until the node first was ready: later, groups without a leader are a
    // cluster that cannot commit.
    let verdict = if ready && draining {
        "draining"
    } else if ready {
        "ok"
    } else if !was_ready && health.problems.iter().all(|p| p.problem == "noLeader") {
        "starting"
    } else {
        "degraded"
    };
    let mut body = json!({
        "status": verdict,
        "node": me,
        "groups": status.groups.len(),
        "hostedGroups": health.hosted,
        "groupsWithLeader": health.with_leader,
        "problems": health.problems,
        "votersWanted": health.voters_wanted,
        "underReplicated": health.under_replicated,
        "leaderOf": status.groups.iter().filter(|g| g.hosts(me) && g.leader == Some(me)).map(|g| g.group).collect::<Vec<_>>(),
        "peerTls": state.cluster.peer_tls().is_some(),
        "disk": state.cluster.disk(),
        "alarms": alarms(&state),
        "version": basalt_cluster::services::upgrade::VERSION,
    });
    let upgrade = state.cluster.upgrade_status();
    body["clusterVersion"] = json!(upgrade.cluster_version);
    body["finalized"] = json!(upgrade.finalized);
    if upgrade.hold {
        body["upgradeHold"] = json!(true);
    }
    let plaintext = plaintext_members(&state);
    if !plaintext.is_empty() || state.cluster.peer_tls().is_none() {
        body["insecure"] = json!(true);
        body["plaintextMembers"] = json!(plaintext);
    }
    if draining {
        body["draining"] = json!(true);
    }
    if removed {
        body["removed"] = json!(true);
    }
    (code, Json(body))
}

/// 1 or 0, as a gauge shows a flag.
fn flag(on: bool) -> f64 {
    if on {
        1.0
    } else {
        0.0
    }
}

/// Each group's Raft state as gauges, labelled by group.
fn record_group_gauges(
    status: &basalt_cluster::admin::NodeStatus,
    health: &basalt_cluster::health::Health,
) {
    for g in &status.groups {
        let group = g.group.to_string();
        metrics::gauge!("basalt_raft_term", "group" => group.clone()).set(g.term as f64);
        metrics::gauge!("basalt_raft_leader", "group" => group.clone())
            .set(g.leader.map_or(-1.0, |l| l.get() as f64));
        metrics::gauge!("basalt_raft_is_leader", "group" => group.clone())
            .set(flag(g.leader == Some(status.node_id)));
        metrics::gauge!("basalt_raft_last_log_index", "group" => group.clone())
            .set(g.last_log_index as f64);
        metrics::gauge!("basalt_raft_commit_index", "group" => group.clone())
            .set(g.committed as f64);
        metrics::gauge!("basalt_raft_applied_index", "group" => group.clone())
            .set(g.applied as f64);
        metrics::gauge!("basalt_raft_snapshot_index", "group" => group.clone())
            .set(g.snapshot as f64);
        metrics::gauge!("basalt_raft_voters", "group" => group.clone()).set(g.voters.len() as f64);
        metrics::gauge!("basalt_raft_halted", "group" => group).set(flag(g.halted.is_some()));
    }
    for g in &status.groups {
        let stuck = health
            .problems
            .iter()
            .any(|p| p.group == g.group && p.problem == "stuckApplying");
        metrics::gauge!("basalt_raft_apply_stuck", "group" => g.group.to_string()).set(flag(stuck));
    }
}

/// The cluster version last shown, whose series goes to 0 when it changes.
static SHOWN_VERSION: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The build's and the cluster's versions (`services::upgrade`): whether the cluster is
/// finalized, held, and how many features wait for finalizing.
fn record_version_gauges(upgrade: &basalt_cluster::admin::UpgradeStatus) {
    let build = basalt_cluster::services::upgrade::VERSION;
    metrics::gauge!("basalt_build_info", "version" => build).set(1.0);
    if let Ok(mut shown) = SHOWN_VERSION.lock() {
        if let Some(old) = shown.take().filter(|v| *v != upgrade.cluster_version) {
            metrics::gauge!("basalt_cluster_version_info", "version" => old).set(0.0);
        }
        *shown = Some(upgrade.cluster_version.clone());
    }
    metrics::gauge!("basalt_cluster_version_info", "version" => upgrade.cluster_version.clone())
        .set(1.0);
    metrics::gauge!("basalt_cluster_version_finalized").set(flag(upgrade.finalized));
    metrics::gauge!("basalt_cluster_upgrade_hold").set(flag(upgrade.hold));
    metrics::gauge!("basalt_cluster_upgrade_pending_features").set(upgrade.pending.len() as f64);
}

/// The process's own series (CPU seconds, resident memory, open files, threads, start time).
static PROCESS: OnceLock<metrics_process::Collector> = OnceLock::new();

pub async fn metrics(State(state): State<AppState>) -> Result<String, ApiError> {
    PROCESS
        .get_or_init(|| {
            let c = metrics_process::Collector::default();
            c.describe();
            c
        })
        .collect();
    let status = state.cluster.status();
    let health = state.cluster.health();
    record_group_gauges(&status, &health);
    metrics::gauge!("basalt_unhealthy_groups").set(health.problems.len() as f64);
    metrics::gauge!("basalt_under_replicated_groups").set(health.under_replicated.len() as f64);
    let insecure = state.cluster.peer_tls().is_none() || !plaintext_members(&state).is_empty();
    metrics::gauge!("basalt_cluster_insecure").set(flag(insecure));
    metrics::gauge!("basalt_storage_bytes").set(state.cluster.storage_bytes() as f64);
    metrics::gauge!("basalt_realtime_outbox_bytes")
        .set(crate::realtime::outbox::node_bytes() as f64);
    // On every node, from the metadata group: an alert on it holds whichever node took it.
    if let Some(last) = state.cluster.last_backup() {
        metrics::gauge!("basalt_backup_last_success_timestamp_seconds")
            .set(last.finished_ms as f64 / 1000.0);
    }
    record_version_gauges(&state.cluster.upgrade_status());
    metrics::gauge!("basalt_consistency_alarm_groups").set(
        state
            .cluster
            .consistency_alarm()
            .map_or(0.0, |c| c.groups.len() as f64),
    );
    PROMETHEUS
        .get()
        .map(PrometheusHandle::render)
        .ok_or_else(|| ApiError::internal("metrics recorder not installed"))
}

pub async fn not_found() -> ApiError {
    ApiError::from(CommonError::RouteNotFound)
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::from(CommonError::MethodNotAllowed)
}

/// The query of `GET /admin/logs`.
#[derive(Debug, Default, serde::Deserialize)]
pub struct LogsQuery {
    /// Only this app's requests (the console account; a master key sees its own app only).
    app: Option<String>,
    /// Only entries at or after this time: ms since the epoch.
    since: Option<i64>,
    /// Only this status (`500`), or this class (`5` for every 5xx).
    status: Option<u16>,
    /// At most this many, the newest (default 100, at most 1,000).
    limit: Option<usize>,
}

/// `GET /admin/logs`: this node's recent requests (and, for the console account, its warn and
/// error lines), newest last (`request_log`).
pub async fn logs(
    account: Option<axum::Extension<super::context::ConsoleAccount>>,
    ctx: Option<axum::Extension<crate::auth::RequestCtx>>,
    axum::extract::Query(q): axum::extract::Query<LogsQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let limit = q
        .limit
        .unwrap_or(100)
        .clamp(1, crate::request_log::MAX_ANSWER);
    let (app, console) = match (&account, &ctx) {
        (Some(_), _) => (q.app.clone(), true),
        (None, Some(ctx)) => (Some(ctx.app.application_id.to_string()), false),
        (None, None) => return Err(CommonError::Unauthorized.into()),
    };
    let filter = crate::request_log::Filter {
        app,
        since_ms: q.since,
        status: q.status,
        limit,
    };
    let mut body = json!({"requests": crate::request_log::requests(&filter)});
    if console {
        body["lines"] = json!(crate::request_log::lines(q.since, limit));
    }
    Ok(Json(body))
}

#[cfg(test)]
mod tests {
    use super::asks_ready;

    #[test]
    fn ready_is_asked_by_its_name_alone_or_a_true_value() {
        for q in ["ready=1", "ready=true", "ready", "x=2&ready=1"] {
            assert!(asks_ready(Some(q)), "{q}");
        }
        for q in ["", "ready=0", "ready=false", "unready=1", "x=ready"] {
            assert!(!asks_ready(Some(q)), "{q}");
        }
        assert!(!asks_ready(None));
    }
}
