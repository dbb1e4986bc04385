//! Schemas (spec 4.9 and 2.8): list, read, create, change and delete class schemas. Every
//! route needs the master key (10061), which `context::require_master` checks.
//!
//! The rules (types, targets, reserved and built-in columns) are `basalt_cluster::schema`'s and
//! are applied in the metadata group; deleting a column or a class also removes the data on
//! every shard.

use axum::extract::State;
use axum::Json;
use basalt_cluster::names::ClassName;
use basalt_cluster::object::{validate_field_name, RESERVED_FIELDS};
use basalt_cluster::schema::{Column, ColumnChange, ColumnType, SchemaError, SYSTEM_CLASSES};
use serde_json::{json, Map, Value};

use super::context::{ApiBody, ApiPath, AppState, RequestCtx, SchemaPath};
use super::error::{ApiError, CommonError, ObjectsApiError};

/// Parses `{className?, fields?}` into column changes; `deletes` allows `{__op: "Delete"}`.
pub fn column_changes(
    class: &str,
    body: &Map<String, Value>,
    deletes: bool,
) -> Result<Vec<ColumnChange>, ApiError> {
    if let Some(name) = body.get("className") {
        if name.as_str() != Some(class) {
            return Err(SchemaError::ClassNameMismatch(name.to_string()).into());
        }
    }
    let fields = match body.get("fields") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(f)) => f,
        Some(_) => return Err(CommonError::InvalidBody("fields must be an object.".into()).into()),
    };
    let mut changes = Vec::with_capacity(fields.len());
    for (name, spec) in fields {
        validate_field_name(name)?;
        let spec = spec
            .as_object()
            .ok_or_else(|| CommonError::InvalidBody(format!("field {name} must be an object.")))?;
        if let Some(op) = spec.get("__op") {
            if deletes && op.as_str() == Some("Delete") {
                changes.push(ColumnChange::Delete(name.clone()));
                continue;
            }
            return Err(
                CommonError::InvalidBody(format!("field {name}: unsupported __op {op}.")).into(),
            );
        }
        let type_name = spec.get("type").and_then(Value::as_str).unwrap_or_default();
        let kind = ColumnType::parse(type_name)
            .ok_or_else(|| SchemaError::UnknownType(name.clone(), type_name.to_string()))?;
        let target = match spec.get("targetClass") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => Some(t.clone()),
            Some(_) => {
                return Err(CommonError::InvalidBody(format!(
                    "field {name}: targetClass must be a class name."
                ))
                .into())
            }
        };
        changes.push(ColumnChange::Add(
            name.clone(),
            Column {
                kind,
                target_class: target,
            },
        ));
    }
    Ok(changes)
}

pub async fn list_schemas(
    State(state): State<AppState>,
    ctx: RequestCtx,
) -> Result<Json<Value>, ApiError> {
    let schemas = state
        .cluster
        .catalog()
        .class_schemas(&ctx.app.application_id)
        .await?;
    let results: Vec<Value> = schemas.iter().map(|s| s.render()).collect();
    Ok(Json(json!({ "results": results })))
}

pub async fn get_schema(
    State(state): State<AppState>,
    ctx: RequestCtx,
    SchemaPath(class): SchemaPath,
) -> Result<Json<Value>, ApiError> {
    match state
        .cluster
        .catalog()
        .class_schema(&ctx.app.application_id, &class)
        .await?
    {
        Some(s) => Ok(Json(s.render())),
        None => Err(SchemaError::ClassNotFound(class.to_string()).into()),
    }
}

pub async fn create_schema(
    State(state): State<AppState>,
    ctx: RequestCtx,
    SchemaPath(class): SchemaPath,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    if SYSTEM_CLASSES.contains(&class.as_str()) {
        return Err(SchemaError::ClassExists(class.to_string()).into());
    }
    let body = body.object()?;
    let changes = column_changes(&class, &body, false)?;
    let app = &ctx.app.application_id;
    Ok(Json(
        state
            .cluster
            .catalog()
            .create_class(app, &class, changes)
            .await?,
    ))
}

pub async fn update_schema(
    State(state): State<AppState>,
    ctx: RequestCtx,
    SchemaPath(class): SchemaPath,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    let changes = column_changes(&class, &body, true)?;
    let app = &ctx.app.application_id;
    Ok(Json(
        state
            .cluster
            .catalog()
            .alter_class(app, &class, changes)
            .await?,
    ))
}

