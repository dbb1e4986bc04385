//! Consistency checks of a group's replicas (`services::check`): a replica that applies a
//! `CheckState` entry pins a view of its state right after it (before any later entry) and
//! hashes it on a blocking thread; the digest waits here until the check's coordinator asks for
//! it (`StateChecks::digest`). Digests nobody asked for are dropped after `KEEP`; at most
//! `HASHING` groups are hashed at once on a node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};

use crate::admin::GroupDigest;
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::storage::Store;

/// How long a digest waits to be asked for.
const KEEP: Duration = Duration::from_secs(2 * 3600);

/// This node's digests of checks, by check and group (cheap to clone).
#[derive(Clone, Default)]
pub struct StateChecks {
    inner: Arc<Inner>,
}

/// A replica's digest (or why it could not make one), and when it was made.
type Made = (Instant, std::result::Result<GroupDigest, String>);

/// Groups a node hashes at once (the others wait with their view pinned).
const HASHING: usize = 2;

struct Inner {
    digests: Mutex<HashMap<(String, GroupId), Made>>,
    arrived: Notify,
    hashing: Arc<tokio::sync::Semaphore>,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            digests: Mutex::default(),
            arrived: Notify::new(),
            hashing: Arc::new(tokio::sync::Semaphore::new(HASHING)),
        }
    }
}

impl StateChecks {
    /// Pins `group`'s state in `store` as it is now and hashes it in the background; returns
    /// once the view is pinned.
    pub(crate) async fn pin(&self, check: String, group: GroupId, store: Arc<Store>) {
        let (pinned_tx, pinned_rx) = oneshot::channel();
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut turn = None;
            let digest = super::snapshot::digest_pinned(group, &store, || {
                let _ = pinned_tx.send(());
                // Pinned: it waits here for its turn to hash.
                turn = futures::executor::block_on(Arc::clone(&inner.hashing).acquire_owned()).ok();
            })
            .map_err(|e| e.to_string());
            drop(turn);
            let mut digests = inner.digests.lock().unwrap_or_else(|p| p.into_inner());
            digests.retain(|_, (at, _)| at.elapsed() < KEEP);
            digests.insert((check, group), (Instant::now(), digest));
            drop(digests);
            inner.arrived.notify_waiters();
        });
        let _ = pinned_rx.await;
    }

    /// The digest of `group` at check `check`, waiting up to `wait` for this replica to apply
    /// the check's entry and hash its state.
    pub async fn digest(&self, check: &str, group: GroupId, wait: Duration) -> Result<GroupDigest> {
        let key = (check.to_string(), group);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let arrived = self.inner.arrived.notified();
            let found = self
                .inner
                .digests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            if let Some((_, digest)) = found {
                return digest.map_err(Error::Storage);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Err(Error::Timeout(format!(
                    "group {group} has not applied check {check} here"
                )));
            }
        }
    }
}
