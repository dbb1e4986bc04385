//! Roles (spec 2.4): objects of `_Role` whose `users` relation lists member users and whose
//! `roles` relation lists child roles, which inherit all of this role's permissions.
//!
//! A user's principals include `role:<name>` for every role it is a member of, and for every
//! role whose `roles` relation holds one of those (transitively). The role graph is read from
//! every shard for each request that carries a live session (roles are few).

use std::collections::BTreeSet;

use basalt_cluster::object::StoredObject;
use basalt_cluster::Cluster;
use serde_json::Value;

use crate::api::error::ApiError;

/// The system class of roles.
pub const ROLE_CLASS: &str = "_Role";

/// `role:<name>` for every role `user_id` holds, directly or through child roles.
pub fn roles_in_graph(roles: &[(String, StoredObject)], user_id: &str) -> Vec<String> {
    let mut held: BTreeSet<&str> = roles
        .iter()
        .filter(|(_, r)| r.relation_members("users").iter().any(|u| u == user_id))
        .map(|(id, _)| id.as_str())
        .collect();
    loop {
        let before = held.len();
        for (id, r) in roles {
            if !held.contains(id.as_str())
                && r.relation_members("roles")
                    .iter()
                    .any(|child| held.contains(child.as_str()))
            {
                held.insert(id);
            }
        }
        if held.len() == before {
            break;
        }
    }
    roles
        .iter()
        .filter(|(id, _)| held.contains(id.as_str()))
        .filter_map(|(_, r)| r.fields.get("name").and_then(Value::as_str))
        .map(|n| format!("role:{n}"))
        .collect()
}

/// The roles of a user, read from every shard.
pub async fn roles_of(
    cluster: &Cluster,
    app: &str,
    user_id: &str,
) -> Result<Vec<String>, ApiError> {
    let roles = cluster.scan_stored_objects(app, ROLE_CLASS).await?;
    Ok(roles_in_graph(&roles, user_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(id: &str, name: &str, users: &[&str], children: &[&str]) -> (String, StoredObject) {
        let mut o = StoredObject::new(0);
        o.fields.insert("name".into(), json!(name));
        o.fields.insert(
            "users".into(),
            json!({"__type": "Relation", "className": "_User", "objects": users}),
        );
        o.fields.insert(
            "roles".into(),
            json!({"__type": "Relation", "className": "_Role", "objects": children}),
        );
        (id.to_string(), o)
    }

    #[test]
    fn child_roles_inherit_their_parents_permissions() {
        let graph = vec![
            role("r1", "admins", &[], &["r2"]),
            role("r2", "mods", &[], &["r3"]),
            role("r3", "helpers", &["u1"], &[]),
            role("r4", "others", &["u2"], &[]),
        ];
        let mut got = roles_in_graph(&graph, "u1");
        got.sort();
        assert_eq!(got, vec!["role:admins", "role:helpers", "role:mods"]);
        assert_eq!(roles_in_graph(&graph, "u2"), vec!["role:others"]);
        assert!(roles_in_graph(&graph, "u3").is_empty());
    }
}
