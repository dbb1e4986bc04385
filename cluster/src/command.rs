//! Every replicated mutation (`Command`) and its outcome (`CommandResult`), plus the reads a
//! group's leader serves (`ReadRequest` / `ReadResponse`).
//!
//! Commands are stored in Raft logs, so their encoding is a format: variants are only ever
//! added, never changed or renumbered. Everything apply needs (objectIds, timestamps, tokens)
//! is chosen by the proposing node and carried here, so apply is deterministic.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::acl::Principals;
use crate::error::Error;
use crate::names::{AppId, ClassName, ObjectId};
use crate::query::ScanRequest;
use crate::schema::{ColumnChange, Need};
use crate::update::FieldUpdate;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Create an object with the given updates applied to an empty object.
    CreateObject {
        app: AppId,
        class: ClassName,
        object_id: ObjectId,
        now_ms: i64,
        updates: Vec<FieldUpdate>,
    },
    /// Apply updates to an existing object. With `principals`, the object's ACL must grant
    /// one of them write access (else the object is treated as absent); `None` checks nothing.
    UpdateObject {
        app: AppId,
        class: ClassName,
        object_id: ObjectId,
        now_ms: i64,
        updates: Vec<FieldUpdate>,
        #[serde(
            default = "Principals::master",
            skip_serializing_if = "Principals::is_master"
        )]
        principals: Principals,
        /// Fields the object must not hold (absent or null) for the update to apply, else it
        /// is refused with `Conflict`: a value set once, by whichever write comes first.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unset: Vec<String>,
        /// Fields the object must hold with exactly these values for the update to apply,
        /// else it is refused with `Conflict`: a change made only if nothing changed them
        /// since they were read (a dead device token removed unless the device sent a new one).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        holds: Vec<(String, Value)>,
    },
    /// Delete an object (`principals` as for `UpdateObject`).
    DeleteObject {
        app: AppId,
        class: ClassName,
        object_id: ObjectId,
        #[serde(
            default = "Principals::master",
            skip_serializing_if = "Principals::is_master"
        )]
        principals: Principals,
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
    /// Write a record only when no live record (unexpired at `now_ms`) has its key; rejected
    /// with `Conflict` otherwise. Used for nonces and other claims that must be unique.
    InsertRecord {
        ns: String,
        key: String,
        value: Value,
        expires_at_ms: Option<i64>,
        now_ms: i64,
    },
    /// Merge `members` into the JSON object of an existing record (rejected when absent);
    /// answers the merged value.
    MergeRecord {
        ns: String,
        key: String,
        members: serde_json::Map<String, Value>,
    },
    /// Compare-and-set a record: applies only when the live value (unexpired at `now_ms`)
    /// equals `expected` (`None`: absent); `value` `None` deletes. Rejected with `Conflict`
    /// otherwise. Used for uniqueness reservations.
    CasRecord {
        ns: String,
        key: String,
        expected: Option<Value>,
        value: Option<Value>,
        now_ms: i64,
    },
    /// Delete a live record (unexpired at `now_ms`) and answer its value as `Record`; rejected
    /// with `ObjectNotFound` when there is none. A single-use token is taken exactly once.
    TakeRecord {
        ns: String,
        key: String,
        now_ms: i64,
    },
    /// Count one use of a quota: applies only when, for every window, fewer than its `max` uses
    /// fall in `(now_ms - length_ms, now_ms]`; the record keeps the use times of the longest
    /// window and expires when that window has passed. Rejected with `QuotaExceeded` otherwise.
    TakeQuota {
        ns: String,
        key: String,
        now_ms: i64,
        windows: Vec<QuotaWindow>,
    },
    /// Gives back one use of a quota taken at `use_ms` (a login whose password was right): the
    /// use leaves the record; a record left with no use is deleted. Nothing to give back is
    /// not an error.
    ReturnQuota {
        ns: String,
        key: String,
        use_ms: i64,
    },
    /// Metadata group: admit a write's column requirements into the class schema, adding new
    /// columns; creates the class when `may_create_class`, else rejects an unknown class.
    EnsureColumns {
        app: AppId,
        class: ClassName,
        needs: Vec<(String, Need)>,
        may_create_class: bool,
    },
    /// Metadata group: create a class schema with the given columns (schema endpoints).
    CreateClass {
        app: AppId,
        class: ClassName,
        changes: Vec<ColumnChange>,
    },
    /// Metadata group: add or delete columns of an existing class.
    AlterClass {
        app: AppId,
        class: ClassName,
        changes: Vec<ColumnChange>,
    },
    /// Metadata group: delete a class schema.
    DropClass { app: AppId, class: ClassName },
    /// Data shard: delete up to `limit` objects of a class whose objectId sorts after `after`,
    /// or, with `field`, remove that field from them. Answers `Purged` with where to go on.
    PurgeClass {
        app: AppId,
        class: ClassName,
        field: Option<String>,
        after: Option<String>,
        limit: u32,
    },
    /// Data shard: declare `field` indexed for a class (none: only rebuild) and (re)build the
    /// class's index entries, a page per command from after `after` (answers `Purged`, whose
    /// `next` says where to continue).
    DeclareIndex {
        app: AppId,
        class: ClassName,
        field: Option<String>,
        after: Option<String>,
        /// Objects per page (absent in logs written before it existed: 10,000).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u32>,
        /// The rebuild these pages belong to (a token its caller drew); a later rebuild of
        /// the class replaces it. Absent in logs written before it existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rebuild: Option<String>,
    },
    /// Data shard: opt `field` of a class out of its indexes (automatic or declared; the
    /// first page, `started` false) and delete up to `limit` entries of the columns being
    /// dropped (answers `Purged`; `next` is set while more remain).
    DropIndex {
        app: AppId,
        class: ClassName,
        field: String,
        started: bool,
        limit: u32,
    },
    /// Data shard: object commands (`CreateObject`, `UpdateObject`, `DeleteObject`) applied one
    /// after another in one log entry, each as it would be alone: one refused changes nothing
    /// and the others still apply; answers `CommandResult::Batch`, one result per command, in
    /// order (`POST /1/batch` groups its operations per shard this way).
    Batch(Vec<Command>),
    /// Any group: the cut of backup `backup` (`services::backup`), proposed to every group
    /// while the backup's write fence holds; changes nothing, answers `Done`.
    BackupBarrier { backup: String },
    /// Any group: consistency check `check` (`services::check`): every replica hashes its state
    /// as this entry leaves it (`statemachine::check`); changes nothing, answers `Done`.
    CheckState { check: String },
    /// Data group, a split's parent (decisions/0038): from this entry on, writes to objects of
    /// the frozen slots are refused `Moved`; the same freeze again is `Done`, another while one
    /// is kept `Conflict`.
    FreezeSlots(crate::slots::Frozen),
    /// Data group, a split's child: the parent's index declarations of classes (what is
    /// indexed; counts start at nothing). A class with metadata keeps it. Answers `Done`.
    ImportIndexMeta(Vec<(AppId, String, crate::query::index::IndexMeta)>),
    /// Data group, a split's child: objects written as their parent stores them, with their
    /// index entries, counts and usage and no change-log entry; one there already is replaced.
    /// Answers `Done` (`Rejected` whole when one does not decode, `Conflict` once imports are
    /// sealed).
    ImportObjects(Vec<ImportedObject>),
    /// Data group, a split's child, before the map names it: no import is taken from this
    /// entry on (`Conflict`), so a page a former metadata leader still sends cannot undo a
    /// write the child took after the switch. Answers `Done`.
    SealImports,
    /// Data group, a split's parent, once the map names `child`: deletes up to `limit` objects
    /// of the slots frozen for `child` (their derived state with them, no change-log entry);
    /// answers `Purged`, `next` set while objects are left to look at; when none is, the freeze
    /// is forgotten. `Conflict` while the group freezes slots for another child.
    DropSlots {
        child: crate::ids::GroupId,
        limit: u32,
        /// The epoch of the batch whose slots are dropped: a drop of an earlier batch of the
        /// same split, sent late by a former metadata leader, is refused `Conflict` rather
        /// than drop the next batch's objects before they are copied. (None: any, as logs
        /// written before batches hold it.)
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<u64>,
    },
    /// Data group, a merge's target (decisions/0038): from this entry on it takes
    /// `ImportObjects` of the slots named (and of no other), and refuses writes to them
    /// `Moved`. The same again is `Done`; another while one is not adopted `Conflict`.
    OpenImports(crate::slots::Incoming),
    /// Data group, a merge's target, once the source's objects are copied and the map names
    /// it for them: the slots taken in from `from` at `epoch` are its own (writes taken,
    /// imports refused); a read by an older map still leaves them out. Answers `Done`.
    AdoptSlots {
        from: crate::ids::GroupId,
        epoch: u64,
    },
    /// Data group (decisions/0038 step 7): keeps a slot index of `total` slots from this
    /// entry on (`slots::SlotIndex`) and enters up to `limit` of the objects stored before it;
    /// answers `Purged`, `next` set while objects are left to enter. A complete index answers
    /// `Purged` with nothing left; an index of another `total` is refused.
    IndexSlots { total: u32, limit: u32 },
}

