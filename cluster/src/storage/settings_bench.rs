//! `make bench-store`: what each RocksDB setting of `Store::open_tuned` gives, measured by
//! turning it off alone against a store with all of them on, and what bulk scans' read options
//! and batched multi-gets give against plain scans and gets. The state machine holds objects
//! several times the block cache and is read past the page cache (`direct_reads`), as a node
//! whose data is larger than its memory reads it. Prints one table; ignored by `make test`.
//! Neighbours: `store` (the settings), `keys` (the key layout the objects use).

use std::time::Instant;

use rocksdb::WriteBatch;
use serde_json::json;

use super::*;
use crate::ids::GroupId;
use crate::object::StoredObject;
use crate::storage::keys::{self, CF_RAFT_LOG, CF_SM};
use crate::storage::tuning::StoreSettings;

const GROUP: GroupId = GroupId::new(1);
const LOG_ENTRIES: u64 = 100_000;
const READS: usize = 20_000;
/// Reads of the hot set timed right after a scan.
const AFTER_SCAN_READS: usize = 2_000;
/// Times each variant is measured (rounds interleave the variants).
const ROUNDS: usize = 3;

/// Objects in the state machine (`BASALT_BENCH_STORE_OBJECTS`, default 300,000).
fn objects() -> usize {
    env_or("BASALT_BENCH_STORE_OBJECTS", 300_000)
}

/// Bytes of the block cache (`BASALT_BENCH_STORE_CACHE_MB`, default 16 MiB).
fn cache_bytes() -> usize {
    env_or("BASALT_BENCH_STORE_CACHE_MB", 16) << 20
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator, so every variant stores the same bytes.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The key of object `i` (present) or of the id next to it (`missing`: never stored).
fn key(i: usize, missing: bool) -> Vec<u8> {
    let id = format!("{i:09}{}", if missing { 'b' } else { 'a' });
    keys::object_key(GROUP, "app", "Bench", &id)
}

/// The fields of a game-score object of about 300 bytes, as the peers benchmark stores them.
fn fields(rng: &mut Lcg) -> serde_json::Map<String, serde_json::Value> {
    let words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa"];
    let note: Vec<&str> = (0..24).map(|_| words[rng.below(words.len())]).collect();
    let fields = json!({
        "score": rng.below(100_000),
        "playerName": format!("player{}", rng.below(5_000)),
        "cheatMode": rng.below(2) == 0,
        "level": rng.below(50),
        "note": note.join(" "),
    });
    match fields {
        serde_json::Value::Object(m) => m,
        _ => unreachable!("an object literal"),
    }
}

fn object(i: usize, rng: &mut Lcg) -> Vec<u8> {
    let mut o = StoredObject::new(1_700_000_000_000 + i as i64);
    o.fields = fields(rng);
    o.encode().unwrap()
}

/// A Raft log entry creating object `i`, shaped as the log stores one (JSON).
fn log_entry(i: u64, rng: &mut Lcg) -> Vec<u8> {
    let entry = json!({
        "log_id": {"leader_id": {"term": 3, "node_id": 1}, "index": i},
        "payload": {"Normal": {"CreateObject": {
            "app": "app", "class": "Bench", "object_id": format!("{i:09}a"),
            "body": fields(rng), "now_ms": 1_700_000_000_000u64 + i,
        }}},
    });
    let mut out = vec![1u8];
    out.extend(serde_json::to_vec(&entry).unwrap());
    out
}

/// Seconds to write the state machine's objects, then the Raft log's entries (each flushed
/// and compacted into tables).
fn load(store: &Store, n: usize) -> (f64, f64) {
    let started = Instant::now();
    let mut rng = Lcg(7);
    let sm = store.cf(CF_SM).unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut batch = WriteBatch::default();
        for &i in chunk {
            batch.put_cf(sm, key(i, false), object(i, &mut rng));
        }
        store.write(batch, false).unwrap();
    }
    store.db.flush_cf(sm).unwrap();
    store.compact_range(CF_SM, &[0u8; 4], &[0xffu8; 5]).unwrap();
    let objects_s = started.elapsed().as_secs_f64();
    let entries: Vec<Vec<u8>> = (0..LOG_ENTRIES).map(|i| log_entry(i, &mut rng)).collect();
    let started = Instant::now();
    let log = store.cf(CF_RAFT_LOG).unwrap();
    for (chunk, start) in entries.chunks(500).zip((0..LOG_ENTRIES).step_by(500)) {
        let mut batch = WriteBatch::default();
        for (entry, i) in chunk.iter().zip(start..) {
            batch.put_cf(log, keys::log_key(GROUP, i), entry);
        }
        store.write(batch, false).unwrap();
    }
    store.db.flush_cf(log).unwrap();
    store
        .compact_range(CF_RAFT_LOG, &[0u8; 4], &[0xffu8; 5])
        .unwrap();
    (objects_s, started.elapsed().as_secs_f64())
}

/// Entries per second of reading the Raft log back in order (what replication and apply
/// read when an entry is no longer in the memtable).
fn read_log(store: &Store) -> f64 {
    let started = Instant::now();
    let mut n = 0u64;
    let (start, end) = (keys::log_key(GROUP, 0), keys::log_key(GROUP, LOG_ENTRIES));
    store
        .scan(CF_RAFT_LOG, &start, &end, |_, v| {
            std::hint::black_box(v);
            n += 1;
            Ok(true)
        })
        .unwrap();
    n as f64 / started.elapsed().as_secs_f64()
}

