//! Push (spec 4.12): `POST /1/push` accepts a push — with the master key, or any app key when
//! the app allows client push (`clientPush`) — checks its body (`push::request`, 141-144) and
//! its `where` (102), and stores its record, then its `_PushStatus`, before answering
//! `{"result": true}` with the push's id in `X-Basalt-Push-Id`: an accepted push is sent even
//! if this node dies next. The scheduler sends it (`push::dispatcher`). `GET /1/push[/<id>]`
//! reads pushes' statuses with the master key (the `_PushStatus` objects, queried as any
//! class).

use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::Json;
use basalt_cluster::acl::Principals;
use basalt_cluster::query::filter::Filter;
use basalt_cluster::{now_ms, Error as ClusterError};
use serde_json::{json, Value};

use super::context::{ApiBody, ApiQuery, AppState, IdPath, RequestCtx};
use super::error::{ApiError, CommonError, ObjectsApiError};
use super::objects::{get_in, list_in};
use crate::push::record::{self, PushRecord};
use crate::push::request;
use crate::push::status::{self, STATUS_CLASS};
use crate::query::check_paths;
use crate::query::params::ListParams;

pub async fn send_push(
    State(state): State<AppState>,
    ctx: RequestCtx,
    body: ApiBody,
) -> Result<Response, ApiError> {
    if !ctx.master && !ctx.app.client_push {
        return Err(CommonError::MasterKeyRequired.into());
    }
    let body = body.object()?;
    let asked = request::parse(&body, now_ms())?;
    let filter =
        Filter::parse(&asked.query).map_err(|e| ObjectsApiError::InvalidQuery(e.to_string()))?;
    check_paths(&filter)?;
    // Sub-queries within their bounds now (they are resolved again when the push is sent).
    state
        .cluster
        .queries()
        .resolve(&ctx.app.application_id, filter, &Principals::master())
        .await
        .map_err(|e| match e {
            ClusterError::InvalidValue(m) => ApiError::from(ObjectsApiError::InvalidQuery(m)),
            other => other.into(),
        })?;
    let rec = PushRecord::accepted(&ctx.app.application_id, asked);
    // The record first: once it is written the push is sent, whatever happens to this node
    // (its runner writes the status if this node could not).
    record::insert(&state.cluster, &rec).await?;
    if let Err(e) = status::create_missing(&state.cluster, &rec).await {
        tracing::warn!(push = %rec.push_id, "status left to the push's runner: {e}");
    }
    metrics::counter!("basalt_pushes_total", "outcome" => "queued").increment(1);
    let mut resp = Json(json!({"result": true})).into_response();
    if let Ok(v) = HeaderValue::from_str(&rec.push_id) {
        resp.headers_mut().insert("x-basalt-push-id", v);
    }
    Ok(resp)
}

/// Pushes' statuses (`_PushStatus`), queried as any class; master key only.
pub async fn query_push_statuses(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<Value>, ApiError> {
    if !ctx.master {
        return Err(CommonError::MasterKeyRequired.into());
    }
    Ok(Json(list_in(&state, &ctx, &STATUS_CLASS, params).await?))
}

/// One push's status.
pub async fn get_push_status(
    State(state): State<AppState>,
    ctx: RequestCtx,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(get_in(&state, &ctx, &STATUS_CLASS, &id, None).await?))
}
