//! The node's realtime hub: follows every group's committed changes and hands each to the
//! subscriptions of its app and class.
//!
//! Started by the first subscription: one task per group follows the group's log of changes
//! (`Cluster::follow_changes`: this node's replica, or a peer's, resuming at the last position
//! after any failover), and one dispatcher passes the changes on in the order each group
//! committed them. The hub keeps the position it has passed on for every group: a subscription
//! registered under the same lock gets exactly the changes after those positions, so nothing
//! is missed or repeated between subscribing and the first event, and its events carry the
//! cursor after them. A subscription with a cursor first gets what it missed: the changes
//! between its cursor and the hub's positions are read again from the groups' logs, while live
//! events wait behind them (at most `QUEUE`); one a log no longer holds is a `server_resync`
//! ("too_old"). Delivery never waits for a client (`connection::Outbox`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use basalt_cluster::changes::Change;
use basalt_cluster::ids::GroupId;
use basalt_cluster::services::change_tail::TailEvent;
use basalt_cluster::slots::{MoveKind, SplitPhase};
use basalt_cluster::Cluster;
use serde_json::json;
use tokio::sync::{mpsc, watch};

use super::body::Body;
use super::cursor::{Cursor, Position};
use super::outbox::{Outbox, QUEUE};
use super::subscription::{EventKind, Side, Subscription};
use super::wire::Outbound;
use super::RealtimeError;

/// How long a subscription waits for the hub to learn where every group stands.
const READY_WITHIN: Duration = Duration::from_secs(15);
/// How long a replay waits for a group's log, or for a client to take its messages.
const REPLAY_WAIT: Duration = Duration::from_secs(10);
/// How often the hub looks for groups a split added.
const NEW_GROUPS_EVERY: Duration = Duration::from_millis(250);
/// Replays a node runs at once (each reads the groups' logs from a cursor); others wait.
const REPLAYS: usize = 8;

/// One subscription in the hub.
pub struct Entry {
    id: u64,
    sub: Subscription,
    outbox: Arc<Outbox>,
    /// Changes at or before these positions are not delivered live (a resumed subscription
    /// whose cursor is past the hub's positions has seen them).
    floor: Cursor,
    /// Whether `floor` is past the hub's positions somewhere (its events carry their own
    /// cursors until it is not).
    ahead: AtomicBool,
    /// While a resumed subscription replays what it missed, its live events wait here (with
    /// their bytes, counted in the connection's bound: `Outbox::hold`).
    waiting: Mutex<Option<(VecDeque<Outbound>, usize)>>,
    /// Unsubscribed (or replaced): a replay still running stops.
    ended: AtomicBool,
}

struct State {
    /// Per group, the position passed on to subscriptions.
    positions: Vec<u64>,
    /// Per group, whether its follower reported where it stands yet.
    known: Vec<bool>,
    /// Groups `0..followed` have their follower.
    followed: usize,
    /// Subscriptions by (app, class).
    subs: HashMap<(String, String), Vec<Arc<Entry>>>,
    count: usize,
}

struct Inner {
    cluster: Cluster,
    /// The groups the cluster began with (`shards + 1`): the shortest cursor it gave.
    first_groups: usize,
    state: Mutex<State>,
    started: AtomicBool,
    ready: watch::Sender<bool>,
    next_id: AtomicU64,
    /// Replays that may run at once on this node.
    replays: Arc<tokio::sync::Semaphore>,
    /// Where followers send their changes, once started (weak: the dispatcher ends when the
    /// followers do).
    tail: std::sync::OnceLock<mpsc::WeakSender<TailEvent>>,
}

