//! Users (spec 4.5, 2.3): register, log in, read, list, update, delete, change the password,
//! check a session, and register/log in/link/unlink with third-party `authData`. `/1/classes/_User[/<id>]` is rewritten to these paths before routing.
//!
//! A user is an object of `_User` (read and listed through the object operations, with ACLs);
//! what is particular to users — password hashing, sessions, the 206 rule for changes and
//! cluster-wide unique login names — is here and in `users::{session, unique}`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use basalt_cluster::object::{new_object_id, random_alphanumeric, StoredObject};
use basalt_cluster::update::{parse_updates, FieldUpdate, UpdateOp};
use basalt_cluster::{now_ms, Command, CommandResult};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::context::{ApiBody, ApiPath, ApiQuery, AppState, RequestCtx};
use super::error::ApiError;
use super::objects::{
    check_object_id, create_in, created_response, delete_in, get_in, list_in, update_in, GetParams,
};
use crate::query::params::ListParams;
use crate::throttle::{self, ClientIp, IpKind, LOGIN_WINDOWS};
use crate::users::session::{add_session, ends_sessions, new_token, only_session, session_user};
use crate::users::third_party::{identity_of, parse_auth_data, Link, AUTH_DATA_FIELD, PLATFORMS};
use crate::users::unique::{self, Unique};
use crate::users::{login_fields, PASSWORD_FIELD, SERVICE_FIELDS, USER_CLASS};

async fn hash(password: String) -> Result<String, ApiError> {
    Ok(crate::auth::password::hash(password).await?)
}

async fn verify(password: String, stored: &StoredObject) -> Result<bool, ApiError> {
    let Some(h) = stored.fields.get(PASSWORD_FIELD).and_then(Value::as_str) else {
        return Ok(crate::auth::password::verify_absent(password).await?);
    };
    Ok(crate::auth::password::verify(password, h.to_string()).await?)
}

fn set(path: &str, v: Value) -> FieldUpdate {
    FieldUpdate {
        path: vec![path.to_string()],
        op: UpdateOp::Set(v),
    }
}

/// Takes a non-empty string member out of a body; 107 when it is not a string.
fn take_string(body: &mut Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match body.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::InvalidBody(format!("{key} must be a string."))),
    }
}

/// Refuses fields only the service sets, unless the master key is used.
fn check_service_fields(ctx: &RequestCtx, body: &Map<String, Value>) -> Result<(), ApiError> {
    if ctx.master {
        return Ok(());
    }
    match SERVICE_FIELDS.iter().find(|f| body.contains_key(**f)) {
        Some(f) => Err(ApiError::ReservedKey((*f).to_string())),
        None => Ok(()),
    }
}

/// Login names must be strings.
fn check_login_field_types(body: &Map<String, Value>) -> Result<(), ApiError> {
    for kind in [Unique::Username, Unique::Email, Unique::Phone] {
        match body.get(kind.field()) {
            None | Some(Value::String(_)) | Some(Value::Null) => {}
            Some(_) => {
                return Err(ApiError::InvalidBody(format!(
                    "{} must be a string.",
                    kind.field()
                )))
            }
        }
    }
    Ok(())
}

/// Claims every value; on a refusal gives back what was claimed.
async fn reserve_all(
    state: &AppState,
    app: &str,
    values: &[(Unique, String)],
    user_id: &str,
) -> Result<(), ApiError> {
    for (i, (kind, v)) in values.iter().enumerate() {
        if let Err(e) = unique::reserve(&state.cluster, app, *kind, v, user_id).await {
            release_all(state, app, &values[..i], user_id).await;
            return Err(e);
        }
    }
    Ok(())
}

async fn release_all(state: &AppState, app: &str, values: &[(Unique, String)], user_id: &str) {
    for (kind, v) in values {
        if let Err(e) = unique::release(&state.cluster, app, *kind, v, user_id).await {
            tracing::warn!("releasing {} {v:?}: {e}", kind.field());
        }
    }
}

/// The 201 answer of a new user: `Location: <public url>/1/users/<id>`, with `extra` members.
fn user_created(
    state: &AppState,
    user_id: &str,
    created_ms: i64,
    group: u32,
    p: &basalt_cluster::command::Proposed,
    extra: Vec<(&str, Value)>,
) -> Response {
    let path = format!("/1/users/{user_id}");
    created_response(
        &state.public_url,
        &path,
        created_ms,
        user_id,
        extra,
        group,
        p,
    )
}

