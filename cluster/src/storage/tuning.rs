//! How the node's RocksDB uses memory and which of its settings are on (`StoreTuning`,
//! `StoreSettings`): one block cache of an eighth of the machine's memory by default, and the
//! settings `make bench-store` turns off one at a time (`settings_bench`). Read by
//! `store::Store::open_tuned`.

/// How the node's RocksDB uses memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreTuning {
    /// Bytes of the block cache every column family shares (data, index and filter blocks).
    pub block_cache_bytes: usize,
    /// The settings a node always runs with; `make bench-store` turns each off alone to
    /// measure what it gives (`settings_bench`).
    pub settings: StoreSettings,
}

impl StoreTuning {
    /// The default settings with a block cache of `bytes`.
    pub fn with_cache(bytes: usize) -> Self {
        StoreTuning {
            block_cache_bytes: bytes,
            ..StoreTuning::default()
        }
    }
}

impl Default for StoreTuning {
    /// A block cache of an eighth of the machine's memory, between 64 MiB and 8 GiB.
    fn default() -> Self {
        let total = machine_memory_bytes().unwrap_or(2 << 30);
        StoreTuning {
            block_cache_bytes: (total / 8).clamp(64 << 20, 8 << 30),
            settings: StoreSettings::default(),
        }
    }
}

/// RocksDB settings of `Store::open_tuned`, each on in a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreSettings {
    /// One block cache of `block_cache_bytes` for every column family (off: RocksDB's
    /// default, a small cache per column family).
    pub shared_cache: bool,
    /// Index and filter blocks held in the block cache, those of level 0 pinned (off: kept
    /// by each open table, outside any bound).
    pub index_and_filters_in_cache: bool,
    /// Bloom filters (10 bits a key) on the state machine's tables and memtables.
    pub bloom_filters: bool,
    /// The Raft log stored uncompressed (off: LZ4 like the state machine).
    pub raw_raft_log: bool,
    /// Reads straight from the disk, past the page cache (off in a node): how
    /// `make bench-store` reads a state machine as if it were larger than memory.
    pub direct_reads: bool,
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            shared_cache: true,
            index_and_filters_in_cache: true,
            bloom_filters: true,
            raw_raft_log: true,
            direct_reads: false,
        }
    }
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), when it can be read.
fn machine_memory_bytes() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
