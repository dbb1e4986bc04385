//! Refusals of installations and pushes (`api::installations`, `api::push`): 131, 136, 141-144.
//! Each variant's status and code are told here and nowhere else; `ApiError` wraps the family.

use axum::http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum PushApiError {
    /// An installation's device type, token, id or notification uri is missing or invalid.
    #[error("{0}")]
    InvalidInstallation(String),
    /// A change of an installation field that never changes once set.
    #[error("{0}")]
    ReadOnlyField(String),
    /// A push without its `data` object.
    #[error("{0}")]
    PushDataMissing(String),
    /// A push time not written `YYYY-mm-dd HH:ii:ss`.
    #[error("{0}")]
    PushBadTime(String),
    /// A push's `expiration_interval` that is not a number.
    #[error("{0}")]
    PushBadInterval(String),
    /// A push time or expiry already past.
    #[error("{0}")]
    PushTimePast(String),
}

impl PushApiError {
    /// The wire code.
    pub fn code(&self) -> u32 {
        match self {
            PushApiError::InvalidInstallation(_) => 131,
            PushApiError::ReadOnlyField(_) => 136,
            PushApiError::PushDataMissing(_) => 141,
            PushApiError::PushBadTime(_) => 142,
            PushApiError::PushBadInterval(_) => 143,
            PushApiError::PushTimePast(_) => 144,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            PushApiError::InvalidInstallation(_) => StatusCode::BAD_REQUEST,
            PushApiError::ReadOnlyField(_) => StatusCode::BAD_REQUEST,
            PushApiError::PushDataMissing(_) => StatusCode::BAD_REQUEST,
            PushApiError::PushBadTime(_) => StatusCode::BAD_REQUEST,
            PushApiError::PushBadInterval(_) => StatusCode::BAD_REQUEST,
            PushApiError::PushTimePast(_) => StatusCode::BAD_REQUEST,
        }
    }
}
