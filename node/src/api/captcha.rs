//! Captcha endpoints (spec 4.10): `requestCaptcha` → `{captcha_token, captcha_url}`,
//! `verifyCaptcha` → `{validate_token}` (app keys), and the picture at `captcha_url`
//! (`GET /captcha/<token>.png`, no credentials: an `<img>` loads it). The work is in `captcha`.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::context::{json_object, ApiBody, ApiPath, AppState, RequestCtx};
use super::error::{ApiError, CommonError};
use crate::captcha::{self, CaptchaParams};

/// `POST /1/requestCaptcha {width?, height?, size?, ttl?}`. With the master key the answer also
/// carries the text as `captcha_code`, for the operator's own tests and tools (an app's clients
/// never hold the master key).
pub async fn request_captcha(
    State(state): State<AppState>,
    ctx: RequestCtx,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let bytes = &body.0;
    let body = if bytes.iter().all(u8::is_ascii_whitespace) {
        serde_json::Map::new()
    } else {
        json_object(bytes)?
    };
    let params = CaptchaParams::from_body(&body)?;
    let (token, text) = captcha::issue(&state.cluster, &ctx.app.application_id, params).await?;
    let url = format!(
        "{}/captcha/{token}.png",
        state.public_url.trim_end_matches('/')
    );
    let mut answer = json!({"captcha_token": token, "captcha_url": url});
    if ctx.master {
        answer["captcha_code"] = json!(text);
    }
    Ok(Json(answer))
}

/// `POST /1/verifyCaptcha {captcha_code, captcha_token}`; 10023 for a wrong code or a dead
/// captcha (each captcha allows one attempt).
pub async fn verify_captcha(
    State(state): State<AppState>,
    ctx: RequestCtx,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    let field = |k: &str| {
        body.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::from(CommonError::InvalidBody(format!("{k} is required."))))
    };
    let (code, token) = (field("captcha_code")?, field("captcha_token")?);
    let pass = captcha::verify(&state.cluster, &ctx.app.application_id, token, code).await?;
    Ok(Json(json!({ "validate_token": pass })))
}

/// `GET /captcha/<token>.png`: the picture while the captcha lives (404 JSON otherwise).
pub async fn captcha_picture(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    let token = name.strip_suffix(".png").unwrap_or(&name);
    match captcha::picture(&state.cluster, token).await? {
        Some(png) => Ok((
            [
                (header::CONTENT_TYPE, "image/png"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            png,
        )
            .into_response()),
        None => Err(CommonError::ObjectNotFound(format!("captcha {token}")).into()),
    }
}
