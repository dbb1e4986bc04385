//! `Replicas`: this node's replica of every group, the store they share and the connections to
//! peers. It is the narrow handle the layers above work with: placement, the scheduler and the
//! peer services take it (never the whole `Cluster`), and the query coordinator and schema
//! catalog read and write through it.
//!
//! `routing` sends a proposal or a read to the group's leader, this node first. The local
//! operations below serve what this node can answer alone: a proposal or read-index read when it
//! leads the group (`local_propose`, `local_read`, also what the peer services run for forwarded
//! work), stale-but-local views of the metadata group that every node holds, and reads of a
//! replica that vouches for being current (`freshness`).

mod app_share;
mod create_lane;
mod erase;
pub(crate) mod fence;
mod freshness;
mod group_maker;
mod leader_contact;
mod meta_reads;
mod proposals;
mod read_index;
mod records;
mod retire;
mod room;
mod routing;
mod settle;

use openraft::async_runtime::WatchReceiver;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{LinearizableReadError, RaftError};
use openraft::{LinearizerOption, RaftMetrics, ReadPolicy};
use serde_json::Value;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::admin::{ClusterSettings, GroupDigest, GroupStatus, NodeRecord, NodeState, NodeStatus};
use crate::cancel::Cancel;
use crate::command::{Command, Proposed, ReadRequest, ReadResponse};
use crate::error::{Error, Result};
use crate::ids::{is_meta_class, GroupId, NodeId, META_GROUP};
use crate::names::AppId;
use crate::namespace::Namespace;
use crate::object::new_object_id;
use crate::raft::{RaftTuning, TypeConfig};
use crate::rpc::router::{PeerRouter, FORWARD_TIMEOUT};
use crate::slots::SlotMap;
use crate::statemachine::{snapshot, ShardStateMachine};
use crate::storage::records::{live_record, records_with_prefix, ReplicaState, StoredRecord};
use crate::storage::Store;
use meta_reads::MetaRead;

pub use erase::Removal;
pub use routing::Attempts;

/// Most threads `--bulk-read-threads` may ask for.
const MAX_BULK_READ_THREADS: usize = 4096;

/// A Raft group handle.
pub(crate) type GroupRaft = openraft::Raft<TypeConfig, ShardStateMachine>;

/// This node's groups, store and peer connections (cheap to clone).
#[derive(Clone)]
pub struct Replicas {
    inner: Arc<Inner>,
}

struct Inner {
    node_id: NodeId,
    settings: ClusterSettings,
    store: Arc<Store>,
    /// A cell per group id up to the cluster's cap (`ClusterSettings::group_cap`), holding
    /// this node's replica of the group while it has one: the initial groups and those the
    /// store holds state of from the start, others when they are made (`ensure_group`);
    /// emptied when the replica is erased (`erase`).
    groups: Vec<arc_swap::ArcSwapOption<group_maker::Replica>>,
    /// A lock per group id, held while its replica is made or erased, so that the two never
    /// overlap and a replica is made once.
    making: Vec<tokio::sync::Mutex<()>>,
    /// Per group id, the state machine of a replica stopped and taken away
    /// (`erase::stop_replica`): no replica is made while it may still write.
    settling: Vec<std::sync::Mutex<std::sync::Weak<()>>>,
    /// A flag per group id: this node retired the group (merged away, `retire`).
    retired: Vec<std::sync::atomic::AtomicBool>,
    /// What a group's Raft is made of.
    maker: group_maker::GroupMaker,
    router: PeerRouter,
    /// Where snapshots streamed from peers are written before they are installed.
    incoming_dir: PathBuf,
    shutdown: watch::Sender<bool>,
    serve: ReadServer,
    contact: leader_contact::LeaderContact,
    /// The oldest quorum acknowledgement a read trusts (`RaftTuning::read_lease`); `None`:
    /// every read makes a read-index round.
    read_lease: Option<Duration>,
    /// Without a lease, the read-index rounds of each group, shared by the reads that wait
    /// for the same one (`read_index`).
    read_index: read_index::ReadIndexRounds<Error>,
    /// Votes are refused until then (`RaftTuning::vote_hold`).
    votes_from: Instant,
    /// One permit per thread that may serve a bulk read (`ReadRequest::is_bulk`) at once:
    /// with no more of them than cores, scans share the CPU with the async workers that
    /// carry Raft heartbeats instead of outnumbering them.
    bulk_reads: Arc<Semaphore>,
    /// The turn of each led shard in this node's create lane, in ms (0: no lane).
    create_lane_ms: u64,
    /// Which data group holds each hash slot (`slots`): the cluster's initial map, until
    /// groups are split (decisions/0038).
    slot_map: arc_swap::ArcSwap<SlotMap>,
    /// The proposals of each group this node leads, queued while earlier ones are in flight.
    proposals: proposals::Proposals,
    /// Each app's share of the writes in flight in each group this node leads.
    app_shares: app_share::AppShares,
    /// The metadata records this node read lately, with the applied index they reflect.
    meta_reads: meta_reads::MetaReads,
    /// This node's disk, and the members whose disks are critical (`room`).
    disk: Arc<crate::disk::DiskWatch>,
    full_nodes: std::sync::RwLock<Vec<NodeId>>,
    /// A backup's write fence (`fence`).
    fence: fence::WriteFence,
    /// This node is draining before it stops (`cluster::drain`): it takes no leadership.
    draining: std::sync::atomic::AtomicBool,
    /// Groups whose leader's configuration no longer holds this node, while its own replica
    /// still counts itself in (`services::departures`).
    departed: std::sync::Mutex<std::collections::BTreeSet<GroupId>>,
    /// The digests this node's replicas made for consistency checks.
    checks: crate::statemachine::check::StateChecks,
    /// A compaction of the Raft log column family runs (`compact`): none other starts meanwhile.
    log_compacting: Arc<std::sync::atomic::AtomicBool>,
}

