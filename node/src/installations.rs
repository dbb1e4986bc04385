//! Device installations (spec 2.5, 4.12): the rules of an installation's identifying fields.
//! A new installation names its `deviceType` (`ios`, `android`, `windows phone`) and what
//! identifies the device on that platform — an iOS `deviceToken`, an Android `installationId`,
//! a Windows Phone `notificationUri` (`check_new`, 131 otherwise); once stored, `deviceType`,
//! `deviceToken` and `installationId` never change (`check_change`, 136), though one that was
//! never set may be. `installationId` and `deviceToken` are unique in an app
//! (`users::unique`), which is how an installation sent again updates the one already stored.
//! The handlers are `api::installations`; push targets these objects (`where` over
//! `_Installation`).

use basalt_cluster::names::ClassName;
use serde_json::{Map, Value};

/// The class of installations.
pub static INSTALLATION_CLASS: ClassName = ClassName::service("_Installation");

/// Fields a stored installation keeps: a later write may set one it lacks, never change it.
pub const READ_ONLY: [&str; 3] = ["deviceType", "deviceToken", "installationId"];

/// Why an installation write is refused; `api::error` gives each its code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstallationError {
    /// A missing or invalid device type, token, id or notification uri (131).
    #[error("{0}")]
    Invalid(String),
    /// A change of a field that never changes once set (136).
    #[error("{0} is read-only once set.")]
    ReadOnly(&'static str),
}

/// The platforms an installation can be on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceType {
    Ios,
    Android,
    WindowsPhone,
}

impl DeviceType {
    pub fn parse(s: &str) -> Option<DeviceType> {
        match s {
            "ios" => Some(DeviceType::Ios),
            "android" => Some(DeviceType::Android),
            "windows phone" => Some(DeviceType::WindowsPhone),
            _ => None,
        }
    }
}

/// What identifies a new installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub device_type: DeviceType,
    pub installation_id: Option<String>,
    pub device_token: Option<String>,
}

/// An `installationId`: 1 to 128 letters, digits, `-`, `_`, `.` or `:` (the SDKs send UUIDs).
fn valid_installation_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// A `deviceToken` of `device`: iOS (APNs) tokens are hex, at least 32 digits; others (FCM
/// registration tokens) any printable text without spaces, at most 4,096 characters.
fn valid_device_token(device: DeviceType, token: &str) -> bool {
    match device {
        DeviceType::Ios => {
            (32..=512).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_hexdigit())
        }
        _ => {
            (1..=4096).contains(&token.len())
                && token.chars().all(|c| !c.is_whitespace() && !c.is_control())
        }
    }
}

/// A Windows Phone `notificationUri`: an http(s) url of at most 2,048 characters.
fn valid_notification_uri(uri: &str) -> bool {
    uri.len() <= 2048
        && (uri.starts_with("https://") || uri.starts_with("http://"))
        && uri.len() > "https://".len()
        && !uri.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn invalid(what: impl Into<String>) -> InstallationError {
    InstallationError::Invalid(what.into())
}

/// The string member `field` of `body`: `None` when absent or null, 131 when not a string.
fn string_member<'a>(
    body: &'a Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, InstallationError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(invalid(format!("{field} must be a string, not {other}."))),
    }
}

/// Checks the identifying fields of a new installation's body; an iOS `deviceToken` is
/// rewritten in lowercase (APNs tokens are hex, whatever case a client sends them in: one
/// device is one token).
pub fn check_new(body: &mut Map<String, Value>) -> Result<Identity, InstallationError> {
    if body.get("deviceType").and_then(Value::as_str) == Some("ios") {
        if let Some(Value::String(token)) = body.get_mut("deviceToken") {
            token.make_ascii_lowercase();
        }
    }
    let device_type = match string_member(body, "deviceType")? {
        None => return Err(invalid("deviceType is required.")),
        Some(t) => DeviceType::parse(t).ok_or_else(|| {
            invalid(format!(
                "invalid deviceType {t:?}: ios, android or windows phone."
            ))
        })?,
    };
    let installation_id = string_member(body, "installationId")?;
    if let Some(id) = installation_id {
        if !valid_installation_id(id) {
            return Err(invalid(format!("invalid installationId {id:?}.")));
        }
    }
    let device_token = string_member(body, "deviceToken")?;
    if let Some(token) = device_token {
        if !valid_device_token(device_type, token) {
            return Err(invalid(format!("invalid deviceToken {token:?}.")));
        }
    }
    let uri = string_member(body, "notificationUri")?;
    if let Some(uri) = uri {
        if !valid_notification_uri(uri) {
            return Err(invalid(format!("invalid notificationUri {uri:?}.")));
        }
    }
    match device_type {
        DeviceType::Ios if device_token.is_none() => {
            return Err(invalid("an ios installation needs its deviceToken."))
        }
        DeviceType::Android if installation_id.is_none() => {
            return Err(invalid("an android installation needs its installationId."))
        }
        DeviceType::WindowsPhone if uri.is_none() => {
            return Err(invalid(
                "a windows phone installation needs its notificationUri.",
            ))
        }
        _ => {}
    }
    Ok(Identity {
        device_type,
        installation_id: installation_id.map(str::to_string),
        device_token: device_token.map(str::to_string),
    })
}

