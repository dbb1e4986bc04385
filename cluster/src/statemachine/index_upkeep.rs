//! Keeps a shard's secondary index entries (`query::index`) and the class's object counts
//! (`IndexMeta::counts`) in step with its objects: every object write stages the entries it
//! removes, adds or re-flags, the counts' change and its declared columns' tally changes
//! (`query::tally`) in the same batch as the object, and `DeclareIndex` adds a declared field
//! and (re)builds the class's entries, counts and tallies. An object created or deleted also
//! stages its slot-index entry (`slot_index::keep`).

use super::slot_index;
use super::staged::Staged;
use crate::command::CommandResult;
use crate::error::Result;
use crate::names::AppId;
use crate::namespace::Namespace;
use crate::object::StoredObject;
use crate::query::index::{self, IndexMeta};
use crate::query::tally::{self, Tally};
use crate::storage::keys;
use crate::storage::records::StoredRecord;

/// Objects re-indexed per `DeclareIndex` step when the command names no limit (as logged
/// before the limit existed).
pub const DEFAULT_REBUILD_PAGE: usize = 10_000;

/// The class's index metadata on the shard, decoded once per batch (`Staged::memo`).
pub(super) fn meta(st: &mut Staged<'_>, app: &AppId, class: &str) -> Result<Option<IndexMeta>> {
    let rkey = keys::record_key(
        st.group,
        Namespace::IndexMeta.name(),
        &index::meta_key(app, class),
    );
    if let Some(m) = st.memo::<Option<IndexMeta>>(&rkey) {
        return Ok(m);
    }
    let m = match st.get(&rkey)? {
        Some(bytes) => serde_json::from_value(StoredRecord::decode(&bytes)?.value).ok(),
        None => None,
    };
    st.remember(rkey, m.clone());
    Ok(m)
}

/// Stages the class's index metadata (a record that never expires, so no TTL entry to
/// replace) and remembers it for the rest of the batch.
fn put_meta(st: &mut Staged<'_>, app: &AppId, class: &str, meta: &IndexMeta) -> Result<()> {
    let rkey = keys::record_key(
        st.group,
        Namespace::IndexMeta.name(),
        &index::meta_key(app, class),
    );
    let rec = StoredRecord {
        v: 1,
        value: serde_json::to_value(meta)?,
        expires_at_ms: None,
    };
    st.put(rkey.clone(), serde_json::to_vec(&rec)?);
    st.remember(rkey, Some(meta.clone()));
    Ok(())
}

/// Starts a class's index metadata on a split's child from its parent's: the same declared,
/// opted-out and automatic columns (so the imported objects get the entries they had), with
/// nothing counted yet (each imported object counts itself).
pub(super) fn import_meta(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    parent: IndexMeta,
) -> Result<()> {
    let mut m = IndexMeta::empty();
    m.declared = parent.declared;
    m.opted_out = parent.opted_out;
    if let (Some(child), Some(from)) = (m.automatic.as_mut(), parent.automatic) {
        child.columns = from.columns.into_keys().map(|c| (c, 0)).collect();
        child.full = from.full;
    }
    put_meta(st, app, class, &m)
}

/// Forgets a dropped class's index metadata (its entries went with its objects), so a class
/// created again under the name starts without the old declarations — once the entries of
/// columns still being dropped are deleted too, up to `budget` of them a call. False while
/// some remain (the caller's page is then repeated).
pub(super) fn forget_class(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    budget: usize,
) -> Result<bool> {
    if let Some(mut m) = meta(st, app, class)? {
        if delete_dropped(st, app, class, &mut m, budget)?.1 {
            put_meta(st, app, class, &m)?;
            return Ok(false);
        }
    }
    // Tallies went with the objects' entries; any a write left behind go now.
    if delete_some(st, &class_tallies(st, app, class), budget.max(1))?.1 {
        return Ok(false);
    }
    st.delete(keys::record_key(
        st.group,
        Namespace::IndexMeta.name(),
        &index::meta_key(app, class),
    ));
    Ok(true)
}