/// `POST /1/users`: registers a user; 201 `{createdAt, objectId, sessionToken}`.
pub async fn sign_up(
    State(state): State<AppState>,
    ctx: RequestCtx,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let mut body = body.object()?;
    if let Some(auth) = body.remove("authData") {
        let links = parse_auth_data(&auth)?;
        return third_party_sign_up(&state, &ctx, body, links).await;
    }
    if body.contains_key("smsCode") {
        return phone_sign_up(&state, &ctx, body)
            .await
            .map(|u| Json(u).into_response());
    }
    check_service_fields(&ctx, &body)?;
    check_login_field_types(&body)?;
    let password = take_string(&mut body, "password")?;
    let username = body
        .get("username")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let (Some(_), Some(password)) = (username, password) else {
        return Err(ApiError::MissingCredentials(
            "username and password are required.".into(),
        ));
    };
    let mut updates = parse_updates(&body)?;
    let app = ctx.app.application_id.clone();
    let user_id = new_object_id();
    let token = new_token(&user_id);
    let now = now_ms();
    if ctx.app.email_verify && body.get("email").is_some_and(Value::is_string) {
        updates.push(set("emailVerified", json!(false)));
    }
    updates.push(set(PASSWORD_FIELD, json!(hash(password).await?)));
    updates.extend(add_session(&StoredObject::new(now), &token, now));
    let names = login_fields(&body);
    reserve_all(&state, &app, &names, &user_id).await?;
    match create_in(&state, &ctx, USER_CLASS, &user_id, updates).await {
        Ok((created_ms, group, p)) => {
            if let (true, Some(email)) = (
                ctx.app.email_verify,
                body.get("email").and_then(Value::as_str),
            ) {
                if let Err(e) = super::email::send_verification(&state, &ctx, &user_id, email).await
                {
                    tracing::warn!("verification mail to {email:?}: {e}");
                }
            }
            let extra = vec![("sessionToken", json!(token))];
            Ok(user_created(&state, &user_id, created_ms, group, &p, extra))
        }
        Err(e) => {
            release_all(&state, &app, &names, &user_id).await;
            Err(e)
        }
    }
}

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
    fn from_body(body: &mut Map<String, Value>) -> Result<Self, ApiError> {
        Ok(LoginParams {
            username: take_string(body, "username")?,
            password: take_string(body, "password")?,
            mobile_phone_number: take_string(body, "mobilePhoneNumber")?,
            sms_code: take_string(body, "smsCode")?,
        })
    }
}

/// `GET /1/login?username=&password=`.
pub async fn log_in_by_query(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ClientIp(ip): ClientIp,
    ApiQuery(p): ApiQuery<LoginParams>,
) -> Result<Json<Value>, ApiError> {
    log_in(&state, &ctx, ip, p).await.map(Json)
}

/// `POST /1/login` with `{username, password}` or `{mobilePhoneNumber, smsCode}`.
pub async fn log_in_by_body(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ClientIp(ip): ClientIp,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let mut body = body.object()?;
    let params = LoginParams::from_body(&mut body)?;
    log_in(&state, &ctx, ip, params).await.map(Json)
}

/// Logs in with a username, email or phone number and a password, or with a phone number and
/// an SMS code: the whole user (no password) plus a new `sessionToken`. Any mismatch is 101
/// (207 for a wrong SMS code). Wrong attempts are limited per client IP and per account
/// (`throttle`), and an unknown account takes as long to refuse as a wrong password.
async fn log_in(
    state: &AppState,
    ctx: &RequestCtx,
    ip: Option<std::net::IpAddr>,
    p: LoginParams,
) -> Result<Value, ApiError> {
    state.limiter.take(IpKind::Login, ip)?;
    let outcome = log_in_checked(state, ctx, p).await;
    if outcome.is_ok() {
        state.limiter.refund(IpKind::Login, ip);
    }
    outcome
}

