//! Objects as the state machine stores them, and the names that address them.
//!
//! A stored object keeps its user fields plus `created_ms`/`updated_ms` (milliseconds, UTC);
//! the reserved fields `objectId`, `createdAt`, `updatedAt` are rendered on the way out. The
//! encoding starts with its format, so that older formats are read next to the current one:
//! the current one (`encode`) lets a reader parse only the fields it needs; objects of the
//! first (one JSON document) are still read, and rewritten in the current one when a node
//! opens its store (`statemachine::upgrade`).

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// Fields the service sets; a client may not write them.
pub const RESERVED_FIELDS: [&str; 3] = ["objectId", "createdAt", "updatedAt"];

/// Wire format of `createdAt`/`updatedAt` and of Date values: `YYYY-mm-dd HH:ii:ss`, UTC.
pub const WIRE_TIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// First byte of the current encoding of [`StoredObject`] (`encode`). Objects of the first
/// encoding are one JSON document (`{"v":1,…}`), so their first byte is `{`.
const FORMAT_V2: u8 = 2;
/// The `v` of the first encoding.
const FORMAT_V1: u8 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredObject {
    pub created_ms: i64,
    pub updated_ms: i64,
    pub fields: Map<String, Value>,
}

impl StoredObject {
    pub fn new(now_ms: i64) -> Self {
        StoredObject {
            created_ms: now_ms,
            updated_ms: now_ms,
            fields: Map::new(),
        }
    }

    /// The object as the API returns it: user fields with internal members removed, plus the
    /// reserved fields.
    pub fn render(&self, object_id: &str) -> Value {
        self.render_with_times(object_id, format_wire_time)
    }

    /// `render` with `createdAt`/`updatedAt` written by `time`.
    fn render_with_times(&self, object_id: &str, time: fn(i64) -> String) -> Value {
        let mut out = Map::with_capacity(self.fields.len() + 3);
        // Fields named with a leading underscore are the service's own (a user's password hash
        // and sessions); clients can never write or see them.
        for (k, v) in self.fields.iter().filter(|(k, _)| !k.starts_with('_')) {
            out.insert(k.clone(), render_value(v));
        }
        out.insert("objectId".into(), Value::String(object_id.to_string()));
        out.insert("createdAt".into(), Value::String(time(self.created_ms)));
        out.insert("updatedAt".into(), Value::String(time(self.updated_ms)));
        Value::Object(out)
    }

    /// The object as the query engine filters and sorts it: like `render`, with `createdAt` and
    /// `updatedAt` to the millisecond (`QUERY_TIME_FORMAT`). The coordinator cuts them back to
    /// the wire form (`trim_query_times`) before rows leave the cluster.
    pub fn render_for_query(&self, object_id: &str) -> Value {
        self.render_with_times(object_id, format_query_time)
    }

    /// `createdAt` and `updatedAt` in `QUERY_TIME_FORMAT`.
    pub fn query_times(&self) -> Vec<(&'static str, String)> {
        [
            ("createdAt", self.created_ms),
            ("updatedAt", self.updated_ms),
        ]
        .into_iter()
        .filter_map(|(k, ms)| {
            Utc.timestamp_millis_opt(ms).single()?;
            Some((k, format_query_time(ms)))
        })
        .collect()
    }

