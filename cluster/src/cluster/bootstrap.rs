//! Starting a node: its identity in the data dir (which node, which cluster settings), the
//! replicas of every group, the peer services, and the background work (member registration,
//! placement, scheduler). A new cluster's first node initializes every group with itself as
//! the only member; a joining node asks a member for the settings and registers itself;
//! a restarted node resumes from its identity.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Bootstrap, Cluster, ClusterOptions, Inner};
use crate::admin::{
    AdminRequest, AdminResponse, ClusterSettings, NodeRecord, NodeState, SETTINGS_KEY,
};
use crate::disk::{DiskLevel, DiskWatch};
use crate::error::{Error, Result};
use crate::ids::META_GROUP;
use crate::namespace::Namespace;
use crate::replicas::{LocalStorage, ReadService, Replicas};
use crate::rpc::router::PeerRouter;
use crate::services::queries::Coordinator;
use crate::services::upgrade;
use crate::storage::keys::NODE_IDENTITY;
use crate::storage::Store;
use crate::tls::PeerTls;

/// What a node keeps about itself, in the default column family.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct NodeIdentity {
    pub(super) node_id: crate::ids::NodeId,
    pub(super) settings: ClusterSettings,
    /// Set while `--init` has not yet made this node the first member of every group: a
    /// start interrupted there (a crash, a port already taken) finishes it on the next one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) init_pending: bool,
}

