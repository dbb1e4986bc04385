//! Runs a query on one shard's local state: visits the class's objects the caller may read
//! that match the filter (`for_each_match`: candidates by objectId or from index ranges when
//! the planner finds them, else a scan of the class; the filter is checked on every candidate),
//! then either keeps the first `skip + limit` under the requested order (`scan_shard`) or folds
//! them into partial groups (`aggregate_shard`).
//!
//! Shortcuts, each answering exactly what reading every match would:
//! - a count of the whole class, or of a filter that is one indexed equality, `$in` or range,
//!   comes from the class's counts and its index entries without reading objects
//!   (`exact_count`); a declared column's range reads the tallies of the value buckets it
//!   covers whole instead of their entries (`query::tally`);
//! - rows that need no full count walk the index of the first order key in order and stop
//!   once they have `skip + limit` (`walk_in_order`: `createdAt`, `updatedAt`, declared and
//!   automatic columns), unless the filter's own index plan is estimated cheaper; in objectId
//!   order a shard stops after its first `skip + limit` matches;
//! - shards read together first read a few entries of each walk, and every walk stops past
//!   the `skip + limit`-th best of those sure to match (`walk_bound`), so about `skip + limit`
//!   objects are read in all however many shards the node leads; a column that the shard
//!   counted no markers for has no marker range to read;
//! - an aggregation that only counts the groups of one column a walk meets whole, without a
//!   filter, counts plain values from the column's entries and reads only the other objects
//!   (`count_groups`).

//!
//! `matcher` checks objects and visits matches, `count` counts from the index, `walk` runs the
//! ordered walks and their common bound, `best` keeps a shard's best rows; this module runs
//! the shards of one read together, from one snapshot of the store.

mod best;
mod count;
mod matcher;
mod walk;

use serde_json::Value;

use super::aggregate::{AggregateRequest, Folder, PartialGroup};
use super::index::{meta_key, IndexMeta};
use super::order::RowOrder;
use super::ScanRequest;
use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::names::AppId;
use crate::namespace::Namespace;
use crate::slots::{Excluded, GroupSplits};
use crate::storage::keys;
use crate::storage::keys::CF_SM;
use crate::storage::records::StoredRecord;
use crate::storage::store::ReadView;
use crate::storage::Store;
use best::Best;
use count::{count_groups, exact_count, indexed_group_column};
use matcher::{answer_rows, for_each_match, Matcher};
use walk::{walk_bound, walk_in_order, Peeked, ShardRead, Stop, WalkBound};

/// The first `keep` matches in the query's order, without counting every match: an ordered
/// walk when it applies, else every match in objectId order, stopping after `keep` when that
/// is the query's order (or once past `worst`, which other shards' rows already beat).
fn first_rows(
    read: &ShardRead<'_, '_, '_>,
    stop: Stop<'_>,
    peeked: Option<Peeked>,
) -> Result<Vec<Value>> {
    if let Some(rows) = walk_in_order(read, stop, peeked)? {
        return Ok(rows);
    }
    let ShardRead {
        store,
        group,
        req,
        matcher,
        order,
    } = *read;
    let Stop { keep, worst, .. } = stop;
    let stop_early = order.is_by_object_id();
    let worst_id = worst
        .and_then(|w| w.get("objectId"))
        .and_then(Value::as_str);
    let mut rows = Best::new(keep, order);
    collect_matches(store, group, req, matcher, &mut rows, |n, obj| {
        let past = || {
            let id = obj.get("objectId").and_then(Value::as_str);
            worst_id.is_some_and(|w| id.is_some_and(|id| id > w))
        };
        !(stop_early && (n >= keep || past()))
    })?;
    Ok(rows.into_rows())
}

/// Visits every match, keeping the best in `rows`; `go_on` sees how many rows are held
/// with the match just visited, and that match, and may stop the visit. Answers how many
/// matches were visited.
fn collect_matches(
    store: &ReadView<'_>,
    group: GroupId,
    req: &ScanRequest,
    matcher: &Matcher<'_>,
    rows: &mut Best<'_>,
    go_on: impl Fn(usize, &Value) -> bool,
) -> Result<u64> {
    let mut count = 0u64;
    for_each_match(store, group, &req.app, &req.class, matcher, |obj| {
        count += 1;
        let go = go_on(rows.len() + usize::from(rows.keep > 0), &obj);
        rows.offer(obj);
        Ok(go)
    })?;
    Ok(count)
}

