//! Apps and console accounts as records of the metadata group, and their keys.
//!
//! An app is found by its applicationId: first in this node's metadata replica, then (when a
//! just-created app has not reached it yet) by a linearizable read of the metadata group.
//! Console passwords are stored as argon2 hashes, never in plain text. An app's keys and
//! credentials are sealed under the node's secrets key before they are written and opened as
//! they are read (`secrets`, decisions/0032); the secret-key index is keyed by a digest.

use std::collections::BTreeMap;

use basalt_cluster::ids::META_GROUP;
use basalt_cluster::names::AppId;
use basalt_cluster::namespace::Namespace;
use basalt_cluster::{Cluster, Error as ClusterError};
use serde::{Deserialize, Serialize};

use crate::password::PasswordError;

/// Why an app or console account could not be read or stored.
#[derive(Debug, thiserror::Error)]
pub enum AppsError {
    #[error("no app {0:?}")]
    NotFound(String),
    #[error("app record: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Password(#[from] PasswordError),
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
}

/// The label of the secret-key index's digests.
const SECRET_INDEX: &str = "app-secret";

/// A stored app record as the app it is: its secrets opened (a sealed value without the
/// secrets key is an error, never a key).
fn decode_app(mut v: serde_json::Value) -> Result<AppRecord, AppsError> {
    let id = v["applicationId"].as_str().unwrap_or_default().to_string();
    match crate::secrets::key() {
        Some(key) => crate::secrets::open_app(key, &id, &mut v)?,
        None => crate::secrets::each_secret(&id, &mut v, &mut |place, value| {
            match crate::secrets::is_sealed(value) {
                true => Err(crate::secrets::SecretsError::WontOpen(place.to_string())),
                false => Ok(()),
            }
        })?,
    }
    serde_json::from_value(v).map_err(|e| AppsError::Corrupt(e.to_string()))
}

/// Members of app `id`'s record as they are stored: its secrets sealed (once every member
/// can open them).
fn sealed(id: &str, mut v: serde_json::Value) -> Result<serde_json::Value, AppsError> {
    if let Some(key) = crate::secrets::sealing_key() {
        crate::secrets::seal_app(key, id, &mut v)?;
    }
    Ok(v)
}

/// Length of the per-app safe token of encrypted mode.
pub const SAFE_TOKEN_LEN: usize = 6;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppRecord {
    pub app_name: String,
    pub application_id: AppId,
    pub rest_key: String,
    pub master_key: String,
    pub access_key: String,
    pub secret_key: String,
    /// 1 enabled, 0 disabled.
    pub status: i64,
    pub not_allowed_create_table: i64,
    /// Email of the console account that owns the app.
    pub owner: String,
    /// Encrypted mode's 6-character API security code (never sent by clients).
    #[serde(default)]
    pub safe_token: String,
    /// When true, only encrypted mode (and the master key) authenticate data requests.
    #[serde(default)]
    pub disable_standard_mode: bool,
    /// Email verification of users on/off.
    #[serde(default)]
    pub email_verify: bool,
    /// Wrap aggregation rows in `{"results": [...]}`.
    #[serde(default)]
    pub wrap_aggregates: bool,
    /// Enterprise plan: query `limit` up to 1000.
    #[serde(default)]
    pub enterprise: bool,
    /// Fields of `_User` objects shown only to the user itself and the master key (absent:
    /// `users::protected::DEFAULT_PROTECTED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected_user_fields: Option<Vec<String>>,
    /// Browser origins allowed to call the app-key API (absent: any origin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_origins: Option<Vec<String>>,
    /// The app's credentials with third-party platforms, by platform (`weapp`, `apple`, ...),
    /// used to verify `authData` (`users::third_party::providers`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub auth_providers: BTreeMap<String, AuthProvider>,
    /// Accept `authData` without asking its platform (the id alone logs a user in).
    #[serde(default)]
    pub allow_unverified_auth_data: bool,
    /// Who may delete the app's files.
    #[serde(default)]
    pub file_delete: FileDelete,
    /// The app's own limit on an uploaded file's size, in MiB (below the node's `--max-file-mb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_file_mb: Option<u64>,
    /// The app's files are served only through signed, expiring urls (`files::links`).
    #[serde(default)]
    pub private_files: bool,
    /// Whether clients with the app's keys may send pushes (else the master key only).
    #[serde(default)]
    pub client_push: bool,
    /// The providers the app pushes through (read by `push::settings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<FeatureSettings>,
    /// Limits of the app's cloud functions (read by `functions::settings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions: Option<FeatureSettings>,
    /// Realtime subscriptions need the app's keys (or a signature): a `client_sub` naming only
    /// the app (`appKey`, as the hosted service's SDKs send it) is refused.
    #[serde(default)]
    pub realtime_keys_required: bool,
    /// Requests a second the app's clients may make, cluster-wide (`app_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<u64>,
    /// The most its objects may take, in MiB as stored (`storage_quota`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects_quota_mb: Option<u64>,
    /// The most its files may take, in MiB (`storage_quota`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_quota_mb: Option<u64>,
}

