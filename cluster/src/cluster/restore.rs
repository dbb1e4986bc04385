//! `basalt admin restore`: the first node of a new cluster, made offline from a backup
//! (`services::backup`). The backup's manifest is checked first; then every group's state is
//! installed (two at a time) in a new data dir as a snapshot at the backup's log index, each
//! object checked against its size and SHA-256 as it is read, its membership replaced by this
//! node alone, and the group's log starts after it (vote and purge point at that index). The
//! old cluster's member records are dropped: the node records itself when it starts, which
//! marks the restore done (one that failed part-way is started again from nothing).
//!
//! The stored files the backup copied are put in the node's `files/` (each checked against its
//! size, MD5 and SHA-256); files the backup only listed stay in their bucket.
//!
//! The node then starts with `basalt serve` on that data dir and elects itself leader of every
//! group; more nodes join it (`--join`) and receive the groups' states as snapshots, as they do
//! in any cluster, and the copies of files they are ranked for (the files' upkeep).
//! Neighbours: `bootstrap` (the node's identity), `statemachine::snapshot` (install),
//! `raft::log_store`, the backup's `verify` (the manifest's checks) and `destination`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, Membership};

use super::bootstrap::NodeIdentity;
use super::Cluster;
use crate::backup_manifest::{BackedUpFile, GroupBackup, Manifest};
use crate::error::{Error, Result};
use crate::files::copies::CopyStore;
use crate::ids::{NodeId, META_GROUP};
use crate::namespace::Namespace;
use crate::raft::{RocksLogStore, SnapshotMeta, StoredMembership, Vote};
use crate::services::backup::verify::read_manifest;
use crate::services::backup::Destination;
use crate::statemachine::snapshot::{self, SnapshotFile};
use crate::storage::keys::{self, CF_SM, NODE_IDENTITY};
use crate::storage::{Store, StoreTuning, WriteBatch};

/// The node a restore makes.
#[derive(Debug, Clone)]
pub struct RestoreTarget {
    /// A data dir without a node in it.
    pub data_dir: PathBuf,
    pub node_id: NodeId,
    /// The gRPC address its peers will reach it at (its `--rpc-addr`).
    pub rpc_addr: String,
}

impl Cluster {
    /// Makes `target`'s data dir the first node of a new cluster holding the backup in `src`:
    /// the backup's manifest. Refuses a damaged backup and a data dir that holds a node.
    pub async fn restore(src: &Destination, target: &RestoreTarget) -> Result<Manifest> {
        // The manifest is checked first; each object as it is read (its size and SHA-256), so
        // that a damaged backup leaves no node that starts.
        let report = read_manifest(src).await?;
        let manifest = match (report.manifest, report.problems.is_empty()) {
            (Some(m), true) => m,
            (_, _) => {
                return Err(Error::InvalidOperation(format!(
                    "the backup in {} is damaged: {}",
                    src.shown(),
                    report.problems.join("; ")
                )))
            }
        };
        let db_dir = target.data_dir.join("db");
        let snapshots = target.data_dir.join("snapshots");
        if db_dir.exists() {
            let store = Store::open_tuned(&db_dir, &StoreTuning::default())?;
            if store.get_default(NODE_IDENTITY)?.is_some() {
                return Err(Error::InvalidOperation(format!(
                    "{} holds a node already: restore into a new data dir",
                    target.data_dir.display()
                )));
            }
            // What a restore that failed part-way left: started again from nothing.
            drop(store);
            std::fs::remove_dir_all(&db_dir)?;
            let _ = std::fs::remove_dir_all(&snapshots);
        }
        std::fs::create_dir_all(&db_dir)?;
        let made = restore_groups(src, target, &manifest, &db_dir, &snapshots).await;
        if made.is_err() {
            // Nothing half made is left to be mistaken for a node.
            let _ = std::fs::remove_dir_all(&db_dir);
            let _ = std::fs::remove_dir_all(&snapshots);
        }
        made.map(|()| manifest)
    }
}

/// Installs every group of `manifest` from `src` into the new store at `db_dir` (snapshots in
/// `snapshots`), then the stored files and the node's identity.
async fn restore_groups(
    src: &Destination,
    target: &RestoreTarget,
    manifest: &Manifest,
    db_dir: &Path,
    snapshots: &Path,
) -> Result<()> {
    {
        let store = Store::open_tuned(db_dir, &StoreTuning::default())?;
        let incoming = snapshots.join("incoming");
        std::fs::create_dir_all(&incoming)?;
        let install = |g: &GroupBackup| {
            let (store, incoming, snapshots) = (Arc::clone(&store), &incoming, &snapshots);
            let g = g.clone();
            async move {
                let part = incoming.join(format!("restore-g{}.part", g.group));
                let meta = download(src, &g, &part, target).await?;
                let (group, dir, store2) = (
                    g.group,
                    snapshots.join(format!("g{}", g.group)),
                    Arc::clone(&store),
                );
                let installed_meta = meta.clone();
                tokio::task::spawn_blocking(move || {
                    snapshot::install(
                        group,
                        &store2,
                        &dir,
                        &installed_meta,
                        SnapshotFile { path: part },
                    )
                })
                .await
                .map_err(|e| Error::Internal(format!("restore: {e}")))??;
                if let Some(last) = meta.last_log_id {
                    let mut log = RocksLogStore::new(g.group, Arc::clone(&store));
                    let io = |e: std::io::Error| Error::Storage(e.to_string());
                    log.save_vote(&Vote::new(last.leader_id.term, target.node_id))
                        .await
                        .map_err(io)?;
                    log.purge(last).await.map_err(io)?;
                    log.save_committed(Some(last)).await.map_err(io)?;
                }
                Ok::<_, Error>(())
            }
        };
        {
            use futures::{StreamExt, TryStreamExt};
            futures::stream::iter(&manifest.groups)
                .map(install)
                .buffer_unordered(INSTALLING)
                .try_collect::<Vec<()>>()
                .await?;
        }
        restore_files(src, manifest, &target.data_dir.join("files")).await?;
        // The metadata group without the old members, and a snapshot of it that agrees: the
        // one nodes joining later receive.
        drop_old_members(&store)?;
        let (meta_store, meta_dir) = (Arc::clone(&store), snapshots.join(format!("g{META_GROUP}")));
        tokio::task::spawn_blocking(move || snapshot::build(META_GROUP, &meta_store, &meta_dir))
            .await
            .map_err(|e| Error::Internal(format!("restore: {e}")))??;
        let identity = NodeIdentity {
            node_id: target.node_id,
            settings: manifest.settings,
            init_pending: false,
        };
        store.put_default_synced(NODE_IDENTITY, &serde_json::to_vec(&identity)?)?;
        let _ = std::fs::remove_dir_all(&incoming);
        Ok(())
    }
}

