//! Emailed links (spec 4.5, 3): `requestEmailVerify`, `requestPasswordReset`, and the small
//! HTML pages their links open (`/email/verify/<token>`, `/email/reset/<token>`), which need
//! no headers because they are followed from a mail client.

use crate::throttle::{ClientIp, IpKind};
use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use basalt_cluster::names::ObjectId;
use basalt_cluster::update::{FieldUpdate, UpdateOp};
use serde::Deserialize;
use serde_json::{json, Value};

use super::context::{ApiBody, ApiPath, AppState, RequestCtx};
use super::error::{ApiError, CommonError, UsersApiError};
use crate::users::accounts;
use crate::users::email_links::{find_link, send_link, take_link, EmailLink, Purpose};
use crate::users::unique::{self, Unique};
use crate::users::{set_user_fields, USER_CLASS};

/// Mails a verification link to a user's email (after registration or an email change).
pub async fn send_verification(
    state: &AppState,
    ctx: &RequestCtx,
    user_id: &ObjectId,
    email: &str,
) -> Result<(), ApiError> {
    let link = EmailLink {
        app: ctx.app.application_id.clone(),
        user_id: user_id.clone(),
        email: email.to_string(),
        purpose: Purpose::Verify,
    };
    send_link(
        &state.cluster,
        state.mailer.as_ref(),
        &state.public_url,
        &ctx.app.app_name,
        link,
    )
    .await?;
    Ok(())
}

/// The user holding an email given in a request body (205 when none).
async fn user_by_email(
    state: &AppState,
    ctx: &RequestCtx,
    body: ApiBody,
) -> Result<(ObjectId, String), ApiError> {
    let body = body.object()?;
    let email = body
        .get("email")
        .and_then(Value::as_str)
        .filter(|e| !e.is_empty())
        .ok_or_else(|| CommonError::InvalidBody("email is required.".into()))?;
    let app = &ctx.app.application_id;
    match unique::owner(&state.cluster, app, Unique::Email, email).await? {
        Some(id) => Ok((id, email.to_string())),
        None => Err(UsersApiError::EmailNotFound(email.to_string()).into()),
    }
}

/// `POST /1/requestEmailVerify {email}`: 120 when verification is off, 205 for an unknown email.
pub async fn request_email_verify(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ClientIp(ip): ClientIp,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    if !ctx.app.email_verify {
        return Err(UsersApiError::EmailVerifyOff.into());
    }
    let (user_id, email) = mail_target(&state, &ctx, ip, body).await?;
    send_verification(&state, &ctx, &user_id, &email).await?;
    Ok(Json(json!({"msg": "ok"})))
}

/// `POST /1/requestPasswordReset {email}`: 205 for an unknown email.
pub async fn request_password_reset(
    State(state): State<AppState>,
    ctx: RequestCtx,
    ClientIp(ip): ClientIp,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let (user_id, email) = mail_target(&state, &ctx, ip, body).await?;
    let link = EmailLink {
        app: ctx.app.application_id.clone(),
        user_id,
        email,
        purpose: Purpose::Reset,
    };
    send_link(
        &state.cluster,
        state.mailer.as_ref(),
        &state.public_url,
        &ctx.app.app_name,
        link,
    )
    .await?;
    Ok(Json(json!({"msg": "ok"})))
}

/// The user a mail request names, once the client is within its mail requests per IP (the
/// address's own limit is counted when the link is sent: `send_link`).
async fn mail_target(
    state: &AppState,
    ctx: &RequestCtx,
    ip: Option<std::net::IpAddr>,
    body: ApiBody,
) -> Result<(ObjectId, String), ApiError> {
    state.limiter.take(IpKind::Mail, ip)?;
    user_by_email(state, ctx, body).await
}

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body style=\"font-family:sans-serif;max-width:30em;margin:3em auto\"><h1>{title}</h1>{body}</body></html>"
    );
    (status, Html(html)).into_response()
}

fn expired() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Link expired",
        "<p>This link is no longer valid. Ask for a new one.</p>",
    )
}

/// Applies internal updates to a user (no ACL check: the link is the credential).
/// `GET /email/verify/<token>`: sets `emailVerified` when the user still has that email.
pub async fn follow_verify_link(
    State(state): State<AppState>,
    ApiPath(token): ApiPath<String>,
) -> Result<Response, ApiError> {
    let Some(link) = take_link(&state.cluster, &token, Purpose::Verify).await? else {
        return Ok(expired());
    };
    let user = state
        .cluster
        .get_stored_object(&link.app, &USER_CLASS, &link.user_id)
        .await?;
    let current = user
        .as_ref()
        .and_then(|u| u.fields.get("email"))
        .and_then(Value::as_str)
        .map(str::to_lowercase);
    if current.as_deref() != Some(link.email.to_lowercase().as_str()) {
        return Ok(expired());
    }
    let verified = FieldUpdate {
        path: vec!["emailVerified".into()],
        op: UpdateOp::Set(json!(true)),
    };
    set_user_fields(&state.cluster, &link.app, &link.user_id, vec![verified]).await?;
    Ok(page(
        StatusCode::OK,
        "Email verified",
        "<p>Thank you: your email address is verified.</p>",
    ))
}

/// `GET /email/reset/<token>`: the form to choose a new password.
pub async fn show_reset_page(
    State(state): State<AppState>,
    ApiPath(token): ApiPath<String>,
) -> Result<Response, ApiError> {
    if find_link(&state.cluster, &token, Purpose::Reset)
        .await?
        .is_none()
    {
        return Ok(expired());
    }
    let form = format!(
        "<form method=\"post\" action=\"/email/reset/{token}\"><p><label>New password \
         <input type=\"password\" name=\"password\" required></label></p>\
         <p><button type=\"submit\">Change password</button></p></form>"
    );
    Ok(page(StatusCode::OK, "Choose a new password", &form))
}

#[derive(Debug, Deserialize)]
pub struct ResetForm {
    password: String,
}

/// `POST /email/reset/<token>` (form `password`): sets the password and ends every session.
pub async fn reset_password(
    State(state): State<AppState>,
    ApiPath(token): ApiPath<String>,
    form: Result<Form<ResetForm>, axum::extract::rejection::FormRejection>,
) -> Result<Response, ApiError> {
    if find_link(&state.cluster, &token, Purpose::Reset)
        .await?
        .is_none()
    {
        return Ok(expired());
    }
    let password = match form {
        Ok(Form(f)) if !f.password.is_empty() => f.password,
        _ => {
            return Ok(page(
                StatusCode::BAD_REQUEST,
                "Choose a new password",
                "<p>The password must not be empty.</p>",
            ))
        }
    };
    // Taking the link is the check: of racing submissions exactly one changes the password.
    let Some(link) = take_link(&state.cluster, &token, Purpose::Reset).await? else {
        return Ok(expired());
    };
    accounts::reset_password(
        &state.cluster,
        &link.app,
        &link.user_id,
        password,
        Vec::new(),
    )
    .await?;
    Ok(page(
        StatusCode::OK,
        "Password changed",
        "<p>You can now log in with your new password.</p>",
    ))
}
