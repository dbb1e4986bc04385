//! The error table: every variant of every family with its documented status and code
//! (docs/api.md, "Errors"), and the features' errors as they reach the wire.

use axum::http::StatusCode;
use axum::response::IntoResponse;
use basalt_cluster::schema::SchemaError;
use basalt_cluster::Error as ClusterError;

use super::*;
use crate::auth::AuthError;
use crate::captcha::CaptchaError;
use crate::query::QueryError;
use crate::sms::SmsError;
use crate::users::third_party::AuthDataError;
use crate::users::UsersError;

/// Every variant's index: exhaustive, so a new variant of any family does not compile until it
/// has one (and `VARIANTS` grows, and the table below gets its row).
fn variant_index(e: &ApiError) -> usize {
    match e {
        ApiError::Common(CommonError::Unauthorized) => 0,
        ApiError::Common(CommonError::ObjectNotFound(_)) => 1,
        ApiError::Objects(ObjectsApiError::InvalidQuery(_)) => 2,
        ApiError::Objects(ObjectsApiError::InvalidClassName(_)) => 3,
        ApiError::Objects(ObjectsApiError::InvalidKey(_)) => 4,
        ApiError::Objects(ObjectsApiError::ReservedKey(_)) => 5,
        ApiError::Objects(ObjectsApiError::InvalidPointer(_)) => 6,
        ApiError::Common(CommonError::InvalidBody(_)) => 7,
        ApiError::Common(CommonError::EmptyBody) => 8,
        ApiError::Common(CommonError::BodyTooLarge(_)) => 9,
        ApiError::Common(CommonError::BodyTimeout(_)) => 10,
        ApiError::Common(CommonError::UploadTooSlow(_)) => 11,
        ApiError::Common(CommonError::InsufficientStorage(_)) => 12,
        ApiError::Common(CommonError::StorageQuotaExceeded(_)) => 13,
        ApiError::Common(CommonError::AppRateExceeded { .. }) => 14,
        ApiError::Objects(ObjectsApiError::TypeMismatch(_)) => 15,
        ApiError::Objects(ObjectsApiError::InvalidGeoPoint(_)) => 16,
        ApiError::Objects(ObjectsApiError::Duplicate(_)) => 17,
        ApiError::Push(PushApiError::InvalidInstallation(_)) => 18,
        ApiError::Push(PushApiError::PushDataMissing(_)) => 19,
        ApiError::Push(PushApiError::PushBadTime(_)) => 20,
        ApiError::Push(PushApiError::PushBadInterval(_)) => 21,
        ApiError::Push(PushApiError::PushTimePast(_)) => 22,
        ApiError::Push(PushApiError::ReadOnlyField(_)) => 23,
        ApiError::Schemas(SchemasApiError::ClassNotFound(_)) => 24,
        ApiError::Schemas(SchemasApiError::ClassExists(_)) => 25,
        ApiError::Schemas(SchemasApiError::ClassCreationNotAllowed(_)) => 26,
        ApiError::Objects(ObjectsApiError::BatchNotArray) => 27,
        ApiError::Objects(ObjectsApiError::BatchInvalidRequest(_)) => 28,
        ApiError::Objects(ObjectsApiError::BatchTooLarge(_)) => 29,
        ApiError::Common(CommonError::AppDisabled) => 30,
        ApiError::Users(UsersApiError::LoginFailed) => 31,
        ApiError::Users(UsersApiError::MissingCredentials(_)) => 32,
        ApiError::Users(UsersApiError::MissingLoginData(_)) => 33,
        ApiError::Users(UsersApiError::UsernameTaken(_)) => 34,
        ApiError::Users(UsersApiError::EmailTaken(_)) => 35,
        ApiError::Users(UsersApiError::PhoneTaken(_)) => 36,
        ApiError::Users(UsersApiError::SessionRequired) => 37,
        ApiError::Users(UsersApiError::WrongOldPassword) => 38,
        ApiError::Users(UsersApiError::InvalidRole(_)) => 39,
        ApiError::Users(UsersApiError::AuthDataTaken(_)) => 40,
        ApiError::Users(UsersApiError::AuthDataRejected(_)) => 41,
        ApiError::Users(UsersApiError::AuthDataUnverifiable(_)) => 42,
        ApiError::Users(UsersApiError::EmailVerifyOff) => 43,
        ApiError::Users(UsersApiError::EmailNotFound(_)) => 44,
        ApiError::Sms(SmsApiError::WrongSmsCode) => 45,
        ApiError::Sms(SmsApiError::SmsLimit(_)) => 46,
        ApiError::Sms(SmsApiError::UnknownTemplate(_)) => 47,
        ApiError::Sms(SmsApiError::CaptchaFailed) => 48,
        ApiError::Sms(SmsApiError::CaptchaRequired) => 49,
        ApiError::Apps(AppsApiError::AppNameTooLong) => 50,
        ApiError::Common(CommonError::MasterKeyRequired) => 51,
        ApiError::Schemas(SchemasApiError::ClassNameMismatch(_)) => 52,
        ApiError::Schemas(SchemasApiError::ReservedColumn(_)) => 53,
        ApiError::Schemas(SchemasApiError::ColumnExists(_)) => 54,
        ApiError::Schemas(SchemasApiError::TargetClassRequired(_)) => 55,
        ApiError::Schemas(SchemasApiError::TargetClassMissing(_)) => 56,
        ApiError::Schemas(SchemasApiError::UnknownColumnType(_)) => 57,
        ApiError::Schemas(SchemasApiError::UnknownColumn(_)) => 58,
        ApiError::Schemas(SchemasApiError::BuiltInColumn(_)) => 59,
        ApiError::Schemas(SchemasApiError::TooManyColumns(_)) => 60,
        ApiError::Objects(ObjectsApiError::Bql(_)) => 61,
        ApiError::Common(CommonError::Unavailable(_)) => 62,
        ApiError::Common(CommonError::Timeout(_)) => 63,
        ApiError::Common(CommonError::Overloaded(_)) => 64,
        ApiError::Common(CommonError::Throttled { .. }) => 65,
        ApiError::Common(CommonError::ConsoleThrottled { .. }) => 66,
        ApiError::Common(CommonError::OriginNotAllowed(_)) => 67,
        ApiError::Files(FilesApiError::FileNameInvalid(_)) => 68,
        ApiError::Files(FilesApiError::FileEmpty) => 69,
        ApiError::Files(FilesApiError::FileTooLarge(_)) => 70,
        ApiError::Files(FilesApiError::FileNotFound(_)) => 71,
        ApiError::Files(FilesApiError::FilesNotDeleted(_)) => 72,
        ApiError::Files(FilesApiError::ImageInvalid(_)) => 73,
        ApiError::Files(FilesApiError::ImageMode(_)) => 74,
        ApiError::Files(FilesApiError::ImageWidth(_)) => 75,
        ApiError::Files(FilesApiError::ImageHeight(_)) => 76,
        ApiError::Files(FilesApiError::ImageLongEdge(_)) => 77,
        ApiError::Files(FilesApiError::ImageShortEdge(_)) => 78,
        ApiError::Files(FilesApiError::FileSessionRequired(_)) => 79,
        ApiError::Files(FilesApiError::FilePrivate(_)) => 80,
        ApiError::Files(FilesApiError::NoVideoFrame(_)) => 81,
        ApiError::Files(FilesApiError::NoFfmpeg(_)) => 82,
        ApiError::Functions(FunctionsApiError::FunctionNotFound(_)) => 83,
        ApiError::Functions(FunctionsApiError::FunctionFailed(_)) => 84,
        ApiError::Functions(FunctionsApiError::ThrownWithCode { .. }) => 85,
        ApiError::Common(CommonError::RouteNotFound) => 86,
        ApiError::Common(CommonError::MethodNotAllowed) => 87,
        ApiError::Common(CommonError::Internal(_)) => 88,
        ApiError::Common(CommonError::NoBackupDestination) => 89,
        ApiError::Common(CommonError::BackupRunning(_)) => 90,
    }
}

