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

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::aggregate::{too_many_groups, AggregateRequest, Folder, PartialGroup, MAX_GROUPS};
use super::eval::lookup;
use super::filter::{Cond, Filter, Prepared};
use super::index::{
    encode, entry_object_id, field_prefix, imprecise, imprecise_entry, irregular_range,
    is_array_marker, is_scalar_entry, meta_key, plan, readers_prefix, scalar_range, scalar_value,
    single_scalar, value_range, Candidates, IndexMeta, KeyRange, Plan, ALWAYS_INDEXED, ELEMENT,
    FORMAT_TYPED, PUBLIC, TYPED,
};
use super::order::RowOrder;
use super::tally::{self, Tally};
use super::{ScanRequest, SortKey};
use crate::acl::{allows, Access, PUBLIC_PRINCIPAL};
use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::namespace::Namespace;
use crate::object::StoredObject;
use crate::storage::keys::{self, CF_SM};
use crate::storage::records::StoredRecord;
use crate::storage::store::ReadView;
use crate::storage::Store;

/// What a shard needs to check one stored object against a query: the filter (prepared), the
/// caller's principals, the class's index state, and the fields the query reads.
struct Matcher<'a> {
    filter: Prepared<'a>,
    /// Trips when nobody waits for the answer any more: every check stops the read.
    cancel: &'a Cancel,
    principals: Option<&'a [String]>,
    meta: IndexMeta,
    /// The top-level fields the filter, the ACL check, the order or the aggregation read: the
    /// only ones decoded from each candidate (`StoredObject::decode_only`). A handful, so
    /// looked up by comparison, cheaper than hashing every name of every object.
    fields: Vec<String>,
    /// Whether they include `createdAt` or `updatedAt`.
    times: bool,
    /// The shards the query reads on this node, and whether their scans of the class keep
    /// what they read in the block cache (`ReadView::worth_caching`, asked at the first scan).
    groups: &'a [GroupId],
    cache_scans: std::cell::OnceCell<bool>,
}

/// The top-level fields a query reads to select, order or fold objects: those its filter
/// names, `ACL` when the caller is not the master key, and `extra` (order keys, aggregated
/// columns). A dot path names its first key.
fn read_fields(filter: &Filter, principals: bool, extra: &[&str]) -> Vec<String> {
    let fields = std::cell::RefCell::new(HashSet::new());
    let add = |path: &str| {
        let mut fields = fields.borrow_mut();
        fields.insert(path.to_string());
        if let Some((top, _)) = path.split_once('.') {
            fields.insert(top.to_string());
        }
    };
    filter.any_path(&|p| {
        add(p);
        false
    });
    extra.iter().for_each(|p| add(p));
    if principals {
        add("ACL");
    }
    let mut fields: Vec<String> = fields.into_inner().into_iter().collect();
    fields.sort_unstable();
    fields
}

