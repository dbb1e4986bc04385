//! App management (spec 4.8 and 2.7): list, read, create and change the apps of the console
//! account named by the `X-<Brand>-Email` / `X-<Brand>-Password` headers.
//!
//! An account sees only its own apps; another account's app is not found. Keys are generated
//! at creation and never change; the settings later features use (safe token, standard mode
//! off, email verification, wrapped aggregates, enterprise limit) are set with PUT.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Map, Value};

use super::context::{ApiBody, ApiPath, AppState, ConsoleAccount};
use super::error::{ApiError, AppsApiError, CommonError};
use std::collections::BTreeMap;

use basalt_cluster::error::clip;

use crate::apps::{
    find_app, list_apps, put_app, update_app, AppRecord, AuthProvider, SAFE_TOKEN_LEN,
};
use crate::functions::settings::FunctionSettings;
use crate::push::settings::PushSettings;
use crate::users::third_party::providers::VERIFIED_PLATFORMS;

/// App names must be shorter than this many characters (spec 8).
const MAX_APP_NAME_CHARS: usize = 30;

/// Members PUT may carry but never change (they are echoed back by clients).
const READ_ONLY: [&str; 5] = [
    "applicationId",
    "restKey",
    "masterKey",
    "accessKey",
    "secretKey",
];

fn flag_01(name: &str, v: &Value) -> Result<Value, ApiError> {
    match v.as_i64() {
        Some(n @ (0 | 1)) => Ok(json!(n)),
        _ => Err(CommonError::InvalidBody(format!("{name} must be 0 or 1.")).into()),
    }
}

fn flag_bool(name: &str, v: &Value) -> Result<Value, ApiError> {
    match v {
        Value::Bool(b) => Ok(json!(b)),
        Value::Number(n) if n.as_i64() == Some(0) || n.as_i64() == Some(1) => {
            Ok(json!(n.as_i64() == Some(1)))
        }
        _ => Err(CommonError::InvalidBody(format!("{name} must be a boolean.")).into()),
    }
}

/// An array of strings each of which passes `valid` (at most 100).
fn string_list(
    name: &str,
    v: &Value,
    valid: impl Fn(&str) -> bool,
) -> Result<Vec<String>, ApiError> {
    let bad = || {
        ApiError::from(CommonError::InvalidBody(format!(
            "{name} must be an array of at most 100 valid strings."
        )))
    };
    let items = v.as_array().filter(|a| a.len() <= 100).ok_or_else(bad)?;
    items
        .iter()
        .map(|i| {
            i.as_str()
                .filter(|s| valid(s))
                .map(str::to_string)
                .ok_or_else(bad)
        })
        .collect()
}

/// Validates `authProviders`: verifiable platforms, each `{appId?, appSecret?}` of short
/// strings.
fn auth_providers(v: &Value) -> Result<Value, ApiError> {
    let bad =
        |why: String| ApiError::from(CommonError::InvalidBody(format!("authProviders: {why}")));
    let m = v
        .as_object()
        .ok_or_else(|| bad("must be an object of platforms.".into()))?;
    let mut out = BTreeMap::new();
    for (platform, creds) in m {
        if !VERIFIED_PLATFORMS.contains(&platform.as_str()) {
            return Err(bad(format!(
                "unknown platform {:?} (one of {}).",
                clip(platform),
                VERIFIED_PLATFORMS.join(", ")
            )));
        }
        let creds: AuthProvider = serde_json::from_value(creds.clone()).map_err(|_| {
            bad(format!(
                "{platform} must be an object with string members appId and appSecret."
            ))
        })?;
        let too_long = [&creds.app_id, &creds.app_secret]
            .into_iter()
            .flatten()
            .any(|s| s.is_empty() || s.len() > 256);
        if too_long {
            return Err(bad(format!(
                "{platform}: appId and appSecret hold 1 to 256 characters."
            )));
        }
        out.insert(platform.clone(), creds);
    }
    serde_json::to_value(out).map_err(|e| ApiError::fault("encoding apps", e))
}

