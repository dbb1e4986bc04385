//! Users (spec 4.5, 2.3): the endpoints that register, log in, read, list, update and delete
//! users, change a password, check a session, and register/log in/link/unlink with third-party
//! `authData`. `/1/classes/_User[/<id>]` is rewritten to these paths before routing.
//!
//! A user is an object of `_User` (read, listed, created and changed through the object
//! operations, with ACLs); the rules particular to users — password hashing, sessions, the 206
//! rule for changes, logging in, the claims on unique login names — are in `users::{accounts,
//! login, session, unique}`. These handlers parse, call them, and answer.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use basalt_cluster::acl::Principals;
use basalt_cluster::ids::GroupId;
use basalt_cluster::names::{AppId, ObjectId};
use basalt_cluster::now_ms;
use basalt_cluster::object::{random_alphanumeric, StoredObject};
use basalt_cluster::update::{parse_updates, FieldUpdate, UpdateOp};
use serde_json::{json, Map, Value};

use super::context::{ApiBody, ApiPath, ApiQuery, AppState, IdPath, RequestCtx};
use super::error::{ApiError, CommonError, UsersApiError};
use super::objects::{
    create_in, created_response, delete_in, get_in, list_in, update_in, GetParams,
};
use crate::query::params::ListParams;
use crate::throttle::{ClientIp, IpKind};
use crate::users::accounts::{
    account_change, changeable_user, check_login_field_types, check_service_fields, claiming,
    held_names, password_matches, password_update, release_all, set, take_string,
};
use crate::users::login::{self, phone_verified, start_session, LoginParams};
use crate::users::session::{add_session, new_token, only_session, session_user};
use crate::users::third_party::{parse_auth_data, Link, AUTH_DATA_FIELD};
use crate::users::unique::{self, Unique};
use crate::users::{login_fields, UsersError, USER_CLASS};

/// A user just created: its id, its first session's token, and what its create answered.
struct NewUser {
    id: ObjectId,
    token: String,
    created_ms: i64,
    group: GroupId,
    proposed: basalt_cluster::command::Proposed,
}

impl NewUser {
    /// The 201 answer: `Location: <public url>/1/users/<id>`, the `sessionToken` and `extra`.
    fn created(&self, state: &AppState, mut extra: Vec<(&str, Value)>) -> Response {
        extra.insert(0, ("sessionToken", json!(self.token)));
        let path = format!("/1/users/{}", self.id);
        created_response(
            &state.public_url,
            &path,
            self.created_ms,
            &self.id,
            extra,
            self.group,
            &self.proposed,
        )
    }
}

/// How a new user's email address is treated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NewAddress {
    /// With verification on, `emailVerified: false` and a verification link mailed.
    Verify,
    /// Stored as given (a third-party sign-up).
    Keep,
}

/// Creates a user of `updates` (the body's fields and what its kind of sign-up adds; then, for
/// a new address with verification on, `emailVerified: false`; then `after_flag`: the order
/// each sign-up always wrote them in) with a first session, claiming the body's login names
/// and `claims` so that no other user takes them (released when the create fails).
async fn create_user(
    state: &AppState,
    ctx: &RequestCtx,
    body: &Map<String, Value>,
    mut updates: Vec<FieldUpdate>,
    after_flag: Option<FieldUpdate>,
    claims: &[(Unique, String)],
    address: NewAddress,
) -> Result<NewUser, ApiError> {
    let app = &ctx.app.application_id;
    let email = body.get("email").and_then(Value::as_str);
    let verify = match (address, email) {
        (NewAddress::Verify, Some(email)) if ctx.app.email_verify => Some(email),
        _ => None,
    };
    if verify.is_some() {
        updates.push(set("emailVerified", json!(false)));
    }
    updates.extend(after_flag);
    let id = super::objects::new_object_id(state, app, &USER_CLASS);
    let token = new_token(&id);
    let now = now_ms();
    updates.extend(add_session(&StoredObject::new(now), &token, now));
    let mut names = login_fields(body);
    names.extend(claims.iter().cloned());
    let create = create_in(state, ctx, &USER_CLASS, &id, updates);
    let (created_ms, group, proposed) = claiming(&state.cluster, app, &names, &id, create).await?;
    if let Some(email) = verify {
        send_verification(state, ctx, &id, email).await;
    }
    Ok(NewUser {
        id,
        token,
        created_ms,
        group,
        proposed,
    })
}

