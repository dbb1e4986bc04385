//! `Store`: the node's single RocksDB instance, its column families, and the WAL syncer.
//!
//! Log appends from every group are written without a sync (they are readable at once) and
//! then handed to one syncer thread, which fsyncs the shared write-ahead log once for
//! everything written so far and only then reports those appends durable: many proposals of
//! many groups share one fsync (group commit). Votes and snapshot installs sync inline.
//!
//! Tuning (`tuning`, measured in `docs/performance.md`): one block cache shared by every
//! column family, sized from the machine's memory, holding index and filter blocks too;
//! bloom filters on the state machine's keys (point reads of objects and records) and in its
//! memtable; no compression for the Raft log (written once, read back soon, then deleted).
//! Queries read through a point-in-time view (`ReadView`): scans of a whole class read ahead
//! and keep their blocks in the cache only when the class's shards a node reads take at most a
//! quarter of it uncompressed, leaving a bigger class's to the hot data (`scan_bulk`,
//! `worth_caching`); candidates found in an index are read together (`multi_get`).
//!
//! Bulk loads (a snapshot installed, a backup restored) write a table file of sorted keys
//! (`TableFile`) and ingest it whole (`Store::ingest`): no memtable, no write-ahead log, no
//! flush of what was just written.

use std::any::Any;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, Direction, Env,
    IngestExternalFileOptions, IteratorMode, Options, ReadOptions, SstFileWriter, WriteBatch,
    WriteOptions, DB,
};

use super::keys::{CF_RAFT_LOG, CF_RAFT_META, CF_SM};
use super::tuning::StoreTuning;
use crate::error::{Error, Result};

/// A point-in-time view of the store (`Store::view`): every read through it sees the state of
/// the moment it was taken, whatever apply writes meanwhile, so a query that reads an index and
/// then objects neither meets an object twice nor misses one that moved.
///
/// Its scans of the state machine's column family share one RocksDB iterator, made at the
/// first scan and moved by seeks (creating an iterator costs more than the few entries an
/// ordered walk reads); the iterator is declared before the snapshot so it is dropped first.
pub struct ReadView<'a> {
    store: &'a Store,
    sm_iter: std::cell::RefCell<Option<rocksdb::DBRawIteratorWithThreadMode<'a, DB>>>,
    snap: rocksdb::SnapshotWithThreadMode<'a, DB>,
    /// The store's write generation the snapshot holds exactly, when no write was in progress
    /// or finished while it was taken (`Store::view`); values decoded from such a view serve
    /// every later view of the same generation (`ReadView::decoded`).
    generation: Option<u64>,
}

impl<'a> ReadView<'a> {
    fn options(&self) -> ReadOptions {
        let mut ro = ReadOptions::default();
        ro.set_snapshot(&self.snap);
        ro
    }

