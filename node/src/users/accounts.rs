//! The rules of an account's own fields, shared by sign-up, login and user changes: which body
//! members a client may send, password hashing, who may change a user, and the claims on login
//! names and linked accounts (`unique`) that a new or changed user makes and gives up.
//!
//! Callers: `api::users` (the endpoints, which add the ACL checks and the answers) and
//! `users::login`.

use std::future::Future;

use basalt_cluster::names::{AppId, ObjectId};
use basalt_cluster::object::StoredObject;
use basalt_cluster::update::{FieldUpdate, UpdateOp};
use basalt_cluster::{now_ms, Cluster};
use serde_json::{json, Map, Value};

use super::session::{only_session, session_user};
use super::third_party::{identity_of, Link, AUTH_DATA_FIELD, PLATFORMS};
use super::unique::{self, login_fields, Unique};
use super::{set_user_fields, UsersError, PASSWORD_FIELD, SERVICE_FIELDS, USER_CLASS};

/// The update setting a top-level field to a plain value.
pub fn set(path: &str, v: Value) -> FieldUpdate {
    FieldUpdate {
        path: vec![path.to_string()],
        op: UpdateOp::Set(v),
    }
}

/// Takes a non-empty string member out of a body (`None` when absent, null or empty); a member
/// of another type is refused.
pub fn take_string(body: &mut Map<String, Value>, key: &str) -> Result<Option<String>, UsersError> {
    match body.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(UsersError::InvalidField(format!("{key} must be a string."))),
    }
}

/// Refuses fields only the service sets, unless the master key is used.
pub fn check_service_fields(master: bool, body: &Map<String, Value>) -> Result<(), UsersError> {
    if master {
        return Ok(());
    }
    match SERVICE_FIELDS.iter().find(|f| body.contains_key(**f)) {
        Some(f) => Err(UsersError::ServiceField((*f).to_string())),
        None => Ok(()),
    }
}

/// Login names must be strings.
pub fn check_login_field_types(body: &Map<String, Value>) -> Result<(), UsersError> {
    for kind in [Unique::Username, Unique::Email, Unique::Phone] {
        match body.get(kind.field()) {
            None | Some(Value::String(_)) | Some(Value::Null) => {}
            Some(_) => {
                return Err(UsersError::InvalidField(format!(
                    "{} must be a string.",
                    kind.field()
                )))
            }
        }
    }
    Ok(())
}

/// The update storing a new password's hash.
pub async fn password_update(password: String) -> Result<FieldUpdate, UsersError> {
    let hash = crate::password::hash(password).await?;
    Ok(set(PASSWORD_FIELD, json!(hash)))
}

/// Sets a user's password as the service (an emailed link or an SMS code proved the owner),
/// with `extra` updates, and ends every session of the user (settled on every member).
pub async fn reset_password(
    cluster: &Cluster,
    app: &AppId,
    user_id: &ObjectId,
    password: String,
    extra: Vec<FieldUpdate>,
) -> Result<(), UsersError> {
    let mut updates = vec![password_update(password).await?];
    updates.extend(extra);
    updates.push(only_session(None, now_ms()));
    set_user_fields(cluster, app, user_id, updates).await
}

/// Whether `password` is the stored user's (a user without one takes as long to refuse).
pub async fn password_matches(password: String, stored: &StoredObject) -> Result<bool, UsersError> {
    let Some(h) = stored.fields.get(PASSWORD_FIELD).and_then(Value::as_str) else {
        return Ok(crate::password::verify_absent(password).await?);
    };
    Ok(crate::password::verify(password, h.to_string()).await?)
}

/// The stored user when the caller may change it: the master key, or that user's live session
/// (`SessionRequired` otherwise; `UserNotFound` when there is no such user).
pub async fn changeable_user(
    cluster: &Cluster,
    app: &AppId,
    master: bool,
    session_token: Option<&str>,
    user_id: &ObjectId,
) -> Result<StoredObject, UsersError> {
    if !master {
        let token = session_token.ok_or(UsersError::SessionRequired)?;
        match session_user(cluster, app, token).await? {
            Some((id, _)) if &id == user_id => {}
            _ => return Err(UsersError::SessionRequired),
        }
    }
    cluster
        .get_stored_object(app, &USER_CLASS, user_id)
        .await?
        .ok_or_else(|| UsersError::UserNotFound(user_id.to_string()))
}

/// The account id a user has linked for a platform.
pub fn linked_identity(user: &StoredObject, platform: &str) -> Option<String> {
    user.fields
        .get(AUTH_DATA_FIELD)
        .and_then(|a| a.get(platform))
        .and_then(|d| identity_of(platform, d))
}

/// Every value a stored user holds a claim on: its login names and linked accounts.
pub fn held_names(user: &StoredObject) -> Vec<(Unique, String)> {
    let mut names = login_fields(&user.fields);
    for (platform, _) in PLATFORMS {
        if let Some(account) = linked_identity(user, platform) {
            names.push((Unique::AuthData(platform), account));
        }
    }
    names
}

/// Claims every value for `user_id`, then runs `write`; when a claim is refused or the write
/// fails, gives back what was claimed. Two requests racing for one name through any nodes meet
/// at its reservation record, so at most one write runs with it.
pub async fn claiming<T, E, W>(
    cluster: &Cluster,
    app: &AppId,
    names: &[(Unique, String)],
    user_id: &str,
    write: W,
) -> Result<T, E>
where
    E: From<UsersError>,
    W: Future<Output = Result<T, E>>,
{
    for (i, (kind, v)) in names.iter().enumerate() {
        if let Err(e) = unique::reserve(cluster, app, *kind, v, user_id).await {
            release_all(cluster, app, &names[..i], user_id).await;
            return Err(e.into());
        }
    }
    let written = write.await;
    if written.is_err() {
        release_all(cluster, app, names, user_id).await;
    }
    written
}

