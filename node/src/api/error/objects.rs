//! Refusals of objects, queries, batches and BQL (`api::objects`, `api::batch`,
//! `api::cloud_query`): 102-117, 137, 601.
//! Each variant's status and code are told here and nowhere else; `ApiError` wraps the family.

use axum::http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum ObjectsApiError {
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
    TypeMismatch(String),
    #[error("{0}")]
    InvalidGeoPoint(String),
    #[error("{0}")]
    Duplicate(String),
    #[error("requests must be an array of operations.")]
    BatchNotArray,
    #[error("{0}")]
    BatchInvalidRequest(String),
    #[error("a batch holds at most {0} operations.")]
    BatchTooLarge(usize),
    #[error("bad BQL: {0}")]
    Bql(String),
}

impl ObjectsApiError {
    /// The wire code.
    pub fn code(&self) -> u32 {
        match self {
            ObjectsApiError::InvalidQuery(_) => 102,
            ObjectsApiError::InvalidClassName(_) => 103,
            ObjectsApiError::InvalidKey(_) => 105,
            ObjectsApiError::ReservedKey(_) => 105,
            ObjectsApiError::InvalidPointer(_) => 106,
            ObjectsApiError::TypeMismatch(_) => 111,
            ObjectsApiError::InvalidGeoPoint(_) => 117,
            ObjectsApiError::Duplicate(_) => 137,
            ObjectsApiError::BatchNotArray => 112,
            ObjectsApiError::BatchInvalidRequest(_) => 113,
            ObjectsApiError::BatchTooLarge(_) => 114,
            ObjectsApiError::Bql(_) => 601,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ObjectsApiError::InvalidQuery(_) => StatusCode::BAD_REQUEST,
            ObjectsApiError::InvalidClassName(_) => StatusCode::BAD_REQUEST,
            ObjectsApiError::InvalidKey(_) => StatusCode::BAD_REQUEST,
            ObjectsApiError::ReservedKey(_) => StatusCode::BAD_REQUEST,
            ObjectsApiError::InvalidPointer(_) => StatusCode::BAD_REQUEST,
            ObjectsApiError::TypeMismatch(_) => StatusCode::BAD_REQUEST,
            ObjectsApiError::InvalidGeoPoint(_) => StatusCode::BAD_REQUEST,
            ObjectsApiError::Duplicate(_) => StatusCode::BAD_REQUEST,
            ObjectsApiError::BatchNotArray => StatusCode::BAD_REQUEST,
            ObjectsApiError::BatchInvalidRequest(_) => StatusCode::BAD_REQUEST,
            ObjectsApiError::BatchTooLarge(_) => StatusCode::BAD_REQUEST,
            ObjectsApiError::Bql(_) => StatusCode::BAD_REQUEST,
        }
    }
}
