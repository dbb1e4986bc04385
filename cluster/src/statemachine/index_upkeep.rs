//! Keeps a shard's secondary index entries (`query::index`) in step with its objects: every
//! object write stages the entries it removes and adds in the same batch as the object, and
//! `DeclareIndex` adds a declared field and (re)builds the class's entries.

use super::record_writes::put_record;
use super::staged::Staged;
use crate::command::CommandResult;
use crate::error::Result;
use crate::namespace::Namespace;
use crate::object::StoredObject;
use crate::query::index::{self, IndexMeta};
use crate::storage::keys;
use crate::storage::records::live_record;

/// Objects re-indexed per `DeclareIndex` step when the command names no limit (as logged
/// before the limit existed).
pub const DEFAULT_REBUILD_PAGE: usize = 10_000;

pub(super) fn meta(st: &Staged<'_>, app: &str, class: &str) -> Result<Option<IndexMeta>> {
    Ok(live_record(
        st,
        Namespace::IndexMeta.name(),
        &index::meta_key(app, class),
        None,
    )?
    .and_then(|r| serde_json::from_value(r.value).ok()))
}

fn put_meta(st: &mut Staged<'_>, app: &str, class: &str, meta: &IndexMeta) -> Result<()> {
    let key = index::meta_key(app, class);
    put_record(
        st,
        Namespace::IndexMeta.name(),
        &key,
        serde_json::to_value(meta)?,
        None,
    )
    .map(|_| ())
}

/// Forgets a dropped class's index metadata (its entries went with its objects), so a class
/// created again under the name starts without the old declarations.
pub(super) fn forget_class(st: &mut Staged<'_>, app: &str, class: &str) {
    st.delete(keys::record_key(
        st.group,
        Namespace::IndexMeta.name(),
        &index::meta_key(app, class),
    ));
}

fn class_range(st: &Staged<'_>, app: &str, class: &str) -> (Vec<u8>, Vec<u8>) {
    let prefix = keys::class_prefix(st.group, app, class);
    let end = keys::separated_end(&prefix);
    (prefix, end)
}

/// The class's index metadata, created on the first object write of a class on the shard: a
/// class without objects starts with complete (empty) indexes; one with older objects stays
/// incomplete until rebuilt.
fn meta_for_write(st: &mut Staged<'_>, app: &str, class: &str) -> Result<IndexMeta> {
    if let Some(m) = meta(st, app, class)? {
        return Ok(m);
    }
    let (start, end) = class_range(st, app, class);
    let m = IndexMeta {
        complete: st.keys_in_range_limited(&start, &end, 1)?.is_empty(),
        declared: Vec::new(),
    };
    if m.complete {
        put_meta(st, app, class, &m)?;
    }
    Ok(m)
}

fn entries_of(
    st: &Staged<'_>,
    app: &str,
    class: &str,
    object_id: &str,
    obj: Option<&StoredObject>,
    declared: &[String],
) -> Vec<Vec<u8>> {
    obj.map(|o| index::entries(st.group, app, class, object_id, o, declared))
        .unwrap_or_default()
}

/// Stages the entry changes of one object going from `old` to `new` (either may be absent).
/// Called before the object itself is staged, so a first create sees its class still empty.
pub(super) fn reindex(
    st: &mut Staged<'_>,
    app: &str,
    class: &str,
    object_id: &str,
    old: Option<&StoredObject>,
    new: Option<&StoredObject>,
) -> Result<()> {
    let declared = meta_for_write(st, app, class)?.declared;
    let before = entries_of(st, app, class, object_id, old, &declared);
    let after = entries_of(st, app, class, object_id, new, &declared);
    for k in &before {
        if after.binary_search(k).is_err() {
            st.delete(k.clone());
        }
    }
    for k in after {
        if before.binary_search(&k).is_err() {
            st.put(k, Vec::new());
        }
    }
    Ok(())
}

/// Declares `field` indexed (none: only rebuild) and rebuilds the class's entries on this
/// shard, `page` objects per call from after `after`; `Purged.next` names where the
/// next call continues, and the class's indexes are complete once it is `None`.
pub(super) fn apply_declare_index(
    st: &mut Staged<'_>,
    app: &str,
    class: &str,
    field: Option<&str>,
    after: Option<&str>,
    page: usize,
) -> Result<CommandResult> {
    let mut m = meta(st, app, class)?.unwrap_or_default();
    if let Some(f) = field {
        if !m.declared.iter().any(|d| d == f) {
            m.declared.push(f.to_string());
        }
    }
    // While rebuilding, queries scan.
    m.complete = false;
    put_meta(st, app, class, &m)?;
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
        for k in entries_of(st, app, class, &id, Some(&obj), &m.declared) {
            st.put(k, Vec::new());
        }
        count += 1;
        last_id = Some(id);
    }
    if !more {
        m.complete = true;
        put_meta(st, app, class, &m)?;
    }
    Ok(CommandResult::Purged {
        count,
        next: if more { last_id } else { None },
    })
}