/// Largest `requestsPerSecond` an app may set.
const MAX_REQUESTS_PER_SECOND: u64 = 1_000_000;

/// Largest `objectsQuotaMb` / `filesQuotaMb` an app may set (1 PiB).
const MAX_QUOTA_MB: u64 = 1 << 30;

/// Largest `maxFileMb` an app may set (the node's `--max-file-mb` still applies).
const MAX_FILE_MB_SETTING: u64 = 1 << 20;

/// Validates the settable members of a POST or PUT body into record members.
fn settings(body: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    let mut out = Map::new();
    for (k, v) in body {
        if READ_ONLY.contains(&k.as_str()) {
            continue;
        }
        out.insert(k.clone(), setting(k, v)?);
    }
    Ok(out)
}

/// Validates one settable member `k` of an app into its record value.
fn setting(k: &str, v: &Value) -> Result<Value, ApiError> {
    let value = match k {
        "appName" => app_name(v)?,
        "status" | "notAllowedCreateTable" => flag_01(k, v)?,
        "disableStandardMode" | "emailVerify" | "wrapAggregates" | "enterprise" => flag_bool(k, v)?,
        "allowUnverifiedAuthData" | "privateFiles" | "clientPush" | "realtimeKeysRequired" => {
            flag_bool(k, v)?
        }
        "safeToken" => safe_token(v)?,
        "protectedUserFields" => json!(string_list(k, v, |f| {
            basalt_cluster::object::validate_field_name(f).is_ok()
        })?),
        "allowedOrigins" => json!(string_list(k, v, |o| {
            o == "*" || o.starts_with("http://") || o.starts_with("https://")
        })?),
        "push" => feature_settings(v, PushSettings::parse)?,
        "functions" => feature_settings(v, FunctionSettings::parse)?,
        "fileDelete" => match v.as_str() {
            Some(who @ ("any" | "master" | "uploader")) => json!(who),
            _ => {
                return Err(CommonError::InvalidBody(
                    "fileDelete must be \"any\", \"master\" or \"uploader\".".into(),
                )
                .into())
            }
        },
        "maxFileMb" => optional_count(k, v, MAX_FILE_MB_SETTING)?,
        "requestsPerSecond" => optional_count(k, v, MAX_REQUESTS_PER_SECOND)?,
        "objectsQuotaMb" | "filesQuotaMb" => optional_count(k, v, MAX_QUOTA_MB)?,
        "authProviders" => auth_providers(v)?,
        other => {
            return Err(CommonError::InvalidBody(format!("unknown app member {other:?}.")).into())
        }
    };
    Ok(value)
}

/// `appName`: a non-empty string (trimmed) of fewer than `MAX_APP_NAME_CHARS` characters.
fn app_name(v: &Value) -> Result<Value, ApiError> {
    let name = v
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| CommonError::InvalidBody("appName must be a non-empty string.".into()))?;
    if name.chars().count() >= MAX_APP_NAME_CHARS {
        return Err(AppsApiError::AppNameTooLong.into());
    }
    Ok(json!(name))
}

/// `safeToken`: `SAFE_TOKEN_LEN` letters or digits.
fn safe_token(v: &Value) -> Result<Value, ApiError> {
    match v.as_str() {
        Some(t)
            if t.chars().count() == SAFE_TOKEN_LEN
                && t.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            Ok(json!(t))
        }
        _ => Err(CommonError::InvalidBody(format!(
            "safeToken must be {SAFE_TOKEN_LEN} letters or digits."
        ))
        .into()),
    }
}

/// A feature's settings (`push`, `functions`) as that feature reads them, or null.
fn feature_settings<T: serde::Serialize>(
    v: &Value,
    parse: impl FnOnce(&Value) -> Result<T, String>,
) -> Result<Value, ApiError> {
    match v {
        Value::Null => Ok(Value::Null),
        v => {
            let settings = parse(v).map_err(CommonError::InvalidBody)?;
            serde_json::to_value(settings).map_err(|e| ApiError::fault("encoding apps", e))
        }
    }
}