/// The node's hub (cheap to clone).
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Hub {
    pub fn new(cluster: Cluster) -> Hub {
        let groups = cluster.shards() as usize + 1;
        let (ready, _) = watch::channel(false);
        Hub {
            inner: Arc::new(Inner {
                cluster,
                first_groups: groups,
                state: Mutex::new(State {
                    positions: vec![0; groups],
                    known: vec![false; groups],
                    followed: 0,
                    subs: HashMap::new(),
                    count: 0,
                }),
                started: AtomicBool::new(false),
                ready,
                next_id: AtomicU64::new(1),
                replays: Arc::new(tokio::sync::Semaphore::new(REPLAYS)),
                tail: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The lengths a cursor of this cluster may have: from its first groups to the groups it
    /// has now (splits add groups). Starts the hub.
    pub fn cursor_groups(&self) -> std::ops::RangeInclusive<usize> {
        self.start();
        let following = lock(&self.inner.state).positions.len();
        let now = self.inner.groups_now().max(following);
        self.inner.first_groups..=now.max(self.inner.first_groups)
    }

    /// Starts following every group, once, and each group a split adds as the slot map
    /// names it (`Inner::follow_new_groups`).
    fn start(&self) {
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let (tx, rx) = mpsc::channel::<TailEvent>(256);
        let _ = self.inner.tail.set(tx.downgrade());
        self.inner.follow(self.inner.groups_now(), &tx);
        drop(tx);
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move { inner.follow_new_groups().await });
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move { inner.dispatch(rx).await });
    }

    async fn wait_ready(&self) -> Result<(), RealtimeError> {
        let mut ready = self.inner.ready.subscribe();
        let became = tokio::time::timeout(READY_WITHIN, ready.wait_for(|r| *r))
            .await
            .map(|r| r.is_ok());
        match became {
            Ok(true) => Ok(()),
            _ => Err(RealtimeError::Unavailable(
                "this node cannot follow the cluster's changes now; try again.".into(),
            )),
        }
    }

    /// Registers `sub`, whose messages go to `outbox`, and acknowledges it there
    /// (`server_sub`). With a cursor, what happened since is sent first.
    pub async fn subscribe(
        &self,
        sub: Subscription,
        outbox: Arc<Outbox>,
        cursor: Option<Cursor>,
    ) -> Result<Arc<Entry>, RealtimeError> {
        self.start();
        self.wait_ready().await?;
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let key = (
            sub.app.application_id.as_str().to_string(),
            sub.class().to_string(),
        );
        let (entry, from) = {
            // A cursor naming groups this hub does not follow yet (a split it has not seen).
            if let Some(c) = &cursor {
                self.inner.grow_to(c.0.len());
            }
            let mut st = lock(&self.inner.state);
            let now = st.positions.clone();
            // Groups a split added since the cursor was given are read from their start.
            let cursor = cursor.map(|c| c.padded(now.len()));
            let floor = match &cursor {
                Some(c) => c.max_with(&Cursor::at(&now)),
                None => Cursor::at(&now),
            };
            // A resumed subscription has seen only its own cursor until its replay is sent.
            let acked = cursor.as_ref().unwrap_or(&floor).encode();
            let ack = json!({
                "appKey": sub.app.application_id.as_str(),
                "tableName": sub.request.table,
                "objectId": sub.request.object_id.clone().unwrap_or_default(),
                "action": sub.request.action.name(),
                "cursor": acked,
            });
            let entry = Arc::new(Entry {
                id,
                ahead: AtomicBool::new(floor.ahead_of(&Cursor::at(&now))),
                floor,
                waiting: Mutex::new(cursor.as_ref().map(|_| (VecDeque::new(), 0))),
                ended: AtomicBool::new(false),
                sub,
                outbox,
            });
            // Under the lock: no event of the new subscription can be offered before it.
            entry.outbox.offer(Outbound::new("server_sub", &ack));
            st.subs.entry(key).or_default().push(Arc::clone(&entry));
            st.count += 1;
            metrics::gauge!("basalt_realtime_subscriptions").set(st.count as f64);
            (entry, cursor.map(|c| (c, now)))
        };
        if let Some((from, to)) = from {
            let inner = Arc::clone(&self.inner);
            let replayed = Arc::clone(&entry);
            tokio::spawn(async move { inner.replay(&replayed, from, to).await });
        }
        Ok(entry)
    }

    /// Ends a subscription.
    pub fn unsubscribe(&self, entry: &Arc<Entry>) {
        self.inner.remove(entry);
    }
}

impl Inner {
    /// The groups the cluster has by this node's slot map (ids `0..n`: the metadata group,
    /// the data groups, the children of splits under way), at least its first ones.
    fn groups_now(&self) -> usize {
        // Groups merged away keep their place: cursors given before the merge name them.
        let retired = self.cluster.slot_map().retired.clone();
        self.cluster
            .known_groups()
            .iter()
            .chain(&retired)
            .map(|g| g.get() as usize + 1)
            .max()
            .unwrap_or(0)
            .max(self.first_groups)
    }

    /// Gives every group up to `want` (ids `0..want`) its follower, sending to `tx`. A
    /// split's child not switched yet is followed from its first entry (its copied objects
    /// make no changes, so its changes are exactly the writes it takes after the switch) and
    /// known at once; any other group from where it stands (those of a hub that starts, one a
    /// node learns of late).
    fn follow(&self, want: usize, tx: &mpsc::Sender<TailEvent>) {
        let (from, to) = {
            let mut st = lock(&self.state);
            let from = st.followed;
            if want <= from {
                return;
            }
            st.followed = want;
            if st.positions.len() < want {
                st.positions.resize(want, 0);
                st.known.resize(want, false);
            }
            (from, want)
        };
        let map = self.cluster.slot_map();
        for g in from..to {
            let group = GroupId::new(g as u32);
            // A group merged away writes no more changes: its position stays as cursors give
            // it, and nothing is followed.
            if map.retired.contains(&group) {
                if let Some(k) = lock(&self.state).known.get_mut(g) {
                    *k = true;
                }
                continue;
            }
            // (A merge's target is a group with changes of its own: followed as any.)
            let before_switch = map.splits.iter().any(|s| {
                s.child == group && s.kind == MoveKind::Split && s.phase < SplitPhase::Switched
            });
            if before_switch {
                if let Some(k) = lock(&self.state).known.get_mut(g) {
                    *k = true;
                }
            }
            if g >= self.first_groups {
                tracing::info!(%group, before_switch, "realtime: following a group a split added");
            }
            let cluster = self.cluster.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                cluster
                    .follow_changes(group, before_switch.then_some(0), tx)
                    .await;
            });
        }
    }

    /// Gives every group up to `want` its follower (`follow`), once the hub started; false
    /// when it stopped.
    fn grow_to(&self, want: usize) -> bool {
        match self.tail.get().and_then(mpsc::WeakSender::upgrade) {
            Some(tx) => {
                self.follow(want, &tx);
                true
            }
            None => false,
        }
    }

    /// Follows each group the slot map adds, until the followers end (the node stops).
    async fn follow_new_groups(self: Arc<Self>) {
        while self.grow_to(self.groups_now()) {
            tokio::time::sleep(NEW_GROUPS_EVERY).await;
        }
    }

    /// Takes a subscription out of the hub (and stops its replay).
    fn remove(&self, entry: &Arc<Entry>) {
        entry.ended.store(true, Ordering::Relaxed);
        // Live events waiting behind a replay go now, not when the replay notices.
        if let Some((queue, bytes)) = lock(&entry.waiting).as_mut() {
            queue.clear();
            entry.outbox.release(std::mem::take(bytes));
        }
        let mut st = lock(&self.state);
        let key = (
            entry.sub.app.application_id.as_str().to_string(),
            entry.sub.class().to_string(),
        );
        if let Some(list) = st.subs.get_mut(&key) {
            let before = list.len();
            list.retain(|e| e.id != entry.id);
            let removed = before - list.len();
            if list.is_empty() {
                st.subs.remove(&key);
            }
            st.count -= removed;
            metrics::gauge!("basalt_realtime_subscriptions").set(st.count as f64);
        }
    }
}

