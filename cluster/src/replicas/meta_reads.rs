//! `MetaReads`: the metadata group's records this node read lately from its own replica (an
//! app by id, a class's triggers, the member list), each kept with the replica's applied index
//! it was read at and served again while the replica has applied nothing newer. Requests read
//! these records on every call (`find_app`, `local_triggers`); the group changes rarely.
//!
//! The index is read before the records, so what is kept is at least as new as its index; a
//! write to the metadata group answers only once every member applied it (`settle`), and a
//! member's applied index moves when it does, so the next read anywhere reads again. Records
//! are kept with their expiry and checked against the clock on every read.
//!
//! Neighbours: `Replicas::local_meta_record(s…)` (the only users), `storage::records`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::Result;
use crate::namespace::Namespace;
use crate::storage::records::StoredRecord;

/// Records kept at most, over all reads (more clears what is kept).
const MAX_RECORDS: usize = 20_000;

/// What a read returned: its records (key within the namespace, record), in key order.
pub(super) type Records = Arc<Vec<(String, StoredRecord)>>;

/// A read: one record (`One`) or those whose keys start with a prefix (`Prefix`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum MetaRead {
    One(Namespace, String),
    Prefix(Namespace, String),
}

#[derive(Default)]
pub(super) struct MetaReads {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    reads: HashMap<MetaRead, (u64, Records)>,
    /// Records held by `reads`, summed.
    records: usize,
}

impl MetaReads {
    /// What `read` answers, kept from an earlier call when the replica's applied index is
    /// still `applied` (read by the caller before it calls this).
    pub(super) fn get_or_read(
        &self,
        applied: u64,
        what: MetaRead,
        read: impl FnOnce() -> Result<Vec<(String, StoredRecord)>>,
    ) -> Result<Records> {
        if let Some((at, records)) = self.lock().reads.get(&what) {
            if *at == applied {
                metrics::counter!("basalt_meta_reads_total", "kept" => "true").increment(1);
                return Ok(Arc::clone(records));
            }
        }
        metrics::counter!("basalt_meta_reads_total", "kept" => "false").increment(1);
        let records: Records = Arc::new(read()?);
        let mut kept = self.lock();
        // Keep the newest: a slower reader must not replace what was read at a later index.
        if kept.reads.get(&what).is_some_and(|(at, _)| *at > applied) {
            return Ok(records);
        }
        if kept.records + records.len() > MAX_RECORDS {
            kept.reads.clear();
            kept.records = 0;
        }
        if records.len() <= MAX_RECORDS {
            kept.records += records.len();
            if let Some((_, old)) = kept.reads.insert(what, (applied, Arc::clone(&records))) {
                kept.records -= old.len();
            }
        }
        Ok(records)
    }

    fn lock(&self) -> MutexGuard<'_, Kept> {
        match self.kept.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(v: i64) -> StoredRecord {
        StoredRecord {
            v: 1,
            value: json!(v),
            expires_at_ms: None,
        }
    }

    fn app(id: &str) -> MetaRead {
        MetaRead::One(Namespace::App, id.to_string())
    }

    #[test]
    fn a_read_is_served_again_only_while_the_applied_index_stands() {
        let reads = MetaReads::default();
        let calls = std::cell::Cell::new(0);
        let read = |v: i64, applied: u64| {
            reads
                .get_or_read(applied, app("a"), || {
                    calls.set(calls.get() + 1);
                    Ok(vec![("a".into(), rec(v))])
                })
                .unwrap()[0]
                .1
                .value
                .clone()
        };
        assert_eq!(read(1, 7), json!(1));
        assert_eq!(read(2, 7), json!(1), "kept at the same index");
        assert_eq!(read(3, 8), json!(3), "read again at a newer index");
        assert_eq!(read(4, 8), json!(3));
        assert_eq!(calls.get(), 2);
    }

    #[test]
    fn a_slower_read_at_an_older_index_does_not_replace_a_newer_one() {
        let reads = MetaReads::default();
        let one = |v: i64| move || Ok(vec![("a".to_string(), rec(v))]);
        reads.get_or_read(9, app("a"), one(9)).unwrap();
        // A reader that read index 8 before the one above finishes after it.
        let got = reads.get_or_read(8, app("a"), one(8)).unwrap();
        assert_eq!(got[0].1.value, json!(8), "it answers what it read");
        let kept = reads.get_or_read(9, app("a"), one(0)).unwrap();
        assert_eq!(kept[0].1.value, json!(9), "the newer read is kept");
    }

    #[test]
    fn reads_of_different_records_and_prefixes_are_kept_apart() {
        let reads = MetaReads::default();
        let one = |v: i64| move || Ok(vec![("k".to_string(), rec(v))]);
        reads.get_or_read(1, app("a"), one(1)).unwrap();
        reads.get_or_read(1, app("b"), one(2)).unwrap();
        let prefix = MetaRead::Prefix(Namespace::App, "a".into());
        reads.get_or_read(1, prefix.clone(), one(3)).unwrap();
        let got = |what| {
            reads.get_or_read(1, what, one(0)).unwrap()[0]
                .1
                .value
                .clone()
        };
        assert_eq!(got(app("a")), json!(1));
        assert_eq!(got(app("b")), json!(2));
        assert_eq!(got(prefix), json!(3));
    }

    #[test]
    fn what_is_kept_stays_bounded() {
        let reads = MetaReads::default();
        let many = |n: usize| move || Ok(vec![("k".to_string(), rec(0)); n]);
        for i in 0..50 {
            reads
                .get_or_read(1, app(&i.to_string()), many(MAX_RECORDS / 10))
                .unwrap();
            assert!(reads.lock().records <= MAX_RECORDS);
        }
        reads
            .get_or_read(1, app("huge"), many(MAX_RECORDS + 1))
            .unwrap();
        assert!(reads.lock().records <= MAX_RECORDS);
        assert!(!reads.lock().reads.contains_key(&app("huge")));
    }
}
