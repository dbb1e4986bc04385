//! Answers the admin requests peers and tools send (`peer_service` hands them here): cluster
//! info for a joining node, member records (join, removal), status, compaction and leadership
//! transfer. Member records live in the metadata group; placement acts on them.

use futures::future::BoxFuture;
use openraft::async_runtime::WatchReceiver;
use serde_json::Value;

use super::Cluster;
use crate::admin::{AdminRequest, AdminResponse, NodeRecord, NodeState};
use crate::error::{Error, Result};
use crate::ids::{NodeId, META_GROUP};
use crate::namespace::Namespace;
use crate::peer_service::AdminHandler;
use crate::services::upgrade;

impl AdminHandler for Cluster {
    fn handle(&self, req: AdminRequest) -> BoxFuture<'_, Result<AdminResponse>> {
        Box::pin(self.admin(req))
    }
}

impl Cluster {
    /// Handles an admin request addressed to this node.
    pub async fn admin(&self, req: AdminRequest) -> Result<AdminResponse> {
        match req {
            AdminRequest::ClusterInfo => Ok(AdminResponse::ClusterInfo {
                settings: self.replicas().settings(),
                nodes: self.local_nodes(),
                finalized_features: self.finalized_features(),
            }),
            AdminRequest::Join(mut record) => {
                // A build without a feature that is on would misread what the cluster writes.
                let who = format!("node {}", record.id);
                let on = upgrade::finalized_now(self.replicas()).await?;
                if let Some(e) = upgrade::refuse_build(&on, &record.features, &who) {
                    return Err(e);
                }
                // A removed node stays removed: joining again does not undo it.
                if let Some(known) = self.local_nodes().into_iter().find(|n| n.id == record.id) {
                    if known.state == NodeState::Removed {
                        return Err(Error::InvalidOperation(format!(
                            "node {} was removed from the cluster; join with a new id",
                            record.id
                        )));
                    }
                    record.state = known.state;
                }
                crate::failpoints::pause("join-checked").await;
                let key = record.id.to_string();
                let before = self.put_node_record(&record).await?;
                // Checked again with the record in: a finalization may have raced the first
                // check. (One this check misses came after the record in the metadata log, so
                // the feature stays off while this node is a member — `is_on` asks every member —
                // and the node stops as too old.)
                let on = upgrade::finalized_now(self.replicas()).await?;
                if let Some(e) = upgrade::refuse_build(&on, &record.features, &who) {
                    // Undone unless another write came between (then that one stands).
                    let written = serde_json::to_value(&record)?;
                    let undo = self
                        .cas_record(META_GROUP, Namespace::Node, &key, Some(written), before)
                        .await;
                    match undo {
                        Ok(_) => tracing::warn!(
                            node = %record.id,
                            "a join raced a finalization of features its build lacks: refused, its record undone"
                        ),
                        Err(undo) => tracing::warn!(
                            node = %record.id,
                            error = %undo,
                            "a join raced a finalization of features its build lacks: refused, its record not undone"
                        ),
                    }
                    return Err(e);
                }
                Ok(AdminResponse::Done)
            }
            AdminRequest::RemoveNode(id) => {
                self.remove_node(id).await?;
                Ok(AdminResponse::Done)
            }
            AdminRequest::Status => Ok(AdminResponse::Status(self.status())),
            AdminRequest::SharedSecret => Ok(AdminResponse::SharedSecret(
                self.inner.shared_secret.get().cloned(),
            )),
            AdminRequest::Digest => Ok(AdminResponse::Digests(self.replicas().digests().await?)),
            AdminRequest::ReleaseBallast => {
                let bytes = self.replicas().disk_watch().release_ballast()?;
                Ok(AdminResponse::BallastReleased {
                    bytes,
                    disk: self.disk(),
                })
            }
            AdminRequest::Backup(req) => Ok(AdminResponse::BackedUp(self.backup(&req).await?)),
            AdminRequest::Check => Ok(AdminResponse::Checked(self.check().await?)),
            AdminRequest::ConsistencyAlarm => {
                Ok(AdminResponse::Consistency(self.consistency_alarm()))
            }
            AdminRequest::StateDigest { check, group } => Ok(AdminResponse::Digests(vec![
                self.replicas()
                    .checks()
                    .digest(&check, group, std::time::Duration::from_secs(3600))
                    .await?,
            ])),
            step @ (AdminRequest::Fence { .. }
            | AdminRequest::Unfence { .. }
            | AdminRequest::BackupGroup(_)
            | AdminRequest::BackupWait { .. }
            | AdminRequest::BackupAbort { .. }
            | AdminRequest::BackupEnd { .. }) => {
                crate::services::backup::answer(self.replicas(), &self.inner.backups, step).await
            }
            AdminRequest::Compact => {
                self.replicas().compact().await;
                Ok(AdminResponse::Done)
            }
            AdminRequest::Drain => {
                self.request_drain();
                Ok(AdminResponse::Done)
            }
            AdminRequest::Rebalance(req) => {
                crate::services::rebalance::change(self.replicas(), &req).await?;
                Ok(AdminResponse::Rebalance(
                    crate::services::rebalance::status(self.replicas()).await?,
                ))
            }
            AdminRequest::Split { group, batch_slots } => {
                crate::services::splits::begin(self.replicas(), group, batch_slots).await?;
                Ok(AdminResponse::Slots(
                    crate::services::splits::view(self.replicas()).await?,
                ))
            }
            AdminRequest::Merge {
                group,
                into,
                batch_slots,
            } => {
                crate::services::splits::begin_merge(self.replicas(), group, into, batch_slots)
                    .await?;
                Ok(AdminResponse::Slots(
                    crate::services::splits::view(self.replicas()).await?,
                ))
            }
            AdminRequest::Slots => Ok(AdminResponse::Slots(
                crate::services::splits::view(self.replicas()).await?,
            )),
            AdminRequest::SplitSettings(change) => {
                crate::services::splits::change_settings(self.replicas(), change).await?;
                Ok(AdminResponse::Slots(
                    crate::services::splits::view(self.replicas()).await?,
                ))
            }
            AdminRequest::StartGroup { group, voters } => {
                crate::services::splits::start_here(self.replicas(), group, voters).await?;
                Ok(AdminResponse::Done)
            }
            AdminRequest::Upgrade(req) => {
                upgrade::change(self.replicas(), req).await?;
                Ok(AdminResponse::Upgrade(
                    upgrade::status(self.replicas()).await?,
                ))
            }
            AdminRequest::TransferLeader { group, to } => {
                let raft = self.replicas().group(group)?;
                let m = raft.metrics().borrow_watched().clone();
                if m.current_leader != Some(self.node_id()) {
                    return Err(Error::NotLeader {
                        group,
                        leader: m.current_leader,
                        leader_addr: None,
                    });
                }
                raft.trigger()
                    .transfer_leader(to)
                    .await
                    .map_err(|e| Error::Unavailable(e.to_string()))?;
                Ok(AdminResponse::Done)
            }
        }
    }