impl<'a> Matcher<'a> {
    /// The matcher of one query, for every shard it reads: `meta` is set per shard
    /// (`class_metas`) before that shard is read.
    fn new(
        filter: &'a Filter,
        principals: Option<&'a [String]>,
        extra: &[&str],
        groups: &'a [GroupId],
        cancel: &'a Cancel,
    ) -> Result<Matcher<'a>> {
        if filter.sub_queries() {
            return Err(Error::InvalidValue(
                "a query reached a shard with unresolved sub-queries".into(),
            ));
        }
        let prepared = filter
            .prepare()
            .map_err(|e| Error::InvalidValue(e.to_string()))?;
        let fields = read_fields(filter, principals.is_some(), extra);
        let times = fields.iter().any(|f| f == "createdAt" || f == "updatedAt");
        Ok(Matcher {
            filter: prepared,
            cancel,
            principals,
            meta: IndexMeta::default(),
            fields,
            times,
            groups,
            cache_scans: std::cell::OnceCell::new(),
        })
    }

    /// Whether the caller may read every object anyone may (it holds `*`, as every caller but
    /// the master key does, or it is the master key): public entries then count for it.
    fn reads_public(&self) -> bool {
        self.principals
            .is_none_or(|ps| ps.iter().any(|p| p == PUBLIC_PRINCIPAL))
    }

    /// Whether scans of the class on this node's shards keep their blocks cached (the same
    /// answer for every shard of the query).
    fn cache_scans(&self, store: &ReadView<'_>, app: &str, class: &str) -> Result<bool> {
        if let Some(&cache) = self.cache_scans.get() {
            return Ok(cache);
        }
        let ranges: Vec<(Vec<u8>, Vec<u8>)> = self
            .groups
            .iter()
            .map(|&g| {
                let prefix = keys::class_prefix(g, app, class);
                let end = keys::separated_end(&prefix);
                (prefix, end)
            })
            .collect();
        let cache = store.worth_caching(CF_SM, &ranges)?;
        Ok(*self.cache_scans.get_or_init(|| cache))
    }

    /// The object `id` of the class read from the store and checked (`check`).
    fn fetch(
        &self,
        store: &ReadView<'_>,
        group: GroupId,
        app: &str,
        class: &str,
        id: &str,
    ) -> Result<Option<Value>> {
        match store.get(CF_SM, &keys::object_key(group, app, class, id))? {
            Some(bytes) => self.check(id, &bytes),
            None => Ok(None),
        }
    }

    /// The objects `ids` of the class read together (one multi-get) and checked (`check`),
    /// in the order of `ids`.
    fn fetch_all(
        &self,
        store: &ReadView<'_>,
        group: GroupId,
        app: &str,
        class: &str,
        ids: &[&str],
    ) -> Result<Vec<Option<Value>>> {
        read_objects(store, group, app, class, ids)?
            .into_iter()
            .zip(ids)
            .map(|(bytes, id)| match bytes {
                Some(b) => self.check(id, &b),
                None => Ok(None),
            })
            .collect()
    }

    /// The fields the query reads of the object (`fields`), rendered as the query engine sees
    /// them (`into_partial_for_query`), when the caller may read it and the filter selects
    /// it. `answer_rows` renders the rows a query answers with.
    fn check(&self, object_id: &str, bytes: &[u8]) -> Result<Option<Value>> {
        self.cancel.check()?;
        let stored =
            StoredObject::decode_only(bytes, &|name| self.fields.iter().any(|f| f == name))?;
        if !allows(&stored.fields, self.principals, Access::Read) {
            return Ok(None);
        }
        let obj = stored.into_partial_for_query(object_id, self.times);
        Ok(self.filter.matches(&obj).then_some(obj))
    }
}

/// The stored bytes of the objects `ids` of the class, read together (one multi-get), in the
/// order of `ids`.
fn read_objects(
    store: &ReadView<'_>,
    group: GroupId,
    app: &str,
    class: &str,
    ids: &[&str],
) -> Result<Vec<Option<Vec<u8>>>> {
    let keys: Vec<Vec<u8>> = ids
        .iter()
        .map(|id| keys::object_key(group, app, class, id))
        .collect();
    store.multi_get(CF_SM, &keys)
}

