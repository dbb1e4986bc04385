//! Objects (spec 4.1): create, get, update, delete and list objects of a class.
//!
//! Handlers validate input, check the write against the class schema (`admit_write`), build a
//! `Command` or `ScanRequest`, call the cluster and shape the JSON. Every write answers with the
//! Raft log index that committed it in `X-Basalt-Version` (and its group in `X-Basalt-Group`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use basalt_cluster::object::{format_wire_time, is_object_id, new_object_id, validate_class_name};
use basalt_cluster::query::ScanRequest;
use basalt_cluster::schema::infer::requirements;
use basalt_cluster::update::{parse_updates, FieldUpdate};
use basalt_cluster::{now_ms, Command, CommandResult, Proposed};
use serde::Deserialize;
use serde_json::{json, Value};

use super::context::{body_bytes, host, json_object, ApiPath, ApiQuery, AppState, RequestCtx};
use super::error::ApiError;
use crate::pointers::{expand, parse_include};

/// Default and largest `limit` of a list (spec 4.3; a larger limit is capped), and the
/// largest for an app on the enterprise plan.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 500;
const MAX_LIMIT_ENTERPRISE: usize = 1000;

fn class_name(class: &str) -> Result<(), ApiError> {
    validate_class_name(class).map_err(ApiError::from)
}

/// An objectId that cannot exist (wrong characters or length) is simply not found; it never
/// reaches the key layout.
fn check_object_id(id: &str) -> Result<(), ApiError> {
    if is_object_id(id) {
        Ok(())
    } else {
        Err(ApiError::ObjectNotFound(id.chars().take(64).collect()))
    }
}

/// Checks a write against its class schema, fixing the types of new columns (111 on a type
/// mismatch; 302 for a new class when the app does not allow creating classes).
pub async fn admit_write(
    state: &AppState,
    ctx: &RequestCtx,
    class: &str,
    updates: &[FieldUpdate],
) -> Result<(), ApiError> {
    let needs = requirements(updates);
    let may_create = ctx.master || ctx.app.not_allowed_create_table == 0;
    state
        .cluster
        .ensure_columns(&ctx.app.application_id, class, &needs, may_create)
        .await?;
    Ok(())
}

fn version_headers(resp: &mut Response, group: u32, p: &Proposed) {
    let h = resp.headers_mut();
    h.insert("x-basalt-version", HeaderValue::from(p.log_index));
    h.insert("x-basalt-group", HeaderValue::from(group));
}

pub async fn create_object(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(class): ApiPath<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    class_name(&class)?;
    let body = json_object(&body_bytes(body, &state)?)?;
    let updates = parse_updates(&body)?;
    admit_write(&state, &ctx, &class, &updates).await?;
    let object_id = new_object_id();
    let now = now_ms();
    let app = ctx.app.application_id;
    let group = state.cluster.shard_for(&app, &class, &object_id);
    let cmd = Command::CreateObject {
        app,
        class: class.clone(),
        object_id: object_id.clone(),
        now_ms: now,
        updates,
    };
    let p = state.cluster.propose(group, cmd).await?;
    let created_ms = match p.result {
        CommandResult::Created { created_ms, .. } => created_ms,
        _ => now,
    };
    let location = format!("http://{}/1/classes/{class}/{object_id}", host(&headers));
    let body = json!({"createdAt": format_wire_time(created_ms), "objectId": object_id});
    let mut resp = (StatusCode::CREATED, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        resp.headers_mut().insert("location", v);
    }
    version_headers(&mut resp, group, &p);
    Ok(resp)
}

#[derive(Debug, Default, Deserialize)]
pub struct GetParams {
    include: Option<String>,
}

pub async fn get_object(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath((class, object_id)): ApiPath<(String, String)>,
    ApiQuery(params): ApiQuery<GetParams>,
) -> Result<Json<Value>, ApiError> {
    class_name(&class)?;
    check_object_id(&object_id)?;
    let app = &ctx.app.application_id;
    let obj = state
        .cluster
        .get_object(app, &class, &object_id)
        .await
        .map_err(|e| ApiError::from_cluster(e, &object_id))?
        .ok_or_else(|| ApiError::ObjectNotFound(object_id.clone()))?;
    let mut objs = [obj];
    let include = parse_include(params.include.as_deref().unwrap_or(""));
    expand(&state.cluster, app, &mut objs, &include).await?;
    let [obj] = objs;
    Ok(Json(obj))
}

