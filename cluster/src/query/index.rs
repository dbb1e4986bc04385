//! Secondary indexes of a shard: their key encoding, the entries an object has, and the
//! planner that turns a filter into index ranges.
//!
//! Entries are keys `group · x · app 0 class 0 field 0 · value · objectId · len(objectId)` with
//! an empty value, written in the same batch as the object (`statemachine::index_upkeep`).
//! Every object has entries for `createdAt` and `updatedAt` (to the millisecond, as queries
//! compare them), for each GeoPoint-valued field (its latitude), and for the fields the class
//! declares indexed on the shard (`IndexMeta::declared`), one per element for arrays. Values
//! encode so that byte order is query order: numbers (`0x10`, ordered f64), strings, Dates and
//! Pointers as their comparable string (`0x20`, 0-escaped, `00 00`-terminated), booleans
//! (`0x08`), latitudes (`0x30`).
//!
//! The planner (`plan`) picks one condition of the filter's top-level conjunction: known
//! objectIds (`objectId` equality or `$in`, a resolved `$relatedTo`) become point reads;
//! otherwise an indexed equality or `$in`, then a range, then geo yields key ranges whose
//! objects are a superset of the matches. The shard re-checks the whole filter on each
//! candidate, so a plan only ever narrows the scan. A class whose shard has objects from before indexes
//! existed is not `complete` and is scanned until its indexes are rebuilt (`DeclareIndex`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::filter::{comparable, Cond, Filter, GeoPoint};
use crate::ids::GroupId;
use crate::object::StoredObject;
use crate::storage::keys::{self, SM_INDEX};

/// Fields every object is indexed on.
pub const ALWAYS_INDEXED: [&str; 2] = ["createdAt", "updatedAt"];

const TAG_BOOL: u8 = 0x08;
const TAG_NUMBER: u8 = 0x10;
const TAG_STRING: u8 = 0x20;
const TAG_GEO: u8 = 0x30;

/// What a shard knows about a class's indexes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IndexMeta {
    /// Every object of the class on the shard has its entries (false when objects predate
    /// indexes and no rebuild ran yet).
    pub complete: bool,
    /// Fields the app declared indexed, beyond the automatic ones.
    pub declared: Vec<String>,
}

pub fn meta_key(app: &str, class: &str) -> String {
    format!("{app}/{class}")
}

/// The prefix of one field's entries.
pub fn field_prefix(group: GroupId, app: &str, class: &str, field: &str) -> Vec<u8> {
    let mut k = keys::sm_family(group, SM_INDEX);
    for part in [app, class, field] {
        k.extend_from_slice(part.as_bytes());
        k.push(0);
    }
    k
}

/// The prefix of every entry of a class.
pub fn class_index_prefix(group: GroupId, app: &str, class: &str) -> Vec<u8> {
    let mut k = keys::sm_family(group, SM_INDEX);
    for part in [app, class] {
        k.extend_from_slice(part.as_bytes());
        k.push(0);
    }
    k
}

fn ordered_f64(f: f64) -> [u8; 8] {
    let f = if f == 0.0 { 0.0 } else { f };
    let bits = f.to_bits();
    let bits = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    bits.to_be_bytes()
}