async fn log_in_checked(
    state: &AppState,
    ctx: &RequestCtx,
    p: LoginParams,
) -> Result<Value, ApiError> {
    if let Some(code) = p.sms_code.filter(|c| !c.is_empty()) {
        let number = p
            .mobile_phone_number
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::MissingLoginData("mobilePhoneNumber is required with smsCode.".into())
            })?;
        let app = &ctx.app.application_id;
        let user_id = unique::owner(&state.cluster, app, Unique::Phone, &number)
            .await?
            .ok_or(ApiError::LoginFailed)?;
        crate::sms::take_code(&state.cluster, app, &number, &code).await?;
        let stored = state
            .cluster
            .get_stored_object(app, USER_CLASS, &user_id)
            .await?
            .ok_or(ApiError::LoginFailed)?;
        return start_session(state, ctx, &user_id, &stored, phone_verified()).await;
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
            return Err(ApiError::MissingLoginData(
                "username (or email or mobilePhoneNumber) and password are required.".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(ApiError::MissingCredentials(
                "username (or email or mobilePhoneNumber) is required.".into(),
            ))
        }
        (Some(_), None) => {
            return Err(ApiError::MissingCredentials("password is required.".into()))
        }
    };
    let app = &ctx.app.application_id;
    let tries = format!("{app}/login/{}", name.to_lowercase());
    let attempt = throttle::take(&state.cluster, "login", &tries, &LOGIN_WINDOWS).await?;
    let mut user_id = None;
    for kind in [Unique::Username, Unique::Email, Unique::Phone] {
        if let Some(id) = unique::owner(&state.cluster, app, kind, &name).await? {
            user_id = Some(id);
            break;
        }
    }
    let stored = match &user_id {
        Some(id) => state.cluster.get_stored_object(app, USER_CLASS, id).await?,
        None => None,
    };
    let (Some(user_id), Some(stored)) = (user_id, stored) else {
        crate::auth::password::verify_absent(password).await?;
        return Err(ApiError::LoginFailed);
    };
    if !verify(password, &stored).await? {
        return Err(ApiError::LoginFailed);
    }
    throttle::give_back(&state.cluster, attempt).await;
    start_session(state, ctx, &user_id, &stored, Vec::new()).await
}

/// The update marking a user's phone number verified (it received a code).
fn phone_verified() -> Vec<FieldUpdate> {
    vec![set("mobilePhoneVerified", json!(true))]
}

/// Adds a session to a user, with `extra` updates (fields set to plain values); answers the user
/// (no password) with its `sessionToken`.
async fn start_session(
    state: &AppState,
    ctx: &RequestCtx,
    user_id: &str,
    stored: &StoredObject,
    extra: Vec<FieldUpdate>,
) -> Result<Value, ApiError> {
    let app = &ctx.app.application_id;
    let token = new_token(user_id);
    let now = now_ms();
    let mut updates = add_session(stored, &token, now);
    // Beyond `MAX_SESSIONS` the oldest live session ends.
    let prunes_live = ends_sessions(Some(stored), &updates, now);
    let mut shown = Map::new();
    for u in &extra {
        if let (Some(k), UpdateOp::Set(v)) = (u.path.first(), &u.op) {
            shown.insert(k.clone(), v.clone());
        }
    }
    updates.extend(extra);
    let cmd = Command::UpdateObject {
        app: app.clone(),
        class: USER_CLASS.into(),
        object_id: user_id.to_string(),
        now_ms: now,
        updates,
        principals: None,
    };
    let group = state.cluster.shard_for(app, USER_CLASS, user_id);
    let proposed = if prunes_live {
        state.cluster.propose_settled(group, cmd).await
    } else {
        state.cluster.propose(group, cmd).await
    };
    match proposed {
        Ok(p) if matches!(p.result, CommandResult::Updated { .. }) => {}
        Ok(_) => return Err(ApiError::internal("login: unexpected result")),
        Err(e) => return Err(ApiError::from_cluster(e, user_id)),
    }
    let mut user = stored.render(user_id);
    for (k, v) in shown {
        user[k] = v;
    }
    user["sessionToken"] = json!(token);
    Ok(user)
}

