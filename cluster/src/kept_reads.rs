//! `KeptReads`: what this node read lately from its own metadata replica, each read kept with
//! the replica's applied index it was read at and served again while the replica has applied
//! nothing newer. Requests read the same metadata on every call (an app, a class's triggers,
//! an app's role graph) and the metadata group changes rarely.
//!
//! The rule, in this one place: the caller reads the applied index *before* it reads, so what
//! is kept is at least as new as its index; a slower reader never replaces what was read at a
//! later index; what is kept is bounded by a weight (records held), past which it is cleared.
//! A write to the metadata group answers only once every member applied it (`settle`), and a
//! member's applied index moves when it does, so the next read anywhere reads again.
//!
//! Neighbours: `replicas::meta_reads` (metadata records), the node's `users::roles`
//! (role graphs).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

/// How much a kept read holds (records, roles), for the bound.
pub trait Weight {
    fn weight(&self) -> usize;
}

impl<T> Weight for Arc<Vec<T>> {
    /// Its records, and at least one: a read that found nothing is kept too, and must count
    /// toward the bound (reads of ids nobody has would otherwise grow what is kept forever).
    fn weight(&self) -> usize {
        self.len().max(1)
    }
}

/// Reads kept while the metadata replica's applied index stands, by key.
pub struct KeptReads<K, V> {
    kept: Mutex<Kept<K, V>>,
    /// Counter bumped per call, labelled `kept="true"` when served from what was kept.
    metric: &'static str,
    max_weight: usize,
}

struct Kept<K, V> {
    reads: HashMap<K, (u64, V)>,
    /// Weight of what `reads` holds, summed.
    weight: usize,
}

impl<K: Eq + Hash, V: Clone + Weight> KeptReads<K, V> {
    /// Nothing kept yet; at most `max_weight` kept over all keys; calls counted in `metric`.
    pub fn new(metric: &'static str, max_weight: usize) -> Self {
        Self {
            kept: Mutex::new(Kept {
                reads: HashMap::new(),
                weight: 0,
            }),
            metric,
            max_weight,
        }
    }

    /// What `read` answers for `key`, kept from an earlier call when the replica's applied
    /// index is still `applied` (read by the caller before it calls this).
    pub fn get_or_read<Q, E>(
        &self,
        applied: u64,
        key: &Q,
        read: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some((at, value)) = self.lock().reads.get(key) {
            if *at == applied {
                metrics::counter!(self.metric, "kept" => "true").increment(1);
                return Ok(value.clone());
            }
        }
        metrics::counter!(self.metric, "kept" => "false").increment(1);
        let value = read()?;
        let weight = value.weight();
        let mut kept = self.lock();
        // Keep the newest: a slower reader must not replace what was read at a later index.
        if kept.reads.get(key).is_some_and(|(at, _)| *at > applied) {
            return Ok(value);
        }
        // Too heavy to keep: answered, and what is kept stays.
        if weight > self.max_weight {
            return Ok(value);
        }
        if kept.weight + weight > self.max_weight {
            kept.reads.clear();
            kept.weight = 0;
        }
        kept.weight += weight;
        if let Some((_, old)) = kept.reads.insert(key.to_owned(), (applied, value.clone())) {
            kept.weight -= old.weight();
        }
        Ok(value)
    }

    fn lock(&self) -> MutexGuard<'_, Kept<K, V>> {
        match self.kept.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    const MAX: usize = 1_000;

    type Reads = KeptReads<String, Arc<Vec<i64>>>;

    fn reads() -> Reads {
        KeptReads::new("basalt_test_kept_reads_total", MAX)
    }

    fn one(v: i64) -> impl FnOnce() -> Result<Arc<Vec<i64>>, Infallible> {
        move || Ok(Arc::new(vec![v]))
    }

    fn get(reads: &Reads, applied: u64, key: &str, v: i64) -> i64 {
        match reads.get_or_read(applied, key, one(v)) {
            Ok(got) => got[0],
            Err(never) => match never {},
        }
    }

    #[test]
    fn a_read_is_served_again_only_while_the_applied_index_stands() {
        let reads = reads();
        let calls = std::cell::Cell::new(0);
        let read = |v: i64, applied: u64| {
            let got: Result<_, Infallible> = reads.get_or_read(applied, "a", || {
                calls.set(calls.get() + 1);
                Ok(Arc::new(vec![v]))
            });
            got.map(|g| g[0])
        };
        assert_eq!(read(1, 7), Ok(1));
        assert_eq!(read(2, 7), Ok(1), "kept at the same index");
        assert_eq!(read(3, 8), Ok(3), "read again at a newer index");
        assert_eq!(read(4, 8), Ok(3));
        assert_eq!(calls.get(), 2);
    }

    #[test]
    fn a_failed_read_keeps_nothing() {
        let reads = reads();
        let failed: Result<_, &str> = reads.get_or_read(1, "a", || Err("down"));
        assert_eq!(failed, Err("down"));
        assert_eq!(get(&reads, 1, "a", 5), 5, "read again after the failure");
    }

    #[test]
    fn a_slower_read_at_an_older_index_does_not_replace_a_newer_one() {
        let reads = reads();
        get(&reads, 9, "a", 9);
        // A reader that read index 8 before the one above finishes after it.
        assert_eq!(get(&reads, 8, "a", 8), 8, "it answers what it read");
        assert_eq!(get(&reads, 9, "a", 0), 9, "the newer read is kept");
    }

    #[test]
    fn reads_of_different_keys_are_kept_apart() {
        let reads = reads();
        get(&reads, 1, "a", 1);
        get(&reads, 1, "b", 2);
        assert_eq!(get(&reads, 1, "a", 0), 1);
        assert_eq!(get(&reads, 1, "b", 0), 2);
    }

    #[test]
    fn what_is_kept_stays_bounded() {
        let reads = reads();
        for key in 0..50 {
            let many: Result<_, Infallible> =
                reads.get_or_read(1, &key.to_string(), || Ok(Arc::new(vec![0; MAX / 10])));
            assert!(many.is_ok());
            assert!(reads.lock().weight <= MAX);
        }
        let kept_before = reads.lock().reads.len();
        let huge: Result<_, Infallible> =
            reads.get_or_read(1, "huge", || Ok(Arc::new(vec![0; MAX + 1])));
        assert!(huge.is_ok());
        assert!(reads.lock().weight <= MAX);
        assert!(!reads.lock().reads.contains_key("huge"));
        assert_eq!(
            reads.lock().reads.len(),
            kept_before,
            "a read too heavy to keep clears nothing"
        );
    }
}
