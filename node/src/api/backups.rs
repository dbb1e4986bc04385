//! Backups from the console (not part of the spec): `POST /admin/backups` takes a backup of the
//! whole cluster to the node's `--backup-to` and `GET /admin/backups` lists the backups there.
//! Only the console account may: a backup holds every app. The destination is the operator's
//! (the command line's), never the caller's. What a backup is and how it is taken:
//! `basalt_cluster::services::backup`; scheduled ones: `crate::backups`.

use axum::extract::State;
use axum::Json;
use basalt_cluster::admin::BackupRequest;
use serde_json::{json, Value};

use super::context::{ApiBody, AppState, ConsoleAccount};
use super::error::{ApiError, CommonError};

/// The body of `POST /admin/backups` (may be empty).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupBody {
    /// MB per second each node may write (default: `--backup-rate`, else no limit).
    rate: Option<f64>,
}

fn destination(state: &AppState) -> Result<&crate::backups::BackupSchedule, ApiError> {
    state
        .backups
        .as_ref()
        .ok_or_else(|| CommonError::NoBackupDestination.into())
}

/// `POST /admin/backups`: a backup of the whole cluster to `--backup-to`, this node
/// coordinating; answers its manifest once it is written (it goes on if the caller leaves).
pub async fn take_backup(
    State(state): State<AppState>,
    _account: ConsoleAccount,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let schedule = destination(&state)?;
    let body: BackupBody = if body.0.iter().all(u8::is_ascii_whitespace) {
        BackupBody::default()
    } else {
        serde_json::from_value(Value::Object(body.object()?))
            .map_err(|e| CommonError::InvalidBody(e.to_string()))?
    };
    let rate = match body.rate {
        Some(mb) if !(mb > 0.0 && mb.is_finite()) => {
            return Err(CommonError::InvalidBody("rate is MB per second, above 0".into()).into())
        }
        Some(mb) => Some((mb * 1_000_000.0) as u64),
        None => schedule.rate,
    };
    let req = BackupRequest {
        dest: schedule.dest.clone(),
        rate,
        scheduled: false,
    };
    let cluster = state.cluster.clone();
    let taken = tokio::spawn(async move { cluster.backup(&req).await })
        .await
        .map_err(|e| ApiError::fault("the backup's task", e))?;
    match taken {
        Ok(manifest) => Ok(Json(
            serde_json::to_value(&manifest).map_err(|e| ApiError::fault("the manifest", e))?,
        )),
        Err(basalt_cluster::Error::Conflict(m)) => Err(CommonError::BackupRunning(m).into()),
        Err(e) => Err(e.into()),
    }
}

/// `GET /admin/backups`: the newest backups in `--backup-to`, newest first, each with its
/// manifest (`null` while unfinished, or when it failed).
pub async fn list_backups(
    State(state): State<AppState>,
    _account: ConsoleAccount,
) -> Result<Json<Value>, ApiError> {
    let schedule = destination(&state)?;
    let listed = state.cluster.list_backups(&schedule.dest).await?;
    Ok(Json(
        json!({"destination": schedule.dest, "backups": listed}),
    ))
}
