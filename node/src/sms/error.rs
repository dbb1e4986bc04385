//! `SmsError`: what the SMS feature (templates, codes, messages) reports; `api::error` converts
//! it into the API's codes.

use basalt_cluster::Error as ClusterError;

use crate::captcha::CaptchaError;

#[derive(Debug, thiserror::Error)]
pub enum SmsError {
    /// A request or template member outside its rules.
    #[error("{0}")]
    InvalidParams(String),
    #[error("no SMS template named {0:?}.")]
    UnknownTemplate(String),
    #[error("this template needs a validate_token from verifyCaptcha.")]
    CaptchaRequired,
    /// A send over one of the number's or the app's quota windows.
    #[error("this mobilePhoneNumber has reached its SMS limit ({0}).")]
    Limit(String),
    /// A code that is wrong, used, expired, malformed, or tried too often.
    #[error("SMS code incorrect or expired.")]
    WrongCode,
    /// No message with that smsId in the app.
    #[error("sms {0}")]
    UnknownMessage(String),
    /// A stored template that does not decode (or one that does not encode).
    #[error("an SMS template record")]
    Record(#[source] serde_json::Error),
    /// Every smsId drawn was taken.
    #[error("no free smsId")]
    NoFreeId,
    #[error(transparent)]
    Captcha(#[from] CaptchaError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}
