//! Rolling upgrades: the cluster's version and its feature gates. Each build names what it can
//! do that older builds cannot (`cluster::build_features`, in its member record with its
//! `VERSION`); a
//! gated command or storage format is used only once its feature is *on*, that is, named in the
//! version record of the metadata group (namespace `Cluster`, key `version`). The scheduler's
//! `upgrade` job turns on every feature all active members have (finalizes) unless an
//! administrator holds the upgrade (`basalt admin upgrade hold`), so that until `basalt admin
//! upgrade finalize` the previous build can be brought back: it finds nothing it cannot read.
//! Once a feature is on, a build without it cannot start on a data dir of the cluster nor join
//! it. Neighbours: `cluster` answers `basalt admin upgrade` and `/health`; the code that gates
//! (`rebalance`; the node's sealing) asks `is_on`; below, `replicas`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::admin::{NodeBuild, NodeRecord, NodeState, UpgradeRequest, UpgradeStatus};
use crate::error::{Error, Result};
use crate::ids::META_GROUP;
use crate::namespace::Namespace;
use crate::replicas::{now_ms, Replicas};

/// This build's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Features a build leaves out of its member record (comma-separated), to stand in for an
/// older build in upgrade tests: a test harness's, never an operator's.
pub const TESTING_WITHOUT_FEATURES: &str = "BASALT_TESTING_WITHOUT_FEATURES";

/// Key of the version record (namespace `Cluster`).
pub(crate) const VERSION_KEY: &str = "version";

/// The cluster's version and the features that are on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VersionRecord {
    pub(crate) version: String,
    pub(crate) features: BTreeSet<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) finalized_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) hold: bool,
}

/// Orders versions `major.minor.patch` numerically (an unreadable or missing one first).
fn version_key(v: &str) -> (u64, u64, u64) {
    let mut parts = v
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

/// The record as this node's replica of the metadata group holds it.
pub(crate) fn local_record(replicas: &Replicas) -> Option<VersionRecord> {
    replicas
        .local_meta_record(Namespace::Cluster, VERSION_KEY)
        .ok()
        .flatten()
        .and_then(|v| serde_json::from_value(v).ok())
}

/// The features that are on, as the metadata group's leader holds the record.
pub(crate) async fn finalized_now(replicas: &Replicas) -> Result<Vec<String>> {
    Ok(read_record(replicas)
        .await?
        .1
        .map(|r| r.features.into_iter().collect())
        .unwrap_or_default())
}

/// The record as the metadata group's leader holds it: as stored (what a compare-and-set
/// expects) and parsed.
async fn read_record(replicas: &Replicas) -> Result<(Option<Value>, Option<VersionRecord>)> {
    let raw = replicas
        .get_record(META_GROUP, Namespace::Cluster, VERSION_KEY)
        .await?;
    let record = raw.clone().map(serde_json::from_value).transpose()?;
    Ok((raw, record))
}

/// Whether `feature` is on, as this node's replica of the metadata group holds the record: the
/// record names it and every active member has it (a member of an older build that got in
/// beside a finalization, or a previous release that does not check, turns it off again while
/// it is a member). A cluster that has not written the record yet uses a feature every active
/// member has.
pub fn is_on(replicas: &Replicas, feature: &str) -> bool {
    let recorded = local_record(replicas).is_none_or(|record| record.features.contains(feature));
    recorded && replicas.members_have(feature)
}

/// What every refusal of a build says (`refuse_build`): how a joiner tells one from other
/// errors.
pub(crate) const REFUSAL_MARK: &str = "without features the cluster has finalized";

/// The features on in `finalized` that a build with `build` lacks, as an error that says so
/// (None when it has them all).
pub(crate) fn refuse_build(finalized: &[String], build: &[String], who: &str) -> Option<Error> {
    let lacks: Vec<&String> = finalized.iter().filter(|f| !build.contains(f)).collect();
    if lacks.is_empty() {
        return None;
    }
    Some(Error::InvalidOperation(format!(
        "{who} runs a build (version {VERSION}) {REFUSAL_MARK} ({lacks:?}): run a build at \
         least as new as the cluster's (`basalt admin upgrade status`)"
    )))
}

/// The cluster's builds weighed against the record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Assessment {
    /// Features every active member has.
    common: BTreeSet<String>,
    /// The lowest version among the active members.
    lowest: String,
    /// Each active member's build, and what it lacks that another member has.
    nodes: Vec<NodeBuild>,
}

fn assess(members: &[NodeRecord]) -> Assessment {
    let active: Vec<&NodeRecord> = members
        .iter()
        .filter(|n| n.state == NodeState::Active)
        .collect();
    let any: BTreeSet<String> = active
        .iter()
        .flat_map(|n| n.features.iter().cloned())
        .collect();
    let common: BTreeSet<String> = any
        .iter()
        .filter(|f| active.iter().all(|n| n.features.contains(f)))
        .cloned()
        .collect();
    let lowest = active
        .iter()
        .map(|n| n.version.as_str())
        .min_by_key(|v| version_key(v))
        .unwrap_or(VERSION)
        .to_string();
    let nodes = active
        .iter()
        .map(|n| NodeBuild {
            node: n.id,
            version: n.version.clone(),
            features: n.features.clone(),
            lacks: any
                .iter()
                .filter(|f| !n.features.contains(f))
                .cloned()
                .collect(),
        })
        .collect();
    Assessment {
        common,
        lowest,
        nodes,
    }
}

