//! `/1/functions` (spec 4.11 and its extension, decisions/0023): `POST /1/functions/<name>`
//! calls a function with a JSON object of parameters (107 otherwise; 311 unknown; 310 when it
//! throws, times out or runs out of memory) and answers `{"result": ...}`; with the master key,
//! `PUT` deploys (the source as the body, or `{source, trigger, cron}` as JSON), `GET` lists or
//! shows and `DELETE` removes. These handlers parse and answer; `functions` deploys
//! (`functions::deploy`), stores (`functions::record`) and runs them (`functions::invoke`).

use axum::extract::State;
use axum::Json;
use serde_json::{json, Map, Value};

use super::context::{ApiBody, ApiPath, ApiQuery, AppState, RequestCtx};
use super::error::{ApiError, CommonError};
use crate::functions::deploy::{deploy_request, DeployParams};
use crate::functions::engine;
use crate::functions::invoke::CallDepth;
use crate::functions::record::{self, FunctionRecord};
use crate::functions::FunctionsError;

fn require_master(ctx: &RequestCtx) -> Result<(), ApiError> {
    match ctx.master {
        true => Ok(()),
        false => Err(CommonError::MasterKeyRequired.into()),
    }
}

/// `POST /1/functions/<name>`.
pub async fn call_function(
    State(state): State<AppState>,
    ctx: RequestCtx,
    depth: CallDepth,
    ApiPath(name): ApiPath<String>,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let params = body.object()?;
    let function = match record::check_name(&name) {
        Ok(()) => record::find(&state.cluster, &ctx.app.application_id, &name).await?,
        Err(_) => None,
    };
    let function = function
        .filter(FunctionRecord::callable)
        .ok_or_else(|| FunctionsError::NotFound(name.clone()))?;
    // A scheduled function runs with the master key: only the master key may start it.
    if function.cron.is_some() && !ctx.master {
        return Err(CommonError::MasterKeyRequired.into());
    }
    let request = json!({
        "functionName": name,
        "params": params,
        "user": state.functions.caller_user(&ctx).await?,
        "master": ctx.master,
    });
    let result = state
        .functions
        .invoke(&ctx, depth.0, false, &function, request)
        .await
        .map_err(FunctionsError::Run)?;
    Ok(Json(json!({ "result": result })))
}

/// `PUT /1/functions/<name>` (master key).
pub async fn deploy_function(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<DeployParams>,
    ApiPath(name): ApiPath<String>,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    require_master(&ctx)?;
    record::check_name(&name)?;
    let new = deploy_request(&name, &body.0, params)?;
    let (fname, source) = (new.name.clone(), new.source.clone());
    tokio::task::spawn_blocking(move || engine::check_compiles(&fname, &source))
        .await
        .map_err(|e| ApiError::fault("checking a function's source", e))?
        .map_err(|e| ApiError::from(FunctionsError::Invalid(e.to_string())))?;
    let stored = record::deploy(&state.cluster, &ctx.app.application_id, new).await?;
    Ok(Json(summary(&stored, None)))
}

/// What `GET /1/functions` shows of a function (and its schedule's runs).
fn summary(r: &FunctionRecord, runs: Option<&Value>) -> Value {
    let mut o = Map::new();
    o.insert("name".into(), json!(r.name));
    o.insert("version".into(), json!(r.version));
    o.insert("updatedAt".into(), json!(iso(r.updated_ms)));
    if let Some(t) = &r.trigger {
        o.insert("trigger".into(), json!(t.event.name()));
        o.insert("className".into(), json!(t.class_name));
    }
    if let Some(c) = &r.cron {
        o.insert("cron".into(), json!(c));
        if let Some(runs) = runs {
            o.insert("schedule".into(), runs.clone());
        }
    }
    Value::Object(o)
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

/// `GET /1/functions` (master key): `{"results": [{name, version, updatedAt, ...}]}`.
pub async fn list_functions(
    State(state): State<AppState>,
    ctx: RequestCtx,
) -> Result<Json<Value>, ApiError> {
    require_master(&ctx)?;
    let app = &ctx.app.application_id;
    let mut results = Vec::new();
    for r in record::list(&state.cluster, app).await? {
        let runs = match r.cron {
            Some(_) => crate::functions::cron::runs_of(&state.cluster, app, &r.name).await?,
            None => None,
        };
        results.push(summary(&r, runs.as_ref()));
    }
    Ok(Json(json!({ "results": results })))
}

/// `GET /1/functions/<name>` (master key): the summary and the source.
pub async fn get_function(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    require_master(&ctx)?;
    let app = &ctx.app.application_id;
    let r = match record::check_name(&name) {
        Ok(()) => record::find(&state.cluster, app, &name).await?,
        Err(_) => None,
    }
    .ok_or_else(|| FunctionsError::NotFound(name.clone()))?;
    let runs = match r.cron {
        Some(_) => crate::functions::cron::runs_of(&state.cluster, app, &r.name).await?,
        None => None,
    };
    let mut out = summary(&r, runs.as_ref());
    out["source"] = json!(r.source);
    Ok(Json(out))
}

/// `DELETE /1/functions/<name>` (master key).
pub async fn delete_function(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    require_master(&ctx)?;
    let removed = match record::check_name(&name) {
        Ok(()) => record::remove(&state.cluster, &ctx.app.application_id, &name).await?,
        Err(_) => false,
    };
    match removed {
        true => Ok(Json(json!({"msg": "ok"}))),
        false => Err(FunctionsError::NotFound(name).into()),
    }
}
