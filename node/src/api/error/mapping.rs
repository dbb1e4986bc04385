//! The features' own errors as the API answers them: each `From` here says which common or
//! family error a feature's condition is (a cluster refusal, a user that is taken, a file too
//! large, a function that threw), once; the families say the status and code.

use basalt_cluster::schema::SchemaError;
use basalt_cluster::Error as ClusterError;

use super::{
    ApiError, CommonError, FilesApiError, FunctionsApiError, ObjectsApiError, PushApiError,
    SchemasApiError, SmsApiError, UsersApiError,
};
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

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::ObjectNotFound => {
                ApiError::from(CommonError::ObjectNotFound(String::new()))
            }
            ClusterError::InvalidKey(m) => ApiError::from(ObjectsApiError::InvalidKey(m)),
            ClusterError::ReservedKey(m) => ApiError::from(ObjectsApiError::ReservedKey(m)),
            ClusterError::InvalidValue(m) => ApiError::from(CommonError::InvalidBody(m)),
            ClusterError::TypeMismatch(m) => ApiError::from(ObjectsApiError::TypeMismatch(m)),
            ClusterError::InvalidPointer(m) => ApiError::from(ObjectsApiError::InvalidPointer(m)),
            ClusterError::InvalidGeoPoint(m) => ApiError::from(ObjectsApiError::InvalidGeoPoint(m)),
            ClusterError::InvalidClassName(m) => {
                ApiError::from(ObjectsApiError::InvalidClassName(m))
            }
            ClusterError::Conflict(m) => ApiError::from(ObjectsApiError::Duplicate(m)),
            // Every `take_quota` caller answers its own refusal (SMS limits, throttles).
            e @ ClusterError::QuotaExceeded(_) => {
                ApiError::fault("a quota refusal left unanswered", e)
            }
            ClusterError::Unavailable(m) | ClusterError::PeerUnreachable(m) => {
                ApiError::from(CommonError::Unavailable(m))
            }
            ClusterError::NotLeader { group, .. } => ApiError::from(CommonError::Unavailable(
                format!("group {group} is electing a leader"),
            )),
            ClusterError::Timeout(m) => ApiError::from(CommonError::Timeout(m)),
            e @ ClusterError::Moved { .. } => {
                ApiError::from(CommonError::Unavailable(format!("{e}: try again")))
            }
            ClusterError::Overloaded(m) => ApiError::from(CommonError::Overloaded(m)),
            e @ ClusterError::DiskFull(_) => {
                ApiError::from(CommonError::InsufficientStorage(e.to_string()))
            }
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
            e @ FunctionsError::NotFound(_) => {
                ApiError::from(FunctionsApiError::FunctionNotFound(e.to_string()))
            }
            FunctionsError::Invalid(m) => ApiError::from(CommonError::InvalidBody(m)),
            e @ FunctionsError::Contended(_) => {
                ApiError::from(CommonError::Unavailable(e.to_string()))
            }
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
        Some(code) if code > 0 => ApiError::from(FunctionsApiError::ThrownWithCode {
            code,
            message: t.message,
        }),
        _ => ran(RunError::Thrown(t)),
    }
}

/// A function that gave no result: no slot (503), the engine's own failure (500), else 310.
fn ran(e: RunError) -> ApiError {
    match e {
        RunError::Busy => ApiError::from(CommonError::Unavailable(e.to_string())),
        e @ RunError::Engine(_) => ApiError::fault("running a function", e),
        e => ApiError::from(FunctionsApiError::FunctionFailed(e.to_string())),
    }
}

impl From<PushError> for ApiError {
    fn from(e: PushError) -> Self {
        match e {
            PushError::Cluster(e) => e.into(),
            PushError::Apps(e) => e.into(),
            PushError::Query(m) => ApiError::from(ObjectsApiError::InvalidQuery(m)),
            e @ (PushError::Lost | PushError::Corrupt(_)) => ApiError::fault("push", e),
        }
    }
}

