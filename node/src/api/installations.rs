//! Installations (spec 2.5, 4.12): create, read, list, update and delete objects of
//! `_Installation`; `/1/classes/_Installation[/<id>]` is rewritten to these paths before routing.
//!
//! A new installation is checked by `installations::check_new` (131). Its `installationId` and
//! `deviceToken` are claimed cluster-wide (`users::unique`) before it is created, so that an
//! installation sent again — by the same device through any node, even at the same moment —
//! updates the one holding them (200 `{updatedAt, objectId}`) instead of making a second.
//! Updates keep `deviceType`, `deviceToken` and `installationId` (136); `channels` is an array
//! of strings, set whole or changed with `AddUnique` and `Remove`.
//!
//! Access: any client with the app's keys may create an installation. One created without an
//! ACL gets `{"*": {"write": true}}`: whoever knows its objectId (the device that created it)
//! may update or delete it, and nobody may read or list installations without the master key
//! (or an ACL that grants it), so no client can list every device.

use std::time::Duration;

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use basalt_cluster::acl::Principals;
use basalt_cluster::names::{AppId, ObjectId};
use basalt_cluster::object::StoredObject;
use basalt_cluster::update::{parse_updates, FieldUpdate, UpdateOp};
use serde_json::{json, Map, Value};

use super::context::{ApiBody, ApiQuery, AppState, IdPath, RequestCtx};
use super::error::{ApiError, CommonError, ObjectsApiError, PushApiError};
use super::objects::{
    apply_update, create_in, created_response, delete_in, get_in, list_in, update_in,
    updated_response, GetParams,
};
use crate::installations::{check_change, check_new, InstallationError, INSTALLATION_CLASS};
use crate::query::params::ListParams;
use crate::users::session::principals;
use crate::users::unique::{self, Unique};
use crate::users::UsersError;

/// How long a create waits for the installation that claimed its id or token first (a
/// concurrent create of the same device) to appear before answering 503: longer than a claim
/// whose create never happened stays (`unique::PENDING_MS`), after which it is taken over.
const CLAIM_WAIT: Duration = Duration::from_millis(unique::PENDING_MS as u64 + 5_000);

/// The unique kind of a read-only identifying field.
fn unique_kind(field: &str) -> Option<Unique> {
    match field {
        "installationId" => Some(Unique::InstallationId),
        "deviceToken" => Some(Unique::DeviceToken),
        _ => None,
    }
}

/// Checks that `channels` is only ever an array of strings (111 otherwise), and that the
/// identifying fields are not changed inside (136).
fn check_updates(updates: &[FieldUpdate]) -> Result<(), ApiError> {
    let strings = |values: &[Value]| values.iter().all(Value::is_string);
    for u in updates {
        let Some(first) = u.path.first().map(String::as_str) else {
            continue;
        };
        if u.path.len() > 1 {
            if let Some(field) = crate::installations::READ_ONLY
                .into_iter()
                .find(|f| *f == first)
            {
                return Err(InstallationError::ReadOnly(field).into());
            }
        }
        if first != "channels" {
            continue;
        }
        let ok = u.path.len() == 1
            && match &u.op {
                UpdateOp::Set(Value::Array(values)) => strings(values),
                UpdateOp::AddUnique(values) | UpdateOp::Remove(values) | UpdateOp::Add(values) => {
                    strings(values)
                }
                UpdateOp::Delete => true,
                _ => false,
            };
        if !ok {
            return Err(ObjectsApiError::TypeMismatch(
                "channels is an array of channel names (strings).".into(),
            )
            .into());
        }
    }
    Ok(())
}

/// Claims each of `claims` for `id`; on a value another installation holds, gives back the
/// ones it took and answers which value it was and that installation's objectId (empty when
/// the value was released meanwhile); `None` once all are claimed.
async fn claim_all(
    state: &AppState,
    app: &AppId,
    claims: &[(Unique, String)],
    id: &str,
) -> Result<Option<(Unique, String)>, ApiError> {
    for (n, (kind, value)) in claims.iter().enumerate() {
        match unique::reserve(&state.cluster, app, *kind, value, id).await {
            Ok(()) => {}
            Err(UsersError::InstallationTaken(..)) => {
                release_all(state, app, &claims[..n], id).await;
                let owner = unique::owner(&state.cluster, app, *kind, value).await?;
                // Released meanwhile: the caller claims again.
                return Ok(Some((
                    *kind,
                    owner.map(|o| o.to_string()).unwrap_or_default(),
                )));
            }
            Err(e) => {
                release_all(state, app, &claims[..n], id).await;
                return Err(e.into());
            }
        }
    }
    Ok(None)
}

