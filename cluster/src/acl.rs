//! Access control (spec 2.6): whether a set of principals may read or write an object.
//!
//! Pure functions used where the decision must be atomic with the data: reads and scans on the
//! shard (before skip/limit and counts), and updates and deletes inside `apply`. A caller is
//! `None` (the master key, or the service itself: no check) or the list of its principals:
//! `*`, its user id, and `role:<name>` for every role it holds.

use serde_json::Value;

/// The principal every caller holds: anyone.
pub const PUBLIC_PRINCIPAL: &str = "*";

/// What a caller wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    fn key(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// Whether `principals` may `access` an object whose fields are `fields` (its `ACL` member
/// decides; an object without one is public). `None` principals may do anything.
pub fn allows(
    fields: &serde_json::Map<String, Value>,
    principals: Option<&[String]>,
    access: Access,
) -> bool {
    let Some(principals) = principals else {
        return true;
    };
    let Some(acl) = fields.get("ACL").and_then(Value::as_object) else {
        return true;
    };
    principals.iter().any(|p| {
        acl.get(p)
            .and_then(|entry| entry.get(access.key()))
            .and_then(Value::as_bool)
            == Some(true)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn the_acl_decides_per_principal_and_access() {
        let public = fields(json!({"a": 1}));
        let acl = fields(json!({"ACL": {
            "*": {"read": true},
            "u1": {"read": true, "write": true},
            "role:mods": {"write": true},
        }}));
        let anyone = vec!["*".to_string()];
        let u1 = vec!["*".to_string(), "u1".to_string()];
        let moderator = vec!["*".to_string(), "u2".to_string(), "role:mods".to_string()];
        assert!(allows(&public, Some(&anyone), Access::Write));
        assert!(allows(&acl, Some(&anyone), Access::Read));
        assert!(!allows(&acl, Some(&anyone), Access::Write));
        assert!(allows(&acl, Some(&u1), Access::Write));
        assert!(allows(&acl, Some(&moderator), Access::Write));
        assert!(allows(&acl, None, Access::Write), "master key");
        let private = fields(json!({"ACL": {"u1": {"read": true}}}));
        assert!(!allows(&private, Some(&anyone), Access::Read));
        assert!(!allows(&private, Some(&u1), Access::Write));
        assert!(
            !allows(&fields(json!({"ACL": {}})), Some(&u1), Access::Read),
            "an empty ACL admits no one"
        );
    }
}