/// A change's renderings shared by the subscribers who see it the same way.
#[derive(Default)]
struct Rendered {
    current: Option<Body>,
    before: Option<Body>,
}

impl Inner {
    async fn dispatch(self: Arc<Self>, mut rx: mpsc::Receiver<TailEvent>) {
        while let Some(event) = rx.recv().await {
            match event {
                TailEvent::Changes {
                    group,
                    upto,
                    changes,
                } => {
                    for entry in changes.chunk_by(|a, b| a.index == b.index) {
                        self.deliver(entry);
                    }
                    let g = group.get() as usize;
                    let mut st = lock(&self.state);
                    if let Some(p) = st.positions.get_mut(g) {
                        *p = (*p).max(upto);
                    }
                    if let Some(k) = st.known.get_mut(g) {
                        *k = true;
                    }
                    if st.known.iter().all(|k| *k) && !*self.ready.borrow() {
                        let _ = self.ready.send(true);
                    }
                }
                TailEvent::Gap {
                    group,
                    after,
                    resume_after,
                } => {
                    tracing::warn!(%group, after, resume_after, "realtime: changes no longer kept were skipped");
                    let g = group.get() as usize;
                    let mut st = lock(&self.state);
                    if let Some(p) = st.positions.get_mut(g) {
                        *p = (*p).max(resume_after);
                    }
                    let cursor = Cursor::at(&st.positions).encode();
                    let all: Vec<Arc<Entry>> = st.subs.values().flatten().cloned().collect();
                    drop(st);
                    let msg = Outbound::new(
                        "server_resync",
                        &json!({"reason": "gap", "cursor": cursor,
                            "error": "some changes could not be followed; read the state again."}),
                    );
                    for e in all {
                        e.offer(msg.clone());
                    }
                    metrics::counter!("basalt_realtime_resyncs_total", "reason" => "gap")
                        .increment(1);
                }
            }
        }
    }

