//! Keeps a data group's slot index (`slots::SlotIndex`, decisions/0038 step 7): an entry at
//! group · `h` · slot · object for each of its objects, so that a split's or merge's batch
//! copies (`local_read`) and drops (`split_writes::apply_drop_slots`) its own slots' objects
//! without reading the rest of the group. From the first `IndexSlots` on, every object
//! created, imported or deleted stages its entry with it (`keep`, called by
//! `index_upkeep::reindex`), and `IndexSlots` pages enter the objects stored before, in key
//! order, until the index is complete. Before the first `IndexSlots` (proposed only once the
//! feature `slot-index` is on) apply writes nothing new, as a build without it would.
//! Neighbours: `split_state` (the record the index's progress is kept in).

use super::split_state::{put_state, state, state_to_change};
use super::staged::Staged;
use crate::command::CommandResult;
use crate::error::{Error, Result};
use crate::ids::slot_for;
use crate::slots::SlotIndex;
use crate::storage::keys;

/// Most objects one `IndexSlots` enters.
const MAX_INDEX_PAGE: u32 = 20_000;

/// Stages the entry of an object that now `exists` (created or imported) or no longer does
/// (deleted), when the group keeps a slot index.
pub(super) fn keep(
    st: &mut Staged<'_>,
    app: &str,
    class: &str,
    object_id: &str,
    exists: bool,
) -> Result<()> {
    let Some(total) = state(st)?.slot_index.as_ref().map(|i| i.total) else {
        return Ok(());
    };
    let object = keys::object_key(st.group, app, class, object_id);
    if let Some(entry) = keys::slot_entry_key(&object, slot_for(app, class, object_id, total)) {
        match exists {
            true => st.put(entry, Vec::new()),
            false => st.delete(entry),
        }
    }
    Ok(())
}

/// Enters up to `limit` objects after the index's last page into the slot index of `total`
/// slots, starting it (and its upkeep by every object write) if the group keeps none.
/// Answers how many it entered, and (`Purged`'s `next`) whether objects are left to enter.
/// An index of another number of slots is refused.
pub(super) fn apply_index_slots(
    st: &mut Staged<'_>,
    total: u32,
    limit: u32,
) -> Result<CommandResult> {
    if total == 0 {
        return Ok(CommandResult::Rejected(Error::InvalidOperation(
            "a slot index is of 1 slot at least".into(),
        )));
    }
    let mut s = state_to_change(st)?;
    let mut index = match s.slot_index.take() {
        Some(i) if i.total != total => {
            return Ok(CommandResult::Rejected(Error::InvalidOperation(format!(
                "group {}'s slot index is of {} slots, not {total}",
                st.group, i.total
            ))))
        }
        Some(i) if i.complete => {
            return Ok(CommandResult::Purged {
                count: 0,
                next: None,
            })
        }
        Some(i) => i,
        None => SlotIndex {
            total,
            through: None,
            complete: false,
        },
    };
    let start = match &index.through {
        Some(k) => [k.as_slice(), &[0u8]].concat(),
        None => keys::sm_family(st.group, keys::SM_OBJECT),
    };
    let end = keys::sm_family(st.group, keys::SM_OBJECT + 1);
    let limit = limit.clamp(1, MAX_INDEX_PAGE) as usize;
    let found = st.keys_in_range_limited(&start, &end, limit + 1)?;
    let left = found.len() > limit;
    let mut count = 0u64;
    for key in found.iter().take(limit) {
        let Some((app, class, id)) = keys::parse_object_key(key) else {
            continue;
        };
        if let Some(entry) = keys::slot_entry_key(key, slot_for(&app, &class, &id, total)) {
            st.put(entry, Vec::new());
            count += 1;
        }
    }
    let next = if left {
        let last = found.get(limit - 1).cloned();
        let id = last
            .as_deref()
            .and_then(keys::parse_object_key)
            .map_or_else(String::new, |(_, _, id)| id);
        index.through = last;
        Some(id)
    } else {
        index.through = None;
        index.complete = true;
        None
    };
    s.slot_index = Some(index);
    put_state(st, s)?;
    Ok(CommandResult::Purged { count, next })
}
