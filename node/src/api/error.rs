//! `ApiError`: every failure the API reports, and the only table mapping conditions to HTTP
//! statuses and wire codes (spec section 7 and `decisions.md`, "Envelope").
//!
//! Bodies are `{"code":N,"error":"..."}`, except bad app keys (401 `{"error":"unauthorized"}`).
//! Internal faults are logged with their cause and answer a generic message.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use basalt_cluster::schema::SchemaError;
use basalt_cluster::Error as ClusterError;
use serde_json::json;

use crate::apps::AppsError;
use crate::auth::AuthError;
use crate::captcha::CaptchaError;
use crate::files::images::ImageError;
use crate::files::video::SnapshotError;
use crate::files::FilesError;
use crate::functions::engine::{RunError, Thrown};
use crate::functions::FunctionsError;
use crate::installations::InstallationError;
use crate::password::PasswordError;
use crate::push::request::PushRequestError;
use crate::push::PushError;
use crate::query::QueryError;
use crate::sms::SmsError;
use crate::throttle::ThrottleError;
use crate::users::third_party::providers::VerifyError;
use crate::users::third_party::AuthDataError;
use crate::users::UsersError;

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
    #[error("{0}")]
    TypeMismatch(String),
    #[error("{0}")]
    InvalidGeoPoint(String),
    #[error("{0}")]
    Duplicate(String),
    /// An installation's device type, token, id or notification uri is missing or invalid.
    #[error("{0}")]
    InvalidInstallation(String),
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
    /// A change of an installation field that never changes once set.
    #[error("{0}")]
    ReadOnlyField(String),
    #[error("{0}")]
    ClassNotFound(String),
    #[error("{0}")]
    ClassExists(String),
    #[error("{0}")]
    ClassCreationNotAllowed(String),
    #[error("requests must be an array of operations.")]
    BatchNotArray,
    #[error("{0}")]
    BatchInvalidRequest(String),
    #[error("a batch holds at most {0} operations.")]
    BatchTooLarge(usize),
    #[error("this app is disabled.")]
    AppDisabled,
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
    #[error("SMS code incorrect or expired.")]
    WrongSmsCode,
    #[error("this mobilePhoneNumber has reached its SMS limit ({0}).")]
    SmsLimit(String),
    #[error("no SMS template named {0:?}.")]
    UnknownTemplate(String),
    #[error("captcha code incorrect, or the captcha expired or was used.")]
    CaptchaFailed,
    #[error("a validate_token from verifyCaptcha is needed (the SMS template asks for one, or the account failed too many logins).")]
    CaptchaRequired,
    #[error("the app name must be shorter than 30 characters.")]
    AppNameTooLong,
    #[error("this request needs the app's master key.")]
    MasterKeyRequired,
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
    #[error("bad BQL: {0}")]
    Bql(String),
    /// The cause is logged with the request id, never sent to the client.
    #[error("the service is unavailable, try again later.")]
    Unavailable(String),
    /// The cause is logged with the request id, never sent to the client.
    #[error("the request timed out; a write may or may not have taken effect.")]
    Timeout(String),
    /// The node runs as many queries as it may (503 with `Retry-After`); the cause is logged.
    #[error("the node is busy with other queries; try again in 1 s.")]
    Overloaded(String),
    /// Too many attempts by one client or on one account (429 with `Retry-After`).
    #[error("too many {what}; try again in {retry_after_secs} s.")]
    Throttled { what: String, retry_after_secs: u64 },
    /// Too many console logins (429 with `Retry-After`).
    #[error("too many console login attempts; try again in {retry_after_secs} s.")]
    ConsoleThrottled { retry_after_secs: u64 },
    /// A browser origin the app does not list in `allowedOrigins`.
    #[error("requests from the origin {0:?} are not allowed for this app.")]
    OriginNotAllowed(String),
    #[error("{0}")]
    FileNameInvalid(String),
    #[error("the file is empty.")]
    FileEmpty,
    #[error("the file is larger than {0} bytes.")]
    FileTooLarge(u64),
    #[error("{0}")]
    FileNotFound(String),
    /// Some files of a `cdnBatchDelete` were not deleted: by cdn name, their urls.
    #[error("some files could not be deleted.")]
    FilesNotDeleted(serde_json::Value),
    /// A bad image operation, or a file that cannot be processed as asked (160).
    #[error("{0}")]
    ImageInvalid(String),
    #[error("{0}")]
    ImageMode(String),
    #[error("{0}")]
    ImageWidth(String),
    #[error("{0}")]
    ImageHeight(String),
    #[error("{0}")]
    ImageLongEdge(String),
    #[error("{0}")]
    ImageShortEdge(String),
    /// Deleting a file of an app whose files only their uploader deletes, without a session
    /// (206).
    #[error("{0}")]
    FileSessionRequired(String),
    /// A private file's url without a valid signature (403).
    #[error("{0}")]
    FilePrivate(String),
    /// A video snapshot: no frame at the point asked (155).
    #[error("{0}")]
    NoVideoFrame(String),
    /// A video snapshot: ffmpeg cannot run on this node (156).
    #[error("{0}")]
    NoFfmpeg(String),
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
    #[error("not found")]
    RouteNotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("internal: {0}")]
    Internal(Fault),
}

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

impl ApiError {
    /// An internal fault with no underlying error (an invariant that did not hold).
    pub fn internal(what: impl Into<String>) -> ApiError {
        ApiError::Internal(Fault {
            what: what.into(),
            source: None,
        })
    }

