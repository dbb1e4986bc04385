//! Whether a group has room for a write that adds data: not when this node's disk is critical,
//! nor when a voter of the group has said in its member record that its disk is (`disk`). Such
//! a write is refused before it is proposed (`Error::DiskFull`); deletes, records and admin
//! writes go on. The members whose disks are critical are refreshed by `cluster::bootstrap`'s
//! disk watch from the metadata group.

use openraft::async_runtime::WatchReceiver;

use crate::disk::{DiskLevel, DiskStatus};
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId};

use super::Replicas;

impl Replicas {
    /// This node's disk, as last sampled.
    pub fn disk(&self) -> DiskStatus {
        self.inner.disk.status()
    }

    /// This node's disk watch.
    pub fn disk_watch(&self) -> &crate::disk::DiskWatch {
        &self.inner.disk
    }

    /// The members whose disks are critical now.
    pub(crate) fn set_full_nodes(&self, nodes: Vec<NodeId>) {
        let mut full = self
            .inner
            .full_nodes
            .write()
            .unwrap_or_else(|p| p.into_inner());
        *full = nodes;
    }

    /// Whether `node`'s disk is critical (this node's as sampled, others' as their member
    /// records say).
    pub(crate) fn is_full_node(&self, node: NodeId) -> bool {
        if node == self.node_id() {
            return self.inner.disk.status().level == DiskLevel::Critical;
        }
        self.inner
            .full_nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&node)
    }

    /// Refuses a write that adds data to `group` while a disk holding it is critical.
    pub(crate) fn check_room(&self, group: GroupId) -> Result<()> {
        let me = self.node_id();
        if self.inner.disk.fresh_status().level == DiskLevel::Critical {
            return Err(full(me, group));
        }
        let full_nodes = self
            .inner
            .full_nodes
            .read()
            .unwrap_or_else(|p| p.into_inner());
        if full_nodes.is_empty() {
            return Ok(());
        }
        let raft = self.group(group)?;
        let metrics = raft.metrics().borrow_watched().clone();
        let full_voter = metrics
            .membership_config
            .membership()
            .voter_ids()
            .find(|n| full_nodes.contains(n));
        match full_voter {
            Some(n) => Err(full(n, group)),
            None => Ok(()),
        }
    }
}

fn full(node: NodeId, group: GroupId) -> Error {
    metrics::counter!("basalt_writes_refused_total", "reason" => "disk").increment(1);
    Error::DiskFull(format!(
        "the disk of node {node}, which holds shard {group}, is nearly full; writes that add \
         data wait until space is freed (deletes go on)"
    ))
}
