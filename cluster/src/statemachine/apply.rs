//! One function per command kind, each staging its writes in `Staged`.
//!
//! An `Err` from here is a storage failure and stops the state machine; a command the data
//! refuses (missing object, type mismatch) returns `CommandResult::Rejected` and stages nothing.

use serde_json::Value;

use super::apply_schema;
use super::change_writes;
use super::index_upkeep;
use super::ops::apply_updates;
use super::record_writes::{delete_record, put_record};
use super::slot_index;
use super::split_writes;
use super::staged::Staged;
use super::usage_writes;
use crate::acl::{allows, Access, Principals};
use crate::changes::ChangeKind;
use crate::command::{Command, CommandResult};
use crate::error::{Error, Result};
use crate::names::{AppId, ObjectId};
use crate::object::StoredObject;
use crate::storage::keys;
use crate::storage::records::{live_record, StoredRecord};
use crate::update::FieldUpdate;
use crate::usage::UsageDelta;

pub fn apply_command(st: &mut Staged<'_>, cmd: Command) -> Result<CommandResult> {
    // A write to an object of a slot frozen for a split belongs to the child now.
    if let Some((app, class, object_id)) = cmd.written_object() {
        if let Some(moved) = split_writes::refuse_frozen(st, app, class, object_id)? {
            return Ok(moved);
        }
    }
    // A paged job over a class's objects would change frozen ones after they were copied, or
    // miss those a merge is still bringing in.
    if matches!(
        cmd,
        Command::PurgeClass { .. } | Command::DeclareIndex { .. } | Command::DropIndex { .. }
    ) && split_writes::copying(st)?
    {
        return Ok(CommandResult::Rejected(Error::Conflict(format!(
            "group {} is splitting or merging: objects are being copied; try again once it is done",
            st.group
        ))));
    }
    match cmd {
        Command::CreateObject {
            app,
            class,
            object_id,
            now_ms,
            updates,
        } => apply_create(st, &app, &class, &object_id, now_ms, &updates),
        Command::UpdateObject {
            app,
            class,
            object_id,
            now_ms,
            updates,
            principals,
            unset,
            holds,
        } => apply_update(
            st,
            &app,
            &class,
            &object_id,
            now_ms,
            &updates,
            UpdateGuard {
                principals: &principals,
                unset: &unset,
                holds: &holds,
            },
        ),
        Command::DeleteObject {
            app,
            class,
            object_id,
            principals,
        } => apply_delete(st, &app, &class, &object_id, &principals),
        Command::CasRecord {
            ns,
            key,
            expected,
            value,
            now_ms,
        } => apply_cas_record(st, &ns, &key, expected, value, now_ms),
        Command::PutRecord {
            ns,
            key,
            value,
            expires_at_ms,
        } => put_record(st, &ns, &key, value, expires_at_ms),
        Command::DeleteRecord { ns, key } => delete_record(st, &ns, &key),
        Command::ExpireRecords { now_ms } => apply_expire_records(st, now_ms),
        Command::InsertRecord {
            ns,
            key,
            value,
            expires_at_ms,
            now_ms,
        } => apply_insert_record(st, &ns, &key, value, expires_at_ms, now_ms),
        Command::MergeRecord { ns, key, members } => apply_merge_record(st, &ns, &key, members),
        Command::TakeRecord { ns, key, now_ms } => apply_take_record(st, &ns, &key, now_ms),
        Command::TakeQuota {
            ns,
            key,
            now_ms,
            windows,
        } => apply_take_quota(st, &ns, &key, now_ms, &windows),
        Command::ReturnQuota { ns, key, use_ms } => apply_return_quota(st, &ns, &key, use_ms),
        Command::EnsureColumns {
            app,
            class,
            needs,
            may_create_class,
        } => apply_schema::apply_ensure_columns(st, &app, &class, &needs, may_create_class),
        Command::CreateClass {
            app,
            class,
            changes,
        } => apply_schema::apply_create_class(st, &app, &class, &changes),
        Command::AlterClass {
            app,
            class,
            changes,
        } => apply_schema::apply_alter_class(st, &app, &class, &changes),
        Command::DropClass { app, class } => apply_schema::apply_drop_class(st, &app, &class),
        Command::PurgeClass {
            app,
            class,
            field,
            after,
            limit,
        } => apply_purge_class(st, &app, &class, field.as_deref(), after.as_deref(), limit),
        Command::DeclareIndex {
            app,
            class,
            field,
            after,
            limit,
            rebuild,
        } => index_upkeep::apply_declare_index(
            st,
            &app,
            &class,
            field.as_deref(),
            after.as_deref(),
            limit.map_or(index_upkeep::DEFAULT_REBUILD_PAGE, |l| l.max(1) as usize),
            rebuild.as_deref(),
        ),
        Command::DropIndex {
            app,
            class,
            field,
            started,
            limit,
        } => {
            index_upkeep::apply_drop_index(st, &app, &class, &field, started, limit.max(1) as usize)
        }
        Command::BackupBarrier { .. } | Command::CheckState { .. } => Ok(CommandResult::Done),
        Command::FreezeSlots(frozen) => split_writes::apply_freeze(st, frozen),
        Command::ImportIndexMeta(metas) => split_writes::apply_import_index_meta(st, metas),
        Command::ImportObjects(objects) => split_writes::apply_import_objects(st, objects),
        Command::SealImports => split_writes::apply_seal_imports(st),
        Command::OpenImports(incoming) => split_writes::apply_open_imports(st, incoming),
        Command::AdoptSlots { from, epoch } => split_writes::apply_adopt_slots(st, from, epoch),
        Command::DropSlots {
            child,
            limit,
            epoch,
        } => split_writes::apply_drop_slots(st, child, limit, epoch),
        Command::IndexSlots { total, limit } => slot_index::apply_index_slots(st, total, limit),
        // A batch's commands are applied one by one by `apply_entry`; one nested in another
        // is never proposed (`Command::check_limits`).
        Command::Batch(_) => Ok(CommandResult::Rejected(Error::NotApplied(
            "a batch inside a batch".into(),
        ))),
    }
}