const VARIANTS: usize = 91;

/// Every variant with its documented status and code (docs/api.md, "Errors").
#[test]
fn error_table() {
    let table: Vec<(ApiError, u16, u32)> = vec![
        (ApiError::from(CommonError::Unauthorized), 401, 0),
        (
            ApiError::from(CommonError::ObjectNotFound("x".into())),
            404,
            101,
        ),
        (
            ApiError::from(ObjectsApiError::InvalidQuery("x".into())),
            400,
            102,
        ),
        (
            ApiError::from(ObjectsApiError::InvalidClassName("x".into())),
            400,
            103,
        ),
        (
            ApiError::from(ObjectsApiError::InvalidKey("x".into())),
            400,
            105,
        ),
        (
            ApiError::from(ObjectsApiError::ReservedKey("x".into())),
            400,
            105,
        ),
        (
            ApiError::from(ObjectsApiError::InvalidPointer("x".into())),
            400,
            106,
        ),
        (
            ApiError::from(CommonError::InvalidBody("x".into())),
            400,
            107,
        ),
        (ApiError::from(CommonError::EmptyBody), 400, 107),
        (ApiError::from(CommonError::BodyTooLarge(1)), 413, 107),
        (ApiError::from(CommonError::BodyTimeout(1)), 408, 107),
        (ApiError::from(CommonError::UploadTooSlow(16)), 408, 107),
        (
            ApiError::from(CommonError::InsufficientStorage("full".into())),
            507,
            10081,
        ),
        (
            ApiError::from(CommonError::StorageQuotaExceeded("over".into())),
            400,
            10082,
        ),
        (
            ApiError::from(CommonError::AppRateExceeded {
                per_second: 5,
                retry_after_secs: 1,
            }),
            429,
            10077,
        ),
        (
            ApiError::from(ObjectsApiError::TypeMismatch("x".into())),
            400,
            111,
        ),
        (
            ApiError::from(ObjectsApiError::InvalidGeoPoint("x".into())),
            400,
            117,
        ),
        (
            ApiError::from(ObjectsApiError::Duplicate("x".into())),
            400,
            137,
        ),
        (
            ApiError::from(SchemasApiError::ClassNotFound("x".into())),
            400,
            104,
        ),
        (
            ApiError::from(SchemasApiError::ClassExists("x".into())),
            400,
            103,
        ),
        (
            ApiError::from(SchemasApiError::ClassCreationNotAllowed("x".into())),
            400,
            302,
        ),
        (ApiError::from(ObjectsApiError::BatchNotArray), 400, 112),
        (
            ApiError::from(ObjectsApiError::BatchInvalidRequest("x".into())),
            400,
            113,
        ),
        (ApiError::from(ObjectsApiError::BatchTooLarge(50)), 400, 114),
        (
            ApiError::from(ObjectsApiError::Bql("x at position 3".into())),
            400,
            601,
        ),
        (ApiError::from(CommonError::AppDisabled), 400, 10008),
        (ApiError::from(UsersApiError::LoginFailed), 404, 101),
        (
            ApiError::from(UsersApiError::MissingCredentials("x".into())),
            400,
            108,
        ),
        (
            ApiError::from(UsersApiError::MissingLoginData("x".into())),
            400,
            109,
        ),
        (
            ApiError::from(UsersApiError::UsernameTaken("x".into())),
            400,
            202,
        ),
        (
            ApiError::from(UsersApiError::EmailTaken("x".into())),
            400,
            203,
        ),
        (
            ApiError::from(UsersApiError::PhoneTaken("x".into())),
            400,
            209,
        ),
        (ApiError::from(UsersApiError::SessionRequired), 400, 206),
        (ApiError::from(UsersApiError::WrongOldPassword), 400, 210),
        (
            ApiError::from(UsersApiError::InvalidRole("x".into())),
            400,
            139,
        ),
        (
            ApiError::from(UsersApiError::AuthDataTaken("x".into())),
            400,
            208,
        ),
        (
            ApiError::from(UsersApiError::AuthDataRejected("x".into())),
            400,
            251,
        ),
        (
            ApiError::from(UsersApiError::AuthDataUnverifiable("x".into())),
            400,
            252,
        ),
        (ApiError::from(UsersApiError::EmailVerifyOff), 400, 120),
        (
            ApiError::from(UsersApiError::EmailNotFound("x".into())),
            400,
            205,
        ),
        (ApiError::from(SmsApiError::WrongSmsCode), 400, 207),
        (
            ApiError::from(SmsApiError::SmsLimit("x".into())),
            400,
            10010,
        ),
        (
            ApiError::from(SmsApiError::UnknownTemplate("x".into())),
            400,
            10022,
        ),
        (ApiError::from(SmsApiError::CaptchaFailed), 400, 10023),
        (ApiError::from(SmsApiError::CaptchaRequired), 400, 10024),
        (ApiError::from(AppsApiError::AppNameTooLong), 400, 10032),
        (ApiError::from(CommonError::MasterKeyRequired), 400, 10061),
        (
            ApiError::from(SchemasApiError::ClassNameMismatch("x".into())),
            400,
            10062,
        ),
        (
            ApiError::from(SchemasApiError::ReservedColumn("x".into())),
            400,
            10063,
        ),
        (
            ApiError::from(SchemasApiError::ColumnExists("x".into())),
            400,
            10064,
        ),
        (
            ApiError::from(SchemasApiError::TargetClassRequired("x".into())),
            400,
            10065,
        ),
        (
            ApiError::from(SchemasApiError::TargetClassMissing("x".into())),
            400,
            10066,
        ),
        (
            ApiError::from(SchemasApiError::UnknownColumnType("x".into())),
            400,
            10069,
        ),
        (
            ApiError::from(SchemasApiError::UnknownColumn("x".into())),
            400,
            10071,
        ),
        (
            ApiError::from(SchemasApiError::BuiltInColumn("x".into())),
            400,
            10073,
        ),
        (
            ApiError::from(SchemasApiError::TooManyColumns("x".into())),
            400,
            10074,
        ),
        (
            ApiError::from(CommonError::Throttled {
                what: "x".into(),
                retry_after_secs: 1,
            }),
            429,
            10076,
        ),
        (
            ApiError::from(CommonError::ConsoleThrottled {
                retry_after_secs: 1,
            }),
            429,
            10210,
        ),
        (ApiError::from(CommonError::NoBackupDestination), 400, 10301),
        (
            ApiError::from(CommonError::BackupRunning("x".into())),
            409,
            10302,
        ),
        (
            ApiError::from(CommonError::OriginNotAllowed("x".into())),
            403,
            403,
        ),
        (ApiError::from(CommonError::RouteNotFound), 404, 404),
        (ApiError::from(CommonError::MethodNotAllowed), 405, 405),
        (
            ApiError::from(CommonError::Unavailable("x".into())),
            503,
            503,
        ),
        (
            ApiError::from(CommonError::Overloaded("x".into())),
            503,
            503,
        ),
        (ApiError::from(CommonError::Timeout("x".into())), 503, 503),
        (ApiError::internal("x"), 500, 500),
        (
            ApiError::from(FilesApiError::FileNameInvalid("x".into())),
            400,
            146,
        ),
        (ApiError::from(FilesApiError::FileEmpty), 400, 149),
        (
            ApiError::from(FilesApiError::FileNotFound("x".into())),
            400,
            151,
        ),
        (
            ApiError::from(FilesApiError::FilesNotDeleted(serde_json::json!({}))),
            400,
            154,
        ),
        (ApiError::from(FilesApiError::FileTooLarge(1)), 400, 1500),
        (
            ApiError::from(FunctionsApiError::FunctionNotFound("x".into())),
            404,
            311,
        ),
        (
            ApiError::from(FunctionsApiError::FunctionFailed("x".into())),
            400,
            310,
        ),
        (
            ApiError::from(FunctionsApiError::ThrownWithCode {
                code: 142,
                message: "x".into(),
            }),
            400,
            142,
        ),
        (
            ApiError::from(FilesApiError::ImageInvalid("x".into())),
            400,
            160,
        ),
        (
            ApiError::from(FilesApiError::ImageMode("x".into())),
            400,
            161,
        ),
        (
            ApiError::from(FilesApiError::ImageWidth("x".into())),
            400,
            162,
        ),
        (
            ApiError::from(FilesApiError::ImageHeight("x".into())),
            400,
            163,
        ),
        (
            ApiError::from(FilesApiError::ImageLongEdge("x".into())),
            400,
            164,
        ),
        (
            ApiError::from(FilesApiError::ImageShortEdge("x".into())),
            400,
            165,
        ),
        (
            ApiError::from(FilesApiError::NoVideoFrame("x".into())),
            400,
            155,
        ),
        (
            ApiError::from(FilesApiError::NoFfmpeg("x".into())),
            501,
            156,
        ),
        (
            ApiError::from(FilesApiError::FilePrivate("x".into())),
            403,
            403,
        ),
        (
            ApiError::from(PushApiError::InvalidInstallation("x".into())),
            400,
            131,
        ),
        (
            ApiError::from(PushApiError::ReadOnlyField("x".into())),
            400,
            136,
        ),
        (
            ApiError::from(PushApiError::PushDataMissing("x".into())),
            400,
            141,
        ),
        (
            ApiError::from(PushApiError::PushBadTime("x".into())),
            400,
            142,
        ),
        (
            ApiError::from(PushApiError::PushBadInterval("x".into())),
            400,
            143,
        ),
        (
            ApiError::from(PushApiError::PushTimePast("x".into())),
            400,
            144,
        ),
        (
            ApiError::from(FilesApiError::FileSessionRequired("x".into())),
            400,
            206,
        ),
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
    let ApiError::Common(CommonError::Internal(fault)) = &e else {
        panic!("not internal: {e:?}");
    };
    assert_eq!(fault.chain(), "reading a user: storage error: disk gone");
    assert!(std::error::Error::source(fault).is_some());
    assert_eq!(ApiError::internal("x").to_string(), "internal: x");
    let from_cluster = ApiError::from(ClusterError::Internal("bad state".into()));
    let ApiError::Common(CommonError::Internal(fault)) = &from_cluster else {
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
    let huge = ApiError::from(ObjectsApiError::InvalidKey(format!(
        "invalid field name {}",
        "k".repeat(100_000)
    )));
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
    // A quota's refusal is answered by whoever took the quota (an SMS limit, a throttle):
    // reaching this mapping unanswered is a fault, not an SMS error.
    assert_eq!(
        ApiError::from(ClusterError::QuotaExceeded("x".into())).status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
}
