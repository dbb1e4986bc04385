//! Cluster-wide uniqueness of usernames (202), emails (203), phone numbers (209), role
//! names (139) and installations' `installationId`s and `deviceToken`s (an installation sent
//! again with one of them updates the one holding it: `installations`).
//!
//! Each value is claimed by a reservation record in the shard that owns the hashed value
//! (namespace `unique`, key `app/class.field/value`, value `{userId, since}`), written with a
//! compare-and-set before the user object is created or changed, and released (again by
//! compare-and-set, so only its owner can) when the user gives the value up, is deleted, or the
//! write fails. Two registrations racing for a name through different nodes meet at the same
//! record, and only one claim succeeds. A reservation whose user never appeared (its node died
//! between claim and create) is taken over once it is older than `PENDING_MS` and no user holds
//! the value.

use basalt_cluster::ids::GroupId;
use basalt_cluster::names::{AppId, ClassName, ObjectId};
use basalt_cluster::namespace::Namespace;
use basalt_cluster::{now_ms, Cluster, Error as ClusterError};
use serde_json::{json, Map, Value};

use super::UsersError;
use super::USER_CLASS;
use crate::installations::INSTALLATION_CLASS;

/// How long a claim may wait for its user object before it counts as abandoned.
pub const PENDING_MS: i64 = 30_000;

/// A value that must be unique among an app's users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unique {
    Username,
    Email,
    Phone,
    /// A role's name (139 when taken).
    RoleName,
    /// A third-party identity of a platform (`authData`; 208 when another user holds it).
    AuthData(&'static str),
    /// A device installation's `installationId`.
    InstallationId,
    /// A device installation's `deviceToken`.
    DeviceToken,
}

impl Unique {
    /// The user field holding the value.
    pub fn field(self) -> &'static str {
        match self {
            Unique::Username => "username",
            Unique::Email => "email",
            Unique::Phone => "mobilePhoneNumber",
            Unique::RoleName => "name",
            Unique::AuthData(_) => "authData",
            Unique::InstallationId => "installationId",
            Unique::DeviceToken => "deviceToken",
        }
    }

    /// The part of the reservation key naming what is unique.
    fn key_part(self) -> String {
        match self {
            Unique::AuthData(platform) => format!("{}.authData.{platform}", self.class()),
            other => format!("{}.{}", other.class(), other.field()),
        }
    }

    /// Whether a stored object currently holds `value`.
    fn held_by(self, obj: &basalt_cluster::object::StoredObject, value: &str) -> bool {
        match self {
            Unique::AuthData(platform) => obj
                .fields
                .get(super::third_party::AUTH_DATA_FIELD)
                .and_then(|a| a.get(platform))
                .and_then(|d| super::third_party::identity_of(platform, d))
                .is_some_and(|id| id == value),
            other => obj
                .fields
                .get(other.field())
                .and_then(Value::as_str)
                .is_some_and(|v| other.normalize(v) == other.normalize(value)),
        }
    }

    /// The class of the objects holding such values.
    pub fn class(self) -> &'static ClassName {
        match self {
            Unique::RoleName => &crate::users::roles::ROLE_CLASS,
            Unique::InstallationId | Unique::DeviceToken => &INSTALLATION_CLASS,
            _ => &USER_CLASS,
        }
    }

    /// The form the value is compared in: emails ignore case; phone numbers in E.164
    /// (`sms::phone`: `13700000001` and `+8613700000001` are one number), or as written when
    /// they are not valid numbers.
    pub fn normalize(self, v: &str) -> String {
        match self {
            Unique::Email => v.trim().to_lowercase(),
            Unique::Phone => {
                crate::sms::phone::normalize(v).unwrap_or_else(|| v.trim().to_string())
            }
            _ => v.to_string(),
        }
    }

    fn taken(self, v: &str) -> UsersError {
        match self {
            Unique::Username => UsersError::UsernameTaken(v.to_string()),
            Unique::Email => UsersError::EmailTaken(v.to_string()),
            Unique::Phone => UsersError::PhoneTaken(v.to_string()),
            Unique::RoleName => UsersError::RoleNameTaken(v.to_string()),
            Unique::AuthData(p) => UsersError::AuthDataTaken(p),
            Unique::InstallationId | Unique::DeviceToken => {
                UsersError::InstallationTaken(self.field(), v.to_string())
            }
        }
    }
}

