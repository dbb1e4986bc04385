//! `Cluster`: the one door the node crate uses. Its methods are all the node may ask: of this
//! node's [`Replicas`] (`door`: proposals, reads, records and objects through their owning
//! group), and of the node's life: `bootstrap` opens the store and groups and starts the peer services, placement
//! and the scheduler; `membership` answers admin requests (joins, removals, status); `drain`
//! hands leaderships over before the node stops; queries
//! run through its [`Coordinator`], schema operations through a [`Catalog`], stored files
//! through its [`crate::services::files::Files`].
//!
//! Layering inside the crate (the floors `lib.rs` declares, checked by
//! `scripts/module-cycles.py`): `cluster` → `services` (queries, catalog, change_tail, files,
//! placement, reclaim, scheduler) and `peer_service` → `replicas` (routing, records) →
//! `statemachine`, `rpc`, `network`, `local_read` → the leaves (query engine, schema rules,
//! change log, files' records, raft, storage). Nothing below `cluster` holds a `Cluster`.

mod bootstrap;
mod door;
mod drain;
mod membership;
mod restore;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::ids::NodeId;
use crate::raft::RaftTuning;
use crate::replicas::Replicas;
use crate::services::catalog::Catalog;
use crate::services::queries::Coordinator;

pub use bootstrap::admin_at;
pub use restore::RestoreTarget;

/// How a node starts.
#[derive(Debug, Clone)]
pub enum Bootstrap {
    /// Create a new cluster with this node as its first member.
    Init {
        shards: u32,
        replicas: u32,
        /// Log indexes of changes each group keeps (`changes::KEPT_ENTRIES` by default).
        changes_kept: u64,
    },
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
    pub rpc_listen: std::net::SocketAddr,
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
    /// How often the scheduler checks that every group's replicas agree (None: never).
    pub check_every: Option<Duration>,
    /// Deadline of each shard's part of a query or aggregation (scans of large unindexed
    /// classes take seconds); point reads and writes keep the shorter forward deadline.
    pub query_timeout: Duration,
    /// Queries (listings, counts, aggregations) this node runs at once; more answer 503.
    pub max_queries_in_flight: usize,
    /// Threads that read for listings, counts and aggregations at once (0: one per core);
    /// other bulk reads wait for one (`Replicas::local_read_groups`).
    pub bulk_read_threads: usize,
    /// How the node's RocksDB uses memory.
    pub store: crate::storage::StoreTuning,
    /// How often copies of stored files are re-replicated and reclaimed.
    pub file_upkeep: crate::services::files::upkeep::UpkeepTimes,
    /// The S3-compatible bucket files' bytes go to instead of copies on the nodes
    /// (`--files-backend`).
    pub files_bucket: Option<crate::files::bucket::BucketOptions>,
    /// Mutual TLS of the links to and from peers (None: plaintext; decisions/0031).
    pub peer_tls: Option<Arc<crate::tls::PeerTls>>,
    /// What this build can do that older ones cannot, recorded in the member record.
    pub features: Vec<String>,
    /// The disk's marks and ballast (`disk`).
    pub disk: crate::disk::DiskLimits,
}

struct Inner {
    replicas: Replicas,
    files: crate::services::files::Files,
    queries: Coordinator,
    options: ClusterOptions,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    apply_watch: crate::health::ApplyWatch,
    /// The secret the nodes share outside the replicated state, once the node crate set it.
    shared_secret: std::sync::OnceLock<Vec<u8>>,
    /// This start created the cluster (`--init` on an empty data dir).
    created: bool,
    /// The groups' parts of backups this node writes (`services::backup`).
    backups: crate::services::backup::GroupJobs,
    /// An administrator asked this node to drain (`drain`).
    drain_asked: tokio::sync::watch::Sender<bool>,
}

