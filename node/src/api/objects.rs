//! Objects (spec 4.1): create, get, update, delete and list objects of a class.
//!
//! Handlers validate the path, then call the class-generic operations below (which the users
//! endpoints reuse for `_User`): check the write against the class schema (`admit_write`),
//! build a `Command` or `ScanRequest` carrying the caller's principals (ACLs are checked on the
//! shard, atomically with the data), call the cluster and shape the JSON. Every write answers
//! with the Raft log index that committed it in `X-Basalt-Version` (and its group in
//! `X-Basalt-Group`).

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use basalt_cluster::acl::Principals;
use basalt_cluster::ids::GroupId;
use basalt_cluster::names::ObjectId;
use basalt_cluster::names::{AppId, ClassName};
use basalt_cluster::object::format_wire_time;
use basalt_cluster::schema::infer::requirements;
use basalt_cluster::update::{parse_updates, FieldUpdate};
use basalt_cluster::{now_ms, Command, CommandResult, Proposed};
use serde::Deserialize;
use serde_json::{json, Value};

use super::context::{ApiBody, ApiQuery, AppState, ClassPath, ObjectPath, RequestCtx};
use super::error::{ApiError, CommonError};
use crate::functions::invoke::CallDepth;
use crate::functions::triggers;
use crate::query;
use crate::query::params::ListParams;
use crate::query::projection::{expand, parse_include};
use crate::storage_quota::{bytes_added, Admitted, Stored};
use crate::users::protected::UserView;
use crate::users::session::{ends_sessions, principals};
use crate::users::USER_CLASS;

fn version_headers(resp: &mut Response, group: GroupId, p: &Proposed) {
    let h = resp.headers_mut();
    h.insert("x-basalt-version", HeaderValue::from(p.log_index));
    h.insert("x-basalt-group", HeaderValue::from(group.get()));
}

/// Checks a write against its class schema, fixing the types of new columns (111 on a type
/// mismatch; 302 for a new class when the app does not allow creating classes).
pub async fn admit_write(
    state: &AppState,
    ctx: &RequestCtx,
    class: &ClassName,
    updates: &[FieldUpdate],
) -> Result<(), ApiError> {
    let needs = requirements(updates);
    let may_create = ctx.master || ctx.app.not_allowed_create_table == 0;
    state
        .cluster
        .catalog()
        .ensure_columns(&ctx.app.application_id, class, &needs, may_create)
        .await?;
    Ok(())
}

/// Bytes a new object takes beyond its fields (times, its objectId), for storage quotas.
pub const CREATE_OVERHEAD: u64 = 32;

/// Admits a write adding `adds` bytes (arrived at the given instant) to the app's objects under
/// its `objectsQuotaMb` (10082); hold the answer until the write is proposed.
pub async fn admit_bytes(
    state: &AppState,
    ctx: &RequestCtx,
    adds: (u64, std::time::Instant),
) -> Result<Admitted, ApiError> {
    let app = &ctx.app;
    Ok(state
        .storage_quotas
        .admit(
            &state.cluster,
            &app.application_id,
            Stored::Objects,
            app.objects_quota_mb,
            adds,
        )
        .await?)
}

/// Creates an object of `class` with already-parsed updates (schema checked here); answers the
/// new objectId, its creation time and the commit.
pub async fn create_in(
    state: &AppState,
    ctx: &RequestCtx,
    class: &ClassName,
    object_id: &ObjectId,
    updates: Vec<FieldUpdate>,
) -> Result<(i64, GroupId, Proposed), ApiError> {
    admit_write(state, ctx, class, &updates).await?;
    let adds = CREATE_OVERHEAD + bytes_added(&updates);
    let _admitted = admit_bytes(state, ctx, (adds, std::time::Instant::now())).await?;
    let now = now_ms();
    let app = ctx.app.application_id.clone();
    let group = state.cluster.object_group(&app, class, object_id);
    let cmd = Command::CreateObject {
        app: app.clone(),
        class: class.clone(),
        object_id: object_id.clone(),
        now_ms: now,
        updates,
    };
    let p = state.cluster.propose_object(group, cmd).await?;
    let created_ms = match p.result {
        CommandResult::Created { created_ms, .. } => created_ms,
        _ => now,
    };
    Ok((created_ms, group, p))
}

