//! How a node comes to hold the cluster's secrets key at start (decisions/0032): from its key
//! file (`--secrets-key-file`, default `<data-dir>/secrets.key`); else, on `--init`, a new
//! one; else from a peer that has it (`AdminRequest::SharedSecret`, over the peer links' mutual
//! TLS: only nodes of the cluster's CA get it); else — a cluster older than sealing, where no
//! member has one — a new one, claimed for the cluster by inserting its check record in the
//! metadata group (of nodes racing, one wins and the others fetch the winner's). A key whose
//! check differs from the cluster's refuses to start the node. Caller: `serve`.

use std::path::Path;
use std::time::{Duration, Instant};

use basalt_cluster::ids::META_GROUP;
use basalt_cluster::namespace::Namespace;
use basalt_cluster::{Cluster, Error as ClusterError};
use serde_json::json;

use super::SecretsKey;

/// The key of the metadata group's record holding the cluster's key check.
const CHECK_RECORD: &str = "secrets";
/// How long a node waits for a peer or the metadata group before giving up its start.
const WAIT: Duration = Duration::from_secs(120);

/// The cluster's key check, when the metadata group can be read.
async fn cluster_check(cluster: &Cluster) -> Result<Option<String>, ClusterError> {
    Ok(cluster
        .get_record(META_GROUP, Namespace::Cluster, CHECK_RECORD)
        .await?
        .and_then(|v| v["check"].as_str().map(str::to_string)))
}

/// Claims `key` as the cluster's: true when this node's check is now the cluster's.
async fn claim(cluster: &Cluster, key: &SecretsKey) -> Result<bool, ClusterError> {
    let record = json!({"check": key.check()});
    match cluster
        .insert_record(META_GROUP, Namespace::Cluster, CHECK_RECORD, record, None)
        .await
    {
        Ok(_) => Ok(true),
        Err(ClusterError::Conflict(_)) => Ok(cluster_check(cluster).await? == Some(key.check())),
        Err(e) => Err(e),
    }
}