/// A feature's settings as an app record keeps them: JSON that apps stores and hands back
/// without reading it. The feature that owns them reads them as its own type
/// ([`AppRecord::settings`]), checked when they were set, so apps depends on no feature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FeatureSettings(serde_json::Value);

/// A feature's own type of app settings, and the member of the app record that keeps them.
pub trait AppSettings: serde::de::DeserializeOwned + Default {
    /// The app's settings of this feature, as stored (none: the feature's defaults).
    fn stored(app: &AppRecord) -> Option<&FeatureSettings>;
}

/// Who may delete an app's files (`fileDelete`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileDelete {
    /// Any client with the app's keys (as the hosted service and its SDKs expect).
    #[default]
    Any,
    /// The master key only.
    Master,
    /// The session of the user who uploaded the file, or the master key.
    Uploader,
}

/// An app's account with one third-party platform.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthProvider {
    /// The app's id at the platform (mini-program appid, Apple bundle or services id, QQ
    /// client id, Weibo app key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id: Option<String>,
    /// The app's secret at the platform (mini-programs' code exchange).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_secret: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccountRecord {
    pub email: String,
    pub password_hash: String,
}

/// A random key of `len` characters of `[0-9a-zA-Z]`.
pub fn random_key(len: usize) -> String {
    basalt_cluster::object::random_alphanumeric(len)
}

impl AppRecord {
    /// The app's settings of one feature (its defaults when the app has none).
    pub fn settings<T: AppSettings>(&self) -> Result<T, AppsError> {
        match T::stored(self) {
            None => Ok(T::default()),
            Some(FeatureSettings(v)) => {
                T::deserialize(v).map_err(|e| AppsError::Corrupt(e.to_string()))
            }
        }
    }

    /// Whether a browser at `origin` may use the app (`allowedOrigins`; absent: any).
    pub fn allows_origin(&self, origin: &str) -> bool {
        match &self.allowed_origins {
            None => true,
            Some(list) => list
                .iter()
                .any(|o| o == "*" || o.trim_end_matches('/').eq_ignore_ascii_case(origin)),
        }
    }

    pub fn generate(app_name: &str, owner: &str) -> Self {
        AppRecord {
            app_name: app_name.to_string(),
            application_id: AppId::new_app(random_key(32)),
            rest_key: random_key(32),
            master_key: random_key(32),
            access_key: random_key(32),
            secret_key: random_key(16),
            status: 1,
            not_allowed_create_table: 0,
            owner: owner.to_string(),
            safe_token: random_key(SAFE_TOKEN_LEN),
            disable_standard_mode: false,
            email_verify: false,
            wrap_aggregates: false,
            enterprise: false,
            protected_user_fields: None,
            allowed_origins: None,
            auth_providers: BTreeMap::new(),
            allow_unverified_auth_data: false,
            file_delete: FileDelete::Any,
            max_file_mb: None,
            private_files: false,
            client_push: false,
            push: None,
            functions: None,
            realtime_keys_required: false,
            requests_per_second: None,
            objects_quota_mb: None,
            files_quota_mb: None,
        }
    }

    /// The app as the app-management endpoints show it (everything but its owner).
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.remove("owner");
        }
        v
    }
}

/// An app as this node's metadata replica holds it, opened (none: not there).
#[derive(Clone)]
struct Opened(Option<std::sync::Arc<AppRecord>>);

impl basalt_cluster::kept_reads::Weight for Opened {
    fn weight(&self) -> usize {
        1
    }
}

/// Apps read and opened from this node's metadata replica, kept while it applies nothing
/// newer (every request finds its app: opening its sealed keys each time would cost).
static OPENED: std::sync::LazyLock<basalt_cluster::KeptReads<String, Opened>> =
    std::sync::LazyLock::new(|| basalt_cluster::KeptReads::new("basalt_app_reads_total", 10_000));

