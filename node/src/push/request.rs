//! A push as asked (`POST /1/push`, spec 4.12): `parse` checks the body and answers a
//! `PushRequest` — the payload, the query over `_Installation` that selects its devices
//! (`channels` folded in; none is everyone), when to send it and when it expires — or the
//! documented code: 141 no `data`, 142 a time not `YYYY-mm-dd HH:ii:ss`, 143 an interval that
//! is not a number, 144 a time already past.

use basalt_cluster::object::parse_wire_time;
use serde_json::{json, Map, Value};

/// How far in the past a `push_time` may be and still mean "now" (a client's clock, a time
/// written to the second).
pub const PAST_TOLERANCE_MS: i64 = 60_000;

/// The largest payload (`data` as JSON text).
pub const MAX_DATA_BYTES: usize = 64 * 1024;

/// Why a push body is refused; `api::error` gives each its code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushRequestError {
    /// 141.
    #[error("a push needs its data (an object).")]
    MissingData,
    /// 142.
    #[error("{0} must be a time written YYYY-mm-dd HH:ii:ss.")]
    BadTime(&'static str),
    /// 143.
    #[error("expiration_interval must be a number of seconds.")]
    BadInterval,
    /// 144.
    #[error("{0} is already past.")]
    Past(&'static str),
    /// 102: `where` that is not an object.
    #[error("{0}")]
    BadWhere(String),
    /// 107: `channels` that is not an array of strings, both expiries given, or `data` over
    /// `MAX_DATA_BYTES`.
    #[error("{0}")]
    BadBody(String),
}

/// What to send, to which installations, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct PushRequest {
    /// The payload, reserved keys and custom keys as sent.
    pub data: Map<String, Value>,
    /// A `where` over `_Installation`; empty for every installation.
    pub query: Map<String, Value>,
    /// When to send it (ms since the epoch): `push_time`, or now.
    pub send_ms: i64,
    /// Whether `push_time` put it in the future.
    pub scheduled: bool,
    /// When it may no longer be sent, if ever.
    pub expires_ms: Option<i64>,
}

/// The time member `field` of `body`, when present.
fn time_member(
    body: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<i64>, PushRequestError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_wire_time(s.trim())
            .map(|t| Some(t.timestamp_millis()))
            .ok_or(PushRequestError::BadTime(field)),
        Some(_) => Err(PushRequestError::BadTime(field)),
    }
}

