//! `MovePace`: how fast the `splits` job copies and drops a split's or merge's objects — at
//! most `moveKbPerS` KiB a second on average (a `rpc::pace::BytePace`), so that the moves leave
//! the CPUs and disks to requests rather than take them whole for a while — and what that
//! implies: writes to a frozen batch's slots wait for its copy, so the copy goes as fast as it
//! can, in imports of a quarter second of the rate at least `MIN_PIECE` each, and is counted
//! (the next batch is frozen once it is spent); a batch holds at most `BATCH_SPAN` of the
//! rate; the drop goes a page of a quarter second's worth at a time, once what was moved
//! before is spent, never sleeping in the job (the scheduler runs its jobs one after another).
//! Neighbours: `splits` (the job that keeps it), `rpc::pace` (the byte pace), `command` (the
//! objects an import carries).

use std::sync::Mutex;
use std::time::Duration;

use crate::command::ImportedObject;
use crate::rpc::pace::BytePace;

/// How much of the rate a batch holds at most: its copy, at full speed, takes a fraction of it
/// (a batch's switch, grace and steps take a few seconds more, whatever its size).
const BATCH_SPAN: Duration = Duration::from_secs(1);

/// Pieces a second at the rate: each import or drop page holds a quarter second of it.
const PIECES_PER_S: u64 = 4;

/// The smallest piece, whatever the rate: a frozen copy is not cut into many Raft rounds.
const MIN_PIECE: u64 = 128 << 10;

/// The fewest objects one drop page deletes, whatever the rate.
const MIN_DROP: u32 = 16;

/// What an object is taken to weigh until a copy has measured it.
const GUESSED_OBJECT_BYTES: u64 = 1024;

/// The KiB a batch holds: `asked_kb` (`moveBatchKb`; 0: every slot at once, as asked), at
/// most `BATCH_SPAN` of `rate_kb` (`moveKbPerS`; 0: no limit), at least 1.
pub fn batch_kb(asked_kb: u32, rate_kb: u32) -> u32 {
    if asked_kb == 0 || rate_kb == 0 {
        return asked_kb;
    }
    let most = u64::from(rate_kb) * BATCH_SPAN.as_millis() as u64 / 1000;
    asked_kb.min(u32::try_from(most.max(1)).unwrap_or(u32::MAX))
}

#[derive(Default)]
pub struct MovePace {
    bytes: BytePace,
    /// The bytes and the number of the objects the batch under way copied so far.
    copied: Mutex<(u64, u64)>,
}

impl MovePace {
    /// Sets the rate (`moveKbPerS`; 0: no limit).
    pub fn set_rate_kb(&self, kb_per_s: u32) {
        self.bytes.set_rate(u64::from(kb_per_s) << 10);
    }

    fn rate(&self) -> u64 {
        self.bytes.rate()
    }

    /// The bytes of objects one import carries at most: a quarter second of the rate (at least
    /// `MIN_PIECE`), or `most` without a limit or above it.
    fn piece_bytes(&self, most: u64) -> u64 {
        match self.rate() {
            0 => most,
            rate => (rate / PIECES_PER_S).max(MIN_PIECE).min(most),
        }
    }

    /// A batch is frozen: the objects it copies are counted from none.
    pub fn start_batch(&self) {
        if let Ok(mut c) = self.copied.lock() {
            *c = (0, 0);
        }
    }

    /// `objects` cut into imports of at most a piece's bytes each (an object larger than that
    /// alone), in order; counts them in the batch's mean object size (for its drop pages).
    pub fn pieces(&self, objects: Vec<ImportedObject>, most: u64) -> Vec<Vec<ImportedObject>> {
        let total: u64 = objects.iter().map(|o| o.stored.len() as u64).sum();
        if let Ok(mut c) = self.copied.lock() {
            *c = (c.0.saturating_add(total), c.1 + objects.len() as u64);
        }
        let piece = self.piece_bytes(most);
        let mut pieces = Vec::new();
        let mut current: Vec<ImportedObject> = Vec::new();
        let mut held = 0u64;
        for o in objects {
            let size = o.stored.len() as u64;
            if !current.is_empty() && held + size > piece {
                pieces.push(std::mem::take(&mut current));
                held = 0;
            }
            held += size;
            current.push(o);
        }
        if !current.is_empty() {
            pieces.push(current);
        }
        pieces
    }

