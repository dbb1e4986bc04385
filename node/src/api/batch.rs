//! `POST /1/batch` (spec 4.1): up to 50 create, update and delete operations, answered in the
//! order sent, each as it would be alone.
//!
//! A run of consecutive plain object writes (creates, updates and deletes of user classes
//! without triggers) is grouped by shard (`object_writes`): each is checked and turned into its
//! command as its handler would (`api::objects`), the run's schema needs are admitted once per
//! class, and each shard gets one Raft command carrying its operations in request order
//! (`Command::Batch`), the shards' commands proposed concurrently. Operations on one object
//! land on one shard, so they apply in the order sent. Any other operation (users, roles,
//! installations, a class with triggers, a path or body its handler must judge) runs alone,
//! in its place in the order, through the same route and handler as the single request.
//!
//! The envelope is checked whole before anything runs (112 `requests` not an array, 113 an
//! element that is not an object or has a bad method or path, 114 more than 50). An operation
//! runs with the batch's authenticated context (its `token`, if any, as the session); a
//! failing operation answers `{"error":{"code","error"}}` in its slot and the others proceed.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, Method, Request};
use axum::Json;
use serde_json::{Map, Value};
use tower::ServiceExt;

use super::batch_slot::{slot, slot_error};
use super::context::{ApiBody, AppState, RequestCtx};
use super::error::{ApiError, ObjectsApiError};
use super::object_writes::{self, ObjectWrite};
use crate::functions::invoke::CallDepth;

/// Operations per batch (spec 8).
pub const MAX_OPERATIONS: usize = 50;

/// Path prefixes a batch operation may address.
const PATH_PREFIXES: [&str; 4] = ["/1/classes/", "/1/users", "/1/roles", "/1/installations"];

/// One checked batch element.
#[derive(Debug, PartialEq)]
pub struct Operation {
    method: Method,
    path: String,
    body: Option<Value>,
    token: Option<String>,
}

fn parse_operation(i: usize, v: &Value) -> Result<Operation, ApiError> {
    let bad = |why: &str| {
        ApiError::from(ObjectsApiError::BatchInvalidRequest(format!(
            "requests[{i}]: {why}"
        )))
    };
    let o = v.as_object().ok_or_else(|| bad("not an object"))?;
    let method = match o
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_ascii_uppercase)
    {
        Some(m) if m == "POST" => Method::POST,
        Some(m) if m == "PUT" => Method::PUT,
        Some(m) if m == "DELETE" => Method::DELETE,
        _ => return Err(bad("method must be POST, PUT or DELETE")),
    };
    let path = o
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| {
            PATH_PREFIXES.iter().any(|pre| p.starts_with(pre))
                && !p.contains(['?', '#'])
                && p.parse::<axum::http::Uri>().is_ok()
        })
        .ok_or_else(|| {
            bad("path must be a /1/classes, /1/users, /1/roles or /1/installations path")
        })?;
    let token = match o.get("token") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(t.clone()),
        Some(_) => return Err(bad("token must be a string")),
    };
    Ok(Operation {
        method,
        path: crate::paths::routed_path(path),
        body: o.get("body").cloned().filter(|b| !b.is_null()),
        token,
    })
}

pub fn parse_envelope(body: &Map<String, Value>) -> Result<Vec<Operation>, ApiError> {
    let requests = match body.get("requests") {
        Some(Value::Array(r)) => r,
        _ => return Err(ObjectsApiError::BatchNotArray.into()),
    };
    if requests.len() > MAX_OPERATIONS {
        return Err(ObjectsApiError::BatchTooLarge(MAX_OPERATIONS).into());
    }
    requests
        .iter()
        .enumerate()
        .map(|(i, v)| parse_operation(i, v))
        .collect()
}

pub async fn run_batch(
    State(state): State<AppState>,
    ctx: RequestCtx,
    depth: CallDepth,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    let ops = parse_envelope(&body)?;
    let router = state
        .router
        .get()
        .cloned()
        .ok_or_else(|| ApiError::internal("batch router not set"))?;
    let mut results = Vec::with_capacity(ops.len());
    // The operations run inside this request's span and id scope: their log lines and the
    // work they forward carry the batch's request id.
    let mut run: Vec<ObjectWrite> = Vec::new();
    for mut op in ops {
        let (method, path) = (&op.method, &op.path);
        match object_writes::plain(&state, &ctx, method, path, &mut op.body, &mut op.token) {
            Some(write) => run.push(write),
            None => {
                results.extend(object_writes::run(&state, &ctx, std::mem::take(&mut run)).await);
                results.push(run_operation(&router, &state, &ctx, depth, op).await);
            }
        }
    }
    results.extend(object_writes::run(&state, &ctx, run).await);
    Ok(Json(Value::Array(results)))
}

async fn run_operation(
    router: &axum::Router,
    state: &AppState,
    ctx: &RequestCtx,
    depth: CallDepth,
    op: Operation,
) -> Value {
    // A batch that a function sent runs its operations as deep in functions as itself.
    let op_ctx = ctx.for_operation(op.token);
    let bytes = op.body.map(|b| b.to_string()).unwrap_or_default();
    let req = Request::builder()
        .method(op.method)
        .uri(&op.path)
        .header(header::CONTENT_TYPE, "application/json")
        .extension(op_ctx)
        .extension(depth)
        .body(Body::from(bytes));
    let req = match req {
        Ok(r) => r,
        Err(e) => return slot_error(113, &format!("invalid operation: {e}")),
    };
    let resp = match router.clone().oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    slot(resp, state.max_body_bytes).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope(v: Value) -> Result<Vec<Operation>, ApiError> {
        parse_envelope(v.as_object().unwrap())
    }

    #[test]
    fn envelope_errors_have_their_codes() {
        assert_eq!(envelope(json!({})).unwrap_err().code(), 112);
        assert_eq!(envelope(json!({"requests": {}})).unwrap_err().code(), 112);
        let op = json!({"method": "POST", "path": "/1/classes/A", "body": {}});
        let many: Vec<Value> = (0..51).map(|_| op.clone()).collect();
        assert_eq!(
            envelope(json!({ "requests": many })).unwrap_err().code(),
            114
        );
        let fifty: Vec<Value> = (0..50).map(|_| op.clone()).collect();
        assert_eq!(envelope(json!({ "requests": fifty })).unwrap().len(), 50);
        for bad in [
            json!(1),
            json!({"method": "GET", "path": "/1/classes/A"}),
            json!({"method": "POST", "path": "/1/batch"}),
            json!({"method": "POST", "path": "/1/classes/A?x=1"}),
            json!({"method": "POST"}),
            json!({"method": "PUT", "path": "/1/classes/A/x", "token": 5}),
        ] {
            let e = envelope(json!({ "requests": [op.clone(), bad.clone()] })).unwrap_err();
            assert_eq!(e.code(), 113, "{bad}");
        }
    }

    #[test]
    fn methods_are_case_insensitive_and_token_is_kept() {
        let ops = envelope(json!({"requests": [
            {"method": "delete", "path": "/1/classes/A/abc", "token": "t"},
            {"method": "Put", "path": "/1/users/abc", "body": {"a": 1}},
        ]}))
        .unwrap();
        assert_eq!(ops[0].method, Method::DELETE);
        assert_eq!(ops[0].token.as_deref(), Some("t"));
        assert_eq!(ops[0].body, None);
        assert_eq!(ops[1].method, Method::PUT);
    }
}
