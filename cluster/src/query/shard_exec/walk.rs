//! Ordered reads that stop early: a shard walks the index of the query's first order key in
//! its direction and stops once it holds `skip + limit` rows and the key's value changes
//! (`walk_in_order`), unless the filter's own plan is cheaper (`walk_ranges`); shards read
//! together first peek at a few entries each and stop past the `skip + limit`-th best of those
//! sure to match (`walk_bound`). Used by `shard_exec`'s shard loops (`mod`).

use serde_json::Value;

use super::best::Best;
use super::count::{conjuncts, covered_by_index};
use super::matcher::{Matcher, FETCH_BATCH};
use crate::acl::PUBLIC_PRINCIPAL;
use crate::error::Result;
use crate::ids::GroupId;
use crate::query::eval::lookup;
use crate::query::filter::Filter;
use crate::query::index::{
    encode, entry_object_id, field_prefix, imprecise_entry, irregular_range, is_array_marker,
    scalar_range, single_scalar, IndexMeta, KeyRange, ALWAYS_INDEXED, ELEMENT, PUBLIC,
};
use crate::query::order::RowOrder;
use crate::query::plan::{plan, Candidates, Plan};
use crate::query::{ScanRequest, SortKey};
use crate::storage::keys::{self, CF_SM};
use crate::storage::store::ReadView;

/// One shard's read of a query: the store's snapshot, the shard, the query, its matcher (set
/// to the shard's index state) and its order.
pub(super) struct ShardRead<'a, 'v, 'm> {
    pub(super) store: &'a ReadView<'v>,
    pub(super) group: GroupId,
    pub(super) req: &'a ScanRequest,
    pub(super) matcher: &'a Matcher<'m>,
    pub(super) order: &'a RowOrder,
}

/// Where a shard's ordered read may stop: once it holds its best `keep` rows, and past
/// `worst` (a row other shards hold that its rows must beat) or `bound` (`walk_bound`).
#[derive(Clone, Copy)]
pub(super) struct Stop<'a> {
    pub(super) keep: usize,
    pub(super) worst: Option<&'a Value>,
    pub(super) bound: Option<&'a [u8]>,
}

/// Whether reading a plan's candidates (`ranges`) is cheaper than walking the order key's
/// index for `keep` rows: with `c` candidates among `n` objects a walk reads about
/// `keep * n / c` objects, so the plan wins while `c * c < keep * n`. Counts entries only up
/// to that point.
pub(super) fn plan_is_cheaper(
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
pub(super) fn walk_ranges(
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

/// An ordered walk in progress: index entries offered in walk order, their objects read a
/// batch at a time, and the rows found so far.
pub(super) struct OrderedWalk<'a, 'm, 'v, 'o> {
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
        let (app, class) = (&self.req.app, self.req.class.as_str());
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
pub(super) struct WalkPlan {
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
pub(super) fn walk_plan(
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
pub(super) type PeekedEntry = (usize, Vec<u8>, Option<u8>);

/// The first index entries of a walk, read before any object (`peek`), and where reading
/// goes on from.
pub(super) struct Peeked {
    plan: WalkPlan,
    /// The entries read, in walk order.
    entries: Vec<PeekedEntry>,
    /// Where reading stopped, when it stopped at `max` entries: the range (and the last key read
    /// of it, if any) whose rest, and the ranges after it, the walk reads itself. `None` when
    /// every range was read to its end.
    resume: Option<(usize, Option<Vec<u8>>)>,
}

/// Reads up to `max` entries of `plan`'s ranges, in walk order.
pub(super) fn peek(store: &ReadView<'_>, plan: WalkPlan, max: usize) -> Result<Peeked> {
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
pub(super) struct WalkBound {
    pub(super) bound: Option<Vec<u8>>,
    /// Per shard, in the order of the groups.
    pub(super) peeks: Vec<Option<Peeked>>,
}

/// Shards' walks read at most this many entries each before any object (`walk_bound`).
pub(super) const PEEK_MAX: usize = 1_000;

/// The encoded value of the first order key that the `keep`-th best row of `groups` together
/// reaches, from index entries alone: at least `keep` readable matches sort at it or better,
/// so each shard's walk may stop past it (most shards then read few objects, or none). Also
/// answers each shard's peeked entries, which its walk goes on from. No bound (and no
/// peeks) for one shard, a `keep` beyond `PEEK_MAX`, or an unordered query.
pub(super) fn walk_bound(
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
    let master = req.principals.is_master();
    let public = req.principals.holds(PUBLIC_PRINCIPAL);
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
pub(super) fn walk_in_order(
    read: &ShardRead<'_, '_, '_>,
    stop: Stop<'_>,
    peeked: Option<Peeked>,
) -> Result<Option<Vec<Value>>> {
    let ShardRead {
        store,
        group,
        req,
        matcher,
        order,
    } = *read;
    let Stop { keep, worst, bound } = stop;
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
    let (app, class) = (&req.app, req.class.as_str());
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