    /// Passes the changes of one log entry (one change, or one per object write of a batch)
    /// on to the subscriptions of their app and class. The entry is passed on whole under
    /// one lock, so a subscription registers before or after all of it.
    fn deliver(&self, entry: &[Change]) {
        let Some(first) = entry.first() else {
            return;
        };
        let g = first.group.get() as usize;
        let (lists, positions) = {
            let mut st = lock(&self.state);
            if let Some(p) = st.positions.get_mut(g) {
                *p = (*p).max(first.index);
            }
            let lists: Vec<_> = entry
                .iter()
                .map(|c| {
                    st.subs
                        .get(&(c.app.clone(), c.class.clone()))
                        .filter(|list| !list.is_empty())
                        .cloned()
                })
                .collect();
            if lists.iter().all(Option::is_none) {
                return;
            }
            (lists, st.positions.clone())
        };
        // An event before the entry's last carries a position inside the entry: a client
        // resuming from it gets the entry's later changes, not its earlier ones again.
        let last = entry.len() - 1;
        for (nth, (c, subs)) in entry.iter().zip(lists).enumerate() {
            if let Some(subs) = subs {
                let nth = nth as u32;
                let mut at = Cursor::at(&positions);
                if nth as usize != last {
                    if let Some(p) = at.0.get_mut(g) {
                        *p = Position::within(first.index, nth + 1);
                    }
                }
                self.deliver_change(c, nth, subs, &at);
            }
        }
    }

    /// Passes change `nth` of its entry on to `subs`, with `at` as its cursor.
    fn deliver_change(&self, c: &Change, nth: u32, subs: Vec<Arc<Entry>>, at: &Cursor) {
        let g = c.group.get() as usize;
        let cursor: Arc<str> = at.encode().into();
        let mut shared = Rendered::default();
        let mut dropped = Vec::new();
        for entry in subs {
            if entry.outbox.is_overflowed() {
                dropped.push(entry);
                continue;
            }
            if entry.floor.0.get(g).is_some_and(|f| f.covers(c.index, nth)) {
                continue;
            }
            let Some((kind, side)) = entry.sub.judge(c) else {
                continue;
            };
            let own_cursor;
            let cursor: &str = if entry.ahead.load(Ordering::Relaxed) {
                let own = entry.floor.max_with(at);
                if !entry.floor.ahead_of(at) {
                    entry.ahead.store(false, Ordering::Relaxed);
                }
                own_cursor = own.encode();
                &own_cursor
            } else {
                &cursor
            };
            let data = render(&entry.sub, c, side, &mut shared);
            entry.offer(Outbound {
                name: "server_pub",
                head: entry.sub.event_head(kind, c, cursor).into(),
                body: Some(data),
                tail: "}",
                cursor: Some(cursor.into()),
            });
        }
        // A client that fell behind is being dropped: its subscriptions leave the hub now,
        // whenever its connection ends.
        for entry in dropped {
            self.remove(&entry);
        }
    }

