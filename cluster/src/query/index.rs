//! Secondary indexes of a shard: their key encoding, the entries an object has, and the
//! planner that turns a filter into index ranges.
//!
//! Entries are keys `group · x · app 0 class 0 field 0 · value · objectId · len(objectId)`,
//! written in the same batch as the object (`statemachine::index_upkeep`); the entry's value is
//! one byte of flags (`PUBLIC`: anyone may read the object; `ELEMENT`: the entry is one element
//! of an array, so the object may have several; `TYPED`: the value is not the JSON its encoding
//! reads back as, see `scalar_value`), empty in entries written before flags existed.
//! Every object has entries for `createdAt` and `updatedAt` (to the millisecond, as queries
//! compare them), for each GeoPoint-valued field (its latitude), for the fields the class
//! declares indexed on the shard (`IndexMeta::declared`) and for its automatic columns (every
//! top-level client column the shard met since the class began there, up to `MAX_AUTOMATIC`:
//! `IndexMeta::automatic`, decisions/0016), one per element for arrays. Values
//! encode so that byte order is query order: numbers (`0x10`, ordered f64), strings, Dates and
//! Pointers as their comparable string (`0x20`, 0-escaped, `00 00`-terminated), booleans
//! (`0x08`), latitudes (`0x30`). An object whose declared field holds no single such value
//! has a marker entry too (`0x01`: missing, null, an object; `0x02`: an array), so that a
//! walk of the field in sort order finds the objects that are not in it (`irregular_range`),
//! and a range with several bounds finds the arrays whose elements meet them separately. An
//! automatic column has markers only for objects that hold it: objects without it are found
//! by no walk, which is therefore used only when `IndexMeta::walkable` (every object holds it,
//! or the filter needs a value).
//! An object the public may not read has an entry under the pseudo-field `_readers` for each
//! principal its ACL lets read it (`readers_prefix`), so that counting what a caller may read
//! needs no object.
//!
//! `IndexMeta` also keeps the class's exact object counts on the shard (`ClassCounts`: all
//! objects, and those anyone may read), changed in the same batch as each object.
//!
//! The planner (`query::plan`) picks one condition of the filter's top-level conjunction: known
//! objectIds (`objectId` equality or `$in`, a resolved `$relatedTo`) become point reads;
//! otherwise an indexed equality or `$in`, then a range, then geo yields key ranges whose
//! objects are a superset of the matches. The shard re-checks the whole filter on each
//! candidate, so a plan only ever narrows the scan. A class whose shard has objects from before indexes
//! existed is not `complete` and is scanned until its indexes are rebuilt (`DeclareIndex`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::filter::{comparable, GeoPoint};
use crate::acl::{allows, Access, Principals};
use crate::ids::GroupId;
use crate::object::StoredObject;
use crate::storage::keys::{self, SM_INDEX};

/// Fields every object is indexed on.
pub const ALWAYS_INDEXED: [&str; 2] = ["createdAt", "updatedAt"];

/// Pseudo-field of the reader entries of objects the public may not read.
const READERS: &str = "_readers";

/// Entry flag: anyone may read the object.
pub const PUBLIC: u8 = 0x01;
/// Entry flag: the entry is one element of an array value (the object may have several).
pub const ELEMENT: u8 = 0x02;
/// Entry flag: the value is a Date, Pointer or File (encoded as its comparable string) or a
/// whole number written as a float (`1.0`): `scalar_value` of the entry is not the value.
pub const TYPED: u8 = 0x04;

/// Index format of classes whose entries carry flags, irregular markers and reader entries,
/// and whose counts are kept. Format 0 (before them) is upgraded by a rebuild.
pub const FORMAT: u8 = 1;
/// Index format of classes whose entries also carry `TYPED` (the format a rebuild or a new
/// class writes): a walk may take a group's value from its entries (`scalar_value`).
pub const FORMAT_TYPED: u8 = 2;

const TAG_NOT_SCALAR: u8 = 0x01;
const TAG_ARRAY: u8 = 0x02;
const TAG_BOOL: u8 = 0x08;
const TAG_NUMBER: u8 = 0x10;
const TAG_STRING: u8 = 0x20;
pub(crate) const TAG_GEO: u8 = 0x30;