/// Deletes up to `budget` entries, markers and tallies of the columns `m.dropping` names,
/// forgetting each column once none remain. Answers how many entries and markers went, and
/// whether some remain.
fn delete_dropped(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    m: &mut IndexMeta,
    budget: usize,
) -> Result<(u64, bool)> {
    let budget = budget.max(1);
    // Keys deleted (entries and tallies, within `budget`); only entries are reported.
    let (mut deleted, mut entries) = (0, 0u64);
    while let Some(column) = m.dropping.first().cloned() {
        let prefix = index::field_prefix(st.group, app, class, &column);
        let tallies = tally::field_tally_prefix(st.group, app, class, &column);
        let tallies = (tallies.clone(), keys::separated_end(&tallies));
        for (range, are_entries) in [(index::value_range(&prefix), true), (tallies, false)] {
            let (n, more) = delete_some(st, &range, budget - deleted)?;
            deleted += n;
            if are_entries {
                entries += n as u64;
            }
            if more {
                return Ok((entries, true));
            }
        }
        m.dropping.remove(0);
        if deleted == budget {
            return Ok((entries, !m.dropping.is_empty()));
        }
    }
    Ok((entries, false))
}

fn class_tallies(st: &Staged<'_>, app: &AppId, class: &str) -> (Vec<u8>, Vec<u8>) {
    let prefix = tally::class_tally_prefix(st.group, app, class);
    let end = keys::separated_end(&prefix);
    (prefix, end)
}

fn class_range(st: &Staged<'_>, app: &AppId, class: &str) -> (Vec<u8>, Vec<u8>) {
    let prefix = keys::class_prefix(st.group, app, class);
    let end = keys::separated_end(&prefix);
    (prefix, end)
}

/// The class's index metadata, created on the first object write of a class on the shard: a
/// class without objects starts with complete (empty) indexes; one with older objects stays
/// incomplete until rebuilt.
fn meta_for_write(st: &mut Staged<'_>, app: &AppId, class: &str) -> Result<IndexMeta> {
    if let Some(m) = meta(st, app, class)? {
        return Ok(m);
    }
    let (start, end) = class_range(st, app, class);
    if !st.keys_in_range_limited(&start, &end, 1)?.is_empty() {
        return Ok(IndexMeta::default());
    }
    let m = IndexMeta::empty();
    put_meta(st, app, class, &m)?;
    Ok(m)
}

fn entries_of(
    st: &Staged<'_>,
    app: &AppId,
    class: &str,
    object_id: &str,
    obj: Option<&StoredObject>,
    meta: &IndexMeta,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    obj.map(|o| index::entries(st.group, app, class, object_id, o, meta))
        .unwrap_or_default()
}

/// Stages the entry and count changes of one object going from `old` to `new` (either may
/// be absent). Called before the object itself is staged, so a first create sees its class
/// still empty.
pub(super) fn reindex(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    object_id: &str,
    old: Option<&StoredObject>,
    new: Option<&StoredObject>,
) -> Result<()> {
    if old.is_some() != new.is_some() {
        slot_index::keep(st, app, class, object_id, new.is_some())?;
    }
    let mut m = meta_for_write(st, app, class)?;
    // The entries the old object has, under the columns indexed before this write.
    let before = entries_of(st, app, class, object_id, old, &m);
    let markers_before = old.map(|o| m.marker_columns(o)).unwrap_or_default();
    let mut changed = new.is_some_and(|o| m.admit_columns(o));
    let after = entries_of(st, app, class, object_id, new, &m);
    if m.tallies && m.counts_write_to(object_id) {
        let changes = tally::changes(st.group, app, class, &m.declared, &before, &after);
        stage_tallies(st, changes)?;
    }
    let find = |list: &[(Vec<u8>, Vec<u8>)], k: &[u8]| {
        list.binary_search_by(|(e, _)| e.as_slice().cmp(k))
            .ok()
            .map(|i| list[i].1.clone())
    };
    for (k, _) in &before {
        if find(&after, k).is_none() {
            st.delete(k.clone());
        }
    }
    for (k, v) in after {
        if find(&before, &k).as_ref() != Some(&v) {
            st.put(k, v);
        }
    }
    if m.counts_write_to(object_id) {
        let was = old.map(|o| index::public_read(&o.fields));
        let is = new.map(|o| index::public_read(&o.fields));
        if was != is {
            let counts = m.counts;
            if let Some(p) = was {
                m.counts.add(p, -1);
            }
            if let Some(p) = is {
                m.counts.add(p, 1);
            }
            changed |= m.counts != counts;
        }
        if m.automatic.is_some() && columns_differ(old, new) {
            let columns = m.automatic.clone();
            if let Some(o) = old {
                m.count_columns(o, -1);
            }
            if let Some(o) = new {
                m.count_columns(o, 1);
            }
            changed |= m.automatic != columns;
        }
        let markers_after = new.map(|o| m.marker_columns(o)).unwrap_or_default();
        if markers_before != markers_after {
            let markers = m.markers.clone();
            m.count_markers(&markers_before, -1);
            m.count_markers(&markers_after, 1);
            changed |= m.markers != markers;
        }
    }
    if changed {
        put_meta(st, app, class, &m)?;
    }
    Ok(())
}

