//! A group's side of a split (decisions/0038), applied like any command. `FreezeSlots` keeps
//! which of the group's slots now belong to a child; from that entry on a write to an object
//! of one of them is refused `Moved` (`refuse_frozen`), so the slots' objects stay as they were
//! while they are copied. On the child, `ImportIndexMeta` and `ImportObjects` build its state
//! from the parent's as stored: each object's index entries, tallies, counts and usage are made
//! by the code that makes them for every write (`index_upkeep`, `usage_writes`), and no change
//! is logged (the objects did not change). `DropSlots` deletes the moved objects from the parent
//! a page at a time and forgets the freeze when none is left. A merge's target opens its
//! imports for the slots it takes in (`OpenImports`: writes to them refused `Moved` meanwhile)
//! and adopts them once the map names it (`AdoptSlots`). Neighbours: `apply` (dispatch),
//! `staged`, `ids::slot_for`.

use super::index_upkeep;
use super::split_state::{put_state, state, state_to_change};
use super::staged::Staged;
use super::usage_writes;
use crate::command::{CommandResult, ImportedObject};
use crate::error::{Error, Result};
use crate::ids::{slot_for, GroupId};
use crate::names::AppId;
use crate::object::StoredObject;
use crate::query::index::IndexMeta;
use crate::slots::{Frozen, GroupSplits, Incoming};
use crate::storage::keys;
use crate::usage::UsageDelta;

/// The split under way: the slots the group froze for it.
#[cfg(test)]
pub(super) fn frozen(st: &mut Staged<'_>) -> Result<Option<Frozen>> {
    Ok(state(st)?.frozen.clone())
}

/// Whether objects are being copied out of the group (it froze slots for a split or merge)
/// or into it (a merge's imports are open).
pub(super) fn copying(st: &mut Staged<'_>) -> Result<bool> {
    let s = state(st)?;
    Ok(s.frozen.is_some() || s.incoming.as_ref().is_some_and(|i| !i.adopted))
}

/// A write to an object of a frozen slot, or of one given away, is refused: it belongs to the
/// child.
pub(super) fn refuse_frozen(
    st: &mut Staged<'_>,
    app: &str,
    class: &str,
    object_id: &str,
) -> Result<Option<CommandResult>> {
    let s = state(st)?;
    if s.total == 0 {
        return Ok(None);
    }
    let slot = slot_for(app, class, object_id, s.total);
    let epoch = match (&s.frozen, &s.incoming) {
        (Some(f), _) if f.slots.contains(&slot) => Some(f.epoch),
        // A merge's slot before the group adopts it is still its source's.
        (_, Some(i)) if !i.adopted && i.slots.contains(&slot) => Some(i.epoch),
        _ => s.gone.get(&slot).map(|&(_, epoch)| epoch),
    };
    Ok(epoch.map(|epoch| CommandResult::Rejected(Error::Moved { epoch })))
}

/// A set of slots to `what` that cannot be: none, one past `total`, or of another number of
/// slots than the group's.
fn refuse_slots(
    s: &GroupSplits,
    slots: &std::collections::BTreeSet<u32>,
    total: u32,
    what: &str,
) -> Option<CommandResult> {
    if total == 0 || slots.is_empty() || slots.iter().any(|&x| x >= total) {
        return Some(CommandResult::Rejected(Error::InvalidOperation(format!(
            "slots to {what} must be some of 0..{total}"
        ))));
    }
    (s.total != 0 && s.total != total).then(|| {
        CommandResult::Rejected(Error::InvalidOperation(format!(
            "the group's slots are of {}, not {total}",
            s.total
        )))
    })
}

/// Freezes `slots` for `child` (the same freeze again is done already; another while one is
/// kept is refused, and so are slots given away already).
pub(super) fn apply_freeze(st: &mut Staged<'_>, next: Frozen) -> Result<CommandResult> {
    let mut s = state_to_change(st)?;
    if let Some(refused) = refuse_slots(&s, &next.slots, next.total, "freeze") {
        return Ok(refused);
    }
    match &s.frozen {
        Some(f) if f.child == next.child && f.slots == next.slots && f.epoch == next.epoch => {
            return Ok(CommandResult::Done)
        }
        Some(f) => {
            return Ok(CommandResult::Rejected(Error::Conflict(format!(
                "group {} is splitting slots off to group {} already",
                st.group, f.child
            ))))
        }
        None => {}
    }
    if let Some(slot) = next.slots.iter().find(|x| s.gone.contains_key(x)) {
        return Ok(CommandResult::Rejected(Error::InvalidOperation(format!(
            "slot {slot} was given to another group already"
        ))));
    }
    s.total = next.total;
    s.frozen = Some(Frozen {
        dropped_through: None,
        ..next
    });
    put_state(st, s)?;
    Ok(CommandResult::Done)
}