/// What a shard knows about a class's indexes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IndexMeta {
    /// Every object of the class on the shard has its entries (false when objects predate
    /// indexes and no rebuild ran yet).
    pub complete: bool,
    /// Fields the app declared indexed, beyond the automatic ones.
    pub declared: Vec<String>,
    /// The entries' format: `FORMAT_TYPED` for classes written (or rebuilt) since entries
    /// say `TYPED`, `FORMAT` before that, 0 for classes indexed before flags and counts existed.
    #[serde(default)]
    pub format: u8,
    /// The class's objects on the shard (exact when `current`).
    #[serde(default)]
    pub counts: ClassCounts,
    /// While a rebuild runs: the last objectId it has counted (empty before its first page).
    /// Writes to objects after it are counted by the rebuild's later pages instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuilt_through: Option<String>,
    /// The token of the latest rebuild (`DeclareIndex.rebuild`): only its pages count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild: Option<String>,
    /// The columns indexed without a declaration (decisions/0016); `None` for a class whose
    /// objects on the shard predate automatic indexes, until a rebuild.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automatic: Option<Automatic>,
    /// Columns the app opted out of automatic indexing (`DropIndex`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opted_out: Vec<String>,
    /// Columns taken out of the indexes whose entries may not all be deleted yet: every
    /// paged command over the class (drops, rebuilds, purges) deletes them first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropping: Vec<String>,
    /// How many markers each indexed column has (`marker_columns`; a column not named has
    /// none), exact when `current`: an ordered walk of a column without markers reads only its
    /// values. Columns being dropped are not counted (their entries are not walked). `None` for a class whose metadata predates these counts, until a rebuild.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub markers: Option<std::collections::BTreeMap<String, u64>>,
    /// Declared columns' entries are tallied per value bucket (`query::tally`), exactly when
    /// `current`. False for a class whose metadata predates tallies, until a rebuild.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tallies: bool,
}

/// The columns of a class a shard indexes by itself: every top-level client column met
/// since the class began on the shard (or since its last rebuild), up to `MAX_AUTOMATIC`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Automatic {
    /// Each column and how many of the class's objects hold it (any value, null included):
    /// when every object does, a walk of its entries and markers meets them all.
    pub columns: std::collections::BTreeMap<String, u64>,
    /// A column was turned away at the limit: later columns are not indexed by themselves
    /// either (an older object might hold them without entries).
    #[serde(default)]
    pub full: bool,
}

/// The most columns of a class a shard indexes by itself.
pub const MAX_AUTOMATIC: usize = 64;

/// How many objects of a class a shard holds, and how many of them anyone may read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassCounts {
    pub objects: u64,
    pub public: u64,
}

impl IndexMeta {
    /// The metadata of a class with no objects yet: complete, current, counted.
    pub fn empty() -> IndexMeta {
        IndexMeta {
            complete: true,
            declared: Vec::new(),
            format: FORMAT_TYPED,
            counts: ClassCounts::default(),
            rebuilt_through: None,
            rebuild: None,
            automatic: Some(Automatic::default()),
            opted_out: Vec::new(),
            dropping: Vec::new(),
            markers: Some(Default::default()),
            tallies: true,
        }
    }

    /// Whether entries have flags, markers and readers, and `counts` is exact.
    pub fn current(&self) -> bool {
        self.complete && self.format >= FORMAT && self.rebuilt_through.is_none()
    }

    /// Whether a write to `object_id` changes `counts` now (a running rebuild counts the
    /// objects after its position itself).
    pub fn counts_write_to(&self, object_id: &str) -> bool {
        match &self.rebuilt_through {
            Some(through) => object_id <= through.as_str(),
            None => self.format >= FORMAT,
        }
    }

    /// Whether `field` has entries (always-indexed, declared or automatic).
    pub fn indexes(&self, field: &str) -> bool {
        ALWAYS_INDEXED.contains(&field)
            || self.declared.iter().any(|d| d == field)
            || self.indexes_by_itself(field)
    }

    /// Whether `field` is one of the class's automatic columns.
    pub fn indexes_by_itself(&self, field: &str) -> bool {
        self.automatic
            .as_ref()
            .is_some_and(|a| a.columns.contains_key(field))
    }

