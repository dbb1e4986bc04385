//! A connection's outbox: a queue of at most `QUEUE` messages and `CONNECTION_BYTES` bytes
//! that the hub fills without ever waiting, within the node's `NODE_BYTES` of realtime memory.
//!
//! What counts against the node's budget is what the node really holds: each message's own
//! bytes (its head and cursor) while it waits or is on its way, and each event's object
//! (`body::Body`) once, however many outboxes hold it. A connection's own bound counts its
//! messages whole. A message taken by the transport still counts until it reached the client
//! (the transport asks for the next one only then), so a client that does not read holds its
//! bytes; the transports write large messages in pieces (`wire::PIECE`), so they hold no copy.
//!
//! An event that finds its outbox full marks it overflowed. One that would take the node past
//! its budget overflows its own outbox when that connection is behind (it has messages
//! waiting or on their way); a connection that is not behind gets it, and the connections
//! holding the most bytes are overflowed instead until there is room: the slowest go first.
//! Overflowing an outbox drops what waits in it at once; its transport then drops the message
//! it was writing, sends one `server_resync` ("slow") when it can, and closes the connection.
//! Neighbours: `hub` (fills it), `connection` (owns it), `api::realtime` (drains it to the
//! client), `body` (the shared objects' bytes).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;

use super::body;
use super::wire::Outbound;

/// Messages a connection may have waiting before it counts as too slow.
pub const QUEUE: usize = 1024;
/// Bytes a connection may have waiting before it counts as too slow.
pub const CONNECTION_BYTES: usize = 16 << 20;
/// Bytes of realtime messages the node may hold together.
pub const NODE_BYTES: usize = 128 << 20;

/// Own bytes of the messages waiting in, or on their way from, every outbox of the node.
static NODE_OWN: AtomicUsize = AtomicUsize::new(0);
/// Every outbox of the node, to find the slowest when the budget is spent.
static LIVE: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The messages waiting, and whether the outbox's owner is gone.
#[derive(Default)]
struct Queue {
    messages: VecDeque<Outbound>,
    closed: bool,
}

/// What an outbox and its receiver share.
struct Shared {
    queue: Mutex<Queue>,
    /// Bytes (whole) of the messages waiting or on their way.
    queued: AtomicUsize,
    overflowed: AtomicBool,
    /// Wakes the receiver: a message, the overflow or the close.
    wake: Notify,
    /// Wakes a transport stuck writing: the overflow.
    stuck: Notify,
}

impl Shared {
    fn take(&self, m: &Outbound) {
        self.queued.fetch_add(m.bytes(), Ordering::AcqRel);
        NODE_OWN.fetch_add(m.own_bytes(), Ordering::AcqRel);
    }

    fn give_back(&self, bytes: usize, own: usize) {
        self.queued.fetch_sub(bytes, Ordering::AcqRel);
        NODE_OWN.fetch_sub(own, Ordering::AcqRel);
    }

    /// Marks the outbox overflowed and drops what waits in it (the message on its way goes
    /// with the connection).
    fn overflow(&self) {
        if self.overflowed.swap(true, Ordering::AcqRel) {
            return;
        }
        let dropped = std::mem::take(&mut lock(&self.queue).messages);
        for m in &dropped {
            self.give_back(m.bytes(), m.own_bytes());
        }
        drop(dropped);
        metrics::counter!("basalt_realtime_resyncs_total", "reason" => "slow").increment(1);
        self.wake.notify_one();
        self.stuck.notify_one();
    }
}

/// Bytes of realtime messages the node holds.
fn node_used() -> usize {
    NODE_OWN.load(Ordering::Acquire) + body::alive_bytes()
}

/// Overflows the outboxes (other than `except`) holding the most bytes until the node's
/// messages and `more` fit its budget, or those overflowed held as much as the budget is
/// over by (what they hold may be shared with others, or held outside their queues: it is not
/// all freed at once, and no more connections are dropped for it).
fn drop_slowest(more: usize, except: &Arc<Shared>) {
    let over = (node_used() + more).saturating_sub(NODE_BYTES);
    let mut live = lock(&LIVE);
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
    let mut dropped = 0;
    for (held, s) in holders {
        if node_used() + more <= NODE_BYTES || dropped >= over {
            break;
        }
        s.overflow();
        dropped += held;
    }
}