/// An object as a split's parent stores it, for the child to import.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportedObject {
    pub app: AppId,
    pub class: String,
    pub object_id: String,
    /// `StoredObject::encode`'s bytes (MessagePack's bin type in the log).
    #[serde(with = "serde_bytes")]
    pub stored: Vec<u8>,
}

/// Most bytes of stored objects one `Command::ImportObjects` carries (one object alone may be
/// larger): a split's copy pages (`ReadRequest::ExportSlots`) are cut at it.
pub const MAX_IMPORT_BYTES: usize = 1 << 20;

/// Most commands one `Command::Batch` carries.
pub const MAX_BATCH_COMMANDS: usize = 1_000;

impl Command {
    /// The object a create, update or delete writes: (app, class, objectId).
    pub fn written_object(&self) -> Option<(&AppId, &str, &str)> {
        match self {
            Command::CreateObject {
                app,
                class,
                object_id,
                ..
            }
            | Command::UpdateObject {
                app,
                class,
                object_id,
                ..
            }
            | Command::DeleteObject {
                app,
                class,
                object_id,
                ..
            } => Some((app, class.as_str(), object_id.as_str())),
            _ => None,
        }
    }

    /// Whether the command may make a group's data larger: object creates and updates (alone
    /// or in a batch). Records (sessions, throttles, file records) and deletes may not be
    /// refused for want of disk (`replicas::room`).
    pub fn adds_data(&self) -> bool {
        match self {
            Command::CreateObject { .. } | Command::UpdateObject { .. } => true,
            Command::Batch(cmds) => cmds.iter().any(Command::adds_data),
            _ => false,
        }
    }

