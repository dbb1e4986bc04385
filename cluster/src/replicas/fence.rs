//! The write fence of a backup (`services::backup`): while it is raised, new proposals through
//! this node wait (none fail) and the ones already past it are drained, so that every group's
//! `BackupBarrier` marks one cut of the whole cluster's writes. A fence lowers itself after its
//! time to live: a coordinator that died cannot hold writes up for longer than that.
//!
//! `local_propose` passes every proposal through `pass` but the barriers themselves.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::error::{Error, Result};

/// Longest a fence may stay raised.
pub const MAX_FENCE: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
struct Raised {
    id: String,
    until: Instant,
}

pub(crate) struct WriteFence {
    raised: watch::Sender<Option<Raised>>,
    /// Proposals past the fence and not yet answered.
    in_flight: AtomicUsize,
    drained: Notify,
}

/// A proposal past the fence; dropping it counts it out.
pub(crate) struct Passed<'a>(&'a WriteFence);

impl Drop for Passed<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

impl WriteFence {
    pub(crate) fn new() -> Self {
        WriteFence {
            raised: watch::Sender::new(None),
            in_flight: AtomicUsize::new(0),
            drained: Notify::new(),
        }
    }

    /// Waits while the fence is raised (at most until it lowers itself), then counts the
    /// caller in. The count goes up before the fence is looked at, so that `raise` either
    /// sees this proposal in flight or this proposal sees the fence.
    pub(crate) async fn pass(&self) -> Passed<'_> {
        loop {
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            let passed = Passed(self);
            let until = match &*self.raised.borrow() {
                Some(r) if r.until > Instant::now() => r.until,
                _ => return passed,
            };
            drop(passed);
            let mut rx = self.raised.subscribe();
            let lowered = rx.wait_for(|r| r.as_ref().is_none_or(|r| r.until != until));
            let _ = tokio::time::timeout_at(until, lowered).await;
        }
    }

    /// Raises the fence `id` for at most `ttl` (capped at `MAX_FENCE`) and waits until the
    /// proposals already past it are answered; fails (and lowers it) when they are not by
    /// then.
    /// Another backup's fence, still up, is not replaced: `Conflict`.
    pub(crate) async fn raise(&self, id: &str, ttl: Duration) -> Result<()> {
        let until = Instant::now() + ttl.min(MAX_FENCE);
        let mut taken = None;
        self.raised.send_if_modified(|r| match r {
            Some(other) if other.id != id && other.until > Instant::now() => {
                taken = Some(other.id.clone());
                false
            }
            _ => {
                *r = Some(Raised {
                    id: id.to_string(),
                    until,
                });
                true
            }
        });
        if let Some(other) = taken {
            return Err(Error::Conflict(format!(
                "backup {other} is being taken: one backup at a time"
            )));
        }
        let drained = async {
            loop {
                let notified = self.drained.notified();
                if self.in_flight.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout_at(until, drained).await.is_err() {
            self.lower(id);
            return Err(Error::Timeout(format!(
                "writes in flight did not finish within the fence of backup {id}"
            )));
        }
        Ok(())
    }

    /// Lowers the fence `id` (one of another id, or none, is left as it is).
    pub(crate) fn lower(&self, id: &str) {
        self.raised
            .send_if_modified(|r| match r.as_ref().is_some_and(|r| r.id == id) {
                true => {
                    *r = None;
                    true
                }
                false => false,
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn proposals_wait_at_a_raised_fence_and_pass_when_it_lowers() {
        let fence = Arc::new(WriteFence::new());
        fence.raise("b1", Duration::from_secs(5)).await.unwrap();
        let f = Arc::clone(&fence);
        let waiting = tokio::spawn(async move {
            let _p = f.pass().await;
            Instant::now()
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "a proposal passed a raised fence");
        let lowered_at = Instant::now();
        fence.lower("other");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "another id's lowering opened the fence"
        );
        fence.lower("b1");
        assert!(waiting.await.unwrap() >= lowered_at);
    }

    #[tokio::test]
    async fn raising_waits_for_the_proposals_in_flight() {
        let fence = Arc::new(WriteFence::new());
        let passed = fence.pass().await;
        let f = Arc::clone(&fence);
        let raise = tokio::spawn(async move { f.raise("b1", Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !raise.is_finished(),
            "the fence rose past a proposal in flight"
        );
        drop(passed);
        raise.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_fence_lowers_itself_after_its_time_to_live() {
        let fence = WriteFence::new();
        fence.raise("b1", Duration::from_millis(200)).await.unwrap();
        let started = Instant::now();
        let _p = fence.pass().await;
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
    }

    #[tokio::test]
    async fn a_second_backup_cannot_take_a_raised_fence_over() {
        let fence = WriteFence::new();
        fence.raise("b1", Duration::from_secs(5)).await.unwrap();
        let second = fence.raise("b2", Duration::from_secs(5)).await;
        assert!(matches!(second, Err(Error::Conflict(_))), "{second:?}");
        fence.lower("b1");
        fence.raise("b2", Duration::from_secs(5)).await.unwrap();
    }

    #[tokio::test]
    async fn a_fence_that_cannot_drain_gives_up_and_lowers() {
        let fence = WriteFence::new();
        let _stuck = fence.pass().await;
        let err = fence.raise("b1", Duration::from_millis(100)).await;
        assert!(matches!(err, Err(Error::Timeout(_))), "{err:?}");
        assert!(fence.raised.borrow().is_none());
    }
}
