//! Refusals of SMS codes and captchas (`api::sms`, `api::captcha`): 207, 10010, 10022-10024.
//! Each variant's status and code are told here and nowhere else; `ApiError` wraps the family.

use axum::http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum SmsApiError {
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
}

impl SmsApiError {
    /// The wire code.
    pub fn code(&self) -> u32 {
        match self {
            SmsApiError::WrongSmsCode => 207,
            SmsApiError::SmsLimit(_) => 10010,
            SmsApiError::UnknownTemplate(_) => 10022,
            SmsApiError::CaptchaFailed => 10023,
            SmsApiError::CaptchaRequired => 10024,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            SmsApiError::WrongSmsCode => StatusCode::BAD_REQUEST,
            SmsApiError::SmsLimit(_) => StatusCode::BAD_REQUEST,
            SmsApiError::UnknownTemplate(_) => StatusCode::BAD_REQUEST,
            SmsApiError::CaptchaFailed => StatusCode::BAD_REQUEST,
            SmsApiError::CaptchaRequired => StatusCode::BAD_REQUEST,
        }
    }
}
