//! Counts from the index instead of objects: a query's exact count when the class's counts or
//! one indexed condition's entries answer it (`exact_count`, reading tallies of whole value
//! buckets: `query::tally`), and an aggregation's groups of one column from its entries
//! (`count_groups`). Each answers exactly what reading every match would, or nothing. Used by
//! `shard_exec`'s shard loops (`mod`) and `walk` (`covered_by_index`).

use std::collections::HashSet;

use serde_json::Value;

use super::matcher::{Matcher, FETCH_BATCH};
use crate::acl::Principals;
use crate::error::Result;
use crate::ids::GroupId;
use crate::names::AppId;
use crate::query::aggregate::{too_many_groups, AggregateRequest, Folder, MAX_GROUPS};
use crate::query::filter::{Cond, Filter};
use crate::query::index::{
    entry_object_id, field_prefix, imprecise, imprecise_entry, is_array_marker, is_scalar_entry,
    readers_prefix, scalar_value, value_range, IndexMeta, ALWAYS_INDEXED, ELEMENT, FORMAT_TYPED,
    PUBLIC, TYPED,
};
use crate::query::plan::{plan, Candidates, Plan};
use crate::query::tally::{self, Tally};
use crate::query::ScanRequest;
use crate::storage::keys::{self, CF_SM};
use crate::storage::store::ReadView;

/// The top-level conjuncts of a filter.
pub(super) fn conjuncts(filter: &Filter) -> Vec<&Filter> {
    match filter {
        Filter::And(fs) => fs.iter().collect(),
        other => vec![other],
    }
}

/// Whether `filter` says exactly "`field` has an entry in the plan's ranges": one equality or
/// `$in` on `field`, or only range bounds on it, with no imprecise number.
pub(super) fn covered_by_index(filter: &Filter, field: &str) -> bool {
    let conds: Option<Vec<&Cond>> = conjuncts(filter)
        .into_iter()
        .map(|f| match f {
            Filter::Field { path, cond } if path == field => Some(cond),
            _ => None,
        })
        .collect();
    let Some(conds) = conds else { return false };
    let precise = |v: &Value| !imprecise(v);
    match conds.as_slice() {
        [Cond::Eq(v)] => precise(v),
        [Cond::In(vs)] => vs.iter().all(precise),
        [] => false,
        many => many.iter().all(|c| match c {
            Cond::Gt(b) | Cond::Gte(b) | Cond::Lt(b) | Cond::Lte(b) => precise(b),
            _ => false,
        }),
    }
}

/// The objects of the class that the public may not read and one of `principals` may, from
/// the reader entries.
pub(super) fn privately_readable(
    store: &ReadView<'_>,
    group: GroupId,
    app: &AppId,
    class: &str,
    principals: &Principals,
) -> Result<HashSet<String>> {
    let mut ids = HashSet::new();
    for p in principals.private() {
        let prefix = readers_prefix(group, app, class, p);
        store.scan(CF_SM, &prefix, &keys::separated_end(&prefix), |k, _| {
            if let Some(id) = entry_object_id(k) {
                ids.insert(id.to_string());
            }
            Ok(true)
        })?;
    }
    Ok(ids)
}

/// The exact count of the query's matches without reading objects, when the class's index is
/// current: the whole class from its counts (plus, for a caller, the private objects it may
/// read, from reader entries); a filter that is one indexed equality, `$in` or range from its
/// entries and their flags. `None` when neither applies.
pub(super) fn exact_count(
    store: &ReadView<'_>,
    group: GroupId,
    req: &ScanRequest,
    matcher: &Matcher<'_>,
) -> Result<Option<u64>> {
    let meta = &matcher.meta;
    if !meta.current() || !matcher.reads_public() {
        return Ok(None);
    }
    let (app, class) = (&req.app, req.class.as_str());
    let private = || privately_readable(store, group, app, class, matcher.principals);
    if matches!(req.filter, Filter::All) {
        metrics::counter!("basalt_query_counted_from_index_total").increment(1);
        return Ok(Some(match matcher.principals.is_master() {
            true => meta.counts.objects,
            false => meta.counts.public + private()?.len() as u64,
        }));
    }
    let Some(Plan {
        field,
        candidates: Candidates::Ranges(mut ranges),
        arrays_from_markers,
        ..
    }) = plan(group, app, class, &req.filter, meta)
    else {
        return Ok(None);
    };
    if !covered_by_index(&req.filter, &field) {
        return Ok(None);
    }
    metrics::counter!("basalt_query_counted_from_index_total").increment(1);
    ranges.sort();
    ranges.dedup();
    let prefix = field_prefix(group, app, class, &field);
    // Entries to read: the ranges, less what the tallies of the buckets inside them count.
    let mut tallied = 0u64;
    if meta.tallied(&field) {
        let tally_prefix = tally::field_tally_prefix(group, app, class, &field);
        let mut read = Vec::new();
        for range in ranges {
            let Some((first, end)) = tally::tally_range(&prefix, &tally_prefix, &range) else {
                read.push(range);
                continue;
            };
            metrics::counter!("basalt_query_counted_from_tallies_total").increment(1);
            let mut buckets = Vec::new();
            store.scan(CF_SM, &first, &end, |k, v| {
                buckets.push((k[tally_prefix.len()..].to_vec(), Tally::decode(v)?));
                Ok(true)
            })?;
            let split = tally::split(&prefix, &range, &buckets);
            tallied += split.counted;
            read.extend(split.read);
        }
        ranges = read;
    }
    let mut readable: Option<HashSet<String>> = None;
    // Objects met through several entries (array elements) count once.
    let mut elements: HashSet<String> = HashSet::new();
    let mut count = 0u64;
    for (start, end) in &ranges {
        store.scan(CF_SM, start, end, |k, flags| {
            matcher.cancel.check()?;
            let Some(id) = entry_object_id(k) else {
                return Ok(true);
            };
            let value = tally::entry_value(k, prefix.len());
            let flag = flags.first().copied().unwrap_or_default();
            if arrays_from_markers && flag & ELEMENT != 0 {
                // Arrays are met through their markers.
                return Ok(true);
            }
            // An array marker, an imprecise number or an entry without flags: the object
            // decides.
            let precise = value.is_some_and(|v| !imprecise_entry(v) && !is_array_marker(v));
            let selected = match flags.first() {
                Some(&f) if precise => {
                    f & PUBLIC != 0
                        || matcher.principals.is_master()
                        || match &readable {
                            Some(r) => r.contains(id),
                            None => readable.insert(private()?).contains(id),
                        }
                }
                _ => matcher.fetch(store, group, app, class, id)?.is_some(),
            };
            let once = flags.first().is_none_or(|f| f & ELEMENT != 0) || !precise;
            if selected && (!once || elements.insert(id.to_string())) {
                count += 1;
            }
            Ok(true)
        })?;
    }
    Ok(Some(count + tallied))
}

