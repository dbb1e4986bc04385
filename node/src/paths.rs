//! The path a request is routed by: trailing slashes trimmed, and the system classes addressed
//! as classes (`/1/classes/_User`) routed to their endpoints (`/1/users`). `server` rewrites
//! each request before routing and keeps the path the client sent (`SentPath`), which a
//! request signature covers (`api::context`); `/1/batch` routes its operations' paths alike.

use axum::extract::Request;
use axum::http::Uri;

/// The path a client sent, before `normalize_path` rewrote it (a signature covers it).
#[derive(Debug, Clone)]
pub struct SentPath(pub String);

/// System classes addressed as classes, and the endpoints they stand for (decisions.md).
const CLASS_ALIASES: [(&str, &str); 3] = [
    ("/1/classes/_User", "/1/users"),
    ("/1/classes/_Role", "/1/roles"),
    ("/1/classes/_Installation", "/1/installations"),
];

/// The path routed for a sent path: without trailing slashes (`/1/timestamp/`), and with
/// `/1/classes/_User[/<id>]` as `/1/users[/<id>]` (likewise `_Role`, `_Installation`).
pub fn routed_path(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
    for (alias, target) in CLASS_ALIASES {
        if let Some(rest) = trimmed.strip_prefix(alias) {
            if rest.is_empty() || rest.starts_with('/') {
                return format!("{target}{rest}");
            }
        }
    }
    trimmed.to_string()
}

/// Rewrites a request's path to its routed form (runs before routing), keeping the sent one.
pub fn normalize_path(mut req: Request) -> Request {
    let sent = req.uri().path().to_string();
    let routed = routed_path(&sent);
    if routed != sent {
        let rebuilt = match req.uri().query() {
            Some(q) => format!("{routed}?{q}"),
            None => routed,
        };
        if let Ok(uri) = rebuilt.parse::<Uri>() {
            *req.uri_mut() = uri;
        }
    }
    req.extensions_mut().insert(SentPath(sent));
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routed(uri: &str) -> String {
        let req = Request::builder()
            .uri(uri)
            .body(axum::body::Body::empty())
            .unwrap();
        normalize_path(req).uri().to_string()
    }

    #[test]
    fn trailing_slashes_are_trimmed_and_queries_kept() {
        assert_eq!(routed("/1/timestamp/"), "/1/timestamp");
        assert_eq!(routed("/1/classes/A//?limit=1"), "/1/classes/A?limit=1");
        assert_eq!(routed("/"), "/");
        assert_eq!(routed("/1/classes/A"), "/1/classes/A");
    }

    #[test]
    fn system_classes_are_aliases_of_their_endpoints() {
        assert_eq!(routed("/1/classes/_User"), "/1/users");
        assert_eq!(routed("/1/classes/_User/abc?x=1"), "/1/users/abc?x=1");
        assert_eq!(routed("/1/classes/_Role/r1"), "/1/roles/r1");
        assert_eq!(routed("/1/classes/_Installation/"), "/1/installations");
        assert_eq!(routed("/1/classes/_Users"), "/1/classes/_Users");
    }
}