/// Takes up a parent's index declarations of classes (what is indexed, not what is counted:
/// the imported objects count themselves). A class that has metadata already keeps it.
pub(super) fn apply_import_index_meta(
    st: &mut Staged<'_>,
    metas: Vec<(AppId, String, IndexMeta)>,
) -> Result<CommandResult> {
    if let Some(refused) = refuse_sealed(st)? {
        return Ok(refused);
    }
    for (app, class, meta) in metas {
        if index_upkeep::meta(st, &app, &class)?.is_none() {
            index_upkeep::import_meta(st, &app, &class, meta)?;
        }
    }
    Ok(CommandResult::Done)
}

/// Writes objects as stored, with their derived state and no change-log entry; an object
/// there already is replaced (an import sent again changes nothing).
pub(super) fn apply_import_objects(
    st: &mut Staged<'_>,
    objects: Vec<ImportedObject>,
) -> Result<CommandResult> {
    if let Some(refused) = refuse_sealed(st)? {
        return Ok(refused);
    }
    // A merge's target takes objects of the slots it takes in, and no other.
    if let Some(i) = state(st)?.incoming.clone() {
        if let Some(o) = objects.iter().find(|o| {
            !i.slots
                .contains(&slot_for(&o.app, &o.class, &o.object_id, i.total))
        }) {
            return Ok(CommandResult::Rejected(Error::InvalidOperation(format!(
                "object {} of {} is not of a slot group {} takes in",
                o.object_id, o.class, st.group
            ))));
        }
    }
    // Every object is read before anything is staged: one that does not decode refuses the
    // command whole.
    let mut decoded = Vec::with_capacity(objects.len());
    for o in objects {
        match StoredObject::decode(&o.stored) {
            Ok(obj) => decoded.push((o, obj)),
            Err(e) => {
                return Ok(CommandResult::Rejected(Error::InvalidOperation(format!(
                    "object {} of {} does not decode: {e}",
                    o.object_id, o.class
                ))))
            }
        }
    }
    for (o, obj) in decoded {
        let key = keys::object_key(st.group, &o.app, &o.class, &o.object_id);
        let old_bytes = st.get(&key)?;
        let old = old_bytes.as_deref().map(StoredObject::decode).transpose()?;
        index_upkeep::reindex(st, &o.app, &o.class, &o.object_id, old.as_ref(), Some(&obj))?;
        let bytes = obj.encode()?;
        usage_writes::count(
            st,
            &o.app,
            UsageDelta::object(old_bytes.as_ref().map(Vec::len), Some(bytes.len())),
        )?;
        st.put(key, bytes);
    }
    Ok(CommandResult::Done)
}

/// `Conflict` once the group sealed its imports (`SealImports`) and no merge into it takes
/// imports, or once the merge into it adopted its slots.
fn refuse_sealed(st: &mut Staged<'_>) -> Result<Option<CommandResult>> {
    let s = state(st)?;
    let open = match &s.incoming {
        Some(i) => !i.adopted,
        None => !s.sealed,
    };
    Ok((!open).then(|| {
        CommandResult::Rejected(Error::Conflict(format!(
            "group {} takes no more imports: the slot map names it",
            st.group
        )))
    }))
}