fn push_string(out: &mut Vec<u8>, s: &str) {
    for b in s.bytes() {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// The encoded form of a scalar (after `comparable`), or none for values no index
/// holds (null, objects, arrays).
pub fn encode(v: &Value) -> Option<Vec<u8>> {
    let v = comparable(v);
    let mut out = Vec::new();
    match &v {
        Value::Bool(b) => out.extend_from_slice(&[TAG_BOOL, u8::from(*b)]),
        Value::Number(n) => {
            out.push(TAG_NUMBER);
            out.extend_from_slice(&ordered_f64(n.as_f64()?));
        }
        Value::String(s) => {
            out.push(TAG_STRING);
            push_string(&mut out, s);
        }
        _ => return None,
    }
    Some(out)
}

fn encode_latitude(lat: f64) -> Vec<u8> {
    let mut out = vec![TAG_GEO];
    out.extend_from_slice(&ordered_f64(lat));
    out
}

/// The entry key of `object_id` with encoded `value` under `prefix`.
fn entry(prefix: &[u8], value: &[u8], object_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + value.len() + object_id.len() + 1);
    k.extend_from_slice(prefix);
    k.extend_from_slice(value);
    k.extend_from_slice(object_id.as_bytes());
    k.push(object_id.len().min(255) as u8);
    k
}

/// The objectId at the end of an entry key.
pub fn entry_object_id(key: &[u8]) -> Option<&str> {
    let (&n, rest) = key.split_last()?;
    let start = rest.len().checked_sub(n as usize)?;
    std::str::from_utf8(&rest[start..]).ok()
}

/// Every entry of one object: its timestamps as queries see them, and its client-visible
/// fields (internal `_` fields never).
pub fn entries(
    group: GroupId,
    app: &str,
    class: &str,
    object_id: &str,
    obj: &StoredObject,
    declared: &[String],
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let times: Vec<(String, Value)> = obj
        .query_times()
        .into_iter()
        .map(|(k, t)| (k.to_string(), Value::String(t)))
        .collect();
    let fields = obj
        .fields
        .iter()
        .filter(|(k, _)| !k.starts_with('_'))
        .chain(times.iter().map(|(k, v)| (k, v)));
    for (name, v) in fields {
        let prefix = || field_prefix(group, app, class, name);
        if let Some(p) = GeoPoint::from_value(v) {
            out.push(entry(&prefix(), &encode_latitude(p.latitude), object_id));
            continue;
        }
        if !(ALWAYS_INDEXED.contains(&name.as_str()) || declared.contains(name)) {
            continue;
        }
        let values: Vec<&Value> = match v {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        let prefix = prefix();
        for item in values {
            if let Some(enc) = encode(item) {
                out.push(entry(&prefix, &enc, object_id));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The first key after every key that starts with `k`.
fn after_prefix(k: &[u8]) -> Vec<u8> {
    let mut out = k.to_vec();
    while let Some(last) = out.pop() {
        if last < 0xff {
            out.push(last + 1);
            return out;
        }
    }
    vec![0xff; k.len() + 1]
}

/// Where a shard finds a superset of the objects a filter can match.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The field the plan narrows on (`objectId` for point reads).
    pub field: String,
    pub candidates: Candidates,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Candidates {
    /// Index key ranges `[start, end)`: their entries name the candidates.
    Ranges(Vec<(Vec<u8>, Vec<u8>)>),
    /// The candidates' objectIds (`objectId` equality or `$in`, `$relatedTo`): point reads,
    /// which need no index.
    Ids(Vec<String>),
}

impl Plan {
    fn ranges(field: &str, ranges: Vec<(Vec<u8>, Vec<u8>)>) -> Plan {
        Plan {
            field: field.to_string(),
            candidates: Candidates::Ranges(ranges),
        }
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
fn range_of(prefix: &[u8], conds: &[&Cond]) -> Option<(Vec<u8>, Vec<u8>)> {
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
        });
    }
    if !meta.complete {
        return None;
    }
    let indexed = |f: &str| ALWAYS_INDEXED.contains(&f) || meta.declared.iter().any(|d| d == f);
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
            return Some(Plan::ranges(field, ranges));
        }
    }
    // Ranges, all bounds on one field together.
    for (field, _) in &fields {
        if !indexed(field) {
            continue;
        }
        let conds: Vec<&Cond> = fields
            .iter()
            .filter(|(f, _)| f == field)
            .map(|(_, c)| *c)
            .collect();
        let prefix = field_prefix(group, app, class, field);
        if let Some(r) = range_of(&prefix, &conds) {
            return Some(Plan::ranges(field, vec![r]));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::GroupId;
    use serde_json::json;

    #[test]
    fn encodings_sort_like_values() {
        let nums = [-1e300, -3.5, -1.0, 0.0, 0.25, 1.0, 2.0, 1e300];
        let enc: Vec<_> = nums.iter().map(|n| encode(&json!(n)).unwrap()).collect();
        assert!(enc.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(encode(&json!(-0.0)), encode(&json!(0)));
        let strs = ["", "a", "a\u{0}", "a\u{0}b", "ab", "b"];
        let enc: Vec<_> = strs.iter().map(|s| encode(&json!(s)).unwrap()).collect();
        assert!(enc.windows(2).all(|w| w[0] < w[1]), "{enc:?}");
        assert_eq!(
            encode(&json!({"__type": "Date", "iso": "2026-01-01 00:00:00"})),
            encode(&json!("2026-01-01 00:00:00"))
        );
        assert_eq!(encode(&json!(null)), None);
        assert_eq!(encode(&json!({"a": 1})), None);
    }

    #[test]
    fn entries_name_their_object() {
        let mut obj = StoredObject::new(1_767_225_600_000);
        let fields = json!({"tags": ["x", "y"], "n": 3, "_secret": "s",
                            "loc": {"__type": "GeoPoint", "latitude": 1.0, "longitude": 2.0}});
        obj.fields = fields.as_object().unwrap().clone();
        let e = entries(
            GroupId::new(1),
            "a",
            "C",
            "obj1",
            &obj,
            &["tags".into(), "_secret".into()],
        );
        // createdAt, updatedAt, two tags, the GeoPoint; n is not declared, _secret internal.
        assert_eq!(e.len(), 5);
        assert!(e.iter().all(|k| entry_object_id(k) == Some("obj1")));
        assert!(e
            .iter()
            .all(|k| k.starts_with(&class_index_prefix(GroupId::new(1), "a", "C"))));
    }

    #[test]
    fn plans_prefer_equality_then_ranges_then_geo() {
        let all = IndexMeta {
            complete: true,
            declared: vec!["n".into(), "tag".into()],
        };
        let all = &all;
        let f = |w: Value| Filter::parse(w.as_object().unwrap()).unwrap();
        let p = plan(
            GroupId::new(1),
            "a",
            "C",
            &f(json!({"n": {"$gt": 1}, "tag": {"$in": ["x", "y"]}})),
            all,
        )
        .unwrap();
        assert_eq!(p.field, "tag");
        assert!(matches!(&p.candidates, Candidates::Ranges(r) if r.len() == 2));
        let p = plan(
            GroupId::new(1),
            "a",
            "C",
            &f(json!({"n": {"$gt": 1, "$lte": 5}})),
            all,
        )
        .unwrap();
        let key = |n: i64| {
            entry(
                &field_prefix(GroupId::new(1), "a", "C", "n"),
                &encode(&json!(n)).unwrap(),
                "id",
            )
        };
        let Candidates::Ranges(ranges) = &p.candidates else {
            panic!("a range plan: {p:?}")
        };
        let (s, e) = &ranges[0];
        let inside = |n: i64| key(n) >= *s && key(n) < *e;
        assert!(!inside(1) && inside(2) && inside(5) && !inside(6));
        let near = json!({"loc": {"$nearSphere": {"__type": "GeoPoint", "latitude": 10.0, "longitude": 0.0}}});
        assert_eq!(
            plan(GroupId::new(1), "a", "C", &f(near.clone()), all)
                .unwrap()
                .field,
            "loc"
        );
        assert_eq!(
            plan(GroupId::new(1), "a", "C", &f(near), &IndexMeta::default()),
            None
        );
        assert_eq!(
            plan(GroupId::new(1), "a", "C", &f(json!({"a.b": 1})), all),
            None
        );
        let undeclared = IndexMeta {
            complete: true,
            declared: vec![],
        };
        assert_eq!(
            plan(GroupId::new(1), "a", "C", &f(json!({"n": 1})), &undeclared),
            None
        );
        assert_eq!(
            plan(GroupId::new(1), "a", "C", &f(json!({"createdAt": {"$gte": {"__type": "Date", "iso": "2026-01-01T00:00:00Z"}}})), &undeclared).unwrap().field,
            "createdAt"
        );
        // Known objectIds win over every index, and need none (even an incomplete class).
        let by_id = plan(
            GroupId::new(1),
            "a",
            "C",
            &f(json!({"n": 1, "objectId": {"$in": ["b", "a", "b", 7]}})),
            &IndexMeta::default(),
        )
        .unwrap();
        assert_eq!(
            by_id.candidates,
            Candidates::Ids(vec!["a".into(), "b".into()])
        );
        let related = Filter::And(vec![f(json!({"n": 1})), Filter::IdIn(vec!["z".into()])]);
        assert_eq!(
            plan(GroupId::new(1), "a", "C", &related, all)
                .unwrap()
                .candidates,
            Candidates::Ids(vec!["z".into()])
        );
    }
}
