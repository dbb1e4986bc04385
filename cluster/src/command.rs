//! Every replicated mutation (`Command`) and its outcome (`CommandResult`), plus the reads a
//! group's leader serves (`ReadRequest` / `ReadResponse`).
//!
//! Commands are stored in Raft logs, so their encoding is a format: variants are only ever
//! added, never changed or renumbered. Everything apply needs (objectIds, timestamps, tokens)
//! is chosen by the proposing node and carried here, so apply is deterministic.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Error;
use crate::query::ScanRequest;
use crate::update::FieldUpdate;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Create an object with the given updates applied to an empty object.
    CreateObject {
        app: String,
        class: String,
        object_id: String,
        now_ms: i64,
        updates: Vec<FieldUpdate>,
    },
    /// Apply updates to an existing object.
    UpdateObject {
        app: String,
        class: String,
        object_id: String,
        now_ms: i64,
        updates: Vec<FieldUpdate>,
    },
    /// Delete an object.
    DeleteObject {
        app: String,
        class: String,
        object_id: String,
    },
    /// Write a record (metadata, tokens, codes) in namespace `ns`, optionally expiring.
    PutRecord {
        ns: String,
        key: String,
        value: Value,
        expires_at_ms: Option<i64>,
    },
    /// Delete a record.
    DeleteRecord { ns: String, key: String },
    /// Delete every record whose expiry is at or before `now_ms` (the TTL sweep).
    ExpireRecords { now_ms: i64 },
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::CreateObject {
                app,
                class,
                object_id,
                ..
            } => {
                write!(f, "CreateObject({app}/{class}/{object_id})")
            }
            Command::UpdateObject {
                app,
                class,
                object_id,
                ..
            } => {
                write!(f, "UpdateObject({app}/{class}/{object_id})")
            }
            Command::DeleteObject {
                app,
                class,
                object_id,
            } => {
                write!(f, "DeleteObject({app}/{class}/{object_id})")
            }
            Command::PutRecord { ns, key, .. } => write!(f, "PutRecord({ns}/{key})"),
            Command::DeleteRecord { ns, key } => write!(f, "DeleteRecord({ns}/{key})"),
            Command::ExpireRecords { now_ms } => write!(f, "ExpireRecords({now_ms})"),
        }
    }
}

/// The outcome of applying one command. A rejected command changed nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CommandResult {
    /// No payload: a blank or membership entry.
    None,
    Created {
        object_id: String,
        created_ms: i64,
    },
    Updated {
        updated_ms: i64,
    },
    Deleted,
    Done,
    Expired {
        count: u64,
    },
    Rejected(Error),
}

/// A read served by a group's leader after it confirmed its leadership (read index).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReadRequest {
    GetObject {
        app: String,
        class: String,
        object_id: String,
    },
    GetRecord {
        ns: String,
        key: String,
    },
    ScanObjects(ScanRequest),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReadResponse {
    /// A rendered object (with its reserved fields), or none.
    Object(Option<Value>),
    Record(Option<Value>),
    /// The shard's rows for a scan: at most `skip + limit`, in the requested order, and the
    /// number of matching objects on the shard.
    Scan {
        rows: Vec<Value>,
        count: u64,
    },
}

/// A committed proposal: its result and the index of the log entry that carries it in its group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposed {
    pub result: CommandResult,
    pub log_index: u64,
}