fn cf_bytes(store: &Store, cf: &str) -> u64 {
    store
        .db
        .property_int_value_cf(store.cf(cf).unwrap(), "rocksdb.total-sst-files-size")
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// Reads per second of `n` gets of the keys `pick` names.
fn gets(store: &Store, n: usize, mut pick: impl FnMut() -> Vec<u8>) -> f64 {
    let view = store.view();
    let started = Instant::now();
    for _ in 0..n {
        std::hint::black_box(view.get(CF_SM, &pick()).unwrap());
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// Keys per second of multi-gets of 64 random present keys.
fn multi_gets(store: &Store, n: usize, rng: &mut Lcg, objects: usize) -> f64 {
    let view = store.view();
    let started = Instant::now();
    for _ in 0..n / 64 {
        let batch: Vec<Vec<u8>> = (0..64).map(|_| key(rng.below(objects), false)).collect();
        std::hint::black_box(view.multi_get(CF_SM, &batch).unwrap());
    }
    (n / 64 * 64) as f64 / started.elapsed().as_secs_f64()
}

/// MB per second of a scan of the whole class, as bulk reads scan (readahead, blocks kept
/// out of the cache) or plainly (no readahead, blocks cached).
fn scan(store: &Store, bulk: bool) -> f64 {
    let view = store.view();
    let prefix = keys::class_prefix(GROUP, "app", "Bench");
    let end = keys::separated_end(&prefix);
    let mut bytes = 0usize;
    let started = Instant::now();
    let visit = |k: &[u8], v: &[u8]| {
        bytes += k.len() + v.len();
        Ok(true)
    };
    if bulk {
        view.scan_bulk(CF_SM, &prefix, &end, false, visit).unwrap();
    } else {
        view.scan(CF_SM, &prefix, &end, visit).unwrap();
    }
    bytes as f64 / 1e6 / started.elapsed().as_secs_f64()
}

struct Row {
    variant: &'static str,
    objects_s: f64,
    log_s: f64,
    log_mb: f64,
    log_read: f64,
    get: f64,
    missing: f64,
    multi: f64,
    hot: f64,
    bulk_mb_s: f64,
    hot_after_bulk: f64,
    plain_mb_s: f64,
    hot_after_plain: f64,
}

fn measure(variant: &'static str, settings: StoreSettings, objects: usize) -> Row {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let tuning = StoreTuning {
        block_cache_bytes: cache_bytes(),
        settings,
    };
    let (objects_s, log_s) = {
        let store = Store::open_tuned(dir.path(), &tuning).unwrap();
        load(&store, objects)
    };
    // Reopened: an empty block cache, and (direct reads) no page cache either.
    let store = Store::open_tuned(dir.path(), &tuning).unwrap();
    let log_mb = cf_bytes(&store, CF_RAFT_LOG) as f64 / 1e6;
    let log_read = read_log(&store);
    let mut rng = Lcg(11);
    let get = gets(&store, READS, || key(rng.below(objects), false));
    let missing = gets(&store, READS, || key(rng.below(objects), true));
    let multi = multi_gets(&store, READS, &mut rng, objects);
    // A hot set of 2% of the objects, warmed, then read again around each scan (right after
    // one, the first reads find in the cache what the scan left of the hot set).
    let hot_set = (objects / 50).max(1);
    let mut hot = |store: &Store, n| gets(store, n, || key(rng.below(hot_set), false));
    hot(&store, READS);
    let hot_before = hot(&store, READS);
    let bulk_mb_s = scan(&store, true);
    let hot_after_bulk = hot(&store, AFTER_SCAN_READS);
    let plain_mb_s = scan(&store, false);
    let hot_after_plain = hot(&store, AFTER_SCAN_READS);
    Row {
        variant,
        objects_s,
        log_s,
        log_mb,
        log_read,
        get,
        missing,
        multi,
        hot: hot_before,
        bulk_mb_s,
        hot_after_bulk,
        plain_mb_s,
        hot_after_plain,
    }
}

#[test]
#[ignore = "a benchmark: make bench-store"]
fn store_settings() {
    let objects = objects();
    let on = StoreSettings {
        direct_reads: true,
        ..StoreSettings::default()
    };
    let variants: [(&str, StoreSettings); 5] = [
        ("all on", on),
        (
            "a default cache per column family",
            StoreSettings {
                shared_cache: false,
                ..on
            },
        ),
        (
            "index and filters outside the cache",
            StoreSettings {
                index_and_filters_in_cache: false,
                ..on
            },
        ),
        (
            "no bloom filters",
            StoreSettings {
                bloom_filters: false,
                ..on
            },
        ),
        (
            "Raft log compressed (LZ4)",
            StoreSettings {
                raw_raft_log: false,
                ..on
            },
        ),
    ];
    println!(
        "\n{objects} objects (~300 B) and {LOG_ENTRIES} Raft log entries (~450 B), block cache \
         {} MiB, direct reads; {READS} reads per figure ({AFTER_SCAN_READS} right after a \
         scan); {ROUNDS} rounds.\n",
        cache_bytes() >> 20
    );
    println!(
        "| variant | objects load s | log append s | log MB | log read entries/s | get/s \
         | missing get/s | multi-get keys/s | hot get/s | bulk scan MB/s | hot get/s after \
         | plain scan MB/s | hot get/s after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, settings) in (0..ROUNDS).flat_map(|_| variants) {
        let r = measure(name, settings, objects);
        println!(
            "| {} | {:.2} | {:.2} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} \
             | {:.0} | {:.0} |",
            r.variant,
            r.objects_s,
            r.log_s,
            r.log_mb,
            r.log_read,
            r.get,
            r.missing,
            r.multi,
            r.hot,
            r.bulk_mb_s,
            r.hot_after_bulk,
            r.plain_mb_s,
            r.hot_after_plain
        );
    }
}