    /// An internal fault caused by `source` (kept for the log).
    pub fn fault(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> ApiError {
        ApiError::Internal(Fault {
            what: what.into(),
            source: Some(Box::new(source)),
        })
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
            ApiError::InvalidBody(_)
            | ApiError::EmptyBody
            | ApiError::BodyTooLarge(_)
            | ApiError::BodyTimeout(_)
            | ApiError::UploadTooSlow(_) => 107,
            ApiError::TypeMismatch(_) => 111,
            ApiError::InvalidGeoPoint(_) => 117,
            ApiError::Duplicate(_) => 137,
            ApiError::InvalidInstallation(_) => 131,
            ApiError::ReadOnlyField(_) => 136,
            ApiError::PushDataMissing(_) => 141,
            ApiError::PushBadTime(_) => 142,
            ApiError::PushBadInterval(_) => 143,
            ApiError::PushTimePast(_) => 144,
            ApiError::ClassNotFound(_) => 104,
            ApiError::ClassExists(_) => 103,
            ApiError::ClassCreationNotAllowed(_) => 302,
            ApiError::BatchNotArray => 112,
            ApiError::BatchInvalidRequest(_) => 113,
            ApiError::BatchTooLarge(_) => 114,
            ApiError::AppDisabled => 10008,
            ApiError::LoginFailed => 101,
            ApiError::MissingCredentials(_) => 108,
            ApiError::MissingLoginData(_) => 109,
            ApiError::UsernameTaken(_) => 202,
            ApiError::EmailTaken(_) => 203,
            ApiError::PhoneTaken(_) => 209,
            ApiError::SessionRequired => 206,
            ApiError::WrongOldPassword => 210,
            ApiError::InvalidRole(_) => 139,
            ApiError::AuthDataTaken(_) => 208,
            ApiError::AuthDataRejected(_) => 251,
            ApiError::AuthDataUnverifiable(_) => 252,
            ApiError::EmailVerifyOff => 120,
            ApiError::EmailNotFound(_) => 205,
            ApiError::WrongSmsCode => 207,
            ApiError::SmsLimit(_) => 10010,
            ApiError::UnknownTemplate(_) => 10022,
            ApiError::CaptchaFailed => 10023,
            ApiError::CaptchaRequired => 10024,
            ApiError::AppNameTooLong => 10032,
            ApiError::MasterKeyRequired => 10061,
            ApiError::ClassNameMismatch(_) => 10062,
            ApiError::ReservedColumn(_) => 10063,
            ApiError::ColumnExists(_) => 10064,
            ApiError::TargetClassRequired(_) => 10065,
            ApiError::TargetClassMissing(_) => 10066,
            ApiError::UnknownColumnType(_) => 10069,
            ApiError::UnknownColumn(_) => 10071,
            ApiError::BuiltInColumn(_) => 10073,
            ApiError::TooManyColumns(_) => 10074,
            ApiError::Bql(_) => 601,
            ApiError::Throttled { .. } => 10076,
            ApiError::AppRateExceeded { .. } => 10077,
            ApiError::InsufficientStorage(_) => 10081,
            ApiError::StorageQuotaExceeded(_) => 10082,
            ApiError::ConsoleThrottled { .. } => 10210,
            ApiError::OriginNotAllowed(_) => 403,
            ApiError::FileNameInvalid(_) => 146,
            ApiError::FileEmpty => 149,
            ApiError::FileNotFound(_) => 151,
            ApiError::FilesNotDeleted(_) => 154,
            ApiError::FileTooLarge(_) => 1500,
            ApiError::ImageInvalid(_) => 160,
            ApiError::ImageMode(_) => 161,
            ApiError::ImageWidth(_) => 162,
            ApiError::ImageHeight(_) => 163,
            ApiError::ImageLongEdge(_) => 164,
            ApiError::ImageShortEdge(_) => 165,
            ApiError::NoVideoFrame(_) => 155,
            ApiError::NoFfmpeg(_) => 156,
            ApiError::FilePrivate(_) => 403,
            ApiError::FileSessionRequired(_) => 206,
            ApiError::FunctionNotFound(_) => 311,
            ApiError::FunctionFailed(_) => 310,
            ApiError::ThrownWithCode { code, .. } => *code,
            ApiError::RouteNotFound => 404,
            ApiError::MethodNotAllowed => 405,
            ApiError::Unavailable(_) | ApiError::Timeout(_) | ApiError::Overloaded(_) => 503,
            ApiError::Internal(_) => 500,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::ObjectNotFound(_)
            | ApiError::LoginFailed
            | ApiError::RouteNotFound
            | ApiError::FunctionNotFound(_) => StatusCode::NOT_FOUND,
            ApiError::BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::BodyTimeout(_) | ApiError::UploadTooSlow(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Throttled { .. }
            | ApiError::ConsoleThrottled { .. }
            | ApiError::AppRateExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::OriginNotAllowed(_) | ApiError::FilePrivate(_) => StatusCode::FORBIDDEN,
            ApiError::NoFfmpeg(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Unavailable(_) | ApiError::Timeout(_) | ApiError::Overloaded(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::InvalidQuery(_)
            | ApiError::InvalidClassName(_)
            | ApiError::InvalidKey(_)
            | ApiError::ReservedKey(_)
            | ApiError::InvalidPointer(_)
            | ApiError::InvalidBody(_)
            | ApiError::EmptyBody
            | ApiError::StorageQuotaExceeded(_)
            | ApiError::TypeMismatch(_)
            | ApiError::InvalidGeoPoint(_)
            | ApiError::Duplicate(_)
            | ApiError::InvalidInstallation(_)
            | ApiError::ReadOnlyField(_)
            | ApiError::PushDataMissing(_)
            | ApiError::PushBadTime(_)
            | ApiError::PushBadInterval(_)
            | ApiError::PushTimePast(_)
            | ApiError::ClassNotFound(_)
            | ApiError::ClassExists(_)
            | ApiError::ClassCreationNotAllowed(_)
            | ApiError::BatchNotArray
            | ApiError::BatchInvalidRequest(_)
            | ApiError::BatchTooLarge(_)
            | ApiError::AppDisabled
            | ApiError::MissingCredentials(_)
            | ApiError::MissingLoginData(_)
            | ApiError::UsernameTaken(_)
            | ApiError::EmailTaken(_)
            | ApiError::PhoneTaken(_)
            | ApiError::SessionRequired
            | ApiError::WrongOldPassword
            | ApiError::InvalidRole(_)
            | ApiError::AuthDataTaken(_)
            | ApiError::AuthDataRejected(_)
            | ApiError::AuthDataUnverifiable(_)
            | ApiError::EmailVerifyOff
            | ApiError::EmailNotFound(_)
            | ApiError::WrongSmsCode
            | ApiError::SmsLimit(_)
            | ApiError::UnknownTemplate(_)
            | ApiError::CaptchaFailed
            | ApiError::CaptchaRequired
            | ApiError::AppNameTooLong
            | ApiError::MasterKeyRequired
            | ApiError::ClassNameMismatch(_)
            | ApiError::ReservedColumn(_)
            | ApiError::ColumnExists(_)
            | ApiError::TargetClassRequired(_)
            | ApiError::TargetClassMissing(_)
            | ApiError::UnknownColumnType(_)
            | ApiError::UnknownColumn(_)
            | ApiError::BuiltInColumn(_)
            | ApiError::TooManyColumns(_)
            | ApiError::Bql(_)
            | ApiError::FileNameInvalid(_)
            | ApiError::FileEmpty
            | ApiError::FileTooLarge(_)
            | ApiError::FileNotFound(_)
            | ApiError::FilesNotDeleted(_)
            | ApiError::ImageInvalid(_)
            | ApiError::ImageMode(_)
            | ApiError::ImageWidth(_)
            | ApiError::ImageHeight(_)
            | ApiError::ImageLongEdge(_)
            | ApiError::ImageShortEdge(_)
            | ApiError::NoVideoFrame(_)
            | ApiError::FileSessionRequired(_)
            | ApiError::FunctionFailed(_)
            | ApiError::ThrownWithCode { .. } => StatusCode::BAD_REQUEST,
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
            ClusterError::QuotaExceeded(m) => ApiError::SmsLimit(m),
            ClusterError::Unavailable(m) | ClusterError::PeerUnreachable(m) => {
                ApiError::Unavailable(m)
            }
            ClusterError::NotLeader { group, .. } => {
                ApiError::Unavailable(format!("group {group} is electing a leader"))
            }
            ClusterError::Timeout(m) => ApiError::Timeout(m),
            ClusterError::Overloaded(m) => ApiError::Overloaded(m),
            e @ ClusterError::DiskFull(_) => ApiError::InsufficientStorage(e.to_string()),
            ClusterError::Schema(e) => e.into(),
            e @ (ClusterError::InvalidOperation(_)
            | ClusterError::Listen { .. }
            | ClusterError::Storage(_)
            | ClusterError::NotApplied(_)
            | ClusterError::Internal(_)) => ApiError::fault("cluster", e),
        }
    }
}

impl From<FunctionsError> for ApiError {
    fn from(e: FunctionsError) -> Self {
        match e {
            e @ FunctionsError::NotFound(_) => ApiError::FunctionNotFound(e.to_string()),
            FunctionsError::Invalid(m) => ApiError::InvalidBody(m),
            e @ FunctionsError::Contended(_) => ApiError::Unavailable(e.to_string()),
            e @ FunctionsError::Corrupt(_) => ApiError::fault("functions", e),
            FunctionsError::Run(RunError::Thrown(t)) if t.own => thrown(t),
            FunctionsError::Refused(RunError::Thrown(t)) => thrown(t),
            FunctionsError::Run(e) | FunctionsError::Refused(e) => ran(e),
            FunctionsError::Users(e) => e.into(),
            FunctionsError::Cluster(e) => e.into(),
        }
    }
}

/// What a function threw, as its answer: its `Basalt.Error` code when it gave one, else 310.
fn thrown(t: Thrown) -> ApiError {
    match t.code.and_then(|c| u32::try_from(c).ok()) {
        Some(code) if code > 0 => ApiError::ThrownWithCode {
            code,
            message: t.message,
        },
        _ => ran(RunError::Thrown(t)),
    }
}

/// A function that gave no result: no slot (503), the engine's own failure (500), else 310.
fn ran(e: RunError) -> ApiError {
    match e {
        RunError::Busy => ApiError::Unavailable(e.to_string()),
        e @ RunError::Engine(_) => ApiError::fault("running a function", e),
        e => ApiError::FunctionFailed(e.to_string()),
    }
}

impl From<PushError> for ApiError {
    fn from(e: PushError) -> Self {
        match e {
            PushError::Cluster(e) => e.into(),
            PushError::Apps(e) => e.into(),
            PushError::Query(m) => ApiError::InvalidQuery(m),
            e @ (PushError::Lost | PushError::Corrupt(_)) => ApiError::fault("push", e),
        }
    }
}

impl From<PushRequestError> for ApiError {
    fn from(e: PushRequestError) -> Self {
        let m = e.to_string();
        match e {
            PushRequestError::MissingData => ApiError::PushDataMissing(m),
            PushRequestError::BadTime(_) => ApiError::PushBadTime(m),
            PushRequestError::BadInterval => ApiError::PushBadInterval(m),
            PushRequestError::Past(_) => ApiError::PushTimePast(m),
            PushRequestError::BadWhere(_) => ApiError::InvalidQuery(m),
            PushRequestError::BadBody(_) => ApiError::InvalidBody(m),
        }
    }
}

impl From<InstallationError> for ApiError {
    fn from(e: InstallationError) -> Self {
        let m = e.to_string();
        match e {
            InstallationError::Invalid(_) => ApiError::InvalidInstallation(m),
            InstallationError::ReadOnly(_) => ApiError::ReadOnlyField(m),
        }
    }
}

impl From<crate::storage_quota::QuotaError> for ApiError {
    fn from(e: crate::storage_quota::QuotaError) -> Self {
        match e {
            e @ crate::storage_quota::QuotaError::Exceeded { .. } => {
                ApiError::StorageQuotaExceeded(e.to_string())
            }
            crate::storage_quota::QuotaError::Cluster(e) => e.into(),
        }
    }
}

impl From<FilesError> for ApiError {
    fn from(e: FilesError) -> Self {
        match e {
            e @ (FilesError::NoExtension(_) | FilesError::BadName(_)) => {
                ApiError::FileNameInvalid(e.to_string())
            }
            FilesError::Empty => ApiError::FileEmpty,
            FilesError::TooLarge(max) => ApiError::FileTooLarge(max),
            e @ FilesError::NotFound(_) => ApiError::FileNotFound(e.to_string()),
            FilesError::BadBody(m) => ApiError::InvalidBody(m),
            FilesError::Stalled(secs) => ApiError::BodyTimeout(secs),
            FilesError::TooSlow(kib) => ApiError::UploadTooSlow(kib),
            FilesError::BadSignature => ApiError::Unauthorized,
            FilesError::DeleteNeedsMaster => ApiError::MasterKeyRequired,
            e @ FilesError::DeleteNeedsSession => ApiError::FileSessionRequired(e.to_string()),
            e @ FilesError::Session(_) => ApiError::fault("checking a session", e),
            e @ FilesError::Private(_) => ApiError::FilePrivate(e.to_string()),
            FilesError::Cluster(e) => e.into(),
            FilesError::Quota(e) => e.into(),
            FilesError::NoSuchUrl => ApiError::RouteNotFound,
            FilesError::Image(e) => e.into(),
            FilesError::Apps(e) => e.into(),
            FilesError::Users(e) => e.into(),
            e @ FilesError::Response(_) => ApiError::fault("building a response", e),
        }
    }
}

impl From<ImageError> for ApiError {
    fn from(e: ImageError) -> Self {
        match e {
            ImageError::Mode(m) => ApiError::ImageMode(m),
            ImageError::Width(m) => ApiError::ImageWidth(m),
            ImageError::Height(m) => ApiError::ImageHeight(m),
            ImageError::LongEdge(m) => ApiError::ImageLongEdge(m),
            ImageError::ShortEdge(m) => ApiError::ImageShortEdge(m),
            e @ (ImageError::Invalid(_)
            | ImageError::NotAnImage(_)
            | ImageError::TooLarge(_)
            | ImageError::MarkNotFound(_)
            | ImageError::NoFont
            | ImageError::Encode(_)) => ApiError::ImageInvalid(e.to_string()),
            e @ ImageError::Busy => ApiError::Unavailable(e.to_string()),
            e @ ImageError::Worker(_) => ApiError::fault("image processing", e),
            ImageError::Cluster(e) => e.into(),
        }
    }
}

impl From<SnapshotError> for ApiError {
    fn from(e: SnapshotError) -> Self {
        match e {
            SnapshotError::BadRequest(m) => ApiError::InvalidBody(m),
            e @ SnapshotError::BadName(_) => ApiError::FileNameInvalid(e.to_string()),
            e @ SnapshotError::NoFrame(_) => ApiError::NoVideoFrame(e.to_string()),
            e @ SnapshotError::NoFfmpeg(_) => ApiError::NoFfmpeg(e.to_string()),
            SnapshotError::TooLarge(m) => ApiError::ImageInvalid(m),
            SnapshotError::Busy(m) => ApiError::Unavailable(m),
            e @ SnapshotError::Io(_) => ApiError::fault("video snapshot", e),
            SnapshotError::Files(e) => e.into(),
        }
    }
}

impl From<CaptchaError> for ApiError {
    fn from(e: CaptchaError) -> Self {
        match e {
            CaptchaError::InvalidParams(m) => ApiError::InvalidBody(m),
            CaptchaError::Failed => ApiError::CaptchaFailed,
            e @ (CaptchaError::Record(_) | CaptchaError::Render(_)) => {
                ApiError::fault("captcha", e)
            }
            CaptchaError::Cluster(e) => e.into(),
        }
    }
}

impl From<ThrottleError> for ApiError {
    fn from(e: ThrottleError) -> Self {
        match e {
            ThrottleError::Throttled {
                what,
                retry_after_secs,
            } => ApiError::Throttled {
                what,
                retry_after_secs,
            },
            ThrottleError::Cluster(e) => e.into(),
        }
    }
}

impl From<PasswordError> for ApiError {
    fn from(e: PasswordError) -> Self {
        ApiError::fault("password hashing", e)
    }
}

impl From<AppsError> for ApiError {
    fn from(e: AppsError) -> Self {
        match e {
            AppsError::NotFound(id) => ApiError::ObjectNotFound(id),
            e @ AppsError::Corrupt(_) => ApiError::fault("reading an app", e),
            AppsError::Cluster(e) => e.into(),
            AppsError::Password(e) => e.into(),
            e @ AppsError::Secrets(_) => ApiError::fault("opening an app's secrets", e),
        }
    }
}

impl From<AuthDataError> for ApiError {
    fn from(e: AuthDataError) -> Self {
        ApiError::InvalidBody(e.0)
    }
}

impl From<VerifyError> for ApiError {
    fn from(e: VerifyError) -> Self {
        let m = e.to_string();
        match e {
            VerifyError::Rejected { .. } => ApiError::AuthDataRejected(m),
            VerifyError::NotConfigured { .. } => ApiError::AuthDataUnverifiable(m),
            VerifyError::Unreachable { .. } => ApiError::Unavailable(m),
        }
    }
}

impl From<UsersError> for ApiError {
    fn from(e: UsersError) -> Self {
        let m = e.to_string();
        match e {
            UsersError::UsernameTaken(_) => ApiError::UsernameTaken(m),
            UsersError::EmailTaken(_) => ApiError::EmailTaken(m),
            UsersError::PhoneTaken(_) => ApiError::PhoneTaken(m),
            UsersError::RoleNameTaken(_) => ApiError::InvalidRole(m),
            UsersError::AuthDataTaken(_) => ApiError::AuthDataTaken(m),
            UsersError::InstallationTaken(..) => ApiError::Duplicate(m),
            UsersError::UserNotFound(id) => ApiError::ObjectNotFound(id),
            UsersError::LoginFailed => ApiError::LoginFailed,
            UsersError::MissingCredentials(m) => ApiError::MissingCredentials(m),
            UsersError::MissingLoginData(m) => ApiError::MissingLoginData(m),
            UsersError::InvalidField(m) => ApiError::InvalidBody(m),
            UsersError::ServiceField(f) => ApiError::ReservedKey(f),
            UsersError::SessionRequired => ApiError::SessionRequired,
            UsersError::WrongOldPassword => ApiError::WrongOldPassword,
            UsersError::ProtectedQuery(m) => ApiError::InvalidQuery(m),
            UsersError::Mail(m) => ApiError::Unavailable(m),
            e @ (UsersError::Encoding { .. } | UsersError::Unexpected(_)) => {
                ApiError::fault("users", e)
            }
            UsersError::AuthData(e) => e.into(),
            UsersError::Verify(e) => e.into(),
            UsersError::Password(e) => e.into(),
            UsersError::Sms(e) => e.into(),
            UsersError::Throttle(e) => e.into(),
            UsersError::CaptchaRequired => ApiError::CaptchaRequired,
            UsersError::Cluster(e) => e.into(),
        }
    }
}

impl From<crate::realtime::RealtimeError> for ApiError {
    fn from(e: crate::realtime::RealtimeError) -> Self {
        use crate::realtime::RealtimeError;
        match e {
            RealtimeError::InvalidMessage(m) => ApiError::InvalidBody(m),
            RealtimeError::InvalidWhere(m) => ApiError::InvalidQuery(m),
            RealtimeError::InvalidClassName(c) => ApiError::InvalidClassName(c),
            RealtimeError::Unauthorized(why) => {
                tracing::debug!(reason = why, "realtime: unauthorized");
                ApiError::Unauthorized
            }
            RealtimeError::AppDisabled => ApiError::AppDisabled,
            RealtimeError::Unavailable(m) => ApiError::Unavailable(m),
            RealtimeError::Users(e) => e.into(),
            RealtimeError::Apps(e) => e.into(),
        }
    }
}

impl From<SmsError> for ApiError {
    fn from(e: SmsError) -> Self {
        match e {
            SmsError::InvalidParams(m) => ApiError::InvalidBody(m),
            SmsError::UnknownTemplate(name) => ApiError::UnknownTemplate(name),
            SmsError::CaptchaRequired => ApiError::CaptchaRequired,
            SmsError::Limit(why) => ApiError::SmsLimit(why),
            SmsError::WrongCode => ApiError::WrongSmsCode,
            SmsError::UnknownMessage(id) => ApiError::ObjectNotFound(format!("sms {id}")),
            e @ (SmsError::Record(_) | SmsError::NoFreeId) => ApiError::fault("sms", e),
            SmsError::Captcha(e) => e.into(),
            SmsError::Cluster(e) => e.into(),
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unauthorized(_) => ApiError::Unauthorized,
            AuthError::MasterKeyRequired => ApiError::MasterKeyRequired,
            AuthError::Apps(e) => e.into(),
            AuthError::Cluster(e) => e.into(),
        }
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::Invalid(m) => ApiError::InvalidQuery(m),
            QueryError::Users(e) => e.into(),
            QueryError::Cluster(e) => e.into(),
        }
    }
}

impl From<SchemaError> for ApiError {
    fn from(e: SchemaError) -> Self {
        let m = e.to_string();
        match e {
            SchemaError::TypeMismatch(_) => ApiError::TypeMismatch(m),
            SchemaError::ClassNotFound(_) => ApiError::ClassNotFound(m),
            SchemaError::ClassCreationNotAllowed(_) => ApiError::ClassCreationNotAllowed(m),
            SchemaError::ClassExists(_) => ApiError::ClassExists(m),
            SchemaError::ClassNameMismatch(_) => ApiError::ClassNameMismatch(m),
            SchemaError::ReservedField(_) => ApiError::ReservedColumn(m),
            SchemaError::FieldExists(_) => ApiError::ColumnExists(m),
            SchemaError::MissingTargetClass(_) => ApiError::TargetClassRequired(m),
            SchemaError::TargetClassMissing(..) => ApiError::TargetClassMissing(m),
            SchemaError::UnknownType(..) => ApiError::UnknownColumnType(m),
            SchemaError::UnknownField(_) => ApiError::UnknownColumn(m),
            SchemaError::BuiltInColumn(..) => ApiError::BuiltInColumn(m),
            SchemaError::TooManyColumns(_) => ApiError::TooManyColumns(m),
            SchemaError::Invalid(_) => ApiError::InvalidBody(m),
        }
    }
}

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
            ApiError::Unauthorized => json!({"error": "unauthorized"}),
            ApiError::Internal(fault) => {
                tracing::error!(cause = %fault.chain(), "internal error");
                json!({"code": self.code(), "error": BUSY_MESSAGE})
            }
            ApiError::Unavailable(cause)
            | ApiError::Timeout(cause)
            | ApiError::Overloaded(cause) => {
                tracing::warn!(cause = %cause, "{self}");
                json!({"code": self.code(), "error": self.to_string()})
            }
            ApiError::FilesNotDeleted(fail) => {
                json!({"code": self.code(), "error": self.to_string(), "fail": fail})
            }
            other => json!({"code": other.code(), "error": capped(other.to_string())}),
        };
        let mut resp = (status, axum::Json(body)).into_response();
        resp.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        if let ApiError::Throttled {
            retry_after_secs: s,
            ..
        }
        | ApiError::ConsoleThrottled {
            retry_after_secs: s,
        }
        | ApiError::AppRateExceeded {
            retry_after_secs: s,
            ..
        } = &self
        {
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from(*s));
        }
        if let ApiError::Overloaded(_) = &self {
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from(1u64));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant's index: exhaustive, so a new variant does not compile until it has one
    /// (and `VARIANTS` grows, and the table below gets its row).
    fn variant_index(e: &ApiError) -> usize {
        match e {
            ApiError::Unauthorized => 0,
            ApiError::ObjectNotFound(_) => 1,
            ApiError::InvalidQuery(_) => 2,
            ApiError::InvalidClassName(_) => 3,
            ApiError::InvalidKey(_) => 4,
            ApiError::ReservedKey(_) => 5,
            ApiError::InvalidPointer(_) => 6,
            ApiError::InvalidBody(_) => 7,
            ApiError::EmptyBody => 8,
            ApiError::BodyTooLarge(_) => 9,
            ApiError::BodyTimeout(_) => 10,
            ApiError::TypeMismatch(_) => 11,
            ApiError::InvalidGeoPoint(_) => 12,
            ApiError::Duplicate(_) => 13,
            ApiError::ClassNotFound(_) => 14,
            ApiError::ClassExists(_) => 15,
            ApiError::ClassCreationNotAllowed(_) => 16,
            ApiError::BatchNotArray => 17,
            ApiError::BatchInvalidRequest(_) => 18,
            ApiError::BatchTooLarge(_) => 19,
            ApiError::AppDisabled => 20,
            ApiError::LoginFailed => 21,
            ApiError::MissingCredentials(_) => 22,
            ApiError::MissingLoginData(_) => 23,
            ApiError::UsernameTaken(_) => 24,
            ApiError::EmailTaken(_) => 25,
            ApiError::PhoneTaken(_) => 26,
            ApiError::SessionRequired => 27,
            ApiError::WrongOldPassword => 28,
            ApiError::InvalidRole(_) => 29,
            ApiError::AuthDataTaken(_) => 30,
            ApiError::AuthDataRejected(_) => 31,
            ApiError::AuthDataUnverifiable(_) => 32,
            ApiError::EmailVerifyOff => 33,
            ApiError::EmailNotFound(_) => 34,
            ApiError::WrongSmsCode => 35,
            ApiError::SmsLimit(_) => 36,
            ApiError::UnknownTemplate(_) => 37,
            ApiError::CaptchaFailed => 38,
            ApiError::CaptchaRequired => 39,
            ApiError::AppNameTooLong => 40,
            ApiError::MasterKeyRequired => 41,
            ApiError::ClassNameMismatch(_) => 42,
            ApiError::ReservedColumn(_) => 43,
            ApiError::ColumnExists(_) => 44,
            ApiError::TargetClassRequired(_) => 45,
            ApiError::TargetClassMissing(_) => 46,
            ApiError::UnknownColumnType(_) => 47,
            ApiError::UnknownColumn(_) => 48,
            ApiError::BuiltInColumn(_) => 49,
            ApiError::TooManyColumns(_) => 50,
            ApiError::Bql(_) => 51,
            ApiError::Throttled { .. } => 52,
            ApiError::ConsoleThrottled { .. } => 53,
            ApiError::OriginNotAllowed(_) => 54,
            ApiError::RouteNotFound => 55,
            ApiError::MethodNotAllowed => 56,
            ApiError::Unavailable(_) => 57,
            ApiError::Timeout(_) => 58,
            ApiError::Internal(_) => 59,
            ApiError::Overloaded(_) => 60,
            ApiError::FileNameInvalid(_) => 61,
            ApiError::FileEmpty => 62,
            ApiError::FileTooLarge(_) => 63,
            ApiError::FileNotFound(_) => 64,
            ApiError::FilesNotDeleted(_) => 65,
            ApiError::ImageInvalid(_) => 66,
            ApiError::ImageMode(_) => 67,
            ApiError::ImageWidth(_) => 68,
            ApiError::ImageHeight(_) => 69,
            ApiError::ImageLongEdge(_) => 70,
            ApiError::ImageShortEdge(_) => 71,
            ApiError::NoVideoFrame(_) => 72,
            ApiError::NoFfmpeg(_) => 73,
            ApiError::FilePrivate(_) => 74,
            ApiError::FileSessionRequired(_) => 75,
            ApiError::InvalidInstallation(_) => 76,
            ApiError::ReadOnlyField(_) => 77,
            ApiError::PushDataMissing(_) => 78,
            ApiError::PushBadTime(_) => 79,
            ApiError::PushBadInterval(_) => 80,
            ApiError::PushTimePast(_) => 81,
            ApiError::FunctionNotFound(_) => 82,
            ApiError::FunctionFailed(_) => 83,
            ApiError::ThrownWithCode { .. } => 84,
            ApiError::UploadTooSlow(_) => 85,
            ApiError::AppRateExceeded { .. } => 86,
            ApiError::InsufficientStorage(_) => 87,
            ApiError::StorageQuotaExceeded(_) => 88,
        }
    }

    const VARIANTS: usize = 89;

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
            (ApiError::BodyTimeout(1), 408, 107),
            (ApiError::UploadTooSlow(16), 408, 107),
            (ApiError::InsufficientStorage("full".into()), 507, 10081),
            (ApiError::StorageQuotaExceeded("over".into()), 400, 10082),
            (
                ApiError::AppRateExceeded {
                    per_second: 5,
                    retry_after_secs: 1,
                },
                429,
                10077,
            ),
            (ApiError::TypeMismatch("x".into()), 400, 111),
            (ApiError::InvalidGeoPoint("x".into()), 400, 117),
            (ApiError::Duplicate("x".into()), 400, 137),
            (ApiError::ClassNotFound("x".into()), 400, 104),
            (ApiError::ClassExists("x".into()), 400, 103),
            (ApiError::ClassCreationNotAllowed("x".into()), 400, 302),
            (ApiError::BatchNotArray, 400, 112),
            (ApiError::BatchInvalidRequest("x".into()), 400, 113),
            (ApiError::BatchTooLarge(50), 400, 114),
            (ApiError::Bql("x at position 3".into()), 400, 601),
            (ApiError::AppDisabled, 400, 10008),
            (ApiError::LoginFailed, 404, 101),
            (ApiError::MissingCredentials("x".into()), 400, 108),
            (ApiError::MissingLoginData("x".into()), 400, 109),
            (ApiError::UsernameTaken("x".into()), 400, 202),
            (ApiError::EmailTaken("x".into()), 400, 203),
            (ApiError::PhoneTaken("x".into()), 400, 209),
            (ApiError::SessionRequired, 400, 206),
            (ApiError::WrongOldPassword, 400, 210),
            (ApiError::InvalidRole("x".into()), 400, 139),
            (ApiError::AuthDataTaken("x".into()), 400, 208),
            (ApiError::AuthDataRejected("x".into()), 400, 251),
            (ApiError::AuthDataUnverifiable("x".into()), 400, 252),
            (ApiError::EmailVerifyOff, 400, 120),
            (ApiError::EmailNotFound("x".into()), 400, 205),
            (ApiError::WrongSmsCode, 400, 207),
            (ApiError::SmsLimit("x".into()), 400, 10010),
            (ApiError::UnknownTemplate("x".into()), 400, 10022),
            (ApiError::CaptchaFailed, 400, 10023),
            (ApiError::CaptchaRequired, 400, 10024),
            (ApiError::AppNameTooLong, 400, 10032),
            (ApiError::MasterKeyRequired, 400, 10061),
            (ApiError::ClassNameMismatch("x".into()), 400, 10062),
            (ApiError::ReservedColumn("x".into()), 400, 10063),
            (ApiError::ColumnExists("x".into()), 400, 10064),
            (ApiError::TargetClassRequired("x".into()), 400, 10065),
            (ApiError::TargetClassMissing("x".into()), 400, 10066),
            (ApiError::UnknownColumnType("x".into()), 400, 10069),
            (ApiError::UnknownColumn("x".into()), 400, 10071),
            (ApiError::BuiltInColumn("x".into()), 400, 10073),
            (ApiError::TooManyColumns("x".into()), 400, 10074),
            (
                ApiError::Throttled {
                    what: "x".into(),
                    retry_after_secs: 1,
                },
                429,
                10076,
            ),
            (
                ApiError::ConsoleThrottled {
                    retry_after_secs: 1,
                },
                429,
                10210,
            ),
            (ApiError::OriginNotAllowed("x".into()), 403, 403),
            (ApiError::RouteNotFound, 404, 404),
            (ApiError::MethodNotAllowed, 405, 405),
            (ApiError::Unavailable("x".into()), 503, 503),
            (ApiError::Overloaded("x".into()), 503, 503),
            (ApiError::Timeout("x".into()), 503, 503),
            (ApiError::internal("x"), 500, 500),
            (ApiError::FileNameInvalid("x".into()), 400, 146),
            (ApiError::FileEmpty, 400, 149),
            (ApiError::FileNotFound("x".into()), 400, 151),
            (ApiError::FilesNotDeleted(serde_json::json!({})), 400, 154),
            (ApiError::FileTooLarge(1), 400, 1500),
            (ApiError::FunctionNotFound("x".into()), 404, 311),
            (ApiError::FunctionFailed("x".into()), 400, 310),
            (
                ApiError::ThrownWithCode {
                    code: 142,
                    message: "x".into(),
                },
                400,
                142,
            ),
            (ApiError::ImageInvalid("x".into()), 400, 160),
            (ApiError::ImageMode("x".into()), 400, 161),
            (ApiError::ImageWidth("x".into()), 400, 162),
            (ApiError::ImageHeight("x".into()), 400, 163),
            (ApiError::ImageLongEdge("x".into()), 400, 164),
            (ApiError::ImageShortEdge("x".into()), 400, 165),
            (ApiError::NoVideoFrame("x".into()), 400, 155),
            (ApiError::NoFfmpeg("x".into()), 501, 156),
            (ApiError::FilePrivate("x".into()), 403, 403),
            (ApiError::InvalidInstallation("x".into()), 400, 131),
            (ApiError::ReadOnlyField("x".into()), 400, 136),
            (ApiError::PushDataMissing("x".into()), 400, 141),
            (ApiError::PushBadTime("x".into()), 400, 142),
            (ApiError::PushBadInterval("x".into()), 400, 143),
            (ApiError::PushTimePast("x".into()), 400, 144),
            (ApiError::FileSessionRequired("x".into()), 400, 206),
        ];
        let mut covered = [false; VARIANTS];
        for (e, status, code) in table {
            assert_eq!((e.status().as_u16(), e.code()), (status, code), "{e:?}");
            covered[variant_index(&e)] = true;
        }
        let missing: Vec<usize> = (0..VARIANTS).filter(|i| !covered[*i]).collect();
        assert!(missing.is_empty(), "variants without a row: {missing:?}");
    }

    #[test]
    fn internal_faults_keep_their_cause_for_the_log_only() {
        let cause = ClusterError::Storage("disk gone".into());
        let e = ApiError::fault("reading a user", cause);
        let ApiError::Internal(fault) = &e else {
            panic!("not internal: {e:?}");
        };
        assert_eq!(fault.chain(), "reading a user: storage error: disk gone");
        assert!(std::error::Error::source(fault).is_some());
        assert_eq!(ApiError::internal("x").to_string(), "internal: x");
        let from_cluster = ApiError::from(ClusterError::Internal("bad state".into()));
        let ApiError::Internal(fault) = &from_cluster else {
            panic!("not internal: {from_cluster:?}");
        };
        assert!(fault.chain().ends_with("bad state"), "{}", fault.chain());
        let resp = e.into_response();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn schema_refusals_map_to_their_codes() {
        let cases = [
            (SchemaError::TypeMismatch("x".into()), 111),
            (SchemaError::ClassNotFound("x".into()), 104),
            (SchemaError::ClassCreationNotAllowed("x".into()), 302),
            (SchemaError::ClassNameMismatch("x".into()), 10062),
            (SchemaError::ReservedField("x".into()), 10063),
            (SchemaError::FieldExists("x".into()), 10064),
            (SchemaError::MissingTargetClass("x".into()), 10065),
            (
                SchemaError::TargetClassMissing("x".into(), "y".into()),
                10066,
            ),
            (SchemaError::UnknownType("x".into(), "y".into()), 10069),
            (SchemaError::UnknownField("x".into()), 10071),
            (
                SchemaError::BuiltInColumn("x".into(), "_User".into()),
                10073,
            ),
            (SchemaError::TooManyColumns("x".into()), 10074),
        ];
        for (e, code) in cases {
            assert_eq!(
                ApiError::from(ClusterError::Schema(e.clone())).code(),
                code,
                "{e:?}"
            );
        }
    }

    /// The features' own errors reach the wire with their documented codes.
    #[test]
    fn feature_errors_map_to_their_codes() {
        let cases: Vec<(ApiError, u16, u32)> = vec![
            (UsersError::UsernameTaken("x".into()).into(), 400, 202),
            (UsersError::EmailTaken("x".into()).into(), 400, 203),
            (UsersError::PhoneTaken("x".into()).into(), 400, 209),
            (UsersError::RoleNameTaken("x".into()).into(), 400, 139),
            (UsersError::AuthDataTaken("weixin").into(), 400, 208),
            (UsersError::UserNotFound("x".into()).into(), 404, 101),
            (UsersError::LoginFailed.into(), 404, 101),
            (UsersError::MissingCredentials("x".into()).into(), 400, 108),
            (UsersError::MissingLoginData("x".into()).into(), 400, 109),
            (UsersError::InvalidField("x".into()).into(), 400, 107),
            (UsersError::ServiceField("x".into()).into(), 400, 105),
            (UsersError::SessionRequired.into(), 400, 206),
            (UsersError::WrongOldPassword.into(), 400, 210),
            (UsersError::ProtectedQuery("x".into()).into(), 400, 102),
            (UsersError::Mail("x".into()).into(), 503, 503),
            (UsersError::Unexpected("x").into(), 500, 500),
            (
                UsersError::AuthData(AuthDataError("x".into())).into(),
                400,
                107,
            ),
            (UsersError::Sms(SmsError::WrongCode).into(), 400, 207),
            (SmsError::InvalidParams("x".into()).into(), 400, 107),
            (SmsError::UnknownTemplate("x".into()).into(), 400, 10022),
            (SmsError::CaptchaRequired.into(), 400, 10024),
            (SmsError::Limit("x".into()).into(), 400, 10010),
            (SmsError::WrongCode.into(), 400, 207),
            (SmsError::UnknownMessage("1".into()).into(), 404, 101),
            (SmsError::NoFreeId.into(), 500, 500),
            (SmsError::Captcha(CaptchaError::Failed).into(), 400, 10023),
            (AuthError::Unauthorized("x").into(), 401, 0),
            (AuthError::MasterKeyRequired.into(), 400, 10061),
            (
                AuthError::Cluster(ClusterError::Unavailable("x".into())).into(),
                503,
                503,
            ),
            (QueryError::Invalid("x".into()).into(), 400, 102),
            (
                QueryError::from_cluster(ClusterError::InvalidValue("x".into())).into(),
                400,
                102,
            ),
            (
                QueryError::Users(UsersError::ProtectedQuery("x".into())).into(),
                400,
                102,
            ),
        ];
        for (e, status, code) in cases {
            assert_eq!((e.status().as_u16(), e.code()), (status, code), "{e:?}");
        }
    }

    #[test]
    fn messages_never_echo_huge_input_or_internals() {
        let huge = ApiError::InvalidKey(format!("invalid field name {}", "k".repeat(100_000)));
        let m = capped(huge.to_string());
        assert!(m.chars().count() <= MAX_MESSAGE_CHARS + 1, "{}", m.len());
        let e = ApiError::from(ClusterError::Unavailable(
            "when Read Logs: std::io::error::Error".into(),
        ));
        assert_eq!(
            e.to_string(),
            "the service is unavailable, try again later."
        );
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