pub async fn delete_schema(
    State(state): State<AppState>,
    ctx: RequestCtx,
    SchemaPath(class): SchemaPath,
) -> Result<Json<Value>, ApiError> {
    state
        .cluster
        .catalog()
        .drop_class(&ctx.app.application_id, &class)
        .await?;
    Ok(Json(json!({"msg": "ok"})))
}

/// `GET /1/schemas/<class>/indexes`: the class's indexed columns beyond `createdAt`,
/// `updatedAt` and GeoPoint ones: `results` the declared ones, `automatic` those shards index
/// by themselves (`automaticFull` once a shard reached the limit of them), `optedOut` those
/// the app excluded.
pub async fn list_indexes(
    State(state): State<AppState>,
    ctx: RequestCtx,
    SchemaPath(class): SchemaPath,
) -> Result<Json<Value>, ApiError> {
    let ix = state
        .cluster
        .catalog()
        .indexes(&ctx.app.application_id, &class)
        .await?;
    Ok(Json(json!({
        "results": ix.declared,
        "automatic": ix.automatic,
        "automaticFull": ix.full,
        "optedOut": ix.opted_out,
    })))
}

/// `DELETE /1/schemas/<class>/indexes/<column>`: takes a column out of the class's indexes,
/// automatic or declared, on every shard, and deletes its entries before answering
/// `{"msg": "ok", "removed": <entries>}`; queries on it then read the objects. Declaring
/// the column (`POST`) indexes it again.
pub async fn drop_index(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath((class, field)): ApiPath<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let class = ClassName::user_or_system(&class)?;
    index_column(&field)?;
    let removed = state
        .cluster
        .catalog()
        .drop_index(&ctx.app.application_id, &class, &field)
        .await?;
    Ok(Json(json!({"msg": "ok", "removed": removed})))
}

/// A column an index may be declared on or dropped from (105 otherwise).
fn index_column(field: &str) -> Result<(), ApiError> {
    validate_field_name(field).map_err(ApiError::from)?;
    if RESERVED_FIELDS.contains(&field) || field == "ACL" {
        return Err(ObjectsApiError::ReservedKey(format!(
            "{field} cannot be declared indexed or dropped from the indexes: createdAt and updatedAt always are, objectId and ACL are not columns."
        )).into());
    }
    Ok(())
}

/// `POST /1/schemas/<class>/indexes {"field": "score"}`: declares a top-level column indexed
/// on every shard and builds its entries (existing objects included) before answering
/// `{"msg": "ok", "indexed": <objects>}`. Declaring again rebuilds the class's indexes.
pub async fn create_index(
    State(state): State<AppState>,
    ctx: RequestCtx,
    SchemaPath(class): SchemaPath,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    let field = body
        .get("field")
        .and_then(Value::as_str)
        .ok_or_else(|| CommonError::InvalidBody("field must be a column name.".into()))?;
    index_column(field)?;
    let indexed = state
        .cluster
        .catalog()
        .declare_index(&ctx.app.application_id, &class, Some(field))
        .await?;
    Ok(Json(json!({"msg": "ok", "indexed": indexed})))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(v: Value, deletes: bool) -> Result<Vec<ColumnChange>, ApiError> {
        column_changes("Game", v.as_object().unwrap(), deletes)
    }

    #[test]
    fn bodies_become_column_changes_or_their_codes() {
        let ok = changes(
            json!({"className": "Game", "fields": {"score": {"type": "Number"}, "old": {"__op": "Delete"}}}),
            true,
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        let code = |v: Value, d: bool| changes(v, d).unwrap_err().code();
        assert_eq!(code(json!({"className": "Other"}), true), 10062);
        assert_eq!(
            code(json!({"fields": {"x": {"type": "Blob"}}}), true),
            10069
        );
        assert_eq!(code(json!({"fields": {"x": {}}}), true), 10069);
        assert_eq!(
            code(json!({"fields": {"bad-name": {"type": "String"}}}), true),
            105
        );
        assert_eq!(
            code(json!({"fields": {"x": {"__op": "Delete"}}}), false),
            107
        );
        assert_eq!(code(json!({"fields": 3}), true), 107);
    }
}
