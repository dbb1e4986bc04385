//! SMS codes (spec 4.10, 8): templates, sending a 6-digit code within the per-number quota,
//! verifying a code once, and the state of a sent message.
//!
//! Records, each in the shard owning its key (TTL records, removed by the scheduler's sweep):
//! - `sms_quota` `app/number`: send times of the last day, taken with the state machine's
//!   `TakeQuota` (1 per minute, 5 per hour, 10 per day), so the limit holds cluster-wide
//!   without read-modify-write here;
//! - `sms_code` `app/number/code`: the smsId of a live code (10 minutes); verifying takes it
//!   (`TakeRecord`), so a code works once even when two requests race;
//! - `sms_tries` `app/number`: verification attempts, 20 per 10 minutes, against guessing;
//! - `sms` `app/smsId`: `{number, state, verified}` for `querySms` (30 days);
//! - `sms_code_index` `app/code`: the number a live code went to (the first, if two numbers hold
//!   the same code), for `resetPasswordBySmsCode` bodies without a number; such lookups are
//!   limited per app (`RESET_LOOKUP_WINDOWS`) so codes cannot be guessed app-wide.
//!
//! Templates live in the metadata group (`sms_template` `app/name`), managed by the console
//! (`api::sms`). Delivery runs after the answer, through `provider`. Callers: `api::sms`,
//! `api::users` (phone sign-up and login, reset by code).

mod error;
pub mod phone;
pub mod provider;

use std::sync::Arc;

use basalt_cluster::ids::{GroupId, META_GROUP};
use basalt_cluster::names::AppId;
use basalt_cluster::namespace::Namespace;
use basalt_cluster::{now_ms, Cluster, Error as ClusterError, QuotaWindow};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::apps::AppRecord;
pub use error::SmsError;
use provider::{Sms, SmsProvider};

/// How long a code works.
pub const CODE_TTL_MS: i64 = 10 * 60 * 1000;
/// How long `querySms` knows a message.
pub const RECORD_TTL_MS: i64 = 30 * 24 * 3600 * 1000;

const MINUTE_MS: i64 = 60 * 1000;

/// Sends per number per app (spec 8).
pub const SEND_WINDOWS: [QuotaWindow; 3] = [
    QuotaWindow {
        length_ms: MINUTE_MS,
        max: 1,
    },
    QuotaWindow {
        length_ms: 60 * MINUTE_MS,
        max: 5,
    },
    QuotaWindow {
        length_ms: 24 * 60 * MINUTE_MS,
        max: 10,
    },
];

/// Key of an app's own SMS quota (every number's sends count there too).
const APP_QUOTA_KEY: &str = "_app";

/// SMS sends per app, whatever the numbers: bounds what one client can make an app send (and
/// pay for) by cycling numbers.
pub const APP_SEND_WINDOWS: [QuotaWindow; 2] = [
    QuotaWindow {
        length_ms: MINUTE_MS,
        max: 100,
    },
    QuotaWindow {
        length_ms: 24 * 60 * MINUTE_MS,
        max: 10_000,
    },
];

/// Verification attempts per number per app; past it every code is refused (207).
pub const VERIFY_WINDOWS: [QuotaWindow; 1] = [QuotaWindow {
    length_ms: 10 * MINUTE_MS,
    max: 20,
}];

/// Code lookups without a number, per app: no more than one number gets (a lookup matches any
/// number's live code, and a code lives `CODE_TTL_MS`); past it they find nothing (207).
pub const RESET_LOOKUP_WINDOWS: [QuotaWindow; 1] = VERIFY_WINDOWS;

/// The template used when a request names none.
pub const DEFAULT_TEMPLATE: &str =
    "Your verification code for %appname% is %smscode%. It expires in %ttl% minutes.";

/// An app's named message template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Template {
    pub name: String,
    pub content: String,
    /// Sending needs a `validate_token` from `verifyCaptcha`.
    #[serde(default)]
    pub captcha: bool,
}

