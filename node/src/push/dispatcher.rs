//! The push scheduler job: on the node that runs the cluster's scheduler (the metadata
//! group's leader), each tick lists the unfinished pushes and starts a `fanout` for each one
//! that is due (or expired) and not already running here, at most `AT_ONCE` together. A push
//! whose runner stopped — its node lost the scheduler or died — is picked up from its record
//! by the next scheduler within a tick of taking over. Started by `serve`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use basalt_cluster::{now_ms, Cluster};

use super::provider::Providers;
use super::{fanout, record, PushError};

/// How often due pushes are looked for.
const TICK: Duration = Duration::from_millis(500);

/// Pushes sent at once by one node.
const AT_ONCE: usize = 4;

/// A push running on this node: its key leaves the set when the run ends (or panics).
struct Running {
    set: Arc<Mutex<HashSet<String>>>,
    key: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}

/// Runs until the process ends.
pub async fn run(cluster: Cluster, providers: Providers) {
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        tokio::time::sleep(TICK).await;
        if !cluster.runs_scheduler() {
            continue;
        }
        let pushes = match record::unfinished(&cluster).await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!("pushes not listed: {e}");
                continue;
            }
        };
        let now = now_ms();
        for rec in pushes {
            if rec.send_ms > now && !rec.expired_at(now) {
                continue;
            }
            let key = rec.key();
            {
                let mut held = running.lock().unwrap_or_else(|p| p.into_inner());
                if held.len() >= AT_ONCE || !held.insert(key.clone()) {
                    continue;
                }
            }
            let (cluster, providers) = (cluster.clone(), providers.clone());
            let guard = Running {
                set: running.clone(),
                key,
            };
            tokio::spawn(async move {
                // Leaves the set however the run ends.
                let _guard = guard;
                let push = rec.push_id.clone();
                match fanout::run(&cluster, &providers, rec).await {
                    Ok(()) => {}
                    Err(PushError::Lost) => {
                        tracing::info!(%push, "push taken over by another scheduler")
                    }
                    Err(e) => tracing::warn!(%push, "push interrupted, to be resumed: {e}"),
                }
            });
        }
    }
}