/// Checks a change of the stored installation `current` by the body `change`: the read-only
/// fields keep their values (136) — one never set may be set, valid for its device (131) —
/// and a `notificationUri` stays valid. Answers the read-only fields it sets for the first time.
pub fn check_change(
    current: &Map<String, Value>,
    change: &Map<String, Value>,
) -> Result<Vec<(&'static str, String)>, InstallationError> {
    let device = current
        .get("deviceType")
        .and_then(Value::as_str)
        .and_then(DeviceType::parse);
    let mut first_set = Vec::new();
    for field in READ_ONLY {
        let Some(new) = change.get(field) else {
            continue;
        };
        match current.get(field) {
            Some(old) if old == new => continue,
            Some(old) if !old.is_null() => return Err(InstallationError::ReadOnly(field)),
            _ => {}
        }
        let Some(new) = new.as_str() else {
            return Err(InstallationError::ReadOnly(field));
        };
        let valid = match field {
            "installationId" => valid_installation_id(new),
            "deviceToken" => valid_device_token(device.unwrap_or(DeviceType::Android), new),
            // A stored installation always has its type.
            _ => false,
        };
        if !valid {
            return Err(invalid(format!("invalid {field} {new:?}.")));
        }
        first_set.push((field, new.to_string()));
    }
    if let Some(uri) = string_member(change, "notificationUri")? {
        if !valid_notification_uri(uri) {
            return Err(invalid(format!("invalid notificationUri {uri:?}.")));
        }
    }
    Ok(first_set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn each_platform_needs_what_identifies_its_devices() {
        let mut upper = map(json!({"deviceType": "ios", "deviceToken": TOKEN.to_uppercase()}));
        let ios = check_new(&mut upper).unwrap();
        assert_eq!(upper["deviceToken"], TOKEN);
        assert_eq!(ios.device_type, DeviceType::Ios);
        assert_eq!(ios.device_token.as_deref(), Some(TOKEN));
        let android = check_new(&mut map(
            json!({"deviceType": "android", "installationId": "3b2e-11", "deviceToken": "fcm:tok_en-1"}),
        ))
        .unwrap();
        assert_eq!(android.installation_id.as_deref(), Some("3b2e-11"));
        assert!(check_new(&mut map(
            json!({"deviceType": "windows phone", "notificationUri": "https://db3.notify.live.net/x"})
        ))
        .is_ok());
        for bad in [
            json!({}),
            json!({"deviceType": "blackberry", "installationId": "a"}),
            json!({"deviceType": 1, "installationId": "a"}),
            json!({"deviceType": "ios"}),
            json!({"deviceType": "ios", "deviceToken": "not hex at all, not even close to it"}),
            json!({"deviceType": "ios", "deviceToken": "abcd"}),
            json!({"deviceType": "android"}),
            json!({"deviceType": "android", "installationId": "has space"}),
            json!({"deviceType": "android", "installationId": ""}),
            json!({"deviceType": "android", "installationId": 7}),
            json!({"deviceType": "windows phone"}),
            json!({"deviceType": "windows phone", "notificationUri": "ftp://x"}),
        ] {
            assert!(
                matches!(
                    check_new(&mut map(bad.clone())),
                    Err(InstallationError::Invalid(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn read_only_fields_keep_their_values_and_may_be_set_once() {
        let current = map(json!({"deviceType": "android", "installationId": "a1"}));
        assert_eq!(
            check_change(
                &current,
                &map(json!({"channels": ["x"], "installationId": "a1"}))
            ),
            Ok(vec![])
        );
        assert_eq!(
            check_change(&current, &map(json!({"installationId": "a2"}))),
            Err(InstallationError::ReadOnly("installationId"))
        );
        assert_eq!(
            check_change(&current, &map(json!({"deviceType": "ios"}))),
            Err(InstallationError::ReadOnly("deviceType"))
        );
        assert_eq!(
            check_change(&current, &map(json!({"deviceToken": "tok"}))),
            Ok(vec![("deviceToken", "tok".to_string())])
        );
        assert!(matches!(
            check_change(&current, &map(json!({"deviceToken": "t o k"}))),
            Err(InstallationError::Invalid(_))
        ));
        assert_eq!(
            check_change(
                &current,
                &map(json!({"installationId": {"__op": "Delete"}}))
            ),
            Err(InstallationError::ReadOnly("installationId"))
        );
    }
}
