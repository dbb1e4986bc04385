//! Records as stored: a value with an optional expiry, under `keys::record_key`. This is the one
//! place records are decoded and judged live; the state machine reads them through its staged
//! batch (`statemachine::staged::Staged`) and local reads and shard queries through a
//! `ReplicaState` of the store, both as a [`StateRead`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::keys::{self, CF_SM};
use super::Store;
use crate::error::Result;
use crate::ids::GroupId;

/// A record as stored: its value and optional expiry (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredRecord {
    pub v: u8,
    pub value: Value,
    pub expires_at_ms: Option<i64>,
}

impl StoredRecord {
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        Ok(serde_json::from_slice(bytes)?)
    }

    /// True when the record has expired at `now_ms` (readers treat it as absent even before
    /// the sweep deletes it).
    pub fn expired_at(&self, now_ms: i64) -> bool {
        self.expires_at_ms.is_some_and(|t| t <= now_ms)
    }
}

/// Read access to one group's state-machine keys.
pub trait StateRead {
    fn group(&self) -> GroupId;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
}

/// One group's state as this node's store holds it.
pub struct ReplicaState<'a> {
    pub store: &'a Store,
    pub group: GroupId,
}

impl StateRead for ReplicaState<'_> {
    fn group(&self) -> GroupId {
        self.group
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.store.get(CF_SM, key)
    }
}

/// A live record (absent, or expired at `now_ms` when given, is `None`).
pub fn live_record(
    state: &impl StateRead,
    ns: &str,
    key: &str,
    now_ms: Option<i64>,
) -> Result<Option<StoredRecord>> {
    let Some(bytes) = state.get(&keys::record_key(state.group(), ns, key))? else {
        return Ok(None);
    };
    let rec = StoredRecord::decode(&bytes)?;
    Ok((!now_ms.is_some_and(|now| rec.expired_at(now))).then_some(rec))
}

/// Every live record of a namespace whose key starts with `key_prefix`, in key order.
pub fn live_records_with_prefix(
    store: &Store,
    group: GroupId,
    ns: &str,
    key_prefix: &str,
    now_ms: i64,
) -> Result<Vec<(String, Value)>> {
    Ok(records_with_prefix(store, group, ns, key_prefix)?
        .into_iter()
        .filter(|(_, rec)| !rec.expired_at(now_ms))
        .map(|(k, rec)| (k, rec.value))
        .collect())
}

/// Every record of a namespace whose key starts with `key_prefix`, expired ones too, in key
/// order.
pub fn records_with_prefix(
    store: &Store,
    group: GroupId,
    ns: &str,
    key_prefix: &str,
) -> Result<Vec<(String, StoredRecord)>> {
    let prefix = keys::record_ns_prefix(group, ns);
    let end = keys::separated_end(&prefix);
    let mut start = prefix.clone();
    start.extend_from_slice(key_prefix.as_bytes());
    let mut out = Vec::new();
    store.scan(CF_SM, &start, &end, |k, v| {
        if !k[prefix.len()..].starts_with(key_prefix.as_bytes()) {
            return Ok(false);
        }
        out.push((
            String::from_utf8_lossy(&k[prefix.len()..]).into_owned(),
            StoredRecord::decode(v)?,
        ));
        Ok(true)
    })?;
    Ok(out)
}
