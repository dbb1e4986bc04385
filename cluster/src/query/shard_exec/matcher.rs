//! Checks a shard's stored objects against one query (`Matcher`: the prepared filter, the
//! caller's principals, the class's index state, the few fields the query reads), visits the
//! matches in objectId order — from the filter's index plan when there is one, else a scan of
//! the class (`for_each_match`) — and renders the rows a read answers with (`answer_rows`).
//! Used by the rest of `shard_exec`: `count`, `walk` and the shard loops of `mod`.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::acl::{allows, Access, Principals};
use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::names::AppId;
use crate::object::StoredObject;
use crate::query::filter::{Cond, Filter, Prepared};
use crate::query::index::{entry_object_id, IndexMeta};
use crate::query::plan::{plan, Candidates, Plan};
use crate::slots::Excluded;
use crate::storage::keys::{self, CF_SM};
use crate::storage::store::ReadView;

/// What a shard needs to check one stored object against a query: the filter (prepared), the
/// caller's principals, the class's index state, the slots a split leaves out, and the fields
/// the query reads.
pub(super) struct Matcher<'a> {
    pub(super) filter: Prepared<'a>,
    /// Trips when nobody waits for the answer any more: every check stops the read.
    pub(super) cancel: &'a Cancel,
    pub(super) principals: &'a Principals,
    pub(super) meta: IndexMeta,
    /// The slots of the shard being read that the read leaves out (`split_exclusion`), set
    /// per shard like `meta`.
    pub(super) excluded: Option<Excluded>,
    /// The class read, to find an object's slot.
    app: &'a str,
    class: &'a str,
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
pub(super) fn read_fields(filter: &Filter, principals: bool, extra: &[&str]) -> Vec<String> {
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
    pub(super) fn new(
        (app, class): (&'a str, &'a str),
        filter: &'a Filter,
        principals: &'a Principals,
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
        let fields = read_fields(filter, !principals.is_master(), extra);
        let times = fields.iter().any(|f| f == "createdAt" || f == "updatedAt");
        Ok(Matcher {
            filter: prepared,
            cancel,
            principals,
            meta: IndexMeta::default(),
            excluded: None,
            app,
            class,
            fields,
            times,
            groups,
            cache_scans: std::cell::OnceCell::new(),
        })
    }

    /// Whether the caller may read every object anyone may (it holds `*`, as every caller but
    /// the master key does, or it is the master key): public entries then count for it.
    pub(super) fn reads_public(&self) -> bool {
        self.principals.reads_public()
    }

    /// Whether scans of the class on this node's shards keep their blocks cached (the same
    /// answer for every shard of the query).
    fn cache_scans(&self, store: &ReadView<'_>, app: &AppId, class: &str) -> Result<bool> {
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
    pub(super) fn fetch(
        &self,
        store: &ReadView<'_>,
        group: GroupId,
        app: &AppId,
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
    pub(super) fn fetch_all(
        &self,
        store: &ReadView<'_>,
        group: GroupId,
        app: &AppId,
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
        if let Some(excluded) = &self.excluded {
            if excluded.holds(self.app, self.class, object_id) {
                return Ok(None);
            }
        }
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
pub(super) fn read_objects(
    store: &ReadView<'_>,
    group: GroupId,
    app: &AppId,
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
pub(super) fn answer_rows(
    store: &ReadView<'_>,
    app: &AppId,
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
pub(super) fn for_each_match(
    store: &ReadView<'_>,
    group: GroupId,
    app: &AppId,
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
pub(super) fn id_floor(filter: &Filter) -> Option<&str> {
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
pub(super) fn visit_planned(
    store: &ReadView<'_>,
    group: GroupId,
    app: &AppId,
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

/// Objects read together (one RocksDB multi-get) while walking or reading candidates.
pub(super) const FETCH_BATCH: usize = 64;