/// Finds an app by applicationId.
pub async fn find_app(
    cluster: &Cluster,
    application_id: &str,
) -> Result<Option<AppRecord>, AppsError> {
    let applied = cluster.meta_applied();
    let local = OPENED.get_or_read(applied, application_id, || {
        let value = cluster.local_meta_record(Namespace::App, application_id)?;
        Ok::<_, AppsError>(Opened(
            value.map(decode_app).transpose()?.map(std::sync::Arc::new),
        ))
    })?;
    if let Opened(Some(app)) = local {
        return Ok(Some(AppRecord::clone(&app)));
    }
    cluster
        .get_record(META_GROUP, Namespace::App, application_id)
        .await?
        .map(decode_app)
        .transpose()
}

/// Finds an app by its secret key (encrypted mode).
pub async fn find_app_by_secret(
    cluster: &Cluster,
    secret_key: &str,
) -> Result<Option<AppRecord>, AppsError> {
    // The digest's entry, then (written before values were sealed, and not yet rewritten by
    // `seal_stored_apps`) the key's own — never a digest's entry found by its digest. Both on
    // this node's replica first, then linearizably (an app created a moment ago).
    let digest = crate::secrets::key().map(|k| k.digest(SECRET_INDEX, secret_key));
    let candidates: Vec<(String, bool)> = digest
        .into_iter()
        .map(|d| (d, true))
        .chain(std::iter::once((secret_key.to_string(), false)))
        .collect();
    let fits = |found: &Option<serde_json::Value>, is_digest: bool| {
        found
            .as_ref()
            .is_some_and(|v| v["digest"].as_bool().unwrap_or(false) == is_digest)
    };
    let mut index = None;
    for (key, is_digest) in &candidates {
        let found = cluster.local_meta_record(Namespace::AppSecret, key)?;
        if fits(&found, *is_digest) {
            index = found;
            break;
        }
    }
    if index.is_none() {
        for (key, is_digest) in &candidates {
            let found = cluster
                .get_record(META_GROUP, Namespace::AppSecret, key)
                .await?;
            if fits(&found, *is_digest) {
                index = found;
                break;
            }
        }
    }
    match index.as_ref().and_then(|v| v["applicationId"].as_str()) {
        Some(id) => find_app(cluster, id).await,
        None => Ok(None),
    }
}

/// Every app a console account owns, linearizably.
pub async fn list_apps(cluster: &Cluster, owner: &str) -> Result<Vec<AppRecord>, AppsError> {
    cluster
        .list_records(META_GROUP, Namespace::App, "")
        .await?
        .into_iter()
        .filter(|(_, v)| v["owner"].as_str() == Some(owner))
        .map(|(_, v)| decode_app(v))
        .collect()
}

/// Stores a new app: first its secret-key index, then the app (an index without its app is
/// harmless: it finds nothing).
pub async fn put_app(cluster: &Cluster, app: &AppRecord) -> Result<(), AppsError> {
    // Sealing is decided once for the record and its index entry (it may start meanwhile).
    let key = crate::secrets::sealing_key();
    let mut v = serde_json::to_value(app).map_err(|e| AppsError::Corrupt(e.to_string()))?;
    if let Some(key) = key {
        crate::secrets::seal_app(key, &app.application_id, &mut v)?;
    }
    let index_key = match key {
        Some(key) => key.digest(SECRET_INDEX, &app.secret_key),
        None => app.secret_key.clone(),
    };
    cluster
        .put_record(
            META_GROUP,
            Namespace::AppSecret,
            &index_key,
            serde_json::json!({
                "applicationId": app.application_id,
                "digest": key.is_some(),
            }),
            None,
        )
        .await?;
    cluster
        .put_record(META_GROUP, Namespace::App, &app.application_id, v, None)
        .await?;
    Ok(())
}

/// Changes members of an app record in the state machine; answers the updated app once every
/// reachable node applied it (nodes read app settings from their own replica).
pub async fn update_app(
    cluster: &Cluster,
    application_id: &str,
    members: serde_json::Map<String, serde_json::Value>,
) -> Result<AppRecord, AppsError> {
    let members = match sealed(application_id, serde_json::Value::Object(members))? {
        serde_json::Value::Object(m) => m,
        _ => return Err(AppsError::Corrupt("app members are not an object".into())),
    };
    let v = cluster
        .merge_meta_record_everywhere(Namespace::App, application_id, members)
        .await
        .map_err(|e| match e {
            ClusterError::ObjectNotFound => AppsError::NotFound(application_id.to_string()),
            e => AppsError::Cluster(e),
        })?;
    decode_app(v)
}

