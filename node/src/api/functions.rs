//! `/1/functions` (spec 4.11 and its extension, decisions/0023): `POST /1/functions/<name>`
//! calls a function with a JSON object of parameters (107 otherwise; 311 unknown; 310 when it
//! throws, times out or runs out of memory) and answers `{"result": ...}`; with the master key,
//! `PUT` deploys (the source as the body, or `{source, trigger, cron}` as JSON), `GET` lists or
//! shows and `DELETE` removes. `invoke` runs a function for this module, the triggers of
//! `api::objects` and the scheduler: it gives it a `functions::host::NodeHost` whose data
//! calls go through the node's router as the caller (`dispatch`).

use std::sync::Arc;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::Json;
use basalt_cluster::names::ObjectId;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tower::ServiceExt;

use super::context::{ApiBody, ApiPath, ApiQuery, AppState, RequestCtx};
use super::error::ApiError;
use crate::functions::cron::Invoke;
use crate::functions::engine::{self, RunError};
use crate::functions::host::{Dispatch, NodeHost};
use crate::functions::record::{self, FunctionRecord, Trigger, TriggerEvent};
use crate::functions::runner::Invocation;
use crate::functions::FunctionsError;
use crate::users::protected::UserView;
use crate::users::session::{principals, session_user};
use crate::users::USER_CLASS;

/// How deep in functions calling functions a request runs: 0 from outside; a function's data
/// calls carry one more (an extension only `dispatch` sets).
#[derive(Debug, Clone, Copy, Default)]
pub struct CallDepth(pub u8);

impl<S: Send + Sync> FromRequestParts<S> for CallDepth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Ok(parts
            .extensions
            .get::<CallDepth>()
            .copied()
            .unwrap_or_default())
    }
}

/// Runs requests through the node's router as `ctx`'s caller (or with the master key), one
/// level deeper than `depth`.
pub fn dispatch(state: &AppState, ctx: &RequestCtx, depth: u8) -> Result<Dispatch, ApiError> {
    let router = state
        .router
        .get()
        .cloned()
        .ok_or_else(|| ApiError::internal("functions' router not set"))?;
    let caller = ctx.for_operation(None);
    Ok(Arc::new(move |mut req, master| {
        let mut as_who = caller.for_operation(None);
        as_who.master |= master;
        req.extensions_mut().insert(as_who);
        req.extensions_mut()
            .insert(CallDepth(depth.saturating_add(1)));
        let router = router.clone();
        Box::pin(async move {
            match router.oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        })
    }))
}

/// Runs `function` with `request` for `ctx`'s caller at `depth` (`detached`: nobody waits
/// for it).
pub async fn invoke(
    state: &AppState,
    ctx: &RequestCtx,
    depth: u8,
    detached: bool,
    function: &FunctionRecord,
    request: Value,
) -> Result<Value, RunError> {
    let settings = ctx.app.functions.clone().unwrap_or_default();
    let dispatch = dispatch(state, ctx, depth).map_err(|e| RunError::Engine(e.to_string()))?;
    let host = NodeHost {
        dispatch,
        app: ctx.app.application_id.to_string(),
        function: function.name.clone(),
        request_id: basalt_cluster::request_id::current(),
        settings: settings.clone(),
        http: state.functions.http(),
    };
    state
        .functions
        .run(Invocation {
            app: ctx.app.application_id.to_string(),
            function: function.name.clone(),
            body: function.source.clone(),
            request,
            limits: settings.limits(),
            host: Arc::new(host),
            depth,
            detached,
        })
        .await
}