/// The slots a read of `group` routed by the slot map of `epoch` leaves out (`Some` while
/// the group freezes slots for a child that map names, or takes in a merge's slots that map
/// does not name it for; decisions/0038), from the same snapshot as the read. `Moved` when
/// the group dropped objects that map still routes to it, or took in slots after it: the
/// reader takes up a newer map and reads again.
pub(crate) fn split_exclusion(
    store: &ReadView<'_>,
    group: GroupId,
    epoch: u64,
) -> Result<Option<Excluded>> {
    let bytes = store.get(CF_SM, &keys::split_key(group))?;
    match GroupSplits::from_stored(bytes.as_deref())?.read_at(epoch) {
        Ok(excluded) => Ok(excluded),
        Err(epoch) => Err(Error::Moved { epoch }),
    }
}

/// The split exclusions of `groups` (`split_exclusion`), and their class metadata made
/// incomplete where a shard leaves slots out: its index counts and walks cover objects that
/// are not the reader's, so only objects read and checked one by one answer
/// (`Matcher::check`).
fn shard_states(
    store: &ReadView<'_>,
    groups: &[GroupId],
    app: &AppId,
    class: &str,
    epoch: u64,
) -> Result<(Vec<IndexMeta>, Vec<Option<Excluded>>)> {
    let mut metas = class_metas(store, groups, app, class)?;
    let exclusions = groups
        .iter()
        .map(|&g| split_exclusion(store, g, epoch))
        .collect::<Result<Vec<_>>>()?;
    for (meta, excluded) in metas.iter_mut().zip(&exclusions) {
        if excluded.is_some() {
            meta.complete = false;
        }
    }
    Ok((metas, exclusions))
}

/// The index metadata of a class on each of `groups` (the default, incomplete one where a
/// shard has none), read together in one multi-get.
fn class_metas(
    store: &ReadView<'_>,
    groups: &[GroupId],
    app: &AppId,
    class: &str,
) -> Result<Vec<IndexMeta>> {
    let name = meta_key(app, class);
    let keys: Vec<Vec<u8>> = groups
        .iter()
        .map(|&g| keys::record_key(g, Namespace::IndexMeta.name(), &name))
        .collect();
    // Read by every query of the class and written only with its objects: decoded once per
    // state of the store (`ReadView::decoded`).
    let metas = store.decoded(CF_SM, &keys, |bytes| {
        let Some(bytes) = bytes else {
            return Ok(IndexMeta::default());
        };
        // Index metadata never expires.
        let rec = StoredRecord::decode(bytes)?;
        Ok(serde_json::from_value(rec.value).unwrap_or_default())
    })?;
    Ok(metas.iter().map(|m| IndexMeta::clone(m)).collect())
}

/// The matching objects of several shards read together (ordered, at most `skip + limit`)
/// and their count, from one snapshot of the store. Each shard after the first knows the
/// worst of the best rows found so far, and an ordered walk or an objectId-ordered read stops
/// once its rows cannot beat it: of `n` shards' candidates, about `skip + limit` objects are
/// read instead of `n` times as many.
pub fn scan_shards(
    store: &Store,
    groups: &[GroupId],
    req: &ScanRequest,
    epoch: u64,
    cancel: &Cancel,
) -> Result<(Vec<Value>, u64)> {
    let view = store.view();
    let keep = req.skip.saturating_add(req.limit);
    let order = RowOrder::new(&req.order, &req.filter);
    // Rows as the shards checked them (the fields the query reads), each with its shard.
    let mut rows: Vec<(Value, GroupId)> = Vec::new();
    let mut count = 0u64;
    let order_fields: Vec<&str> = req.order.iter().map(|k| k.field.as_str()).collect();
    let mut matcher = Matcher::new(
        (req.app.as_str(), req.class.as_str()),
        &req.filter,
        &req.principals,
        &order_fields,
        groups,
        cancel,
    )?;
    let (metas, exclusions) = shard_states(&view, groups, &req.app, &req.class, epoch)?;
    let WalkBound { bound, peeks } = walk_bound(&view, groups, &metas, req, keep)?;
    for (((&group, meta), peeked), excluded) in groups.iter().zip(metas).zip(peeks).zip(exclusions)
    {
        matcher.meta = meta;
        matcher.excluded = excluded;
        let worst = keep
            .checked_sub(1)
            .and_then(|i| rows.get(i))
            .map(|(r, _)| r);
        cancel.check()?;
        let shard = Shard {
            group,
            worst,
            bound: bound.as_deref(),
            peeked,
        };
        let (part, n) = scan_shard(&view, req, &matcher, &order, shard)?;
        count += n;
        rows.extend(part.into_iter().map(|r| (r, group)));
        rows.sort_by(|a, b| order.compare(&a.0, &b.0));
        rows.truncate(keep);
    }
    let kept = req.kept_fields();
    let rows = answer_rows(&view, &req.app, &req.class, rows, kept.as_ref())?;
    crate::limits::check_answer(&rows, crate::limits::MAX_SHARD_ROWS_BYTES)?;
    Ok((rows, count))
}