/// The 201 answer of a creation.
pub fn created_response(
    public_url: &str,
    path: &str,
    created_ms: i64,
    object_id: &str,
    extra: Vec<(&str, Value)>,
    group: GroupId,
    p: &Proposed,
) -> Response {
    let mut body = json!({"createdAt": format_wire_time(created_ms), "objectId": object_id});
    for (k, v) in extra {
        body[k] = v;
    }
    let mut resp = (StatusCode::CREATED, Json(body)).into_response();
    // Built from the configured public URL, never from the request's Host header.
    let location = format!("{}{path}", public_url.trim_end_matches('/'));
    if let Ok(v) = HeaderValue::from_str(&location) {
        resp.headers_mut().insert("location", v);
    }
    version_headers(&mut resp, group, p);
    resp
}

/// The objectId of a new object of `class`: one that lands on a shard this node leads when
/// it leads any, so its create is proposed here without a forward (decisions/0025).
pub fn new_object_id(state: &AppState, app: &AppId, class: &str) -> ObjectId {
    ObjectId::parse(&state.cluster.new_object_id(app, class)).unwrap_or_else(ObjectId::random)
}

pub async fn create_object(
    State(state): State<AppState>,
    ctx: RequestCtx,
    CallDepth(depth): CallDepth,
    ClassPath(class): ClassPath,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let body = body.object()?;
    let mut updates = parse_updates(&body)?;
    if let Some(body) =
        triggers::before_save(&state.functions, &ctx, depth, &class, None, &body).await?
    {
        updates = parse_updates(&body)?;
    }
    let object_id = new_object_id(&state, &ctx.app.application_id, &class);
    let (created_ms, group, p) = create_in(&state, &ctx, &class, &object_id, updates).await?;
    triggers::after_save(&state.functions, &ctx, depth, &class, &object_id);
    let path = format!("/1/classes/{class}/{object_id}");
    Ok(created_response(
        &state.public_url,
        &path,
        created_ms,
        &object_id,
        Vec::new(),
        group,
        &p,
    ))
}

#[derive(Debug, Default, Deserialize)]
pub struct GetParams {
    pub include: Option<String>,
}

/// Reads an object as the caller may see it (101 when absent or not readable), expanding
/// `include`d pointers.
pub async fn get_in(
    state: &AppState,
    ctx: &RequestCtx,
    class: &ClassName,
    object_id: &ObjectId,
    include: Option<&str>,
) -> Result<Value, ApiError> {
    let app = &ctx.app.application_id;
    let who = principals(&state.cluster, &state.roles, ctx).await?;
    let obj = state
        .cluster
        .get_object_as(app, class, object_id, who.clone())
        .await
        .map_err(|e| ApiError::from_cluster(e, object_id))?
        .ok_or_else(|| CommonError::ObjectNotFound(object_id.to_string()))?;
    let mut objs = [obj];
    let view = UserView::new(&ctx.app, &who);
    view.hide_rows(class, &mut objs);
    let include = parse_include(include.unwrap_or(""))?;
    expand(&state.cluster, app, &mut objs, &include, &who, &view).await?;
    let [obj] = objs;
    Ok(obj)
}

pub async fn get_object(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<GetParams>,
    ObjectPath(class, object_id): ObjectPath,
) -> Result<Json<Value>, ApiError> {
    let obj = get_in(&state, &ctx, &class, &object_id, params.include.as_deref()).await?;
    Ok(Json(obj))
}

/// Applies updates to an object the caller may write (101 otherwise); `principals` `None`
/// writes without an ACL check (the master key, or the users endpoints after their own check).
pub async fn update_in(
    state: &AppState,
    ctx: &RequestCtx,
    class: &ClassName,
    object_id: &ObjectId,
    updates: Vec<FieldUpdate>,
    principals: Principals,
) -> Result<Response, ApiError> {
    let (updated_ms, group, p) = apply_update(
        state,
        ctx,
        class,
        object_id,
        updates,
        principals,
        Vec::new(),
    )
    .await?;
    Ok(updated_response(updated_ms, Vec::new(), group, &p))
}

