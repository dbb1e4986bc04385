//! `GET /1/timestamp` (spec 4.1): the server's time, as unix seconds and as
//! `YYYY-mm-dd HH:ii:ss` in Beijing time (UTC+8, decisions.md).

use axum::Json;
use chrono::{FixedOffset, Utc};
use serde_json::{json, Value};

use super::context::RequestCtx;

const BEIJING_OFFSET_SECS: i32 = 8 * 3600;

pub async fn get_timestamp(_ctx: RequestCtx) -> Json<Value> {
    Json(timestamp_at(Utc::now()))
}

fn timestamp_at(now: chrono::DateTime<Utc>) -> Value {
    let datetime = FixedOffset::east_opt(BEIJING_OFFSET_SECS)
        .map(|tz| {
            now.with_timezone(&tz)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_default();
    json!({"timestamp": now.timestamp(), "datetime": datetime})
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn datetime_is_beijing_time() {
        let t = Utc.with_ymd_and_hms(2024, 1, 1, 20, 30, 0).unwrap();
        let v = timestamp_at(t);
        assert_eq!(v["timestamp"], 1_704_141_000);
        assert_eq!(v["datetime"], "2024-01-02 04:30:00");
    }
}