/// How the scheduler runs a scheduled function: as its app's master key, from outside (depth
/// 0), under a request id of its own.
pub fn scheduled(state: AppState) -> Invoke {
    Arc::new(move |app, function, request| {
        let state = state.clone();
        Box::pin(async move {
            let started = std::time::Instant::now();
            let id = format!("cron-{}", crate::apps::random_key(12));
            let run = async {
                let app = crate::apps::find_app(&state.cluster, &app)
                    .await
                    .map_err(|e| RunError::Engine(e.to_string()))?
                    .ok_or_else(|| RunError::Engine(format!("no app {app}")))?;
                let ctx = RequestCtx {
                    app: Arc::new(app),
                    master: true,
                    encrypted: false,
                    session_token: None,
                    principals: Default::default(),
                    body_signature: None,
                };
                invoke(&state, &ctx, 0, false, &function, request).await
            };
            let outcome = basalt_cluster::request_id::scope(id, run).await;
            (started.elapsed(), outcome)
        })
    })
}

/// A directly called function's failure: the code of a `Basalt.Error` its own code threw,
/// else as [`failed`] (310 for what it threw without a code, or a data API call's refusal it
/// did not catch).
fn call_failed(e: RunError) -> ApiError {
    match e {
        RunError::Thrown(t) if t.own => match t.code.and_then(|c| u32::try_from(c).ok()) {
            Some(code) if code > 0 => ApiError::ThrownWithCode {
                code,
                message: t.message,
            },
            _ => failed(RunError::Thrown(t)),
        },
        e => failed(e),
    }
}

/// The API's answer for a function that gave no result.
pub fn failed(e: RunError) -> ApiError {
    match e {
        RunError::Busy => ApiError::Unavailable(e.to_string()),
        e @ RunError::Engine(_) => ApiError::fault("running a function", e),
        e => ApiError::from(FunctionsError::Failed(e.to_string())),
    }
}

/// The caller's user as it sees itself, or `null` without a live session.
pub async fn caller_user(state: &AppState, ctx: &RequestCtx) -> Result<Value, ApiError> {
    let Some(token) = ctx.session_token.as_deref() else {
        return Ok(Value::Null);
    };
    let app = &ctx.app.application_id;
    let Some((user_id, _)) = session_user(&state.cluster, app, token).await? else {
        return Ok(Value::Null);
    };
    let Some(id) = ObjectId::parse(&user_id) else {
        return Ok(Value::Null);
    };
    let who = principals(&state.cluster, &state.roles, ctx).await?;
    let user = state
        .cluster
        .get_object_as(app, USER_CLASS, &id, who.to_acl())
        .await
        .map_err(|e| ApiError::from_cluster(e, &id))?;
    Ok(match user {
        Some(user) => {
            let mut rows = [user];
            UserView::new(&ctx.app, who.acl()).hide_rows(USER_CLASS, &mut rows);
            let [user] = rows;
            user
        }
        None => Value::Null,
    })
}