/// One shard of a scan over several, and what the others tell it (`scan_shards`).
struct Shard<'a> {
    group: GroupId,
    /// The worst of the best rows the shards read before hold.
    worst: Option<&'a Value>,
    /// The walks' common stop (`walk_bound`).
    bound: Option<&'a [u8]>,
    /// The entries this shard's walk read ahead.
    peeked: Option<Peeked>,
}

/// One shard's matching objects (ordered, at most `skip + limit`; without `count`, none
/// worse than `worst`) and their count. A count the index answers (`exact_count`) leaves the
/// rows to `first_rows`; so does a query without `count`, whose answered count is then only
/// the rows kept.
fn scan_shard(
    store: &ReadView<'_>,
    req: &ScanRequest,
    matcher: &Matcher<'_>,
    order: &RowOrder,
    shard: Shard<'_>,
) -> Result<(Vec<Value>, u64)> {
    let Shard {
        group,
        worst,
        bound,
        peeked,
    } = shard;
    let keep = req.skip.saturating_add(req.limit);
    let counted = match req.count {
        true => exact_count(store, group, req, matcher)?,
        false => None,
    };
    let (mut rows, count) = match (req.count, counted) {
        (true, None) => {
            let mut rows = Best::new(keep, order);
            let n = collect_matches(store, group, req, matcher, &mut rows, |_, _| true)?;
            (rows.into_rows(), n)
        }
        (_, counted) => {
            let read = ShardRead {
                store,
                group,
                req,
                matcher,
                order,
            };
            let stop = Stop { keep, worst, bound };
            let rows = match keep {
                0 => Vec::new(),
                _ => first_rows(&read, stop, peeked)?,
            };
            let n = counted.unwrap_or(rows.len() as u64);
            (rows, n)
        }
    };
    rows.sort_by(|a, b| order.compare(a, b));
    rows.truncate(keep);
    Ok((rows, count))
}

/// The partial groups of an aggregation over several shards, folded together from one
/// snapshot of the store.
pub fn aggregate_shards(
    store: &Store,
    groups: &[GroupId],
    req: &AggregateRequest,
    epoch: u64,
    cancel: &Cancel,
) -> Result<Vec<PartialGroup>> {
    let view = store.view();
    let store = &view;
    let columns = req.spec.columns();
    let mut folder = Folder::default();
    let read: Vec<&str> = req
        .spec
        .group_by
        .iter()
        .chain(&columns)
        .map(String::as_str)
        .collect();
    let mut matcher = Matcher::new(
        (req.app.as_str(), req.class.as_str()),
        &req.filter,
        &req.principals,
        &read,
        groups,
        cancel,
    )?;
    let (metas, exclusions) = shard_states(store, groups, &req.app, &req.class, epoch)?;
    for ((&group, meta), excluded) in groups.iter().zip(metas).zip(exclusions) {
        matcher.meta = meta;
        matcher.excluded = excluded;
        if let Some(field) = indexed_group_column(req, &matcher.meta) {
            if count_groups(store, group, req, &matcher, field, &mut folder)? {
                metrics::counter!("basalt_query_groups_from_index_total").increment(1);
                #[cfg(test)]
                GROUP_WALKS.with(|n| n.set(n.get() + 1));
                continue;
            }
        }
        for_each_match(store, group, &req.app, &req.class, &matcher, |obj| {
            folder.add(&req.spec, &columns, &obj).map(|()| true)
        })?;
    }
    Ok(folder.into_partials())
}

#[cfg(test)]
thread_local! {
    /// Shards whose groups `count_groups` counted, on this thread (tests check the walk ran).
    pub(crate) static GROUP_WALKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