/// Opens the group to a merge's imports: `next.slots` are taken in from `next.from`. The same
/// again is done already; another while one is not adopted is refused, and so is one while
/// the group freezes slots. The merge before it, adopted, leaves its epoch as the read floor.
pub(super) fn apply_open_imports(st: &mut Staged<'_>, next: Incoming) -> Result<CommandResult> {
    let mut s = state_to_change(st)?;
    if let Some(refused) = refuse_slots(&s, &next.slots, next.total, "take in") {
        return Ok(refused);
    }
    if let Some(f) = &s.frozen {
        return Ok(CommandResult::Rejected(Error::Conflict(format!(
            "group {} is splitting slots off to group {}",
            st.group, f.child
        ))));
    }
    match &s.incoming {
        Some(i) if i.from == next.from && i.slots == next.slots && i.epoch == next.epoch => {
            return Ok(CommandResult::Done)
        }
        // A step of an earlier merge, sent late by a former metadata leader.
        Some(i) if next.epoch <= i.epoch => {
            return Ok(CommandResult::Rejected(Error::Conflict(format!(
                "group {} took in slots at epoch {} already",
                st.group, i.epoch
            ))))
        }
        Some(i) if !i.adopted => {
            return Ok(CommandResult::Rejected(Error::Conflict(format!(
                "group {} is taking in slots of group {} already",
                st.group, i.from
            ))))
        }
        Some(i) => s.floor = s.floor.max(i.epoch),
        None => {}
    }
    s.total = next.total;
    s.incoming = Some(Incoming {
        adopted: false,
        ..next
    });
    put_state(st, s)?;
    Ok(CommandResult::Done)
}

/// The merge from `from` at `epoch` is copied and the map names the group for its slots: they
/// are the group's from this entry on (writes to them taken, imports refused). Slots the group
/// once gave away come back; a reader of a map older than their giving is refused.
pub(super) fn apply_adopt_slots(
    st: &mut Staged<'_>,
    from: GroupId,
    epoch: u64,
) -> Result<CommandResult> {
    let mut s = state_to_change(st)?;
    let Some(mut i) = s
        .incoming
        .clone()
        .filter(|i| i.from == from && i.epoch == epoch)
    else {
        return Ok(CommandResult::Rejected(Error::Conflict(format!(
            "group {} takes in no slots of group {from} at epoch {epoch}",
            st.group
        ))));
    };
    if i.adopted {
        return Ok(CommandResult::Done);
    }
    for slot in &i.slots {
        if let Some((_, epoch)) = s.gone.remove(slot) {
            s.floor = s.floor.max(epoch);
        }
    }
    i.adopted = true;
    s.incoming = Some(i);
    put_state(st, s)?;
    Ok(CommandResult::Done)
}

/// Seals the group's imports: a split's child the map is about to name.
pub(super) fn apply_seal_imports(st: &mut Staged<'_>) -> Result<CommandResult> {
    let mut s = state_to_change(st)?;
    if !s.sealed {
        s.sealed = true;
        put_state(st, s)?;
    }
    Ok(CommandResult::Done)
}

/// Most objects one `DropSlots` deletes.
const MAX_DROP_PAGE: u32 = 10_000;

