//! Sessions: tokens, their lifetime, and the principals a request acts as (for ACLs).
//!
//! A session lives in its user's `_sessions` field with its expiry (7 days); logging in adds one
//! (pruning expired ones and keeping at most `MAX_SESSIONS`), changing or resetting the password
//! keeps only the session that did it, deleting the user ends them all. A node checks a session
//! on its own replica of the user's shard when it can (decisions/0011); the writes that end
//! sessions (`ends_sessions`, and deleting a user) settle on every member first.

use basalt_cluster::names::{AppId, ObjectId};
use basalt_cluster::object::{random_alphanumeric, StoredObject};
use basalt_cluster::update::{FieldUpdate, UpdateOp};
use basalt_cluster::{now_ms, Cluster};
use serde_json::{json, Map, Value};

use super::UsersError;
use super::{SESSIONS_FIELD, USER_CLASS};
use crate::auth::{Principals, RequestCtx};

/// How long a session lasts (decisions.md).
pub const SESSION_TTL_MS: i64 = 7 * 24 * 3600 * 1000;

/// Sessions kept per user; logging in beyond that ends the oldest.
pub const MAX_SESSIONS: usize = 50;

const RANDOM_LEN: usize = 32;

/// A new session token for a user.
pub fn new_token(user_id: &str) -> String {
    format!("{}{user_id}", random_alphanumeric(RANDOM_LEN))
}

/// The user a token names (its shape only; whether it is live is `session_user`'s job).
pub fn token_user(token: &str) -> Option<ObjectId> {
    token
        .get(RANDOM_LEN..)
        .filter(|_| token.is_char_boundary(RANDOM_LEN))
        .and_then(ObjectId::parse)
}

/// Whether `token` is a live session of the stored user.
pub fn has_session(user: &StoredObject, token: &str, now: i64) -> bool {
    user.fields
        .get(SESSIONS_FIELD)
        .and_then(|s| s.get(token))
        .and_then(Value::as_i64)
        .is_some_and(|exp| exp > now)
}

/// The updates that add a session (and drop expired and surplus ones) to a user.
pub fn add_session(user: &StoredObject, token: &str, now: i64) -> Vec<FieldUpdate> {
    let mut live: Vec<(String, i64)> = user
        .fields
        .get(SESSIONS_FIELD)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(t, e)| Some((t.clone(), e.as_i64()?)))
                .collect()
        })
        .unwrap_or_default();
    live.sort_by_key(|(_, exp)| std::cmp::Reverse(*exp));
    let mut updates: Vec<FieldUpdate> = live
        .iter()
        .enumerate()
        .filter(|(i, (_, exp))| *exp <= now || *i + 1 >= MAX_SESSIONS)
        .map(|(_, (t, _))| FieldUpdate {
            path: vec![SESSIONS_FIELD.into(), t.clone()],
            op: UpdateOp::Delete,
        })
        .collect();
    updates.push(FieldUpdate {
        path: vec![SESSIONS_FIELD.into(), token.into()],
        op: UpdateOp::Set(json!(now + SESSION_TTL_MS)),
    });
    updates
}

/// The update that leaves `token` as the user's only session (password change or reset;
/// `None` ends every session).
pub fn only_session(token: Option<&str>, now: i64) -> FieldUpdate {
    let mut m = Map::new();
    if let Some(t) = token {
        m.insert(t.to_string(), json!(now + SESSION_TTL_MS));
    }
    FieldUpdate {
        path: vec![SESSIONS_FIELD.into()],
        op: UpdateOp::Set(Value::Object(m)),
    }
}

/// Whether updates of a user may end one of its live sessions (all of them, or a pruned one:
/// `user` is the stored user when known, else any removed session counts as live). Such a
/// write settles on every member of the user's shard before it answers (`propose_settled`), so
/// no node's own replica still accepts the session afterwards (`session_user`).
pub fn ends_sessions(user: Option<&StoredObject>, updates: &[FieldUpdate], now: i64) -> bool {
    updates.iter().any(|u| match u.path.as_slice() {
        [field] => field == SESSIONS_FIELD,
        [field, token] if field == SESSIONS_FIELD => {
            u.op == UpdateOp::Delete && user.is_none_or(|user| has_session(user, token, now))
        }
        _ => false,
    })
}