impl Template {
    /// From a console body `{name, content, captcha?}`; 107 when malformed. The content must
    /// carry `%smscode%`.
    pub fn from_body(body: &Map<String, Value>) -> Result<Self, SmsError> {
        let bad = |m: &str| SmsError::InvalidParams(m.to_string());
        let name = body
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("name is required."))?;
        if name.is_empty()
            || name.chars().count() > 30
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        {
            return Err(bad(
                "name must be 1 to 30 letters, digits, hyphens or underscores.",
            ));
        }
        let content = body
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("content is required."))?;
        if !content.contains("%smscode%") {
            return Err(bad("content must contain %smscode%."));
        }
        if content.chars().count() > 500 {
            return Err(bad("content is longer than 500 characters."));
        }
        let captcha = match body.get("captcha") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(bad("captcha must be a boolean.")),
        };
        Ok(Template {
            name: name.to_string(),
            content: content.to_string(),
            captcha,
        })
    }
}

/// A valid phone number in any usual form (`phone::normalize`).
pub fn valid_number(s: &str) -> bool {
    phone::normalize(s).is_some()
}

/// A template's text with its placeholders filled.
pub fn render(content: &str, code: &str, ttl_minutes: i64, app_name: &str) -> String {
    content
        .replace("%smscode%", code)
        .replace("%ttl%", &ttl_minutes.to_string())
        .replace("%appname%", app_name)
}

/// Counted length (characters plus 6 for the signature) and billed messages: one up to 70,
/// else 67-character segments (spec 8).
pub fn counted(text: &str) -> (usize, usize) {
    let len = text.chars().count() + 6;
    let segments = if len <= 70 { 1 } else { len.div_ceil(67) };
    (len, segments)
}

fn template_key(app: &AppId, name: &str) -> String {
    format!("{app}/{name}")
}

fn internal(e: serde_json::Error) -> SmsError {
    SmsError::Record(e)
}

pub async fn put_template(cluster: &Cluster, app: &AppId, t: &Template) -> Result<(), SmsError> {
    let v = serde_json::to_value(t).map_err(internal)?;
    cluster
        .put_record(
            META_GROUP,
            Namespace::SmsTemplate,
            &template_key(app, &t.name),
            v,
            None,
        )
        .await?;
    Ok(())
}

pub async fn list_templates(cluster: &Cluster, app: &AppId) -> Result<Vec<Template>, SmsError> {
    cluster
        .list_records(META_GROUP, Namespace::SmsTemplate, &format!("{app}/"))
        .await?
        .into_iter()
        .map(|(_, v)| serde_json::from_value(v).map_err(internal))
        .collect()
}

pub async fn find_template(
    cluster: &Cluster,
    app: &AppId,
    name: &str,
) -> Result<Option<Template>, SmsError> {
    cluster
        .get_record(META_GROUP, Namespace::SmsTemplate, &template_key(app, name))
        .await?
        .map(|v| serde_json::from_value(v).map_err(internal))
        .transpose()
}

/// Deletes a template; false when there was none.
pub async fn delete_template(cluster: &Cluster, app: &AppId, name: &str) -> Result<bool, SmsError> {
    Ok(cluster
        .take_record(META_GROUP, Namespace::SmsTemplate, &template_key(app, name))
        .await?
        .is_some())
}

/// The group of a number's codes, quotas and tries.
fn number_group(cluster: &Cluster, app: &AppId, number: &str) -> GroupId {
    cluster.app_record_group(Namespace::SmsCode, app, number)
}

/// The group of a sent message.
fn message_group(cluster: &Cluster, app: &AppId, sms_id: &str) -> GroupId {
    cluster.app_record_group(Namespace::Sms, app, sms_id)
}

/// What a `requestSmsCode` asks for.
pub struct CodeRequest<'a> {
    pub number: &'a str,
    pub template: Option<&'a str>,
    pub validate_token: Option<&'a str>,
}

