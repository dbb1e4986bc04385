//! A connection's outbox: a queue of at most `QUEUE` messages and `CONNECTION_BYTES` bytes
//! that the hub fills without ever waiting, within the node's `NODE_BYTES` of all outboxes.
//! A message taken by the transport still counts until it reached the client (the transport
//! asks for the next one only then), so a client that does not read holds its bytes.
//!
//! An event that finds its outbox full marks it overflowed. One that would take the node past
//! its budget overflows its own outbox when that connection is behind (it has messages
//! waiting or on their way); a connection that is not behind gets it, and the connections
//! holding the most bytes are overflowed instead until there is room: the slowest go first.
//! The transport of an overflowed outbox drops what waits (`OutboxReceiver::discard`), sends
//! one `server_resync` ("slow") and closes the connection; the bytes of an overflowed outbox
//! count as being freed (`NODE_DROPPING`) until its connection is gone. Neighbours: `hub` (fills it),
//! `connection` (owns it), `api::realtime` (drains it to the client).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{mpsc, Notify};

use super::wire::Outbound;

/// Messages a connection may have waiting before it counts as too slow.
pub const QUEUE: usize = 1024;
/// Bytes a connection may have waiting before it counts as too slow.
pub const CONNECTION_BYTES: usize = 16 << 20;
/// Bytes every connection of the node may have waiting together.
pub const NODE_BYTES: usize = 128 << 20;

/// Bytes waiting in every outbox of the node.
static NODE_QUEUED: AtomicUsize = AtomicUsize::new(0);
/// Of those, the bytes of overflowed outboxes their transports are about to drop.
static NODE_DROPPING: AtomicUsize = AtomicUsize::new(0);
/// Every outbox of the node, to find the slowest when the budget is spent.
static LIVE: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// What an outbox and its receiver share.
struct Shared {
    /// Bytes of the messages waiting or on their way.
    queued: AtomicUsize,
    overflowed: AtomicBool,
    /// Of `NODE_DROPPING`, the bytes this outbox has not given back yet.
    dropping: AtomicUsize,
    wake: Notify,
}

impl Shared {
    fn overflow(&self) {
        if !self.overflowed.swap(true, Ordering::AcqRel) {
            let held = self.queued.load(Ordering::Acquire);
            self.dropping.store(held, Ordering::Release);
            NODE_DROPPING.fetch_add(held, Ordering::AcqRel);
            metrics::counter!("basalt_realtime_resyncs_total", "reason" => "slow").increment(1);
            self.wake.notify_one();
        }
    }

    fn give_back(&self, bytes: usize) {
        self.queued.fetch_sub(bytes, Ordering::AcqRel);
        NODE_QUEUED.fetch_sub(bytes, Ordering::AcqRel);
        if self.overflowed.load(Ordering::Acquire) {
            let was = self
                .dropping
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                    Some(d.saturating_sub(bytes))
                })
                .unwrap_or(0);
            let released = was.min(bytes);
            let _ = NODE_DROPPING.fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                Some(d.saturating_sub(released))
            });
        }
    }
}

/// The bytes `m` holds while it waits.
fn weight(m: &Outbound) -> usize {
    m.arg.len() + m.cursor.as_ref().map_or(0, |c| c.len()) + 64
}

/// Bytes the node's outboxes hold, not counting those being dropped.
fn node_used() -> usize {
    NODE_QUEUED
        .load(Ordering::Acquire)
        .saturating_sub(NODE_DROPPING.load(Ordering::Acquire))
}

/// Overflows the outboxes (other than `except`) holding the most bytes until they hold
/// `need`; what they hold.
fn drop_slowest(need: usize, except: &Arc<Shared>) -> usize {
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    live.retain(|w| w.strong_count() > 0);
    let mut holders: Vec<(usize, Arc<Shared>)> = live
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|s| !Arc::ptr_eq(s, except) && !s.overflowed.load(Ordering::Acquire))
        .map(|s| (s.queued.load(Ordering::Acquire), s))
        .filter(|(held, _)| *held > 0)
        .collect();
    drop(live);
    holders.sort_by_key(|h| std::cmp::Reverse(h.0));
    let mut freed = 0;
    for (held, s) in holders {
        if freed >= need {
            break;
        }
        s.overflow();
        freed += held;
    }
    freed
}

/// Where the hub puts a connection's messages.
pub struct Outbox {
    tx: mpsc::Sender<Outbound>,
    shared: Arc<Shared>,
}

impl Outbox {
    /// Counts `bytes` more as waiting, within the connection's bound and the node's (making
    /// room in the node's by dropping slower connections when this one is not behind).
    fn reserve(&self, bytes: usize) -> bool {
        let s = &self.shared;
        let mine = s.queued.fetch_add(bytes, Ordering::AcqRel);
        NODE_QUEUED.fetch_add(bytes, Ordering::AcqRel);
        let fits = mine + bytes <= CONNECTION_BYTES
            && match node_used() {
                used if used <= NODE_BYTES => true,
                _ if mine > 0 => false,
                used => drop_slowest(used - NODE_BYTES, s) >= used - NODE_BYTES,
            };
        if !fits {
            s.give_back(bytes);
        }
        fits
    }