    pub fn get(&self, cf: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .store
            .db
            .get_cf_opt(self.store.cf(cf)?, key, &self.options())?)
    }

    /// The values of `keys` of `cf`, read together (one multi-get), in the order of `keys`.
    pub fn multi_get(&self, cf: &str, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        self.store.multi_get_with(cf, keys, &self.options())
    }

    /// The values of `keys` of `cf` as `decode` makes them (from the stored bytes, or `None`
    /// for an absent key), in the order of `keys`. A value decoded by an earlier view of the
    /// same write generation is reused without reading the store: with no write since, it is
    /// exactly what this view would read. For small values read by every query and rarely
    /// written (a class's index metadata), where the read and the decoding cost more than the
    /// rest of a short query.
    pub fn decoded<T: Any + Send + Sync>(
        &self,
        cf: &str,
        keys: &[Vec<u8>],
        decode: impl Fn(Option<&[u8]>) -> Result<T>,
    ) -> Result<Vec<Arc<T>>> {
        let cache_key = |key: &[u8]| [cf.as_bytes(), &[0], key].concat();
        let mut out: Vec<Option<Arc<T>>> = vec![None; keys.len()];
        if let Some(generation) = self.generation {
            let cache = self.store.decoded_cache()?;
            for (slot, key) in out.iter_mut().zip(keys) {
                *slot = cache
                    .get(&cache_key(key))
                    .filter(|(g, _)| *g == generation)
                    .and_then(|(_, v)| Arc::clone(v).downcast::<T>().ok());
            }
        }
        let missing: Vec<Vec<u8>> = keys
            .iter()
            .zip(&out)
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        if missing.is_empty() {
            return Ok(out.into_iter().flatten().collect());
        }
        let read = self.multi_get(cf, &missing)?;
        let mut fresh = Vec::with_capacity(missing.len());
        for (key, bytes) in missing.into_iter().zip(read) {
            fresh.push((key, Arc::new(decode(bytes.as_deref())?)));
        }
        if let Some(generation) = self.generation {
            let mut cache = self.store.decoded_cache()?;
            if cache.len() + fresh.len() > DECODED_CACHE_ENTRIES {
                cache.clear();
            }
            for (key, value) in &fresh {
                let value: Arc<dyn Any + Send + Sync> = Arc::clone(value) as _;
                // An older view's value never replaces a newer one's.
                let entry = cache
                    .entry(cache_key(key))
                    .or_insert((generation, Arc::clone(&value)));
                if entry.0 <= generation {
                    *entry = (generation, value);
                }
            }
        }
        let mut fresh = fresh.into_iter().map(|(_, v)| v);
        out.into_iter()
            .map(|v| v.or_else(|| fresh.next()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::Internal("a decoded value went missing".into()))
    }

    /// Visits the keys in `[start, end)` of `cf` in order until `visit` returns false.
    pub fn scan(
        &self,
        cf: &str,
        start: &[u8],
        end: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.walk(cf, start, end, false, &mut visit)
    }

    /// Like [`ReadView::scan`], from the last key of the range to the first.
    pub fn scan_rev(
        &self,
        cf: &str,
        start: &[u8],
        end: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.walk(cf, start, end, true, &mut visit)
    }

    /// A scan of `[start, end)` in either direction: through the view's shared iterator for
    /// the state machine's column family, a new bounded one for the others (and for a scan
    /// made while another is visiting).
    fn walk(
        &self,
        cf: &str,
        start: &[u8],
        end: &[u8],
        reverse: bool,
        visit: &mut impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        // A scan inside another's visit (the shared iterator is busy) gets its own.
        let mut slot = match self.sm_iter.try_borrow_mut() {
            Ok(slot) if cf == CF_SM => slot,
            _ => {
                return self
                    .store
                    .scan_with(cf, start, end, self.options(), reverse, visit)
            }
        };
        let store: &'a Store = self.store;
        let it = match slot.as_mut() {
            Some(it) => it,
            None => {
                // Unbounded, it could pass many deleted keys beyond a range's end before the
                // next live one: it gives up after a few and the scan goes on bounded.
                let mut ro = self.options();
                ro.set_max_skippable_internal_keys(SHARED_ITERATOR_SKIPS);
                slot.insert(store.db.raw_iterator_cf_opt(store.cf(CF_SM)?, ro))
            }
        };
        if reverse {
            it.seek_for_prev(end);
            // `end` is excluded.
            if it.key() == Some(end) {
                it.prev();
            }
        } else {
            it.seek(start);
        }
        let mut last: Option<Vec<u8>> = None;
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            let inside = match reverse {
                true => k >= start,
                false => k < end,
            };
            if !inside || !visit(k, v)? {
                return Ok(());
            }
            let buf = last.get_or_insert_with(Vec::new);
            buf.clear();
            buf.extend_from_slice(k);
            if reverse {
                it.prev();
            } else {
                it.next();
            }
        }
        match it.status() {
            Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete => {
                // Resume after the last key visited, with a bounded iterator.
                let (start, end) = match (last, reverse) {
                    (Some(mut k), false) => {
                        k.push(0);
                        (k, end.to_vec())
                    }
                    (Some(k), true) => (start.to_vec(), k),
                    (None, _) => (start.to_vec(), end.to_vec()),
                };
                self.store
                    .scan_with(cf, &start, &end, self.options(), reverse, visit)
            }
            other => Ok(other?),
        }
    }

    /// Whether bulk scans of `ranges` of `cf` should keep what they read in the block cache:
    /// their files together take at most `Store::bulk_cached_bytes` once uncompressed (taken
    /// as `COMPRESSION_ALLOWANCE` times their size on disk). A class that fits is read again by
    /// the next aggregation; a bigger one would push out the data other reads come back to.
    pub fn worth_caching(&self, cf: &str, ranges: &[(Vec<u8>, Vec<u8>)]) -> Result<bool> {
        let ranges: Vec<rocksdb::Range> = ranges
            .iter()
            .map(|(start, end)| rocksdb::Range::new(start, end))
            .collect();
        let on_disk: u64 = self
            .store
            .db
            .get_approximate_sizes_cf(self.store.cf(cf)?, &ranges)
            .iter()
            .sum();
        Ok(on_disk.saturating_mul(COMPRESSION_ALLOWANCE) <= self.store.bulk_cached_bytes)
    }

    /// Like [`ReadView::scan`], for reading much of a column family: reads ahead, and keeps
    /// what it reads in the block cache only when `cache` (`worth_caching`).
    pub fn scan_bulk(
        &self,
        cf: &str,
        start: &[u8],
        end: &[u8],
        cache: bool,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let mut ro = self.options();
        ro.fill_cache(cache);
        ro.set_readahead_size(2 << 20);
        self.store.scan_with(cf, start, end, ro, false, &mut visit)
    }
}

/// How many times its size on disk a range of the state machine takes uncompressed, at most
/// (LZ4 on JSON text), for `ReadView::worth_caching`.
const COMPRESSION_ALLOWANCE: u64 = 4;

/// Deleted (or overwritten) keys the shared iterator of a view passes in one step before it
/// gives the scan over to a bounded iterator.
const SHARED_ITERATOR_SKIPS: u64 = 4096;

/// Called once the WAL holding an earlier write is on disk (or the sync failed).
pub type SyncCallback = Box<dyn FnOnce(std::io::Result<()>) + Send>;

/// Values `ReadView::decoded` keeps at most (the cache is emptied when it would hold more).
const DECODED_CACHE_ENTRIES: usize = 4096;

/// Decoded values by column family and key, each with the write generation it was read at.
type DecodedCache = HashMap<Vec<u8>, (u64, Arc<dyn Any + Send + Sync>)>;

/// Most bytes of write-ahead log files the store keeps (`Store::open_tuned`).
pub const MAX_TOTAL_WAL_BYTES: u64 = 64 << 20;