impl From<PushRequestError> for ApiError {
    fn from(e: PushRequestError) -> Self {
        let m = e.to_string();
        match e {
            PushRequestError::MissingData => ApiError::from(PushApiError::PushDataMissing(m)),
            PushRequestError::BadTime(_) => ApiError::from(PushApiError::PushBadTime(m)),
            PushRequestError::BadInterval => ApiError::from(PushApiError::PushBadInterval(m)),
            PushRequestError::Past(_) => ApiError::from(PushApiError::PushTimePast(m)),
            PushRequestError::BadWhere(_) => ApiError::from(ObjectsApiError::InvalidQuery(m)),
            PushRequestError::BadBody(_) => ApiError::from(CommonError::InvalidBody(m)),
        }
    }
}

impl From<InstallationError> for ApiError {
    fn from(e: InstallationError) -> Self {
        let m = e.to_string();
        match e {
            InstallationError::Invalid(_) => ApiError::from(PushApiError::InvalidInstallation(m)),
            InstallationError::ReadOnly(_) => ApiError::from(PushApiError::ReadOnlyField(m)),
        }
    }
}

impl From<crate::storage_quota::QuotaError> for ApiError {
    fn from(e: crate::storage_quota::QuotaError) -> Self {
        match e {
            e @ crate::storage_quota::QuotaError::Exceeded { .. } => {
                ApiError::from(CommonError::StorageQuotaExceeded(e.to_string()))
            }
            crate::storage_quota::QuotaError::Cluster(e) => e.into(),
        }
    }
}

impl From<FilesError> for ApiError {
    fn from(e: FilesError) -> Self {
        match e {
            e @ (FilesError::NoExtension(_) | FilesError::BadName(_)) => {
                ApiError::from(FilesApiError::FileNameInvalid(e.to_string()))
            }
            FilesError::Empty => ApiError::from(FilesApiError::FileEmpty),
            FilesError::TooLarge(max) => ApiError::from(FilesApiError::FileTooLarge(max)),
            e @ FilesError::NotFound(_) => {
                ApiError::from(FilesApiError::FileNotFound(e.to_string()))
            }
            FilesError::BadBody(m) => ApiError::from(CommonError::InvalidBody(m)),
            FilesError::Stalled(secs) => ApiError::from(CommonError::BodyTimeout(secs)),
            FilesError::TooSlow(kib) => ApiError::from(CommonError::UploadTooSlow(kib)),
            FilesError::BadSignature => ApiError::from(CommonError::Unauthorized),
            FilesError::DeleteNeedsMaster => ApiError::from(CommonError::MasterKeyRequired),
            e @ FilesError::DeleteNeedsSession => {
                ApiError::from(FilesApiError::FileSessionRequired(e.to_string()))
            }
            e @ FilesError::Session(_) => ApiError::fault("checking a session", e),
            e @ FilesError::Private(_) => ApiError::from(FilesApiError::FilePrivate(e.to_string())),
            FilesError::Cluster(e) => e.into(),
            FilesError::Quota(e) => e.into(),
            FilesError::NoSuchUrl => ApiError::from(CommonError::RouteNotFound),
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
            ImageError::Mode(m) => ApiError::from(FilesApiError::ImageMode(m)),
            ImageError::Width(m) => ApiError::from(FilesApiError::ImageWidth(m)),
            ImageError::Height(m) => ApiError::from(FilesApiError::ImageHeight(m)),
            ImageError::LongEdge(m) => ApiError::from(FilesApiError::ImageLongEdge(m)),
            ImageError::ShortEdge(m) => ApiError::from(FilesApiError::ImageShortEdge(m)),
            e @ (ImageError::Invalid(_)
            | ImageError::NotAnImage(_)
            | ImageError::TooLarge(_)
            | ImageError::MarkNotFound(_)
            | ImageError::NoFont
            | ImageError::Encode(_)) => ApiError::from(FilesApiError::ImageInvalid(e.to_string())),
            e @ ImageError::Busy => ApiError::from(CommonError::Unavailable(e.to_string())),
            e @ ImageError::Worker(_) => ApiError::fault("image processing", e),
            ImageError::Cluster(e) => e.into(),
        }
    }
}