/// Applies tally changes (`tally::changes`): a bucket left without entries loses its tally.
fn stage_tallies(
    st: &mut Staged<'_>,
    changes: std::collections::BTreeMap<Vec<u8>, (i64, i64)>,
) -> Result<()> {
    for (key, change) in changes {
        let mut t = match st.get(&key)? {
            Some(bytes) => Tally::decode(&bytes)?,
            None => Tally::default(),
        };
        t.add(change);
        match t.is_empty() {
            true => st.delete(key),
            false => st.put(key, t.encode()),
        }
    }
    Ok(())
}

/// Deletes up to `budget` keys of `[start, end)`; true when more remain.
fn delete_some(
    st: &mut Staged<'_>,
    (start, end): &(Vec<u8>, Vec<u8>),
    budget: usize,
) -> Result<(usize, bool)> {
    let found = st.keys_in_range_limited(start, end, budget + 1)?;
    let more = found.len() > budget;
    let mut deleted = 0;
    for key in found.into_iter().take(budget) {
        st.delete(key);
        deleted += 1;
    }
    Ok((deleted, more))
}

/// Whether the two versions of an object hold different sets of fields.
fn columns_differ(old: Option<&StoredObject>, new: Option<&StoredObject>) -> bool {
    match (old, new) {
        (Some(a), Some(b)) => {
            a.fields.len() != b.fields.len() || a.fields.keys().any(|k| !b.fields.contains_key(k))
        }
        _ => true,
    }
}