/// Checks a push body received at `now_ms`.
pub fn parse(body: &Map<String, Value>, now_ms: i64) -> Result<PushRequest, PushRequestError> {
    let data = match body.get("data") {
        Some(Value::Object(data)) => data.clone(),
        _ => return Err(PushRequestError::MissingData),
    };
    // Kept in the push's record, which every page rewrites; the services take 4 KiB.
    if Value::Object(data.clone()).to_string().len() > MAX_DATA_BYTES {
        return Err(PushRequestError::BadBody(format!(
            "data holds more than {} KiB of JSON.",
            MAX_DATA_BYTES / 1024
        )));
    }
    let mut query = match body.get("where") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(w)) => w.clone(),
        Some(other) => {
            return Err(PushRequestError::BadWhere(format!(
                "where must be a query object, not {other}."
            )))
        }
    };
    match body.get("channels") {
        None | Some(Value::Null) => {}
        Some(Value::Array(channels)) if channels.iter().all(Value::is_string) => {
            let condition = json!({"$in": channels});
            query = if query.is_empty() {
                Map::from_iter([("channels".to_string(), condition)])
            } else {
                Map::from_iter([(
                    "$and".to_string(),
                    json!([Value::Object(query), {"channels": condition}]),
                )])
            };
        }
        Some(_) => {
            return Err(PushRequestError::BadBody(
                "channels must be an array of channel names.".into(),
            ))
        }
    }
    let push_time = time_member(body, "push_time")?;
    if push_time.is_some_and(|t| t < now_ms - PAST_TOLERANCE_MS) {
        return Err(PushRequestError::Past("push_time"));
    }
    let send_ms = push_time.map_or(now_ms, |t| t.max(now_ms));
    let expiration_time = time_member(body, "expiration_time")?;
    let interval = match body.get("expiration_interval") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(n.as_f64().ok_or(PushRequestError::BadInterval)?),
        Some(_) => return Err(PushRequestError::BadInterval),
    };
    let expires_ms = match (expiration_time, interval) {
        (Some(_), Some(_)) => {
            return Err(PushRequestError::BadBody(
                "give expiration_time or expiration_interval, not both.".into(),
            ))
        }
        (Some(t), None) => {
            if t <= send_ms {
                return Err(PushRequestError::Past("expiration_time"));
            }
            Some(t)
        }
        (None, Some(seconds)) => {
            if !seconds.is_finite() || seconds > 1e12 {
                return Err(PushRequestError::BadInterval);
            }
            if seconds <= 0.0 {
                return Err(PushRequestError::Past("expiration_interval"));
            }
            Some(send_ms + (seconds * 1000.0) as i64)
        }
        (None, None) => None,
    };
    Ok(PushRequest {
        data,
        query,
        send_ms,
        scheduled: push_time.is_some_and(|t| t > now_ms),
        expires_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-24 12:00:00 UTC.
    const NOW: i64 = 1_795_521_600_000;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn payloads_are_bounded() {
        let big = "x".repeat(MAX_DATA_BYTES);
        assert!(matches!(
            parse(&body(json!({"data": {"alert": big}})), NOW),
            Err(PushRequestError::BadBody(_))
        ));
        let fits = "x".repeat(MAX_DATA_BYTES - 20);
        assert!(parse(&body(json!({"data": {"alert": fits}})), NOW).is_ok());
    }

    #[test]
    fn a_push_to_everyone_now() {
        let p = parse(&body(json!({"data": {"alert": "hi", "custom": 1}})), NOW).unwrap();
        assert_eq!(p.data["alert"], "hi");
        assert!(p.query.is_empty());
        assert_eq!((p.send_ms, p.scheduled, p.expires_ms), (NOW, false, None));
    }

    #[test]
    fn channels_narrow_the_query() {
        let p = parse(&body(json!({"data": {}, "channels": ["a", "b"]})), NOW).unwrap();
        assert_eq!(
            Value::Object(p.query),
            json!({"channels": {"$in": ["a", "b"]}})
        );
        let p = parse(
            &body(json!({"data": {}, "channels": ["a"], "where": {"deviceType": "ios"}})),
            NOW,
        )
        .unwrap();
        assert_eq!(
            Value::Object(p.query),
            json!({"$and": [{"deviceType": "ios"}, {"channels": {"$in": ["a"]}}]})
        );
    }

    #[test]
    fn times_schedule_and_expire_it() {
        let p = parse(
            &body(
                json!({"data": {}, "push_time": "2026-11-24 13:00:00", "expiration_interval": 600}),
            ),
            NOW,
        )
        .unwrap();
        assert!(p.scheduled);
        assert_eq!(p.send_ms, NOW + 3_600_000);
        assert_eq!(p.expires_ms, Some(NOW + 4_200_000));
        let p = parse(
            &body(json!({"data": {}, "expiration_time": "2026-11-25 12:00:00"})),
            NOW,
        )
        .unwrap();
        assert_eq!(p.expires_ms, Some(NOW + 86_400_000));
        // A push_time a few seconds past is now.
        let p = parse(
            &body(json!({"data": {}, "push_time": "2026-11-24 11:59:58"})),
            NOW,
        )
        .unwrap();
        assert_eq!((p.send_ms, p.scheduled), (NOW, false));
    }

    #[test]
    fn each_fault_has_its_code() {
        use PushRequestError::*;
        let cases = [
            (json!({}), MissingData),
            (json!({"data": "hi"}), MissingData),
            (
                json!({"data": {}, "push_time": "tomorrow"}),
                BadTime("push_time"),
            ),
            (json!({"data": {}, "push_time": 5}), BadTime("push_time")),
            (
                json!({"data": {}, "expiration_time": "2026/11/25"}),
                BadTime("expiration_time"),
            ),
            (
                json!({"data": {}, "expiration_interval": "600"}),
                BadInterval,
            ),
            (
                json!({"data": {}, "push_time": "2026-11-23 12:00:00"}),
                Past("push_time"),
            ),
            (
                json!({"data": {}, "expiration_time": "2026-11-24 11:00:00"}),
                Past("expiration_time"),
            ),
            (
                json!({"data": {}, "push_time": "2026-11-24 13:00:00", "expiration_time": "2026-11-24 12:30:00"}),
                Past("expiration_time"),
            ),
            (
                json!({"data": {}, "expiration_interval": -5}),
                Past("expiration_interval"),
            ),
        ];
        for (b, want) in cases {
            assert_eq!(parse(&body(b.clone()), NOW), Err(want), "{b}");
        }
        assert!(matches!(
            parse(&body(json!({"data": {}, "where": []})), NOW),
            Err(BadWhere(_))
        ));
        assert!(matches!(
            parse(&body(json!({"data": {}, "channels": "a"})), NOW),
            Err(BadBody(_))
        ));
        assert!(matches!(
            parse(
                &body(
                    json!({"data": {}, "expiration_time": "2026-11-25 12:00:00", "expiration_interval": 5})
                ),
                NOW
            ),
            Err(BadBody(_))
        ));
    }
}
