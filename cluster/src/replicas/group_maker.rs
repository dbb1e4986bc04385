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

/// This node's replica of a group: its Raft, and what tells whether its state machine (or a
/// snapshot build it started) may still write the group's state (`ShardStateMachine::alive`).
pub(super) struct Replica {
    pub raft: openraft::Raft<TypeConfig, ShardStateMachine>,
    pub state_machine: std::sync::Weak<()>,
}

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
    ) -> Result<Replica> {
        let log = RocksLogStore::new(group, Arc::clone(store));
        let sm = ShardStateMachine::open(group, Arc::clone(store), self.snapshots_dir.clone())?
            .keeping_changes(settings.changes_kept)
            .with_checks(self.checks.clone());
        let state_machine = sm.alive();
        let net = GroupNetwork::new(router.clone(), group);
        let raft = openraft::Raft::<TypeConfig, ShardStateMachine>::new(
            node_id,
            self.tuning.config(group)?,
            net,
            log,
            sm,
        )
        .await
        .map_err(|e| Error::Internal(format!("starting group {group}: {e}")))?;
        Ok(Replica {
            raft,
            state_machine,
        })
    }
}

/// Whether all `store` holds of `group` is what erasing its replica kept (the vote and the
/// erased mark, `replicas::erase`): no state, no log. Such a group gets no replica at start;
/// a peer's message makes one if the group adds this node back.
pub(super) fn only_erased(store: &Store, group: GroupId) -> Result<bool> {
    use crate::storage::keys::{group_end, log_key, meta_key, CF_RAFT_LOG, CF_SM, META_ERASED};
    if store
        .get(CF_RAFT_META, &meta_key(group, META_ERASED))?
        .is_none()
    {
        return Ok(false);
    }
    let (from, to) = (crate::storage::keys::group_prefix(group), group_end(group));
    let mut holds = false;
    store.scan(CF_SM, &from, &to, |_, _| {
        holds = true;
        Ok(false)
    })?;
    store.scan(CF_RAFT_LOG, &log_key(group, 0), &to, |_, _| {
        holds = true;
        Ok(false)
    })?;
    Ok(!holds)
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

    #[test]
    fn an_erased_replica_keeps_only_its_vote_and_mark_and_gets_no_replica_at_start() {
        use crate::storage::keys::{
            log_key, CF_RAFT_LOG, CF_SM, META_ERASED, META_VOTE, SM_APPLIED, SM_OBJECT,
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path()).expect("store");
        let (g, neighbour) = (GroupId::new(3), GroupId::new(4));
        let mut batch = rocksdb::WriteBatch::default();
        for group in [g, neighbour] {
            let sm = store.cf(CF_SM).expect("cf");
            batch.put_cf(sm, meta_key(group, SM_APPLIED), b"applied");
            batch.put_cf(
                sm,
                [&meta_key(group, SM_OBJECT)[..], b"app\0C\0id"].concat(),
                b"{}",
            );
            for i in 1..=3u64 {
                batch.put_cf(
                    store.cf(CF_RAFT_LOG).expect("cf"),
                    log_key(group, i),
                    b"entry",
                );
            }
            batch.put_cf(
                store.cf(CF_RAFT_META).expect("cf"),
                meta_key(group, META_VOTE),
                b"old",
            );
        }
        store.write(batch, false).expect("write");
        assert!(!only_erased(&store, g).expect("read"), "not erased yet");

        store
            .erase_replica(
                g,
                &[
                    (META_VOTE, b"leader".to_vec()),
                    (META_ERASED, b"7".to_vec()),
                ],
            )
            .expect("erase");
        assert!(only_erased(&store, g).expect("read"), "erased");
        let vote = store
            .get(CF_RAFT_META, &meta_key(g, META_VOTE))
            .expect("read");
        assert_eq!(
            vote.as_deref(),
            Some(&b"leader"[..]),
            "the leader's vote kept"
        );
        for cf in [CF_SM, CF_RAFT_LOG] {
            let mut left = 0;
            store
                .scan(cf, &keys_of(g).0, &keys_of(g).1, |_, _| {
                    left += 1;
                    Ok(true)
                })
                .expect("scan");
            assert_eq!(left, 0, "nothing of the group left in {cf}");
        }
        // The neighbour is untouched.
        assert!(!only_erased(&store, neighbour).expect("read"));
        let kept = store
            .get(CF_RAFT_LOG, &log_key(neighbour, 3))
            .expect("read");
        assert_eq!(kept.as_deref(), Some(&b"entry"[..]));
        assert_eq!(
            store
                .get(CF_SM, &meta_key(neighbour, SM_APPLIED))
                .expect("read")
                .as_deref(),
            Some(&b"applied"[..])
        );
        // Added back: state again, so it is opened at start.
        let mut batch = rocksdb::WriteBatch::default();
        batch.put_cf(store.cf(CF_RAFT_LOG).expect("cf"), log_key(g, 9), b"entry");
        store.write(batch, false).expect("write");
        assert!(!only_erased(&store, g).expect("read"), "holds a log again");
    }

    fn keys_of(g: GroupId) -> (Vec<u8>, Vec<u8>) {
        (
            crate::storage::keys::group_prefix(g).to_vec(),
            crate::storage::keys::group_end(g),
        )
    }
}