/// What serves a read from a replica's state (`local_read::serve_read`): given to `open`, so
/// that routing reads needs no knowledge of what they ask. A scan or aggregation may cover
/// several groups; any other read names one.
pub type ReadServer = fn(&Store, &[GroupId], &ReadRequest, i64, &Cancel) -> Result<ReadResponse>;

/// How a node serves reads from its replicas.
#[derive(Clone, Copy)]
pub struct ReadService {
    pub serve: ReadServer,
    /// Threads that may serve bulk reads at once (0: one per core).
    pub bulk_threads: usize,
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Where a node keeps its replicas: its store, in its data dir, on a disk it watches.
pub(crate) struct LocalStorage<'a> {
    pub store: Arc<Store>,
    pub data_dir: &'a Path,
    pub disk: Arc<crate::disk::DiskWatch>,
}

impl Replicas {
    /// Opens this node's replica of every group (`0..=shards`) in `storage`.
    pub(crate) async fn open(
        node_id: NodeId,
        settings: ClusterSettings,
        storage: LocalStorage<'_>,
        router: PeerRouter,
        tuning: &RaftTuning,
        reads: ReadService,
    ) -> Result<Replicas> {
        let LocalStorage {
            store,
            data_dir,
            disk,
        } = storage;
        let bulk_read_threads = match reads.bulk_threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n.min(MAX_BULK_READ_THREADS),
        };
        let incoming_dir = data_dir.join("snapshots").join("incoming");
        std::fs::create_dir_all(&incoming_dir)?;
        let checks = crate::statemachine::check::StateChecks::default();
        let maker = group_maker::GroupMaker {
            tuning: tuning.clone(),
            snapshots_dir: data_dir.join("snapshots"),
            checks: checks.clone(),
        };
        let cap = settings.group_cap();
        let slots = cap as usize + 1;
        let groups: Vec<arc_swap::ArcSwapOption<group_maker::Replica>> = (0..slots)
            .map(|_| arc_swap::ArcSwapOption::empty())
            .collect();
        let mut opened: std::collections::BTreeSet<GroupId> =
            GroupId::all(settings.shards).collect();
        opened.extend(group_maker::stored_groups(&store, cap)?);
        for group in opened {
            if group_maker::only_erased(&store, group)? {
                continue;
            }
            let replica = maker
                .make(node_id, group, &settings, &store, &router)
                .await?;
            if let Some(cell) = groups.get(group.get() as usize) {
                cell.store(Some(Arc::new(replica)));
            }
        }
        let (shutdown, _) = watch::channel(false);
        Ok(Replicas {
            inner: Arc::new(Inner {
                node_id,
                settings,
                store,
                groups,
                making: (0..slots).map(|_| tokio::sync::Mutex::new(())).collect(),
                settling: (0..slots).map(|_| Default::default()).collect(),
                retired: (0..slots)
                    .map(|_| std::sync::atomic::AtomicBool::new(false))
                    .collect(),
                maker,
                router,
                incoming_dir,
                shutdown,
                serve: reads.serve,
                contact: leader_contact::LeaderContact::new(slots, tuning),
                read_lease: tuning.read_lease(),
                read_index: read_index::ReadIndexRounds::new(slots),
                votes_from: Instant::now() + tuning.vote_hold(),
                bulk_reads: Arc::new(Semaphore::new(bulk_read_threads)),
                create_lane_ms: tuning.create_lane_ms,
                slot_map: arc_swap::ArcSwap::from_pointee(SlotMap::initial(settings.shards)),
                proposals: proposals::Proposals::new(
                    slots,
                    tuning.proposals_in_flight,
                    Duration::from_micros(tuning.proposal_gather_us),
                ),
                app_shares: Default::default(),
                meta_reads: meta_reads::meta_reads(),
                disk,
                full_nodes: Default::default(),
                fence: fence::WriteFence::new(),
                draining: Default::default(),
                departed: Default::default(),
                checks,
                log_compacting: Default::default(),
            }),
        })
    }

    pub fn node_id(&self) -> NodeId {
        self.inner.node_id
    }

    pub fn settings(&self) -> ClusterSettings {
        self.inner.settings
    }

    pub fn shards(&self) -> u32 {
        self.inner.settings.shards
    }

    /// Which data group holds each hash slot: what requests are routed by.
    pub fn slot_map(&self) -> Arc<SlotMap> {
        self.inner.slot_map.load_full()
    }

    /// Takes up the slot map this node's replica of the metadata group holds
    /// (`slots::SLOTS_KEY`) when it differs from the one routed by and is not of an older
    /// epoch: whether it did.
    /// A record that is not a map of this cluster is not routed by (an error says why).
    pub fn refresh_slot_map(&self) -> Result<bool> {
        let Some(value) = self.local_meta_record(Namespace::Cluster, crate::slots::SLOTS_KEY)?
        else {
            return Ok(false);
        };
        let map = SlotMap::from_record(
            value,
            self.inner.settings.shards,
            self.inner.settings.group_cap(),
        )
        .map_err(|e| Error::Internal(format!("the slot map record: {e}")))?;
        // A newer epoch, or the same one with splits begun or further on; never an older one.
        let current = self.inner.slot_map.load();
        if map.epoch < current.epoch || **current == map {
            return Ok(false);
        }
        tracing::info!(
            epoch = map.epoch,
            groups = map.data_groups().len(),
            splits = map.splits.len(),
            "routing by a new slot map"
        );
        record_slot_metrics(&map);
        self.inner.slot_map.store(Arc::new(map));
        Ok(true)
    }

    /// The map's epoch and the slots each data group holds, as metrics (`basalt_slot_map_epoch`,
    /// `basalt_slots{group}`), from the map this node routes by.
    pub fn record_slot_metrics(&self) {
        record_slot_metrics(&self.inner.slot_map.load());
    }

    /// Every group of the cluster: the metadata group, then the slot map's data groups. What
    /// walks "every group" (planner, checks, backups, sweeps, usage) walks these.
    pub fn group_ids(&self) -> Vec<GroupId> {
        let mut all = vec![META_GROUP];
        all.extend(self.inner.slot_map.load().data_groups());
        all
    }

    /// The group that stores an object (`SlotMap::object_group`).
    pub fn object_group(&self, app: &AppId, class: &str, object_id: &str) -> GroupId {
        self.inner
            .slot_map
            .load()
            .object_group(app, class, object_id)
    }

    /// A new objectId for an object of `class` in `app`: when this node leads some of the
    /// data shards, one that lands on the shard of its create lane (`create_lane`), so that
    /// creating it needs no forward to another node and creates arriving together share one
    /// Raft round; else any (decisions/0025, 0028).
    pub fn new_object_id(&self, app: &AppId, class: &str) -> String {
        if is_meta_class(class) {
            return new_object_id();
        }
        let map = self.inner.slot_map.load();
        let groups = map.data_groups();
        let led: Vec<GroupId> = groups
            .iter()
            .copied()
            .filter(|&g| self.leads_as_voter(g))
            .collect();
        let lane = create_lane::Lane {
            turn_ms: self.inner.create_lane_ms,
            led: &led,
        };
        lane.draw_id(
            |id| map.object_group(app, class, id),
            groups.len(),
            now_ms(),
        )
    }

    /// The groups that store objects of `class` (`SlotMap::class_groups`).
    pub fn class_groups(&self, class: &str) -> Vec<GroupId> {
        self.inner.slot_map.load().class_groups(class)
    }

    /// The groups that store objects of `class`, and the epoch of the map that names them: a
    /// bulk read of those groups carries it (`ReadRequest::at_epoch`).
    pub fn class_groups_at(&self, class: &str) -> (u64, Vec<GroupId>) {
        let map = self.inner.slot_map.load();
        (map.epoch, map.class_groups(class))
    }

    /// The store every local replica keeps its state in.
    pub(crate) fn store(&self) -> Arc<Store> {
        Arc::clone(&self.inner.store)
    }

    pub(crate) fn router(&self) -> &PeerRouter {
        &self.inner.router
    }

    pub(crate) fn incoming_dir(&self) -> &Path {
        &self.inner.incoming_dir
    }

    /// This node's replica of `group`. A group this node holds no replica of answers as a
    /// replica that knows no leader (`NotLeader`: the request goes to the members in turn); an
    /// id above the cluster's cap is no group.
    pub(crate) fn group(&self, group: GroupId) -> Result<GroupRaft> {
        if self.is_retired(group) {
            return Err(self.retired_error(group));
        }
        self.group_cell(group)?
            .0
            .load()
            .as_deref()
            .map(|r| r.raft.clone())
            .ok_or(Error::NotLeader {
                group,
                leader: None,
                leader_addr: None,
            })
    }

    /// The cell of `group`'s replica on this node, and the lock held while it is made or
    /// erased; an id above the cluster's cap is no group.
    fn group_cell(
        &self,
        group: GroupId,
    ) -> Result<(
        &arc_swap::ArcSwapOption<group_maker::Replica>,
        &tokio::sync::Mutex<()>,
    )> {
        let i = group.get() as usize;
        match (self.inner.groups.get(i), self.inner.making.get(i)) {
            (Some(cell), Some(making)) => Ok((cell, making)),
            _ => Err(Error::InvalidOperation(format!("no group {group}"))),
        }
    }

    /// This node's replica of `group`, made now when it has none (a group split off at run
    /// time, decisions/0038; a replica erased and added back, `erase`): for a peer's message
    /// to a group the cluster has.
    pub(crate) async fn ensure_group(&self, group: GroupId) -> Result<GroupRaft> {
        let inner = &*self.inner;
        let (cell, making) = self.group_cell(group)?;
        if self.is_retired(group) {
            return Err(self.retired_error(group));
        }
        if let Some(replica) = cell.load().as_deref() {
            return Ok(replica.raft.clone());
        }
        let _making = making.lock().await;
        if let Some(replica) = cell.load().as_deref() {
            return Ok(replica.raft.clone());
        }
        if self.is_retired(group) {
            return Err(self.retired_error(group));
        }
        if self.settling(group) {
            return Err(Error::Unavailable(format!(
                "this node's replica of group {group} is still stopping"
            )));
        }
        // None is made once the node stops (`shutdown` would not stop it).
        if *inner.shutdown.borrow() {
            return Err(Error::Unavailable("this node is stopping".into()));
        }
        tracing::info!(%group, "making this node's replica of a group");
        self.make_into(group, cell).await
    }

    /// Makes `group`'s replica from the state the store holds, into `cell`; its Raft. The
    /// caller holds the group's lock (`group_cell`).
    async fn make_into(
        &self,
        group: GroupId,
        cell: &arc_swap::ArcSwapOption<group_maker::Replica>,
    ) -> Result<GroupRaft> {
        let inner = &*self.inner;
        let replica = inner
            .maker
            .make(
                inner.node_id,
                group,
                &inner.settings,
                &inner.store,
                &inner.router,
            )
            .await?;
        let raft = replica.raft.clone();
        cell.store(Some(Arc::new(replica)));
        Ok(raft)
    }

    /// This node's replica of `group` for a peer's message to it: made now when the cluster
    /// has the group (`SlotMap::known_groups`: a split's child too) and this node has none
    /// yet.
    pub(crate) async fn peer_group(&self, group: GroupId) -> Result<GroupRaft> {
        match self.group(group) {
            Err(Error::NotLeader { .. })
                if self.inner.slot_map.load().known_groups().contains(&group) =>
            {
                self.ensure_group(group).await
            }
            other => other,
        }
    }

    /// The groups this node holds a replica of.
    pub(crate) fn groups(&self) -> impl Iterator<Item = (GroupId, GroupRaft)> + '_ {
        self.inner
            .groups
            .iter()
            .enumerate()
            .filter_map(|(g, cell)| {
                Some((GroupId::new(g as u32), cell.load().as_deref()?.raft.clone()))
            })
            .filter(|(g, _)| !self.is_retired(*g))
    }

    /// A receiver that turns true when the node shuts down.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.inner.shutdown.subscribe()
    }

    /// Tells background work to stop and stops every group.
    pub(crate) async fn shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
        // Writes waiting for a full disk give up, or a group blocked in one would never stop.
        self.inner.store.close();
        for (_, raft) in self.groups() {
            let _ = raft.shutdown().await;
        }
        let store = self.inner.store.clone();
        let started = std::time::Instant::now();
        match tokio::task::spawn_blocking(move || store.flush_all()).await {
            Ok(Ok(())) => tracing::info!(
                secs = started.elapsed().as_secs_f64(),
                "memtables flushed: the next start replays no log"
            ),
            Ok(Err(e)) => tracing::warn!("flushing the memtables at stop: {e}"),
            Err(e) => tracing::warn!("flushing the memtables at stop: {e}"),
        }
    }

    /// The digests this node's replicas made for consistency checks.
    pub(crate) fn checks(&self) -> &crate::statemachine::check::StateChecks {
        &self.inner.checks
    }

    /// Marks this node draining: it takes no leadership from now on (`draining`).
    pub(crate) fn set_draining(&self) {
        self.inner
            .draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether this node is draining before it stops: a leadership handed to it is refused.
    pub(crate) fn draining(&self) -> bool {
        self.inner
            .draining
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The groups this node's replicas were removed from without knowing it
    /// (`services::departures`).
    pub fn departed(&self) -> std::collections::BTreeSet<GroupId> {
        match self.inner.departed.lock() {
            Ok(d) => d.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub(crate) fn set_departed(&self, groups: std::collections::BTreeSet<GroupId>) {
        match self.inner.departed.lock() {
            Ok(mut d) => *d = groups,
            Err(poisoned) => *poisoned.into_inner() = groups,
        }
    }

    /// This node's backup write fence.
    pub(crate) fn fence(&self) -> &fence::WriteFence {
        &self.inner.fence
    }

    /// Proposes through the local replica only; `NotLeader` when it is not the leader.
    pub(crate) async fn local_propose(&self, group: GroupId, cmd: &Command) -> Result<Proposed> {
        // Every proposal passes here, forwarded ones included: nothing reaches a log that a
        // replica could fail to decode.
        cmd.check_limits()?;
        if cmd.adds_data() {
            self.check_room(group)?;
        }
        // A backup's barriers pass its fence; everything else waits while it is raised.
        if !matches!(cmd, Command::BackupBarrier { .. }) {
            self.inner.fence.pass().await;
        }
        let raft = self.group(group)?;
        let _share = match cmd.app_bytes() {
            Some((app, bytes)) => Some(self.inner.app_shares.hold(group, app, bytes).await?),
            None => None,
        };
        let proposal = self.inner.proposals.propose(&raft, group, cmd.clone());
        tokio::time::timeout(FORWARD_TIMEOUT, proposal)
            .await
            .map_err(|_| Error::Timeout(format!("proposal to group {group}")))?
    }

    /// Serves a read from the local replica after confirming leadership (read index).
    pub(crate) async fn local_read(
        &self,
        group: GroupId,
        req: &ReadRequest,
    ) -> Result<ReadResponse> {
        self.local_read_groups(&[group], req).await
    }

    /// Serves `req` over `groups` (one group, or the shards of a scan or aggregation), once
    /// this node confirmed its leadership of each with a read index (concurrently): one
    /// blocking task reads them all from one snapshot of the store, once a bulk read's thread
    /// is free (`bulk_reads`). Fails as the first group that this node does not lead.
    pub(crate) async fn local_read_groups(
        &self,
        groups: &[GroupId],
        req: &ReadRequest,
    ) -> Result<ReadResponse> {
        let checks = groups.iter().map(|&g| self.linearize(g));
        for check in futures::future::join_all(checks).await {
            check?;
        }
        // A point read (one key or two from the block cache or the page cache) is served
        // here, without a round trip through the blocking pool that costs more than it does.
        if req.is_point() {
            return (self.inner.serve)(&self.inner.store, groups, req, now_ms(), &Cancel::never());
        }
        // Dropping this future (the caller left, or its deadline passed) stops the task, or
        // gives up its turn for a thread (counted as cancelled either way).
        let (cancel, guard) = Cancel::new();
        let permit = match req.is_bulk() {
            false => None,
            true => Some(self.bulk_read_permit().await?),
        };
        let store = Arc::clone(&self.inner.store);
        let req = req.clone();
        let groups = groups.to_vec();
        let serve = self.inner.serve;
        let answer = tokio::task::spawn_blocking(move || {
            let answer = serve(&store, &groups, &req, now_ms(), &cancel);
            drop(permit);
            answer
        })
        .await;
        guard.disarm();
        answer.map_err(|e| Error::Internal(e.to_string()))?
    }

    /// A thread for a bulk read, as soon as one is free (reads that waited are counted).
    async fn bulk_read_permit(&self) -> Result<OwnedSemaphorePermit> {
        let bulk = Arc::clone(&self.inner.bulk_reads);
        if let Ok(permit) = Arc::clone(&bulk).try_acquire_owned() {
            return Ok(permit);
        }
        metrics::counter!("basalt_query_bulk_reads_queued_total").increment(1);
        bulk.acquire_owned()
            .await
            .map_err(|e| Error::Internal(e.to_string()))
    }

    /// Waits until this node, as `group`'s leader, knows that it still is — within its lease
    /// (a quorum acknowledged it within `read_lease`), else confirmed by a heartbeat round to
    /// a quorum — and applied up to the read index. Without a lease, the round is one that
    /// starts after this call and may serve other reads of the group too (`read_index`); the
    /// read still gives up after `FORWARD_TIMEOUT`.
    async fn linearize(&self, group: GroupId) -> Result<()> {
        let raft = self.group(group)?;
        let Some(age) = self.inner.read_lease else {
            let raft = raft.clone();
            let round = move || async move {
                ensure_linearizable(&raft, group, ReadPolicy::ReadIndex.into()).await
            };
            let read = self.inner.read_index.read(group, round);
            return match tokio::time::timeout(FORWARD_TIMEOUT, read).await {
                Err(_) => Err(Error::Timeout(format!("read of group {group}"))),
                Ok(Ok(outcome)) => outcome,
                Ok(Err(read_index::Abandoned)) => Err(Error::Unavailable(format!(
                    "the read-index round of group {group} stopped"
                ))),
            };
        };
        ensure_linearizable(&raft, group, LinearizerOption::new(Some(age), true)).await
    }

    /// Whether this node may vote yet: not within `RaftTuning::vote_hold` of its start.
    pub(crate) fn may_vote(&self) -> bool {
        Instant::now() >= self.inner.votes_from
    }

    /// Serves a read from this node's replica as it stands, without asking the leader (for
    /// the metadata group, whose writes settle on every member before they answer, and for a
    /// replica that vouches for being current: `freshness`).
    pub(crate) fn stale_read(&self, group: GroupId, req: &ReadRequest) -> Result<ReadResponse> {
        (self.inner.serve)(&self.inner.store, &[group], req, now_ms(), &Cancel::never())
    }

    /// Records of a namespace of the metadata group from this node's replica (may lag the
    /// leader slightly; every node keeps one).
    pub fn local_meta_records(&self, ns: Namespace) -> Result<Vec<(String, Value)>> {
        self.local_meta_records_with_prefix(ns, "")
    }

    /// As `local_meta_records`, for the keys that start with `prefix` only.
    pub fn local_meta_records_with_prefix(
        &self,
        ns: Namespace,
        prefix: &str,
    ) -> Result<Vec<(String, Value)>> {
        let read = MetaRead::Prefix(ns, prefix.to_string());
        let records = self.meta_read(read, || {
            records_with_prefix(&self.inner.store, META_GROUP, ns.name(), prefix)
        })?;
        let now = now_ms();
        Ok(records
            .iter()
            .filter(|(_, rec)| !rec.expired_at(now))
            .map(|(k, rec)| (k.clone(), rec.value.clone()))
            .collect())
    }

    /// One record of the metadata group from this node's replica (may lag the leader).
    pub fn local_meta_record(&self, ns: Namespace, key: &str) -> Result<Option<Value>> {
        let records = self.meta_read(MetaRead::One(ns, key.to_string()), || {
            let state = ReplicaState {
                store: &self.inner.store,
                group: META_GROUP,
            };
            let rec = live_record(&state, ns.name(), key, None)?;
            Ok(rec.map(|r| (key.to_string(), r)).into_iter().collect())
        })?;
        let now = now_ms();
        Ok(records
            .first()
            .filter(|(_, rec)| !rec.expired_at(now))
            .map(|(_, rec)| rec.value.clone()))
    }

    /// `read` of this node's metadata replica, or what it answered last while the replica
    /// has applied nothing since (`meta_reads`).
    fn meta_read(
        &self,
        what: MetaRead,
        read: impl FnOnce() -> Result<Vec<(String, StoredRecord)>>,
    ) -> Result<meta_reads::Records> {
        let applied = self.meta_applied();
        self.inner
            .meta_reads
            .get_or_read(applied, &what, || read().map(Arc::new))
    }

    /// Cluster members as this node's metadata replica knows them.
    pub fn local_nodes(&self) -> Vec<NodeRecord> {
        self.local_meta_records(Namespace::Node)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(_, v)| serde_json::from_value(v).ok())
            .collect()
    }

    /// The active members, as this node's replica of the metadata group holds them.
    pub fn active_members(&self) -> Vec<crate::admin::NodeRecord> {
        self.local_nodes()
            .into_iter()
            .filter(|n| n.state == NodeState::Active)
            .collect()
    }

    /// Whether every active member's record says its build has `feature` (this node's
    /// replica of the metadata group).
    pub fn members_have(&self, feature: &str) -> bool {
        let nodes = self.local_nodes();
        !nodes.is_empty()
            && nodes
                .iter()
                .filter(|n| n.state == NodeState::Active)
                .all(|n| n.features.iter().any(|f| f == feature))
    }

    /// Node ids to rpc addresses of the active members (each learned by the router).
    pub(crate) fn member_addrs(&self) -> HashMap<NodeId, String> {
        self.active_members()
            .into_iter()
            .map(|n| {
                self.inner.router.learn(n.id, &n.rpc_addr);
                (n.id, n.rpc_addr)
            })
            .collect()
    }

    /// `read` of this node's replica of `group`'s latest Raft metrics (none without a replica).
    fn group_metrics<T>(
        &self,
        group: GroupId,
        read: impl FnOnce(&RaftMetrics<TypeConfig>) -> T,
    ) -> Option<T> {
        self.group(group)
            .ok()
            .map(|r| read(&r.metrics().borrow_watched()))
    }

    /// Groups where this node is the leader, from the local metrics (a replica removed from
    /// its group may still name itself leader: it is not counted).
    pub(crate) fn led_groups(&self) -> Vec<GroupId> {
        self.groups()
            .filter(|(_, r)| {
                let metrics = r.metrics();
                let m = metrics.borrow_watched();
                m.current_leader == Some(self.node_id()) && m.state == openraft::ServerState::Leader
            })
            .map(|(g, _)| g)
            .collect()
    }

    /// The leader of `group` as this node's replica last heard (none without a replica or
    /// during an election).
    pub fn leader_of(&self, group: GroupId) -> Option<NodeId> {
        self.group_metrics(group, |m| m.current_leader).flatten()
    }

    /// Whether this node leads `group`: its replica names itself leader and is in the leader
    /// state (a replica removed from its group may still name itself in its metrics).
    pub(crate) fn leads(&self, group: GroupId) -> bool {
        let me = self.node_id();
        self.group_metrics(group, |m| {
            m.current_leader == Some(me) && m.state == openraft::ServerState::Leader
        })
        .unwrap_or(false)
    }

    /// Whether this node leads `group` as one of its voters: a replica removed from its group
    /// (placement moved it, or is moving it off the node) may still name itself leader in its
    /// metrics, and must not take the node's new objects (`new_object_id`).
    fn leads_as_voter(&self, group: GroupId) -> bool {
        let me = self.node_id();
        self.group_metrics(group, |m| {
            m.current_leader == Some(me)
                && m.membership_config
                    .membership()
                    .voter_ids()
                    .any(|v| v == me)
        })
        .unwrap_or(false)
    }

    /// Whether this node runs the cluster's timed work now: it leads the metadata group.
    pub fn runs_scheduler(&self) -> bool {
        self.leads(META_GROUP)
    }

    /// The last log index of the metadata group this node has applied.
    pub fn meta_applied(&self) -> u64 {
        self.group_metrics(META_GROUP, |m| m.last_applied.map(|l| l.index))
            .flatten()
            .unwrap_or(0)
    }

    /// Each group's status as the member leading it reports it, asking every active member
    /// (this one without a round trip) and, with `also_removed`, every removed one within
    /// `REMOVED_ASK_WITHIN` (a removed node leads its groups until their replicas have
    /// moved; one long gone should not hold the caller up); members that do not answer within
    /// `timeout` are left out. What backups, consistency checks and the rebalancer go by: a
    /// node outside a group does not know its leader or voters.
    pub(crate) async fn led_group_statuses(
        &self,
        timeout: Duration,
        also_removed: bool,
    ) -> HashMap<GroupId, GroupStatus> {
        self.member_statuses(timeout, also_removed).await.0
    }

    /// As `led_group_statuses`, with the members that answered.
    pub(crate) async fn member_statuses(
        &self,
        timeout: Duration,
        also_removed: bool,
    ) -> (
        HashMap<GroupId, GroupStatus>,
        std::collections::BTreeSet<NodeId>,
    ) {
        use crate::admin::{AdminRequest, AdminResponse};
        const REMOVED_ASK_WITHIN: Duration = Duration::from_millis(500);
        let members: Vec<(NodeId, Duration)> = self
            .local_nodes()
            .iter()
            .filter_map(|n| match n.state {
                NodeState::Active => Some((n.id, timeout)),
                NodeState::Removed if also_removed => Some((n.id, timeout.min(REMOVED_ASK_WITHIN))),
                NodeState::Removed => None,
            })
            .collect();
        let asks = members.iter().map(|&(node, timeout)| async move {
            if node == self.node_id() {
                return Ok(self.status());
            }
            match self
                .router()
                .admin(node, &AdminRequest::Status, timeout)
                .await?
            {
                AdminResponse::Status(status) => Ok(status),
                other => Err(Error::Internal(format!(
                    "unexpected answer to Status: {other:?}"
                ))),
            }
        });
        let mut led: HashMap<GroupId, GroupStatus> = HashMap::new();
        let mut answered = std::collections::BTreeSet::new();
        for status in futures::future::join_all(asks).await.into_iter().flatten() {
            answered.insert(status.node_id);
            for g in status.groups {
                // Of two members that say they lead a group, a deposed one (paused, cut off)
                // has the lower term.
                if g.leader == Some(status.node_id)
                    && led.get(&g.group).is_none_or(|seen| g.term > seen.term)
                {
                    led.insert(g.group, g);
                }
            }
        }
        (led, answered)
    }

    /// The state of every group on this node.
    pub fn status(&self) -> NodeStatus {
        NodeStatus {
            node_id: self.node_id(),
            draining: self.draining(),
            groups: self
                .groups()
                .map(|(g, raft)| GroupStatus {
                    current: self.replica_is_current(g),
                    leader_heard_ms: self.leader_heard(g).map(|d| d.as_millis() as u64),
                    bytes: self.group_bytes(g),
                    ..group_status(g, &raft)
                })
                .collect(),
        }
    }

    /// The state of one group on this node.
    pub(crate) fn status_of(&self, group: GroupId) -> Option<GroupStatus> {
        let raft = self.group(group).ok()?;
        Some(GroupStatus {
            current: self.replica_is_current(group),
            leader_heard_ms: self.leader_heard(group).map(|d| d.as_millis() as u64),
            bytes: self.group_bytes(group),
            ..group_status(group, &raft)
        })
    }

    /// Approximate bytes of `group`'s state in this node's files (not its memtables).
    fn group_bytes(&self, group: GroupId) -> u64 {
        use crate::storage::keys::{group_end, group_prefix, CF_SM};
        self.inner
            .store
            .approximate_range_size(CF_SM, &group_prefix(group), &group_end(group))
            .unwrap_or(0)
    }

    /// A digest of each group's state as this node's replica holds it (`admin::GroupDigest`).
    pub async fn digests(&self) -> Result<Vec<GroupDigest>> {
        let store = Arc::clone(&self.inner.store);
        let groups = self.group_ids();
        tokio::task::spawn_blocking(move || {
            groups
                .into_iter()
                .map(|g| snapshot::digest(g, &store))
                .collect::<Result<Vec<_>>>()
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
    }

    /// Approximate bytes of this node's RocksDB.
    pub fn storage_bytes(&self) -> u64 {
        self.inner.store.approximate_size()
    }

    /// Snapshots every local group whose log grew past a threshold since its last snapshot,
    /// then starts a compaction of the Raft log column family, unless one still runs. The
    /// compaction is not waited for: RocksDB runs it in its compaction threads, at the lowest
    /// priority (`storage::store`), which may take long on a busy node; the scheduler's other
    /// jobs must not wait behind it.
    pub async fn compact(&self) {
        for (g, raft) in self.groups() {
            let m = raft.metrics().borrow_watched().clone();
            let applied = m.last_applied.map(|l| l.index).unwrap_or(0);
            let snap = m.snapshot.map(|l| l.index).unwrap_or(0);
            if applied.saturating_sub(snap) >= 1000 {
                if let Err(e) = raft.trigger().snapshot().await {
                    tracing::warn!(group = %g, "snapshot trigger failed: {e}");
                }
            }
        }
        let running = Arc::clone(&self.inner.log_compacting);
        if running.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let store = Arc::clone(&self.inner.store);
        tokio::task::spawn_blocking(move || {
            let cf = crate::storage::keys::CF_RAFT_LOG;
            if let Err(e) = store.compact_range(cf, &[0u8; 4], &[0xffu8; 5]) {
                tracing::warn!("compacting the Raft log: {e}");
            }
            running.store(false, std::sync::atomic::Ordering::Release);
        });
    }
}

/// `raft.ensure_linearizable(option)` within `FORWARD_TIMEOUT`, its errors as Basalt's.
async fn ensure_linearizable(
    raft: &GroupRaft,
    group: GroupId,
    option: LinearizerOption,
) -> Result<()> {
    match tokio::time::timeout(FORWARD_TIMEOUT, raft.ensure_linearizable(option)).await {
        Err(_) => Err(Error::Timeout(format!("read of group {group}"))),
        Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f)))) => {
            Err(Error::NotLeader {
                group,
                leader: f.leader_id,
                leader_addr: f.leader_node.map(|n| n.addr),
            })
        }
        Ok(Err(RaftError::APIError(e))) => Err(Error::Unavailable(e.to_string())),
        Ok(Err(RaftError::Fatal(e))) => Err(Error::Unavailable(e.to_string())),
        Ok(Ok(_)) => Ok(()),
    }
}