/// Gives up `user_id`'s claims (a failure is logged: the claim is then taken over once
/// abandoned, `unique::PENDING_MS`).
pub async fn release_all(
    cluster: &Cluster,
    app: &AppId,
    names: &[(Unique, String)],
    user_id: &str,
) {
    for (kind, v) in names {
        if let Err(e) = unique::release(cluster, app, *kind, v, user_id).await {
            tracing::warn!("releasing {} {v:?}: {e}", kind.field());
        }
    }
}

/// What a change of a user (`PUT /1/users/<id>`) does beyond its plain fields.
#[derive(Debug, Default)]
pub struct AccountChange {
    /// Updates of the service's fields (password, sessions, verification flags, `authData`).
    pub updates: Vec<FieldUpdate>,
    /// Values to claim before the write (new login names, newly linked accounts).
    pub claimed: Vec<(Unique, String)>,
    /// Values to release after it (names given up, unlinked accounts).
    pub given_up: Vec<(Unique, String)>,
}

impl AccountChange {
    /// The new email, when the change claims one.
    pub fn new_email(&self) -> Option<&str> {
        self.claimed
            .iter()
            .find(|(k, _)| *k == Unique::Email)
            .map(|(_, v)| v.as_str())
    }
}

/// The account side of changing `stored` with `body` (its plain fields) and `links`: a new
/// password keeps only the caller's session; a new email is unverified (when the app verifies
/// emails), a new phone number too (it has received no code); changed names and links are
/// claimed, the replaced ones given up.
pub async fn account_change(
    stored: &StoredObject,
    body: &Map<String, Value>,
    password: Option<String>,
    links: Vec<Link>,
    email_verify: bool,
    session_token: Option<&str>,
    now: i64,
) -> Result<AccountChange, UsersError> {
    let mut change = AccountChange::default();
    if let Some(p) = password {
        change.updates.push(password_update(p).await?);
        change.updates.push(only_session(session_token, now));
    }
    let old = login_fields(&stored.fields);
    let new = login_fields(body);
    let same = |a: &(Unique, String), b: &(Unique, String)| {
        a.0 == b.0 && a.0.normalize(&a.1) == b.0.normalize(&b.1)
    };
    change.claimed = new
        .iter()
        .filter(|n| !old.iter().any(|o| same(o, n)))
        .cloned()
        .collect();
    if email_verify && change.new_email().is_some() {
        change.updates.push(set("emailVerified", json!(false)));
    }
    let new_phone = change.claimed.iter().any(|(k, _)| *k == Unique::Phone);
    if new_phone && !body.contains_key("mobilePhoneVerified") {
        change
            .updates
            .push(set("mobilePhoneVerified", json!(false)));
    }
    // Names the change removes or replaces.
    change.given_up = old
        .iter()
        .filter(|(k, _)| body.contains_key(k.field()))
        .filter(|o| !new.iter().any(|n| same(o, n)))
        .cloned()
        .collect();
    for link in links {
        let (platform, op) = match link {
            Link::Set { platform, id, data } => {
                change.claimed.push((Unique::AuthData(platform), id));
                (platform, UpdateOp::Set(data))
            }
            Link::Unset { platform } => {
                if let Some(current) = linked_identity(stored, platform) {
                    change.given_up.push((Unique::AuthData(platform), current));
                }
                (platform, UpdateOp::Delete)
            }
        };
        change.updates.push(FieldUpdate {
            path: vec![AUTH_DATA_FIELD.into(), platform.into()],
            op,
        });
    }
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(fields: Value) -> StoredObject {
        let mut u = StoredObject::new(0);
        if let Value::Object(m) = fields {
            u.fields = m;
        }
        u
    }

    #[tokio::test]
    async fn a_change_claims_new_names_and_gives_up_replaced_ones() {
        let stored = user(json!({"username": "ann", "email": "a@x.org"}));
        let body = json!({"username": "ANN", "email": "b@x.org"});
        let change = account_change(
            &stored,
            body.as_object().unwrap(),
            None,
            Vec::new(),
            true,
            None,
            0,
        )
        .await
        .unwrap();
        // A username differing in case is another name; an email differing in case is not.
        assert!(change
            .claimed
            .contains(&(Unique::Username, "ANN".to_string())));
        assert_eq!(change.new_email(), Some("b@x.org"));
        assert!(change
            .given_up
            .contains(&(Unique::Email, "a@x.org".to_string())));
        assert!(change.updates.contains(&set("emailVerified", json!(false))));
        assert!(!change.updates.iter().any(|u| u.path[0] == PASSWORD_FIELD));
    }

    #[tokio::test]
    async fn unlinking_gives_up_the_linked_account() {
        let stored = user(json!({ AUTH_DATA_FIELD: {"weixin": {"openid": "o1"}} }));
        let change = account_change(
            &stored,
            &Map::new(),
            None,
            vec![Link::Unset { platform: "weixin" }],
            false,
            None,
            0,
        )
        .await
        .unwrap();
        assert_eq!(
            change.given_up,
            vec![(Unique::AuthData("weixin"), "o1".to_string())]
        );
        assert!(change.claimed.is_empty());
    }

    #[test]
    fn service_fields_need_the_master_key() {
        let body = json!({"emailVerified": true});
        let body = body.as_object().unwrap();
        assert!(matches!(
            check_service_fields(false, body),
            Err(UsersError::ServiceField(f)) if f == "emailVerified"
        ));
        assert!(check_service_fields(true, body).is_ok());
    }
}
