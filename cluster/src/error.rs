//! `cluster::Error`: every condition the cluster reports to its callers, named by condition.
//!
//! The enum is serialisable so that an error raised on a remote node (a forwarded proposal or
//! read) crosses gRPC typed and reaches the API layer as the same variant. The API layer
//! (`node::api::error`) is the only place that maps these to HTTP statuses and wire codes.
//! `SchemaError` (a write or schema change a class schema refuses) lives here too, so that this
//! leaf imports no other module but `ids`; `schema` re-exports it.

use serde::{Deserialize, Serialize};

use crate::ids::{GroupId, NodeId};

/// Result alias used throughout the cluster crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
pub enum Error {
    /// This node is not the leader of `group`; `leader` is the last known leader, if any.
    #[error("node is not the leader of group {group}")]
    NotLeader {
        group: GroupId,
        leader: Option<NodeId>,
        leader_addr: Option<String>,
    },
    /// A peer could not be connected to: the request was never sent.
    #[error("peer unreachable: {0}")]
    PeerUnreachable(String),
    /// The group cannot serve now (no quorum, no leader, node shutting down).
    #[error("group unavailable: {0}")]
    Unavailable(String),
    /// The operation did not finish in time; a write may or may not have taken effect.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The node already runs as many queries as it may: this one was refused before any work.
    #[error("overloaded: {0}")]
    Overloaded(String),
    /// The addressed object does not exist.
    #[error("object not found")]
    ObjectNotFound,
    /// The operation conflicts with existing state.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A quota window is full (`TakeQuota`); the message names the window.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// A field name that is not allowed (characters, length).
    #[error("invalid field name: {0}")]
    InvalidKey(String),
    /// A field name reserved by the service (`objectId`, `createdAt`, `updatedAt`).
    #[error("It is a reserved field: {0}")]
    ReservedKey(String),
    /// A malformed value or operator.
    #[error("invalid value: {0}")]
    InvalidValue(String),
    /// A value or operator whose type does not fit the stored value.
    #[error("type mismatch: {0}")]
    TypeMismatch(String),
    /// A malformed Pointer.
    #[error("invalid pointer: {0}")]
    InvalidPointer(String),
    /// A GeoPoint outside latitude -90..90 / longitude -180..180.
    #[error("invalid GeoPoint: {0}")]
    InvalidGeoPoint(String),
    /// A class name that is not allowed.
    #[error("invalid class name: {0}")]
    InvalidClassName(String),
    /// A node or cluster administration request that cannot be carried out.
    #[error("invalid cluster operation: {0}")]
    InvalidOperation(String),
    /// Local storage failed.
    #[error("storage error: {0}")]
    Storage(String),
    /// A write that adds data to a group one of whose nodes has its disk nearly full
    /// (`disk`): nothing was proposed.
    #[error("the cluster's storage is nearly full: {0}")]
    DiskFull(String),
    /// The node's peer port could not be had at start.
    #[error("cannot listen on {addr} (the peer port, --rpc-addr): {cause}")]
    Listen { addr: String, cause: String },
    /// A write the class schema refuses, or a refused schema change.
    #[error("{0}")]
    Schema(SchemaError),
    /// A committed command that apply could not carry out (every replica recorded the same);
    /// nothing of it was written.
    #[error("the write could not be applied: {0}")]
    NotApplied(String),
    /// A write to an object of a slot its group froze for a split (decisions/0038): the slot
    /// belongs to another group once the slot map's epoch is `epoch`. The node that routed it
    /// takes up that map and sends it again; a client sees it only when the map does not come
    /// within the request's time.
    #[error("the object's slot moved to another group (slot map epoch {epoch})")]
    Moved { epoch: u64 },
    /// Anything else that is the cluster's fault.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// True when the operation certainly did not take effect and may be retried elsewhere.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::NotLeader { .. } | Error::PeerUnreachable(_))
    }
}

/// Characters of client input an error message repeats at most.
pub const ECHO_CHARS: usize = 64;

/// `s` cut to [`ECHO_CHARS`] characters (with "…" when cut), for repeating client input in an
/// error message without repeating a huge one.
pub fn clip(s: &str) -> String {
    match s.char_indices().nth(ECHO_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

impl Error {
    /// True when the failure is this node's own storage rather than the command: apply stops
    /// instead of recording an outcome that other replicas would not share.
    pub fn is_local_fault(&self) -> bool {
        matches!(self, Error::Storage(_))
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Storage(e.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Internal(format!("encoding: {e}"))
    }
}

/// Why a write or a schema change is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum SchemaError {
    #[error("{0}")]
    TypeMismatch(String),
    #[error("class {0} does not exist")]
    ClassNotFound(String),
    #[error("class {0} does not exist and creating classes is not allowed for this app")]
    ClassCreationNotAllowed(String),
    #[error("class {0} already exists")]
    ClassExists(String),
    #[error("the body's className {0:?} differs from the class in the path")]
    ClassNameMismatch(String),
    #[error("{0} is a reserved field")]
    ReservedField(String),
    #[error("field {0} already exists")]
    FieldExists(String),
    #[error("field {0}: Pointer and Relation columns need a targetClass")]
    MissingTargetClass(String),
    #[error("field {0}: target class {1} does not exist")]
    TargetClassMissing(String, String),
    #[error("field {0}: unknown type {1:?}")]
    UnknownType(String, String),
    #[error("field {0} does not exist")]
    UnknownField(String),
    #[error("{0} is a built-in column of {1} and cannot be changed")]
    BuiltInColumn(String, String),
    #[error("class {0} would have more than {max} columns", max = MAX_COLUMNS)]
    TooManyColumns(String),
    #[error("{0}")]
    Invalid(String),
}

/// User columns one class may have (a write or schema change past it is refused).
pub const MAX_COLUMNS: usize = 1000;
