//! A data group's split record (`slots::GroupSplits`, at group · `s`) as apply reads and
//! writes it: decoded once per batch and shared (`Staged::memo`), since every object write
//! looks at it (`split_writes::refuse_frozen`, `slot_index::keep`). Neighbours: `split_writes`
//! and `slot_index`, which change it.

use std::sync::Arc;

use super::staged::Staged;
use crate::error::Result;
use crate::slots::GroupSplits;
use crate::storage::keys;

/// The group's split record as it stands in the batch.
pub(super) fn state(st: &mut Staged<'_>) -> Result<Arc<GroupSplits>> {
    let key = keys::split_key(st.group);
    if let Some(s) = st.memo::<Arc<GroupSplits>>(&key) {
        return Ok(s);
    }
    let s = Arc::new(GroupSplits::from_stored(st.get(&key)?.as_deref())?);
    st.remember(key, s.clone());
    Ok(s)
}

/// The group's split record to change.
pub(super) fn state_to_change(st: &mut Staged<'_>) -> Result<GroupSplits> {
    Ok(GroupSplits::clone(&*state(st)?))
}

/// Stages the group's split record (none kept when it says nothing).
pub(super) fn put_state(st: &mut Staged<'_>, s: GroupSplits) -> Result<()> {
    let key = keys::split_key(st.group);
    if s == GroupSplits::default() {
        st.delete(key.clone());
    } else {
        st.put(key.clone(), serde_json::to_vec(&s)?);
    }
    st.remember(key, Arc::new(s));
    Ok(())
}
