//! Each app's share of the writes a group this node leads has in flight: at most
//! `SHARE_BYTES` of one app's object commands (roughly, by their values) are queued or being
//! appended in one group at once, so one app's large writes wait their turn behind each other
//! rather than ahead of every other app's writes in that group. A proposal past its app's share
//! waits up to `WAIT` for room, then is refused as `Overloaded` (503; it was never proposed). A
//! single command larger than the share takes all of it. Records and other commands without an
//! app are not counted. Neighbours: `Replicas::local_propose` (every proposal, forwarded ones
//! too), `Command::app_bytes`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::names::AppId;

/// Bytes of one app's writes one group may have in flight.
pub const SHARE_BYTES: usize = 32 << 20;
/// How long a write waits for its app's share: well within the time a forwarding node waits
/// for its proposal (`rpc::router`'s 8 s), so a write refused here is answered as never
/// proposed rather than timed out.
const WAIT: Duration = Duration::from_secs(3);
/// Permits count KiB.
const UNIT: usize = 1024;
/// Apps remembered per group before idle ones are forgotten.
const REMEMBERED: usize = 10_000;

#[derive(Default)]
pub(super) struct AppShares {
    groups: Mutex<HashMap<GroupId, HashMap<AppId, Arc<Semaphore>>>>,
}

impl AppShares {
    /// Holds `bytes` of `app`'s share of `group` (released when the answer is dropped).
    pub(super) async fn hold(
        &self,
        group: GroupId,
        app: &AppId,
        bytes: usize,
    ) -> Result<OwnedSemaphorePermit> {
        self.hold_within(group, app, bytes, WAIT).await
    }

    async fn hold_within(
        &self,
        group: GroupId,
        app: &AppId,
        bytes: usize,
        wait: Duration,
    ) -> Result<OwnedSemaphorePermit> {
        let share = self.share(group, app);
        let permits = (bytes / UNIT).clamp(1, SHARE_BYTES / UNIT) as u32;
        match tokio::time::timeout(wait, share.acquire_many_owned(permits)).await {
            Ok(Ok(held)) => Ok(held),
            Ok(Err(_)) => Err(Error::Internal("a closed share".into())),
            Err(_) => {
                metrics::counter!("basalt_writes_refused_total", "reason" => "app_share")
                    .increment(1);
                Err(Error::Overloaded(format!(
                    "this app has {} MiB of writes in flight to group {group}, its share: \
                     retry shortly",
                    SHARE_BYTES >> 20
                )))
            }
        }
    }

    fn share(&self, group: GroupId, app: &AppId) -> Arc<Semaphore> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let apps = groups.entry(group).or_default();
        if let Some(s) = apps.get(app) {
            return Arc::clone(s);
        }
        if apps.len() >= REMEMBERED {
            apps.retain(|_, s| Arc::strong_count(s) > 1);
        }
        let s = Arc::new(Semaphore::new(SHARE_BYTES / UNIT));
        apps.insert(app.clone(), Arc::clone(&s));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An app with its share in flight in a group waits and is refused; another app, and the
    /// same app in another group, go at once; room comes back as writes finish.
    #[tokio::test]
    async fn one_app_cannot_take_a_groups_writes_from_the_others() {
        let shares = AppShares::default();
        let g = GroupId::new(1);
        let short = Duration::from_millis(50);
        let big = shares
            .hold_within(g, &"a".into(), 20 << 20, short)
            .await
            .unwrap();
        let more = shares
            .hold_within(g, &"a".into(), 12 << 20, short)
            .await
            .unwrap();
        let refused = shares.hold_within(g, &"a".into(), 1 << 20, short).await;
        assert!(matches!(refused, Err(Error::Overloaded(_))), "{refused:?}");
        let other_app = shares.hold_within(g, &"b".into(), 1 << 20, short).await;
        assert!(other_app.is_ok());
        let other_group = shares
            .hold_within(GroupId::new(2), &"a".into(), 1 << 20, short)
            .await;
        assert!(other_group.is_ok());
        drop(big);
        let again = shares.hold_within(g, &"a".into(), 1 << 20, short).await;
        assert!(again.is_ok());
        drop((more, again));
        // A write larger than the share goes alone.
        let alone = shares.hold_within(g, &"a".into(), 100 << 20, short).await;
        assert!(alone.is_ok());
    }
}
