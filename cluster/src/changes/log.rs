//! Reading a group's log of changes from the store (keys `w` and `v` of `storage::keys`), for
//! `tail`, locally or for a peer, and the trimming rule `statemachine::change_writes` applies.

use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::storage::keys::{self, CF_RAFT_META, CF_SM};
use crate::storage::Store;

use super::{RawPage, TRIM_EVERY};

/// The first position whose change a trim at `index` keeps, when the entry at `index` trims a
/// log keeping `kept` indexes.
pub(crate) fn floor_after_trim(index: u64, kept: u64) -> Option<u64> {
    (index.is_multiple_of(TRIM_EVERY) && index > kept).then(|| index - kept + 1)
}

/// Most bytes of changes a page carries (at least one change).
pub const PAGE_BYTES: usize = 4 << 20;

/// The last log index applied, from a group's stored applied state (`statemachine`'s
/// `AppliedState`, read as JSON here: this module sits below the state machine).
fn applied_index(bytes: &[u8]) -> Result<u64> {
    let v: serde_json::Value = serde_json::from_slice(bytes)?;
    Ok(v["last_applied"]["index"].as_u64().unwrap_or(0))
}

/// The changes of `group` after position `after` (at most `max`, and about `PAGE_BYTES`), or
/// — with no position — none, and where the replica stands. Everything is read from one
/// snapshot of the store: its applied index, the changes up to it and the floor. Every change
/// up to the page's `upto` is in it or in an earlier page; a `gap` page says some after
/// `after` are no longer kept. A replica installing a snapshot answers `Unavailable`: its state
/// is replaced in several writes, and a read between them would see neither.
pub fn read_page(store: &Store, group: GroupId, after: Option<u64>, max: usize) -> Result<RawPage> {
    if store
        .get(CF_RAFT_META, &keys::meta_key(group, keys::META_INSTALLING))?
        .is_some()
    {
        return Err(Error::Unavailable(format!(
            "group {group} is installing a snapshot"
        )));
    }
    let view = store.view();
    let applied = match view.get(CF_SM, &keys::meta_key(group, keys::SM_APPLIED))? {
        Some(bytes) => applied_index(&bytes)?,
        None => 0,
    };
    let floor = view
        .get(CF_SM, &keys::meta_key(group, keys::SM_CHANGES_FLOOR))?
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0);
    let Some(after) = after else {
        return Ok(RawPage {
            upto: applied,
            floor,
            ..RawPage::default()
        });
    };
    if floor > after.saturating_add(1) {
        return Ok(RawPage {
            upto: after,
            gap: true,
            floor,
            entries: Vec::new(),
        });
    }
    let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
    let (mut bytes, mut cut) = (0usize, false);
    if after < applied {
        let start = keys::change_key(group, after.saturating_add(1));
        let end = keys::change_key(group, applied.saturating_add(1));
        view.scan(CF_SM, &start, &end, |k, v| {
            let Some(i) = keys::change_index(k) else {
                return Ok(true);
            };
            // A page ends between entries, never inside one: an entry carrying a batch made
            // several changes under its index, and the next page starts after `upto`.
            if cut && entries.last().is_some_and(|&(last, _)| last != i) {
                return Ok(false);
            }
            entries.push((i, v.to_vec()));
            bytes += v.len();
            cut = entries.len() >= max || bytes >= PAGE_BYTES;
            Ok(true)
        })?;
    }
    let upto = match entries.last() {
        Some(&(last, _)) if cut => last,
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