impl Assessment {
    /// The record once finalized: what was on stays on; the version is the lowest member's
    /// (lower than before when a node went back to a build with the same features).
    fn finalized(&self, record: Option<&VersionRecord>) -> VersionRecord {
        let mut features = record.map(|r| r.features.clone()).unwrap_or_default();
        features.extend(self.common.iter().cloned());
        VersionRecord {
            version: self.lowest.clone(),
            features,
            finalized_at_ms: Some(now_ms()),
            hold: false,
        }
    }

    /// Whether finalizing would change nothing: every member runs one version and has only
    /// features that are on.
    fn nothing_to_finalize(&self, record: Option<&VersionRecord>) -> bool {
        let Some(r) = record else {
            return false;
        };
        self.nodes.iter().all(|n| {
            version_key(&n.version) == version_key(&r.version)
                && n.features.iter().all(|f| r.features.contains(f))
        })
    }
}

/// The scheduler's round: write the record if there is none, and finalize once every active
/// member has a feature that is not on (or runs a newer version), unless held.
pub(crate) async fn round(replicas: &Replicas) -> Result<()> {
    let (raw, record) = read_record(replicas).await?;
    let members = members_now(replicas).await?;
    if !members.iter().any(|n| n.state == NodeState::Active) {
        return Ok(());
    }
    let assessment = assess(&members);
    if record.as_ref().is_some_and(|r| r.hold) {
        return Ok(());
    }
    let next = assessment.finalized(record.as_ref());
    let unchanged = record
        .as_ref()
        .is_some_and(|r| r.features == next.features && r.version == next.version);
    if unchanged {
        return Ok(());
    }
    tracing::info!(
        version = %next.version,
        features = ?next.features,
        "finalizing the cluster's version: every member's build has these features"
    );
    replicas
        .cas_record(
            META_GROUP,
            Namespace::Cluster,
            VERSION_KEY,
            raw,
            Some(serde_json::to_value(&next)?),
        )
        .await?;
    Ok(())
}

/// The member records as the metadata group's leader holds them (read after the version
/// record, so that a member the record's writer does not know of joined after it).
async fn members_now(replicas: &Replicas) -> Result<Vec<NodeRecord>> {
    Ok(replicas
        .list_records(META_GROUP, Namespace::Node, "")
        .await?
        .into_iter()
        .filter_map(|(_, v)| serde_json::from_value(v).ok())
        .collect())
}

/// Holds or finalizes (compare-and-set against the record as the metadata group holds it).
pub(crate) async fn change(replicas: &Replicas, req: UpgradeRequest) -> Result<()> {
    if req == UpgradeRequest::Status {
        return Ok(());
    }
    for _ in 0..10 {
        let (raw, record) = read_record(replicas).await?;
        let assessment = assess(&members_now(replicas).await?);
        let next = match req {
            UpgradeRequest::Status => return Ok(()),
            UpgradeRequest::Hold => {
                let mut next = record.clone().unwrap_or_else(|| assessment.finalized(None));
                next.hold = true;
                next
            }
            UpgradeRequest::Finalize => {
                if let Some(behind) = assessment.nodes.iter().find(|n| !n.lacks.is_empty()) {
                    return Err(Error::InvalidOperation(format!(
                        "node {} runs a build without {:?} that other members have: upgrade \
                         it (or remove it) before finalizing",
                        behind.node, behind.lacks
                    )));
                }
                if assessment.nothing_to_finalize(record.as_ref())
                    && !record.as_ref().is_some_and(|r| r.hold)
                {
                    return Ok(());
                }
                assessment.finalized(record.as_ref())
            }
        };
        if record.as_ref() == Some(&next) {
            return Ok(());
        }
        match replicas
            .cas_record(
                META_GROUP,
                Namespace::Cluster,
                VERSION_KEY,
                raw,
                Some(serde_json::to_value(&next)?),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(Error::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Error::Unavailable(
        "the cluster's version record kept changing".into(),
    ))
}

/// The cluster's version, from the record as the metadata group's leader holds it.
pub(crate) async fn status(replicas: &Replicas) -> Result<UpgradeStatus> {
    let (_, record) = read_record(replicas).await?;
    Ok(status_of(record.as_ref(), &members_now(replicas).await?))
}

/// The cluster's version as this node's replica of the metadata group holds the record (for
/// `/health` and metrics).
pub(crate) fn status_local(replicas: &Replicas) -> UpgradeStatus {
    status_of(local_record(replicas).as_ref(), &replicas.local_nodes())
}

fn status_of(record: Option<&VersionRecord>, members: &[NodeRecord]) -> UpgradeStatus {
    let assessment = assess(members);
    // Before the record is written, the features every member has are on.
    let effective = record.cloned().unwrap_or_else(|| VersionRecord {
        version: assessment.lowest.clone(),
        features: assessment.common.clone(),
        ..VersionRecord::default()
    });
    UpgradeStatus {
        cluster_version: effective.version.clone(),
        finalized: assessment.nothing_to_finalize(Some(&effective)),
        hold: effective.hold,
        pending: assessment
            .common
            .difference(&effective.features)
            .cloned()
            .collect(),
        features: effective.features.iter().cloned().collect(),
        finalized_at_ms: effective.finalized_at_ms,
        nodes: assessment.nodes,
    }
}

#[cfg(test)]
mod tests;
