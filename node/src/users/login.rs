//! Logging in (spec 4.5): with a username, email or phone number and a password, or with a
//! phone number and an SMS code; and starting a session for a user some other proof already
//! identified (a phone sign-up, a linked account).
//!
//! Any mismatch is `LoginFailed` (`WrongCode` from `sms` for a wrong SMS code), and an unknown
//! account takes as long to refuse as a wrong password. Wrong passwords are counted per account
//! cluster-wide (`throttle::LOGIN_WINDOWS`); the per-client-IP limit is the endpoint's
//! (`api::users`), which knows the client.

use basalt_cluster::names::AppId;
use basalt_cluster::object::StoredObject;
use basalt_cluster::update::{FieldUpdate, UpdateOp};
use basalt_cluster::{now_ms, Cluster};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::accounts::{password_matches, set, take_string};
use super::service_writes::write_user;
use super::session::{add_session, new_token};
use super::unique::{self, Unique};
use super::{UsersError, USER_CLASS};
use crate::throttle::{self, LOGIN_WINDOWS};

/// What a login carries, from the query string or the body.
#[derive(Debug, Default, Deserialize)]
pub struct LoginParams {
    username: Option<String>,
    password: Option<String>,
    #[serde(rename = "mobilePhoneNumber")]
    mobile_phone_number: Option<String>,
    #[serde(rename = "smsCode")]
    sms_code: Option<String>,
}

impl LoginParams {
    /// Takes the login members out of a JSON body; a member that is not a string is refused.
    pub fn from_body(body: &mut Map<String, Value>) -> Result<Self, UsersError> {
        Ok(LoginParams {
            username: take_string(body, "username")?,
            password: take_string(body, "password")?,
            mobile_phone_number: take_string(body, "mobilePhoneNumber")?,
            sms_code: take_string(body, "smsCode")?,
        })
    }
}

/// The update marking a user's phone number verified (it received a code).
pub fn phone_verified() -> Vec<FieldUpdate> {
    vec![set("mobilePhoneVerified", json!(true))]
}

/// Logs in to `app`: the whole user (no password) plus a new `sessionToken`.
pub async fn log_in(cluster: &Cluster, app: &AppId, p: LoginParams) -> Result<Value, UsersError> {
    if let Some(code) = p.sms_code.filter(|c| !c.is_empty()) {
        let number = p
            .mobile_phone_number
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                UsersError::MissingLoginData("mobilePhoneNumber is required with smsCode.".into())
            })?;
        let user_id = unique::owner(cluster, app, Unique::Phone, &number)
            .await?
            .ok_or(UsersError::LoginFailed)?;
        crate::sms::take_code(cluster, app, &number, &code).await?;
        let stored = cluster
            .get_stored_object(app, USER_CLASS, &user_id)
            .await?
            .ok_or(UsersError::LoginFailed)?;
        return start_session(cluster, app, &user_id, &stored, phone_verified()).await;
    }
    // decisions.md: 108 when one of username and password is missing, 109 when both are.
    let name = p
        .username
        .or(p.mobile_phone_number)
        .filter(|s| !s.is_empty());
    let password = p.password.filter(|s| !s.is_empty());
    let (name, password) = match (name, password) {
        (Some(n), Some(p)) => (n, p),
        (None, None) => {
            return Err(UsersError::MissingLoginData(
                "username (or email or mobilePhoneNumber) and password are required.".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(UsersError::MissingCredentials(
                "username (or email or mobilePhoneNumber) is required.".into(),
            ))
        }
        (Some(_), None) => {
            return Err(UsersError::MissingCredentials(
                "password is required.".into(),
            ))
        }
    };
    let tries = format!("{app}/login/{}", name.to_lowercase());
    let attempt = throttle::take(cluster, "login", &tries, &LOGIN_WINDOWS).await?;
    let mut user_id = None;
    for kind in [Unique::Username, Unique::Email, Unique::Phone] {
        if let Some(id) = unique::owner(cluster, app, kind, &name).await? {
            user_id = Some(id);
            break;
        }
    }
    let stored = match &user_id {
        Some(id) => cluster.get_stored_object(app, USER_CLASS, id).await?,
        None => None,
    };
    let (Some(user_id), Some(stored)) = (user_id, stored) else {
        crate::auth::password::verify_absent(password).await?;
        return Err(UsersError::LoginFailed);
    };
    if !password_matches(password, &stored).await? {
        return Err(UsersError::LoginFailed);
    }
    throttle::give_back(cluster, attempt).await;
    start_session(cluster, app, &user_id, &stored, Vec::new()).await
}

/// Adds a session to a user, with `extra` updates (fields set to plain values); answers the user
/// (no password) with its `sessionToken`. Beyond `session::MAX_SESSIONS` the oldest live
/// session ends (and the write settles on every member first).
pub async fn start_session(
    cluster: &Cluster,
    app: &AppId,
    user_id: &str,
    stored: &StoredObject,
    extra: Vec<FieldUpdate>,
) -> Result<Value, UsersError> {
    let token = new_token(user_id);
    let now = now_ms();
    let mut updates = add_session(stored, &token, now);
    let mut shown = Map::new();
    for u in &extra {
        if let (Some(k), UpdateOp::Set(v)) = (u.path.first(), &u.op) {
            shown.insert(k.clone(), v.clone());
        }
    }
    updates.extend(extra);
    write_user(cluster, app, user_id, Some(stored), updates, now).await?;
    let mut user = stored.render(user_id);
    for (k, v) in shown {
        user[k] = v;
    }
    user["sessionToken"] = json!(token);
    Ok(user)
}