fn group_status(group: GroupId, raft: &GroupRaft) -> GroupStatus {
    let m = raft.metrics().borrow_watched().clone();
    let membership = m.membership_config.membership();
    GroupStatus {
        group,
        state: format!("{:?}", m.state),
        term: m.current_term,
        leader: m.current_leader,
        last_log_index: m.last_log_index.unwrap_or(0),
        committed: m.cluster_committed.map(|l| l.index).unwrap_or(0),
        applied: m.last_applied.map(|l| l.index).unwrap_or(0),
        snapshot: m.snapshot.map(|l| l.index).unwrap_or(0),
        purged: m.purged.map(|l| l.index).unwrap_or(0),
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
        config_at: m.membership_config.log_id().as_ref().map(|l| l.index),
        bytes: 0,
        halted: m.running_state.as_ref().err().map(|e| e.to_string()),
        current: false,
        leader_heard_ms: None,
    }
}

/// The error for a read answered with another variant than its request asks for.
pub(crate) fn unexpected(r: ReadResponse) -> Error {
    Error::Internal(format!("unexpected read response {r:?}"))
}

/// `Replicas::record_slot_metrics` of `map`.
fn record_slot_metrics(map: &SlotMap) {
    metrics::gauge!("basalt_slot_map_epoch").set(map.epoch as f64);
    // Groups that gave every slot away (merged, retired) read 0, not their last count.
    let mut held: std::collections::BTreeMap<GroupId, u32> = map
        .data_groups()
        .into_iter()
        .chain(map.retired.iter().copied())
        .map(|g| (g, 0))
        .collect();
    for slot in 0..map.slots() {
        *held.entry(map.group_of_slot(slot)).or_default() += 1;
    }
    for (group, slots) in held {
        metrics::gauge!("basalt_slots", "group" => group.to_string()).set(f64::from(slots));
    }
}