    /// Whether a walk of `field`'s entries and markers meets every object of the class that
    /// may match: always for a declared column (objects without a value have markers); for
    /// an automatic one, when every object holds the column or the filter matches only
    /// objects that do (`needs_value`), since an object without it has no entry.
    pub fn walkable(&self, field: &str, needs_value: bool) -> bool {
        if !self.current() {
            return false;
        }
        if self.declared.iter().any(|d| d == field) {
            return true;
        }
        self.automatic
            .as_ref()
            .and_then(|a| a.columns.get(field))
            .is_some_and(|&n| needs_value || n == self.counts.objects)
    }

    /// Whether counts of `field`'s ranges may read its tallies (a declared column of a class
    /// whose tallies are kept).
    pub fn tallied(&self, field: &str) -> bool {
        self.tallies && self.current() && self.declared.iter().any(|d| d == field)
    }

    /// Whether `field`'s markers may hold objects (a walk must read them): false only when
    /// the column's markers are counted and there are none.
    pub fn may_have_markers(&self, field: &str) -> bool {
        !(self.current()
            && self
                .markers
                .as_ref()
                .is_some_and(|m| m.get(field).copied().unwrap_or(0) == 0))
    }

    /// The indexed columns for which `obj` has a marker (`entries`): each declared column
    /// where it holds no single scalar (missing included), each automatic one it holds
    /// without one.
    pub fn marker_columns(&self, obj: &StoredObject) -> Vec<String> {
        let automatic = obj
            .fields
            .keys()
            .filter(|name| self.indexes_by_itself(name) && !self.declared.contains(name));
        let mut out: Vec<String> = self
            .declared
            .iter()
            .chain(automatic)
            .filter(|name| {
                !ALWAYS_INDEXED.contains(&name.as_str()) && !single_scalar(obj.fields.get(*name))
            })
            .cloned()
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Counts `columns`' markers of one object in (`sign` 1) or out (-1).
    pub fn count_markers(&mut self, columns: &[String], sign: i8) {
        let Some(markers) = &mut self.markers else {
            return;
        };
        for name in columns {
            let n = markers.entry(name.clone()).or_default();
            step(n, sign);
            if *n == 0 {
                markers.remove(name);
            }
        }
    }

    /// Makes the new top-level columns of `obj` automatic (within `MAX_AUTOMATIC`); true when
    /// the metadata changed.
    pub fn admit_columns(&mut self, obj: &StoredObject) -> bool {
        let Some(auto) = &mut self.automatic else {
            return false;
        };
        if auto.full {
            return false;
        }
        let mut changed = false;
        for name in obj.fields.keys() {
            let new = automatic_candidate(name)
                && !auto.columns.contains_key(name)
                && !self.declared.contains(name)
                && !self.opted_out.contains(name);
            if !new {
                continue;
            }
            changed = true;
            if auto.columns.len() >= MAX_AUTOMATIC {
                auto.full = true;
                break;
            }
            auto.columns.insert(name.clone(), 0);
        }
        changed
    }

    /// Counts `obj` in (`sign` 1) or out (-1) of the automatic columns it holds.
    pub fn count_columns(&mut self, obj: &StoredObject, sign: i8) {
        let Some(auto) = &mut self.automatic else {
            return;
        };
        for name in obj.fields.keys() {
            if let Some(n) = auto.columns.get_mut(name) {
                step(n, sign);
            }
        }
    }
}

/// Whether a stored field may be indexed by itself: a client column, not the ACL or an
/// internal `_` field (the timestamps are always indexed and not stored as fields).
fn automatic_candidate(name: &str) -> bool {
    !name.starts_with('_') && name != "ACL" && !ALWAYS_INDEXED.contains(&name)
}

impl ClassCounts {
    /// Adds (`sign` 1) or removes (`sign` -1) one object.
    pub fn add(&mut self, public: bool, sign: i8) {
        step(&mut self.objects, sign);
        if public {
            step(&mut self.public, sign);
        }
    }
}

/// Adds one to a count (`sign` 1) or takes one away (-1), never past its bounds.
fn step(n: &mut u64, sign: i8) {
    *n = if sign >= 0 {
        n.saturating_add(1)
    } else {
        n.saturating_sub(1)
    };
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

/// The prefix of the reader entries of `principal`: objects the public may not read and
/// `principal` may.
pub fn readers_prefix(group: GroupId, app: &str, class: &str, principal: &str) -> Vec<u8> {
    let mut k = field_prefix(group, app, class, READERS);
    k.push(TAG_STRING);
    push_string(&mut k, principal);
    k
}

/// The range of a field's markers: objects whose value is not one scalar (missing, null, an
/// object: tag `0x01`; an array: `0x02`), which a walk of the field's values does not meet in
/// sort order.
pub fn irregular_range(field_prefix: &[u8]) -> KeyRange {
    tag_range(field_prefix, TAG_NOT_SCALAR, TAG_ARRAY + 1)
}

/// The entries of a field whose encoded value starts with a tag in `first..end`.
fn tag_range(field_prefix: &[u8], first: u8, end: u8) -> KeyRange {
    let with = |tag: u8| {
        let mut k = field_prefix.to_vec();
        k.push(tag);
        k
    };
    (with(first), with(end))
}

/// The range of a field's array markers: the objects whose value is an array.
pub(crate) fn array_markers(field_prefix: &[u8]) -> KeyRange {
    let mut start = field_prefix.to_vec();
    start.push(TAG_ARRAY);
    let end = after_prefix(&start);
    (start, end)
}

/// Whether an entry's encoded value is an array marker.
pub fn is_array_marker(encoded: &[u8]) -> bool {
    encoded == [TAG_ARRAY]
}

/// Whether an encoded entry value is a scalar (no marker, no latitude): what `scalar_range`
/// holds.
pub fn is_scalar_entry(encoded: &[u8]) -> bool {
    encoded
        .first()
        .is_some_and(|&tag| (TAG_BOOL..TAG_GEO).contains(&tag))
}

/// The range of a field's scalar values (booleans, numbers, strings; no markers, no
/// latitudes), in sort order.
pub fn scalar_range(field_prefix: &[u8]) -> KeyRange {
    tag_range(field_prefix, TAG_BOOL, TAG_GEO)
}

/// The range of a field's entries and markers, without its latitude entries (a GeoPoint
/// column is always indexed).
pub fn value_range(field_prefix: &[u8]) -> KeyRange {
    tag_range(field_prefix, TAG_NOT_SCALAR, TAG_GEO)
}

/// The scalar a field holds, in the index's sense: a value `encode` takes that is no array.
/// Objects whose order key holds one appear in the index walk at their sort position.
pub fn single_scalar(v: Option<&Value>) -> bool {
    v.is_some_and(|v| !v.is_array() && encode(v).is_some())
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

pub(crate) fn encode_latitude(lat: f64) -> Vec<u8> {
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

/// Every entry of one object, with its flags: its timestamps as queries see them, its
/// client-visible fields (internal `_` fields never), markers of declared fields without one
/// scalar, and reader entries when the public may not read it. Sorted by key, keys unique.
pub fn entries(
    group: GroupId,
    app: &str,
    class: &str,
    object_id: &str,
    obj: &StoredObject,
    meta: &IndexMeta,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let declared = &meta.declared;
    let public = public_read(&obj.fields);
    let flags = |element: bool, typed: bool| {
        let mut f = 0;
        if public {
            f |= PUBLIC;
        }
        if element {
            f |= ELEMENT;
        }
        if typed {
            f |= TYPED;
        }
        vec![f]
    };
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
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
            out.push((
                entry(&prefix(), &encode_latitude(p.latitude), object_id),
                flags(false, false),
            ));
            continue;
        }
        let always = ALWAYS_INDEXED.contains(&name.as_str());
        if !(always || declared.contains(name) || meta.indexes_by_itself(name)) {
            continue;
        }
        let (values, element): (Vec<&Value>, bool) = match v {
            Value::Array(items) => (items.iter().collect(), true),
            other => (vec![other], false),
        };
        let prefix = prefix();
        for item in values {
            if let Some(enc) = encode(item) {
                out.push((entry(&prefix, &enc, object_id), flags(element, typed(item))));
            }
        }
    }
    // Markers: for each declared column without one scalar (missing included), and for each
    // automatic column held without one (an object without it has nothing).
    for name in meta.marker_columns(obj) {
        let prefix = field_prefix(group, app, class, &name);
        let tag = match obj.fields.get(&name) {
            Some(Value::Array(_)) => TAG_ARRAY,
            _ => TAG_NOT_SCALAR,
        };
        out.push((entry(&prefix, &[tag], object_id), flags(false, false)));
    }
    if !public {
        for principal in readers(&obj.fields) {
            let prefix = readers_prefix(group, app, class, principal);
            out.push((entry(&prefix, &[], object_id), flags(false, false)));
        }
    }
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// Whether an indexed scalar is not what `scalar_value` reads back from its encoding: an
/// object (a Date, Pointer or File, encoded as its comparable string) or a whole number
/// written as a float.
fn typed(v: &Value) -> bool {
    match v {
        Value::Object(_) => true,
        Value::Number(n) => {
            !n.is_i64() && !n.is_u64() && n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

/// The JSON value of an encoded scalar whose entry is not `TYPED`: a boolean, a string, an
/// integer when the number is whole, else a float. `None` for a marker, a latitude, a number
/// the index holds imprecisely (`imprecise_entry`) or damaged bytes.
pub fn scalar_value(encoded: &[u8]) -> Option<Value> {
    match encoded.split_first()? {
        (&TAG_BOOL, [b]) => Some(Value::Bool(*b == 1)),
        (&TAG_NUMBER, bytes) => {
            let f = entry_f64(bytes)?;
            if f.abs() >= PRECISE_LIMIT {
                None
            } else if f.fract() == 0.0 {
                Some(Value::from(f as i64))
            } else {
                serde_json::Number::from_f64(f).map(Value::Number)
            }
        }
        (&TAG_STRING, bytes) => {
            let mut out = Vec::with_capacity(bytes.len());
            let mut rest = bytes;
            loop {
                match rest {
                    [0, 0] => break,
                    [0, 0xff, tail @ ..] => {
                        out.push(0);
                        rest = tail;
                    }
                    [b, tail @ ..] if *b != 0 => {
                        out.push(*b);
                        rest = tail;
                    }
                    _ => return None,
                }
            }
            String::from_utf8(out).ok().map(Value::String)
        }
        _ => None,
    }
}

/// The number of an encoded number's 8 bytes (`ordered_f64` in reverse).
fn entry_f64(bytes: &[u8]) -> Option<f64> {
    let bits = u64::from_be_bytes(<[u8; 8]>::try_from(bytes).ok()?);
    let bits = if bits >> 63 == 1 {
        bits & !(1 << 63)
    } else {
        !bits
    };
    Some(f64::from_bits(bits))
}

/// Whether anyone (the principal `*`) may read an object with these fields.
pub fn public_read(fields: &serde_json::Map<String, Value>) -> bool {
    allows(fields, &Principals::public(), Access::Read)
}

/// The principals an object's ACL lets read it.
fn readers(fields: &serde_json::Map<String, Value>) -> Vec<&str> {
    fields
        .get("ACL")
        .and_then(Value::as_object)
        .map(|acl| {
            acl.iter()
                .filter(|(_, e)| e.get("read").and_then(Value::as_bool) == Some(true))
                .map(|(p, _)| p.as_str())
                .collect()
        })
        .unwrap_or_default()
}

/// The first key after every key that starts with `k`.
pub(crate) fn after_prefix(k: &[u8]) -> Vec<u8> {
    let mut out = k.to_vec();
    while let Some(last) = out.pop() {
        if last < 0xff {
            out.push(last + 1);
            return out;
        }
    }
    vec![0xff; k.len() + 1]
}

/// Keys `[start, end)` of the index.
pub type KeyRange = (Vec<u8>, Vec<u8>);

/// Whether a number is one the index may hold as a neighbour's equal (integers beyond 2^53
/// lose precision as f64): bounds on it include the neighbours, and the object decides.
pub fn imprecise(v: &Value) -> bool {
    v.as_f64().is_some_and(|f| f.abs() >= PRECISE_LIMIT)
}

/// 2^53: integers from here on may share their f64 with a neighbour.
const PRECISE_LIMIT: f64 = 9_007_199_254_740_992.0;

/// Whether an encoded entry value is a number the index holds imprecisely (`imprecise`).
pub fn imprecise_entry(encoded: &[u8]) -> bool {
    let [TAG_NUMBER, bytes @ ..] = encoded else {
        return false;
    };
    entry_f64(bytes).is_some_and(|f| f.abs() >= PRECISE_LIMIT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::filter::Filter;
    use crate::query::plan::{plan, Candidates};

    #[test]
    fn plain_scalars_read_back_from_their_encoding() {
        for v in [
            json!(true),
            json!(false),
            json!(0),
            json!(-7),
            json!(9_007_199_254_740_991i64),
            json!(2.5),
            json!(-0.125),
            json!(""),
            json!("a\u{0}b\u{0}"),
            json!("\u{e9}t\u{e9}"),
        ] {
            assert!(!typed(&v), "{v}");
            assert_eq!(scalar_value(&encode(&v).unwrap()), Some(v.clone()), "{v}");
        }
        // Whole floats, Dates, Pointers and Files are flagged; numbers past 2^53 do not read
        // back; neither do markers, latitudes or damaged bytes.
        for v in [
            json!(1.0),
            json!(-0.0),
            json!({"__type": "Date", "iso": "2026-01-01 00:00:00"}),
            json!({"__type": "Pointer", "className": "P", "objectId": "a"}),
            json!({"__type": "File", "url": "u", "name": "n"}),
        ] {
            assert!(typed(&v), "{v}");
        }
        assert_eq!(
            scalar_value(&encode(&json!(9_007_199_254_740_993i64)).unwrap()),
            None
        );
        for bad in [
            &[TAG_NOT_SCALAR][..],
            &[TAG_ARRAY],
            &encode_latitude(1.0),
            &[TAG_STRING, b'a', 0],
            &[TAG_STRING, 0xff, 0, 0],
            &[TAG_NUMBER, 1, 2],
            &[TAG_BOOL],
        ] {
            assert_eq!(scalar_value(bad), None, "{bad:?}");
        }
    }
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
        let declared = IndexMeta {
            declared: vec!["tags".into(), "_secret".into()],
            automatic: None,
            ..IndexMeta::empty()
        };
        let e = entries(GroupId::new(1), "a", "C", "obj1", &obj, &declared);
        // createdAt, updatedAt, two tags, the GeoPoint, and the marker of `tags` (no single
        // scalar); n is not declared, _secret internal.
        assert_eq!(e.len(), 6, "{e:?}");
        assert!(e.iter().all(|(k, _)| entry_object_id(k) == Some("obj1")));
        assert!(e.iter().all(|(k, _)| k.starts_with(&class_index_prefix(
            GroupId::new(1),
            "a",
            "C"
        ))));
        let tags = field_prefix(GroupId::new(1), "a", "C", "tags");
        let flags: Vec<u8> = e
            .iter()
            .filter(|(k, _)| k.starts_with(&tags))
            .map(|(_, v)| v[0])
            .collect();
        assert_eq!(flags, [PUBLIC, PUBLIC | ELEMENT, PUBLIC | ELEMENT]);
        // A private object: reader entries for each principal that may read it, no PUBLIC.
        obj.fields.insert(
            "ACL".into(),
            json!({"u1": {"read": true}, "role:r": {"read": true, "write": true}, "u2": {"write": true}}),
        );
        let e = entries(
            GroupId::new(1),
            "a",
            "C",
            "obj1",
            &obj,
            &IndexMeta::default(),
        );
        let readers = |p: &str| {
            let prefix = readers_prefix(GroupId::new(1), "a", "C", p);
            e.iter().filter(|(k, _)| k.starts_with(&prefix)).count()
        };
        assert_eq!((readers("u1"), readers("role:r"), readers("u2")), (1, 1, 0));
        assert!(e.iter().all(|(_, v)| v[0] & PUBLIC == 0));
    }

    #[test]
    fn automatic_columns_index_what_objects_hold() {
        let g = GroupId::new(1);
        let mut meta = IndexMeta::empty();
        let mut obj = StoredObject::new(1_767_225_600_000);
        let fields = json!({"tags": ["x", "y"], "n": 3, "_secret": "s", "none": null,
                            "ACL": {"*": {"read": true}},
                            "loc": {"__type": "GeoPoint", "latitude": 1.0, "longitude": 2.0}});
        obj.fields = fields.as_object().unwrap().clone();
        assert!(meta.admit_columns(&obj));
        assert!(!meta.admit_columns(&obj), "nothing new the second time");
        let auto = meta.automatic.clone().unwrap();
        assert_eq!(
            auto.columns.keys().collect::<Vec<_>>(),
            ["loc", "n", "none", "tags"]
        );
        let e = entries(g, "a", "C", "obj1", &obj, &meta);
        let under = |f: &str| {
            let p = field_prefix(g, "a", "C", f);
            e.iter().filter(|(k, _)| k.starts_with(&p)).count()
        };
        // Two elements and the array's marker; the value; a null's marker; the latitude and
        // the GeoPoint's marker (no single scalar).
        assert_eq!(
            (under("tags"), under("n"), under("none"), under("loc")),
            (3, 1, 1, 2)
        );
        assert_eq!((under("_secret"), under("ACL")), (0, 0));
        meta.count_columns(&obj, 1);
        // An object without `n` has nothing under it (automatic columns mark no absence).
        obj.fields.remove("n");
        let e = entries(g, "a", "C", "obj2", &obj, &meta);
        let n = field_prefix(g, "a", "C", "n");
        assert!(!e.iter().any(|(k, _)| k.starts_with(&n)));
        // Walkable whole only while every object holds the column.
        meta.counts.objects = 2;
        meta.count_columns(&obj, 1);
        assert!(meta.walkable("tags", false) && !meta.walkable("n", false));
        assert!(meta.walkable("n", true));
        // Opted-out and declared columns are not admitted; past the limit nothing is.
        let mut meta = IndexMeta {
            declared: vec!["d".into()],
            opted_out: vec!["o".into()],
            ..IndexMeta::empty()
        };
        let mut wide = StoredObject::new(1);
        for i in 0..MAX_AUTOMATIC + 5 {
            wide.fields.insert(format!("c{i:03}"), json!(i));
        }
        wide.fields.insert("d".into(), json!(1));
        wide.fields.insert("o".into(), json!(1));
        assert!(meta.admit_columns(&wide));
        let auto = meta.automatic.clone().unwrap();
        assert!(auto.full && auto.columns.len() == MAX_AUTOMATIC);
        assert!(!auto.columns.contains_key("d") && !auto.columns.contains_key("o"));
        let mut later = StoredObject::new(2);
        later.fields.insert("zz".into(), json!(1));
        assert!(!meta.admit_columns(&later) && !meta.indexes("zz"));
    }

    #[test]
    fn an_id_floor_starts_single_value_ranges_at_the_floor() {
        let meta = IndexMeta {
            declared: vec!["tag".into(), "n".into()],
            ..IndexMeta::empty()
        };
        let f = |w: Value| Filter::parse(w.as_object().unwrap()).unwrap();
        let g = GroupId::new(1);
        let key = |tag: &str, id: &str| {
            entry(
                &field_prefix(g, "a", "C", "tag"),
                &encode(&json!(tag)).unwrap(),
                id,
            )
        };
        let p = plan(g, "a", "C", &f(json!({"tag": {"$in": ["x", "y"]}})), &meta)
            .unwrap()
            .with_id_floor(Some("m"));
        let Candidates::Ranges(ranges) = &p.candidates else {
            panic!("a range plan: {p:?}")
        };
        let inside = |k: &[u8]| {
            ranges
                .iter()
                .any(|(s, e)| k >= s.as_slice() && k < e.as_slice())
        };
        // At and above the floor, in either value; below it, in neither; other values never.
        for (tag, id, found) in [
            ("x", "m", true),
            ("x", "mz", true),
            ("y", "zz", true),
            ("x", "l", false),
            ("y", "lzzzzzzzzz", false),
            ("w", "z", false),
        ] {
            assert_eq!(inside(&key(tag, id)), found, "{tag} {id}");
        }
        // A range over several values keeps its whole span.
        let ranged = plan(g, "a", "C", &f(json!({"n": {"$gt": 1}})), &meta).unwrap();
        assert_eq!(ranged.clone().with_id_floor(Some("m")), ranged);
    }

    #[test]
    fn plans_prefer_equality_then_ranges_then_geo() {
        let all = IndexMeta {
            declared: vec!["n".into(), "tag".into()],
            ..IndexMeta::empty()
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
        let undeclared = IndexMeta::empty();
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