    /// The member objectIds of a Relation field (empty when the field is no Relation).
    pub fn relation_members(&self, field: &str) -> Vec<String> {
        self.fields
            .get(field)
            .and_then(|r| r.get("objects"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The object in the current encoding (`FORMAT_V2`): the format byte, `created_ms` and
    /// `updated_ms` (8 bytes each, little-endian), then per field its name and its value as
    /// JSON text, each after its length (4 bytes, little-endian). A reader finds one field by
    /// its name and parses only that value (`decode_only`). The same object always encodes to
    /// the same bytes (fields in name order), as replicas compare their state byte for byte.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(17 + self.fields.len() * 32);
        out.push(FORMAT_V2);
        out.extend_from_slice(&self.created_ms.to_le_bytes());
        out.extend_from_slice(&self.updated_ms.to_le_bytes());
        for (name, value) in &self.fields {
            let at = out.len();
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(name.as_bytes());
            set_length(&mut out, at)?;
            let at = out.len();
            out.extend_from_slice(&[0; 4]);
            serde_json::to_writer(&mut out, value)?;
            set_length(&mut out, at)?;
        }
        Ok(out)
    }

    /// The object `encode` wrote, or one of the first encoding.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        Self::decode_fields(bytes, None)
    }

    /// `decode` keeping only the user fields whose names `keep` accepts: the other values are stepped over
    /// by their length, never parsed (a query reads thousands of objects for the few fields
    /// its filter, order or aggregation names).
    pub fn decode_only(bytes: &[u8], keep: &dyn Fn(&str) -> bool) -> Result<Self> {
        Self::decode_fields(bytes, Some(keep))
    }

    /// Whether `bytes` are in the current encoding (objects in the first are rewritten once,
    /// when a node opens its store).
    pub fn is_current_encoding(bytes: &[u8]) -> bool {
        bytes.first() == Some(&FORMAT_V2)
    }

    fn decode_fields(bytes: &[u8], keep: Option<&dyn Fn(&str) -> bool>) -> Result<Self> {
        match bytes.split_first() {
            Some((&FORMAT_V2, rest)) => {
                let mut r = Reader(rest);
                let created_ms = r.int()?;
                let updated_ms = r.int()?;
                let mut fields = Map::new();
                while !r.0.is_empty() {
                    let name = std::str::from_utf8(r.chunk()?)
                        .map_err(|_| corrupt("a field name is not UTF-8"))?;
                    let value = r.chunk()?;
                    if keep.is_none_or(|k| k(name)) {
                        fields.insert(name.to_string(), serde_json::from_slice(value)?);
                    }
                }
                Ok(StoredObject {
                    created_ms,
                    updated_ms,
                    fields,
                })
            }
            Some((b'{', _)) => {
                let v1: FirstEncoding = serde_json::from_slice(bytes)?;
                if v1.v != FORMAT_V1 {
                    return Err(corrupt(&format!("unknown object format {}", v1.v)));
                }
                let mut fields = v1.fields;
                if let Some(keep) = keep {
                    fields.retain(|k, _| keep(k));
                }
                Ok(StoredObject {
                    created_ms: v1.created_ms,
                    updated_ms: v1.updated_ms,
                    fields,
                })
            }
            _ => Err(corrupt("unknown object format")),
        }
    }

    /// `render_for_query` of an object from `decode_only`, with `createdAt` and `updatedAt`
    /// only when `times`; the fields are moved, not copied.
    pub fn into_partial_for_query(self, object_id: &str, times: bool) -> Value {
        let mut out = self.fields;
        out.retain(|k, _| !k.starts_with('_'));
        for v in out.values_mut() {
            if let Value::Object(m) = v {
                *v = render_value_owned(std::mem::take(m));
            }
        }
        out.insert("objectId".into(), Value::String(object_id.to_string()));
        if times {
            out.insert(
                "createdAt".into(),
                Value::String(format_query_time(self.created_ms)),
            );
            out.insert(
                "updatedAt".into(),
                Value::String(format_query_time(self.updated_ms)),
            );
        }
        Value::Object(out)
    }
}

/// An object as the first encoding stored it: one JSON document.
#[derive(Deserialize)]
struct FirstEncoding {
    v: u8,
    created_ms: i64,
    updated_ms: i64,
    fields: Map<String, Value>,
}

/// A stored object that cannot be read: the object's fault, not the store's (a command on it
/// is rejected on every replica alike instead of stopping apply, as for bad JSON).
fn corrupt(what: &str) -> Error {
    Error::Internal(format!("a stored object is damaged: {what}"))
}

/// Writes the length of what follows the 4 bytes at `at` into them.
fn set_length(out: &mut [u8], at: usize) -> Result<()> {
    let len = u32::try_from(out.len() - at - 4)
        .map_err(|_| Error::InvalidValue("a field of more than 4 GiB".into()))?;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// Reads `FORMAT_V2` bytes front to back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(corrupt("it ends early"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn int(&mut self) -> Result<i64> {
        let b = self.take(8)?;
        Ok(i64::from_le_bytes(
            b.try_into().map_err(|_| corrupt("a short time"))?,
        ))
    }

    /// A length-prefixed part.
    fn chunk(&mut self) -> Result<&'a [u8]> {
        let b = self.take(4)?;
        let len = u32::from_le_bytes(b.try_into().map_err(|_| corrupt("a short length"))?);
        self.take(len as usize)
    }
}

/// Cuts `createdAt`/`updatedAt` of a row from `render_for_query` back to the wire form.
pub fn trim_query_times(row: &mut Value) {
    for k in ["createdAt", "updatedAt"] {
        if let Some(Value::String(t)) = row.get_mut(k) {
            let cut = wire_time_of(t).len();
            t.truncate(cut);
        }
    }
}

/// Strips what the state machine keeps inside typed values but never shows (the member ids
/// of a Relation).
fn render_value(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.get("__type").and_then(Value::as_str) == Some("Relation") => {
            let mut m = m.clone();
            m.remove("objects");
            Value::Object(m)
        }
        other => other.clone(),
    }
}