/// Deletes up to `limit` objects of the frozen slots (looking at no more than `limit · 16`
/// objects, or `limit` entries of the slot index once it is complete), with their derived state and no change-log entry; when every object was looked
/// at, the freeze is forgotten. Answers how many it deleted and whether objects are left to
/// look at (`Purged`'s `next`). A drop for another child, or for another batch (`epoch`), is
/// refused.
pub(super) fn apply_drop_slots(
    st: &mut Staged<'_>,
    child: GroupId,
    limit: u32,
    epoch: Option<u64>,
) -> Result<CommandResult> {
    let mut state = state_to_change(st)?;
    let Some(mut f) = state.frozen.clone() else {
        return Ok(CommandResult::Purged {
            count: 0,
            next: None,
        });
    };
    // A page of an earlier split, late: the slots frozen now are not copied yet.
    if f.child != child {
        return Ok(CommandResult::Rejected(Error::Conflict(format!(
            "group {} freezes slots for group {}, not {child}",
            st.group, f.child
        ))));
    }
    // A page of an earlier batch of the same split, late: this batch is not copied yet.
    if epoch.is_some_and(|e| e != f.epoch) {
        return Ok(CommandResult::Rejected(Error::Conflict(format!(
            "group {} freezes slots of the batch at epoch {}, not {epoch:?}",
            st.group, f.epoch
        ))));
    }
    let by_index = match &f.dropped_through {
        Some(k) => k.get(4) == Some(&keys::SM_SLOT_INDEX),
        None => state.slot_index_of(f.total).is_some(),
    };
    let limit = limit.clamp(1, MAX_DROP_PAGE) as usize;
    // Every entry of the index names an object of the frozen slots; a scan looks at others.
    let budget = match by_index {
        true => limit,
        false => limit.saturating_mul(16),
    };
    let found = match by_index {
        true => indexed_objects(st, &f, budget + 1)?,
        false => {
            let start = match &f.dropped_through {
                Some(k) => [k.as_slice(), &[0u8]].concat(),
                None => keys::sm_family(st.group, keys::SM_OBJECT),
            };
            let end = keys::sm_family(st.group, keys::SM_OBJECT + 1);
            let keys = st.keys_in_range_limited(&start, &end, budget + 1)?;
            keys.into_iter().map(|k| (k.clone(), k)).collect()
        }
    };
    // Objects are left to look at when more were found than looked at.
    let mut left = found.len() > budget;
    let mut count = 0u64;
    let mut last = None;
    for (cursor, key) in found.into_iter().take(budget) {
        if count as usize == limit {
            left = true;
            break;
        }
        last = Some(cursor.clone());
        let Some((app, class, id)) = keys::parse_object_key(&key) else {
            continue;
        };
        if !f.holds(&app, &class, &id) {
            continue;
        }
        let Some(bytes) = st.get(&key)? else {
            // An entry whose object is gone (none once the index is complete).
            if by_index {
                st.delete(cursor);
            }
            continue;
        };
        let old = StoredObject::decode(&bytes)?;
        let app = AppId::stored(app);
        index_upkeep::reindex(st, &app, &class, &id, Some(&old), None)?;
        usage_writes::count(st, &app, UsageDelta::object(Some(bytes.len()), None))?;
        st.free(bytes.len() as u64);
        st.delete(key);
        count += 1;
    }
    if left {
        f.dropped_through = last.or(f.dropped_through);
        // Set while objects are left to look at, whether or not the last key named one.
        let next = f
            .dropped_through
            .as_deref()
            .map(|k| keys::object_of_slot_entry(k).unwrap_or_else(|| k.to_vec()))
            .as_deref()
            .and_then(keys::parse_object_key)
            .map_or_else(String::new, |(_, _, id)| id);
        state.frozen = Some(f);
        put_state(st, state)?;
        Ok(CommandResult::Purged {
            count,
            next: Some(next),
        })
    } else {
        // Given away for good: still refused to a node routing by an older map.
        for &slot in &f.slots {
            state.gone.insert(slot, (f.child, f.epoch));
        }
        state.frozen = None;
        put_state(st, state)?;
        Ok(CommandResult::Purged { count, next: None })
    }
}

