//! `RocksLogStore`: one group's Raft log and Raft metadata (vote, committed, purged) in the
//! node's shared RocksDB, under the group's key prefix.
//!
//! Appends are visible when `append` returns and reported durable through the store's WAL
//! syncer (group commit across all groups); votes are synced before `save_vote` returns.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::RaftLogReader;
use rocksdb::WriteBatch;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Entry, LogId, TypeConfig, Vote};
use crate::ids::GroupId;
use crate::storage::keys::{self, CF_RAFT_LOG, CF_RAFT_META};
use crate::storage::Store;

/// Version byte in front of every stored log entry and Raft metadata value.
const FORMAT_V1: u8 = 1;

fn encode<T: Serialize>(v: &T) -> io::Result<Vec<u8>> {
    let mut out = vec![FORMAT_V1];
    serde_json::to_writer(&mut out, v).map_err(io::Error::other)?;
    Ok(out)
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    match bytes.split_first() {
        Some((&FORMAT_V1, rest)) => serde_json::from_slice(rest).map_err(io::Error::other),
        _ => Err(io::Error::other("unknown log encoding")),
    }
}

fn io_err(e: crate::error::Error) -> io::Error {
    io::Error::other(e.to_string())
}

#[derive(Clone)]
pub struct RocksLogStore {
    group: GroupId,
    store: Arc<Store>,
}

impl RocksLogStore {
    pub fn new(group: GroupId, store: Arc<Store>) -> Self {
        RocksLogStore { group, store }
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

    fn put_meta<T: Serialize>(&self, tag: u8, value: &T, sync: bool) -> io::Result<()> {
        let mut b = WriteBatch::default();
        b.put_cf(
            self.store.cf(CF_RAFT_META).map_err(io_err)?,
            keys::meta_key(self.group, tag),
            encode(value)?,
        );
        self.store.write(b, sync).map_err(io_err)
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
        let end = match range.end_bound() {
            Bound::Included(&i) => keys::log_key(self.group, i.saturating_add(1)).to_vec(),
            Bound::Excluded(&i) => keys::log_key(self.group, i).to_vec(),
            Bound::Unbounded => keys::group_end(self.group),
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
        self.put_meta(keys::META_VOTE, vote, true)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        // Not synced: a lost `committed` only means re-applying from the durable log.
        self.put_meta(keys::META_COMMITTED, &committed, false)
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
        for entry in entries {
            b.put_cf(
                cf,
                keys::log_key(self.group, entry.log_id.index),
                encode(&entry)?,
            );
        }
        self.store.write(b, false).map_err(io_err)?;
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
        self.store.write(b, false).map_err(io_err)
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
        self.store.write(b, false).map_err(io_err)
    }
}