/// `render_value` of an object value the caller owns.
fn render_value_owned(mut m: Map<String, Value>) -> Value {
    if m.get("__type").and_then(Value::as_str) == Some("Relation") {
        m.remove("objects");
    }
    Value::Object(m)
}

/// `createdAt`/`updatedAt` as queries compare and sort them: the wire form plus milliseconds
/// (`YYYY-mm-dd HH:ii:ss.SSS`), which orders after the whole second it extends, so that a bound
/// of `HH:ii:ss` selects as the spec says (objects are stored with sub-second precision).
pub const QUERY_TIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S%.3f";

/// A Date bound of a query in the form stored values compare with: whole seconds in the wire
/// form, a fraction only when it has one.
pub fn query_time(t: DateTime<Utc>) -> String {
    if t.timestamp_subsec_millis() == 0 {
        t.format(WIRE_TIME_FORMAT).to_string()
    } else {
        t.format(QUERY_TIME_FORMAT).to_string()
    }
}

/// Cuts a `QUERY_TIME_FORMAT` timestamp back to the wire form.
pub fn wire_time_of(query_time: &str) -> &str {
    query_time.get(..19).unwrap_or(query_time)
}

/// Formats milliseconds since the epoch as `YYYY-mm-dd HH:ii:ss` UTC.
pub fn format_wire_time(ms: i64) -> String {
    format_time(ms, false)
}

/// Formats milliseconds since the epoch in `QUERY_TIME_FORMAT` (`YYYY-mm-dd HH:ii:ss.SSS`).
pub fn format_query_time(ms: i64) -> String {
    format_time(ms, true)
}

/// `WIRE_TIME_FORMAT`, with `.SSS` when `millis`: written field by field (every object a
/// query reads is rendered with two of these), through chrono's formatter only for years
/// outside 0..=9999, which it writes with a sign. Empty for a time chrono cannot represent.
fn format_time(ms: i64, millis: bool) -> String {
    use chrono::{Datelike, Timelike};
    use std::fmt::Write;
    let Some(t) = Utc.timestamp_millis_opt(ms).single() else {
        return String::new();
    };
    if !(0..=9999).contains(&t.year()) {
        let format = if millis {
            QUERY_TIME_FORMAT
        } else {
            WIRE_TIME_FORMAT
        };
        return t.format(format).to_string();
    }
    let mut out = String::with_capacity(23);
    let _ = write!(
        out,
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    if millis {
        let _ = write!(out, ".{:03}", t.timestamp_subsec_millis());
    }
    out
}

/// Parses the three accepted Date forms (`2006-01-02T15:04:05.000Z`, `2006-01-02T15:04:05`,
/// `2006-01-02 15:04:05`), all UTC.
pub fn parse_wire_time(s: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    for fmt in [
        WIRE_TIME_FORMAT,
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.fZ",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, fmt) {
            return Some(t.and_utc());
        }
    }
    None
}

/// A fresh objectId: 10 characters of `[0-9a-zA-Z]`, chosen by the proposing node.
pub fn new_object_id() -> String {
    random_alphanumeric(10)
}

/// `len` random characters of `[0-9a-zA-Z]` (objectIds, app keys, tokens).
pub fn random_alphanumeric(len: usize) -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// True for a well-formed objectId (what [`new_object_id`] makes).
pub fn is_object_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Validates a class name: a letter first, then letters, digits and underscores, at most 64.
/// System classes (a leading underscore) are addressed through their own endpoints.
pub fn validate_class_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidClassName(format!(
            "invalid class name {:?}: it must start with a letter and hold only letters, digits and _ (at most 64)",
            crate::error::clip(name)
        )))
    }
}

