//! Runs a query on one shard's local state: visits the class's objects the caller may read
//! that match the filter (`for_each_match`: candidates by objectId or from index ranges when
//! the planner finds them, else a scan of the class; the filter is checked on every candidate),
//! then either keeps the first `skip + limit` under the requested order (`scan_shard`) or folds
//! them into partial groups (`aggregate_shard`). A query that needs no count stops early: it
//! walks the index of its first order key in order (`walk_in_order`), or, in objectId order,
//! stops after its first `skip + limit` matches.

use serde_json::Value;

use super::aggregate::{AggregateRequest, Folder, PartialGroup};
use super::filter::Filter;
use super::filter::Prepared;
use super::index::{
    entry_object_id, field_prefix, meta_key, plan, Candidates, IndexMeta, Plan, ALWAYS_INDEXED,
};
use super::order::RowOrder;
use super::{ScanRequest, SortKey};
use crate::acl::{allows, Access};
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::namespace::Namespace;
use crate::object::StoredObject;
use crate::storage::keys::{self, CF_SM};
use crate::storage::records::{live_record, ReplicaState};
use crate::storage::Store;

/// What a shard needs to check one stored object against a query: the filter (prepared), the
/// caller's principals, and the class's index state.
struct Matcher<'a> {
    filter: Prepared<'a>,
    principals: Option<&'a [String]>,
    meta: IndexMeta,
}

impl<'a> Matcher<'a> {
    fn new(
        store: &Store,
        group: GroupId,
        app: &str,
        class: &str,
        filter: &'a Filter,
        principals: Option<&'a [String]>,
    ) -> Result<Matcher<'a>> {
        if filter.sub_queries() {
            return Err(Error::InvalidValue(
                "a query reached a shard with unresolved sub-queries".into(),
            ));
        }
        let prepared = filter
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
        Ok(Matcher {
            filter: prepared,
            principals,
            meta,
        })
    }

    /// The object rendered as the query engine sees it (`render_for_query`), when the caller
    /// may read it and the filter selects it.
    fn check(&self, object_id: &str, bytes: &[u8]) -> Result<Option<Value>> {
        let stored = StoredObject::decode(bytes)?;
        if !allows(&stored.fields, self.principals, Access::Read) {
            return Ok(None);
        }
        let obj = stored.render_for_query(object_id);
        Ok(self.filter.matches(&obj).then_some(obj))
    }
}

/// Calls `visit` with each object of `app`/`class` on the shard that `principals` may read and
/// `filter` selects, rendered as the query engine sees it (`render_for_query`), in objectId
/// order, until `visit` answers false.
pub fn for_each_match(
    store: &Store,
    group: GroupId,
    app: &str,
    class: &str,
    filter: &Filter,
    principals: Option<&[String]>,
    mut visit: impl FnMut(Value) -> Result<bool>,
) -> Result<()> {
    let matcher = Matcher::new(store, group, app, class, filter, principals)?;
    match plan(group, app, class, filter, &matcher.meta) {
        Some(plan) => {
            metrics::counter!("basalt_query_index_plans_total").increment(1);
            visit_planned(store, group, app, class, plan, &matcher, &mut visit)
        }
        None => {
            metrics::counter!("basalt_query_scans_total").increment(1);
            let prefix = keys::class_prefix(group, app, class);
            let end = keys::separated_end(&prefix);
            store.scan(CF_SM, &prefix, &end, |k, v| {
                let object_id = String::from_utf8_lossy(&k[prefix.len()..]);
                match matcher.check(&object_id, v)? {
                    Some(obj) => visit(obj),
                    None => Ok(true),
                }
            })
        }
    }
}