/// Logs in the user holding `value` as a `kind` name, when one does (`extra`: what the
/// login sets on it).
async fn log_in_holder(
    state: &AppState,
    app: &AppId,
    kind: Unique,
    value: &str,
    extra: Vec<FieldUpdate>,
) -> Result<Option<Value>, ApiError> {
    let Some(uid) = unique::owner(&state.cluster, app, kind, value).await? else {
        return Ok(None);
    };
    let Some(stored) = state
        .cluster
        .get_stored_object(app, &USER_CLASS, &uid)
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(
        start_session(&state.cluster, app, &uid, &stored, extra).await?,
    ))
}

/// Mails a verification link to a new address; a failure is logged (the write stands).
async fn send_verification(state: &AppState, ctx: &RequestCtx, user_id: &ObjectId, email: &str) {
    if let Err(e) = super::email::send_verification(state, ctx, user_id, email).await {
        tracing::warn!("verification mail to {email:?}: {e}");
    }
}

/// A sign-up's password, taken out of its body, which must also name the user
/// (`MissingCredentials` otherwise).
fn credentials(body: &mut Map<String, Value>) -> Result<String, ApiError> {
    let password = take_string(body, "password")?;
    let username = body
        .get("username")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let (Some(_), Some(password)) = (username, password) else {
        return Err(UsersApiError::MissingCredentials(
            "username and password are required.".into(),
        )
        .into());
    };
    Ok(password)
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
    check_service_fields(ctx.master, &body)?;
    check_login_field_types(&body)?;
    let password = credentials(&mut body)?;
    let updates = parse_updates(&body)?;
    let password = Some(password_update(password).await?);
    let user = create_user(
        &state,
        &ctx,
        &body,
        updates,
        password,
        &[],
        NewAddress::Verify,
    )
    .await?;
    Ok(user.created(&state, Vec::new()))
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

/// Logs in (`users::login`); failed attempts count against the client IP's login limit.
async fn log_in(
    state: &AppState,
    ctx: &RequestCtx,
    ip: Option<std::net::IpAddr>,
    p: LoginParams,
) -> Result<Value, ApiError> {
    state.limiter.take(IpKind::Login, ip)?;
    let outcome = login::log_in(&state.cluster, &ctx.app.application_id, p, ip).await;
    if outcome.is_ok() {
        state.limiter.refund(IpKind::Login, ip);
    }
    Ok(outcome?)
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
        .ok_or_else(|| UsersApiError::MissingLoginData("smsCode is required.".into()))?;
    check_service_fields(ctx.master, &body)?;
    check_login_field_types(&body)?;
    let number = match body.get("mobilePhoneNumber").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => {
            return Err(
                UsersApiError::MissingLoginData("mobilePhoneNumber is required.".into()).into(),
            )
        }
    };
    let app = &ctx.app.application_id;
    crate::sms::take_code(&state.cluster, app, &number, &code).await?;
    let password = match take_string(&mut body, "password")? {
        Some(p) => Some(password_update(p).await?),
        None => None,
    };
    if !body.get("username").is_some_and(Value::is_string) {
        body.insert("username".into(), json!(number));
    }
    log_in_or_create_phone_user(state, ctx, &body, number, password).await
}

