//! How this node makes its replica of a group (a Raft over the shared store, a state
//! machine, the peer network), and which groups it holds state of when it starts. `Replicas`
//! (the parent) keeps one cell per group id up to the cluster's cap and fills it from here: at
//! start for the initial groups and the stored ones, later for a group split off at run time.

use std::path::PathBuf;
use std::sync::Arc;

use crate::admin::ClusterSettings;
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId};
use crate::network::GroupNetwork;
use crate::raft::{RaftTuning, RocksLogStore, TypeConfig};
use crate::rpc::router::PeerRouter;
use crate::statemachine::ShardStateMachine;
use crate::storage::keys::CF_RAFT_META;
use crate::storage::Store;

/// What this node makes a group's Raft of (`Replicas::ensure_group`).
pub(super) struct GroupMaker {
    pub tuning: RaftTuning,
    pub snapshots_dir: PathBuf,
    pub checks: crate::statemachine::check::StateChecks,
}

impl GroupMaker {
    pub async fn make(
        &self,
        node_id: NodeId,
        group: GroupId,
        settings: &ClusterSettings,
        store: &Arc<Store>,
        router: &PeerRouter,
    ) -> Result<openraft::Raft<TypeConfig, ShardStateMachine>> {
        let log = RocksLogStore::new(group, Arc::clone(store));
        let sm = ShardStateMachine::open(group, Arc::clone(store), self.snapshots_dir.clone())?
            .keeping_changes(settings.changes_kept)
            .with_checks(self.checks.clone());
        let net = GroupNetwork::new(router.clone(), group);
        openraft::Raft::new(node_id, self.tuning.config(group)?, net, log, sm)
            .await
            .map_err(|e| Error::Internal(format!("starting group {group}: {e}")))
    }
}

/// The groups whose Raft state (vote, log bounds) `store` holds, up to `cap`.
pub(super) fn stored_groups(store: &Store, cap: u32) -> Result<Vec<GroupId>> {
    let mut found = Vec::new();
    let mut from = [0u8; 4];
    loop {
        let mut next = None;
        store.scan(CF_RAFT_META, &from, &[0xff; 5], |k, _| {
            next = k
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes);
            Ok(false)
        })?;
        match next {
            Some(g) if g <= cap => {
                found.push(GroupId::new(g));
                match g.checked_add(1) {
                    Some(n) => from = n.to_be_bytes(),
                    None => break,
                }
            }
            _ => break,
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::keys::meta_key;

    #[test]
    fn the_groups_a_store_holds_state_of_are_found_up_to_the_cap() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path()).expect("store");
        assert_eq!(stored_groups(&store, 64).expect("scan"), vec![]);
        let mut batch = rocksdb::WriteBatch::default();
        for g in [0u32, 1, 2, 17, 40, 65, 300] {
            for tag in [1u8, 2] {
                batch.put_cf(
                    store.cf(CF_RAFT_META).expect("cf"),
                    meta_key(GroupId::new(g), tag),
                    b"x",
                );
            }
        }
        store.write(batch, false).expect("write");
        assert_eq!(
            stored_groups(&store, 64).expect("scan"),
            [0, 1, 2, 17, 40].map(GroupId::new).to_vec(),
            "every group once, none above the cap"
        );
    }
}