impl From<SnapshotError> for ApiError {
    fn from(e: SnapshotError) -> Self {
        match e {
            SnapshotError::BadRequest(m) => ApiError::from(CommonError::InvalidBody(m)),
            e @ SnapshotError::BadName(_) => {
                ApiError::from(FilesApiError::FileNameInvalid(e.to_string()))
            }
            e @ SnapshotError::NoFrame(_) => {
                ApiError::from(FilesApiError::NoVideoFrame(e.to_string()))
            }
            e @ SnapshotError::NoFfmpeg(_) => {
                ApiError::from(FilesApiError::NoFfmpeg(e.to_string()))
            }
            SnapshotError::TooLarge(m) => ApiError::from(FilesApiError::ImageInvalid(m)),
            SnapshotError::Busy(m) => ApiError::from(CommonError::Unavailable(m)),
            e @ SnapshotError::Io(_) => ApiError::fault("video snapshot", e),
            SnapshotError::Files(e) => e.into(),
        }
    }
}

impl From<CaptchaError> for ApiError {
    fn from(e: CaptchaError) -> Self {
        match e {
            CaptchaError::InvalidParams(m) => ApiError::from(CommonError::InvalidBody(m)),
            CaptchaError::Failed => ApiError::from(SmsApiError::CaptchaFailed),
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
            } => ApiError::from(CommonError::Throttled {
                what,
                retry_after_secs,
            }),
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
            AppsError::NotFound(id) => ApiError::from(CommonError::ObjectNotFound(id)),
            e @ AppsError::Corrupt(_) => ApiError::fault("reading an app", e),
            AppsError::Cluster(e) => e.into(),
            AppsError::Password(e) => e.into(),
            e @ AppsError::Secrets(_) => ApiError::fault("opening an app's secrets", e),
        }
    }
}

impl From<AuthDataError> for ApiError {
    fn from(e: AuthDataError) -> Self {
        ApiError::from(CommonError::InvalidBody(e.0))
    }
}

impl From<VerifyError> for ApiError {
    fn from(e: VerifyError) -> Self {
        let m = e.to_string();
        match e {
            VerifyError::Rejected { .. } => ApiError::from(UsersApiError::AuthDataRejected(m)),
            VerifyError::NotConfigured { .. } => {
                ApiError::from(UsersApiError::AuthDataUnverifiable(m))
            }
            VerifyError::Unreachable { .. } => ApiError::from(CommonError::Unavailable(m)),
        }
    }
}

impl From<UsersError> for ApiError {
    fn from(e: UsersError) -> Self {
        let m = e.to_string();
        match e {
            UsersError::UsernameTaken(_) => ApiError::from(UsersApiError::UsernameTaken(m)),
            UsersError::EmailTaken(_) => ApiError::from(UsersApiError::EmailTaken(m)),
            UsersError::PhoneTaken(_) => ApiError::from(UsersApiError::PhoneTaken(m)),
            UsersError::RoleNameTaken(_) => ApiError::from(UsersApiError::InvalidRole(m)),
            UsersError::AuthDataTaken(_) => ApiError::from(UsersApiError::AuthDataTaken(m)),
            UsersError::InstallationTaken(..) => ApiError::from(ObjectsApiError::Duplicate(m)),
            UsersError::UserNotFound(id) => ApiError::from(CommonError::ObjectNotFound(id)),
            UsersError::LoginFailed => ApiError::from(UsersApiError::LoginFailed),
            UsersError::MissingCredentials(m) => {
                ApiError::from(UsersApiError::MissingCredentials(m))
            }
            UsersError::MissingLoginData(m) => ApiError::from(UsersApiError::MissingLoginData(m)),
            UsersError::InvalidField(m) => ApiError::from(CommonError::InvalidBody(m)),
            UsersError::ServiceField(f) => ApiError::from(ObjectsApiError::ReservedKey(f)),
            UsersError::SessionRequired => ApiError::from(UsersApiError::SessionRequired),
            UsersError::WrongOldPassword => ApiError::from(UsersApiError::WrongOldPassword),
            UsersError::ProtectedQuery(m) => ApiError::from(ObjectsApiError::InvalidQuery(m)),
            UsersError::Mail(m) => ApiError::from(CommonError::Unavailable(m)),
            e @ (UsersError::Encoding { .. } | UsersError::Unexpected(_)) => {
                ApiError::fault("users", e)
            }
            UsersError::AuthData(e) => e.into(),
            UsersError::Verify(e) => e.into(),
            UsersError::Password(e) => e.into(),
            UsersError::Sms(e) => e.into(),
            UsersError::Throttle(e) => e.into(),
            UsersError::CaptchaRequired => ApiError::from(SmsApiError::CaptchaRequired),
            UsersError::Cluster(e) => e.into(),
        }
    }
}

