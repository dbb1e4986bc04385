//! `LogCache`: the newest entries of one group's log, kept decoded in memory so that
//! replication to each follower and apply take what was just appended instead of reading it
//! back from RocksDB and decoding it again (decisions/0027).
//!
//! Invariant: when not empty, the cache holds a contiguous run of indexes that ends at the
//! log's last entry. `RocksLogStore` keeps it so: every append goes through it (an append that
//! does not follow the cached run clears it first), `truncate_after` drops the entries it
//! removes, `purge` the ones it purges, and the oldest entries are evicted past a bound on
//! entries and bytes. A read of a range that starts inside the run is answered from it alone,
//! since the log holds nothing after the run's end.
//!
//! Neighbours: `raft::log_store` owns one per group and shares it among its clones (openraft's
//! log readers).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use super::Entry;

/// Entries kept at most per group.
pub const MAX_ENTRIES: usize = 1024;
/// Encoded bytes kept at most per group (the entries' encoded sizes, a stand-in for memory).
pub const MAX_BYTES: usize = 4 << 20;

#[derive(Default)]
struct Run {
    /// Entries with consecutive indexes, oldest first, each with its encoded size.
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
}

impl Run {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.log_id.index)
    }

    fn last_index(&self) -> Option<u64> {
        self.entries.back().map(|(e, _)| e.log_id.index)
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn pop_front(&mut self) {
        if let Some((_, size)) = self.entries.pop_front() {
            self.bytes -= size;
        }
    }

    fn pop_back(&mut self) {
        if let Some((_, size)) = self.entries.pop_back() {
            self.bytes -= size;
        }
    }
}

/// One group's cache; clones share it.
#[derive(Clone, Default)]
pub struct LogCache {
    run: Arc<Mutex<Run>>,
}

