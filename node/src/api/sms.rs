//! SMS endpoints (spec 4.5, 4.10): `requestSmsCode`, `verifySmsCode` (code in the path or the
//! body), `querySms/<smsId>` and `resetPasswordBySmsCode/<code>` with app keys, and the
//! console's template management under `/1/apps/<appId>/smsTemplates`. The work is in `sms`.

use crate::throttle::{ClientIp, IpKind};
use axum::extract::State;
use axum::Json;
use serde_json::{json, Map, Value};

use super::apps::owned_app;
use super::context::{ApiBody, ApiPath, AppState, ConsoleAccount, RequestCtx};
use super::error::{ApiError, CommonError, SmsApiError};
use crate::sms::{self, CodeRequest, Template};
use crate::users::accounts::{reset_password, set};
use crate::users::unique::{self, Unique};

/// A string member of a body (107 when present but not a string).
fn string<'a>(body: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str()).filter(|s| !s.is_empty())),
        Some(_) => Err(CommonError::InvalidBody(format!("{key} must be a string.")).into()),
    }
}

fn number(body: &Map<String, Value>) -> Result<&str, ApiError> {
    string(body, "mobilePhoneNumber")?.ok_or_else(|| {
        ApiError::from(CommonError::InvalidBody(
            "mobilePhoneNumber is required.".into(),
        ))
    })
}

fn ok() -> Json<Value> {
    Json(json!({"msg": "ok"}))
}

/// `POST /1/requestSmsCode {mobilePhoneNumber, template?, validate_token?}` → `{smsId}`.
pub async fn request_sms_code(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ClientIp(ip): ClientIp,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    state
        .limiter
        .take(IpKind::Sms, ip)
        .map_err(|e| SmsApiError::SmsLimit(e.to_string()))?;
    let body = body.object()?;
    let req = CodeRequest {
        number: number(&body)?,
        template: string(&body, "template")?,
        validate_token: string(&body, "validate_token")?,
    };
    let sms_id = sms::request_code(&state.cluster, state.sms.clone(), &ctx.app, req).await?;
    Ok(Json(json!({ "smsId": sms_id })))
}

/// `POST /1/verifySmsCode/<code> {mobilePhoneNumber}`; 207 for a wrong or used code.
pub async fn verify_sms_code_in_path(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(code): ApiPath<String>,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    sms::take_code(
        &state.cluster,
        &ctx.app.application_id,
        number(&body)?,
        &code,
    )
    .await?;
    Ok(ok())
}

/// `POST /1/verifySmsCode {mobilePhoneNumber, smsCode}`.
pub async fn verify_sms_code_in_body(
    State(state): State<AppState>,
    ctx: RequestCtx,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    let code = string(&body, "smsCode")?
        .ok_or_else(|| CommonError::InvalidBody("smsCode is required.".into()))?;
    sms::take_code(
        &state.cluster,
        &ctx.app.application_id,
        number(&body)?,
        code,
    )
    .await?;
    Ok(ok())
}

/// `GET /1/querySms/<smsId>` → `{sms_state, verify_state}`.
pub async fn query_sms(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(sms_id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        sms::query(&state.cluster, &ctx.app.application_id, &sms_id).await?,
    ))
}

/// `PUT /1/resetPasswordBySmsCode/<code> {password, mobilePhoneNumber?}`: sets the password of
/// the user with that number, ends all its sessions and marks the number verified. Without a
/// number, the number the code was sent to is used. 207 for a wrong code; 101 when no user has
/// the number (the code stays usable).
pub async fn reset_password_by_sms_code(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ApiPath(code): ApiPath<String>,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    let password = string(&body, "password")?
        .ok_or_else(|| CommonError::InvalidBody("password is required.".into()))?;
    let app = &ctx.app.application_id;
    let number = match string(&body, "mobilePhoneNumber")? {
        Some(n) => n.to_string(),
        None => sms::number_of_code(&state.cluster, app, &code)
            .await?
            .ok_or(SmsApiError::WrongSmsCode)?,
    };
    let user_id = unique::owner(&state.cluster, app, Unique::Phone, &number)
        .await?
        .ok_or_else(|| {
            CommonError::ObjectNotFound(format!("user with mobilePhoneNumber {number}"))
        })?;
    sms::take_code(&state.cluster, app, &number, &code).await?;
    let verified = vec![set("mobilePhoneVerified", json!(true))];
    reset_password(
        &state.cluster,
        app,
        &user_id,
        password.to_string(),
        verified,
    )
    .await?;
    Ok(ok())
}

/// `GET /1/apps/<appId>/smsTemplates` → `{results: [{name, content, captcha}]}`.
pub async fn list_templates(
    State(state): State<AppState>,
    account: ConsoleAccount,
    ApiPath(app_id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let app = owned_app(&state, &account, &app_id).await?;
    let list = sms::list_templates(&state.cluster, &app.application_id).await?;
    Ok(Json(json!({ "results": list })))
}

/// `POST /1/apps/<appId>/smsTemplates {name, content, captcha?}`: creates or replaces.
pub async fn put_template(
    State(state): State<AppState>,
    account: ConsoleAccount,
    ApiPath(app_id): ApiPath<String>,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let app = owned_app(&state, &account, &app_id).await?;
    let t = Template::from_body(&body.object()?)?;
    sms::put_template(&state.cluster, &app.application_id, &t).await?;
    Ok(Json(json!(t)))
}

/// `DELETE /1/apps/<appId>/smsTemplates/<name>`; 101 for an unknown template.
pub async fn delete_template(
    State(state): State<AppState>,
    account: ConsoleAccount,
    ApiPath((app_id, name)): ApiPath<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let app = owned_app(&state, &account, &app_id).await?;
    if sms::delete_template(&state.cluster, &app.application_id, &name).await? {
        Ok(ok())
    } else {
        Err(CommonError::ObjectNotFound(format!("template {name}")).into())
    }
}
