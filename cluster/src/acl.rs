//! Access control (spec 2.6): whether a caller's principals may read or write an object.
//!
//! Pure functions used where the decision must be atomic with the data: reads and scans on the
//! shard (before skip/limit and counts), and updates and deletes inside `apply`. A caller's
//! `Principals` are the master's (the master key, or the service itself: no check) or the list
//! of what it acts as: `*`, its user id, and `role:<name>` for every role it holds. Commands and
//! read requests carry them across the wire and into the Raft log, encoded as before the type
//! existed (an absent member for the master, else the list).

use serde::{Deserialize, Serialize};
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

/// Who a request acts as: the master (no ACL check) or a list of principals. Encoded as the
/// `Option<Vec<String>>` it replaces (`None` for the master), so no stored or sent byte changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Principals(Option<Vec<String>>);

impl Principals {
    /// The master key's, or the service's own: every access allowed.
    pub fn master() -> Principals {
        Principals(None)
    }

    /// A caller acting as `list` (`*`, its user id, its roles).
    pub fn acting(list: Vec<String>) -> Principals {
        Principals(Some(list))
    }

    /// Anyone's: `*` alone.
    pub fn public() -> Principals {
        Principals::acting(vec![PUBLIC_PRINCIPAL.to_string()])
    }

    /// Whether these are the master's (nothing is checked).
    pub fn is_master(&self) -> bool {
        self.0.is_none()
    }

    /// Whether what anyone may read is readable: the master's, or a list holding `*`.
    pub fn reads_public(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|ps| ps.iter().any(|p| p == PUBLIC_PRINCIPAL))
    }

    /// Whether the list holds `principal` (the master's holds none).
    pub fn holds(&self, principal: &str) -> bool {
        self.0
            .as_ref()
            .is_some_and(|ps| ps.iter().any(|p| p == principal))
    }

    /// The list acted as; `None` for the master.
    fn list(&self) -> Option<&[String]> {
        self.0.as_deref()
    }

    /// The list's principals other than `*` (the user and its roles); none for the master.
    pub fn private(&self) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .flatten()
            .map(String::as_str)
            .filter(|p| *p != PUBLIC_PRINCIPAL)
    }
}

impl From<Option<Vec<String>>> for Principals {
    /// From the representation it replaced: `None` for the master's.
    fn from(list: Option<Vec<String>>) -> Principals {
        Principals(list)
    }
}

/// Whether `principals` may `access` an object whose fields are `fields` (its `ACL` member
/// decides; an object without one is public). The master's may do anything.
pub fn allows(
    fields: &serde_json::Map<String, Value>,
    principals: &Principals,
    access: Access,
) -> bool {
    let Some(principals) = principals.list() else {
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
        let anyone = Principals::public();
        let u1 = Principals::acting(vec!["*".to_string(), "u1".to_string()]);
        let moderator = Principals::acting(vec![
            "*".to_string(),
            "u2".to_string(),
            "role:mods".to_string(),
        ]);
        assert!(allows(&public, &anyone, Access::Write));
        assert!(allows(&acl, &anyone, Access::Read));
        assert!(!allows(&acl, &anyone, Access::Write));
        assert!(allows(&acl, &u1, Access::Write));
        assert!(allows(&acl, &moderator, Access::Write));
        assert!(
            allows(&acl, &Principals::master(), Access::Write),
            "master key"
        );
        let private = fields(json!({"ACL": {"u1": {"read": true}}}));
        assert!(!allows(&private, &anyone, Access::Read));
        assert!(!allows(&private, &u1, Access::Write));
        assert!(
            !allows(&fields(json!({"ACL": {}})), &u1, Access::Read),
            "an empty ACL admits no one"
        );
    }

    /// Principals encode as the `Option<Vec<String>>` they replaced, both ways, in both codecs
    /// a node reads (MessagePack now, JSON before): logs and peers of earlier builds decode.
    #[test]
    fn principals_encode_as_the_list_they_replaced() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Old {
            #[serde(default, skip_serializing_if = "Option::is_none")]
            principals: Option<Vec<String>>,
        }
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct New {
            #[serde(
                default = "Principals::master",
                skip_serializing_if = "Principals::is_master"
            )]
            principals: Principals,
        }
        let cases = [
            (None, Principals::master()),
            (
                Some(vec!["*".to_string(), "u1".to_string()]),
                Principals::acting(vec!["*".to_string(), "u1".to_string()]),
            ),
            (Some(Vec::new()), Principals::acting(Vec::new())),
        ];
        for (old, new) in cases {
            let old = Old { principals: old };
            let new = New { principals: new };
            let old_mp = rmp_serde::to_vec_named(&old).unwrap();
            assert_eq!(rmp_serde::to_vec_named(&new).unwrap(), old_mp);
            assert_eq!(rmp_serde::from_slice::<New>(&old_mp).unwrap(), new);
            let old_json = serde_json::to_vec(&old).unwrap();
            assert_eq!(serde_json::to_vec(&new).unwrap(), old_json);
            assert_eq!(serde_json::from_slice::<New>(&old_json).unwrap(), new);
        }
        // A null written by hand is the master's too.
        let null: New = serde_json::from_str(r#"{"principals": null}"#).unwrap();
        assert!(null.principals.is_master());
    }
}
