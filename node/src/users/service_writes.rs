//! The service's own writes to a user (no ACL check): sessions added at login, password resets
//! by email or SMS, verification flags. Callers: `users::login`, `api::email`, `api::sms`; a
//! write that ends sessions settles on every member (`session::ends_sessions`).

use basalt_cluster::acl::Principals;
use basalt_cluster::names::{AppId, ObjectId};
use basalt_cluster::object::StoredObject;
use basalt_cluster::update::FieldUpdate;
use basalt_cluster::{now_ms, Cluster, Command, CommandResult};

use super::session::ends_sessions;
use super::UsersError;
use super::USER_CLASS;

/// Applies updates to a user as the service (no ACL check): password resets, verification
/// flags. 101 when the user is gone. Updates that end sessions settle on every member.
pub async fn set_user_fields(
    cluster: &Cluster,
    app: &AppId,
    user_id: &ObjectId,
    updates: Vec<FieldUpdate>,
) -> Result<(), UsersError> {
    write_user(cluster, app, user_id, None, updates, now_ms()).await
}

/// Applies updates to a user as the service at `now` (the time the updates were made for);
/// `before` is the stored user when the caller read it (then only the removal of a live
/// session counts as ending one).
pub(super) async fn write_user(
    cluster: &Cluster,
    app: &AppId,
    user_id: &ObjectId,
    before: Option<&StoredObject>,
    updates: Vec<FieldUpdate>,
    now: i64,
) -> Result<(), UsersError> {
    let settle = ends_sessions(before, &updates, now);
    let cmd = Command::UpdateObject {
        app: app.clone(),
        class: USER_CLASS.clone(),
        object_id: user_id.clone(),
        now_ms: now,
        updates,
        principals: Principals::master(),
        unset: Vec::new(),
        holds: Vec::new(),
    };
    let group = cluster.object_group(app, &USER_CLASS, user_id);
    let proposed = if settle {
        cluster.propose_settled(group, cmd).await
    } else {
        cluster.propose(group, cmd).await
    };
    match proposed.map_err(|e| UsersError::about(user_id, e))?.result {
        CommandResult::Updated { .. } => Ok(()),
        _ => Err(UsersError::Unexpected(
            "a user update answered another result",
        )),
    }
}