impl Cluster {
    /// Opens the node's storage and groups, starts its gRPC server and background work.
    pub async fn start(opts: ClusterOptions) -> Result<Cluster> {
        let bucket = opts
            .files_bucket
            .as_ref()
            .map(crate::files::bucket::Bucket::open)
            .transpose()?;
        // Bound before anything is written: a port already taken fails the start with the data
        // dir as it was.
        let listener = tokio::net::TcpListener::bind(opts.rpc_listen)
            .await
            .map_err(|e| Error::Listen {
                addr: opts.rpc_listen.to_string(),
                cause: e.to_string(),
            })?;
        std::fs::create_dir_all(&opts.data_dir)?;
        let db_dir = opts.data_dir.join("db");
        let disk = Arc::new(DiskWatch::new(
            &db_dir,
            vec![
                db_dir.clone(),
                opts.data_dir.join("files"),
                opts.data_dir.join("snapshots"),
            ],
            opts.disk,
        )?);
        if disk.status().level == DiskLevel::Critical {
            // A full disk must not keep the node from starting: the ballast's room lets the
            // store open, replay its log and serve reads while space is freed.
            let freed = disk.release_ballast()?;
            tracing::warn!(
                freed,
                free = disk.status().free_bytes,
                "the disk is nearly full at start: writes that add data are refused until \
                 space is freed"
            );
        }
        let store = Store::open_tuned(&db_dir, &opts.store)?;
        crate::statemachine::upgrade::upgrade_objects(&store)?;
        crate::statemachine::upgrade::count_usage(&store)?;
        crate::statemachine::upgrade::count_changes(&store)?;
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
            // An `--init` interrupted before every group had its first member: finished now.
            (Some(id), _) if id.init_pending => (id.settings, true, None),
            (Some(id), _) => (id.settings, false, None),
            (None, Bootstrap::Init { shards, replicas, changes_kept }) => {
                if *shards == 0 || *replicas == 0 {
                    return Err(Error::InvalidOperation("--shards and --replicas must be at least 1".into()));
                }
                if *changes_kept < crate::changes::TRIM_EVERY {
                    return Err(Error::InvalidOperation(format!(
                        "--change-log-entries must be at least {}", crate::changes::TRIM_EVERY
                    )));
                }
                let settings = ClusterSettings {
                    shards: *shards,
                    replicas: *replicas,
                    changes_kept: *changes_kept,
                };
                (settings, true, None)
            }
            (None, Bootstrap::Join { addr }) => {
                let build = build_features(&opts.features);
                let who = format!("node {}", opts.node_id);
                (fetch_settings(addr, opts.peer_tls.as_ref(), &build, &who).await?, false, Some(addr.clone()))
            }
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
                init_pending: fresh_init,
            };
            store.put_default_synced(NODE_IDENTITY, &serde_json::to_vec(&id)?)?;
        }

        let router = PeerRouter::new(opts.rpc_source_ip, opts.peer_tls.clone());
        router.learn(opts.node_id, &opts.rpc_addr);
        let replicas = Replicas::open(
            opts.node_id,
            settings,
            LocalStorage {
                store,
                data_dir: &opts.data_dir,
                disk: Arc::clone(&disk),
            },
            router,
            &opts.tuning,
            ReadService {
                serve: crate::local_read::serve_read,
                bulk_threads: opts.bulk_read_threads,
            },
        )
        .await?;
        // Routed by the slot map the local replica of the metadata group holds from the first
        // request on (a refused record leaves the initial map, and `follow_metadata` says why).
        let _ = replicas.refresh_slot_map();
        replicas.record_slot_metrics();
        // A build without a feature the cluster turned on would misread what it wrote (an
        // upgrade rolled back after `basalt admin upgrade finalize`).
        if let Some(record) = upgrade::local_record(&replicas) {
            let on: Vec<String> = record.features.into_iter().collect();
            let build = build_features(&opts.features);
            if let Some(e) = upgrade::refuse_build(&on, &build, &format!("node {}", opts.node_id)) {
                replicas.shutdown().await;
                return Err(e);
            }
        }
        let copies = crate::files::copies::CopyStore::open(&opts.data_dir.join("files"))?;
        let files = crate::services::files::Files::new(replicas.clone(), copies, bucket);
        if let Some(bucket) = files.bucket().cloned() {
            // Said at start, rather than as 503s to the first uploads: a missing bucket or
            // wrong credentials.
            tokio::spawn(async move {
                match bucket.check().await {
                    Ok(()) => tracing::info!(bucket = bucket.url(), "files go to the bucket"),
                    Err(e) => tracing::error!("{e}"),
                }
            });
        }
        let files_bucket = opts.files_bucket.clone();
        let cluster = Cluster {
            inner: Arc::new(Inner {
                files: files.clone(),
                queries: Coordinator::new(
                    replicas.clone(),
                    opts.query_timeout,
                    opts.max_queries_in_flight,
                ),
                replicas: replicas.clone(),
                options: opts,
                tasks: Mutex::new(Vec::new()),
                apply_watch: Default::default(),
                shared_secret: Default::default(),
                created: fresh_init,
                backups: crate::services::backup::GroupJobs::new(files.clone(), files_bucket),
                drain_asked: tokio::sync::watch::Sender::new(false),
            }),
        };
        cluster.spawn(crate::peer_service::serve(
            replicas.clone(),
            Arc::new(cluster.clone()),
            files.clone(),
            listener,
            cluster.inner.options.peer_tls.clone(),
        ));
        if fresh_init {
            initialize_groups(&replicas, &cluster.inner.options.rpc_addr).await?;
            let id = NodeIdentity {
                node_id: cluster.inner.options.node_id,
                settings,
                init_pending: false,
            };
            replicas
                .store()
                .put_default_synced(NODE_IDENTITY, &serde_json::to_vec(&id)?)?;
        }
        cluster.spawn(register_self(cluster.clone(), join_addr));
        cluster.spawn(stop_when_too_old(cluster.clone()));
        cluster.spawn(follow_metadata(cluster.clone()));
        cluster.spawn(crate::services::reclaim::run(
            replicas.clone(),
            Arc::clone(&disk),
        ));
        cluster.spawn(watch_disk(cluster.clone(), disk));
        cluster.spawn(crate::services::placement::run(replicas.clone()));
        cluster.spawn(crate::services::departures::run(
            replicas.clone(),
            Duration::from_millis(cluster.inner.options.tuning.election_max_ms * 2),
        ));
        cluster.spawn(crate::services::files::upkeep::run(
            files,
            cluster.inner.options.file_upkeep,
        ));
        let jobs = crate::services::scheduler::Intervals {
            ttl_sweep: cluster.inner.options.ttl_sweep_every,
            compaction: cluster.inner.options.compact_every,
            consistency_check: cluster.inner.options.check_every,
        };
        cluster.spawn(crate::services::scheduler::run(replicas, jobs));
        Ok(cluster)
    }
}

/// What this build can do that older builds cannot (`services::upgrade`): the gates of the
/// services and `extra` (the node crate's), less those `upgrade::TESTING_WITHOUT_FEATURES`
/// names.
pub(super) fn build_features(extra: &[String]) -> Vec<String> {
    let without: Vec<String> = std::env::var(upgrade::TESTING_WITHOUT_FEATURES)
        .unwrap_or_default()
        .split(',')
        .map(|f| f.trim().to_string())
        .filter(|f| !f.is_empty())
        .collect();
    let mut features: std::collections::BTreeSet<String> = crate::services::backup::FEATURES
        .iter()
        .chain(crate::services::rebalance::FEATURES.iter())
        .chain(crate::services::splits::FEATURES.iter())
        .map(|f| f.to_string())
        .chain(extra.iter().cloned())
        .collect();
    features.retain(|f| !without.contains(f));
    features.into_iter().collect()
}