/// A running node of the cluster (cheap to clone).
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl Cluster {
    /// This node's replicas: the handle the layers below the cluster work with.
    pub(crate) fn replicas(&self) -> &Replicas {
        &self.inner.replicas
    }

    /// Scans, counts, aggregations and sub-query resolution across the groups of a class.
    pub fn queries(&self) -> &Coordinator {
        &self.inner.queries
    }

    /// Stored files: uploads, reads, deletes (decisions/0020).
    pub fn files(&self) -> &crate::services::files::Files {
        &self.inner.files
    }

    /// Class schemas: checks of writes against them and the schema endpoints' operations.
    pub fn catalog(&self) -> Catalog<'_> {
        Catalog::new(&self.inner.replicas)
    }

    /// Whether this node's groups can serve (halted, leaderless and stuck groups named).
    pub fn health(&self) -> crate::health::Health {
        let election = Duration::from_millis(self.inner.options.tuning.election_max_ms);
        let members = self.active_members().len().max(1);
        let wanted = (self.replicas().settings().replicas as usize).min(members);
        // A replica removed from its group without knowing it is not this node's to serve.
        let departed = self.replicas().departed();
        let mut status = self.status();
        status.groups.retain(|g| !departed.contains(&g.group));
        self.inner
            .apply_watch
            .assess(&status, std::time::Instant::now(), election, wanted)
    }

    /// Whether this start created the cluster (`--init` on an empty data dir; a restart with
    /// `--init` resumes and is not).
    pub fn created_here(&self) -> bool {
        self.inner.created
    }

    /// Sets the secret this node hands to peers that ask for it (`AdminRequest::SharedSecret`;
    /// the first one set stays).
    pub fn set_shared_secret(&self, secret: Vec<u8>) {
        let _ = self.inner.shared_secret.set(secret);
    }

    /// Whether `feature` is on: the cluster finalized it (`services::upgrade`), so its new
    /// commands and formats may be used.
    pub fn feature_on(&self, feature: &str) -> bool {
        crate::services::upgrade::is_on(&self.inner.replicas, feature)
    }

    /// The features that are on, as this node's replica of the metadata group holds them.
    pub fn finalized_features(&self) -> Vec<String> {
        crate::services::upgrade::local_record(&self.inner.replicas)
            .map(|r| r.features.into_iter().collect())
            .unwrap_or_default()
    }

    /// The cluster's version as this node's replica of the metadata group holds it (no
    /// network: `/health` and metrics).
    pub fn upgrade_status(&self) -> crate::admin::UpgradeStatus {
        crate::services::upgrade::status_local(&self.inner.replicas)
    }

    /// Asks the cluster's other members for their shared secret; the first answer, if any
    /// member has one.
    pub async fn fetch_shared_secret(&self, also: Option<&str>) -> Option<Vec<u8>> {
        let me = self.node_id();
        let mut addrs: Vec<String> = self
            .local_nodes()
            .into_iter()
            .filter(|n| n.id != me)
            .map(|n| n.rpc_addr)
            .collect();
        addrs.extend(also.map(str::to_string));
        for addr in addrs {
            let asked = crate::rpc::router::PeerRouter::admin_at(
                &addr,
                &crate::admin::AdminRequest::SharedSecret,
                Duration::from_secs(3),
                self.peer_tls(),
            )
            .await;
            if let Ok(crate::admin::AdminResponse::SharedSecret(Some(secret))) = asked {
                return Some(secret);
            }
        }
        None
    }

    /// The mutual TLS of this node's peer links, to reload on SIGHUP (None: plaintext).
    pub fn peer_tls(&self) -> Option<&Arc<crate::tls::PeerTls>> {
        self.inner.options.peer_tls.as_ref()
    }

    fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(fut);
        if let Ok(mut tasks) = self.inner.tasks.lock() {
            tasks.push(handle);
        }
    }

    /// Stops background work and every group.
    pub async fn shutdown(&self) {
        self.inner.replicas.shutdown().await;
        if let Ok(mut tasks) = self.inner.tasks.lock() {
            for t in tasks.drain(..) {
                t.abort();
            }
        }
    }
}