pub struct Store {
    db: Arc<DB>,
    /// Writes finished, and writes in progress (`Store::write`): a view taken while neither
    /// moved knows exactly which state it holds (`ReadView::generation`).
    written: AtomicU64,
    writing: AtomicU64,
    decoded: Mutex<DecodedCache>,
    /// The most a node's bulk scans of one class keep in the block cache (uncompressed): a
    /// quarter of it (`ReadView::worth_caching`).
    bulk_cached_bytes: u64,
    sync_tx: Option<mpsc::Sender<SyncCallback>>,
    syncer: Option<std::thread::JoinHandle<()>>,
    /// The state machine's tables have bloom filters (`StoreTuning`): so do ingested ones.
    bloom_filters: bool,
    /// Bytes each group's applied entries deleted since its range was last compacted
    /// (`note_freed`; this node's own count, for `reclaim`).
    freed: Mutex<HashMap<crate::ids::GroupId, u64>>,
    /// Set once the node shuts down: writes waiting for room give up (`write_until_room`).
    closing: Arc<AtomicBool>,
    /// A write met a full disk and has not succeeded since (`write_until_room`, the syncer).
    no_space: Arc<AtomicBool>,
}

impl Drop for Store {
    /// Stops the syncer and waits for it, so the database is closed here, in order, and never
    /// by a background thread racing the process's exit.
    fn drop(&mut self) {
        self.sync_tx.take();
        if let Some(t) = self.syncer.take() {
            let _ = t.join();
        }
    }
}

impl Store {
    /// Opens (or creates) the database under `path` with Basalt's column families and the
    /// default tuning.
    pub fn open(path: &Path) -> Result<Arc<Store>> {
        Store::open_tuned(path, &StoreTuning::default())
    }