impl From<crate::realtime::RealtimeError> for ApiError {
    fn from(e: crate::realtime::RealtimeError) -> Self {
        use crate::realtime::RealtimeError;
        match e {
            RealtimeError::InvalidMessage(m) => ApiError::from(CommonError::InvalidBody(m)),
            RealtimeError::InvalidWhere(m) => ApiError::from(ObjectsApiError::InvalidQuery(m)),
            RealtimeError::InvalidClassName(c) => {
                ApiError::from(ObjectsApiError::InvalidClassName(c))
            }
            RealtimeError::Unauthorized(why) => {
                tracing::debug!(reason = why, "realtime: unauthorized");
                ApiError::from(CommonError::Unauthorized)
            }
            RealtimeError::AppDisabled => ApiError::from(CommonError::AppDisabled),
            RealtimeError::Unavailable(m) => ApiError::from(CommonError::Unavailable(m)),
            RealtimeError::Users(e) => e.into(),
            RealtimeError::Apps(e) => e.into(),
        }
    }
}

impl From<SmsError> for ApiError {
    fn from(e: SmsError) -> Self {
        match e {
            SmsError::InvalidParams(m) => ApiError::from(CommonError::InvalidBody(m)),
            SmsError::UnknownTemplate(name) => ApiError::from(SmsApiError::UnknownTemplate(name)),
            SmsError::CaptchaRequired => ApiError::from(SmsApiError::CaptchaRequired),
            SmsError::Limit(why) => ApiError::from(SmsApiError::SmsLimit(why)),
            SmsError::WrongCode => ApiError::from(SmsApiError::WrongSmsCode),
            SmsError::UnknownMessage(id) => {
                ApiError::from(CommonError::ObjectNotFound(format!("sms {id}")))
            }
            e @ (SmsError::Record(_) | SmsError::NoFreeId) => ApiError::fault("sms", e),
            SmsError::Captcha(e) => e.into(),
            SmsError::Cluster(e) => e.into(),
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unauthorized(_) => ApiError::from(CommonError::Unauthorized),
            AuthError::MasterKeyRequired => ApiError::from(CommonError::MasterKeyRequired),
            AuthError::Apps(e) => e.into(),
            AuthError::Cluster(e) => e.into(),
        }
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::Invalid(m) => ApiError::from(ObjectsApiError::InvalidQuery(m)),
            QueryError::Users(e) => e.into(),
            QueryError::Cluster(e) => e.into(),
        }
    }
}

impl From<SchemaError> for ApiError {
    fn from(e: SchemaError) -> Self {
        let m = e.to_string();
        match e {
            SchemaError::TypeMismatch(_) => ApiError::from(ObjectsApiError::TypeMismatch(m)),
            SchemaError::ClassNotFound(_) => ApiError::from(SchemasApiError::ClassNotFound(m)),
            SchemaError::ClassCreationNotAllowed(_) => {
                ApiError::from(SchemasApiError::ClassCreationNotAllowed(m))
            }
            SchemaError::ClassExists(_) => ApiError::from(SchemasApiError::ClassExists(m)),
            SchemaError::ClassNameMismatch(_) => {
                ApiError::from(SchemasApiError::ClassNameMismatch(m))
            }
            SchemaError::ReservedField(_) => ApiError::from(SchemasApiError::ReservedColumn(m)),
            SchemaError::FieldExists(_) => ApiError::from(SchemasApiError::ColumnExists(m)),
            SchemaError::MissingTargetClass(_) => {
                ApiError::from(SchemasApiError::TargetClassRequired(m))
            }
            SchemaError::TargetClassMissing(..) => {
                ApiError::from(SchemasApiError::TargetClassMissing(m))
            }
            SchemaError::UnknownType(..) => ApiError::from(SchemasApiError::UnknownColumnType(m)),
            SchemaError::UnknownField(_) => ApiError::from(SchemasApiError::UnknownColumn(m)),
            SchemaError::BuiltInColumn(..) => ApiError::from(SchemasApiError::BuiltInColumn(m)),
            SchemaError::TooManyColumns(_) => ApiError::from(SchemasApiError::TooManyColumns(m)),
            SchemaError::Invalid(_) => ApiError::from(CommonError::InvalidBody(m)),
        }
    }
}
