//! One function per command kind, each staging its writes in `Staged`.
//!
//! An `Err` from here is a storage failure and stops the state machine; a command the data
//! refuses (missing object, type mismatch) returns `CommandResult::Rejected` and stages nothing.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ops::apply_updates;
use super::staged::Staged;
use crate::command::{Command, CommandResult};
use crate::error::{Error, Result};
use crate::object::StoredObject;
use crate::storage::keys;
use crate::update::FieldUpdate;

/// A record as stored: its value and optional expiry (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredRecord {
    pub v: u8,
    pub value: Value,
    pub expires_at_ms: Option<i64>,
}

impl StoredRecord {
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        Ok(serde_json::from_slice(bytes)?)
    }

    /// True when the record has expired at `now_ms` (readers treat it as absent even before
    /// the sweep deletes it).
    pub fn expired_at(&self, now_ms: i64) -> bool {
        self.expires_at_ms.is_some_and(|t| t <= now_ms)
    }
}

pub fn apply_command(st: &mut Staged<'_>, cmd: Command) -> Result<CommandResult> {
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
        } => apply_update(st, &app, &class, &object_id, now_ms, &updates),
        Command::DeleteObject {
            app,
            class,
            object_id,
        } => apply_delete(st, &app, &class, &object_id),
        Command::PutRecord {
            ns,
            key,
            value,
            expires_at_ms,
        } => apply_put_record(st, &ns, &key, value, expires_at_ms),
        Command::DeleteRecord { ns, key } => apply_delete_record(st, &ns, &key),
        Command::ExpireRecords { now_ms } => apply_expire_records(st, now_ms),
    }
}

fn apply_create(
    st: &mut Staged<'_>,
    app: &str,
    class: &str,
    object_id: &str,
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
                object_id: object_id.to_string(),
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
    st.put(key, obj.encode()?);
    Ok(CommandResult::Created {
        object_id: object_id.to_string(),
        created_ms: now_ms,
    })
}

fn apply_update(
    st: &mut Staged<'_>,
    app: &str,
    class: &str,
    object_id: &str,
    now_ms: i64,
    updates: &[FieldUpdate],
) -> Result<CommandResult> {
    let key = keys::object_key(st.group, app, class, object_id);
    let Some(bytes) = st.get(&key)? else {
        return Ok(CommandResult::Rejected(Error::ObjectNotFound));
    };
    let mut obj = StoredObject::decode(&bytes)?;
    if let Err(e) = apply_updates(&mut obj.fields, updates) {
        return Ok(CommandResult::Rejected(e));
    }
    // Timestamps never go backwards, even if proposers' clocks differ.
    obj.updated_ms = now_ms.max(obj.updated_ms);
    st.put(key, obj.encode()?);
    Ok(CommandResult::Updated {
        updated_ms: obj.updated_ms,
    })
}

fn apply_delete(
    st: &mut Staged<'_>,
    app: &str,
    class: &str,
    object_id: &str,
) -> Result<CommandResult> {
    let key = keys::object_key(st.group, app, class, object_id);
    if st.get(&key)?.is_none() {
        return Ok(CommandResult::Rejected(Error::ObjectNotFound));
    }
    st.delete(key);
    Ok(CommandResult::Deleted)
}

/// Removes the TTL index entry of the record at `rkey`, if it has one.
fn unindex_record(st: &mut Staged<'_>, rkey: &[u8], ns: &str, key: &str) -> Result<()> {
    if let Some(old) = st.get(rkey)? {
        if let Some(t) = StoredRecord::decode(&old)?.expires_at_ms {
            st.delete(keys::ttl_key(st.group, t, ns, key));
        }
    }
    Ok(())
}

fn apply_put_record(
    st: &mut Staged<'_>,
    ns: &str,
    key: &str,
    value: Value,
    expires_at_ms: Option<i64>,
) -> Result<CommandResult> {
    let rkey = keys::record_key(st.group, ns, key);
    unindex_record(st, &rkey, ns, key)?;
    if let Some(t) = expires_at_ms {
        st.put(keys::ttl_key(st.group, t, ns, key), Vec::new());
    }
    let rec = StoredRecord {
        v: 1,
        value,
        expires_at_ms,
    };
    st.put(rkey, serde_json::to_vec(&rec)?);
    Ok(CommandResult::Done)
}

fn apply_delete_record(st: &mut Staged<'_>, ns: &str, key: &str) -> Result<CommandResult> {
    let rkey = keys::record_key(st.group, ns, key);
    unindex_record(st, &rkey, ns, key)?;
    st.delete(rkey);
    Ok(CommandResult::Done)
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
        }
    }

    fn object(store: &Store, id: &str) -> Option<StoredObject> {
        store
            .get(CF_SM, &keys::object_key(1, "a", "C", id))
            .unwrap()
            .map(|b| StoredObject::decode(&b).unwrap())
    }

    #[test]
    fn later_commands_see_earlier_writes_of_the_same_batch() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, 1);
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
        let mut st = Staged::new(&store, 1);
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
        let mut st = Staged::new(&store, 1);
        let r = apply_command(&mut st, update("nope", 1, json!({"a": 1}))).unwrap();
        assert_eq!(r, CommandResult::Rejected(Error::ObjectNotFound));
        let r = apply_command(
            &mut st,
            Command::DeleteObject {
                app: "a".into(),
                class: "C".into(),
                object_id: "nope".into(),
            },
        )
        .unwrap();
        assert_eq!(r, CommandResult::Rejected(Error::ObjectNotFound));
    }

    #[test]
    fn a_retried_create_is_answered_not_duplicated() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut st = Staged::new(&store, 1);
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
        let mut st = Staged::new(&store, 1);
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
        let mut st = Staged::new(&store, 1);
        let r = apply_command(&mut st, Command::ExpireRecords { now_ms: 1000 }).unwrap();
        assert_eq!(r, CommandResult::Expired { count: 1 });
        store.write(st.into_batch().unwrap(), false).unwrap();
        let has = |k: &str| {
            store
                .get(CF_SM, &keys::record_key(1, "n", k))
                .unwrap()
                .is_some()
        };
        assert!(!has("short"));
        assert!(has("long"));
        assert!(has("forever"));
        let mut st = Staged::new(&store, 1);
        let r = apply_command(&mut st, Command::ExpireRecords { now_ms: 6000 }).unwrap();
        assert_eq!(r, CommandResult::Expired { count: 1 });
    }
}
