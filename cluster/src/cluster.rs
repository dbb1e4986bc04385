//! `Cluster`: the one door the node crate uses. It opens the store and every group, serves the
//! peer gRPC services, and offers propose (with forwarding to the group's leader), linearizable
//! reads, scatter-gather scans, records, and administration.
//!
//! A proposal tries the local replica first; a `NotLeader` answer sends it to the leader named
//! in the answer (or, when none is known, to each member in turn), retrying only while the
//! command certainly did not take effect. A timeout is reported as such: the write may or may
//! not have been applied.

use openraft::async_runtime::WatchReceiver;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, LinearizableReadError, RaftError};
use openraft::{BasicNode, ReadPolicy};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admin::{
    AdminRequest, AdminResponse, ClusterSettings, GroupStatus, NodeRecord, NodeState, NodeStatus,
    NS_CLUSTER, NS_NODE, SETTINGS_KEY,
};
use crate::command::{Command, CommandResult, Proposed, ReadRequest, ReadResponse};
use crate::error::{Error, Result};
use crate::ids::{shard_for, GroupId, NodeId, META_GROUP};
use crate::local_read;
use crate::network::GroupNetwork;
use crate::object::trim_query_times;
use crate::query::aggregate::{merge_partials, AggregateRequest, PartialGroup};
use crate::query::eval::RowOrder;
use crate::query::{merge::merge_rows, ScanRequest};
use crate::raft::{GroupRaft, RaftTuning};
use crate::rpc::router::{PeerRouter, FORWARD_TIMEOUT};
use crate::statemachine::ShardStateMachine;
use crate::storage::keys::NODE_IDENTITY;
use crate::storage::{RocksLogStore, Store};

/// How a node starts.
#[derive(Debug, Clone)]
pub enum Bootstrap {
    /// Create a new cluster with this node as its first member.
    Init { shards: u32, replicas: u32 },
    /// Join the running cluster that the node at this gRPC address belongs to.
    Join { addr: String },
    /// Resume from the data dir (fails if it holds no cluster).
    Resume,
}

#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub node_id: NodeId,
    pub data_dir: PathBuf,
    /// Where the peer gRPC server listens.
    pub rpc_listen: SocketAddr,
    /// The gRPC address peers use to reach this node (may differ from `rpc_listen` behind a
    /// proxy or NAT).
    pub rpc_addr: String,
    /// Local IP that outgoing peer connections are made from (None: the system's choice).
    pub rpc_source_ip: Option<std::net::IpAddr>,
    /// The HTTP address clients use (recorded for `basalt dev` and admin output).
    pub http_addr: String,
    pub bootstrap: Bootstrap,
    pub tuning: RaftTuning,
    pub ttl_sweep_every: Duration,
    pub compact_every: Duration,
    /// Deadline of each shard's part of a query or aggregation (scans of large unindexed
    /// classes take seconds); point reads and writes keep the shorter forward deadline.
    pub query_timeout: Duration,
}

/// What a node keeps about itself, in the default column family.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct NodeIdentity {
    node_id: NodeId,
    settings: ClusterSettings,
}

pub(crate) struct Inner {
    pub(crate) node_id: NodeId,
    pub(crate) settings: ClusterSettings,
    pub(crate) rpc_addr: String,
    pub(crate) http_addr: String,
    pub(crate) store: Arc<Store>,
    pub(crate) groups: Vec<GroupRaft>,
    pub(crate) router: PeerRouter,
    pub(crate) incoming_dir: PathBuf,
    pub(crate) options: ClusterOptions,
    shutdown: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    apply_watch: crate::health::ApplyWatch,
}

#[derive(Clone)]
pub struct Cluster {
    pub(crate) inner: Arc<Inner>,
}

/// How long a metadata change that every node reads locally waits for the members to apply it.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(3);
/// Deadline of one status question to a member while settling.
const SETTLE_POLL_TIMEOUT: Duration = Duration::from_millis(500);

/// Classes whose objects live in the metadata group rather than in data shards, so that every
/// node holds them and can read them locally: roles, whose graph every logged-in request needs.
pub const META_CLASSES: [&str; 1] = ["_Role"];

/// Whether objects of `class` live in the metadata group.
pub fn is_meta_class(class: &str) -> bool {
    META_CLASSES.contains(&class)
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Time left until `deadline` (at least a moment, so a last attempt can still answer).
fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100))
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((25u64 << attempt.min(4)).min(400))
}

