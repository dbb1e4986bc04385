//! The change log's writes (`changes`), staged in the batch of the entry that made them: one
//! change per object write, and the trim every `changes::TRIM_EVERY` log indexes.

use super::staged::Staged;
use crate::changes::log::floor_after_trim;
use crate::changes::{changed_fields, ChangeKind, ChangeRecord};
use crate::error::Result;
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
    st.put(key, record.encode()?);
    Ok(())
}

/// At an index that is a multiple of `TRIM_EVERY`, cuts the changes older than the last `kept`.
pub(super) fn trim(st: &mut Staged<'_>, index: u64, kept: u64) {
    if let Some(floor) = floor_after_trim(index, kept) {
        let g = st.group;
        st.delete_range(keys::change_key(g, 0), keys::change_key(g, floor));
        st.put(
            keys::meta_key(g, keys::SM_CHANGES_FLOOR).to_vec(),
            floor.to_be_bytes().to_vec(),
        );
    }
}
