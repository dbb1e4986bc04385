//! `ApiError`: every failure the API reports, and the only table mapping conditions to HTTP
//! statuses and wire codes (spec section 7 and `decisions.md`, "Envelope").
//!
//! Bodies are `{"code":N,"error":"..."}`, except bad app keys (401 `{"error":"unauthorized"}`).
//! Internal faults are logged with their cause and answer a generic message.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use basalt_cluster::Error as ClusterError;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unauthorized")]
    Unauthorized,
    #[error("object not found for {0}.")]
    ObjectNotFound(String),
    #[error("{0}")]
    InvalidQuery(String),
    #[error("{0}")]
    InvalidClassName(String),
    #[error("{0}")]
    InvalidKey(String),
    #[error("It is a reserved field: {0}.")]
    ReservedKey(String),
    #[error("{0}")]
    InvalidPointer(String),
    #[error("{0}")]
    InvalidBody(String),
    #[error("request content is empty.")]
    EmptyBody,
    #[error("request body is larger than {0} bytes.")]
    BodyTooLarge(usize),
    #[error("{0}")]
    TypeMismatch(String),
    #[error("{0}")]
    InvalidGeoPoint(String),
    #[error("{0}")]
    Duplicate(String),
    #[error("the service is unavailable, try again: {0}")]
    Unavailable(String),
    #[error("the request timed out; a write may or may not have taken effect: {0}")]
    Timeout(String),
    #[error("not found")]
    RouteNotFound,
    #[error("internal: {0}")]
    Internal(String),
}

/// The generic message of internal faults (decisions.md).
pub const BUSY_MESSAGE: &str = "It is busy...Try it later!";

impl ApiError {
    /// The wire code of the error.
    pub fn code(&self) -> u32 {
        match self {
            ApiError::Unauthorized => 0,
            ApiError::ObjectNotFound(_) => 101,
            ApiError::InvalidQuery(_) => 102,
            ApiError::InvalidClassName(_) => 103,
            ApiError::InvalidKey(_) | ApiError::ReservedKey(_) => 105,
            ApiError::InvalidPointer(_) => 106,
            ApiError::InvalidBody(_) | ApiError::EmptyBody | ApiError::BodyTooLarge(_) => 107,
            ApiError::TypeMismatch(_) => 111,
            ApiError::InvalidGeoPoint(_) => 117,
            ApiError::Duplicate(_) => 137,
            ApiError::RouteNotFound => 404,
            ApiError::Unavailable(_) | ApiError::Timeout(_) => 503,
            ApiError::Internal(_) => 500,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::ObjectNotFound(_) | ApiError::RouteNotFound => StatusCode::NOT_FOUND,
            ApiError::BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unavailable(_) | ApiError::Timeout(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// Converts a cluster error, naming the object for not-found answers.
    pub fn from_cluster(e: ClusterError, object_id: &str) -> Self {
        match e {
            ClusterError::ObjectNotFound => ApiError::ObjectNotFound(object_id.to_string()),
            other => other.into(),
        }
    }
}

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::ObjectNotFound => ApiError::ObjectNotFound(String::new()),
            ClusterError::InvalidKey(m) => ApiError::InvalidKey(m),
            ClusterError::ReservedKey(m) => ApiError::ReservedKey(m),
            ClusterError::InvalidValue(m) => ApiError::InvalidBody(m),
            ClusterError::TypeMismatch(m) => ApiError::TypeMismatch(m),
            ClusterError::InvalidPointer(m) => ApiError::InvalidPointer(m),
            ClusterError::InvalidGeoPoint(m) => ApiError::InvalidGeoPoint(m),
            ClusterError::InvalidClassName(m) => ApiError::InvalidClassName(m),
            ClusterError::Conflict(m) => ApiError::Duplicate(m),
            ClusterError::Unavailable(m) | ClusterError::PeerUnreachable(m) => {
                ApiError::Unavailable(m)
            }
            ClusterError::NotLeader { group, .. } => {
                ApiError::Unavailable(format!("group {group} is electing a leader"))
            }
            ClusterError::Timeout(m) => ApiError::Timeout(m),
            ClusterError::InvalidOperation(m)
            | ClusterError::Storage(m)
            | ClusterError::Internal(m) => ApiError::Internal(m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = match &self {
            ApiError::Unauthorized => json!({"error": "unauthorized"}),
            ApiError::Internal(cause) => {
                tracing::error!(cause = %cause, "internal error");
                json!({"code": self.code(), "error": BUSY_MESSAGE})
            }
            other => json!({"code": other.code(), "error": other.to_string()}),
        };
        let mut resp = (status, axum::Json(body)).into_response();
        resp.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant with its documented status and code (docs/api.md, "Errors").
    #[test]
    fn error_table() {
        let table: Vec<(ApiError, u16, u32)> = vec![
            (ApiError::Unauthorized, 401, 0),
            (ApiError::ObjectNotFound("x".into()), 404, 101),
            (ApiError::InvalidQuery("x".into()), 400, 102),
            (ApiError::InvalidClassName("x".into()), 400, 103),
            (ApiError::InvalidKey("x".into()), 400, 105),
            (ApiError::ReservedKey("x".into()), 400, 105),
            (ApiError::InvalidPointer("x".into()), 400, 106),
            (ApiError::InvalidBody("x".into()), 400, 107),
            (ApiError::EmptyBody, 400, 107),
            (ApiError::BodyTooLarge(1), 413, 107),
            (ApiError::TypeMismatch("x".into()), 400, 111),
            (ApiError::InvalidGeoPoint("x".into()), 400, 117),
            (ApiError::Duplicate("x".into()), 400, 137),
            (ApiError::RouteNotFound, 404, 404),
            (ApiError::Unavailable("x".into()), 503, 503),
            (ApiError::Timeout("x".into()), 503, 503),
            (ApiError::Internal("x".into()), 500, 500),
        ];
        for (e, status, code) in table {
            assert_eq!((e.status().as_u16(), e.code()), (status, code), "{e:?}");
        }
    }

    #[test]
    fn cluster_errors_map_to_their_codes() {
        assert_eq!(
            ApiError::from(ClusterError::TypeMismatch("x".into())).code(),
            111
        );
        assert_eq!(
            ApiError::from(ClusterError::ReservedKey("x".into())).code(),
            105
        );
        assert_eq!(
            ApiError::from(ClusterError::Timeout("x".into())).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            ApiError::from(ClusterError::Storage("x".into())).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
