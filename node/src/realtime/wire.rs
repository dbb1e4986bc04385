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

use super::body::Body;
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

/// A message for one client: its name, its one argument as JSON text — `head`, then the
/// shared `body` if any, then `tail` — and the cursor it leaves the client at (events only).
/// An event's object is its `body`, rendered once for every subscriber that sees it alike.
#[derive(Debug, Clone)]
pub struct Outbound {
    pub name: &'static str,
    pub head: Box<str>,
    pub body: Option<Body>,
    pub tail: &'static str,
    pub cursor: Option<Arc<str>>,
}

impl Outbound {
    pub fn new(name: &'static str, arg: &Value) -> Outbound {
        Outbound {
            name,
            head: arg.to_string().into(),
            body: None,
            tail: "",
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

    /// The argument's text, piece by piece.
    pub fn arg_pieces(&self) -> [&str; 3] {
        let body = self.body.as_ref().map_or("", Body::as_str);
        [&self.head, body, self.tail]
    }

    /// The argument's text whole (a copy: for small messages and tests).
    pub fn arg(&self) -> String {
        self.arg_pieces().concat()
    }

    /// The bytes the message holds of its own (not its shared body).
    pub fn own_bytes(&self) -> usize {
        self.head.len() + self.cursor.as_ref().map_or(0, |c| c.len()) + 64
    }

    /// The bytes the message stands for, its body included.
    pub fn bytes(&self) -> usize {
        self.own_bytes() + self.body.as_ref().map_or(0, Body::len)
    }
}

/// Largest piece of a message a transport writes at once: a larger message goes out as
/// several (WebSocket fragments, SSE body chunks), so no connection ever holds a whole copy
/// of it, however slowly its client reads.
pub const PIECE: usize = 16 * 1024;

/// How a transport writes an `Outbound`: its text in pieces of at most about `PIECE` bytes.
pub struct Frame;

impl Frame {
    /// A text frame of the plain WebSocket: the message as JSON.
    pub fn websocket(m: &Outbound) -> Pieces {
        Pieces::new(format!(r#"{{"name":"{}","args":["#, m.name), m, "]}", false)
    }

    /// A socket.io 0.9 event frame: `5:::` and the message, its argument a JSON string (as the
    /// hosted service's SDKs parse it).
    pub fn socket_io(m: &Outbound) -> Pieces {
        Pieces::new(
            format!(r#"5:::{{"name":"{}","args":[""#, m.name),
            m,
            r#""]}"#,
            true,
        )
    }

    /// An SSE event: the name, the cursor as its id, the argument (one line of JSON) as its
    /// data.
    pub fn sse(m: &Outbound) -> Pieces {
        let mut first = format!("event: {}\n", m.name);
        if let Some(c) = &m.cursor {
            first.push_str("id: ");
            first.push_str(c);
            first.push('\n');
        }
        first.push_str("data: ");
        Pieces::new(first, m, "\n\n", false)
    }
}

/// A message's text in pieces, each made when asked for: the frame's opening, the argument
/// (written as the inside of a JSON string when `escaped`), the frame's closing. It holds the
/// message's object shared, never a copy of it.
pub struct Pieces {
    open: String,
    head: Box<str>,
    body: Option<Body>,
    tail: &'static str,
    close: &'static str,
    escaped: bool,
    /// The part being written (in the order above), and how far into it.
    part: usize,
    at: usize,
}

impl Pieces {
    fn new(open: String, m: &Outbound, close: &'static str, escaped: bool) -> Pieces {
        Pieces {
            open,
            head: m.head.clone(),
            body: m.body.clone(),
            tail: m.tail,
            close,
            escaped,
            part: 0,
            at: 0,
        }
    }

    /// Part `i`'s text, and whether it is escaped; `None` past the last.
    fn part(&self, i: usize) -> Option<(&str, bool)> {
        Some(match i {
            0 => (self.open.as_str(), false),
            1 => (&*self.head, self.escaped),
            2 => (self.body.as_ref().map_or("", Body::as_str), self.escaped),
            3 => (self.tail, self.escaped),
            4 => (self.close, false),
            _ => return None,
        })
    }
}

impl Iterator for Pieces {
    type Item = String;

    /// The next piece: at least one byte, at most about `PIECE` bytes of the parts (up to six
    /// times that once escaped), cut between characters.
    fn next(&mut self) -> Option<String> {
        let mut out = String::new();
        while out.len() < PIECE {
            let Some((text, escaped)) = self.part(self.part) else {
                break;
            };
            let rest = &text[self.at..];
            if rest.is_empty() {
                self.part += 1;
                self.at = 0;
                continue;
            }
            let mut end = rest.len().min(PIECE - out.len());
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            if end == 0 {
                // A character that does not fit what is left of this piece starts the next.
                break;
            }
            let slice = &rest[..end];
            if escaped {
                let quoted = Value::String(slice.to_string()).to_string();
                out.push_str(&quoted[1..quoted.len() - 1]);
            } else {
                out.push_str(slice);
            }
            self.at += end;
        }
        (!out.is_empty()).then_some(out)
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
        let ws: Vec<String> = Frame::websocket(&m).collect();
        assert_eq!(ws, [r#"{"name":"server_pub","args":[{"a":"x\"y"}]}"#]);
        let io = Frame::socket_io(&m).collect::<String>();
        let body: Value = serde_json::from_str(io.strip_prefix("5:::").unwrap()).unwrap();
        let arg: Value = serde_json::from_str(body["args"][0].as_str().unwrap()).unwrap();
        assert_eq!(arg, json!({"a": "x\"y"}));
        let sse = Frame::sse(&m).collect::<String>();
        assert_eq!(sse, "event: server_pub\ndata: {\"a\":\"x\\\"y\"}\n\n");
    }

    /// A large event with its object shared: every transport writes it in pieces of about
    /// `PIECE` bytes, cut between characters, that join into the whole message.
    #[test]
    fn a_large_message_goes_out_in_pieces_that_join_into_it() {
        let object = json!({"s": "é\"\n€".repeat(20_000), "n": 1}).to_string();
        let m = Outbound {
            name: "server_pub",
            head: r#"{"event":"create","data":"#.into(),
            body: Some(Body::new(object.clone())),
            tail: "}",
            cursor: Some("c1".into()),
        };
        let whole = format!(r#"{{"event":"create","data":{object}}}"#);
        assert_eq!(m.arg(), whole);

        let ws: Vec<String> = Frame::websocket(&m).collect();
        assert!(ws.len() > 10, "{} pieces", ws.len());
        assert!(ws.iter().all(|p| !p.is_empty() && p.len() <= PIECE));
        let joined: Value = serde_json::from_str(&ws.concat()).unwrap();
        assert_eq!(
            joined["args"][0],
            serde_json::from_str::<Value>(&whole).unwrap()
        );

        let io: Vec<String> = Frame::socket_io(&m).collect();
        assert!(io.iter().all(|p| p.len() <= 6 * PIECE));
        let joined = io.concat();
        let body: Value = serde_json::from_str(joined.strip_prefix("5:::").unwrap()).unwrap();
        assert_eq!(body["args"][0].as_str(), Some(whole.as_str()));

        let sse = Frame::sse(&m).collect::<String>();
        assert_eq!(sse, format!("event: server_pub\nid: c1\ndata: {whole}\n\n"));
    }
}
