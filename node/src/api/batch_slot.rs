//! A `/1/batch` operation's slot in the batch's answer, made from the answer the operation
//! would have had alone; `api::batch` (routed operations) and `api::object_writes` (grouped
//! ones) both answer through it, so a slot reads the same whichever way it ran.

use axum::http::StatusCode;
use serde_json::{json, Value};

use super::error::BUSY_MESSAGE;

/// An operation's slot in the batch's answer, from the answer it would have had alone:
/// `{"success": body}`, or `{"error": {code, error}}`.
pub async fn slot(resp: axum::response::Response, max_bytes: usize) -> Value {
    let status = resp.status();
    let bytes = match axum::body::to_bytes(resp.into_body(), max_bytes).await {
        Ok(b) => b,
        Err(e) => return slot_error(500, &format!("reading the answer: {e}")),
    };
    let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if status.is_success() {
        json!({ "success": answer })
    } else {
        let code = answer["code"]
            .as_u64()
            .unwrap_or(u64::from(status.as_u16()));
        let error =
            answer["error"]
                .as_str()
                .unwrap_or(if status == StatusCode::INTERNAL_SERVER_ERROR {
                    BUSY_MESSAGE
                } else {
                    "request failed"
                });
        slot_error(code, error)
    }
}

pub fn slot_error(code: u64, error: &str) -> Value {
    json!({"error": {"code": code, "error": error}})
}