impl Cluster {
    /// Opens the node's storage and groups, starts its gRPC server and background work.
    pub async fn start(opts: ClusterOptions) -> Result<Cluster> {
        std::fs::create_dir_all(&opts.data_dir)?;
        let store = Store::open(&opts.data_dir.join("db"))?;
        let identity: Option<NodeIdentity> = store
            .get_default(NODE_IDENTITY)?
            .map(|b| serde_json::from_slice(&b))
            .transpose()?;
        let (settings, fresh_init, join_addr) = match (&identity, &opts.bootstrap) {
            (Some(id), _) if id.node_id != opts.node_id => {
                return Err(Error::InvalidOperation(format!(
                    "data dir belongs to node {}, not node {}",
                    id.node_id, opts.node_id
                )))
            }
            (Some(id), _) => (id.settings, false, None),
            (None, Bootstrap::Init { shards, replicas }) => {
                if *shards == 0 || *replicas == 0 {
                    return Err(Error::InvalidOperation("--shards and --replicas must be at least 1".into()));
                }
                (ClusterSettings { shards: *shards, replicas: *replicas }, true, None)
            }
            (None, Bootstrap::Join { addr }) => (fetch_settings(addr).await?, false, Some(addr.clone())),
            (None, Bootstrap::Resume) => {
                return Err(Error::InvalidOperation(
                    "the data dir holds no cluster: start the first node with --init, others with --join".into(),
                ))
            }
        };
        if identity.is_none() {
            let id = NodeIdentity {
                node_id: opts.node_id,
                settings,
            };
            store.put_default_synced(NODE_IDENTITY, &serde_json::to_vec(&id)?)?;
        }

        let router = PeerRouter::new(opts.rpc_source_ip);
        router.learn(opts.node_id, &opts.rpc_addr);
        let incoming_dir = opts.data_dir.join("snapshots").join("incoming");
        std::fs::create_dir_all(&incoming_dir)?;
        let mut groups = Vec::with_capacity(settings.shards as usize + 1);
        for group in 0..=settings.shards {
            let log = RocksLogStore::new(group, Arc::clone(&store));
            let sm = ShardStateMachine::open(
                group,
                Arc::clone(&store),
                opts.data_dir.join("snapshots"),
            )?;
            let net = GroupNetwork::new(router.clone(), group);
            let raft = GroupRaft::new(opts.node_id, opts.tuning.config(group)?, net, log, sm)
                .await
                .map_err(|e| Error::Internal(format!("starting group {group}: {e}")))?;
            groups.push(raft);
        }
        let listener = tokio::net::TcpListener::bind(opts.rpc_listen).await?;
        let (shutdown, _) = watch::channel(false);
        let cluster = Cluster {
            inner: Arc::new(Inner {
                node_id: opts.node_id,
                settings,
                rpc_addr: opts.rpc_addr.clone(),
                http_addr: opts.http_addr.clone(),
                store,
                groups,
                router,
                incoming_dir,
                options: opts,
                shutdown,
                tasks: Mutex::new(Vec::new()),
                apply_watch: Default::default(),
            }),
        };
        cluster.spawn(crate::rpc::raft_service::serve(cluster.clone(), listener));
        if fresh_init {
            cluster.initialize_groups().await?;
        }
        cluster.spawn(register_self(cluster.clone(), join_addr));
        cluster.spawn(crate::placement::run(cluster.clone()));
        cluster.spawn(crate::scheduler::run(cluster.clone()));
        Ok(cluster)
    }

    fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(fut);
        if let Ok(mut tasks) = self.inner.tasks.lock() {
            tasks.push(handle);
        }
    }

    /// A receiver that turns true when the node shuts down.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.inner.shutdown.subscribe()
    }

    async fn initialize_groups(&self) -> Result<()> {
        let members = BTreeMap::from([(self.inner.node_id, BasicNode::new(&self.inner.rpc_addr))]);
        for (group, raft) in self.inner.groups.iter().enumerate() {
            let initialized = raft
                .is_initialized()
                .await
                .map_err(|e| Error::Internal(e.to_string()))?;
            if !initialized {
                raft.initialize(members.clone())
                    .await
                    .map_err(|e| Error::Internal(format!("initializing group {group}: {e}")))?;
            }
        }
        Ok(())
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

    /// The data shard that owns an object (or an internal record keyed like one).
    pub fn shard_for(&self, app: &str, class: &str, object_id: &str) -> GroupId {
        shard_for(app, class, object_id, self.inner.settings.shards)
    }

    /// The group that stores an object: the metadata group for [`META_CLASSES`], else its
    /// data shard.
    pub fn object_group(&self, app: &str, class: &str, object_id: &str) -> GroupId {
        if is_meta_class(class) {
            META_GROUP
        } else {
            self.shard_for(app, class, object_id)
        }
    }

    /// The groups that store objects of `class`: what a scan, count or aggregation asks.
    pub fn class_groups(&self, class: &str) -> Vec<GroupId> {
        if is_meta_class(class) {
            vec![META_GROUP]
        } else {
            (1..=self.shards()).collect()
        }
    }

    /// The objects of a class of the metadata group as this node's replica holds them, and the
    /// applied log index they reflect (read before them: a later index means newer objects).
    /// The replica may lag the leader; writes to these classes wait for every member to apply
    /// them before they answer (`settle_meta`).
    pub fn local_meta_objects(
        &self,
        app: &str,
        class: &str,
    ) -> Result<(u64, Vec<(String, crate::object::StoredObject)>)> {
        let index = self.meta_applied();
        let req = ReadRequest::ScanStoredObjects {
            app: app.into(),
            class: class.into(),
        };
        match local_read::serve_read(&self.inner.store, META_GROUP, &req, now_ms())? {
            ReadResponse::StoredObjects(objs) => Ok((index, objs)),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) fn group(&self, group: GroupId) -> Result<&GroupRaft> {
        self.inner
            .groups
            .get(group as usize)
            .ok_or_else(|| Error::InvalidOperation(format!("no group {group}")))
    }

    /// Proposes an object command to the group that stores the object (`object_group`): as
    /// `propose`, and for the metadata group's classes, which every node reads from its own
    /// replica, answers once every reachable member has applied it, so the next request
    /// through any node sees it.
    pub async fn propose_object(&self, group: GroupId, cmd: Command) -> Result<Proposed> {
        let p = self.propose(group, cmd).await?;
        if group == META_GROUP {
            self.settle_meta(p.log_index, SETTLE_TIMEOUT).await;
        }
        Ok(p)
    }

    /// Proposes `cmd` to `group` through its leader and waits until it is applied.
    pub async fn propose(&self, group: GroupId, cmd: Command) -> Result<Proposed> {
        let started = Instant::now();
        let deadline = started + FORWARD_TIMEOUT;
        let mut hint: Option<NodeId> = None;
        let mut attempt = 0u32;
        let result = loop {
            let outcome = match hint.filter(|&n| n != self.inner.node_id) {
                Some(node) => self.inner.router.propose(node, group, &cmd).await,
                None => match self.local_propose(group, &cmd).await {
                    Err(Error::NotLeader {
                        leader,
                        leader_addr,
                        ..
                    }) => match self.forward_target(leader, leader_addr, attempt) {
                        Some(node) => self.inner.router.propose(node, group, &cmd).await,
                        None => Err(Error::NotLeader {
                            group,
                            leader: None,
                            leader_addr: None,
                        }),
                    },
                    other => other,
                },
            };
            match outcome {
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    hint = self.retry_hint(e, attempt);
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) if e.is_retryable() => {
                    break Err(Error::Unavailable(format!(
                        "group {group} has no reachable leader"
                    )))
                }
                other => break other,
            }
        };
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!("basalt_raft_proposals_total", "outcome" => outcome).increment(1);
        metrics::histogram!("basalt_raft_proposal_seconds").record(started.elapsed().as_secs_f64());
        result
    }

    /// Where the next attempt goes after a retryable failure: the leader a peer named, else
    /// the local replica again (which knows whether a new leader was elected). A peer that
    /// names this node as the leader sends the attempt back here: during a leadership
    /// transfer to this node the peers already know and this node is about to.
    fn retry_hint(&self, e: Error, attempt: u32) -> Option<NodeId> {
        match e {
            Error::NotLeader {
                leader: Some(l),
                leader_addr,
                ..
            } if l != self.inner.node_id => self.forward_target(Some(l), leader_addr, attempt + 1),
            _ => None,
        }
    }

    /// Where to send a request this node cannot serve: the named leader, else each known
    /// member in turn (a node that holds no replica of the group knows no leader).
    fn forward_target(
        &self,
        leader: Option<NodeId>,
        leader_addr: Option<String>,
        attempt: u32,
    ) -> Option<NodeId> {
        if let Some(l) = leader.filter(|&l| l != self.inner.node_id) {
            if let Some(addr) = leader_addr {
                self.inner.router.learn(l, &addr);
            }
            return Some(l);
        }
        let others: Vec<NodeId> = self
            .local_nodes()
            .into_iter()
            .filter(|n| n.id != self.inner.node_id && n.state == NodeState::Active)
            .map(|n| {
                self.inner.router.learn(n.id, &n.rpc_addr);
                n.id
            })
            .collect();
        (!others.is_empty()).then(|| others[attempt as usize % others.len()])
    }

    /// Proposes through the local replica only; `NotLeader` when it is not the leader.
    pub(crate) async fn local_propose(&self, group: GroupId, cmd: &Command) -> Result<Proposed> {
        // Every proposal passes here, forwarded ones included: nothing reaches a log that a
        // replica could fail to decode.
        cmd.check_limits()?;
        let raft = self.group(group)?;
        match tokio::time::timeout(FORWARD_TIMEOUT, raft.client_write(cmd.clone())).await {
            Err(_) => Err(Error::Timeout(format!("proposal to group {group}"))),
            Ok(Ok(resp)) => match resp.data {
                CommandResult::Rejected(e) => Err(e),
                result => Ok(Proposed {
                    result,
                    log_index: resp.log_id.index,
                }),
            },
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(Error::NotLeader {
                    group,
                    leader: f.leader_id,
                    leader_addr: f.leader_node.map(|n| n.addr),
                })
            }
            // Appended, then replaced by another leader's log: it may still commit.
            Ok(Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)))) => Err(Error::Timeout(format!(
                "proposal to group {group} was displaced by a leader change; it may or may not take effect"
            ))),
            Ok(Err(RaftError::APIError(e))) => Err(Error::Internal(e.to_string())),
            Ok(Err(RaftError::Fatal(e))) => Err(Error::Unavailable(e.to_string())),
        }
    }

    /// A linearizable read of `group`, served by its leader.
    pub async fn read(&self, group: GroupId, req: ReadRequest) -> Result<ReadResponse> {
        self.read_within(group, req, FORWARD_TIMEOUT).await
    }

    /// A shard's part of a query: a read with the query deadline.
    async fn query_read(&self, group: GroupId, req: ReadRequest) -> Result<ReadResponse> {
        self.read_within(group, req, self.inner.options.query_timeout)
            .await
    }

    /// A linearizable read of `group` that gives up after `timeout`.
    async fn read_within(
        &self,
        group: GroupId,
        req: ReadRequest,
        timeout: Duration,
    ) -> Result<ReadResponse> {
        let deadline = Instant::now() + timeout;
        let mut hint: Option<NodeId> = None;
        let mut attempt = 0u32;
        loop {
            let outcome = match hint.filter(|&n| n != self.inner.node_id) {
                Some(node) => {
                    self.inner
                        .router
                        .read(node, group, &req, remaining(deadline))
                        .await
                }
                None => match self.local_read(group, &req).await {
                    Err(Error::NotLeader {
                        leader,
                        leader_addr,
                        ..
                    }) => match self.forward_target(leader, leader_addr, attempt) {
                        Some(node) => {
                            self.inner
                                .router
                                .read(node, group, &req, remaining(deadline))
                                .await
                        }
                        None => Err(Error::NotLeader {
                            group,
                            leader: None,
                            leader_addr: None,
                        }),
                    },
                    other => other,
                },
            };
            // Reads change nothing: any failure to reach a leader may be retried.
            let retry = |e: &Error| e.is_retryable() || matches!(e, Error::Unavailable(_));
            match outcome {
                Err(e) if retry(&e) && Instant::now() < deadline => {
                    tracing::debug!(group, attempt, "read retried: {e:?}");
                    hint = self.retry_hint(e, attempt);
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) if retry(&e) => {
                    return Err(Error::Unavailable(format!(
                        "group {group} has no reachable leader"
                    )))
                }
                other => return other,
            }
        }
    }

    /// Serves a read from the local replica after confirming leadership (read index).
    pub(crate) async fn local_read(
        &self,
        group: GroupId,
        req: &ReadRequest,
    ) -> Result<ReadResponse> {
        let raft = self.group(group)?;
        match tokio::time::timeout(
            FORWARD_TIMEOUT,
            raft.ensure_linearizable(ReadPolicy::ReadIndex),
        )
        .await
        {
            Err(_) => return Err(Error::Timeout(format!("read of group {group}"))),
            Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f)))) => {
                return Err(Error::NotLeader {
                    group,
                    leader: f.leader_id,
                    leader_addr: f.leader_node.map(|n| n.addr),
                })
            }
            Ok(Err(RaftError::APIError(e))) => return Err(Error::Unavailable(e.to_string())),
            Ok(Err(RaftError::Fatal(e))) => return Err(Error::Unavailable(e.to_string())),
            Ok(Ok(_)) => {}
        }
        let store = Arc::clone(&self.inner.store);
        let req = req.clone();
        tokio::task::spawn_blocking(move || local_read::serve_read(&store, group, &req, now_ms()))
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
    }

    /// Reads one object, linearizably (no access check: the service's own reads).
    pub async fn get_object(
        &self,
        app: &str,
        class: &str,
        object_id: &str,
    ) -> Result<Option<Value>> {
        self.get_object_as(app, class, object_id, None).await
    }

    /// Reads one object as `principals` would see it: absent when they may not read it.
    pub async fn get_object_as(
        &self,
        app: &str,
        class: &str,
        object_id: &str,
        principals: Option<Vec<String>>,
    ) -> Result<Option<Value>> {
        let group = self.object_group(app, class, object_id);
        let req = ReadRequest::GetObject {
            app: app.into(),
            class: class.into(),
            object_id: object_id.into(),
            principals,
        };
        match self.read(group, req).await? {
            ReadResponse::Object(o) => Ok(o),
            other => Err(unexpected(other)),
        }
    }

    /// Reads one object as stored, internal fields included, linearizably.
    pub async fn get_stored_object(
        &self,
        app: &str,
        class: &str,
        object_id: &str,
    ) -> Result<Option<crate::object::StoredObject>> {
        let group = self.object_group(app, class, object_id);
        let req = ReadRequest::GetStoredObject {
            app: app.into(),
            class: class.into(),
            object_id: object_id.into(),
        };
        match self.read(group, req).await? {
            ReadResponse::Stored(o) => Ok(o),
            other => Err(unexpected(other)),
        }
    }

    /// Every object of a class as stored, from every shard (for small system classes).
    pub async fn scan_stored_objects(
        &self,
        app: &str,
        class: &str,
    ) -> Result<Vec<(String, crate::object::StoredObject)>> {
        let req = ReadRequest::ScanStoredObjects {
            app: app.into(),
            class: class.into(),
        };
        let reads = self
            .class_groups(class)
            .into_iter()
            .map(|g| self.read(g, req.clone()));
        let mut out = Vec::new();
        for r in futures::future::join_all(reads).await {
            match r? {
                ReadResponse::StoredObjects(objs) => out.extend(objs),
                other => return Err(unexpected(other)),
            }
        }
        Ok(out)
    }

    /// Compare-and-set of a record of `group` (see `Command::CasRecord`); `Conflict` when the
    /// live value is not `expected`.
    pub async fn cas_record(
        &self,
        group: GroupId,
        ns: &str,
        key: &str,
        expected: Option<Value>,
        value: Option<Value>,
    ) -> Result<Proposed> {
        self.propose(
            group,
            Command::CasRecord {
                ns: ns.into(),
                key: key.into(),
                expected,
                value,
                now_ms: now_ms(),
            },
        )
        .await
    }

    /// Scans a class on every shard concurrently and merges the results. Any shard that fails
    /// fails the scan: results are never silently partial.
    pub async fn scan_objects(&self, req: ScanRequest) -> Result<(Vec<Value>, u64)> {
        let reads = self
            .class_groups(&req.class)
            .into_iter()
            .map(|g| self.query_read(g, ReadRequest::ScanObjects(req.clone())));
        let mut shards = Vec::new();
        let mut count = 0;
        for r in futures::future::join_all(reads).await {
            match r? {
                ReadResponse::Scan { rows, count: c } => {
                    shards.push(rows);
                    count += c;
                }
                other => return Err(unexpected(other)),
            }
        }
        let order = RowOrder::new(&req.order, &req.filter);
        let mut rows = merge_rows(shards, &order, req.skip, req.limit);
        rows.iter_mut().for_each(trim_query_times);
        Ok((rows, count))
    }

    /// Runs an aggregation on every shard concurrently and merges the partial groups (a shard
    /// that fails or cannot be reached fails the whole aggregation).
    pub async fn aggregate_objects(&self, req: AggregateRequest) -> Result<Vec<PartialGroup>> {
        let reads = self
            .class_groups(&req.class)
            .into_iter()
            .map(|g| self.query_read(g, ReadRequest::Aggregate(req.clone())));
        let mut shards = Vec::new();
        for r in futures::future::join_all(reads).await {
            match r? {
                ReadResponse::Groups(groups) => shards.push(groups),
                other => return Err(unexpected(other)),
            }
        }
        merge_partials(shards)
    }

    /// Writes a record in `group`, optionally expiring at `expires_at_ms`.
    pub async fn put_record(
        &self,
        group: GroupId,
        ns: &str,
        key: &str,
        value: Value,
        expires_at_ms: Option<i64>,
    ) -> Result<Proposed> {
        self.propose(
            group,
            Command::PutRecord {
                ns: ns.into(),
                key: key.into(),
                value,
                expires_at_ms,
            },
        )
        .await
    }

    /// Reads a record of `group` linearizably (absent when expired).
    pub async fn get_record(&self, group: GroupId, ns: &str, key: &str) -> Result<Option<Value>> {
        match self
            .read(
                group,
                ReadRequest::GetRecord {
                    ns: ns.into(),
                    key: key.into(),
                },
            )
            .await?
        {
            ReadResponse::Record(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// Writes a record in `group` unless a live record has its key (`Conflict` then).
    pub async fn insert_record(
        &self,
        group: GroupId,
        ns: &str,
        key: &str,
        value: Value,
        expires_at_ms: Option<i64>,
    ) -> Result<Proposed> {
        self.propose(
            group,
            Command::InsertRecord {
                ns: ns.into(),
                key: key.into(),
                value,
                expires_at_ms,
                now_ms: now_ms(),
            },
        )
        .await
    }

    /// Merges `members` into an existing record of `group`; answers the merged value.
    pub async fn merge_record(
        &self,
        group: GroupId,
        ns: &str,
        key: &str,
        members: serde_json::Map<String, Value>,
    ) -> Result<Value> {
        Ok(self.merge_record_at(group, ns, key, members).await?.0)
    }

    /// As `merge_record`, for a record of the metadata group that every node reads from its own
    /// replica (app settings): answers once every reachable member has applied the change, so
    /// the next request through any node sees it.
    pub async fn merge_meta_record_everywhere(
        &self,
        ns: &str,
        key: &str,
        members: serde_json::Map<String, Value>,
    ) -> Result<Value> {
        let (value, index) = self.merge_record_at(META_GROUP, ns, key, members).await?;
        self.settle_meta(index, SETTLE_TIMEOUT).await;
        Ok(value)
    }

    async fn merge_record_at(
        &self,
        group: GroupId,
        ns: &str,
        key: &str,
        members: serde_json::Map<String, Value>,
    ) -> Result<(Value, u64)> {
        let p = self
            .propose(
                group,
                Command::MergeRecord {
                    ns: ns.into(),
                    key: key.into(),
                    members,
                },
            )
            .await?;
        match p.result {
            CommandResult::Record(v) => Ok((v, p.log_index)),
            other => Err(Error::Internal(format!(
                "unexpected merge result {other:?}"
            ))),
        }
    }

    /// Waits until every active member's replica of the metadata group has applied `index`, or
    /// `timeout` passes (a member that is down or cut off catches up when it returns; it
    /// cannot be told sooner). Answers the members still behind.
    pub async fn settle_meta(&self, index: u64, timeout: Duration) -> Vec<NodeId> {
        let deadline = Instant::now() + timeout;
        let mut behind: Vec<(NodeId, String)> = member_addrs(self).into_iter().collect();
        loop {
            let checks = behind.iter().map(|(node, addr)| async move {
                if *node == self.inner.node_id {
                    return self.meta_applied() >= index;
                }
                self.inner.router.learn(*node, addr);
                match self
                    .inner
                    .router
                    .admin(*node, &AdminRequest::Status, SETTLE_POLL_TIMEOUT)
                    .await
                {
                    Ok(AdminResponse::Status(s)) => s
                        .groups
                        .iter()
                        .any(|g| g.group == META_GROUP && g.applied >= index),
                    _ => false,
                }
            });
            let done = futures::future::join_all(checks).await;
            let mut i = 0;
            behind.retain(|_| {
                i += 1;
                !done[i - 1]
            });
            if behind.is_empty() || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let behind: Vec<NodeId> = behind.into_iter().map(|(n, _)| n).collect();
        if !behind.is_empty() {
            tracing::warn!(
                ?behind,
                index,
                "metadata change not yet applied on every member"
            );
        }
        behind
    }

    /// The last log index of the metadata group this node has applied.
    pub fn meta_applied(&self) -> u64 {
        self.inner
            .groups
            .get(META_GROUP as usize)
            .and_then(|r| r.metrics().borrow_watched().last_applied.map(|l| l.index))
            .unwrap_or(0)
    }

    /// Deletes a live record and answers its value: `Ok(None)` when there was none. Each record
    /// is taken at most once, however many callers race for it.
    pub async fn take_record(&self, group: GroupId, ns: &str, key: &str) -> Result<Option<Value>> {
        let cmd = Command::TakeRecord {
            ns: ns.into(),
            key: key.into(),
            now_ms: now_ms(),
        };
        match self.propose(group, cmd).await {
            Ok(p) => match p.result {
                CommandResult::Record(v) => Ok(Some(v)),
                other => Err(Error::Internal(format!("unexpected take result {other:?}"))),
            },
            Err(Error::ObjectNotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Counts one use of the quota `ns/key` against every window; `Err(QuotaExceeded)` (and
    /// nothing counted) when a window is full; answers the time the use is stamped with.
    pub async fn take_quota(
        &self,
        group: GroupId,
        ns: &str,
        key: &str,
        windows: Vec<crate::command::QuotaWindow>,
    ) -> Result<i64> {
        let now = now_ms();
        let cmd = Command::TakeQuota {
            ns: ns.into(),
            key: key.into(),
            now_ms: now,
            windows,
        };
        self.propose(group, cmd).await.map(|_| now)
    }

    /// Gives back the quota use `take_quota` took at `use_ms`.
    pub async fn return_quota(
        &self,
        group: GroupId,
        ns: &str,
        key: &str,
        use_ms: i64,
    ) -> Result<()> {
        let cmd = Command::ReturnQuota {
            ns: ns.into(),
            key: key.into(),
            use_ms,
        };
        self.propose(group, cmd).await.map(|_| ())
    }

    /// Live records of `group`'s namespace `ns` whose keys start with `prefix`, linearizably.
    pub async fn list_records(
        &self,
        group: GroupId,
        ns: &str,
        prefix: &str,
    ) -> Result<Vec<(String, Value)>> {
        let req = ReadRequest::ListRecords {
            ns: ns.into(),
            prefix: prefix.into(),
        };
        match self.read(group, req).await? {
            ReadResponse::Records(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// Records of a namespace of the metadata group from this node's replica (may lag the
    /// leader slightly; every node keeps one).
    pub fn local_meta_records(&self, ns: &str) -> Result<Vec<(String, Value)>> {
        local_read::list_records(&self.inner.store, META_GROUP, ns, now_ms())
    }

    /// One record of the metadata group from this node's replica (may lag the leader).
    pub fn local_meta_record(&self, ns: &str, key: &str) -> Result<Option<Value>> {
        local_read::get_record(&self.inner.store, META_GROUP, ns, key, now_ms())
    }

    /// Cluster members as this node's metadata replica knows them.
    pub fn local_nodes(&self) -> Vec<NodeRecord> {
        self.local_meta_records(NS_NODE)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(_, v)| serde_json::from_value(v).ok())
            .collect()
    }

    /// The state of every group on this node.
    pub fn status(&self) -> NodeStatus {
        let groups = self
            .inner
            .groups
            .iter()
            .enumerate()
            .map(|(g, raft)| {
                let m = raft.metrics().borrow_watched().clone();
                let membership = m.membership_config.membership();
                GroupStatus {
                    group: g as GroupId,
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
                    halted: m.running_state.as_ref().err().map(|e| e.to_string()),
                }
            })
            .collect();
        NodeStatus {
            node_id: self.inner.node_id,
            groups,
        }
    }

    /// Whether this node's groups can serve (halted, leaderless and stuck groups named).
    pub fn health(&self) -> crate::health::Health {
        self.inner
            .apply_watch
            .assess(&self.status(), std::time::Instant::now())
    }

    /// Approximate bytes of this node's RocksDB.
    pub fn storage_bytes(&self) -> u64 {
        self.inner.store.approximate_size()
    }

    /// Handles an admin request addressed to this node.
    pub async fn admin(&self, req: AdminRequest) -> Result<AdminResponse> {
        match req {
            AdminRequest::ClusterInfo => Ok(AdminResponse::ClusterInfo {
                settings: self.settings(),
                nodes: self.local_nodes(),
            }),
            AdminRequest::Join(record) => {
                self.put_node_record(&record).await?;
                Ok(AdminResponse::Done)
            }
            AdminRequest::RemoveNode(id) => {
                self.remove_node(id).await?;
                Ok(AdminResponse::Done)
            }
            AdminRequest::Status => Ok(AdminResponse::Status(self.status())),
            AdminRequest::Compact => {
                self.compact().await;
                Ok(AdminResponse::Done)
            }
            AdminRequest::TransferLeader { group, to } => {
                let raft = self.group(group)?;
                let m = raft.metrics().borrow_watched().clone();
                if m.current_leader != Some(self.inner.node_id) {
                    return Err(Error::NotLeader {
                        group,
                        leader: m.current_leader,
                        leader_addr: None,
                    });
                }
                raft.trigger()
                    .transfer_leader(to)
                    .await
                    .map_err(|e| Error::Unavailable(e.to_string()))?;
                Ok(AdminResponse::Done)
            }
        }
    }

    async fn put_node_record(&self, record: &NodeRecord) -> Result<()> {
        let value = serde_json::to_value(record)?;
        self.put_record(META_GROUP, NS_NODE, &record.id.to_string(), value, None)
            .await?;
        Ok(())
    }

    /// Marks a node removed; placement then moves its replicas to the remaining nodes.
    pub async fn remove_node(&self, id: NodeId) -> Result<()> {
        let nodes = self.local_nodes();
        let Some(mut record) = nodes.iter().find(|n| n.id == id).cloned() else {
            return Err(Error::InvalidOperation(format!(
                "node {id} is not a member"
            )));
        };
        let active = nodes
            .iter()
            .filter(|n| n.state == NodeState::Active)
            .count();
        if record.state == NodeState::Active && active <= 1 {
            return Err(Error::InvalidOperation(
                "cannot remove the last active node".into(),
            ));
        }
        record.state = NodeState::Removed;
        self.put_node_record(&record).await
    }

    /// Snapshots every local group whose log grew past a threshold since its last snapshot,
    /// then compacts the Raft log column family.
    pub async fn compact(&self) {
        for (g, raft) in self.inner.groups.iter().enumerate() {
            let m = raft.metrics().borrow_watched().clone();
            let applied = m.last_applied.map(|l| l.index).unwrap_or(0);
            let snap = m.snapshot.map(|l| l.index).unwrap_or(0);
            if applied.saturating_sub(snap) >= 1000 {
                if let Err(e) = raft.trigger().snapshot().await {
                    tracing::warn!(group = g, "snapshot trigger failed: {e}");
                }
            }
        }
        let store = Arc::clone(&self.inner.store);
        let _ = tokio::task::spawn_blocking(move || {
            let cf = crate::storage::keys::CF_RAFT_LOG;
            store.compact_range(cf, &[0u8; 4], &[0xffu8; 5])
        })
        .await;
    }

    /// Stops background work and every group.
    pub async fn shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
        for raft in &self.inner.groups {
            let _ = raft.shutdown().await;
        }
        if let Ok(mut tasks) = self.inner.tasks.lock() {
            for t in tasks.drain(..) {
                t.abort();
            }
        }
    }
}

/// Asks a member of the cluster to join for the cluster's settings, retrying for a while (the
/// member may itself be starting).
async fn fetch_settings(addr: &str) -> Result<ClusterSettings> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match PeerRouter::admin_at(addr, &AdminRequest::ClusterInfo, Duration::from_secs(2)).await {
            Ok(AdminResponse::ClusterInfo { settings, .. }) => return Ok(settings),
            Ok(other) => return Err(Error::Internal(format!("unexpected answer {other:?}"))),
            Err(e) if Instant::now() >= deadline => {
                return Err(Error::Unavailable(format!(
                    "cannot reach {addr} to join: {e}"
                )))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Makes sure this node's member record (and, on the first node, the cluster settings) is in
/// the metadata group, with its current addresses. Retries until it succeeds.
async fn register_self(cluster: Cluster, join_addr: Option<String>) {
    let inner = &cluster.inner;
    let mut shutdown = cluster.shutdown_signal();
    let me = NodeRecord {
        id: inner.node_id,
        rpc_addr: inner.rpc_addr.clone(),
        http_addr: inner.http_addr.clone(),
        state: NodeState::Active,
    };
    let mut attempt = 0u32;
    loop {
        let current = cluster.local_nodes().into_iter().find(|n| n.id == me.id);
        let settings_known = cluster
            .local_meta_records(NS_CLUSTER)
            .map(|r| r.iter().any(|(k, _)| k == SETTINGS_KEY))
            .unwrap_or(false);
        let mut wanted = me.clone();
        if let Some(c) = &current {
            wanted.state = c.state; // never undo a removal by restarting
        }
        if current.as_ref() == Some(&wanted) && (settings_known || join_addr.is_some()) {
            return;
        }
        let result = match &join_addr {
            Some(addr) if current.is_none() => {
                PeerRouter::admin_at(addr, &AdminRequest::Join(wanted), Duration::from_secs(10))
                    .await
                    .map(|_| ())
            }
            _ => {
                let mut r = Ok(());
                if !settings_known && join_addr.is_none() {
                    let settings = serde_json::to_value(inner.settings).unwrap_or(Value::Null);
                    r = cluster
                        .put_record(META_GROUP, NS_CLUSTER, SETTINGS_KEY, settings, None)
                        .await
                        .map(|_| ());
                }
                if r.is_ok() && current.as_ref() != Some(&wanted) {
                    r = cluster.put_node_record(&wanted).await;
                }
                r
            }
        };
        match result {
            // The local replica of group 0 may not have applied it yet: check again shortly.
            Ok(()) => tokio::time::sleep(Duration::from_millis(500)).await,
            Err(e) => {
                attempt += 1;
                if attempt % 20 == 1 {
                    tracing::info!("registering this node in the cluster: {e} (retrying)");
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    _ = shutdown.changed() => return,
                }
            }
        }
    }
}

/// Groups where this node is the leader, from the local metrics.
pub(crate) fn led_groups(cluster: &Cluster) -> Vec<GroupId> {
    cluster
        .inner
        .groups
        .iter()
        .enumerate()
        .filter(|(_, r)| r.metrics().borrow_watched().current_leader == Some(cluster.inner.node_id))
        .map(|(g, _)| g as GroupId)
        .collect()
}

/// Node ids to rpc addresses of the active members.
pub(crate) fn member_addrs(cluster: &Cluster) -> HashMap<NodeId, String> {
    cluster
        .local_nodes()
        .into_iter()
        .filter(|n| n.state == NodeState::Active)
        .map(|n| (n.id, n.rpc_addr))
        .collect()
}

/// Sends an admin request to the node at the gRPC address `addr` (for tools and tests).
pub async fn admin_at(addr: &str, req: AdminRequest, timeout: Duration) -> Result<AdminResponse> {
    PeerRouter::admin_at(addr, &req, timeout).await
}

/// The error for a read answered with another variant than its request asks for.
fn unexpected(r: ReadResponse) -> Error {
    Error::Internal(format!("unexpected read response {r:?}"))
}