/// Sends a new code to a number: checks the number (107), the template (10022) and its
/// captcha (10024), counts the send against the quota (10010), stores the code and the
/// message, and delivers in the background. Answers the smsId.
pub async fn request_code(
    cluster: &Cluster,
    provider: Arc<dyn SmsProvider>,
    app: &AppRecord,
    req: CodeRequest<'_>,
) -> Result<i64, SmsError> {
    let appid = &app.application_id;
    // Quotas and codes are keyed on the number's one form, however the client wrote it.
    let Some(number) = phone::normalize(req.number) else {
        return Err(SmsError::InvalidParams(
            "mobilePhoneNumber is not a valid phone number.".into(),
        ));
    };
    let template = match req.template {
        None => Template {
            name: String::new(),
            content: DEFAULT_TEMPLATE.into(),
            captcha: false,
        },
        Some(name) => find_template(cluster, appid, name)
            .await?
            .ok_or_else(|| SmsError::UnknownTemplate(name.to_string()))?,
    };
    if template.captcha {
        let pass = req.validate_token.unwrap_or("");
        if !crate::captcha::take_pass(cluster, appid, pass).await? {
            return Err(SmsError::CaptchaRequired);
        }
    }
    let group = number_group(cluster, appid, &number);
    for (group, key, windows) in [
        (group, format!("{appid}/{number}"), &SEND_WINDOWS[..]),
        (
            number_group(cluster, appid, APP_QUOTA_KEY),
            format!("{appid}/{APP_QUOTA_KEY}"),
            &APP_SEND_WINDOWS[..],
        ),
    ] {
        match cluster
            .take_quota(group, Namespace::SmsQuota, &key, windows.to_vec())
            .await
        {
            Ok(_) => {}
            Err(ClusterError::QuotaExceeded(why)) => return Err(SmsError::Limit(why)),
            Err(e) => return Err(e.into()),
        }
    }
    let code = format!("{:06}", rand::rng().random_range(0..1_000_000u32));
    let sms_id = new_message(cluster, appid, req.number).await?;
    let now = now_ms();
    cluster
        .put_record(
            group,
            Namespace::SmsCode,
            &format!("{appid}/{number}/{code}"),
            json!({ "smsId": sms_id }),
            Some(now + CODE_TTL_MS),
        )
        .await?;
    match cluster
        .insert_record(
            cluster.app_record_group(Namespace::SmsCodeIndex, appid, &code),
            Namespace::SmsCodeIndex,
            &format!("{appid}/{code}"),
            json!({ "mobilePhoneNumber": req.number }),
            Some(now + CODE_TTL_MS),
        )
        .await
    {
        Ok(_) | Err(ClusterError::Conflict(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let content = render(
        &template.content,
        &code,
        CODE_TTL_MS / MINUTE_MS,
        &app.app_name,
    );
    let (counted_length, segments) = counted(&content);
    let sms = Sms {
        sms_id,
        app_id: appid.clone(),
        app_name: app.app_name.clone(),
        mobile_phone_number: req.number.to_string(),
        template: template.name,
        content,
        counted_length,
        segments,
    };
    tokio::spawn(deliver(cluster.clone(), provider, sms));
    Ok(sms_id)
}

/// Stores a new message record under a fresh smsId (an integer below 2^53, exact in JSON).
async fn new_message(cluster: &Cluster, app: &AppId, number: &str) -> Result<i64, SmsError> {
    for _ in 0..5 {
        let id = rand::rng().random_range(1..(1i64 << 53));
        let key = format!("{app}/{id}");
        let rec = json!({"mobilePhoneNumber": number, "state": "SENDING", "verified": false});
        match cluster
            .insert_record(
                message_group(cluster, app, &id.to_string()),
                Namespace::Sms,
                &key,
                rec,
                Some(now_ms() + RECORD_TTL_MS),
            )
            .await
        {
            Ok(_) => return Ok(id),
            Err(ClusterError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(SmsError::NoFreeId)
}

async fn set_message(cluster: &Cluster, app: &AppId, sms_id: i64, member: &str, v: Value) {
    let mut m = Map::new();
    m.insert(member.into(), v);
    let g = message_group(cluster, app, &sms_id.to_string());
    if let Err(e) = cluster
        .merge_record(g, Namespace::Sms, &format!("{app}/{sms_id}"), m)
        .await
    {
        tracing::warn!(sms_id, "recording the SMS {member}: {e}");
    }
}

async fn deliver(cluster: Cluster, provider: Arc<dyn SmsProvider>, sms: Sms) {
    let state = match provider.send(&sms).await {
        Ok(()) => "SUCCESS",
        Err(e) => {
            tracing::warn!(sms_id = sms.sms_id, to = %sms.mobile_phone_number, "{e}");
            "FAIL"
        }
    };
    set_message(&cluster, &sms.app_id, sms.sms_id, "state", json!(state)).await;
}

/// Uses up a live code sent to `number` (207 when there is none, it was used, it is not six
/// digits, or the number has had too many attempts).
pub async fn take_code(
    cluster: &Cluster,
    app: &AppId,
    number: &str,
    code: &str,
) -> Result<(), SmsError> {
    let Some(number) = phone::normalize(number) else {
        return Err(SmsError::WrongCode);
    };
    let number = number.as_str();
    if code.len() != 6 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SmsError::WrongCode);
    }
    let group = number_group(cluster, app, number);
    match cluster
        .take_quota(
            group,
            Namespace::SmsTries,
            &format!("{app}/{number}"),
            VERIFY_WINDOWS.to_vec(),
        )
        .await
    {
        Ok(_) => {}
        Err(ClusterError::QuotaExceeded(_)) => return Err(SmsError::WrongCode),
        Err(e) => return Err(e.into()),
    }
    let taken = cluster
        .take_record(group, Namespace::SmsCode, &format!("{app}/{number}/{code}"))
        .await?
        .ok_or(SmsError::WrongCode)?;
    if let Some(id) = taken["smsId"].as_i64() {
        set_message(cluster, app, id, "verified", json!(true)).await;
    }
    Ok(())
}

/// The number a live code was sent to, for requests that carry only the code (limited per
/// app by `RESET_LOOKUP_WINDOWS`).
pub async fn number_of_code(
    cluster: &Cluster,
    app: &AppId,
    code: &str,
) -> Result<Option<String>, SmsError> {
    if code.len() != 6 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    match cluster
        .take_quota(
            cluster.app_record_group(Namespace::SmsTries, app, "_lookups"),
            Namespace::SmsTries,
            &format!("{app}/_lookups"),
            RESET_LOOKUP_WINDOWS.to_vec(),
        )
        .await
    {
        Ok(_) => {}
        Err(ClusterError::QuotaExceeded(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let rec = cluster
        .get_record(
            cluster.app_record_group(Namespace::SmsCodeIndex, app, code),
            Namespace::SmsCodeIndex,
            &format!("{app}/{code}"),
        )
        .await?;
    Ok(rec.and_then(|r| r["mobilePhoneNumber"].as_str().map(str::to_string)))
}

/// `{sms_state, verify_state}` of a message of `app` (101 when unknown).
pub async fn query(cluster: &Cluster, app: &AppId, sms_id: &str) -> Result<Value, SmsError> {
    let unknown = || SmsError::UnknownMessage(sms_id.to_string());
    let id: i64 = sms_id.parse().map_err(|_| unknown())?;
    let rec = cluster
        .get_record(
            message_group(cluster, app, &id.to_string()),
            Namespace::Sms,
            &format!("{app}/{id}"),
        )
        .await?
        .ok_or_else(unknown)?;
    Ok(json!({
        "sms_state": rec["state"].as_str().unwrap_or("SENDING"),
        "verify_state": rec["verified"].as_bool().unwrap_or(false),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_length_and_segments_follow_spec_8() {
        assert_eq!(counted(&"a".repeat(64)), (70, 1));
        assert_eq!(counted(&"a".repeat(65)), (71, 2));
        assert_eq!(counted(&"a".repeat(128)), (134, 2));
        assert_eq!(counted(&"a".repeat(129)), (135, 3));
        assert_eq!(counted("验证码"), (9, 1), "characters, not bytes");
    }

    #[test]
    fn placeholders_are_filled() {
        assert_eq!(
            render(
                "%appname%: %smscode% (%ttl% min) %smscode%",
                "012345",
                10,
                "Shop"
            ),
            "Shop: 012345 (10 min) 012345"
        );
    }

    #[test]
    fn numbers_are_phone_numbers() {
        for ok in [
            "13800138000",
            "+8613800138000",
            "008613800138000",
            "138 0013 8000",
        ] {
            assert!(valid_number(ok), "{ok}");
        }
        for bad in ["", "12345", "123456", "+", "1380013800a", &"1".repeat(21)] {
            assert!(!valid_number(bad), "{bad}");
        }
    }

    #[test]
    fn templates_need_a_name_and_the_code_placeholder() {
        let t = |v: Value| Template::from_body(v.as_object().unwrap());
        let ok = t(json!({"name": "login", "content": "Code %smscode%", "captcha": true})).unwrap();
        assert!(ok.captcha);
        assert!(t(json!({"name": "login", "content": "no code"})).is_err());
        assert!(t(json!({"name": "bad name", "content": "%smscode%"})).is_err());
        assert!(t(json!({"content": "%smscode%"})).is_err());
        assert!(t(json!({"name": "x", "content": "%smscode%", "captcha": "yes"})).is_err());
    }
}