    /// The app an object command (or a batch of them) writes to, and roughly the bytes of
    /// values it carries (`replicas::app_share`); none for records and the service's own
    /// commands.
    pub fn app_bytes(&self) -> Option<(&AppId, usize)> {
        const OVERHEAD: usize = 64;
        let values = |updates: &[crate::update::FieldUpdate]| -> usize {
            use crate::update::UpdateOp;
            updates
                .iter()
                .map(|u| {
                    let path: usize = u.path.iter().map(|p| p.len() + 1).sum();
                    path + match &u.op {
                        UpdateOp::Set(v) => crate::limits::approx_size(v),
                        UpdateOp::Add(vs) | UpdateOp::AddUnique(vs) | UpdateOp::Remove(vs) => {
                            vs.iter().map(crate::limits::approx_size).sum()
                        }
                        UpdateOp::AddRelation { ids, .. }
                        | UpdateOp::RemoveRelation { ids, .. } => {
                            ids.iter().map(|i| i.len() + 8).sum()
                        }
                        _ => 12,
                    }
                })
                .sum()
        };
        match self {
            Command::CreateObject { app, updates, .. }
            | Command::UpdateObject { app, updates, .. } => Some((app, OVERHEAD + values(updates))),
            Command::DeleteObject { app, .. } => Some((app, OVERHEAD)),
            Command::Batch(cmds) => {
                let mut app = None;
                let mut bytes = 0;
                for c in cmds {
                    let (a, b) = c.app_bytes()?;
                    app.get_or_insert(a);
                    bytes += b;
                }
                app.map(|a| (a, bytes))
            }
            _ => None,
        }
    }

