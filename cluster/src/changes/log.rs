//! Reading a group's log of changes from the store (keys `w` and `v` of `storage::keys`), for
//! `tail`, locally or for a peer, and the trimming rule `statemachine::change_writes` applies.

use crate::error::Result;
use crate::ids::GroupId;
use crate::storage::keys::{self, CF_SM};
use crate::storage::Store;

use super::{RawPage, TRIM_EVERY};

/// The first position whose change a trim at `index` keeps, when the entry at `index` trims a
/// log keeping `kept` indexes.
pub(crate) fn floor_after_trim(index: u64, kept: u64) -> Option<u64> {
    (index.is_multiple_of(TRIM_EVERY) && index > kept).then(|| index - kept + 1)
}

/// The oldest position whose change `group` still keeps.
fn floor(store: &Store, group: GroupId) -> Result<u64> {
    Ok(store
        .get(CF_SM, &keys::meta_key(group, keys::SM_CHANGES_FLOOR))?
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0))
}

/// The changes of `group` after position `after` (at most `max`), or — with no position —
/// none, and where the replica stands: `applied`, the last log index it applied as its
/// metrics said before this call (every change up to it is written; later ones are left
/// out). Every change up to the page's `upto` is in it or in an earlier page; a `gap` page
/// says some after `after` are no longer kept.
pub fn read_page(
    store: &Store,
    group: GroupId,
    after: Option<u64>,
    applied: u64,
    max: usize,
) -> Result<RawPage> {
    let Some(after) = after else {
        return Ok(RawPage {
            upto: applied,
            floor: floor(store, group)?,
            ..RawPage::default()
        });
    };
    let mut entries = Vec::new();
    if after < applied {
        let start = keys::change_key(group, after.saturating_add(1));
        let end = keys::change_key(group, applied.saturating_add(1));
        store.scan(CF_SM, &start, &end, |k, v| {
            if let Some(i) = keys::change_index(k) {
                entries.push((i, v.to_vec()));
            }
            Ok(entries.len() < max)
        })?;
    }
    // The floor after the scan: if nothing after `after` had been cut when it is read, the
    // scan (earlier) saw every change there was.
    let floor = floor(store, group)?;
    if floor > after.saturating_add(1) {
        return Ok(RawPage {
            upto: after,
            gap: true,
            floor,
            entries: Vec::new(),
        });
    }
    let upto = match entries.last() {
        Some(&(last, _)) if entries.len() >= max => last,
        _ => applied.max(after),
    };
    Ok(RawPage {
        upto,
        gap: false,
        floor,
        entries,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::changes::KEPT_ENTRIES;

    #[test]
    fn the_floor_moves_on_multiples_of_trim_every_only() {
        let kept = KEPT_ENTRIES;
        assert_eq!(floor_after_trim(TRIM_EVERY, kept), None);
        assert_eq!(floor_after_trim(kept + 1, kept), None);
        assert_eq!(
            floor_after_trim(kept + TRIM_EVERY, kept),
            Some(TRIM_EVERY + 1)
        );
    }
}