/// Gives back `id`'s claims (failures only logged: a claim whose installation does not hold
/// the value is taken over later, `unique::reserve`).
async fn release_all(state: &AppState, app: &AppId, claims: &[(Unique, String)], id: &str) {
    for (kind, value) in claims {
        if let Err(e) = unique::release(&state.cluster, app, *kind, value, id).await {
            tracing::debug!("releasing an installation's {}: {e}", kind.field());
        }
    }
}

/// `body`'s identifying values that must be unique.
fn claims_of(
    installation_id: Option<String>,
    device_token: Option<String>,
) -> Vec<(Unique, String)> {
    let mut claims = Vec::new();
    if let Some(v) = installation_id {
        claims.push((Unique::InstallationId, v));
    }
    if let Some(v) = device_token {
        claims.push((Unique::DeviceToken, v));
    }
    claims
}

pub async fn create_installation(
    State(state): State<AppState>,
    ctx: RequestCtx,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let mut body = body.object()?;
    let identity = check_new(&mut body)?;
    let new_id = identity.installation_id.clone();
    let claims = claims_of(identity.installation_id, identity.device_token);
    let app = &ctx.app.application_id;
    let deadline = tokio::time::Instant::now() + CLAIM_WAIT;
    loop {
        let id = super::objects::new_object_id(&state, app, &INSTALLATION_CLASS);
        let Some((kind, holder)) = claim_all(&state, app, &claims, &id).await? else {
            return create_claimed(&state, &ctx, &id, &mut body, &claims).await;
        };
        let sent = Sent {
            installation_id: new_id.as_deref(),
            claims: &claims,
            body: &body,
        };
        match meet_holder(&state, &ctx, &sent, kind, &holder).await {
            Met::Answer(answer) => return answer,
            Met::Again => continue,
            Met::NotYet => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CommonError::Unavailable(
                "another request is registering this installation; try again.".into(),
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An installation being created: its `installationId`, the values it claims, its body.
struct Sent<'a> {
    installation_id: Option<&'a str>,
    claims: &'a [(Unique, String)],
    body: &'a Map<String, Value>,
}

/// What a create does about the installation holding one of its values.
enum Met {
    /// The answer: the holder updated, or why not.
    Answer(Result<Response, ApiError>),
    /// Claim again at once: the token left the holder, or the holder was deleted meanwhile.
    Again,
    /// The holder is not there: a create still under way (or one that failed, whose claim is
    /// taken over once abandoned) to wait for.
    NotYet,
}

/// Meets `holder`, the installation holding `sent`'s `kind` value: a device token now known
/// by another installationId (an app reinstalled) moves to the new installation; otherwise the
/// holder is updated with the body.
async fn meet_holder(
    state: &AppState,
    ctx: &RequestCtx,
    sent: &Sent<'_>,
    kind: Unique,
    holder: &str,
) -> Met {
    let app = &ctx.app.application_id;
    let Some(holder) = ObjectId::parse(holder) else {
        return Met::NotYet;
    };
    let existing = match state
        .cluster
        .get_stored_object(app, &INSTALLATION_CLASS, &holder)
        .await
    {
        Ok(Some(existing)) => existing,
        Ok(None) => return Met::NotYet,
        Err(e) => return Met::Answer(Err(e.into())),
    };
    let held_id = existing
        .fields
        .get("installationId")
        .and_then(Value::as_str);
    match (kind, sent.installation_id, held_id) {
        (Unique::DeviceToken, Some(new_id), Some(old_id)) if new_id != old_id => {
            match take_token(state, ctx, &holder, sent.claims).await {
                Ok(()) => Met::Again,
                Err(e) => Met::Answer(Err(e)),
            }
        }
        _ => match update_existing(state, ctx, &holder, &existing, kind, sent.body.clone()).await {
            Err(ApiError::Common(CommonError::ObjectNotFound(_)))
                if existing_gone(state, app, &holder).await =>
            {
                Met::Again
            }
            other => Met::Answer(other),
        },
    }
}

/// True when the installation `id` no longer exists.
async fn existing_gone(state: &AppState, app: &AppId, id: &ObjectId) -> bool {
    matches!(
        state
            .cluster
            .get_stored_object(app, &INSTALLATION_CLASS, id)
            .await,
        Ok(None)
    )
}

/// Takes the `deviceToken` among `claims` away from the installation `holder` (which another
/// installationId holds): the token leaves that installation and its claim is given back.
async fn take_token(
    state: &AppState,
    ctx: &RequestCtx,
    holder: &ObjectId,
    claims: &[(Unique, String)],
) -> Result<(), ApiError> {
    let Some((_, token)) = claims.iter().find(|(k, _)| *k == Unique::DeviceToken) else {
        return Ok(());
    };
    let unset = vec![FieldUpdate {
        path: vec!["deviceToken".into()],
        op: UpdateOp::Delete,
    }];
    match apply_update(
        state,
        ctx,
        &INSTALLATION_CLASS,
        holder,
        unset,
        Principals::master(),
        Vec::new(),
    )
    .await
    {
        Ok(_) | Err(ApiError::Common(CommonError::ObjectNotFound(_))) => {}
        Err(e) => return Err(e),
    }
    let app = &ctx.app.application_id;
    unique::release(&state.cluster, app, Unique::DeviceToken, token, holder).await?;
    Ok(())
}

/// Whether a failed write certainly did not happen (a refusal), so that the values it claimed
/// may be given back; after a timeout or an unavailable shard it may have happened, and its
/// claims stay (a claim whose installation never appeared is taken over later).
fn certainly_failed(e: &ApiError) -> bool {
    !matches!(
        e,
        ApiError::Common(CommonError::Unavailable(_))
            | ApiError::Common(CommonError::Timeout(_))
            | ApiError::Common(CommonError::Internal(_))
    )
}

/// Creates the installation `id` whose unique values it has claimed (given back when it
/// certainly failed).
async fn create_claimed(
    state: &AppState,
    ctx: &RequestCtx,
    id: &ObjectId,
    body: &mut Map<String, Value>,
    claims: &[(Unique, String)],
) -> Result<Response, ApiError> {
    if body.get("ACL").is_none_or(Value::is_null) {
        body.insert("ACL".into(), json!({"*": {"write": true}}));
    }
    let created = async {
        let updates = parse_updates(body)?;
        check_updates(&updates)?;
        create_in(state, ctx, &INSTALLATION_CLASS, id, updates).await
    }
    .await;
    match created {
        Ok((created_ms, group, p)) => Ok(created_response(
            &state.public_url,
            &format!("/1/installations/{id}"),
            created_ms,
            id,
            Vec::new(),
            group,
            &p,
        )),
        Err(e) => {
            if certainly_failed(&e) {
                release_all(state, &ctx.app.application_id, claims, id).await;
            }
            Err(e)
        }
    }
}

/// An installation sent again: `body` updates the stored one, `existing`, that holds its
/// `installationId` or `deviceToken` (`matched`), as the caller may write it (its ACL
/// changed only with the master key). A device found by its `installationId` may bring a new
/// `deviceToken` (FCM tokens are replaced from time to time): the new one is claimed and the
/// old one given back. 200 with the objectId.
async fn update_existing(
    state: &AppState,
    ctx: &RequestCtx,
    id: &ObjectId,
    existing: &StoredObject,
    matched: Unique,
    mut body: Map<String, Value>,
) -> Result<Response, ApiError> {
    if !ctx.master {
        body.retain(|k, _| k != "ACL" && !k.starts_with("ACL."));
    }
    let app = &ctx.app.application_id;
    let old_token = existing.fields.get("deviceToken").and_then(Value::as_str);
    let new_token = body.get("deviceToken").and_then(Value::as_str);
    let replaced = match (matched, old_token, new_token) {
        (Unique::InstallationId, Some(old), Some(new)) if old != new => {
            unique::reserve(&state.cluster, app, Unique::DeviceToken, new, id).await?;
            Some((old.to_string(), new.to_string()))
        }
        _ => None,
    };
    let mut current = existing.fields.clone();
    if replaced.is_some() {
        current.remove("deviceToken");
    }
    let who = principals(&state.cluster, &state.roles, ctx).await?;
    let replacing = replaced.as_ref().map(|_| "deviceToken");
    let updated = update_checked(state, ctx, id, &current, body, who.clone(), replacing).await;
    match (&updated, replaced) {
        (Ok(_), Some((old, _))) => {
            unique::release(&state.cluster, app, Unique::DeviceToken, &old, id).await?;
        }
        (Err(e), Some((_, new))) if certainly_failed(e) => {
            let _ = unique::release(&state.cluster, app, Unique::DeviceToken, &new, id).await;
        }
        _ => {}
    }
    let (updated_ms, group, p) = updated?;
    Ok(updated_response(
        updated_ms,
        vec![("objectId", Value::String(id.to_string()))],
        group,
        &p,
    ))
}

/// Applies `body` to the installation `id` whose fields are `current`: read-only fields kept
/// (136), identifying values set for the first time claimed (137 when another installation
/// holds one), `channels` checked.
async fn update_checked(
    state: &AppState,
    ctx: &RequestCtx,
    id: &ObjectId,
    current: &Map<String, Value>,
    body: Map<String, Value>,
    principals: Principals,
    replacing: Option<&str>,
) -> Result<(i64, basalt_cluster::ids::GroupId, basalt_cluster::Proposed), ApiError> {
    let updates = parse_updates(&body)?;
    check_updates(&updates)?;
    let first_set: Vec<(Unique, String)> = check_change(current, &body)?
        .into_iter()
        .filter_map(|(field, value)| Some((unique_kind(field)?, value)))
        .collect();
    let app = &ctx.app.application_id;
    for (n, (kind, value)) in first_set.iter().enumerate() {
        if let Err(e) = unique::reserve(&state.cluster, app, *kind, value, id).await {
            release_all(state, app, &first_set[..n], id).await;
            return Err(e.into());
        }
    }
    // Set for the first time only if no other write set it meanwhile: checked on the shard.
    // (`replacing`: a field the caller takes out of `current` to replace it, e.g. a device's
    // new FCM token, which is not set for the first time.)
    let unset: Vec<String> = first_set
        .iter()
        .map(|(k, _)| k.field())
        .filter(|f| Some(*f) != replacing)
        .map(str::to_string)
        .collect();
    let guarded = !unset.is_empty();
    let applied = apply_update(
        state,
        ctx,
        &INSTALLATION_CLASS,
        id,
        updates,
        principals,
        unset,
    )
    .await
    .map_err(|e| match e {
        ApiError::Objects(ObjectsApiError::Duplicate(m)) if guarded => ApiError::from(
            PushApiError::ReadOnlyField(format!("{m}: it is read-only once set.")),
        ),
        other => other,
    });
    if applied.as_ref().is_err_and(certainly_failed) {
        release_all(state, app, &first_set, id).await;
    }
    applied
}

pub async fn get_installation(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<GetParams>,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let obj = get_in(
        &state,
        &ctx,
        &INSTALLATION_CLASS,
        &id,
        params.include.as_deref(),
    )
    .await?;
    Ok(Json(obj))
}

pub async fn query_installations(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        list_in(&state, &ctx, &INSTALLATION_CLASS, params).await?,
    ))
}

pub async fn update_installation(
    State(state): State<AppState>,
    ctx: RequestCtx,
    IdPath(id): IdPath,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let body = body.object()?;
    let who = principals(&state.cluster, &state.roles, &ctx).await?;
    let identifying = crate::installations::READ_ONLY
        .iter()
        .chain(&["notificationUri"])
        .any(|f| {
            body.keys()
                .any(|k| k == f || k.starts_with(&format!("{f}.")))
        });
    if !identifying {
        let updates = parse_updates(&body)?;
        check_updates(&updates)?;
        return update_in(&state, &ctx, &INSTALLATION_CLASS, &id, updates, who.clone()).await;
    }
    let current = state
        .cluster
        .get_stored_object(&ctx.app.application_id, &INSTALLATION_CLASS, &id)
        .await?
        .ok_or_else(|| CommonError::ObjectNotFound(id.to_string()))?;
    let (updated_ms, group, p) =
        update_checked(&state, &ctx, &id, &current.fields, body, who.clone(), None).await?;
    Ok(updated_response(updated_ms, Vec::new(), group, &p))
}

pub async fn delete_installation(
    State(state): State<AppState>,
    ctx: RequestCtx,
    IdPath(id): IdPath,
) -> Result<Response, ApiError> {
    let app = ctx.app.application_id.clone();
    let stored = state
        .cluster
        .get_stored_object(&app, &INSTALLATION_CLASS, &id)
        .await?;
    let who = principals(&state.cluster, &state.roles, &ctx).await?;
    let resp = delete_in(&state, &ctx, &INSTALLATION_CLASS, &id, who.clone()).await?;
    if let Some(stored) = stored {
        let held = |f: &str| {
            stored
                .fields
                .get(f)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let claims = claims_of(held("installationId"), held("deviceToken"));
        release_all(&state, &app, &claims, &id).await;
    }
    Ok(resp)
}
