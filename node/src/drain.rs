//! Draining this node before it stops (SIGTERM, Ctrl-C, or `basalt admin drain`), so that
//! clients behind a health-checking proxy see no failed request:
//!
//! 1. `/health?ready=1` answers 503 at once (`DrainState::is_draining`), so proxies and load
//!    balancers take the node out; it still serves every request meanwhile.
//! 2. After `--drain-wait` (5 s), the cluster hands the node's leaderships over to other
//!    voters (`Cluster::drain`, at most `HANDOVER_WITHIN`).
//! 3. The HTTP server stops accepting connections and lets requests in flight finish (they
//!    are forwarded to the groups' new leaders, like any request); realtime clients get a
//!    reconnect hint (`DrainState::stopping`): a plain WebSocket the close code 1012 "service
//!    restart", a socket.io one its disconnect frame, a Server-Sent Events stream its end.
//! 4. Once the realtime sockets closed (at most `SOCKETS_WITHIN`), the node stops its groups
//!    and exits 0.
//!
//! A second signal during steps 1–2 skips what is left of them. Neighbours: `serve` runs this
//! as the server's shutdown, `api::ops::health` reads the state, `api::realtime` the hint.

use std::time::Duration;

use basalt_cluster::cluster::Cluster;
use tokio::sync::watch;

/// Longest the leaderships take to move before the node stops anyway (the groups it still
/// leads then elect a new leader once it is gone).
const HANDOVER_WITHIN: Duration = Duration::from_secs(10);

/// Where this node is in its drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Serving,
    /// Unready, still serving: proxies take the node out.
    Draining,
    /// Connections are closing: realtime clients are told to reconnect elsewhere.
    Stopping,
}

/// This node's drain, shared by the server and its handlers (cheap to clone).
#[derive(Clone)]
pub struct DrainState {
    phase: watch::Sender<Phase>,
    /// Realtime sockets open (`SocketGuard`): the node waits for them to close after their
    /// reconnect hint (at most `SOCKETS_WITHIN`) before it stops.
    sockets: watch::Sender<usize>,
}

/// Longest the node waits, once it stopped accepting, for its realtime sockets to send their
/// reconnect hints and close.
pub const SOCKETS_WITHIN: Duration = Duration::from_secs(5);

impl Default for DrainState {
    fn default() -> Self {
        DrainState {
            phase: watch::Sender::new(Phase::Serving),
            sockets: watch::Sender::new(0),
        }
    }
}

/// One open realtime socket, counted while it lives (`DrainState::socket`).
pub struct SocketGuard(watch::Sender<usize>);

impl Drop for SocketGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl DrainState {
    /// Whether the node is draining or stopping (`/health?ready=1` answers 503).
    pub fn is_draining(&self) -> bool {
        *self.phase.borrow() >= Phase::Draining
    }

    /// Counts a realtime socket as open until the guard is dropped.
    pub fn socket(&self) -> SocketGuard {
        self.sockets.send_modify(|n| *n += 1);
        SocketGuard(self.sockets.clone())
    }

    /// Waits until every realtime socket closed, at most `within`.
    pub async fn sockets_closed(&self, within: Duration) {
        let mut rx = self.sockets.subscribe();
        let _ = tokio::time::timeout(within, rx.wait_for(|n| *n == 0)).await;
    }

    /// Waits until connections are closing (at once when they are).
    pub async fn stopping(&self) {
        let mut rx = self.phase.subscribe();
        // The sender lives in the node's state, as long as any handler does.
        let _ = rx.wait_for(|p| *p >= Phase::Stopping).await;
    }

    fn enter(&self, phase: Phase) {
        self.phase.send_if_modified(|p| {
            let later = phase > *p;
            if later {
                *p = phase;
            }
            later
        });
        let now = *self.phase.borrow();
        metrics::gauge!("basalt_node_draining").set(if now >= Phase::Draining { 1.0 } else { 0.0 });
    }
}

/// Waits for a stop signal or an administrator's drain request, then drains: the HTTP
/// server's shutdown future (it stops accepting when this returns).
pub async fn run(cluster: Cluster, drain: DrainState, wait: Duration) {
    metrics::gauge!("basalt_node_draining").set(0.0);
    tokio::select! {
        () = stop_signal() => tracing::info!("stop signal: draining"),
        () = cluster.drain_requested() => tracing::info!("asked to drain"),
    }
    drain.enter(Phase::Draining);
    // A lone member has no other node for a proxy to send clients to: nothing to wait for.
    let members = cluster.active_members();
    let alone = members.len() == 1 && members[0].id == cluster.node_id();
    let steps = async {
        if !wait.is_zero() && !alone {
            tracing::info!(
                wait_secs = wait.as_secs_f64(),
                "unready: waiting before handing leaderships over"
            );
            tokio::time::sleep(wait).await;
        }
        let left = cluster.drain(HANDOVER_WITHIN).await;
        if left.is_empty() {
            tracing::info!("leaderships handed over: stopping");
        } else {
            tracing::warn!(groups = ?left, "still leading these groups: they elect a new leader once this node is gone");
        }
    };
    tokio::select! {
        () = steps => {}
        () = stop_signal() => tracing::warn!("second stop signal: stopping without finishing the drain"),
    }
    drain.enter(Phase::Stopping);
}

/// Waits for SIGTERM or Ctrl-C (SIGINT).
pub async fn stop_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn phases_only_move_forward_and_stopping_wakes_its_waiters() {
        let drain = DrainState::default();
        assert!(!drain.is_draining());
        let waiting = tokio::spawn({
            let drain = drain.clone();
            async move { drain.stopping().await }
        });
        drain.enter(Phase::Draining);
        assert!(drain.is_draining());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "draining is not stopping yet");
        drain.enter(Phase::Stopping);
        drain.enter(Phase::Serving);
        assert!(drain.is_draining(), "a drain does not go back");
        tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .expect("stopping woke its waiter")
            .unwrap();
    }
}