/// An integer member `k` from 1 to `max`, or null.
fn optional_count(k: &str, v: &Value, max: u64) -> Result<Value, ApiError> {
    match v {
        Value::Null => Ok(Value::Null),
        v => Ok(json!(v
            .as_u64()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| CommonError::InvalidBody(format!(
                "{k} must be an integer from 1 to {max}, or null."
            )))?)),
    }
}

pub(crate) async fn owned_app(
    state: &AppState,
    account: &ConsoleAccount,
    id: &str,
) -> Result<AppRecord, ApiError> {
    match find_app(&state.cluster, id).await? {
        Some(app) if app.owner == account.email => Ok(app),
        _ => Err(CommonError::ObjectNotFound(format!("app {id}")).into()),
    }
}

pub async fn list_apps_of_account(
    State(state): State<AppState>,
    account: ConsoleAccount,
) -> Result<Json<Value>, ApiError> {
    let apps = list_apps(&state.cluster, &account.email).await?;
    let results: Vec<Value> = apps.iter().map(AppRecord::to_json).collect();
    Ok(Json(json!({ "results": results })))
}

/// `GET /1/apps/<appId>/usage` (console): what the app stores, as its shards count it, beside
/// its quotas (`storage_quota`).
pub async fn app_usage(
    State(state): State<AppState>,
    account: ConsoleAccount,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let app = owned_app(&state, &account, &id).await?;
    let usage = state.cluster.app_usage(&app.application_id).await?;
    Ok(Json(json!({
        "objects": {
            "count": usage.objects,
            "bytes": usage.object_bytes,
            "quotaMb": app.objects_quota_mb,
        },
        "files": {
            "count": usage.files,
            "bytes": usage.file_bytes,
            "quotaMb": app.files_quota_mb,
        },
    })))
}

pub async fn get_app(
    State(state): State<AppState>,
    account: ConsoleAccount,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(owned_app(&state, &account, &id).await?.to_json()))
}

pub async fn create_app(
    State(state): State<AppState>,
    account: ConsoleAccount,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    let members = settings(&body)?;
    let name = members
        .get("appName")
        .and_then(Value::as_str)
        .ok_or_else(|| CommonError::InvalidBody("appName is required.".into()))?;
    let mut app = AppRecord::generate(name, &account.email);
    let mut v = serde_json::to_value(&app).map_err(|e| ApiError::fault("encoding an app", e))?;
    if let Some(m) = v.as_object_mut() {
        m.extend(members);
    }
    app = serde_json::from_value(v).map_err(|e| ApiError::fault("decoding an app", e))?;
    put_app(&state.cluster, &app).await?;
    Ok(Json(app.to_json()))
}

pub async fn update_app_settings(
    State(state): State<AppState>,
    account: ConsoleAccount,
    ApiPath(id): ApiPath<String>,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    let members = settings(&body)?;
    owned_app(&state, &account, &id).await?;
    let app = update_app(&state.cluster, &id, members).await?;
    Ok(Json(app.to_json()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(v: Value) -> Result<Map<String, Value>, ApiError> {
        settings(v.as_object().unwrap())
    }

    #[test]
    fn settings_are_validated() {
        assert!(matches!(
            check(json!({"appName": "a".repeat(30)})),
            Err(ApiError::Apps(AppsApiError::AppNameTooLong))
        ));
        assert!(check(json!({"appName": "a".repeat(29)})).is_ok());
        assert!(matches!(
            check(json!({"status": 2})),
            Err(ApiError::Common(CommonError::InvalidBody(_)))
        ));
        assert!(matches!(
            check(json!({"safeToken": "12345"})),
            Err(ApiError::Common(CommonError::InvalidBody(_)))
        ));
        assert!(matches!(
            check(json!({"owner": "x@y"})),
            Err(ApiError::Common(CommonError::InvalidBody(_)))
        ));
        let m =
            check(json!({"restKey": "ignored", "emailVerify": 1, "safeToken": "abc123"})).unwrap();
        assert_eq!(m.get("emailVerify"), Some(&json!(true)));
        assert!(m.get("restKey").is_none());
    }
}