/// Rewrites what was stored before the node had a secrets key (decisions/0032): every app
/// record with a secret in the clear gets it sealed, every secret-key index entry keyed by the
/// key itself is keyed by its digest instead. Compare-and-set writes, so nodes doing it at
/// once (each does at start) or a concurrent change of the app lose nothing; answers how many
/// records it rewrote.
pub async fn seal_stored_apps(cluster: &Cluster) -> Result<usize, AppsError> {
    let Some(key) = crate::secrets::sealing_key() else {
        return Ok(0);
    };
    let has_plain = |id: &str, stored: &serde_json::Value| -> Result<bool, AppsError> {
        let mut plain = false;
        let mut probe = stored.clone();
        crate::secrets::each_secret(id, &mut probe, &mut |_, v| {
            plain |= !crate::secrets::is_sealed(v);
            Ok(())
        })?;
        Ok(plain)
    };
    let mut rewritten = 0;
    for (id, listed) in cluster.list_records(META_GROUP, Namespace::App, "").await? {
        let mut stored = Some(listed);
        // A write that raced ours sealed only the members it wrote: read again and retry.
        for _ in 0..10 {
            let Some(current) = stored.take() else { break };
            if !has_plain(&id, &current)? {
                break;
            }
            let new = sealed(&id, current.clone())?;
            match cluster
                .cas_record(META_GROUP, Namespace::App, &id, Some(current), Some(new))
                .await
            {
                Ok(_) => {
                    rewritten += 1;
                    break;
                }
                Err(ClusterError::Conflict(_)) => {
                    stored = cluster.get_record(META_GROUP, Namespace::App, &id).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    for (index_key, entry) in cluster
        .list_records(META_GROUP, Namespace::AppSecret, "")
        .await?
    {
        if entry["digest"] == serde_json::Value::Bool(true) {
            continue;
        }
        let digest = key.digest(SECRET_INDEX, &index_key);
        let mut moved = entry.clone();
        moved["digest"] = serde_json::Value::Bool(true);
        cluster
            .put_record(META_GROUP, Namespace::AppSecret, &digest, moved, None)
            .await?;
        match cluster
            .cas_record(
                META_GROUP,
                Namespace::AppSecret,
                &index_key,
                Some(entry),
                None,
            )
            .await
        {
            Ok(_) => rewritten += 1,
            Err(ClusterError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(rewritten)
}

/// Waits until values are sealed (`secrets::sealing_started`), then rewrites what was stored
/// in the clear (`seal_stored_apps`); what fails is tried again at the next start.
pub async fn seal_stored_apps_once_sealing(cluster: Cluster) {
    crate::secrets::sealing_started().await;
    match seal_stored_apps(&cluster).await {
        Ok(0) => {}
        Ok(n) => tracing::info!("sealed the secrets of {n} stored records"),
        Err(e) => tracing::warn!("sealing stored app secrets: {e} (tried again at the next start)"),
    }
}

/// Checks console credentials; answers the account's email when they are right.
pub async fn verify_account(
    cluster: &Cluster,
    email: &str,
    password: &str,
) -> Result<bool, AppsError> {
    let rec = match cluster.local_meta_record(Namespace::Account, email)? {
        Some(v) => Some(v),
        None => {
            cluster
                .get_record(META_GROUP, Namespace::Account, email)
                .await?
        }
    };
    let Some(rec) = rec.and_then(|v| serde_json::from_value::<AccountRecord>(v).ok()) else {
        return Ok(crate::password::verify_absent(password.to_string()).await?);
    };
    Ok(crate::password::verify(password.to_string(), rec.password_hash).await?)
}

pub async fn put_account(cluster: &Cluster, email: &str, password: &str) -> Result<(), AppsError> {
    let rec = AccountRecord {
        email: email.to_string(),
        password_hash: crate::password::hash(password.to_string()).await?,
    };
    let v = serde_json::to_value(rec).map_err(|e| AppsError::Corrupt(e.to_string()))?;
    cluster
        .put_record(META_GROUP, Namespace::Account, email, v, None)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_their_lengths() {
        let app = AppRecord::generate("demo", "a@b.c");
        assert_eq!(app.secret_key.len(), 16);
        assert_eq!(app.safe_token.len(), SAFE_TOKEN_LEN);
        assert!(app.to_json().get("owner").is_none());
        assert_eq!(app.to_json()["appName"], "demo");
        assert_eq!(app.application_id.len(), 32);
        assert_ne!(app.rest_key, app.master_key);
    }
}
