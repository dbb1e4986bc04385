//! The write fence of a backup (`services::backup`): while it is raised, new proposals through
//! this node wait (none fail), so that every group's `BackupBarrier` marks one cut of the whole
//! cluster's writes. A fence lowers itself after its time to live: a coordinator that died
//! cannot hold writes up for longer than that.
//!
//! Proposals already past the fence when it rises are not waited for: one the barrier
//! overtakes lands after it, and was not acknowledged before it either; a write sent after
//! another was acknowledged waits at the fence, so the cut holds every write a later one in it
//! depends on (docs/ops/backup.md).
//!
//! `local_propose` passes every proposal through `pass` but the barriers themselves.

use std::time::Duration;

use tokio::sync::watch;
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
}

impl WriteFence {
    pub(crate) fn new() -> Self {
        WriteFence {
            raised: watch::Sender::new(None),
        }
    }

    /// Waits while the fence is raised (at most until it lowers itself).
    pub(crate) async fn pass(&self) {
        // Every proposal passes here: a fence that is down costs a read, no subscription.
        if self
            .raised
            .borrow()
            .as_ref()
            .is_none_or(|r| r.until <= Instant::now())
        {
            return;
        }
        self.watch().pass().await
    }

    /// What waits for the fence as `pass` does, without borrowing it: a backup's writers
    /// start reading the views they pinned once it is down, so that the fence's barriers and
    /// pins do not share the CPU with them.
    pub(crate) fn watch(&self) -> FenceWatch {
        FenceWatch {
            raised: self.raised.subscribe(),
        }
    }

    /// Raises the fence `id` for at most `ttl` (capped at `MAX_FENCE`). Another backup's
    /// fence, still up, is not replaced: `Conflict`.
    pub(crate) fn raise(&self, id: &str, ttl: Duration) -> Result<()> {
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
        match taken {
            Some(other) => Err(Error::Conflict(format!(
                "backup {other} is being taken: one fence at a time"
            ))),
            None => Ok(()),
        }
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

/// A view of a node's fence (`WriteFence::watch`).
pub(crate) struct FenceWatch {
    raised: watch::Receiver<Option<Raised>>,
}

impl FenceWatch {
    /// Waits while the fence is raised (at most until it lowers itself).
    pub(crate) async fn pass(&mut self) {
        loop {
            let until = match &*self.raised.borrow() {
                Some(r) if r.until > Instant::now() => r.until,
                _ => return,
            };
            let lowered = self
                .raised
                .wait_for(|r| r.as_ref().is_none_or(|r| r.until != until));
            if let Ok(Err(_)) = tokio::time::timeout_at(until, lowered).await {
                return; // The node's fence is gone (it is stopping).
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn proposals_wait_at_a_raised_fence_and_pass_when_it_lowers() {
        let fence = Arc::new(WriteFence::new());
        fence.raise("b1", Duration::from_secs(5)).unwrap();
        let f = Arc::clone(&fence);
        let waiting = tokio::spawn(async move {
            f.pass().await;
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
    async fn a_fence_lowers_itself_after_its_time_to_live() {
        let fence = WriteFence::new();
        fence.raise("b1", Duration::from_millis(200)).unwrap();
        let started = Instant::now();
        fence.pass().await;
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
    }

    #[tokio::test]
    async fn a_second_backup_cannot_take_a_raised_fence_over() {
        let fence = WriteFence::new();
        fence.raise("b1", Duration::from_secs(5)).unwrap();
        let second = fence.raise("b2", Duration::from_secs(5));
        assert!(matches!(second, Err(Error::Conflict(_))), "{second:?}");
        fence.lower("b1");
        fence.raise("b2", Duration::from_secs(5)).unwrap();
    }
}