fn key(app: &str, kind: Unique, value: &str) -> String {
    format!("{app}/{}/{}", kind.key_part(), kind.normalize(value))
}

fn group(cluster: &Cluster, app: &AppId, k: &str) -> GroupId {
    cluster.app_record_group(Namespace::Unique, app, k)
}

/// The user holding a value, if any.
pub async fn owner(
    cluster: &Cluster,
    app: &AppId,
    kind: Unique,
    value: &str,
) -> Result<Option<ObjectId>, UsersError> {
    let k = key(app, kind, value);
    let rec = cluster
        .get_record(group(cluster, app, &k), Namespace::Unique, &k)
        .await?;
    Ok(rec.and_then(|r| r["userId"].as_str().and_then(ObjectId::parse)))
}

/// Claims `value` for `user_id`; the documented code when another user holds it.
pub async fn reserve(
    cluster: &Cluster,
    app: &AppId,
    kind: Unique,
    value: &str,
    user_id: &str,
) -> Result<(), UsersError> {
    let k = key(app, kind, value);
    let g = group(cluster, app, &k);
    let mine = json!({"userId": user_id, "since": now_ms()});
    for _ in 0..3 {
        match cluster
            .cas_record(g, Namespace::Unique, &k, None, Some(mine.clone()))
            .await
        {
            Ok(_) => return Ok(()),
            Err(ClusterError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let Some(current) = cluster.get_record(g, Namespace::Unique, &k).await? else {
            continue; // released meanwhile: claim again
        };
        if current["userId"].as_str() == Some(user_id) {
            return Ok(());
        }
        if !abandoned(cluster, app, kind, value, &current).await? {
            return Err(kind.taken(value));
        }
        match cluster
            .cas_record(g, Namespace::Unique, &k, Some(current), Some(mine.clone()))
            .await
        {
            Ok(_) => return Ok(()),
            Err(ClusterError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(kind.taken(value))
}

/// True when a reservation's user never appeared (or no longer holds the value) and the claim is
/// old enough not to be a registration still under way.
async fn abandoned(
    cluster: &Cluster,
    app: &AppId,
    kind: Unique,
    value: &str,
    rec: &Value,
) -> Result<bool, UsersError> {
    if now_ms() - rec["since"].as_i64().unwrap_or(0) < PENDING_MS {
        return Ok(false);
    }
    let Some(holder) = rec["userId"].as_str().and_then(ObjectId::parse) else {
        return Ok(true);
    };
    let user = cluster
        .get_stored_object(app, kind.class(), &holder)
        .await?;
    Ok(!user.is_some_and(|u| kind.held_by(&u, value)))
}

/// Gives up `user_id`'s claim on `value` (nothing when another user holds it).
pub async fn release(
    cluster: &Cluster,
    app: &AppId,
    kind: Unique,
    value: &str,
    user_id: &str,
) -> Result<(), UsersError> {
    let k = key(app, kind, value);
    let g = group(cluster, app, &k);
    let Some(current) = cluster.get_record(g, Namespace::Unique, &k).await? else {
        return Ok(());
    };
    if current["userId"].as_str() != Some(user_id) {
        return Ok(());
    }
    match cluster
        .cas_record(g, Namespace::Unique, &k, Some(current), None)
        .await
    {
        Ok(_) | Err(ClusterError::Conflict(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A user's login names and what makes each unique.
pub fn login_fields(fields: &Map<String, Value>) -> Vec<(Unique, String)> {
    let mut out = Vec::new();
    for kind in [Unique::Username, Unique::Email, Unique::Phone] {
        if let Some(v) = fields.get(kind.field()).and_then(Value::as_str) {
            if !v.is_empty() {
                out.push((kind, v.to_string()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_unique_regardless_of_case() {
        assert_eq!(
            key("a", Unique::Email, " Ann@X.org"),
            key("a", Unique::Email, "ann@x.org")
        );
        assert_ne!(
            key("a", Unique::Username, "Ann"),
            key("a", Unique::Username, "ann")
        );
        assert_ne!(
            key("a", Unique::Username, "x"),
            key("b", Unique::Username, "x")
        );
    }
}
