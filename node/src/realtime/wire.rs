//! The one message model of every realtime transport: `{"name": .., "args": [ {..} ]}` —
//! what socket.io 0.9 carries after `5:::` — and how each transport frames it
//! (`Frame::websocket`, `Frame::socket_io`, `Frame::sse`).
//!
//! Clients send `client_sub` (and `client_unsub`, or `client_sub` with an `unsub_*` action);
//! the node sends `server_sub` (a subscription took effect), `server_pub` (an event),
//! `server_resync` (events may have been missed: read the state again), `server_error`, and on
//! socket.io `client_send_data` once connected (the hosted service's SDKs subscribe then).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::RealtimeError;

/// What a subscription listens to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Creates and updates of a class's objects.
    UpdateTable,
    /// Updates of one object.
    UpdateRow,
    /// Deletes of a class's objects.
    DeleteTable,
    /// The delete of one object.
    DeleteRow,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::UpdateTable => "updateTable",
            Action::UpdateRow => "updateRow",
            Action::DeleteTable => "deleteTable",
            Action::DeleteRow => "deleteRow",
        }
    }

    fn parse(s: &str) -> Option<Action> {
        match s {
            "updateTable" => Some(Action::UpdateTable),
            "updateRow" => Some(Action::UpdateRow),
            "deleteTable" => Some(Action::DeleteTable),
            "deleteRow" => Some(Action::DeleteRow),
            _ => None,
        }
    }

    /// Whether the action names one object.
    pub fn is_row(self) -> bool {
        matches!(self, Action::UpdateRow | Action::DeleteRow)
    }
}

/// A subscription as a client asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct SubRequest {
    /// The application id the client names (`appKey`).
    pub app_key: String,
    pub table: String,
    /// The object of a row action.
    pub object_id: Option<String>,
    pub action: Action,
    /// A filter on the class's objects (the REST `where`), table actions only.
    pub filter: Option<Map<String, Value>>,
    /// Acts as this session's user (else anonymous, or the connection's).
    pub session_token: Option<String>,
    /// Resume after this cursor of an earlier event.
    pub cursor: Option<String>,
}

/// What a client asks.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientMessage {
    Subscribe(SubRequest),
    Unsubscribe(SubRequest),
}

/// Reads a client's message: `{"name", "args": [{..}]}`, where the argument may also be a JSON
/// string of the object (as socket.io clients of the hosted service send it).
pub fn parse_client(text: &str) -> Result<ClientMessage, RealtimeError> {
    let msg: Value = serde_json::from_str(text)
        .map_err(|e| RealtimeError::InvalidMessage(format!("not JSON: {e}")))?;
    let name = msg
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RealtimeError::InvalidMessage("a message needs a name".into()))?;
    if name != "client_sub" && name != "client_unsub" {
        return Err(RealtimeError::InvalidMessage(format!(
            "unknown message {}",
            basalt_cluster::error::clip(name)
        )));
    }
    let arg = msg
        .get("args")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .ok_or_else(|| RealtimeError::InvalidMessage("a message needs args".into()))?;
    let arg: Map<String, Value> = match arg {
        Value::Object(m) => m.clone(),
        Value::String(s) => serde_json::from_str(s)
            .map_err(|_| RealtimeError::InvalidMessage("args[0] is not an object".into()))?,
        _ => {
            return Err(RealtimeError::InvalidMessage(
                "args[0] is not an object".into(),
            ))
        }
    };
    let text = |k: &str| -> Result<Option<String>, RealtimeError> {
        match arg.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(RealtimeError::InvalidMessage(format!(
                "{k} must be a string"
            ))),
        }
    };
    let action_text = text("action")?
        .ok_or_else(|| RealtimeError::InvalidMessage("a subscription needs an action".into()))?;
    let (unsub, action_name) = match action_text.strip_prefix("unsub_") {
        Some(a) => (true, a),
        None => (name == "client_unsub", action_text.as_str()),
    };
    let action = Action::parse(action_name).ok_or_else(|| {
        RealtimeError::InvalidMessage(format!(
            "unknown action {}",
            basalt_cluster::error::clip(&action_text)
        ))
    })?;
    let table = text("tableName")?
        .ok_or_else(|| RealtimeError::InvalidMessage("a subscription needs a tableName".into()))?;
    let object_id = text("objectId")?;
    if action.is_row() && object_id.is_none() {
        return Err(RealtimeError::InvalidMessage(format!(
            "{} needs an objectId",
            action.name()
        )));
    }
    let filter = match arg.get("where") {
        None | Some(Value::Null) => None,
        Some(Value::Object(w)) => Some(w.clone()),
        Some(Value::String(s)) => match serde_json::from_str(s) {
            Ok(Value::Object(w)) => Some(w),
            _ => {
                return Err(RealtimeError::InvalidWhere(
                    "where is not a JSON object".into(),
                ))
            }
        },
        Some(_) => {
            return Err(RealtimeError::InvalidWhere(
                "where is not a JSON object".into(),
            ))
        }
    };
    if filter.is_some() && action.is_row() {
        return Err(RealtimeError::InvalidWhere(
            "where applies to table subscriptions".into(),
        ));
    }
    let req = SubRequest {
        app_key: text("appKey")?.unwrap_or_default(),
        table,
        object_id: object_id.filter(|_| action.is_row()),
        action,
        filter,
        session_token: text("sessionToken")?,
        cursor: text("cursor")?,
    };
    Ok(match unsub {
        true => ClientMessage::Unsubscribe(req),
        false => ClientMessage::Subscribe(req),
    })
}