fn apply_create(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    object_id: &ObjectId,
    now_ms: i64,
    updates: &[FieldUpdate],
) -> Result<CommandResult> {
    let key = keys::object_key(st.group, app, class, object_id);
    if let Some(existing) = st.get(&key)? {
        // A proposal retried after an indeterminate outcome carries the same id and time:
        // answer as the first apply did instead of failing.
        let existing = StoredObject::decode(&existing)?;
        if existing.created_ms == now_ms {
            return Ok(CommandResult::Created {
                object_id: object_id.clone(),
                created_ms: now_ms,
            });
        }
        return Ok(CommandResult::Rejected(Error::Conflict(format!(
            "objectId {object_id} exists"
        ))));
    }
    let mut obj = StoredObject::new(now_ms);
    if let Err(e) = apply_updates(&mut obj.fields, updates) {
        return Ok(CommandResult::Rejected(e));
    }
    index_upkeep::reindex(st, app, class, object_id, None, Some(&obj))?;
    let bytes = obj.encode()?;
    usage_writes::count(st, app, UsageDelta::object(None, Some(bytes.len())))?;
    change_writes::stage(
        st,
        ChangeKind::Create,
        (app, class, object_id),
        &bytes,
        None,
    )?;
    st.put(key, bytes);
    Ok(CommandResult::Created {
        object_id: object_id.clone(),
        created_ms: now_ms,
    })
}

/// What an update must find before it writes: a caller who may write the object, fields that
/// are unset, fields that hold given values (`Command::UpdateObject`).
struct UpdateGuard<'a> {
    principals: &'a Principals,
    unset: &'a [String],
    holds: &'a [(String, Value)],
}

fn apply_update(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    object_id: &ObjectId,
    now_ms: i64,
    updates: &[FieldUpdate],
    guard: UpdateGuard<'_>,
) -> Result<CommandResult> {
    let UpdateGuard {
        principals,
        unset,
        holds,
    } = guard;
    let key = keys::object_key(st.group, app, class, object_id);
    let Some(bytes) = st.get(&key)? else {
        return Ok(CommandResult::Rejected(Error::ObjectNotFound));
    };
    let mut obj = StoredObject::decode(&bytes)?;
    // A caller without write access sees the object as absent.
    if !allows(&obj.fields, principals, Access::Write) {
        return Ok(CommandResult::Rejected(Error::ObjectNotFound));
    }
    if let Some(set) = unset
        .iter()
        .find(|f| obj.fields.get(f.as_str()).is_some_and(|v| !v.is_null()))
    {
        return Ok(CommandResult::Rejected(Error::Conflict(format!(
            "{set} is already set"
        ))));
    }
    if let Some((changed, _)) = holds
        .iter()
        .find(|(f, v)| obj.fields.get(f.as_str()) != Some(v))
    {
        return Ok(CommandResult::Rejected(Error::Conflict(format!(
            "{changed} changed"
        ))));
    }
    let old = obj.clone();
    if let Err(e) = apply_updates(&mut obj.fields, updates) {
        return Ok(CommandResult::Rejected(e));
    }
    // Timestamps never go backwards, even if proposers' clocks differ. Changes to internal
    // fields only (a login adding a session) are not changes a client sees, nor logged ones.
    let seen = updates
        .iter()
        .any(|u| !u.path.first().is_some_and(|c| c.starts_with('_')));
    if seen {
        obj.updated_ms = now_ms.max(obj.updated_ms);
    }
    index_upkeep::reindex(st, app, class, object_id, Some(&old), Some(&obj))?;
    let old_len = bytes.len();
    let bytes = obj.encode()?;
    usage_writes::count(
        st,
        app,
        UsageDelta::object(Some(old_len), Some(bytes.len())),
    )?;
    if seen {
        let ids = (app.as_str(), class, object_id.as_str());
        change_writes::stage(st, ChangeKind::Update, ids, &bytes, Some((&old, &obj)))?;
    }
    st.put(key, bytes);
    Ok(CommandResult::Updated {
        updated_ms: obj.updated_ms,
    })
}

fn apply_delete(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    object_id: &ObjectId,
    principals: &Principals,
) -> Result<CommandResult> {
    let key = keys::object_key(st.group, app, class, object_id);
    let Some(bytes) = st.get(&key)? else {
        return Ok(CommandResult::Rejected(Error::ObjectNotFound));
    };
    let old = StoredObject::decode(&bytes)?;
    if !allows(&old.fields, principals, Access::Write) {
        return Ok(CommandResult::Rejected(Error::ObjectNotFound));
    }
    index_upkeep::reindex(st, app, class, object_id, Some(&old), None)?;
    usage_writes::count(st, app, UsageDelta::object(Some(bytes.len()), None))?;
    change_writes::stage(
        st,
        ChangeKind::Delete,
        (app, class, object_id),
        &bytes,
        None,
    )?;
    st.delete(key);
    Ok(CommandResult::Deleted)
}