fn require_master(ctx: &RequestCtx) -> Result<(), ApiError> {
    match ctx.master {
        true => Ok(()),
        false => Err(ApiError::MasterKeyRequired),
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
        .ok_or_else(|| ApiError::from(FunctionsError::NotFound(name.clone())))?;
    // A scheduled function runs with the master key: only the master key may start it.
    if function.cron.is_some() && !ctx.master {
        return Err(ApiError::MasterKeyRequired);
    }
    let request = json!({
        "functionName": name,
        "params": params,
        "user": caller_user(&state, &ctx).await?,
        "master": ctx.master,
    });
    let result = invoke(&state, &ctx, depth.0, false, &function, request)
        .await
        .map_err(call_failed)?;
    Ok(Json(json!({ "result": result })))
}

/// Query parameters of a deploy whose body is the source.
#[derive(Debug, Default, Deserialize)]
pub struct DeployParams {
    pub trigger: Option<String>,
    #[serde(rename = "class")]
    pub class_name: Option<String>,
    pub cron: Option<String>,
}

/// What a deploy asks for, from its body and query.
fn deploy_request(
    name: &str,
    body: &[u8],
    params: DeployParams,
) -> Result<FunctionRecord, FunctionsError> {
    let invalid = |m: String| FunctionsError::Invalid(m);
    let structured = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.as_object().cloned())
        .filter(|o| o.contains_key("source"));
    let (source, trigger, class, cron) = match structured {
        Some(o) => {
            let text = |k: &str| -> Result<Option<String>, FunctionsError> {
                match o.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(invalid(format!("{k} must be a string."))),
                }
            };
            for k in o.keys() {
                if !["source", "trigger", "className", "cron"].contains(&k.as_str()) {
                    return Err(invalid(format!(
                        "unknown member {k:?} (members: source, trigger, className, cron)."
                    )));
                }
            }
            (
                text("source")?.unwrap_or_default(),
                text("trigger")?,
                text("className")?,
                text("cron")?,
            )
        }
        None => (
            String::from_utf8(body.to_vec())
                .map_err(|_| invalid("the source must be UTF-8 text.".into()))?,
            params.trigger,
            params.class_name,
            params.cron,
        ),
    };
    if source.trim().is_empty() {
        return Err(invalid("the function's source is empty.".into()));
    }
    if source.len() > record::MAX_SOURCE_BYTES {
        return Err(invalid(format!(
            "the function's source is larger than {} KiB.",
            record::MAX_SOURCE_BYTES >> 10
        )));
    }
    let trigger = match (trigger, class) {
        (None, None) => None,
        (Some(event), Some(class)) => {
            let event = TriggerEvent::parse(&event).ok_or_else(|| {
                invalid(format!(
                    "unknown trigger {event:?} (beforeSave, afterSave, beforeDelete, afterDelete)."
                ))
            })?;
            record::check_trigger_class(&class)?;
            Some(Trigger {
                event,
                class_name: class,
            })
        }
        _ => return Err(invalid("a trigger names its event and its class.".into())),
    };
    if let Some(c) = &cron {
        crate::functions::cron::parse(c).map_err(invalid)?;
        if trigger.is_some() {
            return Err(invalid(
                "a function is a trigger or scheduled, not both.".into(),
            ));
        }
    }
    Ok(FunctionRecord {
        name: name.to_string(),
        version: 0,
        source,
        trigger,
        cron,
        updated_ms: chrono::Utc::now().timestamp_millis(),
    })
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
    .ok_or_else(|| ApiError::from(FunctionsError::NotFound(name.clone())))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deploys_read_their_source_and_options() {
        let r = deploy_request("add", b"return 1;", DeployParams::default()).unwrap();
        assert_eq!(
            (r.source.as_str(), r.trigger, r.cron),
            ("return 1;", None, None)
        );
        let params = DeployParams {
            trigger: Some("beforeSave".into()),
            class_name: Some("Game".into()),
            cron: None,
        };
        let r = deploy_request("t", b"return;", params).unwrap();
        assert_eq!(
            r.trigger,
            Some(Trigger {
                event: TriggerEvent::BeforeSave,
                class_name: "Game".into()
            })
        );
        let body = br#"{"source": "return 2;", "cron": "*/5 * * * * *"}"#;
        let r = deploy_request("c", body, DeployParams::default()).unwrap();
        assert_eq!(r.source, "return 2;");
        assert_eq!(r.cron.as_deref(), Some("*/5 * * * * *"));
        for (body, params) in [
            (&b""[..], DeployParams::default()),
            (b"  ", DeployParams::default()),
            (br#"{"source": 1}"#, DeployParams::default()),
            (br#"{"source": "x", "other": 1}"#, DeployParams::default()),
            (br#"{"source": "x", "cron": "not a cron"}"#, DeployParams::default()),
            (br#"{"source": "x", "trigger": "beforeSave"}"#, DeployParams::default()),
            (
                br#"{"source": "x", "trigger": "onSave", "className": "A"}"#,
                DeployParams::default(),
            ),
            (
                br#"{"source": "x", "trigger": "afterSave", "className": "A", "cron": "* * * * *"}"#,
                DeployParams::default(),
            ),
            (b"\xff\xfe", DeployParams::default()),
        ] {
            assert!(
                deploy_request("f", body, params).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
