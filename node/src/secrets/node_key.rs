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
/// to peers that ask, and starts rewriting what was stored in the clear.
pub async fn install(
    cluster: &Cluster,
    path: &Path,
    init: bool,
    join: Option<&str>,
) -> anyhow::Result<()> {
    let (key, fresh) = if path.exists() {
        (SecretsKey::read(path)?, false)
    } else if init {
        (SecretsKey::generate(), true)
    } else {
        obtain(cluster, join).await?
    };
    if !path.exists() {
        key.write(path)?;
    }
    // The cluster's check: claimed by a new key, compared with a known one.
    let deadline = Instant::now() + if fresh { WAIT } else { Duration::from_secs(30) };
    loop {
        let outcome = match fresh {
            true => claim(cluster, &key).await.map(Some),
            false => cluster_check(cluster)
                .await
                .map(|check| check.map(|c| c == key.check())),
        };
        match outcome {
            Ok(Some(true)) => break,
            Ok(Some(false)) if fresh => {
                // Another node claimed first: take its key instead of this one.
                let _ = std::fs::remove_file(path);
                return Box::pin(install(cluster, path, false, join)).await;
            }
            Ok(Some(false)) => anyhow::bail!(
                "{} holds another secrets key than the cluster's: this node could not open \
                 the apps' keys (copy a member's key file)",
                path.display()
            ),
            Ok(None) => {
                // Written before sealing existed: this node's key becomes the cluster's.
                if claim(cluster, &key).await? {
                    break;
                }
            }
            Err(e) if Instant::now() >= deadline => {
                tracing::warn!("the cluster's secrets key check could not be read: {e}");
                break;
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    cluster.set_shared_secret(key.bytes().to_vec());
    super::install(key);
    let cluster = cluster.clone();
    tokio::spawn(async move {
        match crate::apps::seal_stored_apps(&cluster).await {
            Ok(0) => {}
            Ok(n) => tracing::info!("sealed the secrets of {n} stored records"),
            Err(e) => {
                tracing::warn!("sealing stored app secrets: {e} (tried again at the next start)")
            }
        }
    });
    Ok(())
}
