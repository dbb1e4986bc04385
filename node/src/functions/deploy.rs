//! What a deploy (`PUT /1/functions/<name>`) asks for: the source as the body with its options
//! in the query, or `{source, trigger, className, cron}` as JSON; checked here (UTF-8, size,
//! trigger event and class, cron expression, not both) before `record::deploy` stores it.
//! Caller: `api::functions`.

use serde::Deserialize;
use serde_json::Value;

use super::record::{self, FunctionRecord, Trigger, TriggerEvent};
use super::FunctionsError;

/// Query parameters of a deploy whose body is the source.
#[derive(Debug, Default, Deserialize)]
pub struct DeployParams {
    pub trigger: Option<String>,
    #[serde(rename = "class")]
    pub class_name: Option<String>,
    pub cron: Option<String>,
}

/// What a deploy asks for, from its body and query.
pub fn deploy_request(
    name: &str,
    body: &[u8],
    params: DeployParams,
) -> Result<FunctionRecord, FunctionsError> {
    let invalid = |m: String| FunctionsError::Invalid(m);
    let structured = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.as_object().cloned())
        .filter(|o| o.contains_key("source"));
    let (source, trigger, class, cron) = match structured {
        Some(o) => {
            let text = |k: &str| -> Result<Option<String>, FunctionsError> {
                match o.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(invalid(format!("{k} must be a string."))),
                }
            };
            for k in o.keys() {
                if !["source", "trigger", "className", "cron"].contains(&k.as_str()) {
                    return Err(invalid(format!(
                        "unknown member {k:?} (members: source, trigger, className, cron)."
                    )));
                }
            }
            (
                text("source")?.unwrap_or_default(),
                text("trigger")?,
                text("className")?,
                text("cron")?,
            )
        }
        None => (
            String::from_utf8(body.to_vec())
                .map_err(|_| invalid("the source must be UTF-8 text.".into()))?,
            params.trigger,
            params.class_name,
            params.cron,
        ),
    };
    if source.trim().is_empty() {
        return Err(invalid("the function's source is empty.".into()));
    }
    if source.len() > record::MAX_SOURCE_BYTES {
        return Err(invalid(format!(
            "the function's source is larger than {} KiB.",
            record::MAX_SOURCE_BYTES >> 10
        )));
    }
    let trigger = match (trigger, class) {
        (None, None) => None,
        (Some(event), Some(class)) => {
            let event = TriggerEvent::parse(&event).ok_or_else(|| {
                invalid(format!(
                    "unknown trigger {event:?} (beforeSave, afterSave, beforeDelete, afterDelete)."
                ))
            })?;
            record::check_trigger_class(&class)?;
            Some(Trigger {
                event,
                class_name: class,
            })
        }
        _ => return Err(invalid("a trigger names its event and its class.".into())),
    };
    if let Some(c) = &cron {
        super::cron::parse(c).map_err(invalid)?;
        if trigger.is_some() {
            return Err(invalid(
                "a function is a trigger or scheduled, not both.".into(),
            ));
        }
    }
    Ok(FunctionRecord {
        name: name.to_string(),
        version: 0,
        source,
        trigger,
        cron,
        updated_ms: chrono::Utc::now().timestamp_millis(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deploys_read_their_source_and_options() {
        let r = deploy_request("add", b"return 1;", DeployParams::default()).unwrap();
        assert_eq!(
            (r.source.as_str(), r.trigger, r.cron),
            ("return 1;", None, None)
        );
        let params = DeployParams {
            trigger: Some("beforeSave".into()),
            class_name: Some("Game".into()),
            cron: None,
        };
        let r = deploy_request("t", b"return;", params).unwrap();
        assert_eq!(
            r.trigger,
            Some(Trigger {
                event: TriggerEvent::BeforeSave,
                class_name: "Game".into()
            })
        );
        let body = br#"{"source": "return 2;", "cron": "*/5 * * * * *"}"#;
        let r = deploy_request("c", body, DeployParams::default()).unwrap();
        assert_eq!(r.source, "return 2;");
        assert_eq!(r.cron.as_deref(), Some("*/5 * * * * *"));
        for (body, params) in [
            (&b""[..], DeployParams::default()),
            (b"  ", DeployParams::default()),
            (br#"{"source": 1}"#, DeployParams::default()),
            (br#"{"source": "x", "other": 1}"#, DeployParams::default()),
            (br#"{"source": "x", "cron": "not a cron"}"#, DeployParams::default()),
            (br#"{"source": "x", "trigger": "beforeSave"}"#, DeployParams::default()),
            (
                br#"{"source": "x", "trigger": "onSave", "className": "A"}"#,
                DeployParams::default(),
            ),
            (
                br#"{"source": "x", "trigger": "afterSave", "className": "A", "cron": "* * * * *"}"#,
                DeployParams::default(),
            ),
            (b"\xff\xfe", DeployParams::default()),
        ] {
            assert!(
                deploy_request("f", body, params).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
