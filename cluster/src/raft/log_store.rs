//! `RocksLogStore`: one group's Raft log and Raft metadata (vote, committed, purged) in the
//! node's shared RocksDB, under the group's key prefix.
//!
//! Appends are visible when `append` returns and reported durable through the store's WAL
//! syncer (group commit across all groups); votes are synced before `save_vote` returns.
//! Values are stored in `crate::encoding`'s versioned format (MessagePack now, JSON in logs
//! written before it), and the newest entries are kept decoded in a `LogCache` for
//! replication and apply.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::RaftLogReader;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::log_cache::LogCache;
use super::{Entry, LogId, TypeConfig, Vote};
use crate::ids::GroupId;
use crate::storage::keys::{self, CF_RAFT_LOG, CF_RAFT_META};
use crate::storage::{Store, WriteBatch};

fn encode<T: Serialize>(v: &T) -> io::Result<Vec<u8>> {
    crate::encoding::encode(v).map_err(io_err)
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    crate::encoding::decode(bytes).map_err(io_err)
}

fn io_err(e: crate::error::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// How often at most a group's committed log id is saved.
const COMMITTED_SAVE_INTERVAL: Duration = Duration::from_millis(500);

/// When a group last saved its committed log id; clones share it.
#[derive(Clone, Default)]
struct CommittedSaves(Arc<Mutex<Option<Instant>>>);

impl CommittedSaves {
    /// Whether a save is due now (and if so, counts it as made).
    fn due(&self) -> bool {
        let now = Instant::now();
        let mut last = match self.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        match *last {
            Some(at) if now.duration_since(at) < COMMITTED_SAVE_INTERVAL => false,
            _ => {
                *last = Some(now);
                true
            }
        }
    }
}

#[derive(Clone)]
pub struct RocksLogStore {
    group: GroupId,
    store: Arc<Store>,
    cache: LogCache,
    committed_saves: CommittedSaves,
}

impl RocksLogStore {
    pub fn new(group: GroupId, store: Arc<Store>) -> Self {
        RocksLogStore {
            group,
            store,
            cache: LogCache::default(),
            committed_saves: CommittedSaves::default(),
        }
    }

    fn get_meta<T: DeserializeOwned>(&self, tag: u8) -> io::Result<Option<T>> {
        match self
            .store
            .get(CF_RAFT_META, &keys::meta_key(self.group, tag))
            .map_err(io_err)?
        {
            Some(bytes) => Ok(Some(decode(&bytes)?)),
            None => Ok(None),
        }
    }

    async fn put_meta<T: Serialize>(&self, tag: u8, value: &T, sync: bool) -> io::Result<()> {
        let mut b = WriteBatch::default();
        b.put_cf(
            self.store.cf(CF_RAFT_META).map_err(io_err)?,
            keys::meta_key(self.group, tag),
            encode(value)?,
        );
        self.store.write_until_room(b, sync).await.map_err(io_err)
    }
}

impl RaftLogReader<TypeConfig> for RocksLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end_index = match range.end_bound() {
            Bound::Included(&i) => Some(i.saturating_add(1)),
            Bound::Excluded(&i) => Some(i),
            Bound::Unbounded => None,
        };
        if let Some(entries) = self.cache.get(start, end_index) {
            metrics::counter!("basalt_raft_log_cache_total", "result" => "hit").increment(1);
            return Ok(entries);
        }
        metrics::counter!("basalt_raft_log_cache_total", "result" => "miss").increment(1);
        let end = match end_index {
            Some(i) => keys::log_key(self.group, i).to_vec(),
            None => keys::group_end(self.group),
        };
        let mut out = Vec::new();
        self.store
            .scan(
                CF_RAFT_LOG,
                &keys::log_key(self.group, start),
                &end,
                |_, v| {
                    out.push(
                        decode::<Entry>(v)
                            .map_err(|e| crate::error::Error::Storage(e.to_string()))?,
                    );
                    Ok(true)
                },
            )
            .map_err(io_err)?;
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.get_meta(keys::META_VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for RocksLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let last_purged_log_id: Option<LogId> = self.get_meta(keys::META_PURGED)?;
        let last = self
            .store
            .last_in_range(
                CF_RAFT_LOG,
                &keys::log_key(self.group, 0),
                &keys::group_end(self.group),
            )
            .map_err(io_err)?;
        let last_log_id = match last {
            Some((_, v)) => Some(decode::<Entry>(&v)?.log_id),
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.put_meta(keys::META_VOTE, vote, true).await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        // Not synced, and written at most once per `COMMITTED_SAVE_INTERVAL`: the saved value
        // only lets a restarted node apply that far before it hears from a leader, and any
        // older committed id is as valid for that (the rest is applied once the leader says
        // it is committed). Saving it on every commit cost a RocksDB write per write.
        if !self.committed_saves.due() {
            return Ok(());
        }
        self.put_meta(keys::META_COMMITTED, &committed, false).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self
            .get_meta::<Option<LogId>>(keys::META_COMMITTED)?
            .flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let cf = self.store.cf(CF_RAFT_LOG).map_err(io_err)?;
        let mut b = WriteBatch::default();
        let mut written = Vec::new();
        for entry in entries {
            let bytes = encode(&entry)?;
            b.put_cf(cf, keys::log_key(self.group, entry.log_id.index), &bytes);
            written.push((entry, bytes.len()));
        }
        // Cached before the write: a reader asking for an entry the store already has must
        // find it in the cache too (it is asked only for entries openraft has appended).
        self.cache.appended(written);
        if let Err(e) = self.store.write_until_room(b, false).await {
            self.cache.truncated_after(None);
            return Err(io_err(e));
        }
        fail::fail_point!("log-append");
        self.store
            .after_wal_sync(Box::new(move |r| callback.io_completed(r)));
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.map(|l| l.index + 1).unwrap_or(0);
        let mut b = WriteBatch::default();
        b.delete_range_cf(
            self.store.cf(CF_RAFT_LOG).map_err(io_err)?,
            keys::log_key(self.group, from).to_vec(),
            keys::group_end(self.group),
        );
        // Dropped from the cache first: a reader between the two must not see entries the
        // log no longer has.
        self.cache.truncated_after(last_log_id.map(|l| l.index));
        let written = self.store.write_until_room(b, false).await.map_err(io_err);
        if written.is_err() {
            self.cache.truncated_after(None);
        }
        written
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut b = WriteBatch::default();
        b.put_cf(
            self.store.cf(CF_RAFT_META).map_err(io_err)?,
            keys::meta_key(self.group, keys::META_PURGED),
            encode(&log_id)?,
        );
        b.delete_range_cf(
            self.store.cf(CF_RAFT_LOG).map_err(io_err)?,
            keys::log_key(self.group, 0),
            keys::log_key(self.group, log_id.index + 1),
        );
        self.cache.purged_up_to(log_id.index);
        self.store.write_until_room(b, false).await.map_err(io_err)
    }
}

#[cfg(test)]
mod tests {
    use openraft::entry::RaftEntry;
    use serde_json::json;

    use super::*;
    use crate::command::Command;

    fn entry(index: u64, n: i64) -> Entry {
        let leader = openraft::impls::leader_id_adv::LeaderId {
            term: 2u64,
            node_id: crate::ids::NodeId::new(1),
        };
        let cmd = Command::PutRecord {
            ns: "n".into(),
            key: format!("k{index}"),
            value: json!({"n": n, "s": "é", "f": 0.25}),
            expires_at_ms: None,
        };
        <Entry as RaftEntry>::new_normal(LogId::new(leader, index), cmd)
    }

    async fn read_all(log: &mut RocksLogStore) -> Vec<Entry> {
        log.try_get_log_entries(0..).await.unwrap()
    }

    /// A log written as JSON (version 1) before the binary format replays after an upgrade,
    /// next to entries appended since; the cache answers what the store would.
    #[tokio::test]
    async fn an_old_json_log_stays_readable_and_the_cache_agrees_with_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let group = GroupId::new(3);
        let old: Vec<Entry> = (1..=3).map(|i| entry(i, i as i64)).collect();
        let mut b = WriteBatch::default();
        for e in &old {
            b.put_cf(
                store.cf(CF_RAFT_LOG).unwrap(),
                keys::log_key(group, e.log_id.index),
                crate::encoding::encode_json_v1(e).unwrap(),
            );
        }
        store.write(b, true).unwrap();

        let mut log = RocksLogStore::new(group, Arc::clone(&store));
        assert_eq!(read_all(&mut log).await, old);
        let new: Vec<Entry> = (4..=6).map(|i| entry(i, -(i as i64))).collect();
        log.append(new.clone(), IOFlushed::noop()).await.unwrap();
        let all: Vec<Entry> = old.iter().chain(&new).cloned().collect();

        // A fresh store (a restarted node) has no cache and reads both formats from RocksDB.
        let mut fresh = RocksLogStore::new(group, Arc::clone(&store));
        assert_eq!(read_all(&mut fresh).await, all);
        assert_eq!(log.try_get_log_entries(4..).await.unwrap(), new);
        assert_eq!(
            log.try_get_log_entries(5..=5).await.unwrap(),
            vec![new[1].clone()]
        );
        assert_eq!(read_all(&mut log).await, all);
        let state = fresh.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id.map(|l| l.index), Some(6));

        // Truncation and purge reach the cache and the store alike.
        log.truncate_after(Some(new[0].log_id)).await.unwrap();
        assert_eq!(
            log.try_get_log_entries(4..).await.unwrap(),
            vec![new[0].clone()]
        );
        let mut fresh = RocksLogStore::new(group, Arc::clone(&store));
        assert_eq!(read_all(&mut fresh).await, all[..4].to_vec());
        log.purge(old[1].log_id).await.unwrap();
        let mut fresh = RocksLogStore::new(group, Arc::clone(&store));
        assert_eq!(read_all(&mut fresh).await, all[2..4].to_vec());
        assert_eq!(read_all(&mut log).await, all[2..4].to_vec());
    }
}
