//! The index planner: picks one condition of a filter's top-level conjunction and turns it
//! into where a shard finds a superset of its matches (`Plan`) — known objectIds (`objectId`
//! equality or `$in`, a resolved `$relatedTo`) as point reads; otherwise an indexed equality or
//! `$in`, then a range, then geo as key ranges of `query::index`'s entries. The shard re-checks
//! the whole filter on each candidate (`query::shard_exec`), so a plan only ever narrows the
//! scan; a class whose entries are incomplete gets none.

use serde_json::Value;

use super::filter::{Cond, Filter};
use super::index::{
    after_prefix, array_markers, encode, encode_latitude, field_prefix, imprecise, IndexMeta,
    KeyRange, ALWAYS_INDEXED, FORMAT,
};
use crate::ids::GroupId;

/// Where a shard finds a superset of the objects a filter can match.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The field the plan narrows on (`objectId` for point reads).
    pub field: String,
    pub candidates: Candidates,
    /// The ranges end with the field's array markers: its array-valued objects are candidates
    /// from there, not from their elements (bounds that different elements may meet).
    pub arrays_from_markers: bool,
    /// Each range holds the entries of one value (equality, `$in`), whose keys end with the
    /// objectId: a range may start at an objectId (`with_id_floor`).
    pub single_values: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Candidates {
    /// Index key ranges `[start, end)`: their entries name the candidates.
    Ranges(Vec<KeyRange>),
    /// The candidates' objectIds (`objectId` equality or `$in`, `$relatedTo`): point reads,
    /// which need no index.
    Ids(Vec<String>),
}

impl Plan {
    fn ranges(field: &str, ranges: Vec<KeyRange>) -> Plan {
        Plan {
            field: field.to_string(),
            candidates: Candidates::Ranges(ranges),
            arrays_from_markers: false,
            single_values: false,
        }
    }

    /// Narrows single-value ranges to the entries of objectIds at or above `floor` (a query
    /// bounding the objectId from below); other plans are left as they are.
    pub fn with_id_floor(mut self, floor: Option<&str>) -> Plan {
        if let (true, Some(floor), Candidates::Ranges(ranges)) =
            (self.single_values, floor, &mut self.candidates)
        {
            for (start, _) in ranges.iter_mut() {
                start.extend_from_slice(floor.as_bytes());
            }
        }
        self
    }
}

/// The objectIds a conjunct restricts the query to, if it does.
fn id_candidates(f: &Filter) -> Option<Vec<String>> {
    match f {
        Filter::IdIn(ids) => Some(ids.clone()),
        Filter::Field { path, cond } if path == "objectId" => {
            let values: Vec<&Value> = match cond {
                Cond::Eq(v) => vec![v],
                Cond::In(vs) => vs.iter().collect(),
                _ => return None,
            };
            // A non-string value matches no objectId: no candidates.
            Some(
                values
                    .into_iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
            )
        }
        _ => None,
    }
}

/// Bounds on one field from its range conditions: `(start, end)` within one type tag.
fn range_of(prefix: &[u8], conds: &[&Cond]) -> Option<KeyRange> {
    let mut tag: Option<u8> = None;
    let mut start: Option<Vec<u8>> = None;
    let mut end: Option<Vec<u8>> = None;
    for c in conds {
        let (bound, lower, inclusive) = match c {
            Cond::Gt(b) => (b, true, false),
            Cond::Gte(b) => (b, true, true),
            Cond::Lt(b) => (b, false, false),
            Cond::Lte(b) => (b, false, true),
            _ => continue,
        };
        let enc = encode(bound)?;
        // Integers beyond 2^53 share their f64 with neighbours: keep every neighbour.
        let inclusive = inclusive || imprecise(bound);
        if matches!(tag, Some(t) if t != enc[0]) {
            // Bounds of different kinds match nothing together; let the scan decide.
            return None;
        }
        tag = Some(enc[0]);
        let mut key = prefix.to_vec();
        key.extend_from_slice(&enc);
        if lower {
            let s = if inclusive { key } else { after_prefix(&key) };
            if start.as_ref().is_none_or(|cur| s > *cur) {
                start = Some(s);
            }
        } else {
            let e = if inclusive { after_prefix(&key) } else { key };
            if end.as_ref().is_none_or(|cur| e < *cur) {
                end = Some(e);
            }
        }
    }
    let tag = tag?;
    let mut tag_start = prefix.to_vec();
    tag_start.push(tag);
    let tag_end = after_prefix(&tag_start);
    Some((start.unwrap_or(tag_start), end.unwrap_or(tag_end)))
}

