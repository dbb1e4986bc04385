//! `Staged`: the writes of one `apply` call, readable before they are committed.
//!
//! Reads consult the overlay first and RocksDB second, so a command sees the writes of earlier
//! commands in the same batch; `into_batch` turns the overlay into one atomic write batch.
//! A savepoint taken before a command lets apply undo that command's writes alone when it fails
//! part-way (`rollback_to`), keeping what earlier commands of the batch staged.
//! A value decoded from a key may be remembered (`remember`, `memo`) until the key is written
//! again or a rollback, so that a record many commands of a batch read (a class's index
//! metadata) is decoded once per batch.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};

use crate::error::Result;
use crate::ids::GroupId;
use crate::storage::keys::CF_SM;
use crate::storage::{Store, WriteBatch};

pub struct Staged<'a> {
    store: &'a Store,
    pub group: GroupId,
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Each staged write's key and the overlay entry it replaced, in order (for `rollback_to`).
    undo: Vec<(Vec<u8>, Option<Staging>)>,
    /// Ranges of keys deleted before the overlay's writes (`delete_range`).
    cut: Vec<(Vec<u8>, Vec<u8>)>,
    /// The log index of the entry being applied.
    entry: u64,
    /// Changes the entry being applied staged so far (`next_change`).
    changes: u32,
    /// Values decoded from keys as they stand now (`memo`).
    memo: HashMap<Vec<u8>, Box<dyn Any + Send>>,
    /// Bytes of stored data the batch deletes (`free`), for this node's compaction of freed
    /// ranges (`reclaim`).
    freed: u64,
}

/// One key's staged write: a value, or `None` for a delete.
type Staging = Option<Vec<u8>>;

/// A point in a batch's writes that `Staged::rollback_to` returns to.
#[derive(Debug, Clone, Copy)]
pub struct Savepoint(usize);

impl<'a> Staged<'a> {
    pub fn new(store: &'a Store, group: GroupId) -> Self {
        Staged {
            store,
            group,
            overlay: BTreeMap::new(),
            undo: Vec::new(),
            cut: Vec::new(),
            entry: 0,
            changes: 0,
            memo: HashMap::new(),
            freed: 0,
        }
    }

    /// Notes `bytes` of stored data deleted by the batch.
    pub fn free(&mut self, bytes: u64) {
        self.freed = self.freed.saturating_add(bytes);
    }

    /// Bytes of stored data the batch deletes.
    pub fn freed(&self) -> u64 {
        self.freed
    }

    /// Notes the log index of the entry whose command is applied next.
    pub fn set_entry_index(&mut self, index: u64) {
        self.entry = index;
        self.changes = 0;
    }

    /// How many changes the entry being applied staged so far, counting this one (the
    /// position of its next change among its changes, `keys::nth_change_key`).
    pub fn next_change(&mut self) -> u32 {
        let nth = self.changes;
        self.changes = self.changes.saturating_add(1);
        nth
    }

    /// The log index of the entry being applied (0 outside `apply`).
    pub fn entry_index(&self) -> u64 {
        self.entry
    }

    /// Deletes the keys in `[start, end)`: the stored ones when the batch is written (before
    /// its other writes), and those staged so far, so the outcome does not depend on how
    /// entries were batched. For keys no command reads (the change log's): reads here do not
    /// see the stored ones go, and a rollback does not undo it.
    pub fn delete_range(&mut self, start: Vec<u8>, end: Vec<u8>) {
        let staged: Vec<Vec<u8>> = self
            .overlay
            .range(start.clone()..end.clone())
            .map(|(k, _)| k.clone())
            .collect();
        for k in staged {
            self.overlay.remove(&k);
        }
        self.memo
            .retain(|k, _| k.as_slice() < start.as_slice() || k.as_slice() >= end.as_slice());
        self.cut.push((start, end));
    }

    /// Marks the writes staged so far.
    pub fn savepoint(&self) -> Savepoint {
        Savepoint(self.undo.len())
    }

    /// Undoes every write staged since `mark`.
    pub fn rollback_to(&mut self, mark: Savepoint) {
        self.memo.clear();
        while self.undo.len() > mark.0 {
            let Some((key, previous)) = self.undo.pop() else {
                break;
            };
            match previous {
                Some(v) => self.overlay.insert(key, v),
                None => self.overlay.remove(&key),
            };
        }
    }

    fn stage(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.memo.remove(&key);
        let previous = self.overlay.insert(key.clone(), value);
        self.undo.push((key, previous));
    }

    /// What `remember` noted for `key` since it was last written, if it was of type `T`.
    pub fn memo<T: Clone + 'static>(&self, key: &[u8]) -> Option<T> {
        self.memo.get(key)?.downcast_ref::<T>().cloned()
    }

    /// Notes `value`, decoded from `key` as it stands now (read or just staged), for `memo`
    /// until the key is written again or the batch rolls back.
    pub fn remember<T: Send + 'static>(&mut self, key: Vec<u8>, value: T) {
        self.memo.insert(key, Box::new(value));
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.overlay.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.store.get(CF_SM, key),
        }
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.stage(key, Some(value));
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.stage(key, None);
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
        for (start, end) in self.cut {
            batch.delete_range_cf(cf, start, end);
        }
        for (k, v) in self.overlay {
            match v {
                Some(v) => batch.put_cf(cf, k, v),
                None => batch.delete_cf(cf, k),
            }
        }
        Ok(batch)
    }
}

impl crate::storage::records::StateRead for Staged<'_> {
    fn group(&self) -> GroupId {
        self.group
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Staged::get(self, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is remembered of a key holds only while the key is not written again: a put, a
    /// delete, a range delete over it and a rollback each forget it.
    #[test]
    fn a_remembered_value_lasts_until_its_key_changes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        let key = b"k1".to_vec();
        st.remember(key.clone(), 7u32);
        assert_eq!(st.memo::<u32>(&key), Some(7));
        assert_eq!(st.memo::<u64>(&key), None, "another type is not answered");
        assert_eq!(st.memo::<u32>(b"k2"), None);

        st.put(key.clone(), b"v".to_vec());
        assert_eq!(st.memo::<u32>(&key), None, "a put forgets");
        st.remember(key.clone(), 8u32);
        st.delete(key.clone());
        assert_eq!(st.memo::<u32>(&key), None, "a delete forgets");

        st.remember(key.clone(), 9u32);
        st.remember(b"z".to_vec(), 1u32);
        st.delete_range(b"k".to_vec(), b"l".to_vec());
        assert_eq!(st.memo::<u32>(&key), None, "a range delete over it forgets");
        assert_eq!(st.memo::<u32>(b"z"), Some(1), "one outside the range stays");

        let mark = st.savepoint();
        st.put(key.clone(), b"w".to_vec());
        st.remember(key.clone(), 10u32);
        st.rollback_to(mark);
        assert_eq!(st.memo::<u32>(&key), None, "a rollback forgets");
        assert_eq!(st.get(&key).unwrap(), None);
    }
}