/// Visits the matching candidates of `plan` in objectId order.
fn visit_planned(
    store: &Store,
    group: GroupId,
    app: &str,
    class: &str,
    plan: Plan,
    matcher: &Matcher<'_>,
    visit: &mut impl FnMut(Value) -> Result<bool>,
) -> Result<()> {
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
            if let Some(obj) = matcher.check(&id, &bytes)? {
                if !visit(obj)? {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// The sort key a shard can walk in index order: the first `order` key, when every object has
/// exactly one entry for it (`createdAt`, `updatedAt`), so that index order is query order.
fn walkable(order: &[SortKey]) -> Option<&SortKey> {
    order
        .first()
        .filter(|k| ALWAYS_INDEXED.contains(&k.field.as_str()))
}

/// The first `keep` matches under `order`, walking the index of its first key (`key`) in that
/// key's direction and stopping once `keep` rows are found and the key's value changes (rows
/// tied on it may still differ on later keys or objectId). `None` when the filter has its own
/// plan on another field (or known ids): its candidates are read instead.
fn walk_in_order(
    store: &Store,
    group: GroupId,
    req: &ScanRequest,
    key: &SortKey,
    order: &RowOrder,
    keep: usize,
) -> Result<Option<Vec<Value>>> {
    let matcher = Matcher::new(
        store,
        group,
        &req.app,
        &req.class,
        &req.filter,
        req.principals.as_deref(),
    )?;
    if !matcher.meta.complete {
        return Ok(None);
    }
    let prefix = field_prefix(group, &req.app, &req.class, &key.field);
    let mut ranges = match plan(group, &req.app, &req.class, &req.filter, &matcher.meta) {
        Some(p) if p.field == key.field => match p.candidates {
            Candidates::Ranges(r) => r,
            Candidates::Ids(_) => return Ok(None),
        },
        // Another field's plan reads only its candidates; walking would read every entry.
        Some(_) => return Ok(None),
        None => vec![(prefix.clone(), keys::separated_end(&prefix))],
    };
    metrics::counter!("basalt_query_ordered_walks_total").increment(1);
    // `$in` may name a value twice: walk each range once.
    ranges.sort();
    ranges.dedup();
    if key.descending {
        ranges.reverse();
    }
    let mut rows: Vec<Value> = Vec::new();
    // The encoded value of the `keep`-th row's key: the walk ends past it.
    let mut boundary: Option<Vec<u8>> = None;
    for (start, end) in &ranges {
        let mut step = |k: &[u8], _: &[u8]| -> Result<bool> {
            let Some(id) = entry_object_id(k) else {
                return Ok(true);
            };
            let Some(value) = k.get(prefix.len()..k.len().saturating_sub(id.len() + 1)) else {
                return Ok(true);
            };
            if boundary.as_deref().is_some_and(|b| b != value) {
                return Ok(false);
            }
            let object = store.get(CF_SM, &keys::object_key(group, &req.app, &req.class, id))?;
            if let Some(obj) = object.map(|b| matcher.check(id, &b)).transpose()?.flatten() {
                rows.push(obj);
                if rows.len() == keep {
                    boundary = Some(value.to_vec());
                } else if boundary.is_some() && rows.len() >= keep.saturating_mul(2).max(64) {
                    // Many rows tied on the boundary value: keep the best `keep`.
                    rows.sort_by(|a, b| order.compare(a, b));
                    rows.truncate(keep);
                }
            }
            Ok(true)
        };
        if key.descending {
            store.scan_rev(CF_SM, start, end, &mut step)?;
        } else {
            store.scan(CF_SM, start, end, &mut step)?;
        }
        if boundary.is_some() {
            break;
        }
    }
    Ok(Some(rows))
}

/// The shard's matching objects (ordered, at most `skip + limit`) and their count. Without
/// `count`, the shard stops once it has its rows: walking the index of the first order key
/// (`walk_in_order`), or, in the default order (objectId), after the first `skip + limit`
/// matches; the count it answers then is only the rows it kept.
pub fn scan_shard(store: &Store, group: GroupId, req: &ScanRequest) -> Result<(Vec<Value>, u64)> {
    let keep = req.skip.saturating_add(req.limit);
    let order = RowOrder::new(&req.order, &req.filter);
    let mut rows: Vec<Value> = Vec::new();
    if !req.count && keep == 0 {
        return Ok((rows, 0));
    }
    let walked = match walkable(&req.order) {
        Some(key) if !req.count => walk_in_order(store, group, req, key, &order, keep)?,
        _ => None,
    };
    let mut count = 0u64;
    match walked {
        Some(found) => {
            count = found.len() as u64;
            rows = found;
        }
        None => {
            let stop_early = !req.count && order.is_by_object_id();
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
                        // Keep memory bounded: trim to the best `keep` whenever the buffer
                        // doubles.
                        if rows.len() >= keep.saturating_mul(2).max(64) {
                            rows.sort_by(|a, b| order.compare(a, b));
                            rows.truncate(keep);
                        }
                    }
                    // Matches come in objectId order: the first `keep` are the rows.
                    Ok(!(stop_early && rows.len() >= keep))
                },
            )?;
        }
    }
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
        |obj| folder.add(&req.spec, &columns, &obj).map(|()| true),
    )?;
    Ok(folder.into_partials())
}