    /// Refuses a command whose values nest deeper or set more keys than `limits` admits, so
    /// that no entry can reach a log that some replica could not decode or apply.
    pub fn check_limits(&self) -> crate::error::Result<()> {
        match self {
            Command::Batch(cmds) => {
                if cmds.len() > MAX_BATCH_COMMANDS {
                    return Err(Error::Internal(format!(
                        "a batch carries at most {MAX_BATCH_COMMANDS} commands"
                    )));
                }
                cmds.iter().try_for_each(|c| match c {
                    Command::CreateObject { .. }
                    | Command::UpdateObject { .. }
                    | Command::DeleteObject { .. } => c.check_limits(),
                    other => Err(Error::Internal(format!(
                        "a batch carries only object commands, not {other}"
                    ))),
                })
            }
            Command::CreateObject { updates, .. } | Command::UpdateObject { updates, .. } => {
                crate::update::check_updates(updates)
            }
            Command::PutRecord { value, .. } | Command::InsertRecord { value, .. } => {
                crate::limits::check_value(value)
            }
            Command::CasRecord {
                expected, value, ..
            } => expected
                .iter()
                .chain(value.iter())
                .try_for_each(crate::limits::check_value),
            Command::MergeRecord { members, .. } => {
                members.values().try_for_each(crate::limits::check_value)
            }
            Command::ImportObjects(objects) => {
                let bytes: usize = objects.iter().map(|o| o.stored.len()).sum();
                if objects.len() > 1 && bytes > MAX_IMPORT_BYTES {
                    return Err(Error::Internal(format!(
                        "an import carries at most {MAX_IMPORT_BYTES} bytes of objects, or one object"
                    )));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
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
                ..
            } => {
                write!(f, "DeleteObject({app}/{class}/{object_id})")
            }
            Command::PutRecord { ns, key, .. } => write!(f, "PutRecord({ns}/{key})"),
            Command::DeleteRecord { ns, key } => write!(f, "DeleteRecord({ns}/{key})"),
            Command::ExpireRecords { now_ms } => write!(f, "ExpireRecords({now_ms})"),
            Command::InsertRecord { ns, key, .. } => write!(f, "InsertRecord({ns}/{key})"),
            Command::MergeRecord { ns, key, .. } => write!(f, "MergeRecord({ns}/{key})"),
            Command::CasRecord { ns, key, .. } => write!(f, "CasRecord({ns}/{key})"),
            Command::TakeRecord { ns, key, .. } => write!(f, "TakeRecord({ns}/{key})"),
            Command::TakeQuota { ns, key, .. } => write!(f, "TakeQuota({ns}/{key})"),
            Command::ReturnQuota { ns, key, .. } => write!(f, "ReturnQuota({ns}/{key})"),
            Command::EnsureColumns { app, class, .. } => write!(f, "EnsureColumns({app}/{class})"),
            Command::CreateClass { app, class, .. } => write!(f, "CreateClass({app}/{class})"),
            Command::AlterClass { app, class, .. } => write!(f, "AlterClass({app}/{class})"),
            Command::DropClass { app, class } => write!(f, "DropClass({app}/{class})"),
            Command::PurgeClass { app, class, .. } => write!(f, "PurgeClass({app}/{class})"),
            Command::DeclareIndex { app, class, .. } => {
                write!(f, "DeclareIndex({app}/{class})")
            }
            Command::DropIndex {
                app, class, field, ..
            } => {
                write!(f, "DropIndex({app}/{class}/{field})")
            }
            Command::Batch(cmds) => write!(f, "Batch({} commands)", cmds.len()),
            Command::BackupBarrier { backup } => write!(f, "BackupBarrier({backup})"),
            Command::CheckState { check } => write!(f, "CheckState({check})"),
            Command::FreezeSlots(frozen) => write!(
                f,
                "FreezeSlots({} slots to group {})",
                frozen.slots.len(),
                frozen.child
            ),
            Command::ImportIndexMeta(metas) => {
                write!(f, "ImportIndexMeta({} classes)", metas.len())
            }
            Command::ImportObjects(objects) => {
                write!(f, "ImportObjects({} objects)", objects.len())
            }
            Command::SealImports => write!(f, "SealImports"),
            Command::OpenImports(i) => write!(
                f,
                "OpenImports({} slots from group {})",
                i.slots.len(),
                i.from
            ),
            Command::AdoptSlots { from, epoch } => {
                write!(f, "AdoptSlots(from group {from} at epoch {epoch})")
            }
            Command::DropSlots {
                child,
                limit,
                epoch,
            } => {
                write!(f, "DropSlots({limit} for group {child} at epoch {epoch:?})")
            }
            Command::IndexSlots { total, limit } => {
                write!(f, "IndexSlots({limit} of {total} slots)")
            }
        }
    }
}

/// One window of a quota: at most `max` uses in any `length_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaWindow {
    pub length_ms: i64,
    pub max: u32,
}