    /// Opens (or creates) the database under `path` with Basalt's column families.
    pub fn open_tuned(path: &Path, tuning: &StoreTuning) -> Result<Arc<Store>> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_max_background_jobs(2);
        // Compactions run at the lowest CPU priority (nice 19): on a small machine one rewrites
        // a whole level in seconds of a CPU, and the requests the node serves meanwhile come
        // first (on a CPU the requests keep busy, RocksDB's write slowdown at 20 flushed tables
        // leaves the compactions room). Flushes (the high-priority pool) keep the normal
        // priority, so writes are never held up behind a full memtable waiting for a CPU. Their
        // I/O keeps its class: an idle one could starve them, or a log's fsync could wait on
        // their data. The default environment is the process's: its pools serve every store.
        let mut env = Env::new()?;
        env.lower_thread_pool_cpu_priority();
        opts.set_env(&env);
        opts.set_keep_log_file_num(4);
        // The write-ahead log is cut once it holds this much (the column families it still
        // needs are flushed): left alone, a column family written rarely (Raft metadata) keeps
        // every log file since its last write alive, up to four times all memtables.
        opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
        let set = tuning.settings;
        opts.set_use_direct_reads(set.direct_reads);
        let cache = Cache::new_lru_cache(tuning.block_cache_bytes);
        let table = |bloom: bool| {
            let mut t = BlockBasedOptions::default();
            if set.shared_cache {
                t.set_block_cache(&cache);
            }
            if set.index_and_filters_in_cache {
                t.set_cache_index_and_filter_blocks(true);
                t.set_pin_l0_filter_and_index_blocks_in_cache(true);
            }
            if bloom && set.bloom_filters {
                t.set_bloom_filter(10.0, false);
            }
            t
        };
        let cfs = [CF_RAFT_LOG, CF_RAFT_META, CF_SM].map(|name| {
            let mut o = Options::default();
            if name == CF_RAFT_LOG {
                o.set_compression_type(match set.raw_raft_log {
                    true => rocksdb::DBCompressionType::None,
                    false => rocksdb::DBCompressionType::Lz4,
                });
                o.set_block_based_table_factory(&table(false));
            } else {
                o.set_compression_type(rocksdb::DBCompressionType::Lz4);
                o.set_block_based_table_factory(&table(true));
                if name == CF_SM {
                    // A table where deletes pile up (objects deleted, changes cut) is compacted
                    // soon, so their space comes back without waiting for its level to fill.
                    o.add_compact_on_deletion_collector_factory(1_000, 500, 0.5);
                }
                if set.bloom_filters {
                    o.set_memtable_whole_key_filtering(true);
                    o.set_memtable_prefix_bloom_ratio(0.05);
                }
            }
            ColumnFamilyDescriptor::new(name, o)
        });
        let db = Arc::new(DB::open_cf_descriptors(&opts, path, cfs)?);
        let (sync_tx, sync_rx) = mpsc::channel::<SyncCallback>();
        let syncer_db = Arc::clone(&db);
        let closing = Arc::new(AtomicBool::new(false));
        let no_space = Arc::new(AtomicBool::new(false));
        let flags = (Arc::clone(&closing), Arc::clone(&no_space));
        let syncer = std::thread::Builder::new()
            .name("basalt-wal-sync".into())
            .spawn(move || run_wal_syncer(&syncer_db, &sync_rx, &flags))?;
        Ok(Arc::new(Store {
            db,
            written: AtomicU64::new(0),
            writing: AtomicU64::new(0),
            decoded: Mutex::new(HashMap::new()),
            freed: Mutex::new(HashMap::new()),
            closing,
            no_space,
            bulk_cached_bytes: (tuning.block_cache_bytes / 4) as u64,
            sync_tx: Some(sync_tx),
            syncer: Some(syncer),
            bloom_filters: set.bloom_filters,
        }))
    }

    pub fn cf(&self, name: &str) -> Result<&ColumnFamily> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| Error::Storage(format!("missing column family {name}")))
    }

    pub fn get(&self, cf: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get_cf(self.cf(cf)?, key)?)
    }

    /// A point-in-time view of the store for reads that must agree with each other.
    pub fn view(&self) -> ReadView<'_> {
        // A seqlock read: the generation counts finished writes, so when none was in progress
        // before the snapshot and none finished or was in progress after it, the snapshot
        // holds exactly the first `generation` writes.
        let before = self.written.load(Ordering::SeqCst);
        let idle_before = self.writing.load(Ordering::SeqCst) == 0;
        let snap = self.db.snapshot();
        let idle_after = self.writing.load(Ordering::SeqCst) == 0;
        let after = self.written.load(Ordering::SeqCst);
        ReadView {
            store: self,
            sm_iter: std::cell::RefCell::new(None),
            snap,
            generation: (idle_before && idle_after && before == after).then_some(before),
        }
    }

    fn decoded_cache(&self) -> Result<std::sync::MutexGuard<'_, DecodedCache>> {
        self.decoded
            .lock()
            .map_err(|_| Error::Internal("decoded-value cache poisoned".into()))
    }

    /// The values of `keys` of `cf`, read together, in the order of `keys`.
    fn multi_get_with(
        &self,
        cf: &str,
        keys: &[Vec<u8>],
        ro: &ReadOptions,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        self.db
            .batched_multi_get_cf_opt(self.cf(cf)?, keys, false, ro)
            .into_iter()
            .map(|r| Ok(r?.map(|v| v.to_vec())))
            .collect()
    }

    /// Visits `[start, end)` of `cf` with `ro`, forwards or from the end.
    fn scan_with(
        &self,
        cf: &str,
        start: &[u8],
        end: &[u8],
        mut ro: ReadOptions,
        reverse: bool,
        visit: &mut impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        ro.set_iterate_upper_bound(end.to_vec());
        let mode = if reverse {
            ro.set_iterate_lower_bound(start.to_vec());
            IteratorMode::End
        } else {
            IteratorMode::From(start, Direction::Forward)
        };
        let it = self.db.iterator_cf_opt(self.cf(cf)?, ro, mode);
        visit_items(it, visit)
    }

    pub fn get_default(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(key)?)
    }

    pub fn put_default_synced(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut b = WriteBatch::default();
        b.put(key, value);
        self.write(b, true)
    }

    /// Writes a batch atomically; `sync` waits for the WAL fsync.
    pub fn write(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        fail::fail_point!("store-write-nospace", |_| Err(
            crate::error::Error::Storage("IO error: No space left on device (fail point)".into())
        ));
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.writing.fetch_add(1, Ordering::SeqCst);
        let written = self.db.write_opt(batch, &wo);
        self.written.fetch_add(1, Ordering::SeqCst);
        self.writing.fetch_sub(1, Ordering::SeqCst);
        Ok(written?)
    }

    /// Options of the table files written for `ingest` (`TableFile::create`): as the state
    /// machine's column family writes its own (compression, bloom filters).
    pub fn table_options(&self) -> TableOptions {
        let mut o = Options::default();
        o.set_compression_type(rocksdb::DBCompressionType::Lz4);
        if self.bloom_filters {
            let mut t = BlockBasedOptions::default();
            t.set_bloom_filter(10.0, false);
            o.set_block_based_table_factory(&t);
        }
        o
    }

    /// Flushes the memtable of column family `cf` to a table file, waiting for it.
    pub fn flush(&self, cf: &str) -> Result<()> {
        Ok(self.db.flush_cf(self.cf(cf)?)?)
    }

    /// Flushes every column family's memtable, waiting for it: done at a clean stop, so that
    /// the next start has no write-ahead log to replay (a restarted node is back sooner and
    /// spends less CPU doing it).
    pub fn flush_all(&self) -> Result<()> {
        for name in [CF_RAFT_LOG, CF_RAFT_META, CF_SM] {
            self.flush(name)?;
        }
        Ok(())
    }

    /// Moves the finished table file `table` into column family `cf`: its keys appear at once,
    /// newer than every write before (a range deleted before stays deleted under them). An
    /// empty table ingests nothing. May be tried again when it fails (the file stays).
    pub fn ingest(&self, cf: &str, table: &FinishedTable) -> Result<()> {
        if table.entries == 0 {
            return Ok(());
        }
        fail::fail_point!("store-write-nospace", |_| Err(
            crate::error::Error::Storage("IO error: No space left on device (fail point)".into())
        ));
        let mut o = IngestExternalFileOptions::default();
        o.set_move_files(true);
        self.writing.fetch_add(1, Ordering::SeqCst);
        let ingested =
            self.db
                .ingest_external_file_cf_opts(self.cf(cf)?, &o, vec![table.path.clone()]);
        self.written.fetch_add(1, Ordering::SeqCst);
        self.writing.fetch_sub(1, Ordering::SeqCst);
        Ok(ingested?)
    }

    /// `write`, waiting out a full disk: a write refused for want of space is tried again,
    /// backing off from 50 ms to 2 s, until it succeeds or the node shuts down — RocksDB
    /// resumes by itself once space is freed (its own manager polls the disk), so the Raft log
    /// and the state machine never report a full disk to openraft, which would stop the group
    /// for good. Any other failure is answered at once.
    pub async fn write_until_room(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        let data = batch.data().to_vec();
        let mut batch = batch;
        let mut wait = Duration::from_millis(50);
        let mut tries = 0;
        loop {
            tries += 1;
            match self.try_write(batch, &data, sync, tries)? {
                None => return Ok(()),
                Some(again) => batch = again,
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    }

    /// `write_until_room` for blocking threads (snapshot installs).
    pub fn write_until_room_blocking(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        let data = batch.data().to_vec();
        let mut batch = batch;
        let mut wait = Duration::from_millis(50);
        let mut tries = 0;
        loop {
            tries += 1;
            match self.try_write(batch, &data, sync, tries)? {
                None => return Ok(()),
                Some(again) => batch = again,
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    }

    /// One try of `write_until_room` (the `tries`th): `None` once written, the batch made
    /// again from `data` when the disk had no room for it (and the node is not shutting down).
    /// A writer stopped on an earlier error is waited out while a write met a full disk, or
    /// for the first `STOPPED_WRITER_TRIES` tries (the write that met it may not have said so
    /// yet); else it is an error.
    fn try_write(
        &self,
        batch: WriteBatch,
        data: &[u8],
        sync: bool,
        tries: u32,
    ) -> Result<Option<WriteBatch>> {
        match self.write(batch, sync) {
            Ok(()) => {
                if self.no_space.swap(false, Ordering::SeqCst) {
                    metrics::gauge!("basalt_storage_writes_blocked").set(0.0);
                    tracing::warn!("the store takes writes again");
                }
                Ok(None)
            }
            Err(e)
                if (is_no_space(&e)
                    || (is_writer_stopped(&e)
                        && (self.no_space.load(Ordering::SeqCst)
                            || tries <= STOPPED_WRITER_TRIES)))
                    && !self.is_closing() =>
            {
                // Only the write that met the full disk says so (a stopped writer alone may
                // have another cause).
                if is_no_space(&e) && !self.no_space.swap(true, Ordering::SeqCst) {
                    metrics::gauge!("basalt_storage_writes_blocked").set(1.0);
                    tracing::error!("the disk is full: writes wait until space is freed: {e}");
                }
                metrics::counter!("basalt_storage_write_retries_total").increment(1);
                Ok(Some(WriteBatch::from_data(data)))
            }
            Err(e) => Err(e),
        }
    }

    /// The directory of the database.
    pub fn path(&self) -> &Path {
        self.db.path()
    }

    /// Whether the node shuts down (`close`).
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Whether a write met a full disk and none has succeeded since.
    pub fn out_of_space(&self) -> bool {
        self.no_space.load(Ordering::SeqCst)
    }

    /// Makes writes waiting for room give up (the node shuts down).
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Calls `callback` once every write made before this call is durable.
    pub fn after_wal_sync(&self, callback: SyncCallback) {
        let Some(tx) = &self.sync_tx else {
            return callback(Err(std::io::Error::other("WAL syncer stopped")));
        };
        if let Err(mpsc::SendError(cb)) = tx.send(callback) {
            cb(Err(std::io::Error::other("WAL syncer stopped")));
        }
    }

    /// Visits the keys in `[start, end)` of `cf` in order until `visit` returns false.
    pub fn scan(
        &self,
        cf: &str,
        start: &[u8],
        end: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.scan_with(cf, start, end, ReadOptions::default(), false, &mut visit)
    }

    /// Like [`Store::scan`], from the last key of the range to the first.
    pub fn scan_rev(
        &self,
        cf: &str,
        start: &[u8],
        end: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.scan_with(cf, start, end, ReadOptions::default(), true, &mut visit)
    }

    /// The last key/value in `[start, end)` of `cf`.
    pub fn last_in_range(
        &self,
        cf: &str,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(start.to_vec());
        let mut it = self.db.iterator_cf_opt(
            self.cf(cf)?,
            ro,
            IteratorMode::From(end, Direction::Reverse),
        );
        match it.next() {
            Some(item) => {
                let (k, v) = item?;
                if k.as_ref() < end {
                    Ok(Some((k.to_vec(), v.to_vec())))
                } else {
                    // `From(end, Reverse)` may land on `end` itself; step once more.
                    match it.next() {
                        Some(item) => {
                            let (k, v) = item?;
                            Ok(Some((k.to_vec(), v.to_vec())))
                        }
                        None => Ok(None),
                    }
                }
            }
            None => Ok(None),
        }
    }

    /// Like [`Store::scan`], but over one consistent point-in-time view of the database.
    pub fn scan_snapshot(
        &self,
        cf: &str,
        start: &[u8],
        end: &[u8],
        visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.scan_snapshot_pinned(cf, start, end, || {}, visit)
    }

    /// Like [`Store::scan_snapshot`], calling `pinned` once the view is taken, before the
    /// first record is read: what is written after that is not seen.
    pub fn scan_snapshot_pinned(
        &self,
        cf: &str,
        start: &[u8],
        end: &[u8],
        pinned: impl FnOnce(),
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let snap = self.db.snapshot();
        pinned();
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(end.to_vec());
        // A whole range read once (a snapshot, a backup, a digest): read ahead, and keep the
        // block cache for what requests read.
        ro.fill_cache(false);
        ro.set_readahead_size(2 << 20);
        let it = snap.iterator_cf_opt(
            self.cf(cf)?,
            ro,
            IteratorMode::From(start, Direction::Forward),
        );
        visit_items(it, &mut visit)
    }

    /// Erases every key of `group` (its state, Raft log and vote) in one synced batch and
    /// compacts what held them: a group merged away (`replicas::retire`).
    pub fn erase_group(&self, group: crate::ids::GroupId) -> Result<()> {
        self.erase_replica(group, &[])?;
        self.compact_group(group)
    }

    /// Erases every key of `group`'s replica (its state, Raft log, vote and marks) and writes
    /// `keep` (tag, value) pairs of its Raft meta in their place, in one synced batch: a
    /// replica removed from its group (`replicas::erase`). The space is taken back by
    /// [`Store::compact_group`].
    pub fn erase_replica(&self, group: crate::ids::GroupId, keep: &[(u8, Vec<u8>)]) -> Result<()> {
        let (from, to) = (
            super::keys::group_prefix(group).to_vec(),
            super::keys::group_end(group),
        );
        let mut batch = WriteBatch::default();
        for cf in [CF_SM, CF_RAFT_LOG, CF_RAFT_META] {
            batch.delete_range_cf(self.cf(cf)?, from.clone(), to.clone());
        }
        for (tag, value) in keep {
            batch.put_cf(
                self.cf(CF_RAFT_META)?,
                super::keys::meta_key(group, *tag),
                value,
            );
        }
        self.write(batch, true)
    }

    /// Compacts what held `group`'s state and Raft log (erased), taking the space back.
    pub fn compact_group(&self, group: crate::ids::GroupId) -> Result<()> {
        let (from, to) = (
            super::keys::group_prefix(group).to_vec(),
            super::keys::group_end(group),
        );
        for cf in [CF_SM, CF_RAFT_LOG] {
            self.compact_range(cf, &from, &to)?;
        }
        Ok(())
    }

    /// Flushes memtables and compacts the range of one column family. Not exclusive: the
    /// automatic compactions go on meanwhile (an exclusive one holds them back, and writes
    /// stall behind the level-0 files that pile up).
    pub fn compact_range(&self, cf: &str, start: &[u8], end: &[u8]) -> Result<()> {
        let mut opts = rocksdb::CompactOptions::default();
        opts.set_exclusive_manual_compaction(false);
        self.db
            .compact_range_cf_opt(self.cf(cf)?, Some(start), Some(end), &opts);
        Ok(())
    }

    /// Notes `bytes` of `group`'s state deleted by an applied batch.
    pub fn note_freed(&self, group: crate::ids::GroupId, bytes: u64) {
        if bytes > 0 {
            let mut freed = self.freed.lock().unwrap_or_else(|p| p.into_inner());
            let n = freed.entry(group).or_default();
            *n = n.saturating_add(bytes);
        }
    }

    /// Bytes of `group`'s state deleted since `take_freed` last asked.
    pub fn freed(&self, group: crate::ids::GroupId) -> u64 {
        let freed = self.freed.lock().unwrap_or_else(|p| p.into_inner());
        freed.get(&group).copied().unwrap_or(0)
    }

    /// Forgets what `group`'s entries deleted (its range was just compacted).
    pub fn take_freed(&self, group: crate::ids::GroupId) -> u64 {
        let mut freed = self.freed.lock().unwrap_or_else(|p| p.into_inner());
        freed.remove(&group).unwrap_or(0)
    }

    /// Approximate bytes of `[start, end)` of column family `cf` in the store's files (not
    /// its memtables).
    pub fn approximate_range_size(&self, cf: &str, start: &[u8], end: &[u8]) -> Result<u64> {
        let sizes = self
            .db
            .get_approximate_sizes_cf(self.cf(cf)?, &[rocksdb::Range::new(start, end)]);
        Ok(sizes.first().copied().unwrap_or(0))
    }

    /// Approximate bytes on disk plus in memtables, over all column families.
    pub fn approximate_size(&self) -> u64 {
        let mut total = 0;
        for name in [CF_RAFT_LOG, CF_RAFT_META, CF_SM] {
            if let Ok(cf) = self.cf(name) {
                for prop in [
                    "rocksdb.total-sst-files-size",
                    "rocksdb.cur-size-all-mem-tables",
                ] {
                    total += self
                        .db
                        .property_int_value_cf(cf, prop)
                        .ok()
                        .flatten()
                        .unwrap_or(0);
                }
            }
        }
        total
    }
}

type KvItem = std::result::Result<(Box<[u8]>, Box<[u8]>), rocksdb::Error>;

/// Feeds iterator items to `visit` until it returns false.
fn visit_items(
    it: impl Iterator<Item = KvItem>,
    visit: &mut impl FnMut(&[u8], &[u8]) -> Result<bool>,
) -> Result<()> {
    for item in it {
        let (k, v) = item?;
        if !visit(&k, &v)? {
            break;
        }
    }
    Ok(())
}

/// Whether a store error says the disk is full.
pub fn is_no_space(e: &crate::error::Error) -> bool {
    matches!(e, crate::error::Error::Storage(m) if m.contains("No space left"))
}

/// Tries a write told the writer stopped waits for a write that met a full disk to say so.
const STOPPED_WRITER_TRIES: u32 = 5;

/// Whether a store error says RocksDB's writer stopped on an earlier error: what the writes
/// racing the first one to meet a full disk are told, before that one is reported. They wait
/// for room like it when it is a full disk (`try_write`); another cause is answered as an
/// error.
fn is_writer_stopped(e: &crate::error::Error) -> bool {
    matches!(e, crate::error::Error::Storage(m) if m.contains("Writer has previous error"))
}

/// Waits for sync requests, takes every request pending at that moment, and answers them all
/// with one WAL fsync.
fn run_wal_syncer(
    db: &DB,
    rx: &mpsc::Receiver<SyncCallback>,
    (closing, no_space): &(Arc<AtomicBool>, Arc<AtomicBool>),
) {
    while let Ok(first) = rx.recv() {
        let mut pending = vec![first];
        pending.extend(rx.try_iter());
        let started = Instant::now();
        let mut result = db.flush_wal(true);
        // While the disk is full, a failed sync is tried again until it succeeds (RocksDB
        // resumes once space is freed, having flushed what its log held): an error reported
        // to openraft would stop every group waiting on this sync for good.
        while result.is_err() && !closing.load(Ordering::SeqCst) {
            let full = result
                .as_ref()
                .err()
                .is_some_and(|e| e.to_string().contains("No space left"));
            if !full && !no_space.load(Ordering::SeqCst) {
                break;
            }
            no_space.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(250));
            result = db.flush_wal(true);
        }
        metrics::histogram!("basalt_storage_wal_sync_seconds")
            .record(started.elapsed().as_secs_f64());
        metrics::histogram!("basalt_storage_wal_sync_batch_size").record(pending.len() as f64);
        for cb in pending {
            cb(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::other(e.to_string())),
            });
        }
    }
}

