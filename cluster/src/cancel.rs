//! Cancellation of read work nobody waits for any more. A read's blocking task (a scan or
//! aggregation over a node's shards, `local_read`) gets a `Cancel`; the async side that awaits
//! it holds the matching `CancelOnDrop`. When that future is dropped — its HTTP client
//! disconnected, its deadline passed (`tokio::time::timeout` drops it), or the node that
//! forwarded the read gave up on the RPC — the guard trips the token, and the query engine
//! (`query::shard_exec`) stops at its next check instead of reading on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

/// Whether the work's requester is gone (cheap to clone and to check).
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

/// Trips its `Cancel` when dropped, unless disarmed: held by whoever awaits the work.
#[derive(Debug)]
pub struct CancelOnDrop(Option<Cancel>);

impl Cancel {
    /// A token and the guard that trips it when dropped.
    pub fn new() -> (Cancel, CancelOnDrop) {
        let token = Cancel::default();
        (token.clone(), CancelOnDrop(Some(token)))
    }

    /// A token that never trips (reads nobody can abandon, tests).
    pub fn never() -> Cancel {
        Cancel::default()
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `Err(Timeout)` once the requester is gone: the work should stop.
    pub fn check(&self) -> Result<()> {
        match self.is_cancelled() {
            true => Err(Error::Timeout(
                "the read was abandoned: its caller left or its deadline passed".into(),
            )),
            false => Ok(()),
        }
    }

    fn trip(&self) {
        if !self.0.swap(true, Ordering::Relaxed) {
            metrics::counter!("basalt_reads_cancelled_total").increment(1);
        }
    }
}

impl CancelOnDrop {
    /// The work finished: dropping the guard no longer trips the token.
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(token) = self.0.take() {
            token.trip();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_guard_trips_its_token_and_a_disarmed_one_does_not() {
        let (token, guard) = Cancel::new();
        assert!(token.check().is_ok());
        drop(guard);
        assert!(token.is_cancelled());
        assert!(matches!(token.check(), Err(Error::Timeout(_))));
        let (token, guard) = Cancel::new();
        guard.disarm();
        assert!(token.check().is_ok());
        assert!(Cancel::never().check().is_ok());
    }
}
