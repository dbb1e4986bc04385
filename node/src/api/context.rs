//! Request context: shared state of the HTTP server and the authenticated app of a request.
//!
//! Header names carry a configurable brand word (`X-<Brand>-Application-Id`, default
//! `Service`); HTTP header names are case-insensitive. Standard mode authenticates with the
//! application id and REST key; the master key may stand in for the REST key.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderName;
use basalt_cluster::Cluster;
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::apps::{find_app, AppRecord};

/// Names of the authentication headers for one brand word.
#[derive(Debug, Clone)]
pub struct HeaderNames {
    pub application_id: HeaderName,
    pub rest_key: HeaderName,
    pub master_key: HeaderName,
}

impl HeaderNames {
    pub fn for_brand(brand: &str) -> anyhow::Result<Self> {
        let name = |suffix: &str| {
            HeaderName::try_from(format!("x-{}-{suffix}", brand.to_ascii_lowercase()))
        };
        Ok(HeaderNames {
            application_id: name("application-id")?,
            rest_key: name("rest-api-key")?,
            master_key: name("master-key")?,
        })
    }
}

#[derive(Clone)]
pub struct AppState {
    pub cluster: Cluster,
    pub headers: HeaderNames,
    pub max_body_bytes: usize,
}

/// The app a request acts for, and whether it carried the master key.
#[derive(Debug, Clone)]
pub struct RequestCtx {
    pub app: AppRecord,
    pub master: bool,
}

fn header<'a>(parts: &'a Parts, name: &HeaderName) -> Option<&'a str> {
    parts
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Compares secrets in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl FromRequestParts<AppState> for RequestCtx {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let names = &state.headers;
        let app_id = header(parts, &names.application_id).ok_or(ApiError::Unauthorized)?;
        let app = find_app(&state.cluster, app_id)
            .await?
            .ok_or(ApiError::Unauthorized)?;
        let master = match (
            header(parts, &names.master_key),
            header(parts, &names.rest_key),
        ) {
            (Some(mk), _) if same_secret(mk, &app.master_key) => true,
            (Some(_), _) => return Err(ApiError::Unauthorized),
            (None, Some(rk)) if same_secret(rk, &app.rest_key) => false,
            _ => return Err(ApiError::Unauthorized),
        };
        Ok(RequestCtx { app, master })
    }
}

/// Parses a request body that must be a JSON object (107 otherwise).
pub fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::EmptyBody);
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::InvalidBody(
            "the body must be a JSON object.".into(),
        )),
        Err(e) => Err(ApiError::InvalidBody(format!("invalid JSON: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brand_sets_header_names() {
        let h = HeaderNames::for_brand("Bmob").unwrap();
        assert_eq!(h.application_id.as_str(), "x-bmob-application-id");
        assert_eq!(h.rest_key.as_str(), "x-bmob-rest-api-key");
    }

    #[test]
    fn bodies_must_be_json_objects() {
        assert!(matches!(json_object(b""), Err(ApiError::EmptyBody)));
        assert!(matches!(json_object(b"  \n"), Err(ApiError::EmptyBody)));
        assert!(matches!(
            json_object(b"{bad"),
            Err(ApiError::InvalidBody(_))
        ));
        assert!(matches!(json_object(b"[1]"), Err(ApiError::InvalidBody(_))));
        assert!(json_object(br#"{"a":1}"#).is_ok());
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
    }
}
