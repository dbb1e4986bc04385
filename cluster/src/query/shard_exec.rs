//! Runs a scan on one shard's local state: filter, sort, keep the first `skip + limit`.

use serde_json::Value;

use super::eval::RowOrder;
use super::ScanRequest;
use crate::acl::{allows, Access};
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::object::StoredObject;
use crate::storage::keys::{self, CF_SM};
use crate::storage::Store;

/// The shard's matching objects (rendered, ordered, at most `skip + limit`) and their count.
pub fn scan_shard(store: &Store, group: GroupId, req: &ScanRequest) -> Result<(Vec<Value>, u64)> {
    let prefix = keys::class_prefix(group, &req.app, &req.class);
    let mut end = prefix.clone();
    // The class prefix ends in a 0 separator; the next byte value bounds it.
    if let Some(last) = end.last_mut() {
        *last = 1;
    }
    let keep = req.skip.saturating_add(req.limit);
    if req.filter.sub_queries() {
        return Err(Error::InvalidValue(
            "a query reached a shard with unresolved sub-queries".into(),
        ));
    }
    let filter = req
        .filter
        .prepare()
        .map_err(|e| Error::InvalidValue(e.to_string()))?;
    let order = RowOrder::new(&req.order, &req.filter);
    let mut rows: Vec<Value> = Vec::new();
    let mut count = 0u64;
    store.scan(CF_SM, &prefix, &end, |k, v| {
        let object_id = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
        let stored = StoredObject::decode(v)?;
        if !allows(&stored.fields, req.principals.as_deref(), Access::Read) {
            return Ok(true);
        }
        let obj = stored.render_for_query(&object_id);
        if filter.matches(&obj) {
            count += 1;
            if keep > 0 {
                rows.push(obj);
                // Keep memory bounded: trim to the best `keep` whenever the buffer doubles.
                if rows.len() >= keep.saturating_mul(2).max(64) {
                    rows.sort_by(|a, b| order.compare(a, b));
                    rows.truncate(keep);
                }
            }
        }
        Ok(true)
    })?;
    rows.sort_by(|a, b| order.compare(a, b));
    rows.truncate(keep);
    Ok((rows, count))
}
