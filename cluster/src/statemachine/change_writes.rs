//! The change log's writes (`changes`), staged in the batch of the entry that made them: one
//! change per object write, and the trims — every `changes::TRIM_EVERY` log indexes to the
//! last `kept` indexes, and whenever the log holds more than `changes::KEPT_BYTES`, whole
//! stretches of `changes::BYTES_STRETCH` indexes, the oldest first. The bytes are counted per
//! stretch and in all (`keys::SM_CHANGES_BYTES`) as changes are written, so every replica
//! cuts at the same index; a cut inside a stretch takes its changes' bytes off, so the counts
//! are always exactly those of the changes kept (`upgrade::count_changes` makes the first count
//! of a store written before).

use super::staged::Staged;
use crate::changes::log::floor_after_trim;
use crate::changes::{changed_fields, ChangeKind, ChangeRecord, BYTES_STRETCH, KEPT_BYTES};
use crate::error::Result;
use crate::ids::GroupId;
use crate::object::StoredObject;
use crate::storage::keys;

/// Stages the change an object write makes: `object` is the new object's encoding (the old
/// one's for a delete), `before` the object an update changed.
pub(super) fn stage(
    st: &mut Staged<'_>,
    kind: ChangeKind,
    (app, class, object_id): (&str, &str, &str),
    object: &[u8],
    before: Option<(&StoredObject, &StoredObject)>,
) -> Result<()> {
    let record = ChangeRecord {
        kind,
        app,
        class,
        object_id,
        object,
        before: before.map(|(old, new)| (old.updated_ms, changed_fields(&old.fields, &new.fields))),
    };
    let nth = st.next_change();
    let key = keys::nth_change_key(st.group, st.entry_index(), nth);
    let value = record.encode()?;
    let bytes = (key.len() + value.len()) as u64;
    st.put(key, value);
    let g = st.group;
    let stretch = stretch_key(g, st.entry_index() / BYTES_STRETCH);
    for key in [total_key(g), stretch] {
        let n = read_u64(st, &key)?.saturating_add(bytes);
        st.put(key, n.to_le_bytes().to_vec());
    }
    Ok(())
}

/// After the entry at `index`: cuts the changes older than the last `kept` indexes when `index`
/// is a multiple of `TRIM_EVERY`, and the oldest stretches while the log holds more than
/// `KEPT_BYTES` (never the entry's own).
pub(super) fn trim(st: &mut Staged<'_>, index: u64, kept: u64) -> Result<()> {
    let g = st.group;
    let mut floor = floor_after_trim(index, kept);
    let total = read_u64(st, &total_key(g))?;
    if total > KEPT_BYTES {
        let mut left = total;
        let stretches =
            st.keys_in_range(&stretch_key(g, 0), &stretch_key(g, index / BYTES_STRETCH))?;
        for key in stretches {
            if left <= KEPT_BYTES / 4 * 3 {
                break;
            }
            left = left.saturating_sub(read_u64(st, &key)?);
            let next = stretch_of(&key).saturating_add(1) * BYTES_STRETCH;
            floor = floor.max(Some(next));
        }
    }
    let Some(floor) = floor else {
        return Ok(());
    };
    let floor_key = keys::meta_key(g, keys::SM_CHANGES_FLOOR).to_vec();
    let current = st
        .get(&floor_key)?
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0);
    if floor <= current {
        return Ok(());
    }
    let mut total = total;
    // A stretch the floor cuts into loses the bytes of its changes below the floor, so the
    // counts are always those of the changes kept.
    if !floor.is_multiple_of(BYTES_STRETCH) {
        let stretch = floor / BYTES_STRETCH;
        let from = (stretch * BYTES_STRETCH).max(current);
        let mut cut = 0u64;
        for key in st.keys_in_range(&keys::change_key(g, from), &keys::change_key(g, floor))? {
            if let Some(value) = st.get(&key)? {
                cut += (key.len() + value.len()) as u64;
            }
        }
        if cut > 0 {
            let key = stretch_key(g, stretch);
            let left = read_u64(st, &key)?.saturating_sub(cut);
            st.put(key, left.to_le_bytes().to_vec());
            total = total.saturating_sub(cut);
            st.free(cut);
        }
    }
    st.delete_range(keys::change_key(g, 0), keys::change_key(g, floor));
    st.put(floor_key, floor.to_be_bytes().to_vec());
    // The stretches wholly below the floor are gone: their bytes no longer count.
    for key in st.keys_in_range(&stretch_key(g, 0), &stretch_key(g, floor / BYTES_STRETCH))? {
        let n = read_u64(st, &key)?;
        total = total.saturating_sub(n);
        st.free(n);
        st.delete(key);
    }
    st.put(total_key(g), total.to_le_bytes().to_vec());
    Ok(())
}

/// Key of the change log's bytes in all.
pub(super) fn total_key(g: GroupId) -> Vec<u8> {
    keys::sm_family(g, keys::SM_CHANGES_BYTES)
}

/// Key of the bytes of the changes of a stretch of `BYTES_STRETCH` log indexes.
pub(super) fn stretch_key(g: GroupId, stretch: u64) -> Vec<u8> {
    let mut k = total_key(g);
    k.extend_from_slice(&stretch.to_be_bytes());
    k
}

fn stretch_of(key: &[u8]) -> u64 {
    key.get(5..13)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

fn read_u64(st: &Staged<'_>, key: &[u8]) -> Result<u64> {
    Ok(st
        .get(key)?
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0))
}