/// `update_in` without its answer: when the object was updated, and the commit. The update
/// applies only while the object holds none of the fields `unset` names (else 137, from the
/// shard's `Conflict`): checked where the object is, atomically with the write.
pub async fn apply_update(
    state: &AppState,
    ctx: &RequestCtx,
    class: &ClassName,
    object_id: &ObjectId,
    updates: Vec<FieldUpdate>,
    principals: Principals,
    unset: Vec<String>,
) -> Result<(i64, GroupId, Proposed), ApiError> {
    admit_write(state, ctx, class, &updates).await?;
    let adds = bytes_added(&updates);
    let _admitted = admit_bytes(state, ctx, (adds, std::time::Instant::now())).await?;
    let app = ctx.app.application_id.clone();
    let group = state.cluster.object_group(&app, class, object_id);
    let now = now_ms();
    let settle = *class == USER_CLASS && ends_sessions(None, &updates, now);
    let cmd = Command::UpdateObject {
        app: app.clone(),
        class: class.clone(),
        object_id: object_id.clone(),
        now_ms: now,
        updates,
        principals,
        unset,
        holds: Vec::new(),
    };
    let p = if settle {
        state.cluster.propose_settled(group, cmd).await
    } else {
        state.cluster.propose_object(group, cmd).await
    }
    .map_err(|e| ApiError::from_cluster(e, object_id))?;
    let updated_ms = match p.result {
        CommandResult::Updated { updated_ms } => updated_ms,
        _ => now_ms(),
    };
    Ok((updated_ms, group, p))
}

/// The 200 answer of an update: `{updatedAt}` and `extra` members.
pub fn updated_response(
    updated_ms: i64,
    extra: Vec<(&str, Value)>,
    group: GroupId,
    p: &Proposed,
) -> Response {
    let mut body = json!({"updatedAt": format_wire_time(updated_ms)});
    for (k, v) in extra {
        body[k] = v;
    }
    let mut resp = Json(body).into_response();
    version_headers(&mut resp, group, p);
    resp
}

pub async fn update_object(
    State(state): State<AppState>,
    ctx: RequestCtx,
    CallDepth(depth): CallDepth,
    ObjectPath(class, object_id): ObjectPath,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let body = body.object()?;
    let mut updates = parse_updates(&body)?;
    let id = Some(&object_id);
    if let Some(body) =
        triggers::before_save(&state.functions, &ctx, depth, &class, id, &body).await?
    {
        updates = parse_updates(&body)?;
    }
    let who = principals(&state.cluster, &state.roles, &ctx).await?;
    let resp = update_in(&state, &ctx, &class, &object_id, updates, who.clone()).await?;
    triggers::after_save(&state.functions, &ctx, depth, &class, &object_id);
    Ok(resp)
}

/// Deletes an object the caller may write (101 otherwise; `principals` as for `update_in`).
pub async fn delete_in(
    state: &AppState,
    ctx: &RequestCtx,
    class: &ClassName,
    object_id: &ObjectId,
    principals: Principals,
) -> Result<Response, ApiError> {
    let app = ctx.app.application_id.clone();
    let group = state.cluster.object_group(&app, class, object_id);
    let cmd = Command::DeleteObject {
        app: app.clone(),
        class: class.clone(),
        object_id: object_id.clone(),
        principals,
    };
    // Deleting a user ends its sessions on every node's replica before answering.
    let p = if *class == USER_CLASS {
        state.cluster.propose_settled(group, cmd).await
    } else {
        state.cluster.propose_object(group, cmd).await
    }
    .map_err(|e| ApiError::from_cluster(e, object_id))?;
    let mut resp = Json(json!({"msg": "ok"})).into_response();
    version_headers(&mut resp, group, &p);
    Ok(resp)
}

pub async fn delete_object(
    State(state): State<AppState>,
    ctx: RequestCtx,
    CallDepth(depth): CallDepth,
    ObjectPath(class, object_id): ObjectPath,
) -> Result<Response, ApiError> {
    let who = principals(&state.cluster, &state.roles, &ctx).await?;
    let gone = triggers::before_delete(&state.functions, &ctx, depth, &class, &object_id).await?;
    let resp = delete_in(&state, &ctx, &class, &object_id, who.clone()).await?;
    if let Some(gone) = gone {
        triggers::after_delete(&state.functions, &ctx, depth, &class, &object_id, gone);
    }
    Ok(resp)
}

/// Lists a class as the caller may see it, with the parameters of spec 4.3 (`where`, `order`,
/// `skip`, `limit`, `count`, `keys`, `include`) or aggregates it (spec 4.4); see `query::run`.
pub async fn list_in(
    state: &AppState,
    ctx: &RequestCtx,
    class: &ClassName,
    params: ListParams,
) -> Result<Value, ApiError> {
    let q = params.query(class)?;
    let outcome = query::run(&state.cluster, &state.roles, ctx, q).await?;
    Ok(query::rest_body(outcome, ctx.app.wrap_aggregates))
}

pub async fn query_objects(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<ListParams>,
    ClassPath(class): ClassPath,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(list_in(&state, &ctx, &class, params).await?))
}