/// Phone one-step register or log in (`POST /1/users` or `/1/usersv1` with `{mobilePhoneNumber,
/// smsCode, ...}`): takes the code, then logs in the user holding the number, or creates one
/// (username defaulting to the number, other body fields kept). Either way 200 with the whole
/// user, `mobilePhoneVerified: true` and a `sessionToken`.
async fn phone_sign_up(
    state: &AppState,
    ctx: &RequestCtx,
    mut body: Map<String, Value>,
) -> Result<Value, ApiError> {
    let code = take_string(&mut body, "smsCode")?
        .ok_or_else(|| ApiError::MissingLoginData("smsCode is required.".into()))?;
    check_service_fields(ctx, &body)?;
    check_login_field_types(&body)?;
    let number = body
        .get("mobilePhoneNumber")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::MissingLoginData("mobilePhoneNumber is required.".into()))?
        .to_string();
    let app = ctx.app.application_id.clone();
    crate::sms::take_code(&state.cluster, &app, &number, &code).await?;
    let password = take_string(&mut body, "password")?;
    if !body.get("username").is_some_and(Value::is_string) {
        body.insert("username".into(), json!(number));
    }
    let password_hash = match password {
        Some(p) => Some(hash(p).await?),
        None => None,
    };
    // A registration of the same number racing this one makes the claim fail: log in the user
    // it created instead (it appears within the reservation's pending time).
    for attempt in 0..20 {
        if let Some(uid) = unique::owner(&state.cluster, &app, Unique::Phone, &number).await? {
            if let Some(stored) = state
                .cluster
                .get_stored_object(&app, USER_CLASS, &uid)
                .await?
            {
                return start_session(state, ctx, &uid, &stored, phone_verified()).await;
            }
        }
        match create_phone_user(state, ctx, &body, password_hash.clone()).await {
            Err(ApiError::PhoneTaken(_)) if attempt < 19 => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
    Err(ApiError::PhoneTaken(number))
}

/// Creates the user of a phone sign-up; answers it rendered with its session.
async fn create_phone_user(
    state: &AppState,
    ctx: &RequestCtx,
    body: &Map<String, Value>,
    password_hash: Option<String>,
) -> Result<Value, ApiError> {
    let app = ctx.app.application_id.clone();
    let mut updates = parse_updates(body)?;
    updates.extend(phone_verified());
    if let Some(h) = password_hash {
        updates.push(set(PASSWORD_FIELD, json!(h)));
    }
    let email = body.get("email").and_then(Value::as_str);
    if ctx.app.email_verify && email.is_some() {
        updates.push(set("emailVerified", json!(false)));
    }
    let user_id = new_object_id();
    let token = new_token(&user_id);
    let now = now_ms();
    updates.extend(add_session(&StoredObject::new(now), &token, now));
    let names = login_fields(body);
    reserve_all(state, &app, &names, &user_id).await?;
    if let Err(e) = create_in(state, ctx, USER_CLASS, &user_id, updates).await {
        release_all(state, &app, &names, &user_id).await;
        return Err(e);
    }
    if let (true, Some(email)) = (ctx.app.email_verify, email) {
        if let Err(e) = super::email::send_verification(state, ctx, &user_id, email).await {
            tracing::warn!("verification mail to {email:?}: {e}");
        }
    }
    let stored = state
        .cluster
        .get_stored_object(&app, USER_CLASS, &user_id)
        .await?
        .ok_or_else(|| ApiError::internal("a created user is missing"))?;
    let mut user = stored.render(&user_id);
    user["sessionToken"] = json!(token);
    Ok(user)
}

/// Register or log in with a platform account (`POST /1/users {"authData": ...}`): a linked
/// account logs its user in (200); otherwise a new user with those links is created (201,
/// a random username unless one is given).
async fn third_party_sign_up(
    state: &AppState,
    ctx: &RequestCtx,
    mut body: Map<String, Value>,
    links: Vec<Link>,
) -> Result<Response, ApiError> {
    let app = ctx.app.application_id.clone();
    let sets: Vec<(&'static str, String, Value)> = links
        .iter()
        .cloned()
        .filter_map(|l| match l {
            Link::Set { platform, id, data } => Some((platform, id, data)),
            Link::Unset { .. } => None,
        })
        .collect();
    if sets.is_empty() {
        return Err(ApiError::InvalidBody("authData links no account.".into()));
    }
    verify_links(state, ctx, &links).await?;
    for (platform, id, _) in &sets {
        let kind = Unique::AuthData(platform);
        if let Some(uid) = unique::owner(&state.cluster, &app, kind, id).await? {
            if let Some(stored) = state
                .cluster
                .get_stored_object(&app, USER_CLASS, &uid)
                .await?
            {
                let user = start_session(state, ctx, &uid, &stored, Vec::new()).await?;
                return Ok(Json(user).into_response());
            }
        }
    }
    check_service_fields(ctx, &body)?;
    check_login_field_types(&body)?;
    let password = take_string(&mut body, "password")?;
    let username = match body.get("username").and_then(Value::as_str) {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => random_alphanumeric(10),
    };
    body.insert("username".into(), json!(username));
    let mut updates = parse_updates(&body)?;
    if let Some(p) = password {
        updates.push(set(PASSWORD_FIELD, json!(hash(p).await?)));
    }
    for (platform, _, data) in &sets {
        updates.push(FieldUpdate {
            path: vec![AUTH_DATA_FIELD.into(), (*platform).into()],
            op: UpdateOp::Set(data.clone()),
        });
    }
    let user_id = new_object_id();
    let token = new_token(&user_id);
    let now = now_ms();
    updates.extend(add_session(&StoredObject::new(now), &token, now));
    let mut names = login_fields(&body);
    names.extend(
        sets.iter()
            .map(|(p, id, _)| (Unique::AuthData(p), id.clone())),
    );
    reserve_all(state, &app, &names, &user_id).await?;
    match create_in(state, ctx, USER_CLASS, &user_id, updates).await {
        Ok((created_ms, group, p)) => {
            let extra = vec![
                ("sessionToken", json!(token)),
                ("username", json!(username)),
            ];
            Ok(user_created(state, &user_id, created_ms, group, &p, extra))
        }
        Err(e) => {
            release_all(state, &app, &names, &user_id).await;
            Err(e)
        }
    }
}

pub async fn get_user(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(id): ApiPath<String>,
    ApiQuery(params): ApiQuery<GetParams>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        get_in(&state, &ctx, USER_CLASS, &id, params.include.as_deref()).await?,
    ))
}

