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
use basalt_cluster::ids::GroupId;
use basalt_cluster::names::ObjectId;
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

/// The 201 answer of a new user: `Location: <public url>/1/users/<id>`, with `extra` members.
fn user_created(
    state: &AppState,
    user_id: &str,
    created_ms: i64,
    group: GroupId,
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

/// Mails a verification link to a new address; a failure is logged (the write stands).
async fn send_verification(state: &AppState, ctx: &RequestCtx, user_id: &str, email: &str) {
    if let Err(e) = super::email::send_verification(state, ctx, user_id, email).await {
        tracing::warn!("verification mail to {email:?}: {e}");
    }
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
    let password = take_string(&mut body, "password")?;
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
    let mut updates = parse_updates(&body)?;
    let app = ctx.app.application_id.clone();
    let user_id = super::objects::new_object_id(&state, &ctx.app.application_id, USER_CLASS);
    let token = new_token(&user_id);
    let now = now_ms();
    let email = body.get("email").and_then(Value::as_str);
    if ctx.app.email_verify && email.is_some() {
        updates.push(set("emailVerified", json!(false)));
    }
    updates.push(password_update(password).await?);
    updates.extend(add_session(&StoredObject::new(now), &token, now));
    let names = login_fields(&body);
    let create = create_in(&state, &ctx, USER_CLASS, &user_id, updates);
    let (created_ms, group, p) = claiming(&state.cluster, &app, &names, &user_id, create).await?;
    if let (true, Some(email)) = (ctx.app.email_verify, email) {
        send_verification(&state, &ctx, &user_id, email).await;
    }
    let extra = vec![("sessionToken", json!(token))];
    Ok(user_created(&state, &user_id, created_ms, group, &p, extra))
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
    let number = body
        .get("mobilePhoneNumber")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| UsersApiError::MissingLoginData("mobilePhoneNumber is required.".into()))?
        .to_string();
    let app = ctx.app.application_id.clone();
    crate::sms::take_code(&state.cluster, &app, &number, &code).await?;
    let password = take_string(&mut body, "password")?;
    if !body.get("username").is_some_and(Value::is_string) {
        body.insert("username".into(), json!(number));
    }
    let password = match password {
        Some(p) => Some(password_update(p).await?),
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
                let extra = phone_verified();
                return Ok(start_session(&state.cluster, &app, &uid, &stored, extra).await?);
            }
        }
        match create_phone_user(state, ctx, &body, password.clone()).await {
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
    let app = ctx.app.application_id.clone();
    let mut updates = parse_updates(body)?;
    updates.extend(phone_verified());
    updates.extend(password);
    let email = body.get("email").and_then(Value::as_str);
    if ctx.app.email_verify && email.is_some() {
        updates.push(set("emailVerified", json!(false)));
    }
    let user_id = super::objects::new_object_id(state, &ctx.app.application_id, USER_CLASS);
    let token = new_token(&user_id);
    let now = now_ms();
    updates.extend(add_session(&StoredObject::new(now), &token, now));
    let names = login_fields(body);
    let create = create_in(state, ctx, USER_CLASS, &user_id, updates);
    claiming(&state.cluster, &app, &names, &user_id, create).await?;
    if let (true, Some(email)) = (ctx.app.email_verify, email) {
        send_verification(state, ctx, &user_id, email).await;
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
        return Err(CommonError::InvalidBody("authData links no account.".into()).into());
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
                let user = start_session(&state.cluster, &app, &uid, &stored, Vec::new()).await?;
                return Ok(Json(user).into_response());
            }
        }
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
    for (platform, _, data) in &sets {
        updates.push(FieldUpdate {
            path: vec![AUTH_DATA_FIELD.into(), (*platform).into()],
            op: UpdateOp::Set(data.clone()),
        });
    }
    let user_id = super::objects::new_object_id(state, &ctx.app.application_id, USER_CLASS);
    let token = new_token(&user_id);
    let now = now_ms();
    updates.extend(add_session(&StoredObject::new(now), &token, now));
    let mut names = login_fields(&body);
    names.extend(
        sets.iter()
            .map(|(p, id, _)| (Unique::AuthData(p), id.clone())),
    );
    let create = create_in(state, ctx, USER_CLASS, &user_id, updates);
    let (created_ms, group, p) = claiming(&state.cluster, &app, &names, &user_id, create).await?;
    let extra = vec![
        ("sessionToken", json!(token)),
        ("username", json!(username)),
    ];
    Ok(user_created(state, &user_id, created_ms, group, &p, extra))
}

pub async fn get_user(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<GetParams>,
    IdPath(id): IdPath,
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
    let update = update_in(&state, &ctx, USER_CLASS, &id, updates, None);
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
    let resp = delete_in(&state, &ctx, USER_CLASS, &id, None).await?;
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