    /// The mean size of the objects the batch copied (a guess before any).
    fn object_bytes(&self) -> u64 {
        match self.copied.lock().map(|c| *c) {
            Ok((bytes, objects)) if objects > 0 => (bytes / objects).max(1),
            _ => GUESSED_OBJECT_BYTES,
        }
    }

    /// How many objects one drop page deletes: a piece's worth (at least `MIN_DROP`), or
    /// `most` without a limit or above it.
    pub fn drop_limit(&self, most: u32) -> u32 {
        if self.rate() == 0 {
            return most;
        }
        let n = self.piece_bytes(u64::MAX) / self.object_bytes();
        u32::try_from(n)
            .unwrap_or(u32::MAX)
            .clamp(MIN_DROP, most.max(MIN_DROP))
    }

    /// The bytes `objects` dropped count for against the rate.
    pub fn dropped_bytes(&self, objects: u64) -> u64 {
        objects.saturating_mul(self.object_bytes())
    }

    /// Counts `bytes` moved: what is moved next waits until they are spent at the rate.
    pub fn charge(&self, bytes: u64) {
        self.bytes.charge(bytes);
    }

    /// How long until what was moved so far is spent at the rate (zero: free now).
    pub fn free_in(&self) -> Duration {
        self.bytes.free_in()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(i: usize, bytes: usize) -> ImportedObject {
        ImportedObject {
            app: "a".into(),
            class: "C".into(),
            object_id: format!("o{i}"),
            stored: vec![1; bytes],
        }
    }

    fn sizes(pieces: &[Vec<ImportedObject>]) -> Vec<usize> {
        pieces.iter().map(Vec::len).collect()
    }

    #[test]
    fn without_a_rate_nothing_is_cut() {
        let pace = MovePace::default();
        assert_eq!(batch_kb(2048, 0), 2048);
        let pieces = pace.pieces((0..100).map(|i| object(i, 1000)).collect(), 1 << 20);
        assert_eq!(sizes(&pieces), vec![100]);
        assert_eq!(pace.drop_limit(2000), 2000);
        assert_eq!(pace.free_in(), Duration::ZERO);
    }

    #[test]
    fn a_rate_cuts_batches_imports_and_drops_to_its_pieces() {
        let pace = MovePace::default();
        pace.set_rate_kb(1024);
        // A batch holds a second of the rate at most; none asked stays every slot at once.
        assert_eq!(batch_kb(2048, 1024), 1024);
        assert_eq!(batch_kb(100, 1024), 100);
        assert_eq!(batch_kb(0, 1024), 0);
        // Imports of a quarter second (256 KiB): 300 objects of 1000 bytes in two pieces, in
        // order, every object once.
        let objects: Vec<_> = (0..300).map(|i| object(i, 1000)).collect();
        let ids: Vec<_> = objects.iter().map(|o| o.object_id.clone()).collect();
        let pieces = pace.pieces(objects, 1 << 20);
        assert_eq!(sizes(&pieces), vec![262, 38]);
        let after: Vec<_> = pieces.concat().into_iter().map(|o| o.object_id).collect();
        assert_eq!(after, ids);
        // An object larger than a piece goes alone.
        let big = vec![object(0, 10), object(1, 300_000), object(2, 10)];
        assert_eq!(sizes(&pace.pieces(big, 1 << 20)), vec![1, 1, 1]);
        // Drop pages of a piece's worth of objects of the batch's mean size: one large object
        // on its last page does not make every page weigh as much.
        pace.start_batch();
        pace.pieces((0..511).map(|i| object(i, 500)).collect(), 1 << 20);
        pace.pieces(vec![object(511, 256_500)], 1 << 20);
        assert_eq!(pace.drop_limit(2000), 262);
        assert_eq!(pace.dropped_bytes(10), 10_000);
        // What is moved is counted against the rate.
        pace.charge(pace.dropped_bytes(2048));
        assert!(pace.free_in() > Duration::from_millis(1500));
        // A slow rate drops pieces of `MIN_PIECE`, and a few objects at least.
        pace.set_rate_kb(1);
        assert_eq!(pace.drop_limit(2000), 131);
        pace.start_batch();
        pace.pieces(vec![object(0, 1 << 20)], 1 << 20);
        assert_eq!(pace.drop_limit(2000), MIN_DROP);
    }
}