pub async fn query_users(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(list_in(&state, &ctx, USER_CLASS, params).await?))
}

/// The stored user when the request may change it: the master key, or that user's live
/// session (206 otherwise; 101 when there is no such user).
async fn authorize_change(
    state: &AppState,
    ctx: &RequestCtx,
    user_id: &str,
) -> Result<StoredObject, ApiError> {
    check_object_id(user_id)?;
    let app = &ctx.app.application_id;
    if !ctx.master {
        let token = ctx
            .session_token
            .as_deref()
            .ok_or(ApiError::SessionRequired)?;
        match session_user(&state.cluster, app, token).await? {
            Some((id, _)) if id == user_id => {}
            _ => return Err(ApiError::SessionRequired),
        }
    }
    state
        .cluster
        .get_stored_object(app, USER_CLASS, user_id)
        .await?
        .ok_or_else(|| ApiError::ObjectNotFound(user_id.to_string()))
}

/// `PUT /1/users/<id>`: only the given keys change; a new password ends the user's other
/// sessions; new login names and linked accounts are claimed first, the ones given up released
/// after (`{"authData": {"<platform>": null}}` unlinks).
pub async fn update_user(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(id): ApiPath<String>,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let stored = authorize_change(&state, &ctx, &id).await?;
    let mut body = body.object()?;
    let links = match body.remove("authData") {
        Some(v) => parse_auth_data(&v)?,
        None => Vec::new(),
    };
    verify_links(&state, &ctx, &links).await?;
    check_service_fields(&ctx, &body)?;
    check_login_field_types(&body)?;
    let password = take_string(&mut body, "password")?;
    let mut updates = parse_updates(&body)?;
    let now = now_ms();
    if let Some(p) = password {
        updates.push(set(PASSWORD_FIELD, json!(hash(p).await?)));
        updates.push(only_session(ctx.session_token.as_deref(), now));
    }
    let app = ctx.app.application_id.clone();
    let old = login_fields(&stored.fields);
    let new = login_fields(&body);
    let same = |a: &(Unique, String), b: &(Unique, String)| {
        a.0 == b.0 && a.0.normalize(&a.1) == b.0.normalize(&b.1)
    };
    let mut claimed: Vec<(Unique, String)> = new
        .iter()
        .filter(|n| !old.iter().any(|o| same(o, n)))
        .cloned()
        .collect();
    let email_changed = claimed.iter().any(|(k, _)| *k == Unique::Email);
    if email_changed && ctx.app.email_verify {
        updates.push(set("emailVerified", json!(false)));
    }
    // A new number has not received a code yet.
    if claimed.iter().any(|(k, _)| *k == Unique::Phone) && !body.contains_key("mobilePhoneVerified")
    {
        updates.push(set("mobilePhoneVerified", json!(false)));
    }
    // Names the update removes or replaces.
    let mut given_up: Vec<(Unique, String)> = old
        .iter()
        .filter(|(k, _)| body.contains_key(k.field()))
        .filter(|o| !new.iter().any(|n| same(o, n)))
        .cloned()
        .collect();
    for link in links {
        let (platform, op) = match link {
            Link::Set { platform, id, data } => {
                claimed.push((Unique::AuthData(platform), id));
                (platform, UpdateOp::Set(data))
            }
            Link::Unset { platform } => {
                if let Some(current) = linked_identity(&stored, platform) {
                    given_up.push((Unique::AuthData(platform), current));
                }
                (platform, UpdateOp::Delete)
            }
        };
        updates.push(FieldUpdate {
            path: vec![AUTH_DATA_FIELD.into(), platform.into()],
            op,
        });
    }
    reserve_all(&state, &app, &claimed, &id).await?;
    match update_in(&state, &ctx, USER_CLASS, &id, updates, None).await {
        Ok(resp) => {
            release_all(&state, &app, &given_up, &id).await;
            let new_email = claimed.iter().find(|(k, _)| *k == Unique::Email);
            if let (true, Some((_, email))) = (ctx.app.email_verify, new_email) {
                if let Err(e) = super::email::send_verification(&state, &ctx, &id, email).await {
                    tracing::warn!("verification mail to {email:?}: {e}");
                }
            }
            Ok(resp)
        }
        Err(e) => {
            release_all(&state, &app, &claimed, &id).await;
            Err(e)
        }
    }
}