/// Where the hub puts a connection's messages.
pub struct Outbox {
    shared: Arc<Shared>,
}

/// Whether a message found room.
enum Room {
    Yes,
    /// Not now: the connection is too far behind.
    No,
    /// Never: the outbox overflowed or its transport is gone.
    Gone,
}

impl Outbox {
    /// Queues `m` when it fits the connection's bounds and the node's (making room in the
    /// node's by dropping slower connections when this one is not behind).
    fn push(&self, m: Outbound) -> Room {
        let s = &self.shared;
        if self.is_overflowed() {
            return Room::Gone;
        }
        let mine = s.queued.load(Ordering::Acquire);
        if mine + m.bytes() > CONNECTION_BYTES {
            return Room::No;
        }
        if node_used() + m.own_bytes() > NODE_BYTES {
            if mine > 0 {
                return Room::No;
            }
            drop_slowest(m.own_bytes(), s);
        }
        let mut q = lock(&s.queue);
        if q.closed || self.is_overflowed() {
            return Room::Gone;
        }
        if q.messages.len() >= QUEUE {
            return Room::No;
        }
        s.take(&m);
        q.messages.push_back(m);
        drop(q);
        s.wake.notify_one();
        Room::Yes
    }

    /// Queues `m` without waiting; a connection too far behind is overflowed (false).
    pub fn offer(&self, m: Outbound) -> bool {
        match self.push(m) {
            Room::Yes => true,
            Room::No => {
                self.overflow();
                false
            }
            Room::Gone => false,
        }
    }