fn apply_insert_record(
    st: &mut Staged<'_>,
    ns: &str,
    key: &str,
    value: Value,
    expires_at_ms: Option<i64>,
    now_ms: i64,
) -> Result<CommandResult> {
    if live_record(st, ns, key, Some(now_ms))?.is_some() {
        return Ok(CommandResult::Rejected(Error::Conflict(format!(
            "{ns} {key} exists"
        ))));
    }
    put_record(st, ns, key, value, expires_at_ms)
}

fn apply_cas_record(
    st: &mut Staged<'_>,
    ns: &str,
    key: &str,
    expected: Option<Value>,
    value: Option<Value>,
    now_ms: i64,
) -> Result<CommandResult> {
    let current = live_record(st, ns, key, Some(now_ms))?.map(|r| r.value);
    if current != expected {
        return Ok(CommandResult::Rejected(Error::Conflict(format!(
            "{ns} {key} changed"
        ))));
    }
    match value {
        Some(v) => put_record(st, ns, key, v, None),
        None => delete_record(st, ns, key),
    }
}

fn apply_take_record(
    st: &mut Staged<'_>,
    ns: &str,
    key: &str,
    now_ms: i64,
) -> Result<CommandResult> {
    let Some(rec) = live_record(st, ns, key, Some(now_ms))? else {
        return Ok(CommandResult::Rejected(Error::ObjectNotFound));
    };
    delete_record(st, ns, key)?;
    Ok(CommandResult::Record(rec.value))
}

/// The use times of a quota record (`{"uses": [ms, ...]}`); anything else counts as none.
fn quota_uses(rec: Option<StoredRecord>) -> Vec<i64> {
    rec.and_then(|r| {
        r.value
            .get("uses")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_i64).collect::<Vec<i64>>())
    })
    .unwrap_or_default()
}

/// How far ahead of the command being checked a recorded quota use may be stamped.
const MAX_CLOCK_SKEW_MS: i64 = 60_000;

fn apply_take_quota(
    st: &mut Staged<'_>,
    ns: &str,
    key: &str,
    now_ms: i64,
    windows: &[crate::command::QuotaWindow],
) -> Result<CommandResult> {
    let longest = windows.iter().map(|w| w.length_ms).max().unwrap_or(0);
    let mut uses = quota_uses(live_record(st, ns, key, Some(now_ms))?);
    // Proposers stamp `now_ms` before the log orders their commands, so a use stamped later
    // than this command may already be recorded: it counts (it happened within the window).
    // A use stamped more than `MAX_CLOCK_SKEW_MS` ahead comes from a clock that is wrong; it
    // is not kept, so one node's clock cannot block a quota for long.
    uses.retain(|&t| t > now_ms - longest && t <= now_ms + MAX_CLOCK_SKEW_MS);
    for w in windows {
        let in_window = uses.iter().filter(|&&t| t > now_ms - w.length_ms).count();
        if in_window >= w.max as usize {
            return Ok(CommandResult::Rejected(Error::QuotaExceeded(format!(
                "{} per {} s",
                w.max,
                w.length_ms / 1000
            ))));
        }
    }
    uses.push(now_ms);
    uses.sort_unstable();
    let last = uses.last().copied().unwrap_or(now_ms);
    let value = serde_json::json!({ "uses": uses });
    put_record(st, ns, key, value.clone(), Some(last + longest))?;
    Ok(CommandResult::Record(value))
}

fn apply_return_quota(
    st: &mut Staged<'_>,
    ns: &str,
    key: &str,
    use_ms: i64,
) -> Result<CommandResult> {
    let Some(rec) = live_record(st, ns, key, None)? else {
        return Ok(CommandResult::Done);
    };
    let expires = rec.expires_at_ms;
    let mut uses = quota_uses(Some(rec));
    let Some(at) = uses.iter().position(|&t| t == use_ms) else {
        return Ok(CommandResult::Done);
    };
    uses.remove(at);
    if uses.is_empty() {
        delete_record(st, ns, key)?;
    } else {
        put_record(st, ns, key, serde_json::json!({ "uses": uses }), expires)?;
    }
    Ok(CommandResult::Done)
}

fn apply_merge_record(
    st: &mut Staged<'_>,
    ns: &str,
    key: &str,
    members: serde_json::Map<String, Value>,
) -> Result<CommandResult> {
    let Some(mut rec) = live_record(st, ns, key, None)? else {
        return Ok(CommandResult::Rejected(Error::ObjectNotFound));
    };
    let Value::Object(fields) = &mut rec.value else {
        return Ok(CommandResult::Rejected(Error::InvalidOperation(format!(
            "{ns} {key} is not an object"
        ))));
    };
    fields.extend(members);
    let merged = rec.value.clone();
    let rkey = keys::record_key(st.group, ns, key);
    usage_writes::count_record(st, ns, &rkey, Some(&merged))?;
    st.put(rkey, serde_json::to_vec(&rec)?);
    Ok(CommandResult::Record(merged))
}

