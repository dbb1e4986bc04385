//! Refusals of app management (`api::apps`): 10032.
//! Each variant's status and code are told here and nowhere else; `ApiError` wraps the family.

use axum::http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum AppsApiError {
    #[error("the app name must be shorter than 30 characters.")]
    AppNameTooLong,
}

impl AppsApiError {
    /// The wire code.
    pub fn code(&self) -> u32 {
        match self {
            AppsApiError::AppNameTooLong => 10032,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            AppsApiError::AppNameTooLong => StatusCode::BAD_REQUEST,
        }
    }
}