/// Validates one segment of a field name (a column or a member in a dot path).
pub fn validate_field_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidKey(format!(
            "invalid field name {:?}: use letters, digits and _, at most 128, not starting with _",
            crate::error::clip(name)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_partial_decode_keeps_only_the_named_fields_as_they_were() {
        let mut o = StoredObject::new(1_700_000_000_123);
        o.updated_ms = 1_700_000_999_456;
        o.fields = serde_json::json!({
            "score": 12.5,
            "na\"me\u{e9}": {"nested": [1, {"a": "b"}], "s": "x\ny"},
            "ACL": {"*": {"read": true}},
            "skipped": [[[{"deep": null}]], "\u{2603}", -0.0, 1e300, true],
            "tags": ["a", "b"],
        })
        .as_object()
        .unwrap()
        .clone();
        let bytes = o.encode().unwrap();
        let keep: HashSet<String> = ["score", "na\"me\u{e9}", "ACL", "absent"]
            .into_iter()
            .map(str::to_string)
            .collect();
        let lean = StoredObject::decode_only(&bytes, &|n| keep.contains(n)).unwrap();
        assert!(StoredObject::is_current_encoding(&bytes));
        assert_eq!(
            (lean.created_ms, lean.updated_ms),
            (o.created_ms, o.updated_ms)
        );
        let mut expected = o.fields.clone();
        expected.retain(|k, _| keep.contains(k));
        assert_eq!(lean.fields, expected);
        assert_eq!(lean.fields.len(), 3);
        // Keeping every name gives what `decode` gives.
        let all: HashSet<String> = o.fields.keys().cloned().collect();
        assert_eq!(
            StoredObject::decode_only(&bytes, &|n| all.contains(n)).unwrap(),
            o
        );
        // Rendered without times: the kept fields and the objectId only.
        let row = lean.clone().into_partial_for_query("abc", false);
        assert_eq!(row["objectId"], "abc");
        assert_eq!(row["score"], 12.5);
        assert!(row.get("createdAt").is_none() && row.get("tags").is_none());
        let row = lean.into_partial_for_query("abc", true);
        assert_eq!(row["createdAt"], format_query_time(o.created_ms));
        assert_eq!(row["updatedAt"], format_query_time(o.updated_ms));
        // Objects of the first encoding (one JSON document) read the same; names written with
        // escapes are compared unescaped.
        let bytes =
            br#"{"fields":{"k\u00e9y":1,"o":{"x":"\u2603"}},"v":1,"created_ms":1,"updated_ms":2}"#;
        let keep: HashSet<String> = ["k\u{e9}y".to_string()].into_iter().collect();
        let lean = StoredObject::decode_only(bytes, &|n| keep.contains(n)).unwrap();
        assert_eq!(
            Value::Object(lean.fields),
            serde_json::json!({"k\u{e9}y": 1})
        );
        assert_eq!((lean.created_ms, lean.updated_ms), (1, 2));
    }

    #[test]
    fn both_encodings_read_the_same_object_and_the_current_one_is_canonical() {
        let mut o = StoredObject::new(-5);
        o.updated_ms = i64::MAX;
        o.fields = json!({"z": {"__type": "Relation", "className": "_User", "objects": ["a"]},
                          "a": "\u{0}\"", "_password": "h", "n": null, "e": {}, "l": []})
        .as_object()
        .unwrap()
        .clone();
        let first = json!({"v": 1, "created_ms": -5, "updated_ms": i64::MAX,
                           "fields": o.fields.clone()});
        let first = serde_json::to_vec(&first).unwrap();
        assert!(!StoredObject::is_current_encoding(&first));
        let read = StoredObject::decode(&first).unwrap();
        assert_eq!(read, o);
        let bytes = o.encode().unwrap();
        assert_eq!(read.encode().unwrap(), bytes);
        assert_eq!(StoredObject::decode(&bytes).unwrap(), o);
        let keep: HashSet<String> = ["z".to_string(), "_password".to_string()].into();
        let lean = StoredObject::decode_only(&bytes, &|n| keep.contains(n)).unwrap();
        assert_eq!(lean.fields.len(), 2);
        assert_eq!(
            lean,
            StoredObject::decode_only(&first, &|n| keep.contains(n)).unwrap()
        );
        // Rendered for a query: internal fields hidden, Relation members stripped.
        assert_eq!(
            lean.into_partial_for_query("x", false),
            json!({"z": {"__type": "Relation", "className": "_User"}, "objectId": "x"})
        );
    }

    #[test]
    fn a_damaged_object_is_an_error_not_a_panic() {
        let mut o = StoredObject::new(7);
        o.fields.insert("name".into(), json!("value"));
        o.fields.insert("n".into(), json!([1, 2]));
        let good = o.encode().unwrap();
        let keep: HashSet<String> = ["n".to_string()].into();
        // Every cut of the bytes but the ends of whole fields is refused.
        let ends = [17, 17 + 4 + 1 + 4 + 5];
        for cut in 0..good.len() {
            let r = StoredObject::decode(&good[..cut]);
            assert_eq!(r.is_ok(), ends.contains(&cut), "cut at {cut}");
        }
        let mut bad_name = good.clone();
        bad_name[17 + 4] = 0xff;
        let mut bad_value = good.clone();
        let last = bad_value.len() - 1;
        bad_value[last] = b'!';
        let mut long = good.clone();
        long[17] = 0xff;
        for bad in [bad_name, bad_value, long, vec![3, 1, 2], vec![]] {
            assert!(StoredObject::decode(&bad).is_err(), "{bad:?}");
        }
        // A value the reader steps over is not parsed, but its length must hold.
        let mut skipped = good.clone();
        skipped[last] = b'!';
        assert!(StoredObject::decode_only(&skipped, &|n| keep.contains(n)).is_ok());
        assert!(StoredObject::decode_only(&skipped, &|n| n == "name").is_err());
    }

    #[test]
    fn a_partial_decode_of_the_first_encoding_refuses_what_decode_refuses() {
        let keep: HashSet<String> = ["a".to_string()].into_iter().collect();
        for bad in [
            &br#"{"v":2,"created_ms":1,"updated_ms":1,"fields":{}}"#[..],
            br#"{"v":1,"created_ms":1,"fields":{}}"#,
            br#"{"v":1,"created_ms":1,"updated_ms":1,"fields":{"a":1,"b":[}"#,
            br#"{"v":1,"created_ms":1,"updated_ms":1,"fields":{}} trailing"#,
            br#"[1]"#,
        ] {
            assert!(StoredObject::decode(bad).is_err());
            assert!(
                StoredObject::decode_only(bad, &|n| keep.contains(n)).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn times_are_written_as_chrono_writes_them() {
        let mut ms: i64 = -62_135_596_800_000 - 86_400_000;
        let step = 7_919_993_337_i64;
        while ms < 253_402_300_800_000 + 86_400_000 * 400 {
            let t = Utc.timestamp_millis_opt(ms).single().unwrap();
            assert_eq!(format_wire_time(ms), t.format(WIRE_TIME_FORMAT).to_string());
            assert_eq!(
                format_query_time(ms),
                t.format(QUERY_TIME_FORMAT).to_string()
            );
            ms += step;
        }
        assert_eq!(
            format_query_time(1_767_225_600_007),
            "2026-01-01 00:00:00.007"
        );
        assert_eq!(format_wire_time(i64::MAX), "");
    }
    use serde_json::json;

    #[test]
    fn renders_reserved_fields_in_wire_format() {
        let mut o = StoredObject::new(1_700_000_000_123);
        o.fields.insert("score".into(), json!(5));
        o.updated_ms = 1_700_000_060_999;
        let v = o.render("abcDEF1234");
        assert_eq!(v["objectId"], "abcDEF1234");
        assert_eq!(v["createdAt"], "2023-11-14 22:13:20");
        assert_eq!(v["updatedAt"], "2023-11-14 22:14:20");
        assert_eq!(v["score"], 5);
    }

    #[test]
    fn internal_fields_are_not_rendered() {
        let mut o = StoredObject::new(0);
        o.fields.insert("_password".into(), json!("hash"));
        o.fields.insert("name".into(), json!("n"));
        let v = o.render("x");
        assert!(v.get("_password").is_none());
        assert_eq!(v["name"], "n");
    }

    #[test]
    fn relation_members_are_not_rendered() {
        let mut o = StoredObject::new(0);
        o.fields.insert(
            "likes".into(),
            json!({"__type":"Relation","className":"_User","objects":["a"]}),
        );
        assert_eq!(
            o.render("x")["likes"],
            json!({"__type":"Relation","className":"_User"})
        );
    }

    #[test]
    fn object_ids_have_the_documented_shape() {
        for _ in 0..100 {
            let id = new_object_id();
            assert_eq!(id.len(), 10);
            assert!(is_object_id(&id));
        }
    }

    #[test]
    fn wire_time_accepts_the_three_forms() {
        let expect = "2024-02-03 04:05:06";
        for s in [
            "2024-02-03T04:05:06.000Z",
            "2024-02-03T04:05:06",
            "2024-02-03 04:05:06",
        ] {
            let t = parse_wire_time(s).map(|t| t.format(WIRE_TIME_FORMAT).to_string());
            assert_eq!(t.as_deref(), Some(expect), "{s}");
        }
        assert!(parse_wire_time("yesterday").is_none());
    }

    #[test]
    fn names_are_validated() {
        assert!(validate_class_name("GameScore").is_ok());
        assert!(validate_class_name("1Game").is_err());
        assert!(validate_class_name("_User").is_err());
        assert!(validate_field_name("score2").is_ok());
        assert!(validate_field_name("my-key").is_err());
        assert!(validate_field_name("").is_err());
    }

    #[test]
    fn encoding_round_trips() {
        let mut o = StoredObject::new(42);
        o.fields.insert("a".into(), json!([1, "x"]));
        assert_eq!(StoredObject::decode(&o.encode().unwrap()).unwrap(), o);
    }
}
