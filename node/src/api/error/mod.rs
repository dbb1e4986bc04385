//! `ApiError`: every failure the API reports (spec section 7 and `decisions.md`, "Envelope"), as
//! Garage's API errors are built: a common enum (`common::CommonError`: authentication, bad
//! requests, not found, limits, unavailable, internal) and one enum per family of endpoints
//! (`objects`, `schemas`, `users`, `sms`, `apps`, `push`, `files`, `functions`), each telling its
//! variants' status and wire code once. `mapping` turns the features' own errors into them, in
//! one place; `ApiError` answers with the body.
//!
//! Bodies are `{"code":N,"error":"..."}`, except bad app keys (401 `{"error":"unauthorized"}`).
//! Internal faults are logged with their cause and answer a generic message.

mod apps;
mod common;
mod files;
mod functions;
mod mapping;
mod objects;
mod push;
mod schemas;
mod sms;
mod users;

pub use apps::AppsApiError;
pub use common::{CommonError, Fault};
pub use files::FilesApiError;
pub use functions::FunctionsApiError;
pub use objects::ObjectsApiError;
pub use push::PushApiError;
pub use schemas::SchemasApiError;
pub use sms::SmsApiError;
pub use users::UsersApiError;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use basalt_cluster::Error as ClusterError;
use serde_json::json;

/// A failure of a request: the common ones, or one of a family of endpoints.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Common(#[from] CommonError),
    #[error(transparent)]
    Objects(#[from] ObjectsApiError),
    #[error(transparent)]
    Schemas(#[from] SchemasApiError),
    #[error(transparent)]
    Users(#[from] UsersApiError),
    #[error(transparent)]
    Sms(#[from] SmsApiError),
    #[error(transparent)]
    Apps(#[from] AppsApiError),
    #[error(transparent)]
    Push(#[from] PushApiError),
    #[error(transparent)]
    Files(#[from] FilesApiError),
    #[error(transparent)]
    Functions(#[from] FunctionsApiError),
}

impl ApiError {
    /// An internal fault with no underlying error (an invariant that did not hold).
    pub fn internal(what: impl Into<String>) -> ApiError {
        ApiError::Common(CommonError::Internal(Fault::new(what, None)))
    }

    /// An internal fault caused by `source` (kept for the log).
    pub fn fault(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> ApiError {
        ApiError::Common(CommonError::Internal(Fault::new(
            what,
            Some(Box::new(source)),
        )))
    }

    /// The wire code of the error.
    pub fn code(&self) -> u32 {
        match self {
            ApiError::Common(e) => e.code(),
            ApiError::Objects(e) => e.code(),
            ApiError::Schemas(e) => e.code(),
            ApiError::Users(e) => e.code(),
            ApiError::Sms(e) => e.code(),
            ApiError::Apps(e) => e.code(),
            ApiError::Push(e) => e.code(),
            ApiError::Files(e) => e.code(),
            ApiError::Functions(e) => e.code(),
        }
    }

    /// The HTTP status of the error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Common(e) => e.status(),
            ApiError::Objects(e) => e.status(),
            ApiError::Schemas(e) => e.status(),
            ApiError::Users(e) => e.status(),
            ApiError::Sms(e) => e.status(),
            ApiError::Apps(e) => e.status(),
            ApiError::Push(e) => e.status(),
            ApiError::Files(e) => e.status(),
            ApiError::Functions(e) => e.status(),
        }
    }

    /// Converts a cluster error, naming the object for not-found answers.
    pub fn from_cluster(e: ClusterError, object_id: &str) -> Self {
        match e {
            ClusterError::ObjectNotFound => {
                CommonError::ObjectNotFound(object_id.to_string()).into()
            }
            other => other.into(),
        }
    }

    /// Seconds a refused client should wait before trying again (`Retry-After`), if any.
    fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Common(
                CommonError::Throttled {
                    retry_after_secs: s,
                    ..
                }
                | CommonError::ConsoleThrottled {
                    retry_after_secs: s,
                }
                | CommonError::AppRateExceeded {
                    retry_after_secs: s,
                    ..
                },
            ) => Some(*s),
            ApiError::Common(CommonError::Overloaded(_)) => Some(1),
            _ => None,
        }
    }
}

/// `resp` with `Connection: close`: part of the request's body may still be unread.
pub fn closing(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        axum::http::header::CONNECTION,
        HeaderValue::from_static("close"),
    );
    resp
}

/// The generic message of internal faults (decisions.md).
pub const BUSY_MESSAGE: &str = "It is busy...Try it later!";

/// Characters of an error message sent at most: messages repeat client input, which may be huge.
const MAX_MESSAGE_CHARS: usize = 256;

fn capped(m: String) -> String {
    match m.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &m[..at]),
        None => m,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = match &self {
            ApiError::Common(CommonError::Unauthorized) => json!({"error": "unauthorized"}),
            ApiError::Common(CommonError::Internal(fault)) => {
                tracing::error!(cause = %fault.chain(), "internal error");
                json!({"code": self.code(), "error": BUSY_MESSAGE})
            }
            ApiError::Common(
                CommonError::Unavailable(cause)
                | CommonError::Timeout(cause)
                | CommonError::Overloaded(cause),
            ) => {
                tracing::warn!(cause = %cause, "{self}");
                json!({"code": self.code(), "error": self.to_string()})
            }
            ApiError::Files(FilesApiError::FilesNotDeleted(fail)) => {
                json!({"code": self.code(), "error": self.to_string(), "fail": fail})
            }
            other => json!({"code": other.code(), "error": capped(other.to_string())}),
        };
        let mut resp = (status, axum::Json(body)).into_response();
        resp.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        if let Some(s) = self.retry_after() {
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from(s));
        }
        resp
    }
}

/// A family's error answers as the `ApiError` it is.
macro_rules! answers_as_api_error {
    ($($family:ty),+) => {
        $(impl IntoResponse for $family {
            fn into_response(self) -> Response {
                ApiError::from(self).into_response()
            }
        })+
    };
}

answers_as_api_error!(
    CommonError,
    ObjectsApiError,
    SchemasApiError,
    UsersApiError,
    SmsApiError,
    AppsApiError,
    PushApiError,
    FilesApiError,
    FunctionsApiError
);

#[cfg(test)]
mod tests;