/// The outcome of applying one command. A rejected command changed nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CommandResult {
    /// No payload: a blank or membership entry.
    None,
    Created {
        object_id: ObjectId,
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
    /// The value a record holds after the command.
    Record(Value),
    /// Objects purged by `PurgeClass`; `next` is the objectId to continue after, if more.
    Purged {
        count: u64,
        next: Option<String>,
    },
    Rejected(Error),
    /// The result of each command of a `Command::Batch`, in order.
    Batch(Vec<CommandResult>),
}

/// A read served by a group's leader after it confirmed its leadership (read index).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReadRequest {
    /// An object; absent when `principals` may not read it.
    GetObject {
        app: AppId,
        class: ClassName,
        object_id: ObjectId,
        #[serde(
            default = "Principals::master",
            skip_serializing_if = "Principals::is_master"
        )]
        principals: Principals,
    },
    GetRecord {
        ns: String,
        key: String,
    },
    ScanObjects(ScanRequest),
    /// The shard's partial groups of an aggregation.
    Aggregate(crate::query::aggregate::AggregateRequest),
    /// Every object of a class on the shard as stored, relation members included (for the
    /// service's own lookups over small system classes such as `_Role`).
    ScanStoredObjects {
        app: AppId,
        class: ClassName,
    },
    /// An object as stored, internal fields included (for the service's own checks).
    GetStoredObject {
        app: AppId,
        class: ClassName,
        object_id: ObjectId,
    },
    /// Live records of a namespace whose key starts with `prefix`.
    ListRecords {
        ns: String,
        prefix: String,
    },
    /// A scan, aggregation or stored-object scan sent by a node routing by the slot map of
    /// `epoch`, once the map changed (a read without it is of epoch 0): a group splitting
    /// slots off answers it without the slots that map gives the child, and refuses it
    /// `Moved` when it dropped objects that map still routes to it (`slots::GroupSplits`,
    /// decisions/0038).
    AtEpoch {
        epoch: u64,
        read: Box<ReadRequest>,
    },
    /// A page of the objects of the slots the group froze for a split, after the object key
    /// `after` (the first page also carries the classes' index declarations): what the
    /// `splits` job copies to the child (`services::splits`).
    ExportSlots {
        after: Option<Vec<u8>>,
    },
}