/// Makes this node the only member of every group that is not initialized yet.
async fn initialize_groups(replicas: &Replicas, rpc_addr: &str) -> Result<()> {
    let members = BTreeMap::from([(replicas.node_id(), BasicNode::new(rpc_addr))]);
    for (group, raft) in replicas.groups() {
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

/// Asks a member of the cluster to join for the cluster's settings, retrying for a while (the
/// member may itself be starting).
/// A build without a feature the cluster finalized (`build` lacks it) is refused at once.
async fn fetch_settings(
    addr: &str,
    tls: Option<&Arc<PeerTls>>,
    build: &[String],
    who: &str,
) -> Result<ClusterSettings> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match PeerRouter::admin_at(
            addr,
            &AdminRequest::ClusterInfo,
            Duration::from_secs(2),
            tls,
        )
        .await
        {
            Ok(AdminResponse::ClusterInfo {
                settings,
                finalized_features,
                ..
            }) => {
                return match upgrade::refuse_build(&finalized_features, build, who) {
                    Some(e) => Err(e),
                    None => Ok(settings),
                }
            }
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
    let opts = &cluster.inner.options;
    let mut shutdown = cluster.replicas().shutdown_signal();
    let me = NodeRecord {
        id: opts.node_id,
        rpc_addr: opts.rpc_addr.clone(),
        http_addr: opts.http_addr.clone(),
        state: NodeState::Active,
        plaintext: opts.peer_tls.is_none(),
        features: build_features(&opts.features),
        version: upgrade::VERSION.to_string(),
        disk: None,
        // A start clears a drain the last run recorded.
        draining_since_ms: None,
    };
    let mut attempt = 0u32;
    loop {
        let current = cluster.local_nodes().into_iter().find(|n| n.id == me.id);
        let settings_known = cluster
            .local_meta_records(Namespace::Cluster)
            .map(|r| r.iter().any(|(k, _)| k == SETTINGS_KEY))
            .unwrap_or(false);
        let mut wanted = me.clone();
        if let Some(c) = &current {
            wanted.state = c.state; // never undo a removal by restarting
            wanted.disk = c.disk; // the disk watch keeps that (`publish_disk`)
        }
        if current.as_ref() == Some(&wanted) && (settings_known || join_addr.is_some()) {
            return;
        }
        let result = match &join_addr {
            Some(addr) if current.is_none() => PeerRouter::admin_at(
                addr,
                &AdminRequest::Join(wanted),
                Duration::from_secs(10),
                opts.peer_tls.as_ref(),
            )
            .await
            .map(|_| ()),
            _ => {
                let mut r = Ok(());
                if !settings_known && join_addr.is_none() {
                    let settings =
                        serde_json::to_value(cluster.replicas().settings()).unwrap_or(Value::Null);
                    r = cluster
                        .put_record(META_GROUP, Namespace::Cluster, SETTINGS_KEY, settings, None)
                        .await
                        .map(|_| ());
                }
                if r.is_ok() && current.as_ref() != Some(&wanted) {
                    r = cluster.put_node_record(&wanted).await.map(|_| ());
                }
                r
            }
        };
        match result {
            // The local replica of group 0 may not have applied it yet: check again shortly.
            Ok(()) => tokio::time::sleep(Duration::from_millis(500)).await,
            // A join refused for the build (a finalization came between the cluster's answer
            // at start and the join) is not retried: this build cannot be a member.
            Err(e) if join_addr.is_some() && current.is_none() && refused_build(&e) => {
                tracing::error!("{e}: stopping");
                std::process::exit(1);
            }
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

/// Whether `e` is a refusal of this node's build (`upgrade::refuse_build`).
fn refused_build(e: &Error) -> bool {
    matches!(e, Error::InvalidOperation(m) if m.contains(upgrade::REFUSAL_MARK))
}

/// How often a node looks for a newer slot map in its replica of the metadata group.
const SLOT_MAP_POLL: Duration = Duration::from_millis(250);

/// Takes up, every `SLOT_MAP_POLL`, what this node's replica of the metadata group holds: the
/// newest slot map to route by (`Replicas::refresh_slot_map`), and every member's address (a
/// node that leads no group sends no Raft message, and would otherwise know no peer's address
/// when it asks one for a check's digest, a backup's step or its status).
async fn follow_metadata(cluster: Cluster) {
    let mut shutdown = cluster.replicas().shutdown_signal();
    let mut refused_epoch = None;
    loop {
        cluster.replicas().member_addrs();
        cluster.replicas().retire_merged().await;
        if let Err(e) = cluster.replicas().refresh_slot_map() {
            // Said once per record, not every poll.
            let epoch = cluster.replicas().slot_map().epoch;
            if refused_epoch != Some(epoch) {
                tracing::error!("{e}: routing on by the map of epoch {epoch}");
                refused_epoch = Some(epoch);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(SLOT_MAP_POLL) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Stops this node (exit 1) when the cluster turns on a feature its build lacks: a node whose
/// replica of the metadata group had not applied the finalization when it stopped is let
/// start by the check at start, and learns it here.
async fn stop_when_too_old(cluster: Cluster) {
    let mut shutdown = cluster.replicas().shutdown_signal();
    let build = build_features(&cluster.inner.options.features);
    let who = format!("node {}", cluster.node_id());
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = shutdown.changed() => return,
        }
        // A removed node still hands its replicas over: it stops when they have moved.
        let removed = cluster
            .local_nodes()
            .iter()
            .any(|n| n.id == cluster.node_id() && n.state == NodeState::Removed);
        if removed {
            continue;
        }
        if let Some(e) = upgrade::refuse_build(&cluster.finalized_features(), &build, &who) {
            tracing::error!("{e}: stopping");
            std::process::exit(1);
        }
    }
}

/// How long the store may refuse writes for want of space while the disk has
/// `ROOM_TO_RESUME` free before the node exits with `STORE_STOPPED_CODE`.
const STORE_STOPPED_EXIT: Duration = Duration::from_secs(60);
/// Twice the room RocksDB waits for before it resumes writing (its largest memtable).
const ROOM_TO_RESUME: u64 = 128 << 20;
/// The exit code of a node whose store stays stopped with room on its disk (EX_SOFTWARE):
/// a supervisor starts it again, and the start reopens the store.
pub const STORE_STOPPED_CODE: i32 = 70;

/// Samples the disk every `disk::EVERY`: makes the ballast once there is room for it,
/// releases it when a write met a full disk (and exits when the store still refuses writes a
/// minute after the disk has room again), keeps the members whose disks are critical for
/// `Replicas::check_room`, and writes this node's level into its member record when it
/// crosses a mark (so every node refuses growth of the groups it holds, placement avoids it,
/// and `/health` and `basalt admin alarms` show it).
async fn watch_disk(cluster: Cluster, disk: Arc<DiskWatch>) {
    let mut shutdown = cluster.replicas().shutdown_signal();
    let ballast = Arc::clone(&disk);
    if let Ok(Err(e)) = tokio::task::spawn_blocking(move || ballast.ensure_ballast()).await {
        tracing::warn!("cannot make the disk ballast: {e}");
    }
    let me = cluster.node_id();
    let store = cluster.replicas().store();
    let mut stopped_since: Option<std::time::Instant> = None;
    loop {
        let mut now = disk.sample();
        if store.out_of_space() {
            // A write met a full disk the marks did not foresee (a burst between samples,
            // another program): the ballast gives RocksDB the room it needs to resume.
            if now.ballast_bytes > 0 {
                let ballast = Arc::clone(&disk);
                match tokio::task::spawn_blocking(move || ballast.release_ballast()).await {
                    Ok(Ok(held)) => {
                        tracing::error!(held, "a write met a full disk: the ballast is released")
                    }
                    Ok(Err(e)) => tracing::error!("cannot release the disk ballast: {e}"),
                    Err(e) => tracing::error!("cannot release the disk ballast: {e}"),
                }
                now = disk.sample();
            }
            let since = *stopped_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() >= STORE_STOPPED_EXIT && now.free_bytes >= ROOM_TO_RESUME {
                // RocksDB resumes by itself once it has room; writes still refused with room
                // for a minute mean an error only reopening the store clears.
                tracing::error!(
                    free = now.free_bytes,
                    "the store refuses writes although the disk has room again: exiting so that \
                     the node starts afresh (exit code {STORE_STOPPED_CODE})"
                );
                std::process::exit(STORE_STOPPED_CODE);
            }
        } else {
            stopped_since = None;
        }
        let nodes = cluster.local_nodes();
        cluster.replicas().set_full_nodes(
            nodes
                .iter()
                .filter(|n| n.id != me && n.disk_level() == DiskLevel::Critical)
                .map(|n| n.id)
                .collect(),
        );
        if let Some(mine) = nodes.iter().find(|n| n.id == me) {
            if mine.disk_level() != now.level {
                let disk = (now.level != DiskLevel::Ok).then_some(now);
                match cluster.update_node_record(me, |r| r.disk = disk).await {
                    Ok(()) => tracing::warn!(
                        level = now.level.name(),
                        free = now.free_bytes,
                        total = now.total_bytes,
                        "the disk crossed a mark"
                    ),
                    Err(e) => tracing::debug!("recording the disk's level: {e} (retrying)"),
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(crate::disk::EVERY) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Sends an admin request to the node at the gRPC address `addr` (for tools and tests), over
/// mutual TLS with `tls` (an admin's certificate).
pub async fn admin_at(
    addr: &str,
    req: AdminRequest,
    timeout: Duration,
    tls: Option<&Arc<PeerTls>>,
) -> Result<AdminResponse> {
    PeerRouter::admin_at(addr, &req, timeout, tls).await
}