/// `rows` from `Matcher::check` (each with its shard) rendered (`render_for_query`) with the
/// fields `kept` names (all when `None`), read again from the same snapshot: only the rows a
/// read answers with are ever decoded, and only for the fields they answer with, however many
/// objects it checked.
fn answer_rows(
    store: &ReadView<'_>,
    app: &str,
    class: &str,
    rows: Vec<(Value, GroupId)>,
    kept: Option<&HashSet<&str>>,
) -> Result<Vec<Value>> {
    let mut by_group: HashMap<GroupId, Vec<usize>> = HashMap::new();
    for (i, (_, group)) in rows.iter().enumerate() {
        by_group.entry(*group).or_default().push(i);
    }
    let mut out: Vec<Option<Value>> = vec![None; rows.len()];
    for (group, at) in by_group {
        let ids: Vec<&str> = at
            .iter()
            .map(|&i| {
                rows[i]
                    .0
                    .get("objectId")
                    .and_then(Value::as_str)
                    .ok_or_else(|| Error::Storage("a matched row without its objectId".into()))
            })
            .collect::<Result<_>>()?;
        let objects = read_objects(store, group, app, class, &ids)?;
        for ((&i, bytes), id) in at.iter().zip(objects).zip(&ids) {
            let bytes = bytes.ok_or_else(|| {
                Error::Storage(format!("object {id} left a snapshot while it was read"))
            })?;
            out[i] = Some(match kept {
                None => StoredObject::decode(&bytes)?.render_for_query(id),
                Some(kept) => StoredObject::decode_only(&bytes, &|f| kept.contains(f))?
                    .into_partial_for_query(id, true),
            });
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// Calls `visit` with each object of `app`/`class` on the shard that `principals` may read and
/// `filter` selects, rendered as the query engine sees it (`render_for_query`), in objectId
/// order, until `visit` answers false.
fn for_each_match(
    store: &ReadView<'_>,
    group: GroupId,
    app: &str,
    class: &str,
    matcher: &Matcher<'_>,
    mut visit: impl FnMut(Value) -> Result<bool>,
) -> Result<()> {
    match plan(group, app, class, matcher.filter.filter(), &matcher.meta) {
        Some(plan) => {
            metrics::counter!("basalt_query_index_plans_total").increment(1);
            let plan = plan.with_id_floor(id_floor(matcher.filter.filter()));
            visit_planned(store, group, app, class, plan, matcher, &mut visit)
        }
        None => {
            metrics::counter!("basalt_query_scans_total").increment(1);
            let prefix = keys::class_prefix(group, app, class);
            let end = keys::separated_end(&prefix);
            // Objects are stored in objectId order: a floor on the id skips those below it
            // (a paged walk by objectId cursor, such as a push's fan-out, reads each page
            // from where the last one ended).
            let mut start = prefix.clone();
            if let Some(floor) = id_floor(matcher.filter.filter()) {
                start.extend_from_slice(floor.as_bytes());
            }
            let cache = matcher.cache_scans(store, app, class)?;
            store.scan_bulk(CF_SM, &start, &end, cache, |k, v| {
                let object_id = String::from_utf8_lossy(&k[prefix.len()..]);
                match matcher.check(&object_id, v)? {
                    Some(obj) => visit(obj),
                    None => Ok(true),
                }
            })
        }
    }
}

/// The lowest objectId a filter lets through, when its top level bounds the objectId from
/// below with a string (`$gt` or `$gte`): every match is at or above it.
fn id_floor(filter: &Filter) -> Option<&str> {
    fn floor(f: &Filter) -> Option<&str> {
        match f {
            Filter::Field {
                path,
                cond: Cond::Gt(v) | Cond::Gte(v),
            } if path == "objectId" => v.as_str(),
            _ => None,
        }
    }
    match filter {
        Filter::And(parts) => parts.iter().filter_map(floor).max(),
        other => floor(other),
    }
}

/// Visits the matching candidates of `plan` in objectId order.
fn visit_planned(
    store: &ReadView<'_>,
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
                    matcher.cancel.check()?;
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
    let from = match id_floor(matcher.filter.filter()) {
        Some(floor) => ids.partition_point(|id| id.as_str() < floor),
        None => 0,
    };
    for chunk in ids.get(from..).unwrap_or_default().chunks(FETCH_BATCH) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        for obj in matcher
            .fetch_all(store, group, app, class, &chunk)?
            .into_iter()
            .flatten()
        {
            if !visit(obj)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The top-level conjuncts of a filter.
fn conjuncts(filter: &Filter) -> Vec<&Filter> {
    match filter {
        Filter::And(fs) => fs.iter().collect(),
        other => vec![other],
    }
}

/// Whether `filter` says exactly "`field` has an entry in the plan's ranges": one equality or
/// `$in` on `field`, or only range bounds on it, with no imprecise number.
fn covered_by_index(filter: &Filter, field: &str) -> bool {
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
fn privately_readable(
    store: &ReadView<'_>,
    group: GroupId,
    app: &str,
    class: &str,
    principals: &[String],
) -> Result<HashSet<String>> {
    let mut ids = HashSet::new();
    for p in principals.iter().filter(|p| p.as_str() != PUBLIC_PRINCIPAL) {
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
fn exact_count(
    store: &ReadView<'_>,
    group: GroupId,
    req: &ScanRequest,
    matcher: &Matcher<'_>,
) -> Result<Option<u64>> {
    let meta = &matcher.meta;
    if !meta.current() || !matcher.reads_public() {
        return Ok(None);
    }
    let (app, class) = (req.app.as_str(), req.class.as_str());
    let private = || match matcher.principals {
        Some(ps) => privately_readable(store, group, app, class, ps),
        None => Ok(HashSet::new()),
    };
    if matches!(req.filter, Filter::All) {
        metrics::counter!("basalt_query_counted_from_index_total").increment(1);
        return Ok(Some(match matcher.principals {
            None => meta.counts.objects,
            Some(_) => meta.counts.public + private()?.len() as u64,
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
                        || matcher.principals.is_none()
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

/// Whether reading a plan's candidates (`ranges`) is cheaper than walking the order key's
/// index for `keep` rows: with `c` candidates among `n` objects a walk reads about
/// `keep * n / c` objects, so the plan wins while `c * c < keep * n`. Counts entries only up
/// to that point.
fn plan_is_cheaper(
    store: &ReadView<'_>,
    meta: &IndexMeta,
    ranges: &[KeyRange],
    keep: usize,
) -> Result<bool> {
    if !meta.current() {
        return Ok(true);
    }
    let budget = ((keep as f64) * (meta.counts.objects as f64)).sqrt() as u64 + 1;
    let mut seen = 0u64;
    for (start, end) in ranges {
        store.scan(CF_SM, start, end, |_, _| {
            seen += 1;
            Ok(seen < budget)
        })?;
        if seen >= budget {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The order key's index ranges to walk for `req`: within the filter's own conditions on that
/// field when it has them, else every value, and whether they are the filter's own plan on
/// that field. `None` when reading the filter's plan on another field (or its known ids) is
/// cheaper, or the field cannot be walked.
fn walk_ranges(
    store: &ReadView<'_>,
    group: GroupId,
    req: &ScanRequest,
    meta: &IndexMeta,
    key: &SortKey,
    keep: usize,
) -> Result<Option<(Vec<KeyRange>, bool)>> {
    let prefix = field_prefix(group, &req.app, &req.class, &key.field);
    let whole = if ALWAYS_INDEXED.contains(&key.field.as_str()) {
        (prefix.clone(), keys::separated_end(&prefix))
    } else {
        scalar_range(&prefix)
    };
    // A plan's value ranges on the key, without markers (the walk reads those itself).
    let values = |r: Vec<KeyRange>| -> Vec<KeyRange> {
        r.into_iter()
            .map(|(s, e)| (s.max(whole.0.clone()), e.min(whole.1.clone())))
            .filter(|(s, e)| s < e)
            .collect()
    };
    let own = |filter: &Filter| match plan(group, &req.app, &req.class, filter, meta) {
        Some(Plan {
            field,
            candidates: Candidates::Ranges(r),
            ..
        }) if field == key.field => Some(values(r)),
        _ => None,
    };
    Ok(match plan(group, &req.app, &req.class, &req.filter, meta) {
        None => Some((vec![whole.clone()], false)),
        Some(Plan {
            candidates: Candidates::Ids(_),
            ..
        }) => None,
        Some(Plan {
            field,
            candidates: Candidates::Ranges(r),
            ..
        }) if field == key.field => Some((values(r), true)),
        Some(Plan {
            candidates: Candidates::Ranges(other),
            ..
        }) => {
            if plan_is_cheaper(store, meta, &other, keep)? {
                None
            } else {
                // Walk the order key, within its own conditions if the filter has some.
                let on_key: Vec<Filter> = conjuncts(&req.filter)
                    .into_iter()
                    .filter(|f| matches!(f, Filter::Field { path, .. } if *path == key.field))
                    .cloned()
                    .collect();
                Some((
                    own(&Filter::And(on_key)).unwrap_or_else(|| vec![whole.clone()]),
                    false,
                ))
            }
        }
    })
}

/// Objects read together (one RocksDB multi-get) while walking or reading candidates.
const FETCH_BATCH: usize = 64;

/// The best `keep` rows offered under an order, in bounded memory: the buffer is cut back
/// to the best `keep` whenever it doubles, and from the first cut on a row that does not
/// beat the worst kept one is turned away with one comparison.
struct Best<'o> {
    rows: Vec<Value>,
    keep: usize,
    order: &'o RowOrder,
    /// The worst row kept at the last cut.
    worst: Option<Value>,
}

impl<'o> Best<'o> {
    fn new(keep: usize, order: &'o RowOrder) -> Best<'o> {
        Best {
            rows: Vec::new(),
            keep,
            order,
            worst: None,
        }
    }

    fn offer(&mut self, row: Value) {
        if self.keep == 0
            || self
                .worst
                .as_ref()
                .is_some_and(|w| self.order.compare(&row, w).is_ge())
        {
            return;
        }
        self.rows.push(row);
        if self.rows.len() >= self.keep.saturating_mul(2).max(64) {
            self.rows.sort_by(|a, b| self.order.compare(a, b));
            self.rows.truncate(self.keep);
            self.worst = self.rows.last().cloned();
        }
    }

    fn len(&self) -> usize {
        self.rows.len()
    }

    fn into_rows(self) -> Vec<Value> {
        self.rows
    }
}

/// An ordered walk in progress: index entries offered in walk order, their objects read a
/// batch at a time, and the rows found so far.
struct OrderedWalk<'a, 'm, 'v, 'o> {
    store: &'a ReadView<'v>,
    group: GroupId,
    req: &'a ScanRequest,
    matcher: &'a Matcher<'m>,
    /// The walked field is `createdAt`/`updatedAt` (every object has exactly one entry).
    always: bool,
    keep: usize,
    rows: Best<'o>,
    /// Rows met through the walk (not the markers).
    walked: usize,
    /// The encoded value of the `keep`-th walked row's key: the walk ends past it.
    boundary: Option<Vec<u8>>,
    /// The encoded key of the worst row other shards already hold among the query's best
    /// `keep` (`scan_shards`): entries strictly past it cannot make the page.
    limit: Option<Vec<u8>>,
    descending: bool,
    /// Entries whose objects are not read yet: (objectId, encoded value).
    pending: Vec<(String, Vec<u8>)>,
}

impl OrderedWalk<'_, '_, '_, '_> {
    /// Takes the next entry of the walk; false once the walk is past its boundary.
    fn offer(&mut self, id: &str, value: &[u8]) -> Result<bool> {
        if self.boundary.as_deref().is_some_and(|b| b != value) {
            return Ok(false);
        }
        let past = |l: &[u8]| match self.descending {
            true => value < l,
            false => value > l,
        };
        if self.limit.as_deref().is_some_and(past) {
            return Ok(false);
        }
        self.pending.push((id.to_string(), value.to_vec()));
        let want = self.keep.saturating_sub(self.walked).clamp(4, FETCH_BATCH);
        if self.pending.len() >= want {
            return self.flush();
        }
        Ok(true)
    }

    /// Reads and checks the pending entries' objects, in walk order; false once past the
    /// boundary.
    fn flush(&mut self) -> Result<bool> {
        let pending = std::mem::take(&mut self.pending);
        let ids: Vec<&str> = pending.iter().map(|(id, _)| id.as_str()).collect();
        let (app, class) = (self.req.app.as_str(), self.req.class.as_str());
        let objects = self
            .matcher
            .fetch_all(self.store, self.group, app, class, &ids)?;
        let field = self.req.order.first().map_or("", |k| k.field.as_str());
        for ((_, value), obj) in pending.iter().zip(objects) {
            if self
                .boundary
                .as_deref()
                .is_some_and(|b| b != value.as_slice())
            {
                return Ok(false);
            }
            let Some(obj) = obj else { continue };
            // An array's elements are entries too; the array itself came with the markers.
            if !self.always && !single_scalar(lookup(&obj, field)) {
                continue;
            }
            self.rows.offer(obj);
            self.walked += 1;
            if self.walked == self.keep {
                self.boundary = Some(value.clone());
            }
        }
        Ok(true)
    }
}

/// Where a shard's ordered walk goes: the order key's index ranges in walk order.
struct WalkPlan {
    ranges: Vec<KeyRange>,
    /// The walked field is `createdAt`/`updatedAt` (every object has exactly one entry).
    always: bool,
    descending: bool,
    /// The prefix of the walked field's entries.
    prefix: Vec<u8>,
    /// The ranges are the filter's own plan on the key (`walk_ranges`).
    own_plan: bool,
}

/// The plan of an ordered walk of the first order key, when the shard can walk it (the
/// class's entries are complete, the key is always indexed or walkable) and the filter's own
/// plan is not cheaper.
fn walk_plan(
    store: &ReadView<'_>,
    group: GroupId,
    req: &ScanRequest,
    meta: &IndexMeta,
    keep: usize,
) -> Result<Option<WalkPlan>> {
    let Some(key) = req.order.first() else {
        return Ok(None);
    };
    let always = ALWAYS_INDEXED.contains(&key.field.as_str());
    let walkable = meta.walkable(&key.field, req.filter.needs_value(&key.field));
    if !meta.complete || !(always || walkable) {
        return Ok(None);
    }
    let Some((mut ranges, own_plan)) = walk_ranges(store, group, req, meta, key, keep)? else {
        return Ok(None);
    };
    // `$in` may name a value twice: walk each range once.
    ranges.sort();
    ranges.dedup();
    if key.descending {
        ranges.reverse();
    }
    Ok(Some(WalkPlan {
        ranges,
        always,
        descending: key.descending,
        prefix: field_prefix(group, &req.app, &req.class, &key.field),
        own_plan,
    }))
}

/// One index entry read ahead of a walk: the index of its range, its key, its flags.
type PeekedEntry = (usize, Vec<u8>, Option<u8>);

/// The first index entries of a walk, read before any object (`peek`), and where reading
/// goes on from.
struct Peeked {
    plan: WalkPlan,
    /// The entries read, in walk order.
    entries: Vec<PeekedEntry>,
    /// Where reading stopped, when it stopped at `max` entries: the range (and the last key read
    /// of it, if any) whose rest, and the ranges after it, the walk reads itself. `None` when
    /// every range was read to its end.
    resume: Option<(usize, Option<Vec<u8>>)>,
}

/// Reads up to `max` entries of `plan`'s ranges, in walk order.
fn peek(store: &ReadView<'_>, plan: WalkPlan, max: usize) -> Result<Peeked> {
    let mut entries: Vec<PeekedEntry> = Vec::new();
    let mut resume = None;
    for (i, (start, end)) in plan.ranges.iter().enumerate() {
        if entries.len() >= max {
            resume = Some((i, None));
            break;
        }
        let mut visit = |k: &[u8], flags: &[u8]| {
            entries.push((i, k.to_vec(), flags.first().copied()));
            Ok(entries.len() < max)
        };
        if plan.descending {
            store.scan_rev(CF_SM, start, end, &mut visit)?;
        } else {
            store.scan(CF_SM, start, end, &mut visit)?;
        }
        if entries.len() >= max {
            resume = Some((i, entries.last().map(|(_, k, _)| k.clone())));
            break;
        }
    }
    Ok(Peeked {
        plan,
        entries,
        resume,
    })
}

impl Peeked {
    /// The encoded order-key values of the peeked entries whose objects surely match the
    /// query and sort at that value: the filter says no more than "an entry in the walked
    /// ranges" (`covered`), the entry is no array element, imprecise number or marker, and the
    /// caller may read the object (`master`, or `public` readers and a public object).
    fn sure_values(
        &self,
        covered: bool,
        master: bool,
        public: bool,
    ) -> impl Iterator<Item = &[u8]> {
        let prefix = self.plan.prefix.len();
        self.entries
            .iter()
            .filter(move |_| covered)
            .filter_map(move |(_, k, flags)| {
                let id = entry_object_id(k)?;
                let value = k.get(prefix..k.len().saturating_sub(id.len() + 1))?;
                let f = (*flags)?;
                let sure = f & ELEMENT == 0
                    && (master || (public && f & PUBLIC != 0))
                    && !imprecise_entry(value)
                    && !is_array_marker(value);
                sure.then_some(value)
            })
    }
}

/// Where the ordered walks of several shards may stop, and what each read ahead.
struct WalkBound {
    bound: Option<Vec<u8>>,
    /// Per shard, in the order of the groups.
    peeks: Vec<Option<Peeked>>,
}

/// Shards' walks read at most this many entries each before any object (`walk_bound`).
const PEEK_MAX: usize = 1_000;

/// The encoded value of the first order key that the `keep`-th best row of `groups` together
/// reaches, from index entries alone: at least `keep` readable matches sort at it or better,
/// so each shard's walk may stop past it (most shards then read few objects, or none). Also
/// answers each shard's peeked entries, which its walk goes on from. No bound (and no
/// peeks) for one shard, a `keep` beyond `PEEK_MAX`, or an unordered query.
fn walk_bound(
    store: &ReadView<'_>,
    groups: &[GroupId],
    metas: &[IndexMeta],
    req: &ScanRequest,
    keep: usize,
) -> Result<WalkBound> {
    let mut peeks: Vec<Option<Peeked>> = groups.iter().map(|_| None).collect();
    let Some(key) = req.order.first() else {
        return Ok(WalkBound { bound: None, peeks });
    };
    if groups.len() < 2 || keep == 0 || keep > PEEK_MAX {
        return Ok(WalkBound { bound: None, peeks });
    }
    // Only when the walk's ranges come from the filter's own plan on the key do they say all
    // the filter says (a filter the planner cannot use, such as `$in` with a null, is walked
    // whole).
    let all = matches!(req.filter, Filter::All);
    let on_key = covered_by_index(&req.filter, &key.field);
    let master = req.principals.is_none();
    let public = req
        .principals
        .as_ref()
        .is_some_and(|ps| ps.iter().any(|p| p == PUBLIC_PRINCIPAL));
    // Each shard's first entries, about twice its share of `keep`: the bound is then close to
    // the `keep`-th best row, and few walks need more entries than were read ahead. Reading
    // `keep` entries of every shard instead gained nothing (bench/results/
    // 2026-11-24-walk-bound.md): stepping an iterator backwards costs about as much as the
    // object reads it saves.
    let each = (2 * keep)
        .div_ceil(groups.len())
        .saturating_add(1)
        .min(keep);
    for ((&group, meta), slot) in groups.iter().zip(metas).zip(peeks.iter_mut()) {
        if let Some(plan) = walk_plan(store, group, req, meta, keep)? {
            *slot = Some(peek(store, plan, each)?);
        }
    }
    let mut values: Vec<&[u8]> = Vec::new();
    for p in peeks.iter().flatten() {
        let covered = all || (on_key && p.plan.own_plan);
        values.extend(p.sure_values(covered, master, public));
    }
    if values.len() < keep {
        return Ok(WalkBound { bound: None, peeks });
    }
    // The `keep`-th best value.
    let nth = match key.descending {
        true => values.len() - keep,
        false => keep - 1,
    };
    let (_, bound, _) = values.select_nth_unstable(nth);
    Ok(WalkBound {
        bound: Some(bound.to_vec()),
        peeks,
    })
}

/// The first `keep` matches under `order`, walking the index of its first key in that key's
/// direction and stopping once `keep` rows are found and the key's value changes (rows tied
/// on it may still differ on later keys or objectId). A declared column's objects that hold
/// no single scalar (missing, null, arrays, objects) are not where the sort puts them in the
/// walk: they are read from the column's markers and all kept as candidates. The walk also
/// ends past `worst`, a row other shards hold that this shard's rows must beat, and past
/// `bound` (`walk_bound`); it goes on from `peeked` entries when given. `None` when the key
/// cannot be walked or the filter's own plan is cheaper.
#[allow(clippy::too_many_arguments)]
fn walk_in_order(
    store: &ReadView<'_>,
    group: GroupId,
    req: &ScanRequest,
    matcher: &Matcher<'_>,
    order: &RowOrder,
    keep: usize,
    worst: Option<&Value>,
    bound: Option<&[u8]>,
    peeked: Option<Peeked>,
) -> Result<Option<Vec<Value>>> {
    let Some(key) = req.order.first() else {
        return Ok(None);
    };
    let meta = &matcher.meta;
    let peeked = match peeked {
        Some(p) => p,
        None => match walk_plan(store, group, req, meta, keep)? {
            Some(plan) => Peeked {
                plan,
                entries: Vec::new(),
                resume: Some((0, None)),
            },
            None => return Ok(None),
        },
    };
    let Peeked {
        plan,
        entries,
        resume,
    } = peeked;
    metrics::counter!("basalt_query_ordered_walks_total").increment(1);
    let (app, class) = (req.app.as_str(), req.class.as_str());
    let prefix = plan.prefix.as_slice();
    // The walk stops at the tighter of the two.
    let worst = worst
        .and_then(|w| lookup(w, &key.field))
        .filter(|v| single_scalar(Some(v)))
        .and_then(encode);
    let limit = match (worst, bound) {
        (Some(w), Some(b)) => Some(match key.descending {
            true => w.max(b.to_vec()),
            false => w.min(b.to_vec()),
        }),
        (w, b) => w.or_else(|| b.map(<[u8]>::to_vec)),
    };
    let mut walk = OrderedWalk {
        store,
        group,
        req,
        matcher,
        always: plan.always,
        keep,
        rows: Best::new(keep, order),
        walked: 0,
        boundary: None,
        limit,
        descending: key.descending,
        pending: Vec::new(),
    };
    // Objects without one scalar come from the column's markers (none to read when the
    // shard counted none).
    if !plan.always && meta.may_have_markers(&key.field) {
        let (start, end) = irregular_range(prefix);
        let mut ids: Vec<String> = Vec::new();
        store.scan(CF_SM, &start, &end, |k, _| {
            ids.extend(entry_object_id(k).map(str::to_string));
            Ok(true)
        })?;
        for chunk in ids.chunks(FETCH_BATCH) {
            let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
            for obj in matcher
                .fetch_all(store, group, app, class, &chunk)?
                .into_iter()
                .flatten()
            {
                walk.rows.offer(obj);
            }
        }
    }
    let step = |walk: &mut OrderedWalk<'_, '_, '_, '_>, k: &[u8]| -> Result<bool> {
        let Some(id) = entry_object_id(k) else {
            return Ok(true);
        };
        match k.get(prefix.len()..k.len().saturating_sub(id.len() + 1)) {
            Some(value) => walk.offer(id, value),
            None => Ok(true),
        }
    };
    let mut entries = entries.into_iter().peekable();
    for (i, (start, end)) in plan.ranges.iter().enumerate() {
        // The entries of this range read ahead (an earlier range's left when its walk
        // stopped), then the rest of it.
        while entries.next_if(|(r, _, _)| *r < i).is_some() {}
        let mut going = true;
        while let Some((_, k, _)) = entries.next_if(|(r, _, _)| *r == i) {
            if !step(&mut walk, &k)? {
                going = false;
                break;
            }
        }
        let rest: Option<KeyRange> = match &resume {
            _ if !going => None,
            None => None,
            Some((r, _)) if i < *r => None,
            Some((r, Some(last))) if i == *r => Some(match key.descending {
                true => (start.clone(), last.clone()),
                false => {
                    let mut after = last.clone();
                    after.push(0);
                    (after, end.clone())
                }
            }),
            Some(_) => Some((start.clone(), end.clone())),
        };
        if let Some((start, end)) = rest {
            let mut visit = |k: &[u8], _: &[u8]| step(&mut walk, k);
            if key.descending {
                store.scan_rev(CF_SM, &start, &end, &mut visit)?;
            } else {
                store.scan(CF_SM, &start, &end, &mut visit)?;
            }
        }
        if !walk.flush()? || walk.boundary.is_some() {
            break;
        }
    }
    Ok(Some(walk.rows.into_rows()))
}

/// The first `keep` matches in the query's order, without counting every match: an ordered
/// walk when it applies, else every match in objectId order, stopping after `keep` when that
/// is the query's order (or once past `worst`, which other shards' rows already beat).
#[allow(clippy::too_many_arguments)]
fn first_rows(
    store: &ReadView<'_>,
    group: GroupId,
    req: &ScanRequest,
    matcher: &Matcher<'_>,
    order: &RowOrder,
    keep: usize,
    worst: Option<&Value>,
    bound: Option<&[u8]>,
    peeked: Option<Peeked>,
) -> Result<Vec<Value>> {
    if let Some(rows) = walk_in_order(
        store, group, req, matcher, order, keep, worst, bound, peeked,
    )? {
        return Ok(rows);
    }
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

/// The index metadata of a class on each of `groups` (the default, incomplete one where a
/// shard has none), read together in one multi-get.
fn class_metas(
    store: &ReadView<'_>,
    groups: &[GroupId],
    app: &str,
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
        &req.filter,
        req.principals.as_deref(),
        &order_fields,
        groups,
        cancel,
    )?;
    let metas = class_metas(&view, groups, &req.app, &req.class)?;
    let WalkBound { bound, peeks } = walk_bound(&view, groups, &metas, req, keep)?;
    for ((&group, meta), peeked) in groups.iter().zip(metas).zip(peeks) {
        matcher.meta = meta;
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
            let rows = match keep {
                0 => Vec::new(),
                _ => first_rows(
                    store, group, req, matcher, order, keep, worst, bound, peeked,
                )?,
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
        &req.filter,
        req.principals.as_deref(),
        &read,
        groups,
        cancel,
    )?;
    let metas = class_metas(store, groups, &req.app, &req.class)?;
    for (&group, meta) in groups.iter().zip(metas) {
        matcher.meta = meta;
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

/// The column whose index entries may count an aggregation's groups on a shard
/// (`count_groups`): the one column it groups by, when it has no metric to read and no
/// filter, the column is a client one (times group by day) and a walk of its entries and
/// markers meets every object, in entries that say when their value does not read back as it
/// is (`FORMAT_TYPED`).
fn indexed_group_column<'r>(req: &'r AggregateRequest, meta: &IndexMeta) -> Option<&'r str> {
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
fn count_groups(
    store: &ReadView<'_>,
    group: GroupId,
    req: &AggregateRequest,
    matcher: &Matcher<'_>,
    field: &str,
    folder: &mut Folder,
) -> Result<bool> {
    let meta = &matcher.meta;
    let most_read = meta.counts.objects / 4;
    let private = match matcher.principals {
        Some(_) => meta.counts.objects.saturating_sub(meta.counts.public),
        None => 0,
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
                f & TYPED == 0 && (f & PUBLIC != 0 || matcher.principals.is_none())
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