    /// Queues `m`, waiting up to `within` for room (replays, which may wait for the client).
    pub async fn send_within(&self, m: Outbound, within: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match self.push(m.clone()) {
                Room::Yes => return true,
                Room::Gone => return false,
                Room::No if tokio::time::Instant::now() >= deadline => {
                    self.overflow();
                    return false;
                }
                Room::No => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
    }

    /// Counts `bytes` the hub keeps for this connection outside its queue (live events
    /// waiting behind a replay) within the connection's bound; false past it.
    pub fn hold(&self, bytes: usize) -> bool {
        let s = &self.shared;
        if self.is_overflowed() {
            return false;
        }
        let mine = s.queued.fetch_add(bytes, Ordering::AcqRel);
        if mine + bytes > CONNECTION_BYTES {
            s.queued.fetch_sub(bytes, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Gives back what `hold` counted.
    pub fn release(&self, bytes: usize) {
        self.shared.queued.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Marks the outbox overflowed: the transport drops the connection.
    pub fn overflow(&self) {
        self.shared.overflow();
    }

    pub fn is_overflowed(&self) -> bool {
        self.shared.overflowed.load(Ordering::Acquire)
    }

    /// Resolves once the outbox overflowed (for one transport waiting at a time).
    pub async fn overflowed(&self) {
        loop {
            let woken = self.shared.stuck.notified();
            if self.is_overflowed() {
                return;
            }
            woken.await;
        }
    }

    /// An outbox and the receiving end of its queue.
    pub fn new() -> (Outbox, OutboxReceiver) {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            queued: AtomicUsize::new(0),
            overflowed: AtomicBool::new(false),
            wake: Notify::new(),
            stuck: Notify::new(),
        });
        {
            let mut live = lock(&LIVE);
            if live.len() >= 1024 && live.len().is_power_of_two() {
                live.retain(|w| w.strong_count() > 0);
            }
            live.push(Arc::downgrade(&shared));
        }
        let receiver = OutboxReceiver {
            shared: Arc::clone(&shared),
            in_flight: (0, 0),
        };
        (Outbox { shared }, receiver)
    }
}

impl Drop for Outbox {
    /// The connection is gone: its transport ends once it took what waits.
    fn drop(&mut self) {
        lock(&self.shared.queue).closed = true;
        self.shared.wake.notify_one();
    }
}

/// The transport's end of an outbox. A message taken still counts until the next is asked
/// for; dropped, it gives back the bytes of every message it held or never took.
pub struct OutboxReceiver {
    shared: Arc<Shared>,
    /// Bytes (whole, own) of the message taken last.
    in_flight: (usize, usize),
}

impl OutboxReceiver {
    /// The next message; `None` once the outbox overflowed, or its owner is gone and nothing
    /// waits (cancel-safe).
    pub async fn recv(&mut self) -> Option<Outbound> {
        let (bytes, own) = std::mem::take(&mut self.in_flight);
        self.shared.give_back(bytes, own);
        loop {
            let woken = self.shared.wake.notified();
            {
                let mut q = lock(&self.shared.queue);
                if self.shared.overflowed.load(Ordering::Acquire) {
                    return None;
                }
                if let Some(m) = q.messages.pop_front() {
                    self.in_flight = (m.bytes(), m.own_bytes());
                    return Some(m);
                }
                if q.closed {
                    return None;
                }
            }
            woken.await;
        }
    }
}

impl Drop for OutboxReceiver {
    fn drop(&mut self) {
        let waiting = {
            let mut q = lock(&self.shared.queue);
            q.closed = true;
            std::mem::take(&mut q.messages)
        };
        for m in &waiting {
            self.shared.give_back(m.bytes(), m.own_bytes());
        }
        let (bytes, own) = std::mem::take(&mut self.in_flight);
        self.shared.give_back(bytes, own);
    }
}

/// Bytes of realtime messages the node holds (`basalt_realtime_outbox_bytes`).
pub fn node_bytes() -> usize {
    node_used()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realtime::body::Body;

    fn message(bytes: usize) -> Outbound {
        Outbound {
            name: "server_pub",
            head: "h".into(),
            body: Some(Body::new("x".repeat(bytes))),
            tail: "}",
            cursor: None,
        }
    }

    #[tokio::test]
    async fn a_connection_past_its_bytes_overflows_and_gives_them_back() {
        let (outbox, mut rx) = Outbox::new();
        assert!(outbox.offer(message(CONNECTION_BYTES / 2)));
        let held = outbox.shared.queued.load(Ordering::Acquire);
        assert!(held > CONNECTION_BYTES / 2);
        assert!(rx.recv().await.is_some());
        assert_eq!(
            outbox.shared.queued.load(Ordering::Acquire),
            held,
            "on its way"
        );
        assert!(outbox.offer(message(1000)));
        assert!(!outbox.offer(message(CONNECTION_BYTES / 2)));
        assert!(outbox.is_overflowed());
        assert_eq!(
            outbox.shared.queued.load(Ordering::Acquire),
            held,
            "what waited is dropped at once, what is on its way stays"
        );
        assert!(rx.recv().await.is_none(), "the transport sees the overflow");
        assert_eq!(outbox.shared.queued.load(Ordering::Acquire), 0);
        assert!(!outbox.offer(message(10)), "nothing more is taken");
    }

    #[tokio::test]
    async fn one_object_sent_to_many_connections_counts_once() {
        let body = Body::new("x".repeat(1 << 20));
        let outboxes: Vec<_> = (0..200).map(|_| Outbox::new()).collect();
        for (outbox, _) in &outboxes {
            let m = Outbound {
                name: "server_pub",
                head: "h".into(),
                body: Some(body.clone()),
                tail: "}",
                cursor: None,
            };
            assert!(
                outbox.offer(m),
                "200 MiB counted whole would pass the node's budget"
            );
        }
        assert!(outboxes.iter().all(|(o, _)| !o.is_overflowed()));
    }

    #[tokio::test]
    async fn a_receiver_ends_when_its_outbox_is_dropped_after_what_waits() {
        let (outbox, mut rx) = Outbox::new();
        assert!(outbox.offer(message(10)));
        drop(outbox);
        assert!(rx.recv().await.is_some());
        assert!(rx.recv().await.is_none());
    }
}
