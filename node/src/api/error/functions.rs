//! Refusals of cloud functions (`api::functions`, and triggers around writes): 311, 310, and a
//! function's own `Basalt.Error` code.
//! Each variant's status and code are told here and nowhere else; `ApiError` wraps the family.

use axum::http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum FunctionsApiError {
    /// No callable function of that name (311).
    #[error("{0}")]
    FunctionNotFound(String),
    /// A function threw, timed out or ran out of memory (310).
    #[error("{0}")]
    FunctionFailed(String),
    /// A function or trigger failed with its own `Basalt.Error`'s code (a trigger refusing a
    /// write, a called function throwing).
    #[error("{message}")]
    ThrownWithCode { code: u32, message: String },
}

impl FunctionsApiError {
    /// The wire code.
    pub fn code(&self) -> u32 {
        match self {
            FunctionsApiError::FunctionNotFound(_) => 311,
            FunctionsApiError::FunctionFailed(_) => 310,
            FunctionsApiError::ThrownWithCode { code, .. } => *code,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            FunctionsApiError::FunctionNotFound(_) => StatusCode::NOT_FOUND,
            FunctionsApiError::FunctionFailed(_) => StatusCode::BAD_REQUEST,
            FunctionsApiError::ThrownWithCode { .. } => StatusCode::BAD_REQUEST,
        }
    }
}