/// The column whose index entries may count an aggregation's groups on a shard
/// (`count_groups`): the one column it groups by, when it has no metric to read and no
/// filter, the column is a client one (times group by day) and a walk of its entries and
/// markers meets every object, in entries that say when their value does not read back as it
/// is (`FORMAT_TYPED`).
pub(super) fn indexed_group_column<'r>(
    req: &'r AggregateRequest,
    meta: &IndexMeta,
) -> Option<&'r str> {
    let [field] = req.spec.group_by.as_slice() else {
        return None;
    };
    let counted = req.spec.metrics.is_empty()
        && matches!(req.filter, Filter::All)
        && !ALWAYS_INDEXED.contains(&field.as_str())
        && meta.format >= FORMAT_TYPED
        && meta.walkable(field, false);
    counted.then_some(field.as_str())
}

/// Folds a shard's objects into groups by `field` walking the column's entries: an entry the
/// caller may read whose value reads back as it is (`scalar_value`: not `TYPED`, precise)
/// adds one object to its group without the object being read; the objects of markers
/// (missing, null, objects, arrays; array elements are skipped), of private entries for a
/// caller without the master key and of the other values are read and folded as a scan folds
/// them. Answers false, having folded nothing, when more than a quarter of the shard's objects
/// would be read (known ahead for markers and private objects, met during the walk for typed
/// values): a scan of the class is then cheaper.
pub(super) fn count_groups(
    store: &ReadView<'_>,
    group: GroupId,
    req: &AggregateRequest,
    matcher: &Matcher<'_>,
    field: &str,
    folder: &mut Folder,
) -> Result<bool> {
    let meta = &matcher.meta;
    let most_read = meta.counts.objects / 4;
    let private = match matcher.principals.is_master() {
        false => meta.counts.objects.saturating_sub(meta.counts.public),
        true => 0,
    };
    let markers = meta
        .markers
        .as_ref()
        .and_then(|m| m.get(field))
        .copied()
        .unwrap_or(0);
    if !matcher.reads_public() || markers.saturating_add(private) > most_read {
        // Too many objects to read one by one: the scan is cheaper.
        return Ok(false);
    }
    let prefix = field_prefix(group, &req.app, &req.class, field);
    let (start, end) = value_range(&prefix);
    // Runs of one encoded value: its JSON (none when it does not read back) and its objects.
    let mut runs: Vec<(Vec<u8>, Option<Value>, u64)> = Vec::new();
    let mut read: Vec<String> = Vec::new();
    let mut cheaper_to_scan = false;
    store.scan(CF_SM, &start, &end, |k, flags| {
        matcher.cancel.check()?;
        let (Some(id), Some(value)) = (entry_object_id(k), tally::entry_value(k, prefix.len()))
        else {
            return Ok(true);
        };
        let flag = flags.first().copied();
        let scalar = is_scalar_entry(value);
        if scalar && flag.is_some_and(|f| f & ELEMENT != 0) {
            // Arrays are met through their markers.
            return Ok(true);
        }
        let counted = scalar
            && flag.is_some_and(|f| {
                f & TYPED == 0 && (f & PUBLIC != 0 || matcher.principals.is_master())
            });
        if counted {
            if runs.last().is_none_or(|(v, _, _)| v.as_slice() != value) {
                if runs.len() >= MAX_GROUPS {
                    // As many groups as a scan would refuse (distinct plain values are
                    // distinct groups).
                    return Err(too_many_groups());
                }
                runs.push((value.to_vec(), scalar_value(value), 0));
            }
            if let Some((_, Some(_), n)) = runs.last_mut() {
                *n += 1;
                return Ok(true);
            }
        }
        read.push(id.to_string());
        cheaper_to_scan = read.len() as u64 > most_read;
        Ok(!cheaper_to_scan)
    })?;
    if cheaper_to_scan {
        return Ok(false);
    }
    for (_, value, n) in runs {
        if let Some(value) = value {
            folder.add_counted(value, n)?;
        }
    }
    read.sort_unstable();
    read.dedup();
    for chunk in read.chunks(FETCH_BATCH) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        for obj in matcher
            .fetch_all(store, group, &req.app, &req.class, &chunk)?
            .into_iter()
            .flatten()
        {
            folder.add(&req.spec, &[], &obj)?;
        }
    }
    Ok(true)
}