/// A message for one client: its name and its one argument as JSON text, and the cursor it
/// leaves the client at (events only).
#[derive(Debug, Clone)]
pub struct Outbound {
    pub name: &'static str,
    pub arg: Arc<str>,
    pub cursor: Option<Arc<str>>,
}

impl Outbound {
    pub fn new(name: &'static str, arg: &Value) -> Outbound {
        Outbound {
            name,
            arg: arg.to_string().into(),
            cursor: None,
        }
    }

    pub fn error(code: u32, error: &str, about: Option<&SubRequest>) -> Outbound {
        let mut arg = json!({"code": code, "error": error});
        if let Some(r) = about {
            arg["action"] = json!(r.action.name());
            arg["tableName"] = json!(r.table);
            arg["objectId"] = json!(r.object_id.clone().unwrap_or_default());
        }
        Outbound::new("server_error", &arg)
    }
}

/// How a transport writes an `Outbound`.
pub struct Frame;

impl Frame {
    /// A text frame of the plain WebSocket: the message as JSON.
    pub fn websocket(m: &Outbound) -> String {
        format!(r#"{{"name":"{}","args":[{}]}}"#, m.name, m.arg)
    }

    /// A socket.io 0.9 event frame: `5:::` and the message, its argument a JSON string (as the
    /// hosted service's SDKs parse it).
    pub fn socket_io(m: &Outbound) -> String {
        let arg = Value::String(m.arg.to_string());
        format!(r#"5:::{{"name":"{}","args":[{}]}}"#, m.name, arg)
    }

    /// An SSE event: the name, the cursor as its id, the argument as its data.
    pub fn sse(m: &Outbound) -> axum::response::sse::Event {
        let e = axum::response::sse::Event::default()
            .event(m.name)
            .data(m.arg.as_ref());
        match &m.cursor {
            Some(c) => e.id(c.as_ref()),
            None => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_parse_from_objects_and_from_json_strings() {
        let obj = r#"{"name":"client_sub","args":[{"appKey":"a","tableName":"Game","objectId":"","action":"updateTable"}]}"#;
        let text = r#"{"name":"client_sub","args":["{\"appKey\":\"a\",\"tableName\":\"Game\",\"objectId\":\"\",\"action\":\"updateTable\"}"]}"#;
        for m in [obj, text] {
            let ClientMessage::Subscribe(r) = parse_client(m).unwrap() else {
                panic!("not a subscription: {m}");
            };
            assert_eq!((r.app_key.as_str(), r.table.as_str()), ("a", "Game"));
            assert_eq!((r.action, r.object_id), (Action::UpdateTable, None));
        }
    }

    #[test]
    fn unsubscribing_is_told_by_the_action_or_the_name() {
        for m in [
            r#"{"name":"client_sub","args":[{"tableName":"G","objectId":"x","action":"unsub_deleteRow"}]}"#,
            r#"{"name":"client_unsub","args":[{"tableName":"G","objectId":"x","action":"unsub_deleteRow"}]}"#,
            r#"{"name":"client_unsub","args":[{"tableName":"G","objectId":"x","action":"deleteRow"}]}"#,
        ] {
            let ClientMessage::Unsubscribe(r) = parse_client(m).unwrap() else {
                panic!("not an unsubscription: {m}");
            };
            assert_eq!(r.action, Action::DeleteRow);
            assert_eq!(r.object_id.as_deref(), Some("x"));
        }
    }

    #[test]
    fn malformed_messages_are_errors() {
        for m in [
            "",
            "[]",
            r#"{"name":"client_sub"}"#,
            r#"{"name":"other","args":[{}]}"#,
            r#"{"name":"client_sub","args":[{"tableName":"G"}]}"#,
            r#"{"name":"client_sub","args":[{"tableName":"G","action":"updateRow"}]}"#,
            r#"{"name":"client_sub","args":[{"tableName":"G","action":"nope"}]}"#,
            r#"{"name":"client_sub","args":[{"tableName":7,"action":"updateTable"}]}"#,
            r#"{"name":"client_sub","args":[{"tableName":"G","action":"updateTable","where":[1]}]}"#,
            r#"{"name":"client_sub","args":["not json"]}"#,
        ] {
            assert!(parse_client(m).is_err(), "{m}");
        }
    }

    #[test]
    fn frames_carry_the_argument_as_each_transport_expects() {
        let m = Outbound::new("server_pub", &json!({"a": "x\"y"}));
        assert_eq!(
            Frame::websocket(&m),
            r#"{"name":"server_pub","args":[{"a":"x\"y"}]}"#
        );
        let io = Frame::socket_io(&m);
        let body: Value = serde_json::from_str(io.strip_prefix("5:::").unwrap()).unwrap();
        let arg: Value = serde_json::from_str(body["args"][0].as_str().unwrap()).unwrap();
        assert_eq!(arg, json!({"a": "x\"y"}));
    }
}