    /// Writes a member record by compare-and-set against the record as the metadata group
    /// holds it now: a removed node stays removed, however stale the writer's view (a removed
    /// node restarting, a join through a member that has not applied the removal yet).
    /// The record it replaced (`None`: there was none).
    pub(super) async fn put_node_record(&self, record: &NodeRecord) -> Result<Option<Value>> {
        self.write_node_record(record.id, |current| {
            let removed = current.is_some_and(|r| r.state == NodeState::Removed);
            if removed && record.state != NodeState::Removed {
                return Err(Error::InvalidOperation(format!(
                    "node {} was removed from the cluster; join with a new id",
                    record.id
                )));
            }
            Ok(Some(record.clone()))
        })
        .await
    }

    /// Changes member `id`'s record as the metadata group holds it now (`change`): no field is
    /// written back from a stale view of the record. Nothing is written when `change` leaves
    /// it as it is.
    pub(super) async fn update_node_record(
        &self,
        id: NodeId,
        change: impl Fn(&mut NodeRecord),
    ) -> Result<()> {
        self.write_node_record(id, |current| {
            let Some(mut record) = current else {
                return Err(Error::InvalidOperation(format!(
                    "node {id} is not a member"
                )));
            };
            let before = record.clone();
            change(&mut record);
            Ok((record != before).then_some(record))
        })
        .await
        .map(|_| ())
    }

    /// The compare-and-set loop of member `id`'s record: `next` makes the record to write from
    /// the one the metadata group holds now (`None`: nothing to write), again when another
    /// write came between. The record as it was before (stored form).
    async fn write_node_record(
        &self,
        id: NodeId,
        next: impl Fn(Option<NodeRecord>) -> Result<Option<NodeRecord>>,
    ) -> Result<Option<Value>> {
        let key = id.to_string();
        for _ in 0..10 {
            let current = self.get_record(META_GROUP, Namespace::Node, &key).await?;
            let held = current
                .clone()
                .and_then(|v| serde_json::from_value::<NodeRecord>(v).ok());
            let Some(record) = next(held)? else {
                return Ok(current);
            };
            let value = serde_json::to_value(&record)?;
            match self
                .cas_record(
                    META_GROUP,
                    Namespace::Node,
                    &key,
                    current.clone(),
                    Some(value),
                )
                .await
            {
                Ok(_) => return Ok(current),
                Err(Error::Conflict(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Unavailable(format!(
            "node {id}'s record kept changing"
        )))
    }

    /// Marks a node removed; placement then moves its replicas to the remaining nodes.
    pub async fn remove_node(&self, id: NodeId) -> Result<()> {
        let nodes = self.local_nodes();
        let Some(mut record) = nodes.iter().find(|n| n.id == id).cloned() else {
            return Err(Error::InvalidOperation(format!(
                "node {id} is not a member"
            )));
        };
        let active = nodes
            .iter()
            .filter(|n| n.state == NodeState::Active)
            .count();
        if record.state == NodeState::Active && active <= 1 {
            return Err(Error::InvalidOperation(
                "cannot remove the last active node".into(),
            ));
        }
        record.state = NodeState::Removed;
        self.put_node_record(&record).await.map(|_| ())
    }
}