/// Declares `field` indexed (none: only rebuild) and rebuilds the class's entries on this
/// shard, `page` objects per call from after `after`; `Purged.next` names where the
/// next call continues, and the class's indexes are complete once it is `None`. A rebuild
/// is named by `rebuild` (its first page's token): a later rebuild's first page replaces it,
/// and the pages of the replaced one then do nothing.
pub(super) fn apply_declare_index(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    field: Option<&str>,
    after: Option<&str>,
    page: usize,
    rebuild: Option<&str>,
) -> Result<CommandResult> {
    let mut m = meta(st, app, class)?.unwrap_or_default();
    if after.is_some() && m.rebuild.as_deref() != rebuild {
        // A page of a rebuild that a later one replaced: that one rebuilds everything,
        // this field included.
        return Ok(CommandResult::Purged {
            count: 0,
            next: None,
        });
    }
    // The first page declares (a later page of this rebuild must not undo an opt-out that
    // came after it).
    if let (Some(f), None) = (field, after) {
        if !m.declared.iter().any(|d| d == f) {
            m.declared.push(f.to_string());
        }
        m.opted_out.retain(|o| o != f);
        if let Some(auto) = &mut m.automatic {
            auto.columns.remove(f);
        }
    }
    if after.is_none() {
        // A rebuild starts: it writes the current format and counts every object again,
        // the automatic columns' holders included. Columns stay automatic (or turned away)
        // as they were; a class from before automatic columns starts them here.
        m.format = index::FORMAT_TYPED;
        m.counts = index::ClassCounts::default();
        m.rebuilt_through = Some(String::new());
        m.rebuild = rebuild.map(str::to_string);
        let auto = m.automatic.take().unwrap_or_default();
        m.automatic = Some(index::Automatic {
            columns: auto.columns.into_keys().map(|c| (c, 0)).collect(),
            full: auto.full,
        });
        m.markers = Some(Default::default());
        // Tallied again from nothing: the old tallies go before any object is counted.
        m.tallies = true;
    }
    // While rebuilding, queries scan.
    m.complete = false;
    // Entries of dropped columns go first, so that a column declared again starts clean;
    // objects are indexed only after.
    if delete_dropped(st, app, class, &mut m, page)?.1 {
        put_meta(st, app, class, &m)?;
        return Ok(CommandResult::Purged {
            count: 0,
            next: Some(after.unwrap_or_default().to_string()),
        });
    }
    if m.rebuilt_through.as_deref() == Some("")
        && delete_some(st, &class_tallies(st, app, class), page.max(1))?.1
    {
        put_meta(st, app, class, &m)?;
        return Ok(CommandResult::Purged {
            count: 0,
            next: Some(after.unwrap_or_default().to_string()),
        });
    }
    let (prefix, end) = class_range(st, app, class);
    let start = match after {
        Some(id) => {
            let mut k = keys::object_key(st.group, app, class, id);
            k.push(0);
            k
        }
        None => prefix.clone(),
    };
    let found = st.keys_in_range_limited(&start, &end, page + 1)?;
    let more = found.len() > page;
    let mut count = 0;
    let mut last_id = None;
    for key in found.into_iter().take(page) {
        let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
        let Some(bytes) = st.get(&key)? else { continue };
        let obj = StoredObject::decode(&bytes)?;
        m.admit_columns(&obj);
        let entries = entries_of(st, app, class, &id, Some(&obj), &m);
        for (k, v) in &entries {
            // An entry already there as it should be is not written again: a second
            // version of every entry would slow range reads until compaction merges them.
            if st.get(k)?.as_deref() != Some(v.as_slice()) {
                st.put(k.clone(), v.clone());
            }
        }
        // A page proposed again after it applied counts nothing twice.
        if let Some(through) = m.rebuilt_through.clone() {
            if id > through {
                let changes = tally::changes(st.group, app, class, &m.declared, &[], &entries);
                stage_tallies(st, changes)?;
                m.counts.add(index::public_read(&obj.fields), 1);
                m.count_columns(&obj, 1);
                let markers = m.marker_columns(&obj);
                m.count_markers(&markers, 1);
                m.rebuilt_through = Some(id.clone());
            }
        }
        count += 1;
        last_id = Some(id);
    }
    if !more {
        m.complete = true;
        m.rebuilt_through = None;
    }
    put_meta(st, app, class, &m)?;
    Ok(CommandResult::Purged {
        count,
        next: if more { last_id } else { None },
    })
}

/// Opts `field` out of the class's indexes on this shard (it is no longer automatic, nor
/// declared; its first page, `started` false) and deletes up to `page` entries and markers
/// of the columns being dropped; `Purged.next` is set while more remain. The column stays
/// in `dropping` until its last entry is gone, whoever deletes it (a later page, a rebuild's
/// or a purge's), so a drop cut short leaves nothing a later declaration could trust. A
/// GeoPoint column keeps its latitude entries (always indexed).
pub(super) fn apply_drop_index(
    st: &mut Staged<'_>,
    app: &AppId,
    class: &str,
    field: &str,
    started: bool,
    page: usize,
) -> Result<CommandResult> {
    let mut m = meta_for_write(st, app, class)?;
    let before = m.clone();
    if !started {
        m.declared.retain(|d| d != field);
        if let Some(auto) = &mut m.automatic {
            auto.columns.remove(field);
        }
        if let Some(markers) = &mut m.markers {
            markers.remove(field);
        }
        for list in [&mut m.opted_out, &mut m.dropping] {
            if !list.iter().any(|o| o == field) {
                list.push(field.to_string());
            }
        }
    }
    let (count, more) = delete_dropped(st, app, class, &mut m, page)?;
    if m != before {
        put_meta(st, app, class, &m)?;
    }
    Ok(CommandResult::Purged {
        count,
        next: more.then(String::new),
    })
}
