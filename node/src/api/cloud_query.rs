//! `GET /1/cloudQuery?bql=...&values=[...]` (decisions.md): parses the BQL statement (`bql`)
//! into the query model and runs it like a REST query (`query::run`). Answers
//! `{"results": [...]}`, plus `count` when the statement selects `count(*)`; every fault in
//! the statement or its values is 601 with its position.

use axum::extract::State;
use axum::Json;
use basalt_cluster::names::ClassName;
use basalt_cluster::object::validate_class_name;
use serde::Deserialize;
use serde_json::Value;

use super::context::{ApiQuery, AppState, RequestCtx};
use super::error::{ApiError, ObjectsApiError};
use crate::query::{self, bql};
use crate::users::roles::ROLE_CLASS;
use crate::users::USER_CLASS;

/// System classes BQL reads, with the same rules as their REST listings (`GET /1/users` never
/// shows passwords or sessions, and hides other users' private fields).
static READABLE_SYSTEM_CLASSES: [&ClassName; 2] = [&USER_CLASS, &ROLE_CLASS];

#[derive(Debug, Deserialize)]
pub struct CloudQueryParams {
    bql: Option<String>,
    values: Option<String>,
}

pub async fn cloud_query(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<CloudQueryParams>,
) -> Result<Json<Value>, ApiError> {
    let src = params
        .bql
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ObjectsApiError::Bql("bql is required".into()))?;
    let values: Vec<Value> = match params.values.as_deref().map(str::trim) {
        None | Some("") => Vec::new(),
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Array(v)) => v,
            _ => return Err(ObjectsApiError::Bql("values must be a JSON array".into()).into()),
        },
    };
    let statement = bql::parse(src, &values).map_err(|e| ObjectsApiError::Bql(e.to_string()))?;
    if !READABLE_SYSTEM_CLASSES
        .iter()
        .any(|c| statement.query.class == **c)
    {
        validate_class_name(&statement.query.class).map_err(ApiError::from)?;
    }
    // `count` is asked for only by `count(*)` outside an aggregation; aggregated rows are
    // always wrapped in `results`.
    let outcome = query::run(&state.cluster, &state.roles, &ctx, statement.query).await?;
    Ok(Json(query::rest_body(outcome, true)))
}
