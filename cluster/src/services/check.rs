//! Consistency checks: do a group's replicas hold the same state? The coordinator proposes a
//! `CheckState` entry to every group; each replica hashes its state exactly as that entry
//! leaves it (`statemachine::check`), so replicas are compared at one committed index however
//! far each is behind. The coordinator collects every voter's digest and names the voters
//! that differ from the most of them; a check that finds any leaves a `ConsistencyAlarm` record
//! in the metadata group (`/health`, `basalt admin alarms` on every node) until one finds none.
//! Run by `basalt admin check` and, at a low rate, by the scheduler (`scheduler`'s job).
//!
//! Neighbours: `replicas` (proposals, records, the peer router, this node's digests) below;
//! `cluster` answers the admin requests it sends.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;

use crate::admin::{
    AdminRequest, AdminResponse, CheckReport, ConsistencyAlarm, GroupCheck, GroupDigest,
    CONSISTENCY_KEY,
};
use crate::command::Command;
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId, META_GROUP};
use crate::namespace::Namespace;
use crate::replicas::{now_ms, Replicas};

/// How long a voter may take to apply the check's entry and hash its state (a replica hashes
/// at the speed of a snapshot build: minutes for tens of GiB).
const DIGEST_WAIT: Duration = Duration::from_secs(3600);
/// Deadline of asking a member for its status.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Checks every group, this node coordinating: the report, after the alarm record is set or
/// cleared.
pub(crate) async fn run(replicas: &Replicas) -> Result<CheckReport> {
    let check = super::backup::new_backup_id();
    let voters: HashMap<GroupId, Vec<NodeId>> = replicas
        .led_group_statuses(STATUS_TIMEOUT, false)
        .await
        .into_iter()
        .map(|(group, g)| (group, g.voters))
        .collect();
    let groups = replicas.group_ids().into_iter().map(|group| {
        let check = check.clone();
        let voters = voters.get(&group).cloned().unwrap_or_default();
        async move { check_group(replicas, &check, group, voters).await }
    });
    let groups = join_all(groups)
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    let report = CheckReport { check, groups };
    record(replicas, &report).await?;
    Ok(report)
}

async fn check_group(
    replicas: &Replicas,
    check: &str,
    group: GroupId,
    voters: Vec<NodeId>,
) -> Result<GroupCheck> {
    let cmd = Command::CheckState {
        check: check.to_string(),
    };
    let index = replicas.propose(group, cmd).await?.log_index;
    let asks = voters.iter().map(|&node| async move {
        let digest = digest_at(replicas, node, check, group).await;
        if let Err(e) = &digest {
            tracing::warn!(%group, %node, check, "no digest: {e}");
        }
        (node, digest.ok())
    });
    let digests: Vec<(NodeId, Option<GroupDigest>)> = join_all(asks).await;
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for d in digests.iter().filter_map(|(_, d)| d.as_ref()) {
        *counts.entry(d.digest.as_str()).or_default() += 1;
    }
    let answered: usize = counts.values().sum();
    let most = counts
        .iter()
        .max_by_key(|(_, n)| **n)
        .filter(|(_, n)| **n * 2 > answered)
        .map(|(d, _)| d.to_string());
    let differing = digests
        .iter()
        .filter_map(|(node, d)| {
            let d = d.as_ref()?;
            (Some(&d.digest) != most.as_ref()).then_some(*node)
        })
        .collect::<Vec<_>>();
    let unanswered = digests
        .iter()
        .filter(|(_, d)| d.is_none())
        .map(|(n, _)| *n)
        .collect();
    if !differing.is_empty() {
        metrics::counter!("basalt_consistency_mismatches_total", "group" => group.to_string())
            .increment(1);
        tracing::error!(%group, index, check, ?differing, "replicas of the group hold different states");
    }
    Ok(GroupCheck {
        group,
        index,
        digests,
        differing,
        unanswered,
    })
}

/// `node`'s digest of `group` at `check`.
async fn digest_at(
    replicas: &Replicas,
    node: NodeId,
    check: &str,
    group: GroupId,
) -> Result<GroupDigest> {
    if node == replicas.node_id() {
        return replicas.checks().digest(check, group, DIGEST_WAIT).await;
    }
    let req = AdminRequest::StateDigest {
        check: check.to_string(),
        group,
    };
    match replicas
        .router()
        .admin(node, &req, DIGEST_WAIT + Duration::from_secs(5))
        .await?
    {
        AdminResponse::Digests(mut d) if d.len() == 1 => Ok(d.remove(0)),
        other => Err(Error::Internal(format!(
            "unexpected answer to StateDigest: {other:?}"
        ))),
    }
}

/// Sets the alarm record when groups differ, removes it when every group was compared in full
/// and none differs (a check that could not compare some replicas leaves it as it was).
async fn record(replicas: &Replicas, report: &CheckReport) -> Result<()> {
    let mismatched = report.mismatched();
    metrics::gauge!("basalt_consistency_mismatched_groups").set(mismatched.len() as f64);
    metrics::gauge!("basalt_consistency_last_check_timestamp_seconds")
        .set(now_ms() as f64 / 1000.0);
    if mismatched.is_empty() && !report.complete() {
        tracing::warn!(check = %report.check, "some replicas were not compared: the alarm stays as it was");
        return Ok(());
    }
    if mismatched.is_empty() {
        let clear = Command::DeleteRecord {
            ns: Namespace::Cluster.name().into(),
            key: CONSISTENCY_KEY.into(),
        };
        replicas.propose(META_GROUP, clear).await?;
        return Ok(());
    }
    let alarm = ConsistencyAlarm {
        check: report.check.clone(),
        at_ms: now_ms(),
        groups: mismatched
            .iter()
            .map(|g| (g.group, g.differing.clone()))
            .collect(),
    };
    replicas
        .put_record(
            META_GROUP,
            Namespace::Cluster,
            CONSISTENCY_KEY,
            serde_json::to_value(&alarm)?,
            None,
        )
        .await?;
    Ok(())
}