fn apply_purge_class(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    field: Option<&str>,
    after: Option<&str>,
    limit: u32,
) -> Result<CommandResult> {
    let prefix = keys::class_prefix(st.group, app, class);
    let start = match after {
        // The first key after `after`'s object.
        Some(id) => {
            let mut k = keys::object_key(st.group, app, class, id);
            k.push(0);
            k
        }
        None => prefix.clone(),
    };
    let end = keys::separated_end(&prefix);
    let limit = limit.max(1) as usize;
    let found = st.keys_in_range_limited(&start, &end, limit + 1)?;
    let more = found.len() > limit;
    let mut count = 0;
    let mut last_id = None;
    for key in found.into_iter().take(limit) {
        let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
        last_id = Some(id.clone());
        let Some(bytes) = st.get(&key)? else { continue };
        let old = StoredObject::decode(&bytes)?;
        match field {
            None => {
                index_upkeep::reindex(st, app, class, &id, Some(&old), None)?;
                usage_writes::count(st, app, UsageDelta::object(Some(bytes.len()), None))?;
                st.delete(key);
                count += 1;
            }
            Some(f) => {
                let mut obj = old.clone();
                if obj.fields.remove(f).is_some() {
                    index_upkeep::reindex(st, app, class, &id, Some(&old), Some(&obj))?;
                    let stripped = obj.encode()?;
                    let delta = UsageDelta::object(Some(bytes.len()), Some(stripped.len()));
                    usage_writes::count(st, app, delta)?;
                    st.put(key, stripped);
                    count += 1;
                }
            }
        }
    }
    // Objects of a class made again under the name while the purge ran keep the class's
    // index state (their entries and counts are in it).
    if !more
        && field.is_none()
        && st.keys_in_range_limited(&prefix, &end, 1)?.is_empty()
        && !index_upkeep::forget_class(st, app, class, limit)?
    {
        // Entries of columns being dropped remain: the next page goes on deleting them.
        return Ok(CommandResult::Purged {
            count,
            next: Some(last_id.or(after.map(str::to_string)).unwrap_or_default()),
        });
    }
    Ok(CommandResult::Purged {
        count,
        next: if more { last_id } else { None },
    })
}

