//! Counting what each app stores in the group as apply writes it: every object created,
//! changed or deleted (`apply`) and every file record written or removed (`record_writes`)
//! changes the app's `usage::AppUsage`, a record of namespace `usage` keyed by the app, in the
//! same batch as the write itself — so the count is exact on every replica and travels with
//! snapshots. `upgrade::count_usage` makes the first count of a store written before it.

use serde_json::Value;

use super::staged::Staged;
use crate::error::Result;
use crate::namespace::Namespace;
use crate::storage::keys;
use crate::storage::records::StoredRecord;
use crate::usage::{AppUsage, UsageDelta};

/// Changes `app`'s usage in the group by `delta`.
pub(super) fn count(st: &mut Staged<'_>, app: &str, delta: UsageDelta) -> Result<()> {
    if delta.is_zero() {
        return Ok(());
    }
    if delta.object_bytes < 0 {
        st.free(delta.object_bytes.unsigned_abs());
    }
    let key = keys::record_key(st.group, Namespace::Usage.name(), app);
    let usage = match st.memo::<AppUsage>(&key) {
        Some(u) => u,
        None => match st.get(&key)? {
            Some(bytes) => decode(&bytes)?,
            None => AppUsage::default(),
        },
    }
    .changed_by(delta);
    if usage.is_empty() {
        st.delete(key.clone());
    } else {
        st.put(key.clone(), encode(usage)?);
    }
    st.remember(key, usage);
    Ok(())
}

/// The usage a stored record holds.
pub fn decode(bytes: &[u8]) -> Result<AppUsage> {
    Ok(serde_json::from_value(StoredRecord::decode(bytes)?.value)?)
}

/// The stored record of a usage.
pub fn encode(usage: AppUsage) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(&StoredRecord {
        v: 1,
        value: serde_json::to_value(usage)?,
        expires_at_ms: None,
    })?)
}

/// The app and size a file record (`files::record::FileRecord`) names, read loosely: a record
/// without them counts as nothing.
pub fn file_of(value: &Value) -> Option<(&str, u64)> {
    Some((value.get("app")?.as_str()?, value.get("size")?.as_u64()?))
}

/// Counts the record at `rkey` of namespace `ns` replaced by `new` (none: deleted), before it
/// is written: only file records count.
pub(super) fn count_record(
    st: &mut Staged<'_>,
    ns: &str,
    rkey: &[u8],
    new: Option<&Value>,
) -> Result<()> {
    if ns != Namespace::File.name() {
        return Ok(());
    }
    let old = st
        .get(rkey)?
        .map(|b| StoredRecord::decode(&b))
        .transpose()?;
    if let Some((app, size)) = old.as_ref().and_then(|r| file_of(&r.value)) {
        count(st, app, UsageDelta::file(size, -1))?;
    }
    if let Some((app, size)) = new.and_then(file_of) {
        count(st, app, UsageDelta::file(size, 1))?;
    }
    Ok(())
}
