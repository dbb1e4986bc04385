//! Writing records inside apply: a record and its TTL index entry (`keys::ttl_key`) change
//! together, so the expiry sweep finds exactly the records that expire. Reading them is
//! `storage::records::live_record`, on the batch being staged. A file record written or deleted
//! changes its app's usage in the same batch (`usage_writes`).

use serde_json::Value;

use super::staged::Staged;
use super::usage_writes;
use crate::command::CommandResult;
use crate::error::Result;
use crate::storage::keys;
use crate::storage::records::StoredRecord;

/// Removes the TTL index entry of the record at `rkey`, if it has one.
fn unindex(st: &mut Staged<'_>, rkey: &[u8], ns: &str, key: &str) -> Result<()> {
    if let Some(old) = st.get(rkey)? {
        if let Some(t) = StoredRecord::decode(&old)?.expires_at_ms {
            st.delete(keys::ttl_key(st.group, t, ns, key));
        }
    }
    Ok(())
}

/// Writes (or replaces) a record, optionally expiring at `expires_at_ms`.
pub(super) fn put_record(
    st: &mut Staged<'_>,
    ns: &str,
    key: &str,
    value: Value,
    expires_at_ms: Option<i64>,
) -> Result<CommandResult> {
    let rkey = keys::record_key(st.group, ns, key);
    usage_writes::count_record(st, ns, &rkey, Some(&value))?;
    unindex(st, &rkey, ns, key)?;
    if let Some(t) = expires_at_ms {
        st.put(keys::ttl_key(st.group, t, ns, key), Vec::new());
    }
    let rec = StoredRecord {
        v: 1,
        value,
        expires_at_ms,
    };
    st.put(rkey, serde_json::to_vec(&rec)?);
    Ok(CommandResult::Done)
}

/// Deletes a record and its TTL index entry.
pub(super) fn delete_record(st: &mut Staged<'_>, ns: &str, key: &str) -> Result<CommandResult> {
    let rkey = keys::record_key(st.group, ns, key);
    usage_writes::count_record(st, ns, &rkey, None)?;
    unindex(st, &rkey, ns, key)?;
    st.delete(rkey);
    Ok(CommandResult::Done)
}
