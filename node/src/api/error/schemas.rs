//! Refusals about classes and their columns (`api::schemas`, and writes that would add a
//! class or column): 103, 104, 302, 10062-10074.
//! Each variant's status and code are told here and nowhere else; `ApiError` wraps the family.

use axum::http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum SchemasApiError {
    #[error("{0}")]
    ClassNotFound(String),
    #[error("{0}")]
    ClassExists(String),
    #[error("{0}")]
    ClassCreationNotAllowed(String),
    #[error("{0}")]
    ClassNameMismatch(String),
    #[error("{0}")]
    ReservedColumn(String),
    #[error("{0}")]
    ColumnExists(String),
    #[error("{0}")]
    TargetClassRequired(String),
    #[error("{0}")]
    TargetClassMissing(String),
    #[error("{0}")]
    UnknownColumnType(String),
    #[error("{0}")]
    UnknownColumn(String),
    #[error("{0}")]
    BuiltInColumn(String),
    #[error("{0}")]
    TooManyColumns(String),
}

impl SchemasApiError {
    /// The wire code.
    pub fn code(&self) -> u32 {
        match self {
            SchemasApiError::ClassNotFound(_) => 104,
            SchemasApiError::ClassExists(_) => 103,
            SchemasApiError::ClassCreationNotAllowed(_) => 302,
            SchemasApiError::ClassNameMismatch(_) => 10062,
            SchemasApiError::ReservedColumn(_) => 10063,
            SchemasApiError::ColumnExists(_) => 10064,
            SchemasApiError::TargetClassRequired(_) => 10065,
            SchemasApiError::TargetClassMissing(_) => 10066,
            SchemasApiError::UnknownColumnType(_) => 10069,
            SchemasApiError::UnknownColumn(_) => 10071,
            SchemasApiError::BuiltInColumn(_) => 10073,
            SchemasApiError::TooManyColumns(_) => 10074,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            SchemasApiError::ClassNotFound(_) => StatusCode::BAD_REQUEST,
            SchemasApiError::ClassExists(_) => StatusCode::BAD_REQUEST,
            SchemasApiError::ClassCreationNotAllowed(_) => StatusCode::BAD_REQUEST,
            SchemasApiError::ClassNameMismatch(_) => StatusCode::BAD_REQUEST,
            SchemasApiError::ReservedColumn(_) => StatusCode::BAD_REQUEST,
            SchemasApiError::ColumnExists(_) => StatusCode::BAD_REQUEST,
            SchemasApiError::TargetClassRequired(_) => StatusCode::BAD_REQUEST,
            SchemasApiError::TargetClassMissing(_) => StatusCode::BAD_REQUEST,
            SchemasApiError::UnknownColumnType(_) => StatusCode::BAD_REQUEST,
            SchemasApiError::UnknownColumn(_) => StatusCode::BAD_REQUEST,
            SchemasApiError::BuiltInColumn(_) => StatusCode::BAD_REQUEST,
            SchemasApiError::TooManyColumns(_) => StatusCode::BAD_REQUEST,
        }
    }
}