/// Up to `want` entries of the frozen slots' objects in the slot index after `DropSlots`'
/// cursor, each with the object key it names.
fn indexed_objects(st: &Staged<'_>, f: &Frozen, want: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let from = f.dropped_through.as_deref().and_then(keys::slot_of_entry);
    let mut found = Vec::new();
    for &slot in f.slots.range(from.unwrap_or(0)..) {
        if found.len() >= want {
            break;
        }
        let (mut start, end) = keys::slot_range(st.group, slot);
        if let Some(k) = f.dropped_through.as_deref().filter(|_| from == Some(slot)) {
            start = [k, &[0u8]].concat();
        }
        for entry in st.keys_in_range_limited(&start, &end, want - found.len())? {
            if let Some(object) = keys::object_of_slot_entry(&entry) {
                found.push((entry, object));
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::Principals;
    use crate::command::Command;
    use crate::ids::{slot_for, GroupId};
    use crate::storage::records::live_record;
    use crate::storage::Store;
    use crate::update::parse_updates;
    use serde_json::json;
    use std::collections::BTreeSet;

    const PARENT: GroupId = GroupId::new(1);
    const CHILD: GroupId = GroupId::new(5);
    const TOTAL: u32 = 4 * 256;

    fn apply(st: &mut Staged<'_>, cmd: Command) -> CommandResult {
        super::super::apply::apply_command(st, cmd).expect("apply")
    }

    fn create(id: &str, n: i64) -> Command {
        Command::CreateObject {
            app: "a".into(),
            class: "C".into(),
            object_id: id.into(),
            now_ms: 1_000 + n,
            updates: parse_updates(
                json!({"n": n, "tag": format!("t{}", n % 7)})
                    .as_object()
                    .expect("body"),
            )
            .expect("updates"),
        }
    }

    fn update(id: &str) -> Command {
        Command::UpdateObject {
            app: "a".into(),
            class: "C".into(),
            object_id: id.into(),
            now_ms: 5_000,
            updates: parse_updates(json!({"n": -1}).as_object().expect("body")).expect("updates"),
            principals: Principals::master(),
            unset: Vec::new(),
            holds: Vec::new(),
        }
    }

    fn delete(id: &str) -> Command {
        Command::DeleteObject {
            app: "a".into(),
            class: "C".into(),
            object_id: id.into(),
            principals: Principals::master(),
        }
    }

    /// The frozen slots: every other one.
    fn slots() -> BTreeSet<u32> {
        (0..TOTAL).filter(|s| s.is_multiple_of(2)).collect()
    }

    fn frozen_slot(id: &str) -> bool {
        slot_for("a", "C", id, TOTAL).is_multiple_of(2)
    }

    /// Keys of one state family of `group` as `st` sees them.
    fn family(st: &Staged<'_>, group: GroupId, family: u8) -> Vec<Vec<u8>> {
        st.keys_in_range_limited(
            &keys::sm_family(group, family),
            &keys::sm_family(group, family + 1),
            usize::MAX,
        )
        .expect("keys")
    }

    fn usage(st: &Staged<'_>) -> crate::usage::AppUsage {
        live_record(st, "usage", "a", None)
            .expect("usage")
            .map(|r| serde_json::from_value(r.value).expect("usage value"))
            .unwrap_or_default()
    }

    fn counts(st: &mut Staged<'_>) -> u64 {
        index_upkeep::meta(st, &AppId::from("a"), "C")
            .expect("meta")
            .map_or(0, |m| m.counts.objects)
    }

    /// Story — a group freezes half its slots: writes to their objects are refused `Moved`,
    /// others go on; the child imports the frozen objects (twice: the second changes nothing)
    /// with their index entries, counts and usage; the parent drops them a page at a time and
    /// forgets the freeze; parent and child together hold what the parent held, counted
    /// exactly.
    #[test]
    fn frozen_slots_move_to_the_child_whole_and_leave_the_parent() {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(dir.path()).expect("store");
        let mut parent = Staged::new(&store, PARENT);
        let ids: Vec<String> = (0..300).map(|i| format!("obj{i:04}")).collect();
        for (i, id) in ids.iter().enumerate() {
            apply(&mut parent, create(id, i as i64));
        }
        assert_eq!(counts(&mut parent), 300);
        let moving: Vec<&String> = ids.iter().filter(|id| frozen_slot(id)).collect();
        assert!(moving.len() > 100 && moving.len() < 200, "{}", moving.len());

        let freeze = Frozen {
            child: CHILD,
            slots: slots(),
            total: TOTAL,
            epoch: 7,
            dropped_through: None,
        };
        let cmd = || Command::FreezeSlots(freeze.clone());
        assert_eq!(apply(&mut parent, cmd()), CommandResult::Done);
        assert_eq!(
            apply(&mut parent, cmd()),
            CommandResult::Done,
            "the same freeze again"
        );
        let other = Frozen {
            child: GroupId::new(6),
            ..freeze.clone()
        };
        assert!(matches!(
            apply(&mut parent, Command::FreezeSlots(other)),
            CommandResult::Rejected(Error::Conflict(_))
        ));
        let (frozen_id, kept_id) = (
            moving[0].clone(),
            ids.iter()
                .find(|id| !frozen_slot(id))
                .expect("a kept one")
                .clone(),
        );
        let moved = CommandResult::Rejected(Error::Moved { epoch: 7 });
        assert_eq!(apply(&mut parent, update(&frozen_id)), moved);
        assert_eq!(apply(&mut parent, delete(&frozen_id)), moved);
        let new_frozen = (0..)
            .map(|i| format!("new{i}"))
            .find(|id| frozen_slot(id))
            .expect("an id in a frozen slot");
        assert_eq!(apply(&mut parent, create(&new_frozen, 1)), moved);
        assert!(matches!(
            apply(&mut parent, update(&kept_id)),
            CommandResult::Updated { .. }
        ));
        // A class purge (or index job) would change the frozen objects: it waits.
        let purge = Command::PurgeClass {
            app: "a".into(),
            class: "C".into(),
            field: None,
            after: None,
            limit: 10,
        };
        assert!(matches!(
            apply(&mut parent, purge),
            CommandResult::Rejected(Error::Conflict(_))
        ));
        let index_before = family(&parent, PARENT, keys::SM_INDEX).len();
        let usage_before = usage(&parent);
        assert_eq!(usage_before.objects, 300, "refused writes wrote nothing");

        // The child imports what the parent holds of the frozen slots, twice.
        let meta = index_upkeep::meta(&mut parent, &AppId::from("a"), "C")
            .expect("meta")
            .expect("the class's metadata");
        let exported: Vec<ImportedObject> = moving
            .iter()
            .map(|id| ImportedObject {
                app: AppId::from("a"),
                class: "C".into(),
                object_id: id.to_string(),
                stored: parent
                    .get(&keys::object_key(PARENT, "a", "C", id))
                    .expect("get")
                    .expect("stored"),
            })
            .collect();
        let mut child = Staged::new(&store, CHILD);
        for _ in 0..2 {
            let metas = vec![(AppId::from("a"), "C".to_string(), meta.clone())];
            assert_eq!(
                apply(&mut child, Command::ImportIndexMeta(metas)),
                CommandResult::Done
            );
            assert_eq!(
                apply(&mut child, Command::ImportObjects(exported.clone())),
                CommandResult::Done
            );
        }
        assert_eq!(counts(&mut child), moving.len() as u64);
        assert_eq!(
            family(&child, CHILD, keys::SM_CHANGES).len(),
            0,
            "no change logged"
        );
        let child_usage = usage(&child);
        assert_eq!(child_usage.objects, moving.len() as u64);
        for e in &exported {
            let there = child
                .get(&keys::object_key(CHILD, "a", "C", &e.object_id))
                .expect("get");
            assert_eq!(there.as_ref(), Some(&e.stored), "{} as stored", e.object_id);
        }
        let bad = vec![ImportedObject {
            stored: b"not an object".to_vec(),
            ..exported[0].clone()
        }];
        assert!(matches!(
            apply(&mut child, Command::ImportObjects(bad)),
            CommandResult::Rejected(_)
        ));

        // A drop of another batch of the same child (a former leader's, late) is refused.
        assert!(matches!(
            apply(
                &mut parent,
                Command::DropSlots {
                    child: CHILD,
                    limit: 10,
                    epoch: Some(6),
                }
            ),
            CommandResult::Rejected(Error::Conflict(_))
        ));
        assert_eq!(usage(&parent).objects, 300, "nothing dropped");
        // The parent drops them, 10 a page, and forgets the freeze.
        let mut pages = 0;
        let mut dropped = 0;
        loop {
            pages += 1;
            assert!(pages < 200, "no end to the drop");
            match apply(
                &mut parent,
                Command::DropSlots {
                    child: CHILD,
                    limit: 10,
                    epoch: Some(7),
                },
            ) {
                CommandResult::Purged { count, next } => {
                    assert!(count <= 10);
                    dropped += count;
                    assert_eq!(
                        next.is_none(),
                        frozen(&mut parent).expect("frozen").is_none(),
                        "next is set exactly while the freeze is kept"
                    );
                    if next.is_none() {
                        break;
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(dropped, moving.len() as u64);
        assert!(pages >= moving.len() / 10, "paged: {pages}");
        let kept = 300 - moving.len() as u64;
        assert_eq!(counts(&mut parent), kept);
        let parent_usage = usage(&parent);
        assert_eq!(parent_usage.objects, kept);
        assert_eq!(
            parent_usage.object_bytes + child_usage.object_bytes,
            usage_before.object_bytes,
            "every byte in one group or the other"
        );
        assert_eq!(
            family(&parent, PARENT, keys::SM_INDEX).len()
                + family(&child, CHILD, keys::SM_INDEX).len(),
            index_before,
            "every index entry in one group or the other"
        );
        // Given away for good: a node routing by an older map is still told so.
        assert_eq!(apply(&mut parent, create(&new_frozen, 1)), moved);
        assert_eq!(apply(&mut parent, update(&frozen_id)), moved);
        assert!(matches!(
            apply(&mut parent, update(&kept_id)),
            CommandResult::Updated { .. }
        ));
        // The parent splits again: not the slots it gave away, the others it may.
        let again = |slots: BTreeSet<u32>| {
            Command::FreezeSlots(Frozen {
                child: GroupId::new(6),
                slots,
                total: TOTAL,
                epoch: 8,
                dropped_through: None,
            })
        };
        assert!(matches!(
            apply(&mut parent, again(BTreeSet::from([0]))),
            CommandResult::Rejected(Error::InvalidOperation(_))
        ));
        assert_eq!(
            apply(&mut parent, again(BTreeSet::from([1]))),
            CommandResult::Done
        );
    }
}
