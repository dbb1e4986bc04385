//! Runs a query on one shard's local state: visits the class's objects the caller may read
//! that match the filter (`for_each_match`: candidates by objectId or from index ranges when
//! the planner finds them, else a scan of the class; the filter is checked on every candidate),
//! then either keeps the first `skip + limit` under the requested order (`scan_shard`) or folds
//! them into partial groups (`aggregate_shard`).

use serde_json::Value;

use super::aggregate::{AggregateRequest, Folder, PartialGroup};
use super::filter::Filter;
use super::index::{entry_object_id, meta_key, plan, Candidates, IndexMeta};
use super::order::RowOrder;
use super::ScanRequest;
use crate::acl::{allows, Access};
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::namespace::Namespace;
use crate::object::StoredObject;
use crate::storage::keys::{self, CF_SM};
use crate::storage::records::{live_record, ReplicaState};
use crate::storage::Store;

/// Calls `visit` with each object of `app`/`class` on the shard that `principals` may read and
/// `filter` selects, rendered as the query engine sees it (`render_for_query`).
pub fn for_each_match(
    store: &Store,
    group: GroupId,
    app: &str,
    class: &str,
    filter: &Filter,
    principals: Option<&[String]>,
    mut visit: impl FnMut(Value) -> Result<()>,
) -> Result<()> {
    if filter.sub_queries() {
        return Err(Error::InvalidValue(
            "a query reached a shard with unresolved sub-queries".into(),
        ));
    }
    let original = filter;
    let filter = filter
        .prepare()
        .map_err(|e| Error::InvalidValue(e.to_string()))?;
    let state = ReplicaState { store, group };
    let meta: IndexMeta = live_record(
        &state,
        Namespace::IndexMeta.name(),
        &meta_key(app, class),
        None,
    )?
    .and_then(|r| serde_json::from_value(r.value).ok())
    .unwrap_or_default();
    let mut check = |object_id: &str, bytes: &[u8]| -> Result<()> {
        let stored = StoredObject::decode(bytes)?;
        if !allows(&stored.fields, principals, Access::Read) {
            return Ok(());
        }
        let obj = stored.render_for_query(object_id);
        if filter.matches(&obj) {
            visit(obj)?;
        }
        Ok(())
    };
    if let Some(plan) = plan(group, app, class, original, &meta) {
        metrics::counter!("basalt_query_index_plans_total").increment(1);
        let ids = match plan.candidates {
            Candidates::Ids(ids) => ids,
            Candidates::Ranges(ranges) => {
                // An array value may list an object more than once.
                let mut ids: Vec<String> = Vec::new();
                for (start, end) in &ranges {
                    store.scan(CF_SM, start, end, |k, _| {
                        if let Some(id) = entry_object_id(k) {
                            ids.push(id.to_string());
                        }
                        Ok(true)
                    })?;
                }
                ids.sort_unstable();
                ids.dedup();
                ids
            }
        };
        for id in ids {
            if let Some(bytes) = store.get(CF_SM, &keys::object_key(group, app, class, &id))? {
                check(&id, &bytes)?;
            }
        }
        return Ok(());
    }
    metrics::counter!("basalt_query_scans_total").increment(1);
    let prefix = keys::class_prefix(group, app, class);
    let end = keys::separated_end(&prefix);
    store.scan(CF_SM, &prefix, &end, |k, v| {
        let object_id = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
        check(&object_id, v)?;
        Ok(true)
    })
}

/// The shard's matching objects (ordered, at most `skip + limit`) and their count.
pub fn scan_shard(store: &Store, group: GroupId, req: &ScanRequest) -> Result<(Vec<Value>, u64)> {
    let keep = req.skip.saturating_add(req.limit);
    let order = RowOrder::new(&req.order, &req.filter);
    let mut rows: Vec<Value> = Vec::new();
    let mut count = 0u64;
    for_each_match(
        store,
        group,
        &req.app,
        &req.class,
        &req.filter,
        req.principals.as_deref(),
        |obj| {
            count += 1;
            if keep > 0 {
                rows.push(obj);
                // Keep memory bounded: trim to the best `keep` whenever the buffer doubles.
                if rows.len() >= keep.saturating_mul(2).max(64) {
                    rows.sort_by(|a, b| order.compare(a, b));
                    rows.truncate(keep);
                }
            }
            Ok(())
        },
    )?;
    rows.sort_by(|a, b| order.compare(a, b));
    rows.truncate(keep);
    crate::limits::check_answer(&rows, crate::limits::MAX_SHARD_ROWS_BYTES)?;
    Ok((rows, count))
}

/// The shard's partial groups for an aggregation.
pub fn aggregate_shard(
    store: &Store,
    group: GroupId,
    req: &AggregateRequest,
) -> Result<Vec<PartialGroup>> {
    let columns = req.spec.columns();
    let mut folder = Folder::default();
    for_each_match(
        store,
        group,
        &req.app,
        &req.class,
        &req.filter,
        req.principals.as_deref(),
        |obj| folder.add(&req.spec, &columns, &obj),
    )?;
    Ok(folder.into_partials())
}
