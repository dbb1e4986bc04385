//! The service's own writes to a user (no ACL check): password resets by email or SMS,
//! verification flags. Callers: `api::email`, `api::sms`; a write that ends sessions settles on
//! every member (`session::ends_sessions`).

use basalt_cluster::update::FieldUpdate;
use basalt_cluster::{now_ms, Cluster, Command};

use super::session::ends_sessions;
use super::USER_CLASS;
use crate::api::error::ApiError;

/// Applies updates to a user as the service (no ACL check): password resets, verification
/// flags. 101 when the user is gone. Updates that end sessions settle on every member.
pub async fn set_user_fields(
    cluster: &Cluster,
    app: &str,
    user_id: &str,
    updates: Vec<FieldUpdate>,
) -> Result<(), ApiError> {
    let now = now_ms();
    let settle = ends_sessions(None, &updates, now);
    let cmd = Command::UpdateObject {
        app: app.to_string(),
        class: USER_CLASS.into(),
        object_id: user_id.to_string(),
        now_ms: now,
        updates,
        principals: None,
    };
    let group = cluster.shard_for(app, USER_CLASS, user_id);
    let proposed = if settle {
        cluster.propose_settled(group, cmd).await
    } else {
        cluster.propose(group, cmd).await
    };
    proposed.map_err(|e| ApiError::from_cluster(e, user_id))?;
    Ok(())
}
