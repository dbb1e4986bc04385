//! Failures every family of the API shares: authentication (401, 10061, 10008, 403), not found (101 for a
//! missing object, 404/405 for a path or method), bad request bodies (107, with 408/413 for slow
//! or large ones), limits (storage, quotas, rates, throttles: 10081, 10082, 10077, 10076, 10210)
//! and the service's own state (503, 500: `Fault`, whose cause is only logged).
//! Each variant's status and code are told here and nowhere else; `ApiError` wraps the family.

use axum::http::StatusCode;

/// An internal fault: what failed and, when another error caused it, that error — logged with
/// its whole chain of causes; clients see only `BUSY_MESSAGE`.
#[derive(Debug)]
pub struct Fault {
    what: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for Fault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl Fault {
    pub(super) fn new(
        what: impl Into<String>,
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Fault {
        Fault {
            what: what.into(),
            source,
        }
    }

    /// The fault and its causes, outermost first, joined by `: `.
    pub fn chain(&self) -> String {
        let mut out = self.what.clone();
        let mut next = std::error::Error::source(self);
        while let Some(e) = next {
            out.push_str(": ");
            out.push_str(&e.to_string());
            next = e.source();
        }
        out
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CommonError {
    #[error("unauthorized")]
    Unauthorized,
    #[error("this request needs the app's master key.")]
    MasterKeyRequired,
    #[error("this app is disabled.")]
    AppDisabled,
    /// A browser origin the app does not list in `allowedOrigins`.
    #[error("requests from the origin {0:?} are not allowed for this app.")]
    OriginNotAllowed(String),
    #[error("object not found for {0}.")]
    ObjectNotFound(String),
    #[error("not found")]
    RouteNotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("{0}")]
    InvalidBody(String),
    #[error("request content is empty.")]
    EmptyBody,
    #[error("request body is larger than {0} bytes.")]
    BodyTooLarge(usize),
    #[error("the request body did not arrive within {0} s.")]
    BodyTimeout(u64),
    #[error("the upload was slower than {0} KiB/s.")]
    UploadTooSlow(u64),
    #[error("{0}")]
    InsufficientStorage(String),
    /// A write that would pass the app's `objectsQuotaMb` or `filesQuotaMb`.
    #[error("{0}")]
    StorageQuotaExceeded(String),
    #[error("this app may make {per_second} requests a second; retry in {retry_after_secs} s.")]
    AppRateExceeded {
        per_second: u64,
        retry_after_secs: u64,
    },
    /// Too many attempts by one client or on one account (429 with `Retry-After`).
    #[error("too many {what}; try again in {retry_after_secs} s.")]
    Throttled { what: String, retry_after_secs: u64 },
    /// Too many console logins (429 with `Retry-After`).
    #[error("too many console login attempts; try again in {retry_after_secs} s.")]
    ConsoleThrottled { retry_after_secs: u64 },
    /// The cause is logged with the request id, never sent to the client.
    #[error("the service is unavailable, try again later.")]
    Unavailable(String),
    /// The cause is logged with the request id, never sent to the client.
    #[error("the request timed out; a write may or may not have taken effect.")]
    Timeout(String),
    /// The node runs as many queries as it may (503 with `Retry-After`); the cause is logged.
    #[error("the node is busy with other queries; try again in 1 s.")]
    Overloaded(String),
    /// `POST`/`GET /admin/backups` on a node started without `--backup-to`.
    #[error("this node has no backup destination: start it with --backup-to.")]
    NoBackupDestination,
    /// `POST /admin/backups` while another backup holds its write fence.
    #[error("another backup holds its write fence; try again: {0}")]
    BackupRunning(String),
    #[error("internal: {0}")]
    Internal(Fault),
}

impl CommonError {
    /// The wire code.
    pub fn code(&self) -> u32 {
        match self {
            CommonError::Unauthorized => 0,
            CommonError::MasterKeyRequired => 10061,
            CommonError::AppDisabled => 10008,
            CommonError::OriginNotAllowed(_) => 403,
            CommonError::ObjectNotFound(_) => 101,
            CommonError::RouteNotFound => 404,
            CommonError::MethodNotAllowed => 405,
            CommonError::InvalidBody(_) => 107,
            CommonError::EmptyBody => 107,
            CommonError::BodyTooLarge(_) => 107,
            CommonError::BodyTimeout(_) => 107,
            CommonError::UploadTooSlow(_) => 107,
            CommonError::InsufficientStorage(_) => 10081,
            CommonError::StorageQuotaExceeded(_) => 10082,
            CommonError::AppRateExceeded { .. } => 10077,
            CommonError::Throttled { .. } => 10076,
            CommonError::ConsoleThrottled { .. } => 10210,
            CommonError::Unavailable(_) => 503,
            CommonError::Timeout(_) => 503,
            CommonError::Overloaded(_) => 503,
            CommonError::NoBackupDestination => 10301,
            CommonError::BackupRunning(_) => 10302,
            CommonError::Internal(_) => 500,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            CommonError::Unauthorized => StatusCode::UNAUTHORIZED,
            CommonError::MasterKeyRequired => StatusCode::BAD_REQUEST,
            CommonError::AppDisabled => StatusCode::BAD_REQUEST,
            CommonError::OriginNotAllowed(_) => StatusCode::FORBIDDEN,
            CommonError::ObjectNotFound(_) => StatusCode::NOT_FOUND,
            CommonError::RouteNotFound => StatusCode::NOT_FOUND,
            CommonError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            CommonError::InvalidBody(_) => StatusCode::BAD_REQUEST,
            CommonError::EmptyBody => StatusCode::BAD_REQUEST,
            CommonError::BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            CommonError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            CommonError::UploadTooSlow(_) => StatusCode::REQUEST_TIMEOUT,
            CommonError::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            CommonError::StorageQuotaExceeded(_) => StatusCode::BAD_REQUEST,
            CommonError::AppRateExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            CommonError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
            CommonError::ConsoleThrottled { .. } => StatusCode::TOO_MANY_REQUESTS,
            CommonError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            CommonError::Timeout(_) => StatusCode::SERVICE_UNAVAILABLE,
            CommonError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            CommonError::NoBackupDestination => StatusCode::BAD_REQUEST,
            CommonError::BackupRunning(_) => StatusCode::CONFLICT,
            CommonError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}
