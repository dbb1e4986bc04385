//! Test support (compiled with the `failpoints` feature only, as the test build has it):
//! damage to a stopped node's stored state as a faulty disk or a bug outside Raft would leave
//! it, for the tests of what finds such damage (`services::check`). Reaches into the node's
//! RocksDB (`storage`) directly, as nothing else may.

use std::path::Path;

use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::storage::keys::{CF_SM, SM_OBJECT};
use crate::storage::{Store, StoreTuning, WriteBatch};

/// Changes one byte of the stored value of the object `object_id` (of any app and class) in
/// the stopped node's data dir `data_dir`: the group whose replica now differs.
pub fn corrupt_stored_object(data_dir: &Path, object_id: &str) -> Result<GroupId> {
    let store = Store::open_tuned(&data_dir.join("db"), &StoreTuning::default())?;
    let suffix = [b"\0", object_id.as_bytes()].concat();
    let mut found = None;
    store.scan(CF_SM, &[], &[0xff; 5], |k, v| {
        if k.len() > 5 && k[4] == SM_OBJECT && k.ends_with(&suffix) {
            found = Some((k.to_vec(), v.to_vec()));
            return Ok(false);
        }
        Ok(true)
    })?;
    let Some((key, mut value)) = found else {
        return Err(Error::InvalidOperation(format!(
            "object {object_id} is not stored here"
        )));
    };
    let group = GroupId::new(u32::from_be_bytes([key[0], key[1], key[2], key[3]]));
    let last = value.len().saturating_sub(1);
    if let Some(b) = value.get_mut(last) {
        *b ^= 0x01;
    }
    let mut batch = WriteBatch::default();
    batch.put_cf(store.cf(CF_SM)?, &key, &value);
    store.write_until_room_blocking(batch, true)?;
    store.close();
    Ok(group)
}