/// Logs in the user holding `number`, or creates one of `body`. A registration of the same
/// number racing this one makes the claim fail: the user it created is logged in instead (it
/// appears within the reservation's pending time).
async fn log_in_or_create_phone_user(
    state: &AppState,
    ctx: &RequestCtx,
    body: &Map<String, Value>,
    number: String,
    password: Option<FieldUpdate>,
) -> Result<Value, ApiError> {
    let app = &ctx.app.application_id;
    for attempt in 0..20 {
        if let Some(user) =
            log_in_holder(state, app, Unique::Phone, &number, phone_verified()).await?
        {
            return Ok(user);
        }
        match create_phone_user(state, ctx, body, password.clone()).await {
            Err(ApiError::Users(UsersApiError::PhoneTaken(_))) if attempt < 19 => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
    Err(UsersError::PhoneTaken(number).into())
}

/// Creates the user of a phone sign-up; answers it rendered with its session.
async fn create_phone_user(
    state: &AppState,
    ctx: &RequestCtx,
    body: &Map<String, Value>,
    password: Option<FieldUpdate>,
) -> Result<Value, ApiError> {
    let mut updates = parse_updates(body)?;
    updates.extend(phone_verified());
    updates.extend(password);
    let user = create_user(state, ctx, body, updates, None, &[], NewAddress::Verify).await?;
    let stored = state
        .cluster
        .get_stored_object(&ctx.app.application_id, &USER_CLASS, &user.id)
        .await?
        .ok_or_else(|| ApiError::internal("a created user is missing"))?;
    let mut rendered = stored.render(&user.id);
    rendered["sessionToken"] = json!(user.token);
    Ok(rendered)
}

/// The platform accounts `links` link (platform, account id, authData), leaving out unlinks.
fn linked_accounts(links: &[Link]) -> Vec<(&'static str, String, Value)> {
    links
        .iter()
        .cloned()
        .filter_map(|l| match l {
            Link::Set { platform, id, data } => Some((platform, id, data)),
            Link::Unset { .. } => None,
        })
        .collect()
}

/// Logs in the user one of `sets`' platform accounts is linked to, if any.
async fn log_in_linked(
    state: &AppState,
    app: &AppId,
    sets: &[(&'static str, String, Value)],
) -> Result<Option<Value>, ApiError> {
    for (platform, id, _) in sets {
        let kind = Unique::AuthData(platform);
        if let Some(user) = log_in_holder(state, app, kind, id, Vec::new()).await? {
            return Ok(Some(user));
        }
    }
    Ok(None)
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
    let sets = linked_accounts(&links);
    if sets.is_empty() {
        return Err(CommonError::InvalidBody("authData links no account.".into()).into());
    }
    verify_links(state, ctx, &links).await?;
    if let Some(user) = log_in_linked(state, &ctx.app.application_id, &sets).await? {
        return Ok(Json(user).into_response());
    }
    check_service_fields(ctx.master, &body)?;
    check_login_field_types(&body)?;
    let password = take_string(&mut body, "password")?;
    let username = match body.get("username").and_then(Value::as_str) {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => random_alphanumeric(10),
    };
    body.insert("username".into(), json!(username));
    let mut updates = parse_updates(&body)?;
    if let Some(p) = password {
        updates.push(password_update(p).await?);
    }
    let mut claims = Vec::new();
    for (platform, id, data) in sets {
        updates.push(FieldUpdate {
            path: vec![AUTH_DATA_FIELD.into(), platform.into()],
            op: UpdateOp::Set(data),
        });
        claims.push((Unique::AuthData(platform), id));
    }
    let user = create_user(state, ctx, &body, updates, None, &claims, NewAddress::Keep).await?;
    Ok(user.created(state, vec![("username", json!(username))]))
}

pub async fn get_user(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<GetParams>,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        get_in(&state, &ctx, &USER_CLASS, &id, params.include.as_deref()).await?,
    ))
}

pub async fn query_users(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(list_in(&state, &ctx, &USER_CLASS, params).await?))
}

/// The stored user when the request may change it (`accounts::changeable_user`).
async fn authorize_change(
    state: &AppState,
    ctx: &RequestCtx,
    user_id: &ObjectId,
) -> Result<StoredObject, ApiError> {
    let app = &ctx.app.application_id;
    let token = ctx.session_token.as_deref();
    Ok(changeable_user(&state.cluster, app, ctx.master, token, user_id).await?)
}

/// `PUT /1/users/<id>`: only the given keys change; a new password ends the user's other
/// sessions; new login names and linked accounts are claimed first, the ones given up released
/// after (`{"authData": {"<platform>": null}}` unlinks).
pub async fn update_user(
    State(state): State<AppState>,
    ctx: RequestCtx,
    IdPath(id): IdPath,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let stored = authorize_change(&state, &ctx, &id).await?;
    let mut body = body.object()?;
    let links = match body.remove("authData") {
        Some(v) => parse_auth_data(&v)?,
        None => Vec::new(),
    };
    verify_links(&state, &ctx, &links).await?;
    check_service_fields(ctx.master, &body)?;
    check_login_field_types(&body)?;
    let password = take_string(&mut body, "password")?;
    let mut updates = parse_updates(&body)?;
    let mut change = account_change(
        &stored,
        &body,
        password,
        links,
        ctx.app.email_verify,
        ctx.session_token.as_deref(),
        now_ms(),
    )
    .await?;
    updates.append(&mut change.updates);
    let app = ctx.app.application_id.clone();
    let update = update_in(
        &state,
        &ctx,
        &USER_CLASS,
        &id,
        updates,
        Principals::master(),
    );
    let resp = claiming(&state.cluster, &app, &change.claimed, &id, update).await?;
    release_all(&state.cluster, &app, &change.given_up, &id).await;
    if let (true, Some(email)) = (ctx.app.email_verify, change.new_email()) {
        send_verification(&state, &ctx, &id, email).await;
    }
    Ok(resp)
}

/// Asks each linked account's platform whether the data proves it; the master key (the app's
/// own server, which verified the account itself) is trusted.
async fn verify_links(state: &AppState, ctx: &RequestCtx, links: &[Link]) -> Result<(), ApiError> {
    if ctx.master {
        return Ok(());
    }
    Ok(state.identity.verify(&ctx.app, links).await?)
}

/// `DELETE /1/users/<id>`: `{"msg":"ok"}`; the user's login names become free.
pub async fn delete_user(
    State(state): State<AppState>,
    ctx: RequestCtx,
    IdPath(id): IdPath,
) -> Result<Response, ApiError> {
    let stored = authorize_change(&state, &ctx, &id).await?;
    let resp = delete_in(&state, &ctx, &USER_CLASS, &id, Principals::master()).await?;
    let app = ctx.app.application_id.clone();
    release_all(&state.cluster, &app, &held_names(&stored), &id).await;
    Ok(resp)
}

/// `POST|PUT /1/updateUserPassword/<id>` `{oldPassword, newPassword}`: 210 for a wrong old
/// password; the user's other sessions end.
pub async fn update_user_password(
    State(state): State<AppState>,
    ctx: RequestCtx,
    IdPath(id): IdPath,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let stored = authorize_change(&state, &ctx, &id).await?;
    let mut body = body.object()?;
    let old = take_string(&mut body, "oldPassword")?;
    let new = take_string(&mut body, "newPassword")?;
    let (Some(old), Some(new)) = (old, new) else {
        return Err(
            CommonError::InvalidBody("oldPassword and newPassword are required.".into()).into(),
        );
    };
    if !password_matches(old, &stored).await? {
        return Err(UsersApiError::WrongOldPassword.into());
    }
    let updates = vec![
        password_update(new).await?,
        only_session(ctx.session_token.as_deref(), now_ms()),
    ];
    update_in(
        &state,
        &ctx,
        &USER_CLASS,
        &id,
        updates,
        Principals::master(),
    )
    .await?;
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
            Some((uid, _)) if uid.as_str() == id
        ),
        None => false,
    };
    Ok(Json(json!({"msg": if live { "ok" } else { "fail" }})))
}