    /// Sends a resumed subscription what happened between its cursor (`from`) and the hub's
    /// positions when it registered (`to`), group by group, then the live events that waited.
    async fn replay(&self, entry: &Arc<Entry>, from: Cursor, to: Vec<u64>) {
        let Ok(_turn) = Arc::clone(&self.replays).acquire_owned().await else {
            return;
        };
        let from = from.padded(to.len());
        let mut at = from.clone();
        for g in 0..to.len() {
            if entry.ended.load(Ordering::Relaxed) {
                return;
            }
            let (Some(&start), Some(&end)) = (from.0.get(g), to.get(g)) else {
                continue;
            };
            if start >= Position::whole(end) {
                continue;
            }
            let group = GroupId::new(g as u32);
            let (tx, mut rx) = mpsc::channel(4);
            let cluster = self.cluster.clone();
            let follower = tokio::spawn(async move {
                cluster
                    .follow_changes(group, Some(start.entries_before()), tx)
                    .await;
            });
            let outcome = loop {
                match tokio::time::timeout(REPLAY_WAIT, rx.recv()).await {
                    Ok(Some(TailEvent::Changes { upto, changes, .. })) => {
                        // A page holds whole entries: `nth` counts from each entry's first.
                        for log_entry in changes.chunk_by(|a, b| a.index == b.index) {
                            let count = log_entry.len();
                            for (nth, c) in log_entry.iter().enumerate() {
                                if c.index > end || start.covers(c.index, nth as u32) {
                                    continue;
                                }
                                if entry.ended.load(Ordering::Relaxed) {
                                    follower.abort();
                                    return;
                                }
                                at.0[g] = match nth + 1 == count {
                                    true => Position::whole(c.index),
                                    false => Position::within(c.index, nth as u32 + 1),
                                };
                                if let Some(msg) = event_for(&entry.sub, c, &at) {
                                    if !entry.outbox.send_within(msg, REPLAY_WAIT).await {
                                        follower.abort();
                                        return;
                                    }
                                }
                            }
                        }
                        if upto >= end {
                            break None;
                        }
                    }
                    Ok(Some(TailEvent::Gap { .. })) => break Some("too_old"),
                    Ok(None) | Err(_) => break Some("unavailable"),
                }
            };
            follower.abort();
            at.0[g] = Position::whole(end);
            if let Some(reason) = outcome {
                metrics::counter!("basalt_realtime_resyncs_total", "reason" => reason).increment(1);
                let msg = Outbound::new(
                    "server_resync",
                    &json!({"reason": reason, "cursor": at.encode(),
                        "error": "changes since the cursor are no longer kept; read the state again."}),
                );
                if !entry.outbox.send_within(msg, REPLAY_WAIT).await {
                    return;
                }
            }
        }
        // The live events that waited, then live delivery (under the same lock as `offer`).
        let mut waiting = lock(&entry.waiting);
        if let Some((queue, bytes)) = waiting.take() {
            entry.outbox.release(bytes);
            for m in queue {
                entry.outbox.offer(m);
            }
        }
    }
}

impl Entry {
    /// Queues a live message: behind a replay while one runs, else in the outbox.
    fn offer(&self, m: Outbound) {
        let mut waiting = lock(&self.waiting);
        if let Some((queue, bytes)) = waiting.as_mut() {
            if queue.len() < QUEUE && self.outbox.hold(m.bytes()) {
                *bytes += m.bytes();
                queue.push_back(m);
            } else {
                queue.clear();
                self.outbox.release(std::mem::take(bytes));
                self.outbox.overflow();
            }
            return;
        }
        drop(waiting);
        let delivered = self.outbox.offer(m);
        let outcome = if delivered { "delivered" } else { "dropped" };
        metrics::counter!("basalt_realtime_events_total", "outcome" => outcome).increment(1);
    }
}

/// The JSON text of the side of `c` that `sub` is shown, rendered once per change for every
/// subscriber that sees it alike.
fn render(sub: &Subscription, c: &Change, side: Side, shared: &mut Rendered) -> Body {
    let object = match side {
        Side::Current => &c.object,
        Side::Before => c.before.as_ref().unwrap_or(&c.object),
    };
    if sub.renders_per_subscriber() {
        return Body::new(sub.render(&c.object_id, object).to_string());
    }
    let slot = match side {
        Side::Current => &mut shared.current,
        Side::Before => &mut shared.before,
    };
    slot.get_or_insert_with(|| Body::new(sub.render(&c.object_id, object).to_string()))
        .clone()
}

/// The event `c` makes for `sub` with `cursor` after it, if any (replays).
fn event_for(sub: &Subscription, c: &Change, cursor: &Cursor) -> Option<Outbound> {
    let (kind, side): (EventKind, Side) = sub.judge(c)?;
    let data = render(sub, c, side, &mut Rendered::default());
    let cursor = cursor.encode();
    Some(Outbound {
        name: "server_pub",
        head: sub.event_head(kind, c, &cursor).into(),
        body: Some(data),
        tail: "}",
        cursor: Some(cursor.into()),
    })
}
