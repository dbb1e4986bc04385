//! Roles (spec 2.4): objects of `_Role` whose `users` relation lists member users and whose
//! `roles` relation lists child roles, which inherit all of this role's permissions.
//!
//! A user's principals include `role:<name>` for every role it is a member of, and for every
//! role whose `roles` relation holds one of those (transitively).
//!
//! Roles live in the metadata group (`basalt_cluster::META_CLASSES`), of which every node holds
//! a replica, so a request reads the role graph locally: `RoleGraphs` keeps each app's graph
//! while the replica has applied nothing newer (`basalt_cluster::KeptReads`). A role write answers only after every reachable node has
//! applied it (`Cluster::propose_object`), so the next request through any node sees it.

use std::collections::BTreeSet;
use std::sync::Arc;

use basalt_cluster::names::{AppId, ClassName};
use basalt_cluster::object::StoredObject;
use basalt_cluster::{Cluster, KeptReads};
use serde_json::Value;

use super::UsersError;

/// The system class of roles.
pub static ROLE_CLASS: ClassName = ClassName::service("_Role");

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

/// An app's roles as stored.
type Graph = Arc<Vec<(String, StoredObject)>>;

/// Roles kept at most, over all apps' graphs (more clears what is kept).
const MAX_ROLES: usize = 100_000;

/// This node's copy of each app's role graph, kept while the metadata replica has applied
/// nothing newer (counted in `basalt_role_graph_reads_total{kept}`).
pub struct RoleGraphs {
    graphs: KeptReads<String, Graph>,
}

impl Default for RoleGraphs {
    fn default() -> Self {
        Self {
            graphs: KeptReads::new("basalt_role_graph_reads_total", MAX_ROLES),
        }
    }
}

impl RoleGraphs {
    /// The roles of a user (`role:<name>` each), from the local replica's current graph.
    pub fn roles_of(
        &self,
        cluster: &Cluster,
        app: &AppId,
        user_id: &str,
    ) -> Result<Vec<String>, UsersError> {
        Ok(roles_in_graph(&self.graph(cluster, app)?, user_id))
    }

    fn graph(&self, cluster: &Cluster, app: &AppId) -> Result<Graph, UsersError> {
        let applied = cluster.meta_applied();
        self.graphs.get_or_read(applied, app.as_str(), || {
            Ok(Arc::new(cluster.local_meta_objects(app, &ROLE_CLASS)?))
        })
    }
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
