//! Logging in (spec 4.5): with a username, email or phone number and a password, or with a
//! phone number and an SMS code; and starting a session for a user some other proof already
//! identified (a phone sign-up, a linked account).
//!
//! Any mismatch is `LoginFailed` (`WrongCode` from `sms` for a wrong SMS code), and an unknown
//! account takes as long to refuse as a wrong password. Wrong passwords are counted cluster-wide
//! per account (all its names together) from each client address, and per account from all
//! addresses (`throttle::take_login`); the per-client-IP limit of the node is the endpoint's
//! (`api::users`).

use basalt_cluster::names::{AppId, ObjectId};
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
use std::net::IpAddr;

use crate::throttle::{self, LoginRefusal};

/// What a login carries, from the query string or the body.
#[derive(Debug, Default, Deserialize)]
pub struct LoginParams {
    username: Option<String>,
    password: Option<String>,
    #[serde(rename = "mobilePhoneNumber")]
    mobile_phone_number: Option<String>,
    #[serde(rename = "smsCode")]
    sms_code: Option<String>,
    /// A captcha's pass (`verifyCaptcha`), which a login needs once the account failed too
    /// many logins from many addresses.
    validate_token: Option<String>,
}

impl LoginParams {
    /// Takes the login members out of a JSON body; a member that is not a string is refused.
    pub fn from_body(body: &mut Map<String, Value>) -> Result<Self, UsersError> {
        Ok(LoginParams {
            username: take_string(body, "username")?,
            password: take_string(body, "password")?,
            mobile_phone_number: take_string(body, "mobilePhoneNumber")?,
            sms_code: take_string(body, "smsCode")?,
            validate_token: take_string(body, "validate_token")?,
        })
    }
}

/// The update marking a user's phone number verified (it received a code).
pub fn phone_verified() -> Vec<FieldUpdate> {
    vec![set("mobilePhoneVerified", json!(true))]
}

/// Logs in to `app` from the client at `ip`: the whole user (no password) plus a new
/// `sessionToken`.
pub async fn log_in(
    cluster: &Cluster,
    app: &AppId,
    p: LoginParams,
    ip: Option<IpAddr>,
) -> Result<Value, UsersError> {
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
            .get_stored_object(app, &USER_CLASS, &user_id)
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
    let mut user_id = None;
    for kind in [Unique::Username, Unique::Email, Unique::Phone] {
        if let Some(id) = unique::owner(cluster, app, kind, &name).await? {
            user_id = Some(id);
            break;
        }
    }
    // Failures count per account, whichever of its names was used (an unknown name is its own
    // account), and per client address on it.
    let account = match &user_id {
        Some(id) => format!("{app}/login/user/{id}"),
        None => format!("{app}/login/name/{}", name.to_lowercase()),
    };
    let attempt = take_attempt(cluster, app, &account, ip, p.validate_token.as_deref()).await?;
    let stored = match &user_id {
        Some(id) => cluster.get_stored_object(app, &USER_CLASS, id).await?,
        None => None,
    };
    let (Some(user_id), Some(stored)) = (user_id, stored) else {
        crate::password::verify_absent(password).await?;
        return Err(UsersError::LoginFailed);
    };
    if !password_matches(password, &stored).await? {
        return Err(UsersError::LoginFailed);
    }
    attempt.succeeded(cluster).await;
    start_session(cluster, app, &user_id, &stored, Vec::new()).await
}

/// Counts a login attempt (`throttle::take_login`), with the captcha pass when the account
/// asks for one.
async fn take_attempt(
    cluster: &Cluster,
    app: &AppId,
    account: &str,
    ip: Option<IpAddr>,
    pass: Option<&str>,
) -> Result<throttle::LoginAttempt, UsersError> {
    match throttle::take_login(cluster, "login", account, ip, false).await {
        Ok(a) => Ok(a),
        Err(LoginRefusal::Throttled(e)) => Err(e.into()),
        Err(LoginRefusal::ProofNeeded) => {
            let pass = pass
                .filter(|p| !p.is_empty())
                .ok_or(UsersError::CaptchaRequired)?;
            let taken = crate::captcha::take_pass(cluster, app, pass)
                .await
                .map_err(|_| UsersError::CaptchaRequired)?;
            if !taken {
                return Err(UsersError::CaptchaRequired);
            }
            match throttle::take_login(cluster, "login", account, ip, true).await {
                Ok(a) => Ok(a),
                Err(LoginRefusal::Throttled(e)) => Err(e.into()),
                Err(LoginRefusal::ProofNeeded) => Err(UsersError::CaptchaRequired),
            }
        }
    }
}

/// Adds a session to a user, with `extra` updates (fields set to plain values); answers the user
/// (no password) with its `sessionToken`. Beyond `session::MAX_SESSIONS` the oldest live
/// session ends (and the write settles on every member first).
pub async fn start_session(
    cluster: &Cluster,
    app: &AppId,
    user_id: &ObjectId,
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
