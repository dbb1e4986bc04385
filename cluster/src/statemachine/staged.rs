//! `Staged`: the writes of one `apply` call, readable before they are committed.
//!
//! Reads consult the overlay first and RocksDB second, so a command sees the writes of earlier
//! commands in the same batch; `into_batch` turns the overlay into one atomic write batch.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::ids::GroupId;
use crate::storage::keys::CF_SM;
use crate::storage::{Store, WriteBatch};

pub struct Staged<'a> {
    store: &'a Store,
    pub group: GroupId,
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl<'a> Staged<'a> {
    pub fn new(store: &'a Store, group: GroupId) -> Self {
        Staged {
            store,
            group,
            overlay: BTreeMap::new(),
        }
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.overlay.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.store.get(CF_SM, key),
        }
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.overlay.insert(key, Some(value));
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.overlay.insert(key, None);
    }

    /// Keys in `[start, end)` as they would be after the staged writes, in order.
    pub fn keys_in_range(&self, start: &[u8], end: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut keys = std::collections::BTreeSet::new();
        self.store.scan(CF_SM, start, end, |k, _| {
            keys.insert(k.to_vec());
            Ok(true)
        })?;
        for (k, v) in self.overlay.range(start.to_vec()..end.to_vec()) {
            if v.is_some() {
                keys.insert(k.clone());
            } else {
                keys.remove(k);
            }
        }
        Ok(keys.into_iter().collect())
    }

    /// The first `limit` keys in `[start, end)` as they would be after the staged writes.
    pub fn keys_in_range_limited(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<Vec<u8>>> {
        // Staged deletes may hide stored keys: read enough stored keys to cover them.
        let hidden = self
            .overlay
            .range(start.to_vec()..end.to_vec())
            .filter(|(_, v)| v.is_none())
            .count();
        let want = limit.saturating_add(hidden);
        let mut keys = std::collections::BTreeSet::new();
        let mut truncated_at: Option<Vec<u8>> = None;
        self.store.scan(CF_SM, start, end, |k, _| {
            if keys.len() >= want {
                truncated_at = Some(k.to_vec());
                return Ok(false);
            }
            keys.insert(k.to_vec());
            Ok(true)
        })?;
        for (k, v) in self.overlay.range(start.to_vec()..end.to_vec()) {
            if truncated_at.as_ref().is_some_and(|t| k >= t) {
                break;
            }
            if v.is_some() {
                keys.insert(k.clone());
            } else {
                keys.remove(k);
            }
        }
        Ok(keys.into_iter().take(limit).collect())
    }

    pub fn into_batch(self) -> Result<WriteBatch> {
        let cf = self.store.cf(CF_SM)?;
        let mut batch = WriteBatch::default();
        for (k, v) in self.overlay {
            match v {
                Some(v) => batch.put_cf(cf, k, v),
                None => batch.delete_cf(cf, k),
            }
        }
        Ok(batch)
    }
}