/// The key a node without a key file gets: a peer's, or one it claims for the cluster.
async fn obtain(cluster: &Cluster, join: Option<&str>) -> anyhow::Result<(SecretsKey, bool)> {
    let deadline = Instant::now() + WAIT;
    let mut last;
    loop {
        if let Some(bytes) = cluster.fetch_shared_secret(join).await {
            if let Some(key) = SecretsKey::from_bytes(&bytes) {
                return Ok((key, false));
            }
        }
        match cluster_check(cluster).await {
            // No member has a key and the cluster has none: this node makes one.
            Ok(None) => return Ok((SecretsKey::generate(), true)),
            Ok(Some(_)) => last = "the members that have the key did not answer".into(),
            Err(e) => last = e.to_string(),
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "cannot get the cluster's secrets key from a peer ({last}): copy a member's \
             secrets key file to this node and give it with --secrets-key-file"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Installs the process's secrets key for this node (see the module documentation), hands it
/// to peers that ask, and — once every member's build opens sealed values — seals what is
/// written (`apps::seal_stored_apps_once_sealing` then rewrites what was stored in the clear).
///
/// A new key must be claimed as the cluster's before the node goes on (it waits as long as
/// that takes). A known key (its file, a peer's) is compared with the cluster's check; when
/// the metadata group cannot be read within 30 s the node starts with it, but shares it with no
/// peer, writes no fetched key to its file and seals nothing until the check is confirmed — a
/// mismatch found then stops the process.
pub async fn install(
    cluster: &Cluster,
    path: &Path,
    data_dir: &Path,
    init: bool,
    join: Option<&str>,
) -> anyhow::Result<()> {
    let from_file = path.exists();
    let (key, fresh) = if from_file {
        (SecretsKey::read(path)?, false)
    } else if init {
        (SecretsKey::generate(), true)
    } else {
        obtain(cluster, join).await?
    };
    if path.starts_with(data_dir) {
        tracing::warn!(
            key = %path.display(),
            "the secrets key is on the data disk: a copy of the disk gives the apps' keys \
             (give --secrets-key-file on a secrets mount)"
        );
    }
    if fresh {
        key.write(path)?;
        let mut waited = 0u32;
        loop {
            match claim(cluster, &key).await {
                Ok(true) => break,
                Ok(false) => {
                    // Another node claimed first: take its key instead of this one.
                    let _ = std::fs::remove_file(path);
                    return Box::pin(install(cluster, path, data_dir, false, join)).await;
                }
                Err(e) => {
                    waited += 1;
                    if waited % 30 == 1 {
                        tracing::info!("claiming the cluster's secrets key: {e} (retrying)");
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
        if cluster.created_here() {
            // A cluster this start created has no member of an older build: seal from its
            // first app on.
            super::start_sealing();
        }
        confirmed(cluster, key, path, true);
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match compare(cluster, &key).await {
            Ok(true) => {
                confirmed(cluster, key, path, !from_file);
                return Ok(());
            }
            Ok(false) => anyhow::bail!(
                "{} holds another secrets key than the cluster's: this node could not open \
                 the apps' keys (copy a member's key file)",
                if from_file {
                    path.display().to_string()
                } else {
                    "the key a peer gave".to_string()
                }
            ),
            Err(e) if Instant::now() >= deadline => {
                tracing::warn!(
                    "the cluster's secrets key check cannot be read yet ({e}): starting, \
                     sealing nothing until it is"
                );
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
    // Unconfirmed: the process opens what it can with the key, and nothing more.
    let check = key.check();
    let bytes = key.bytes().to_vec();
    super::install(key);
    let (cluster, path) = (cluster.clone(), path.to_path_buf());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let Some(key) = super::key() else { return };
            match compare(&cluster, key).await {
                Ok(true) => break,
                Ok(false) => {
                    tracing::error!(
                        "this node's secrets key is not the cluster's: stopping (copy a \
                         member's key file)"
                    );
                    std::process::exit(1);
                }
                Err(_) => {}
            }
        }
        if !from_file {
            if let Some(key) = SecretsKey::from_bytes(&bytes) {
                if let Err(e) = key.write(&path) {
                    tracing::warn!("keeping the secrets key: {e}");
                }
            }
        }
        tracing::info!(check = %check, "the secrets key is the cluster's");
        cluster.set_shared_secret(bytes);
        start_sealing_when_every_member_can(cluster);
    });
    Ok(())
}

/// Whether `key` is the cluster's: `Ok(true)` when its check is the cluster's or, the
/// cluster having none (stored before sealing existed), once this key is claimed.
async fn compare(cluster: &Cluster, key: &SecretsKey) -> Result<bool, ClusterError> {
    match cluster_check(cluster).await? {
        Some(check) => Ok(check == key.check()),
        None => claim(cluster, key).await,
    }
}

/// Installs `key`, confirmed as the cluster's: writes it to `path` when it came from a peer,
/// hands it to peers that ask, and starts sealing once every member can open sealed values.
fn confirmed(cluster: &Cluster, key: SecretsKey, path: &Path, write: bool) {
    if write && !path.exists() {
        if let Err(e) = key.write(path) {
            tracing::warn!("keeping the secrets key: {e}");
        }
    }
    cluster.set_shared_secret(key.bytes().to_vec());
    super::install(key);
    start_sealing_when_every_member_can(cluster.clone());
}

/// Waits until sealing is on: every active member's build opens sealed values and the cluster
/// finalized it (`basalt admin upgrade`; until then the previous build can come back), then seals what is written from then on (what was stored in the clear is
/// rewritten by `apps::seal_stored_apps_once_sealing`).
fn start_sealing_when_every_member_can(cluster: Cluster) {
    tokio::spawn(async move {
        let mut waited = 0u32;
        while !cluster.feature_on(super::SEALING_FEATURE) {
            waited += 1;
            if waited % 300 == 60 {
                tracing::warn!(
                    "app secrets are not sealed yet: a member's build cannot open sealed values \
                     or the upgrade is not finalized (`basalt admin upgrade status`)"
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        super::start_sealing();
    });
}
