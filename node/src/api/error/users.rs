//! Refusals of users, sessions, roles, third-party logins and emailed links (`api::users`,
//! `api::roles`, `api::email`): 101 for a failed login, 108-120, 139, 202-252.
//! Each variant's status and code are told here and nowhere else; `ApiError` wraps the family.

use axum::http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum UsersApiError {
    #[error("username or password incorrect.")]
    LoginFailed,
    #[error("{0}")]
    MissingCredentials(String),
    #[error("{0}")]
    MissingLoginData(String),
    #[error("{0}")]
    UsernameTaken(String),
    #[error("{0}")]
    EmailTaken(String),
    #[error("{0}")]
    PhoneTaken(String),
    #[error("this user cannot be changed without its session token or the master key.")]
    SessionRequired,
    #[error("old password incorrect.")]
    WrongOldPassword,
    #[error("{0}")]
    InvalidRole(String),
    #[error("{0}")]
    AuthDataTaken(String),
    /// The platform refused the `authData`, or it names another account.
    #[error("{0}")]
    AuthDataRejected(String),
    /// The app cannot verify this platform's accounts and does not accept unverified ones.
    #[error("{0}")]
    AuthDataUnverifiable(String),
    #[error("email verification is not enabled for this app.")]
    EmailVerifyOff,
    #[error("no user has the email {0:?}.")]
    EmailNotFound(String),
}

impl UsersApiError {
    /// The wire code.
    pub fn code(&self) -> u32 {
        match self {
            UsersApiError::LoginFailed => 101,
            UsersApiError::MissingCredentials(_) => 108,
            UsersApiError::MissingLoginData(_) => 109,
            UsersApiError::UsernameTaken(_) => 202,
            UsersApiError::EmailTaken(_) => 203,
            UsersApiError::PhoneTaken(_) => 209,
            UsersApiError::SessionRequired => 206,
            UsersApiError::WrongOldPassword => 210,
            UsersApiError::InvalidRole(_) => 139,
            UsersApiError::AuthDataTaken(_) => 208,
            UsersApiError::AuthDataRejected(_) => 251,
            UsersApiError::AuthDataUnverifiable(_) => 252,
            UsersApiError::EmailVerifyOff => 120,
            UsersApiError::EmailNotFound(_) => 205,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            UsersApiError::LoginFailed => StatusCode::NOT_FOUND,
            UsersApiError::MissingCredentials(_) => StatusCode::BAD_REQUEST,
            UsersApiError::MissingLoginData(_) => StatusCode::BAD_REQUEST,
            UsersApiError::UsernameTaken(_) => StatusCode::BAD_REQUEST,
            UsersApiError::EmailTaken(_) => StatusCode::BAD_REQUEST,
            UsersApiError::PhoneTaken(_) => StatusCode::BAD_REQUEST,
            UsersApiError::SessionRequired => StatusCode::BAD_REQUEST,
            UsersApiError::WrongOldPassword => StatusCode::BAD_REQUEST,
            UsersApiError::InvalidRole(_) => StatusCode::BAD_REQUEST,
            UsersApiError::AuthDataTaken(_) => StatusCode::BAD_REQUEST,
            UsersApiError::AuthDataRejected(_) => StatusCode::BAD_REQUEST,
            UsersApiError::AuthDataUnverifiable(_) => StatusCode::BAD_REQUEST,
            UsersApiError::EmailVerifyOff => StatusCode::BAD_REQUEST,
            UsersApiError::EmailNotFound(_) => StatusCode::BAD_REQUEST,
        }
    }
}