fn apply_expire_records(st: &mut Staged<'_>, now_ms: i64) -> Result<CommandResult> {
    let start = keys::sm_family(st.group, keys::SM_TTL);
    let end = keys::ttl_key(st.group, now_ms.saturating_add(1), "", "");
    let mut count = 0;
    for tkey in st.keys_in_range(&start, &end)? {
        st.delete(tkey.clone());
        let Some((ms, ns, key)) = keys::parse_ttl_key(&tkey) else {
            continue;
        };
        let rkey = keys::record_key(st.group, &ns, &key);
        if let Some(bytes) = st.get(&rkey)? {
            if StoredRecord::decode(&bytes)?.expires_at_ms == Some(ms) {
                usage_writes::count_record(st, &ns, &rkey, None)?;
                st.delete(rkey);
                count += 1;
            }
        }
    }
    Ok(CommandResult::Expired { count })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::GroupId;
    use crate::storage::keys::CF_SM;
    use crate::storage::Store;
    use crate::update::parse_updates;
    use serde_json::json;

    fn create(id: &str, now: i64, body: Value) -> Command {
        Command::CreateObject {
            app: "a".into(),
            class: "C".into(),
            object_id: id.into(),
            now_ms: now,
            updates: parse_updates(body.as_object().unwrap()).unwrap(),
        }
    }

    fn update(id: &str, now: i64, body: Value) -> Command {
        Command::UpdateObject {
            app: "a".into(),
            class: "C".into(),
            object_id: id.into(),
            now_ms: now,
            updates: parse_updates(body.as_object().unwrap()).unwrap(),
            principals: Principals::master(),
            unset: Vec::new(),
            holds: Vec::new(),
        }
    }

    fn object(store: &Store, id: &str) -> Option<StoredObject> {
        store
            .get(CF_SM, &keys::object_key(GroupId::new(1), "a", "C", id))
            .unwrap()
            .map(|b| StoredObject::decode(&b).unwrap())
    }

    fn take_quota(now: i64) -> Command {
        Command::TakeQuota {
            ns: "q".into(),
            key: "k".into(),
            now_ms: now,
            windows: vec![
                crate::command::QuotaWindow {
                    length_ms: 60_000,
                    max: 1,
                },
                crate::command::QuotaWindow {
                    length_ms: 3_600_000,
                    max: 3,
                },
            ],
        }
    }

    /// The app's usage in the group, as apply keeps it.
    fn usage(st: &Staged<'_>, app: &str) -> crate::usage::AppUsage {
        live_record(st, "usage", app, None)
            .unwrap()
            .map(|r| serde_json::from_value(r.value).unwrap())
            .unwrap_or_default()
    }

    /// The bytes of an object as stored.
    fn stored_len(st: &Staged<'_>, id: &str) -> u64 {
        st.get(&keys::object_key(GroupId::new(1), "a", "C", id))
            .unwrap()
            .map_or(0, |b| b.len() as u64)
    }

    /// Every write that changes what an app stores changes its usage by exactly the bytes it
    /// adds or frees, refused writes change nothing, and the count is what a recount of the
    /// stored group finds.
    #[test]
    fn usage_counts_objects_and_files_exactly_as_they_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        apply_command(&mut st, create("o1", 1, json!({"s": "x".repeat(1000)}))).unwrap();
        apply_command(&mut st, create("o2", 1, json!({"n": 1}))).unwrap();
        let u = usage(&st, "a");
        assert_eq!(u.objects, 2);
        assert_eq!(
            u.object_bytes,
            stored_len(&st, "o1") + stored_len(&st, "o2")
        );
        assert!(u.object_bytes > 1000);
        // A retried create and a refused update change nothing.
        apply_command(&mut st, create("o2", 1, json!({"n": 1}))).unwrap();
        apply_command(&mut st, update("nope", 2, json!({"n": 2}))).unwrap();
        assert_eq!(usage(&st, "a"), u);
        // An update counts what it adds or frees.
        apply_command(&mut st, update("o1", 2, json!({"s": "short"}))).unwrap();
        let after = usage(&st, "a");
        assert_eq!(after.objects, 2);
        assert_eq!(
            after.object_bytes,
            stored_len(&st, "o1") + stored_len(&st, "o2")
        );
        assert!(after.object_bytes < u.object_bytes - 900);
        // Files count by their records; another app's are its own.
        let file = |app: &str, size: u64| {
            json!({"app": app, "path": "p", "filename": "f.txt",
            "size": size, "content_type": "text/plain", "md5": "0", "created_ms": 1, "cdn": "c"})
        };
        for (key, app, size) in [("f1", "a", 5_000u64), ("f2", "a", 7), ("f3", "b", 9)] {
            let cmd = Command::InsertRecord {
                ns: "file".into(),
                key: key.into(),
                value: file(app, size),
                expires_at_ms: None,
                now_ms: 1,
            };
            apply_command(&mut st, cmd).unwrap();
        }
        assert_eq!(
            (usage(&st, "a").files, usage(&st, "a").file_bytes),
            (2, 5_007)
        );
        assert_eq!((usage(&st, "b").files, usage(&st, "b").file_bytes), (1, 9));
        let gone = Command::CasRecord {
            ns: "file".into(),
            key: "f1".into(),
            expected: Some(file("a", 5_000)),
            value: None,
            now_ms: 2,
        };
        assert!(matches!(
            apply_command(&mut st, gone).unwrap(),
            CommandResult::Done
        ));
        assert_eq!((usage(&st, "a").files, usage(&st, "a").file_bytes), (1, 7));
        // A purge frees what it strips and deletes.
        let strip = Command::PurgeClass {
            app: "a".into(),
            class: "C".into(),
            field: Some("s".into()),
            after: None,
            limit: 10,
        };
        apply_command(&mut st, strip).unwrap();
        assert_eq!(
            usage(&st, "a").object_bytes,
            stored_len(&st, "o1") + stored_len(&st, "o2")
        );
        store.write(st.into_batch().unwrap(), false).unwrap();
        let recounted = crate::statemachine::upgrade::group_usage(&store, GroupId::new(1)).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        for (k, v) in &recounted {
            assert_eq!(st.get(k).unwrap().as_ref(), Some(v));
        }
        apply_command(
            &mut st,
            Command::DeleteObject {
                app: "a".into(),
                class: "C".into(),
                object_id: "o1".into(),
                principals: Principals::master(),
            },
        )
        .unwrap();
        let purge = Command::PurgeClass {
            app: "a".into(),
            class: "C".into(),
            field: None,
            after: None,
            limit: 10,
        };
        apply_command(&mut st, purge).unwrap();
        let left = usage(&st, "a");
        assert_eq!((left.objects, left.object_bytes, left.files), (0, 0, 1));
    }

    /// Commands are applied in log order, not in the order of the times their proposers
    /// stamped: a use stamped after the command being checked still counts.
    #[test]
    fn a_quota_counts_uses_stamped_after_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        assert!(matches!(
            apply_command(&mut st, take_quota(2_000)).unwrap(),
            CommandResult::Record(_)
        ));
        assert!(matches!(
            apply_command(&mut st, take_quota(1_000)).unwrap(),
            CommandResult::Rejected(Error::QuotaExceeded(_))
        ));
        // The record keeps the later use and expires an hour after it.
        let rec = live_record(&st, "q", "k", Some(1_000)).unwrap().unwrap();
        assert_eq!(rec.value, json!({"uses": [2_000]}));
        assert_eq!(rec.expires_at_ms, Some(2_000 + 3_600_000));
        assert!(matches!(
            apply_command(&mut st, take_quota(62_001)).unwrap(),
            CommandResult::Record(_)
        ));
    }

    /// An update that may only set fields the object does not hold: the first such write
    /// applies, one after it is refused as a whole.
    #[test]
    fn an_update_of_unset_fields_applies_only_while_they_are_unset() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        apply_command(&mut st, create("o1", 1, json!({"kind": "x", "gone": null}))).unwrap();
        let first_set = |value: &str| {
            let mut cmd = update("o1", 2, json!({"token": value, "n": 1}));
            if let Command::UpdateObject { unset, .. } = &mut cmd {
                *unset = vec!["token".into(), "gone".into()];
            }
            cmd
        };
        assert!(matches!(
            apply_command(&mut st, first_set("t1")).unwrap(),
            CommandResult::Updated { .. }
        ));
        assert!(matches!(
            apply_command(&mut st, first_set("t2")).unwrap(),
            CommandResult::Rejected(Error::Conflict(_))
        ));
        store.write(st.into_batch().unwrap(), false).unwrap();
        let o = object(&store, "o1").unwrap();
        assert_eq!(
            (o.fields["token"].clone(), o.fields["n"].clone()),
            (json!("t1"), json!(1))
        );
    }

    /// An update that applies only while fields hold what the writer read.
    #[test]
    fn an_update_holding_values_applies_only_while_they_hold() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        apply_command(&mut st, create("o1", 1, json!({"token": "old"}))).unwrap();
        let clear_if = |value: &str| {
            let mut cmd = update("o1", 2, json!({"token": {"__op": "Delete"}}));
            if let Command::UpdateObject { holds, .. } = &mut cmd {
                *holds = vec![("token".into(), json!(value))];
            }
            cmd
        };
        // The device sent a new token meanwhile: the dead one's removal is refused.
        apply_command(&mut st, update("o1", 2, json!({"token": "new"}))).unwrap();
        assert!(matches!(
            apply_command(&mut st, clear_if("old")).unwrap(),
            CommandResult::Rejected(Error::Conflict(_))
        ));
        assert!(matches!(
            apply_command(&mut st, clear_if("new")).unwrap(),
            CommandResult::Updated { .. }
        ));
        store.write(st.into_batch().unwrap(), false).unwrap();
        assert!(object(&store, "o1").unwrap().fields.get("token").is_none());
    }

    #[test]
    fn a_returned_use_no_longer_counts() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        let give_back = |ms| Command::ReturnQuota {
            ns: "q".into(),
            key: "k".into(),
            use_ms: ms,
        };
        apply_command(&mut st, take_quota(1_000)).unwrap();
        assert_eq!(
            apply_command(&mut st, give_back(999)).unwrap(),
            CommandResult::Done
        );
        assert!(matches!(
            apply_command(&mut st, take_quota(1_001)).unwrap(),
            CommandResult::Rejected(Error::QuotaExceeded(_))
        ));
        apply_command(&mut st, give_back(1_000)).unwrap();
        assert!(live_record(&st, "q", "k", None).unwrap().is_none());
        assert!(matches!(
            apply_command(&mut st, take_quota(1_002)).unwrap(),
            CommandResult::Record(_)
        ));
    }

    #[test]
    fn a_quota_counts_uses_per_sliding_window() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        let full = |r: CommandResult| matches!(r, CommandResult::Rejected(Error::QuotaExceeded(_)));
        assert!(!full(apply_command(&mut st, take_quota(1_000)).unwrap()));
        assert!(
            full(apply_command(&mut st, take_quota(30_000)).unwrap()),
            "1 per minute"
        );
        assert!(!full(apply_command(&mut st, take_quota(61_001)).unwrap()));
        assert!(!full(apply_command(&mut st, take_quota(130_000)).unwrap()));
        assert!(
            full(apply_command(&mut st, take_quota(200_000)).unwrap()),
            "3 per hour"
        );
        // The refused attempts were not counted: an hour after the first use one is free again.
        assert!(!full(
            apply_command(&mut st, take_quota(3_601_001)).unwrap()
        ));
        let rec = live_record(&st, "q", "k", Some(3_601_001))
            .unwrap()
            .unwrap();
        assert_eq!(rec.value["uses"], json!([61_001, 130_000, 3_601_001]));
        assert_eq!(rec.expires_at_ms, Some(3_601_001 + 3_600_000));
    }

    #[test]
    fn a_record_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        put_record(&mut st, "t", "tok", json!({"x": 1}), Some(100)).unwrap();
        let take = |now| Command::TakeRecord {
            ns: "t".into(),
            key: "tok".into(),
            now_ms: now,
        };
        assert_eq!(
            apply_command(&mut st, take(50)).unwrap(),
            CommandResult::Record(json!({"x": 1}))
        );
        assert_eq!(
            apply_command(&mut st, take(60)).unwrap(),
            CommandResult::Rejected(Error::ObjectNotFound)
        );
        put_record(&mut st, "t", "tok", json!({"x": 2}), Some(100)).unwrap();
        assert_eq!(
            apply_command(&mut st, take(100)).unwrap(),
            CommandResult::Rejected(Error::ObjectNotFound),
            "an expired record cannot be taken"
        );
    }

    #[test]
    fn later_commands_see_earlier_writes_of_the_same_batch() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        apply_command(&mut st, create("x", 10, json!({"n": 1}))).unwrap();
        let r = apply_command(
            &mut st,
            update("x", 20, json!({"n": {"__op": "Increment", "amount": 2}})),
        )
        .unwrap();
        assert_eq!(r, CommandResult::Updated { updated_ms: 20 });
        assert!(
            object(&store, "x").is_none(),
            "nothing is written before the batch"
        );
        store.write(st.into_batch().unwrap(), false).unwrap();
        let o = object(&store, "x").unwrap();
        assert_eq!(o.fields["n"], json!(3));
        assert_eq!((o.created_ms, o.updated_ms), (10, 20));
    }

    #[test]
    fn a_rejected_command_stages_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        apply_command(&mut st, create("x", 10, json!({"s": "text", "n": 1}))).unwrap();
        let r = apply_command(
            &mut st,
            update("x", 20, json!({"n": {"__op": "Increment", "amount": 5}, "s": {"__op": "Increment", "amount": 1}})),
        )
        .unwrap();
        assert!(matches!(r, CommandResult::Rejected(Error::TypeMismatch(_))));
        store.write(st.into_batch().unwrap(), false).unwrap();
        let o = object(&store, "x").unwrap();
        assert_eq!(
            o.fields["n"],
            json!(1),
            "the Increment before the failing one is not kept"
        );
        assert_eq!(o.updated_ms, 10);
    }

    #[test]
    fn update_and_delete_of_a_missing_object_are_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        let r = apply_command(&mut st, update("nope", 1, json!({"a": 1}))).unwrap();
        assert_eq!(r, CommandResult::Rejected(Error::ObjectNotFound));
        let r = apply_command(
            &mut st,
            Command::DeleteObject {
                app: "a".into(),
                class: "C".into(),
                object_id: "nope".into(),
                principals: Principals::master(),
            },
        )
        .unwrap();
        assert_eq!(r, CommandResult::Rejected(Error::ObjectNotFound));
    }

    #[test]
    fn a_retried_create_is_answered_not_duplicated() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        apply_command(&mut st, create("x", 10, json!({"n": 1}))).unwrap();
        let again = apply_command(&mut st, create("x", 10, json!({"n": 1}))).unwrap();
        assert!(matches!(again, CommandResult::Created { .. }));
        let clash = apply_command(&mut st, create("x", 11, json!({"n": 1}))).unwrap();
        assert!(matches!(clash, CommandResult::Rejected(Error::Conflict(_))));
    }

    #[test]
    fn records_expire_by_the_sweep_and_overwrites_move_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        let put = |k: &str, t: Option<i64>| Command::PutRecord {
            ns: "n".into(),
            key: k.into(),
            value: json!(k),
            expires_at_ms: t,
        };
        apply_command(&mut st, put("short", Some(100))).unwrap();
        apply_command(&mut st, put("long", Some(100))).unwrap();
        apply_command(&mut st, put("long", Some(5000))).unwrap();
        apply_command(&mut st, put("forever", None)).unwrap();
        store.write(st.into_batch().unwrap(), false).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        let r = apply_command(&mut st, Command::ExpireRecords { now_ms: 1000 }).unwrap();
        assert_eq!(r, CommandResult::Expired { count: 1 });
        store.write(st.into_batch().unwrap(), false).unwrap();
        let has = |k: &str| {
            store
                .get(CF_SM, &keys::record_key(GroupId::new(1), "n", k))
                .unwrap()
                .is_some()
        };
        assert!(!has("short"));
        assert!(has("long"));
        assert!(has("forever"));
        let mut st = Staged::new(&store, GroupId::new(1));
        let r = apply_command(&mut st, Command::ExpireRecords { now_ms: 6000 }).unwrap();
        assert_eq!(r, CommandResult::Expired { count: 1 });
    }

    #[test]
    fn insert_record_claims_a_key_once_until_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        let insert = |now: i64| Command::InsertRecord {
            ns: "nonce".into(),
            key: "app/n1".into(),
            value: json!(1),
            expires_at_ms: Some(100),
            now_ms: now,
        };
        assert_eq!(
            apply_command(&mut st, insert(10)).unwrap(),
            CommandResult::Done
        );
        assert!(matches!(
            apply_command(&mut st, insert(50)).unwrap(),
            CommandResult::Rejected(Error::Conflict(_))
        ));
        // Expired (even before the sweep ran): the key may be claimed again.
        assert_eq!(
            apply_command(&mut st, insert(100)).unwrap(),
            CommandResult::Done
        );
    }

    #[test]
    fn merge_record_changes_only_the_given_members() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        let merge = Command::MergeRecord {
            ns: "app".into(),
            key: "a1".into(),
            members: json!({"status": 0}).as_object().unwrap().clone(),
        };
        assert_eq!(
            apply_command(&mut st, merge.clone()).unwrap(),
            CommandResult::Rejected(Error::ObjectNotFound)
        );
        apply_command(
            &mut st,
            Command::PutRecord {
                ns: "app".into(),
                key: "a1".into(),
                value: json!({"status": 1, "appName": "x"}),
                expires_at_ms: None,
            },
        )
        .unwrap();
        assert_eq!(
            apply_command(&mut st, merge).unwrap(),
            CommandResult::Record(json!({"status": 0, "appName": "x"}))
        );
    }

    #[test]
    fn purge_class_pages_through_objects_and_strips_fields() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        for i in 0..5 {
            apply_command(
                &mut st,
                create(&format!("o{i}"), 1, json!({"a": i, "b": 1})),
            )
            .unwrap();
        }
        // Another class with a name that extends this one's is never touched.
        apply_command(
            &mut st,
            Command::CreateObject {
                app: "a".into(),
                class: "CC".into(),
                object_id: "z".into(),
                now_ms: 1,
                updates: parse_updates(json!({"a": 1}).as_object().unwrap()).unwrap(),
            },
        )
        .unwrap();
        store.write(st.into_batch().unwrap(), false).unwrap();
        let purge = |field: Option<&str>, after: Option<String>| Command::PurgeClass {
            app: "a".into(),
            class: "C".into(),
            field: field.map(str::to_string),
            after,
            limit: 2,
        };
        let mut st = Staged::new(&store, GroupId::new(1));
        let r = apply_command(&mut st, purge(Some("a"), None)).unwrap();
        assert_eq!(
            r,
            CommandResult::Purged {
                count: 2,
                next: Some("o1".into())
            }
        );
        let r = apply_command(&mut st, purge(Some("a"), Some("o1".into()))).unwrap();
        assert_eq!(
            r,
            CommandResult::Purged {
                count: 2,
                next: Some("o3".into())
            }
        );
        let r = apply_command(&mut st, purge(Some("a"), Some("o3".into()))).unwrap();
        assert_eq!(
            r,
            CommandResult::Purged {
                count: 1,
                next: None
            }
        );
        store.write(st.into_batch().unwrap(), false).unwrap();
        let o = object(&store, "o4").unwrap();
        assert!(o.fields.get("a").is_none() && o.fields["b"] == json!(1));
        // Deleting sees the staged deletes of the same batch.
        let mut st = Staged::new(&store, GroupId::new(1));
        let mut after = None;
        let mut total = 0;
        loop {
            match apply_command(&mut st, purge(None, after)).unwrap() {
                CommandResult::Purged { count, next } => {
                    total += count;
                    after = next;
                }
                other => panic!("{other:?}"),
            }
            if after.is_none() {
                break;
            }
        }
        assert_eq!(total, 5);
        store.write(st.into_batch().unwrap(), false).unwrap();
        assert!(object(&store, "o0").is_none() && object(&store, "o4").is_none());
        assert!(store
            .get(CF_SM, &keys::object_key(GroupId::new(1), "a", "CC", "z"))
            .unwrap()
            .is_some());
    }

    #[test]
    fn ensure_columns_fixes_types_and_refuses_a_class_it_may_not_create() {
        use crate::schema::{Column, ColumnType, Need};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(0));
        let ensure = |t: ColumnType, may: bool| Command::EnsureColumns {
            app: "a".into(),
            class: "Game".into(),
            needs: vec![("score".into(), Need::Exactly(Column::of(t)))],
            may_create_class: may,
        };
        assert!(matches!(
            apply_command(&mut st, ensure(ColumnType::Number, false)).unwrap(),
            CommandResult::Rejected(Error::Schema(
                crate::schema::SchemaError::ClassCreationNotAllowed(_)
            ))
        ));
        assert_eq!(
            apply_command(&mut st, ensure(ColumnType::Number, true)).unwrap(),
            CommandResult::Done
        );
        assert_eq!(
            apply_command(&mut st, ensure(ColumnType::Number, false)).unwrap(),
            CommandResult::Done
        );
        assert!(matches!(
            apply_command(&mut st, ensure(ColumnType::String, true)).unwrap(),
            CommandResult::Rejected(Error::Schema(crate::schema::SchemaError::TypeMismatch(_)))
        ));
        assert!(matches!(
            apply_command(
                &mut st,
                Command::DropClass {
                    app: "a".into(),
                    class: "Nope".into()
                }
            )
            .unwrap(),
            CommandResult::Rejected(Error::Schema(crate::schema::SchemaError::ClassNotFound(_)))
        ));
        assert_eq!(
            apply_command(
                &mut st,
                Command::DropClass {
                    app: "a".into(),
                    class: "Game".into()
                }
            )
            .unwrap(),
            CommandResult::Done
        );
        // Dropped: the column may take another type.
        assert_eq!(
            apply_command(&mut st, ensure(ColumnType::String, true)).unwrap(),
            CommandResult::Done
        );
    }

    #[test]
    fn declare_index_pages_by_its_limit_old_tallies_first_and_old_entries_by_ten_thousand() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        for i in 0..5 {
            apply_command(&mut st, create(&format!("o{i}"), 1, json!({"n": i}))).unwrap();
        }
        store.write(st.into_batch().unwrap(), false).unwrap();
        // A command logged before `limit` existed still parses and takes 10,000 per page.
        let old: Command = serde_json::from_value(json!({"DeclareIndex": {
            "app": "a", "class": "C", "field": "n", "after": null}}))
        .unwrap();
        let mut st = Staged::new(&store, GroupId::new(1));
        assert_eq!(
            apply_command(&mut st, old).unwrap(),
            CommandResult::Purged {
                count: 5,
                next: None
            }
        );
        let paged = |after: Option<&str>| Command::DeclareIndex {
            app: "a".into(),
            class: "C".into(),
            field: None,
            after: after.map(str::to_string),
            limit: Some(2),
            rebuild: None,
        };
        // A rebuild first deletes the class's tallies (one per value here), by the same
        // limit, before it counts objects again.
        assert_eq!(
            apply_command(&mut st, paged(None)).unwrap(),
            CommandResult::Purged {
                count: 0,
                next: Some(String::new())
            }
        );
        assert_eq!(
            apply_command(&mut st, paged(Some(""))).unwrap(),
            CommandResult::Purged {
                count: 0,
                next: Some(String::new())
            }
        );
        assert_eq!(
            apply_command(&mut st, paged(Some(""))).unwrap(),
            CommandResult::Purged {
                count: 2,
                next: Some("o1".into())
            }
        );
        assert_eq!(
            apply_command(&mut st, paged(Some("o3"))).unwrap(),
            CommandResult::Purged {
                count: 1,
                next: None
            }
        );
    }
}