/// The user behind a request's session token, when it is live: from this node's replica of the
/// user's shard when that replica vouches for being current and holds the session (every write
/// that ends a session settles on each member first), else by a linearizable read — a session
/// made a moment ago through another node may not have reached this replica yet.
pub async fn session_user(
    cluster: &Cluster,
    app: &AppId,
    token: &str,
) -> Result<Option<(ObjectId, StoredObject)>, UsersError> {
    let Some(user_id) = token_user(token) else {
        return Ok(None);
    };
    if let Some(user) = cluster.current_stored_object(app, &USER_CLASS, &user_id) {
        if has_session(&user, token, now_ms()) {
            metrics::counter!("basalt_session_checks_total", "source" => "replica").increment(1);
            return Ok(Some((user_id, user)));
        }
    }
    metrics::counter!("basalt_session_checks_total", "source" => "leader").increment(1);
    let Some(user) = cluster
        .get_stored_object(app, &USER_CLASS, &user_id)
        .await?
    else {
        return Ok(None);
    };
    Ok(has_session(&user, token, now_ms()).then_some((user_id, user)))
}

/// Who a request acts as, for ACLs: the master key (no check), else `*`, plus the session's
/// user and its roles when the token is live. An unknown or expired token acts as anonymous.
/// Found once per request and kept in its context: every later call answers the same.
pub async fn principals(
    cluster: &Cluster,
    roles: &super::roles::RoleGraphs,
    ctx: &RequestCtx,
) -> Result<Principals, UsersError> {
    let found = ctx
        .principals
        .get_or_try_init(|| find_principals(cluster, roles, ctx))
        .await?;
    Ok(found.clone())
}

async fn find_principals(
    cluster: &Cluster,
    roles: &super::roles::RoleGraphs,
    ctx: &RequestCtx,
) -> Result<Principals, UsersError> {
    if ctx.master {
        return Ok(Principals::master());
    }
    let mut out = vec![basalt_cluster::acl::PUBLIC_PRINCIPAL.to_string()];
    let app = &ctx.app.application_id;
    if let Some(token) = &ctx.session_token {
        if let Some((user_id, _)) = session_user(cluster, app, token).await? {
            out.extend(roles.roles_of(cluster, app, &user_id)?);
            out.push(user_id.to_string());
        }
    }
    Ok(Principals::acting(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_their_user() {
        let t = new_token("abcDEF1234");
        assert_eq!(t.len(), 42);
        assert_eq!(token_user(&t).as_deref(), Some("abcDEF1234"));
        assert_eq!(token_user("short").as_deref(), None);
        assert_eq!(
            token_user(&format!("{}{}", "x".repeat(32), "bad-id")).as_deref(),
            None
        );
    }

    #[test]
    fn writes_that_end_sessions() {
        let mut user = StoredObject::new(0);
        user.fields
            .insert(SESSIONS_FIELD.into(), json!({"old": 50, "live": 5_000}));
        let delete = |t: &str| FieldUpdate {
            path: vec![SESSIONS_FIELD.into(), t.into()],
            op: UpdateOp::Delete,
        };
        assert!(ends_sessions(None, &[only_session(Some("t"), 100)], 100));
        assert!(ends_sessions(Some(&user), &[delete("live")], 100));
        assert!(!ends_sessions(Some(&user), &[delete("old")], 100));
        assert!(
            ends_sessions(None, &[delete("old")], 100),
            "unknown: counts as live"
        );
        let login = add_session(&user, "new", 100);
        assert!(!ends_sessions(Some(&user), &login, 100));
        let other = FieldUpdate {
            path: vec!["nickname".into()],
            op: UpdateOp::Set(json!("x")),
        };
        assert!(!ends_sessions(None, &[other], 100));
    }

    #[test]
    fn sessions_expire_and_are_pruned() {
        let mut user = StoredObject::new(0);
        user.fields
            .insert(SESSIONS_FIELD.into(), json!({"old": 50, "live": 5_000}));
        assert!(has_session(&user, "live", 100));
        assert!(!has_session(&user, "old", 100));
        assert!(!has_session(&user, "none", 100));
        let ups = add_session(&user, "new", 100);
        assert!(ups
            .iter()
            .any(|u| u.path == [SESSIONS_FIELD, "old"] && u.op == UpdateOp::Delete));
        assert!(!ups.iter().any(|u| u.path == [SESSIONS_FIELD, "live"]));
        assert!(ups.iter().any(|u| u.path == [SESSIONS_FIELD, "new"]));
    }
}