    /// Queues `m` without waiting; a full queue marks the outbox overflowed (false).
    pub fn offer(&self, m: Outbound) -> bool {
        if self.is_overflowed() {
            return false;
        }
        let bytes = weight(&m);
        if !self.reserve(bytes) {
            self.overflow();
            return false;
        }
        match self.tx.try_send(m) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.shared.give_back(bytes);
                self.overflow();
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.shared.give_back(bytes);
                false
            }
        }
    }

    /// Queues `m`, waiting up to `within` for room (replays, which may wait for the client).
    pub async fn send_within(&self, m: Outbound, within: std::time::Duration) -> bool {
        let bytes = weight(&m);
        let deadline = tokio::time::Instant::now() + within;
        while !self.reserve(bytes) {
            if tokio::time::Instant::now() >= deadline || self.is_overflowed() {
                self.overflow();
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        match tokio::time::timeout_at(deadline, self.tx.send(m)).await {
            Ok(Ok(())) => true,
            Ok(Err(_)) => {
                self.shared.give_back(bytes);
                false
            }
            Err(_) => {
                self.shared.give_back(bytes);
                self.overflow();
                false
            }
        }
    }

    /// Marks the outbox overflowed: the transport drops the connection.
    pub fn overflow(&self) {
        self.shared.overflow();
    }

    pub fn is_overflowed(&self) -> bool {
        self.shared.overflowed.load(Ordering::Acquire)
    }

    /// Resolves once the outbox overflowed.
    pub async fn overflowed(&self) {
        loop {
            let woken = self.shared.wake.notified();
            if self.is_overflowed() {
                return;
            }
            woken.await;
        }
    }

    /// An outbox and the receiving end of its queue.
    pub fn new() -> (Outbox, OutboxReceiver) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let shared = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            overflowed: AtomicBool::new(false),
            dropping: AtomicUsize::new(0),
            wake: Notify::new(),
        });
        {
            let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
            if live.len() >= 1024 && live.len().is_power_of_two() {
                live.retain(|w| w.strong_count() > 0);
            }
            live.push(Arc::downgrade(&shared));
        }
        let receiver = OutboxReceiver {
            rx,
            shared: Arc::clone(&shared),
            in_flight: 0,
        };
        (Outbox { tx, shared }, receiver)
    }
}

/// The transport's end of an outbox. A message taken still counts until the next is asked
/// for; dropped, it gives back the bytes of every message it held or never took.
pub struct OutboxReceiver {
    rx: mpsc::Receiver<Outbound>,
    shared: Arc<Shared>,
    /// Bytes of the message taken last.
    in_flight: usize,
}

impl OutboxReceiver {
    /// Drops every message waiting (an overflowed connection's, before its farewell). The one
    /// taken last still counts until the receiver is dropped with the connection.
    pub fn discard(&mut self) {
        self.rx.close();
        let mut bytes = 0;
        while let Ok(m) = self.rx.try_recv() {
            bytes += weight(&m);
        }
        self.shared.give_back(bytes);
    }

    /// The next message (cancel-safe, as `mpsc::Receiver::recv`).
    pub async fn recv(&mut self) -> Option<Outbound> {
        let last = std::mem::take(&mut self.in_flight);
        self.shared.give_back(last);
        let m = self.rx.recv().await?;
        self.in_flight = weight(&m);
        Some(m)
    }
}

impl Drop for OutboxReceiver {
    fn drop(&mut self) {
        self.discard();
        let last = std::mem::take(&mut self.in_flight);
        self.shared.give_back(last);
    }
}

/// Bytes waiting in every outbox of the node (`basalt_realtime_outbox_bytes`).
pub fn node_queued() -> usize {
    NODE_QUEUED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(bytes: usize) -> Outbound {
        Outbound {
            name: "server_pub",
            arg: "x".repeat(bytes).into(),
            cursor: None,
        }
    }

    #[tokio::test]
    async fn a_connection_past_its_bytes_overflows_and_gives_them_back() {
        let (outbox, mut rx) = Outbox::new();
        assert!(outbox.offer(message(CONNECTION_BYTES / 2)));
        let held = outbox.shared.queued.load(Ordering::Acquire);
        assert!(held > CONNECTION_BYTES / 2);
        assert!(!outbox.offer(message(CONNECTION_BYTES / 2 + 1)));
        assert!(outbox.is_overflowed());
        assert_eq!(outbox.shared.dropping.load(Ordering::Acquire), held);
        assert!(rx.recv().await.is_some());
        assert_eq!(
            outbox.shared.queued.load(Ordering::Acquire),
            held,
            "on its way"
        );
        rx.discard();
        let until_gone = outbox.shared.queued.load(Ordering::Acquire);
        assert_eq!(until_gone, held, "until the connection is gone");
        drop(rx);
        assert_eq!(outbox.shared.queued.load(Ordering::Acquire), 0);
        assert_eq!(outbox.shared.dropping.load(Ordering::Acquire), 0);
    }
}
