//! Users (spec 2.3, 4.5): accounts stored as objects of the system class `_User`, their
//! sessions, and the uniqueness of their usernames, emails and phone numbers.
//!
//! A user object keeps two internal fields no client can write or see: `_password` (an argon2
//! hash) and `_sessions` (token → expiry in ms). A session token is 32 random characters followed
//! by the user's objectId, so checking one is a single linearizable read of the user. Callers:
//! `api::users` (the endpoints) and every data handler (`principals`, for ACLs).

pub mod email_links;
pub mod protected;
pub mod roles;
pub mod session;
pub mod third_party;
pub mod unique;

use basalt_cluster::update::FieldUpdate;
use basalt_cluster::{now_ms, Cluster, Command};

use crate::api::error::ApiError;

pub use unique::login_fields;

/// The system class of users.
pub const USER_CLASS: &str = "_User";

/// Internal field holding the password hash.
pub const PASSWORD_FIELD: &str = "_password";

/// Internal field holding the user's sessions (token → expiry, ms since the epoch).
pub const SESSIONS_FIELD: &str = "_sessions";

/// Fields of a user only the service sets (105 when a client sends them, master key aside).
pub const SERVICE_FIELDS: [&str; 4] = [
    "sessionToken",
    "emailVerified",
    "mobilePhoneVerified",
    "authData",
];

/// Applies updates to a user as the service (no ACL check): password resets, verification
/// flags. 101 when the user is gone.
pub async fn set_user_fields(
    cluster: &Cluster,
    app: &str,
    user_id: &str,
    updates: Vec<FieldUpdate>,
) -> Result<(), ApiError> {
    let cmd = Command::UpdateObject {
        app: app.to_string(),
        class: USER_CLASS.into(),
        object_id: user_id.to_string(),
        now_ms: now_ms(),
        updates,
        principals: None,
    };
    cluster
        .propose(cluster.shard_for(app, USER_CLASS, user_id), cmd)
        .await
        .map_err(|e| ApiError::from_cluster(e, user_id))?;
    Ok(())
}
