//! Third-party identities (`authData`, decisions "Users and sessions"): a user may be
//! registered, logged in, linked and unlinked by a platform account.
//!
//! The platform's id field names the account, and each `(platform, id)` belongs to at most one
//! user of an app, enforced with the same reservations as usernames (`unique::Unique::AuthData`,
//! 208). Before an account is used, `providers` asks its platform whether the data really proves
//! it (unless the app allows unverified data). The data is kept in the internal `_authData`
//! field (it may hold platform access tokens) and never shown.

pub mod providers;

use serde_json::{Map, Value};

/// A malformed `authData` (107 on the wire).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AuthDataError(pub String);

/// Internal field holding a user's linked accounts (platform → data).
pub const AUTH_DATA_FIELD: &str = "_authData";

/// Platforms and the member of their data that identifies the account.
pub const PLATFORMS: [(&str, &str); 8] = [
    ("weibo", "uid"),
    ("apple", "uid"),
    ("qq", "openid"),
    ("weixin", "openid"),
    ("weapp", "openid"),
    ("qqapp", "openid"),
    ("toutiao", "openid"),
    ("anonymous", "id"),
];

/// One change an `authData` body asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Link {
    /// Link (or log in with) a platform account: its id and its data.
    Set {
        platform: &'static str,
        id: String,
        data: Value,
    },
    /// Unlink a platform (`{"<platform>": null}`).
    Unset { platform: &'static str },
}

/// The account id in a platform's data.
pub fn identity_of(platform: &str, data: &Value) -> Option<String> {
    let (_, field) = PLATFORMS.iter().find(|(p, _)| *p == platform)?;
    data.get(*field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Parses an `authData` member: an object of known platforms, each with its id or null.
pub fn parse_auth_data(v: &Value) -> Result<Vec<Link>, AuthDataError> {
    let m: &Map<String, Value> = v
        .as_object()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| AuthDataError("authData must be an object of platforms.".into()))?;
    let mut links = Vec::with_capacity(m.len());
    for (name, data) in m {
        let (platform, field) = PLATFORMS
            .iter()
            .find(|(p, _)| p == name)
            .ok_or_else(|| AuthDataError(format!("unknown authData platform {name:?}.")))?;
        if data.is_null() {
            links.push(Link::Unset { platform });
            continue;
        }
        let id = identity_of(platform, data)
            .ok_or_else(|| AuthDataError(format!("authData.{name} needs a non-empty {field}.")))?;
        links.push(Link::Set {
            platform,
            id,
            data: data.clone(),
        });
    }
    Ok(links)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn platforms_are_identified_by_their_id_field() {
        let links = parse_auth_data(
            &json!({"weixin": {"openid": "o1", "access_token": "t"}, "weibo": null}),
        )
        .unwrap();
        assert!(links.contains(&Link::Unset { platform: "weibo" }));
        assert!(links
            .iter()
            .any(|l| matches!(l, Link::Set { platform: "weixin", id, .. } if id == "o1")));
        assert!(parse_auth_data(&json!({"weixin": {"uid": "x"}})).is_err());
        assert!(parse_auth_data(&json!({"myspace": {"id": "x"}})).is_err());
        assert!(parse_auth_data(&json!({})).is_err());
        assert_eq!(
            identity_of("anonymous", &json!({"id": "a"})),
            Some("a".into())
        );
    }
}
