//! Roles (spec 4.6, 2.4): create, read, list, update and delete objects of `_Role`.
//! `/1/classes/_Role[/<id>]` is rewritten to these paths before routing.
//!
//! A role's `name` is required, unique in its app (139) and never changes; its `users` and
//! `roles` relations are changed with `AddRelation`/`RemoveRelation` and never shown (they are
//! queried with `$relatedTo`). Writes follow the role's ACL; deleting needs a session (206).
//! A role created without an ACL is readable by everyone and writable only by its creator
//! (or only with the master key when it had no session).

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use basalt_cluster::names::{ClassName, ObjectId};
use basalt_cluster::update::{parse_updates, FieldUpdate, UpdateOp};
use serde_json::{Map, Value};

use super::context::{ApiBody, ApiQuery, AppState, IdPath, RequestCtx};
use super::error::{ApiError, CommonError, ObjectsApiError, UsersApiError};
use super::objects::{
    create_in, created_response, delete_in, get_in, list_in, update_in, GetParams,
};
use crate::query::params::ListParams;
use crate::users::roles::ROLE_CLASS;
use crate::users::session::{principals, session_user};
use crate::users::unique::{self, Unique};
use crate::users::USER_CLASS;

/// Relations of a role and the class their members belong to.
static RELATIONS: [(&str, &ClassName); 2] = [("users", &USER_CLASS), ("roles", &ROLE_CLASS)];

/// Letters, digits, spaces, hyphens and underscores (spec 2.4).
fn valid_role_name(name: &str) -> bool {
    !name.trim().is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == ' ' || c == '-' || c == '_')
}

/// Checks that `users` and `roles` are only changed as relations to users and roles.
fn check_relations(updates: &[FieldUpdate]) -> Result<(), ApiError> {
    for u in updates {
        let Some((field, target)) = RELATIONS
            .iter()
            .find(|(f, _)| u.path.first().map(String::as_str) == Some(*f))
        else {
            continue;
        };
        let ok = match &u.op {
            UpdateOp::AddRelation { class_name, .. }
            | UpdateOp::RemoveRelation { class_name, .. } => {
                u.path.len() == 1 && *class_name == **target
            }
            _ => false,
        };
        if !ok {
            return Err(ObjectsApiError::TypeMismatch(format!(
                "{field} is changed with AddRelation/RemoveRelation of Pointers to {target}."
            ))
            .into());
        }
    }
    Ok(())
}

/// A role as shown: its relations are never part of its JSON.
fn shown(mut role: Value) -> Value {
    if let Some(m) = role.as_object_mut() {
        for (f, _) in RELATIONS {
            m.remove(f);
        }
    }
    role
}

/// The body's role name, trimmed (`"admins "` is the role `admins`).
fn take_name(body: &mut Map<String, Value>) -> Result<Option<String>, ApiError> {
    match body.remove("name") {
        None => Ok(None),
        Some(Value::String(n)) if valid_role_name(n.trim()) => Ok(Some(n.trim().to_string())),
        Some(other) => Err(UsersApiError::InvalidRole(format!(
            "invalid role name {other}: use letters, digits, spaces, - and _."
        ))
        .into()),
    }
}

/// The ACL of a role created without one: everyone may read it (to see which roles exist),
/// only its creator may change it — or, created with the master key or without a session,
/// only the master key. A role writable by anyone would let anyone grant themselves its
/// permissions.
async fn default_role_acl(state: &AppState, ctx: &RequestCtx) -> Result<Value, ApiError> {
    let mut acl = serde_json::json!({"*": {"read": true}});
    if !ctx.master {
        if let Some(token) = &ctx.session_token {
            let app = &ctx.app.application_id;
            if let Some((user_id, _)) = session_user(&state.cluster, app, token).await? {
                acl[user_id.as_str()] = serde_json::json!({"read": true, "write": true});
            }
        }
    }
    Ok(acl)
}

pub async fn create_role(
    State(state): State<AppState>,
    ctx: RequestCtx,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let mut body = body.object()?;
    let name = take_name(&mut body)?
        .ok_or_else(|| UsersApiError::InvalidRole("a role needs a name.".into()))?;
    if body.get("ACL").is_none_or(Value::is_null) {
        body.insert("ACL".into(), default_role_acl(&state, &ctx).await?);
    }
    let mut updates = parse_updates(&body)?;
    check_relations(&updates)?;
    updates.push(FieldUpdate {
        path: vec!["name".into()],
        op: UpdateOp::Set(Value::String(name.clone())),
    });
    let app = ctx.app.application_id.clone();
    let id = ObjectId::random();
    unique::reserve(&state.cluster, &app, Unique::RoleName, &name, &id).await?;
    match create_in(&state, &ctx, &ROLE_CLASS, &id, updates).await {
        Ok((created_ms, group, p)) => {
            let path = format!("/1/roles/{id}");
            Ok(created_response(
                &state.public_url,
                &path,
                created_ms,
                &id,
                Vec::new(),
                group,
                &p,
            ))
        }
        Err(e) => {
            let _ = unique::release(&state.cluster, &app, Unique::RoleName, &name, &id).await;
            Err(e)
        }
    }
}

pub async fn get_role(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<GetParams>,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let role = get_in(&state, &ctx, &ROLE_CLASS, &id, params.include.as_deref()).await?;
    Ok(Json(shown(role)))
}

pub async fn query_roles(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<Value>, ApiError> {
    let mut out = list_in(&state, &ctx, &ROLE_CLASS, params).await?;
    if let Some(rows) = out["results"].as_array_mut() {
        for r in rows.iter_mut() {
            *r = shown(r.take());
        }
    }
    Ok(Json(out))
}

pub async fn update_role(
    State(state): State<AppState>,
    ctx: RequestCtx,
    IdPath(id): IdPath,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let mut body = body.object()?;
    if let Some(name) = take_name(&mut body)? {
        let current = state
            .cluster
            .get_stored_object(&ctx.app.application_id, &ROLE_CLASS, &id)
            .await?
            .ok_or_else(|| CommonError::ObjectNotFound(id.to_string()))?;
        if current.fields.get("name").and_then(Value::as_str) != Some(name.as_str()) {
            return Err(UsersApiError::InvalidRole("a role's name cannot change.".into()).into());
        }
    }
    let updates = parse_updates(&body)?;
    check_relations(&updates)?;
    let who = principals(&state.cluster, &state.roles, &ctx).await?;
    update_in(&state, &ctx, &ROLE_CLASS, &id, updates, who.clone()).await
}

pub async fn delete_role(
    State(state): State<AppState>,
    ctx: RequestCtx,
    IdPath(id): IdPath,
) -> Result<Response, ApiError> {
    if !ctx.master && ctx.session_token.is_none() {
        return Err(UsersApiError::SessionRequired.into());
    }
    let app = ctx.app.application_id.clone();
    let stored = state
        .cluster
        .get_stored_object(&app, &ROLE_CLASS, &id)
        .await?;
    let who = principals(&state.cluster, &state.roles, &ctx).await?;
    let resp = delete_in(&state, &ctx, &ROLE_CLASS, &id, who.clone()).await?;
    if let Some(name) = stored
        .as_ref()
        .and_then(|r| r.fields.get("name"))
        .and_then(Value::as_str)
    {
        let _ = unique::release(&state.cluster, &app, Unique::RoleName, name, &id).await;
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_follow_the_spec() {
        assert!(valid_role_name("Moderators"));
        assert!(valid_role_name("shop owners-2_x"));
        assert!(!valid_role_name("bad/name"));
        assert!(!valid_role_name("  "));
        assert!(!valid_role_name("role:x"));
    }
}