/// The best index plan for `filter` on a shard whose class has `meta`; none when the filter
/// has no usable condition or the class's entries are incomplete.
pub fn plan(
    group: GroupId,
    app: &str,
    class: &str,
    filter: &Filter,
    meta: &IndexMeta,
) -> Option<Plan> {
    let conjuncts: Vec<&Filter> = match filter {
        Filter::And(fs) => fs.iter().collect(),
        other => vec![other],
    };
    // Known objectIds: the smallest such set, read by key.
    if let Some(mut ids) = conjuncts
        .iter()
        .filter_map(|f| id_candidates(f))
        .min_by_key(Vec::len)
    {
        ids.sort_unstable();
        ids.dedup();
        return Some(Plan {
            field: "objectId".into(),
            candidates: Candidates::Ids(ids),
            arrays_from_markers: false,
            single_values: false,
        });
    }
    if !meta.complete {
        return None;
    }
    let indexed = |f: &str| meta.indexes(f);
    let fields: Vec<(&str, &Cond)> = conjuncts
        .iter()
        .filter_map(|f| match f {
            Filter::Field { path, cond } if !path.contains('.') => Some((path.as_str(), cond)),
            _ => None,
        })
        .collect();
    // Equality and $in: point ranges.
    for (field, cond) in &fields {
        let values: Vec<&Value> = match cond {
            Cond::Eq(v) => vec![v],
            Cond::In(vs) => vs.iter().collect(),
            _ => continue,
        };
        if !indexed(field) || values.is_empty() {
            continue;
        }
        let prefix = field_prefix(group, app, class, field);
        let ranges: Option<Vec<_>> = values
            .iter()
            .map(|v| {
                encode(v).map(|enc| {
                    let mut k = prefix.clone();
                    k.extend_from_slice(&enc);
                    let end = after_prefix(&k);
                    (k, end)
                })
            })
            .collect();
        if let Some(ranges) = ranges {
            let mut plan = Plan::ranges(field, ranges);
            plan.single_values = true;
            return Some(plan);
        }
    }
    // Ranges, all bounds on one field together. An array meets each bound when any element
    // does, not necessarily the same one: a declared column's arrays come from its markers
    // (classes indexed before markers existed use one bound alone).
    for (field, _) in &fields {
        if !indexed(field) {
            continue;
        }
        let mut conds: Vec<&Cond> = fields
            .iter()
            .filter(|(f, _)| f == field)
            .map(|(_, c)| *c)
            .filter(|c| matches!(c, Cond::Gt(_) | Cond::Gte(_) | Cond::Lt(_) | Cond::Lte(_)))
            .collect();
        // A column counted without markers holds no arrays.
        let may_hold_arrays =
            !ALWAYS_INDEXED.contains(field) && conds.len() > 1 && meta.may_have_markers(field);
        let markers = may_hold_arrays && meta.format >= FORMAT;
        if may_hold_arrays && !markers {
            conds.truncate(1);
        }
        let prefix = field_prefix(group, app, class, field);
        if let Some(r) = range_of(&prefix, &conds) {
            let mut plan = Plan::ranges(field, vec![r]);
            if markers {
                if let Candidates::Ranges(r) = &mut plan.candidates {
                    r.push(array_markers(&prefix));
                }
                plan.arrays_from_markers = true;
            }
            return Some(plan);
        }
    }
    // Geo: a latitude band (GeoPoint fields are always indexed).
    for (field, cond) in &fields {
        let (lo, hi) = match cond {
            Cond::Near { point, max_radians } => {
                let d = max_radians.to_degrees();
                (point.latitude - d, point.latitude + d)
            }
            Cond::WithinBox { sw, ne } => (sw.latitude, ne.latitude),
            _ => continue,
        };
        let prefix = field_prefix(group, app, class, field);
        let mut start = prefix.clone();
        start.extend_from_slice(&encode_latitude(lo.max(-90.0)));
        let mut end = prefix;
        end.extend_from_slice(&encode_latitude(hi.min(90.0)));
        return Some(Plan::ranges(field, vec![(start, after_prefix(&end))]));
    }
    None
}