#[cfg(test)]
#[path = "settings_bench.rs"]
mod settings_bench;

/// How table files for `Store::ingest` are written (`Store::table_options`).
pub type TableOptions = Options;

/// A table file being written for `Store::ingest`: keys strictly increasing. Dropped
/// unfinished, its file is removed.
pub struct TableFile<'a> {
    writer: SstFileWriter<'a>,
    path: PathBuf,
    entries: u64,
}

/// A table file written whole, to be ingested (`Store::ingest`); dropped, what is left of it
/// (nothing once ingested: the store took the file) is removed.
pub struct FinishedTable {
    path: PathBuf,
    entries: u64,
}

impl<'a> TableFile<'a> {
    /// A new table file at `path` (replaced if there), written with `options`
    /// (`Store::table_options`).
    pub fn create(options: &'a Options, path: &Path) -> Result<TableFile<'a>> {
        let _ = std::fs::remove_file(path);
        let writer = SstFileWriter::create(options);
        writer.open(path)?;
        Ok(TableFile {
            writer,
            path: path.to_path_buf(),
            entries: 0,
        })
    }

    /// Adds `key` (greater than every key before it) with `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.writer.put(key, value)?;
        self.entries += 1;
        Ok(())
    }

    /// Finishes the file (an empty one is removed: there is nothing to ingest).
    pub fn finish(mut self) -> Result<FinishedTable> {
        if self.entries > 0 {
            self.writer.finish()?;
        }
        let finished = FinishedTable {
            path: std::mem::take(&mut self.path),
            entries: self.entries,
        };
        if finished.entries == 0 {
            let _ = std::fs::remove_file(&finished.path);
        }
        Ok(finished)
    }
}