/// Asks each linked account's platform whether the data proves it; the master key (the app's
/// own server, which verified the account itself) is trusted.
async fn verify_links(state: &AppState, ctx: &RequestCtx, links: &[Link]) -> Result<(), ApiError> {
    if ctx.master {
        return Ok(());
    }
    Ok(state.identity.verify(&ctx.app, links).await?)
}

/// The account id a user has linked for a platform.
fn linked_identity(user: &StoredObject, platform: &str) -> Option<String> {
    user.fields
        .get(AUTH_DATA_FIELD)
        .and_then(|a| a.get(platform))
        .and_then(|d| identity_of(platform, d))
}

/// `DELETE /1/users/<id>`: `{"msg":"ok"}`; the user's login names become free.
pub async fn delete_user(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let stored = authorize_change(&state, &ctx, &id).await?;
    let resp = delete_in(&state, &ctx, USER_CLASS, &id, None).await?;
    let app = ctx.app.application_id.clone();
    let mut names = login_fields(&stored.fields);
    for (platform, _) in PLATFORMS {
        if let Some(account) = linked_identity(&stored, platform) {
            names.push((Unique::AuthData(platform), account));
        }
    }
    release_all(&state, &app, &names, &id).await;
    Ok(resp)
}

/// `POST|PUT /1/updateUserPassword/<id>` `{oldPassword, newPassword}`: 210 for a wrong old
/// password; the user's other sessions end.
pub async fn update_user_password(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(id): ApiPath<String>,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let stored = authorize_change(&state, &ctx, &id).await?;
    let mut body = body.object()?;
    let old = take_string(&mut body, "oldPassword")?;
    let new = take_string(&mut body, "newPassword")?;
    let (Some(old), Some(new)) = (old, new) else {
        return Err(ApiError::InvalidBody(
            "oldPassword and newPassword are required.".into(),
        ));
    };
    if !verify(old, &stored).await? {
        return Err(ApiError::WrongOldPassword);
    }
    let updates = vec![
        set(PASSWORD_FIELD, json!(hash(new).await?)),
        only_session(ctx.session_token.as_deref(), now_ms()),
    ];
    update_in(&state, &ctx, USER_CLASS, &id, updates, None).await?;
    Ok(Json(json!({"msg": "ok"})).into_response())
}

/// `GET /1/checkSession/<objectId>`: whether the session header is a live session of that user.
pub async fn check_session(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let live = match ctx.session_token.as_deref() {
        Some(t) => matches!(
            session_user(&state.cluster, &ctx.app.application_id, t).await?,
            Some((uid, _)) if uid == id
        ),
        None => false,
    };
    Ok(Json(json!({"msg": if live { "ok" } else { "fail" }})))
}