/// Groups downloaded and installed at a time (each a thread decompressing and one loading).
const INSTALLING: usize = 2;

/// Files restored at a time.
const RESTORING: usize = 4;

/// Puts a copy of every stored file the backup holds into `dir` (the new node's copies).
async fn restore_files(src: &Destination, manifest: &Manifest, dir: &Path) -> Result<()> {
    use futures::{StreamExt, TryStreamExt};
    let copies = CopyStore::open(dir)?;
    let (mut copied, mut elsewhere) = (0u64, 0u64);
    for files in manifest.groups.iter().filter_map(|g| g.files.as_ref()) {
        let (listed, _, _) = src
            .read_through(&files.object, |r| -> Result<Vec<BackedUpFile>> {
                use std::io::BufRead;
                let mut listed = Vec::new();
                for line in std::io::BufReader::new(r).lines() {
                    let entry: BackedUpFile = serde_json::from_str(&line?)?;
                    if entry.sha256.is_some() {
                        listed.push(entry);
                    }
                }
                Ok(listed)
            })
            .await?;
        let listed = listed?;
        copied += listed.len() as u64;
        elsewhere += files.in_bucket + files.missing;
        futures::stream::iter(listed)
            .map(|entry| restore_file(src, &copies, entry))
            .buffer_unordered(RESTORING)
            .try_collect::<Vec<()>>()
            .await?;
    }
    tracing::info!(
        copied,
        elsewhere,
        "stored files restored (those in a bucket stay there)"
    );
    Ok(())
}

/// Copies one file of the backup into `copies`, checked against the listing.
async fn restore_file(src: &Destination, copies: &CopyStore, entry: BackedUpFile) -> Result<()> {
    use futures::StreamExt;
    use sha2::{Digest, Sha256};
    if copies.get(&entry.id).is_some_and(|c| c.size == entry.size) {
        return Ok(());
    }
    let name = BackedUpFile::object_name(&entry.id);
    let mut stream = src.stream(&name).await?;
    let mut w = copies.writer(&entry.id).await?;
    let mut sha = Sha256::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        sha.update(&chunk);
        w.write(&chunk).await?;
    }
    let got = format!("{:x}", sha.finalize());
    if entry.sha256.as_deref() != Some(got.as_str()) {
        return Err(Error::Storage(format!(
            "{}/{name} changed while it was restored",
            src.shown()
        )));
    }
    w.finish(entry.size, &entry.md5).await?;
    Ok(())
}

/// Writes group `g`'s object to `part`, decompressed, with the new node as the only member:
/// the snapshot's meta.
async fn download(
    src: &Destination,
    g: &GroupBackup,
    part: &Path,
    target: &RestoreTarget,
) -> Result<SnapshotMeta> {
    let (part, node, addr) = (part.to_path_buf(), target.node_id, target.rpc_addr.clone());
    let (written, _, sha256) = src
        .read_through(&g.object, move |r| -> Result<SnapshotMeta> {
            let mut decoder = zstd::stream::read::Decoder::new(r)?;
            let mut w = std::io::BufWriter::new(std::fs::File::create(&part)?);
            let meta = snapshot::copy_state(&mut decoder, &mut w, |meta| {
                let members = BTreeMap::from([(node, BasicNode::new(addr))]);
                let voters = vec![BTreeSet::from([node])];
                let membership = Membership::new(voters, members)
                    .map_err(|e| Error::Internal(format!("restore: {e}")))?;
                Ok(SnapshotMeta {
                    last_membership: StoredMembership::new(meta.last_log_id, membership),
                    ..meta
                })
            })?;
            let file = w.into_inner().map_err(|e| Error::Storage(e.to_string()))?;
            file.sync_all()?;
            Ok(meta)
        })
        .await?;
    if sha256 != g.sha256 {
        return Err(Error::Storage(format!(
            "{}/{} changed while it was restored",
            src.shown(),
            g.object
        )));
    }
    written
}

/// Removes the old cluster's member records from the metadata group's state.
fn drop_old_members(store: &Store) -> Result<()> {
    let prefix = keys::record_ns_prefix(META_GROUP, Namespace::Node.name());
    let mut end = prefix.clone();
    if let Some(last) = end.last_mut() {
        *last = last.saturating_add(1);
    }
    let mut batch = WriteBatch::default();
    batch.delete_range_cf(store.cf(CF_SM)?, prefix, end);
    store.write_until_room_blocking(batch, true)
}