pub async fn update_object(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath((class, object_id)): ApiPath<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    class_name(&class)?;
    check_object_id(&object_id)?;
    let body = json_object(&body_bytes(body, &state)?)?;
    let updates = parse_updates(&body)?;
    admit_write(&state, &ctx, &class, &updates).await?;
    let app = ctx.app.application_id;
    let group = state.cluster.shard_for(&app, &class, &object_id);
    let cmd = Command::UpdateObject {
        app,
        class,
        object_id: object_id.clone(),
        now_ms: now_ms(),
        updates,
    };
    let p = state
        .cluster
        .propose(group, cmd)
        .await
        .map_err(|e| ApiError::from_cluster(e, &object_id))?;
    let updated_ms = match p.result {
        CommandResult::Updated { updated_ms } => updated_ms,
        _ => now_ms(),
    };
    let mut resp = Json(json!({"updatedAt": format_wire_time(updated_ms)})).into_response();
    version_headers(&mut resp, group, &p);
    Ok(resp)
}

pub async fn delete_object(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath((class, object_id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    class_name(&class)?;
    check_object_id(&object_id)?;
    let app = ctx.app.application_id;
    let group = state.cluster.shard_for(&app, &class, &object_id);
    let cmd = Command::DeleteObject {
        app,
        class,
        object_id: object_id.clone(),
    };
    let p = state
        .cluster
        .propose(group, cmd)
        .await
        .map_err(|e| ApiError::from_cluster(e, &object_id))?;
    let mut resp = Json(json!({"msg": "ok"})).into_response();
    version_headers(&mut resp, group, &p);
    Ok(resp)
}

#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    #[serde(rename = "where")]
    filter: Option<String>,
    limit: Option<String>,
    skip: Option<String>,
    order: Option<String>,
    count: Option<String>,
    include: Option<String>,
}

fn parse_count(name: &str, v: &Option<String>) -> Result<Option<usize>, ApiError> {
    v.as_deref()
        .map(|s| {
            s.trim()
                .parse::<i64>()
                .map_err(|_| ApiError::InvalidQuery(format!("{name} must be an integer.")))
        })
        .transpose()
        .map(|o| o.map(|n| n.max(0) as usize))
}

/// Lists a class: `where` with plain equality constraints, `order`, `skip`, `limit` (default
/// 100, capped at 500) and `count=1`. The full operator set comes with the query engine.
pub async fn query_objects(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(class): ApiPath<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<Value>, ApiError> {
    class_name(&class)?;
    let equals = match params
        .filter
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        None => Default::default(),
        Some(w) => match serde_json::from_str::<Value>(w) {
            Ok(Value::Object(m)) => m,
            _ => {
                return Err(ApiError::InvalidQuery(
                    "where must be a JSON object.".into(),
                ))
            }
        },
    };
    if let Some((k, _)) = equals.iter().find(|(k, v)| {
        k.starts_with('$')
            || v.as_object()
                .is_some_and(|o| o.keys().any(|k| k.starts_with('$')))
    }) {
        return Err(ApiError::InvalidQuery(format!(
            "query operators are not supported yet ({k})."
        )));
    }
    let max = if ctx.app.enterprise {
        MAX_LIMIT_ENTERPRISE
    } else {
        MAX_LIMIT
    };
    let limit = parse_count("limit", &params.limit)?
        .unwrap_or(DEFAULT_LIMIT)
        .min(max);
    let skip = parse_count("skip", &params.skip)?.unwrap_or(0);
    let with_count = params.count.as_deref() == Some("1");
    let req = ScanRequest {
        app: ctx.app.application_id,
        class,
        equals,
        order: ScanRequest::parse_order(params.order.as_deref().unwrap_or("")),
        skip,
        limit,
    };
    let app = req.app.clone();
    let (mut rows, count) = state.cluster.scan_objects(req).await?;
    let include = parse_include(params.include.as_deref().unwrap_or(""));
    expand(&state.cluster, &app, &mut rows, &include).await?;
    let mut out = json!({"results": rows});
    if with_count {
        out["count"] = json!(count);
    }
    Ok(Json(out))
}