impl LogCache {
    fn lock(&self) -> MutexGuard<'_, Run> {
        // A panic while holding the lock cannot leave the run half-changed in a way that
        // breaks the invariant worse than clearing it, so a poisoned lock is cleared and used.
        match self.run.lock() {
            Ok(g) => g,
            Err(poisoned) => {
                let mut g = poisoned.into_inner();
                g.clear();
                g
            }
        }
    }

    /// Records entries just appended to the log (in index order), with their encoded sizes.
    pub fn appended(&self, entries: impl IntoIterator<Item = (Entry, usize)>) {
        let mut run = self.lock();
        for (entry, size) in entries {
            let index = entry.log_id.index;
            // An append overwrites everything from its index on (openraft truncates first, but
            // the cache does not rely on it), and must follow the run to extend it.
            while run.last_index().is_some_and(|last| last >= index) {
                run.pop_back();
            }
            if run.last_index().is_some_and(|last| last + 1 != index) {
                run.clear();
            }
            run.bytes += size;
            run.entries.push_back((entry, size));
            while run.entries.len() > MAX_ENTRIES
                || (run.bytes > MAX_BYTES && run.entries.len() > 1)
            {
                run.pop_front();
            }
        }
    }

    /// The log lost every entry after `index` (`None`: all of them).
    pub fn truncated_after(&self, index: Option<u64>) {
        let mut run = self.lock();
        while run
            .last_index()
            .is_some_and(|last| index.is_none_or(|i| last > i))
        {
            run.pop_back();
        }
    }

    /// The log purged every entry up to and including `index`.
    pub fn purged_up_to(&self, index: u64) {
        let mut run = self.lock();
        while run.first_index().is_some_and(|first| first <= index) {
            run.pop_front();
        }
    }

    /// Entries `start..end` (`end` exclusive, `None`: to the log's end) when `start` lies in
    /// the cached run, which then holds every one of them the log has; `None` otherwise.
    pub fn get(&self, start: u64, end: Option<u64>) -> Option<Vec<Entry>> {
        let run = self.lock();
        let first = run.first_index()?;
        let last = run.last_index()?;
        if start < first || start > last.saturating_add(1) {
            return None;
        }
        let from = usize::try_from(start - first).ok()?;
        let upto = match end {
            Some(end) if end <= start => return Some(Vec::new()),
            Some(end) => end.min(last + 1),
            None => last + 1,
        };
        let count = usize::try_from(upto - start).ok()?;
        Some(
            run.entries
                .iter()
                .skip(from)
                .take(count)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }

    #[cfg(test)]
    fn indexes(&self) -> Vec<u64> {
        self.lock()
            .entries
            .iter()
            .map(|(e, _)| e.log_id.index)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use openraft::entry::RaftEntry;

    use super::*;
    use crate::raft::LogId;

    fn entry(term: u64, index: u64) -> Entry {
        let leader = openraft::impls::leader_id_adv::LeaderId {
            term,
            node_id: crate::ids::NodeId::new(1),
        };
        <Entry as RaftEntry>::new_blank(LogId::new(leader, index))
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.log_id.index).collect()
    }

    #[test]
    fn answers_ranges_that_start_in_the_run_and_nothing_else() {
        let c = LogCache::default();
        assert!(c.get(0, None).is_none());
        c.appended((5..=9).map(|i| (entry(1, i), 10)));
        assert_eq!(indexes(&c.get(5, None).unwrap()), vec![5, 6, 7, 8, 9]);
        assert_eq!(indexes(&c.get(7, Some(9)).unwrap()), vec![7, 8]);
        // Past the end: the log has nothing there, and the cache knows it.
        assert_eq!(indexes(&c.get(8, Some(100)).unwrap()), vec![8, 9]);
        assert_eq!(indexes(&c.get(10, None).unwrap()), Vec::<u64>::new());
        assert_eq!(indexes(&c.get(6, Some(6)).unwrap()), Vec::<u64>::new());
        // Before the run or beyond the next index: the store must answer.
        assert!(c.get(4, Some(7)).is_none());
        assert!(c.get(11, None).is_none());
    }

    #[test]
    fn truncation_purge_and_overwrites_keep_it_a_suffix_of_the_log() {
        let c = LogCache::default();
        c.appended((1..=6).map(|i| (entry(1, i), 10)));
        c.truncated_after(Some(4));
        assert_eq!(c.indexes(), vec![1, 2, 3, 4]);
        // A new leader's entries overwrite from index 3 on.
        c.appended([(entry(2, 3), 10), (entry(2, 4), 10)]);
        assert_eq!(c.indexes(), vec![1, 2, 3, 4]);
        assert_eq!(c.get(3, None).unwrap()[0].log_id.leader_id.term, 2);
        c.purged_up_to(2);
        assert_eq!(c.indexes(), vec![3, 4]);
        // An append that does not follow the run (after a snapshot install) starts a new one.
        c.appended([(entry(3, 50), 10)]);
        assert_eq!(c.indexes(), vec![50]);
        c.truncated_after(None);
        assert!(c.indexes().is_empty());
    }

    #[test]
    fn keeps_the_newest_entries_within_its_bounds() {
        let c = LogCache::default();
        c.appended((1..=(MAX_ENTRIES as u64 + 10)).map(|i| (entry(1, i), 1)));
        let kept = c.indexes();
        assert_eq!(kept.len(), MAX_ENTRIES);
        assert_eq!(kept.first(), Some(&11));
        let big = MAX_BYTES / 3 + 1;
        c.appended(
            ((MAX_ENTRIES as u64 + 11)..(MAX_ENTRIES as u64 + 15)).map(|i| (entry(1, i), big)),
        );
        assert_eq!(c.indexes().len(), 2);
        // One entry larger than the bound is still kept (it is the log's end).
        c.appended([(entry(1, MAX_ENTRIES as u64 + 15), MAX_BYTES * 2)]);
        assert_eq!(c.indexes(), vec![MAX_ENTRIES as u64 + 15]);
    }
}