impl Drop for TableFile<'_> {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for FinishedTable {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::keys::CF_SM;

    #[test]
    fn an_ingested_table_replaces_a_deleted_range_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        let mut b = WriteBatch::default();
        for k in [&b"a1"[..], b"b1", b"b2", b"c1"] {
            b.put_cf(store.cf(CF_SM).unwrap(), k, b"old");
        }
        store.write(b, false).unwrap();
        let options = store.table_options();
        let mut table = TableFile::create(&options, &dir.path().join("t.table")).unwrap();
        table.put(b"b0", b"new").unwrap();
        table.put(b"b2", b"new").unwrap();
        assert!(table.put(b"b1", b"late").is_err(), "keys go up");
        let table = table.finish().unwrap();
        let mut cleared = WriteBatch::default();
        cleared.delete_range_cf(store.cf(CF_SM).unwrap(), b"b".to_vec(), b"c".to_vec());
        store.write(cleared, false).unwrap();
        store.ingest(CF_SM, &table).unwrap();
        let got = |k: &[u8]| store.get(CF_SM, k).unwrap();
        assert_eq!(got(b"a1").as_deref(), Some(&b"old"[..]));
        assert_eq!(got(b"b0").as_deref(), Some(&b"new"[..]));
        assert_eq!(got(b"b1"), None, "deleted, not in the table");
        assert_eq!(got(b"b2").as_deref(), Some(&b"new"[..]));
        assert_eq!(got(b"c1").as_deref(), Some(&b"old"[..]));
        assert!(!dir.path().join("t.table").exists(), "moved into the store");
        // An empty table ingests nothing.
        let empty = TableFile::create(&options, &dir.path().join("e.table")).unwrap();
        store.ingest(CF_SM, &empty.finish().unwrap()).unwrap();
    }

    #[test]
    fn decoded_values_are_reused_only_while_nothing_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let put = |v: &[u8]| {
            let mut b = WriteBatch::default();
            b.put_cf(store.cf(CF_SM).unwrap(), b"k", v);
            store.write(b, false).unwrap();
        };
        let decodes = std::cell::Cell::new(0);
        let read = |view: &ReadView<'_>| {
            let got = view
                .decoded(CF_SM, &[b"k".to_vec(), b"absent".to_vec()], |bytes| {
                    decodes.set(decodes.get() + 1);
                    Ok(bytes.map(<[u8]>::to_vec))
                })
                .unwrap();
            (got[0].as_ref().clone(), got[1].as_ref().clone())
        };
        put(b"one");
        let first = store.view();
        assert!(first.generation.is_some());
        assert_eq!(read(&first), (Some(b"one".to_vec()), None));
        assert_eq!(decodes.get(), 2);
        // A later view with no write between: decoded once, not read again.
        assert_eq!(read(&store.view()), (Some(b"one".to_vec()), None));
        assert_eq!(decodes.get(), 2);
        // A write: the next view reads the new value; the first view still its own.
        put(b"two");
        assert_eq!(read(&store.view()), (Some(b"two".to_vec()), None));
        assert_eq!(decodes.get(), 4);
        assert_eq!(read(&first), (Some(b"one".to_vec()), None));
        // A view taken while a write is in progress knows no generation: it reads itself.
        store.writing.fetch_add(1, Ordering::SeqCst);
        let racing = store.view();
        store.writing.fetch_sub(1, Ordering::SeqCst);
        assert_eq!(racing.generation, None);
        let before = decodes.get();
        assert_eq!(read(&racing), (Some(b"two".to_vec()), None));
        assert_eq!(decodes.get(), before + 2);
    }

    #[test]
    fn scans_run_forward_and_backward_within_their_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut batch = WriteBatch::default();
        for k in [&b"a"[..], b"b1", b"b2", b"b3", b"c"] {
            batch.put_cf(store.cf(CF_SM).unwrap(), k, b"");
        }
        store.write(batch, true).unwrap();
        let collect = |reverse: bool, stop_after: usize| {
            let mut seen: Vec<Vec<u8>> = Vec::new();
            let visit = |k: &[u8], _: &[u8]| {
                seen.push(k.to_vec());
                Ok(seen.len() < stop_after)
            };
            if reverse {
                store.scan_rev(CF_SM, b"b", b"c", visit).unwrap();
            } else {
                store.scan(CF_SM, b"b", b"c", visit).unwrap();
            }
            seen
        };
        let keys = |ks: &[&[u8]]| ks.iter().map(|k| k.to_vec()).collect::<Vec<_>>();
        assert_eq!(collect(false, 9), keys(&[b"b1", b"b2", b"b3"]));
        assert_eq!(collect(true, 9), keys(&[b"b3", b"b2", b"b1"]));
        assert_eq!(collect(true, 2), keys(&[b"b3", b"b2"]));
    }

    /// The (key, value) pairs a view's scan of `[start, end)` visits, in its direction.
    fn scan_keys(
        view: &ReadView<'_>,
        start: &[u8],
        end: &[u8],
        reverse: bool,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut seen = Vec::new();
        let visit = |k: &[u8], v: &[u8]| {
            seen.push((k.to_vec(), v.to_vec()));
            Ok(true)
        };
        if reverse {
            view.scan_rev(CF_SM, start, end, visit).unwrap();
        } else {
            view.scan(CF_SM, start, end, visit).unwrap();
        }
        seen
    }

    /// A view's scans share one iterator: each scan still sees exactly its range in its
    /// direction (an `end` that is a stored key stays out), a scan started inside another's
    /// visit gets its own, and writes after the view was taken are not seen.
    #[test]
    fn a_views_scans_share_an_iterator_and_keep_their_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let put = |keys: &[&[u8]]| {
            let mut batch = WriteBatch::default();
            for k in keys {
                batch.put_cf(store.cf(CF_SM).unwrap(), k, k);
            }
            store.write(batch, true).unwrap();
        };
        put(&[b"a", b"b1", b"b2", b"b3", b"c", b"d"]);
        let view = store.view();
        put(&[b"b25", b"a1"]);
        let scan = |start: &[u8], end: &[u8], reverse: bool| {
            let seen = scan_keys(&view, start, end, reverse);
            seen.iter().for_each(|(k, v)| assert_eq!(k, v));
            seen.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
        };
        let keys = |ks: &[&[u8]]| ks.iter().map(|k| k.to_vec()).collect::<Vec<_>>();
        for _ in 0..2 {
            assert_eq!(scan(b"b", b"c", false), keys(&[b"b1", b"b2", b"b3"]));
            assert_eq!(scan(b"b", b"c", true), keys(&[b"b3", b"b2", b"b1"]));
            assert_eq!(scan(b"b2", b"b3", true), keys(&[b"b2"]));
            assert_eq!(scan(b"a", b"b2", false), keys(&[b"a", b"b1"]));
            assert_eq!(scan(b"c", b"z", true), keys(&[b"d", b"c"]));
            assert_eq!(scan(b"0", b"a", true), keys(&[]));
            assert_eq!(scan(b"x", b"z", false), keys(&[]));
        }
        let mut pairs = Vec::new();
        view.scan(CF_SM, b"b", b"c", |outer, _| {
            view.scan_rev(CF_SM, b"c", b"e", |inner, _| {
                pairs.push((outer.to_vec(), inner.to_vec()));
                Ok(true)
            })?;
            Ok(true)
        })
        .unwrap();
        assert_eq!(pairs.len(), 6);
        // Many deleted keys on both sides of a range: the shared iterator gives up passing
        // them and the scan goes on bounded, with the same keys.
        let mut batch = WriteBatch::default();
        for i in 0..10_000 {
            batch.put_cf(store.cf(CF_SM).unwrap(), format!("a{i:05}"), b"x");
            batch.put_cf(store.cf(CF_SM).unwrap(), format!("c{i:05}"), b"x");
        }
        store.write(batch, true).unwrap();
        let mut batch = WriteBatch::default();
        for i in 0..10_000 {
            batch.delete_cf(store.cf(CF_SM).unwrap(), format!("a{i:05}"));
            batch.delete_cf(store.cf(CF_SM).unwrap(), format!("c{i:05}"));
        }
        store.write(batch, true).unwrap();
        let view = store.view();
        let scan = |start: &[u8], end: &[u8], reverse: bool| {
            let seen = scan_keys(&view, start, end, reverse);
            seen.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
        };
        assert_eq!(
            scan(b"b", b"c1", false),
            keys(&[b"b1", b"b2", b"b25", b"b3", b"c"])
        );
        assert_eq!(scan(b"a", b"b2", true), keys(&[b"b1", b"a1", b"a"]));
        assert_eq!(scan(b"a0", b"a2", false), keys(&[b"a1"]));
        assert_eq!(pairs[0], (b"b1".to_vec(), b"d".to_vec()));
        assert_eq!(pairs[5], (b"b3".to_vec(), b"c".to_vec()));
    }
}
