//! `UsersError`: what the user features (accounts, sessions, login, unique names, roles, emailed
//! links) report. They never name wire codes: `api::error` converts this enum into the API's
//! table of codes.

use basalt_cluster::Error as ClusterError;

use crate::password::PasswordError;
use crate::sms::SmsError;
use crate::throttle::ThrottleError;
use crate::users::third_party::providers::VerifyError;
use crate::users::third_party::AuthDataError;

#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    #[error("username {0:?} already taken.")]
    UsernameTaken(String),
    #[error("email {0:?} already taken.")]
    EmailTaken(String),
    #[error("mobilePhoneNumber {0:?} already taken.")]
    PhoneTaken(String),
    #[error("role name {0:?} already taken.")]
    RoleNameTaken(String),
    #[error("this {0} account is linked to another user.")]
    AuthDataTaken(&'static str),
    /// Another installation holds this `installationId` or `deviceToken`.
    #[error("another installation has {0} {1:?}.")]
    InstallationTaken(&'static str, String),
    /// No user with that objectId.
    #[error("object not found for {0}.")]
    UserNotFound(String),
    /// A login whose account or password does not match.
    #[error("username or password incorrect.")]
    LoginFailed,
    /// One of the two credentials is missing.
    #[error("{0}")]
    MissingCredentials(String),
    /// No login data at all.
    #[error("{0}")]
    MissingLoginData(String),
    /// A body member of the wrong type or a body that lacks what the operation needs.
    #[error("{0}")]
    InvalidField(String),
    /// A field only the service sets, sent without the master key.
    #[error("{0}")]
    ServiceField(String),
    /// A change of a user without that user's session or the master key.
    #[error("this user cannot be changed without its session token or the master key.")]
    SessionRequired,
    #[error("old password incorrect.")]
    WrongOldPassword,
    /// A query that names fields of users only the master key may query.
    #[error("{0}")]
    ProtectedQuery(String),
    /// The mail could not be handed to the mail server.
    #[error("sending mail: {0}")]
    Mail(String),
    /// A record the users feature wrote or read does not encode or decode.
    #[error("{what}")]
    Encoding {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// An invariant of the users feature that did not hold.
    #[error("{0}")]
    Unexpected(&'static str),
    #[error(transparent)]
    AuthData(#[from] AuthDataError),
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error(transparent)]
    Password(#[from] PasswordError),
    #[error(transparent)]
    Sms(#[from] SmsError),
    #[error(transparent)]
    Throttle(#[from] ThrottleError),
    /// The account failed too many logins from many addresses: a login needs a
    /// `validate_token` from `verifyCaptcha` (10024).
    #[error(
        "too many failed logins on this account: log in with a validate_token from verifyCaptcha."
    )]
    CaptchaRequired,
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

impl UsersError {
    /// A cluster error about one user: not-found names the user.
    pub fn about(user_id: &str, e: ClusterError) -> Self {
        match e {
            ClusterError::ObjectNotFound => UsersError::UserNotFound(user_id.to_string()),
            other => UsersError::Cluster(other),
        }
    }
}
