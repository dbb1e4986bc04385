//! `AppliedState`: a group's last applied log id and membership, stored with the data in the
//! same batch (so a replica restarts exactly where its data is).

use serde::{Deserialize, Serialize};

use crate::ids::GroupId;
use crate::raft::{LogId, StoredMembership};
use crate::storage::keys::{self, CF_SM};
use crate::storage::Store;

/// Last applied log id and membership, stored with the data in the same batch.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AppliedState {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
}

impl AppliedState {
    pub(super) fn load(store: &Store, group: GroupId) -> crate::error::Result<Self> {
        match store.get(CF_SM, &keys::meta_key(group, keys::SM_APPLIED))? {
            Some(bytes) => Ok(serde_json::from_slice(&bytes)?),
            None => Ok(AppliedState::default()),
        }
    }
}
