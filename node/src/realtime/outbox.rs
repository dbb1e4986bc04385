//! A connection's outbox: a queue of at most `QUEUE` messages that the hub fills without ever
//! waiting. An event that finds it full marks it overflowed; the transport then sends one
//! `server_resync` ("slow") and closes the connection. Neighbours: `hub` (fills it),
//! `connection` (owns it), `api::realtime` (drains it to the client).

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{mpsc, Notify};

use super::wire::Outbound;

/// Messages a connection may have waiting before it counts as too slow.
pub const QUEUE: usize = 1024;

/// Where the hub puts a connection's messages.
pub struct Outbox {
    tx: mpsc::Sender<Outbound>,
    overflowed: AtomicBool,
    wake: Notify,
}

impl Outbox {
    /// Queues `m` without waiting; a full queue marks the outbox overflowed (false).
    pub fn offer(&self, m: Outbound) -> bool {
        if self.overflowed.load(Ordering::Relaxed) {
            return false;
        }
        match self.tx.try_send(m) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.overflow();
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Queues `m`, waiting up to `within` for room (replays, which may wait for the client).
    pub async fn send_within(&self, m: Outbound, within: std::time::Duration) -> bool {
        match tokio::time::timeout(within, self.tx.send(m)).await {
            Ok(Ok(())) => true,
            Ok(Err(_)) => false,
            Err(_) => {
                self.overflow();
                false
            }
        }
    }

    /// Marks the outbox overflowed: the transport drops the connection.
    pub fn overflow(&self) {
        if !self.overflowed.swap(true, Ordering::Relaxed) {
            metrics::counter!("basalt_realtime_resyncs_total", "reason" => "slow").increment(1);
            self.wake.notify_one();
        }
    }

    pub fn is_overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Relaxed)
    }

    /// Resolves once the outbox overflowed.
    pub async fn overflowed(&self) {
        loop {
            let woken = self.wake.notified();
            if self.is_overflowed() {
                return;
            }
            woken.await;
        }
    }
}

impl Outbox {
    /// An outbox and the receiving end of its queue.
    pub fn new() -> (Outbox, mpsc::Receiver<Outbound>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let outbox = Outbox {
            tx,
            overflowed: AtomicBool::new(false),
            wake: Notify::new(),
        };
        (outbox, rx)
    }
}