impl ReadRequest {
    /// Whether the read looks up one object or record by its key: cheap enough to serve on
    /// the async worker that asked.
    pub fn is_point(&self) -> bool {
        matches!(
            self,
            ReadRequest::GetObject { .. }
                | ReadRequest::GetRecord { .. }
                | ReadRequest::GetStoredObject { .. }
        )
    }

    /// Whether the read may walk a whole class (a listing, count or aggregation), as opposed
    /// to reading a few keys.
    pub fn is_bulk(&self) -> bool {
        match self {
            ReadRequest::AtEpoch { read, .. } => read.is_bulk(),
            other => matches!(
                other,
                ReadRequest::ScanObjects(_)
                    | ReadRequest::Aggregate(_)
                    | ReadRequest::ScanStoredObjects { .. }
                    | ReadRequest::ExportSlots { .. }
            ),
        }
    }

    /// The read as sent by a node routing by the slot map of `epoch`: a bulk read carries it
    /// once the map changed (`AtEpoch`); any other read, or one of epoch 0, is sent as it is
    /// (so nodes of a cluster that never split exchange the reads they always did).
    pub fn at_epoch(self, epoch: u64) -> ReadRequest {
        match self {
            ReadRequest::AtEpoch { read, .. } => read.at_epoch(epoch),
            read if epoch == 0 || !read.is_bulk() => read,
            read => ReadRequest::AtEpoch {
                epoch,
                read: Box::new(read),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReadResponse {
    /// A rendered object (with its reserved fields), or none.
    Object(Option<Value>),
    Record(Option<Value>),
    /// `(key, value)` of each listed record, in key order.
    Records(Vec<(String, Value)>),
    Stored(Option<crate::object::StoredObject>),
    StoredObjects(Vec<(String, crate::object::StoredObject)>),
    /// The shard's rows for a scan: at most `skip + limit`, in the requested order, and the
    /// number of matching objects on the shard.
    Scan {
        rows: Vec<Value>,
        count: u64,
    },
    Groups(Vec<crate::query::aggregate::PartialGroup>),
    /// A page of a split's objects (`ReadRequest::ExportSlots`): the index declarations of the
    /// group's classes (first page only), the objects as stored, and the key to go on after
    /// (none: every object was looked at).
    Exported {
        metas: Vec<(AppId, String, crate::query::index::IndexMeta)>,
        objects: Vec<ImportedObject>,
        next: Option<Vec<u8>>,
    },
}

/// A committed proposal: its result and the index of the log entry that carries it in its group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposed {
    pub result: CommandResult,
    pub log_index: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imported(id: &str, bytes: usize) -> ImportedObject {
        ImportedObject {
            app: "a".into(),
            class: "C".into(),
            object_id: id.into(),
            stored: vec![7; bytes],
        }
    }

    /// A split's copy page is refused before it is proposed when its objects pass
    /// `MAX_IMPORT_BYTES` together; one object alone, however large, goes (it cannot be cut).
    #[test]
    fn an_import_carries_at_most_a_mebibyte_of_objects_or_one_object() {
        let half = MAX_IMPORT_BYTES / 2;
        let fits = Command::ImportObjects(vec![imported("a", half), imported("b", half)]);
        assert!(fits.check_limits().is_ok());
        let over = Command::ImportObjects(vec![imported("a", half), imported("b", half + 1)]);
        let refused = over.check_limits().expect_err("over the bound");
        assert!(refused.to_string().contains("at most"), "{refused}");
        let alone = Command::ImportObjects(vec![imported("a", 3 * MAX_IMPORT_BYTES)]);
        assert!(alone.check_limits().is_ok());
    }
}
