//! The `where` of a query (spec 4.3) as a tree the shards evaluate: field conditions
//! (`$lt $lte $gt $gte $ne $in $nin $exists $all $regex`, geo `$nearSphere` and `$within`),
//! combined with `$and` / `$or`. Sub-queries (`$select $dontSelect $inQuery $notInQuery
//! $relatedTo`) are parsed here too but must be resolved into plain `$in` / `$nin` sets by the
//! coordinating node before the filter is sent to the shards (`Filter::sub_queries`).
//!
//! Comparisons: numbers with numbers, strings with strings, Dates (`{"__type":"Date","iso"}`)
//! with Dates and with `createdAt` / `updatedAt`, which compare as their ISO strings; Pointers
//! are equal when they name the same class and objectId. An array field satisfies an equality,
//! `$in` or `$regex` when one of its elements does (as in Parse). A missing field satisfies only
//! `$ne`, `$nin` and `$exists: false`.

use std::cmp::Ordering;

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::eval::{compare_values, lookup};
use crate::object::{parse_wire_time, query_time};

/// Largest compiled size of a `$regex` (bytes of the automaton).
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Longest `$regex` pattern, in bytes.
pub const REGEX_MAX_LEN: usize = 1000;
/// Earth's mean radius (GRS80, as `geo`'s haversine) used for `$nearSphere` distances.
pub const EARTH_RADIUS_KM: f64 = 6371.0088;
/// `$nearSphere` radius when the query gives none (spec 8).
pub const DEFAULT_NEAR_KM: f64 = 100.0;
/// Kilometres per mile.
pub const KM_PER_MILE: f64 = 1.609344;

#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
pub enum FilterError {
    #[error("invalid where: {0}")]
    Invalid(String),
}

fn invalid<T>(m: impl Into<String>) -> Result<T, FilterError> {
    Err(FilterError::Invalid(m.into()))
}

/// A point on the sphere, in degrees.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GeoPoint {
    pub latitude: f64,
    pub longitude: f64,
}

impl GeoPoint {
    /// From a `{"__type":"GeoPoint","latitude","longitude"}` value.
    pub fn from_value(v: &Value) -> Option<GeoPoint> {
        let m = v.as_object()?;
        if m.get("__type").and_then(Value::as_str) != Some("GeoPoint") {
            return None;
        }
        let p = GeoPoint {
            latitude: m.get("latitude")?.as_f64()?,
            longitude: m.get("longitude")?.as_f64()?,
        };
        ((-90.0..=90.0).contains(&p.latitude) && (-180.0..=180.0).contains(&p.longitude))
            .then_some(p)
    }

    /// Great-circle distance in radians: the haversine formula on the unit sphere, computed
    /// step for step as the `geo` crate computed it before it was dropped (decisions/0035).
    pub fn radians_to(&self, other: &GeoPoint) -> f64 {
        let theta1 = self.latitude.to_radians();
        let theta2 = other.latitude.to_radians();
        let delta_theta = (other.latitude - self.latitude).to_radians();
        let delta_lambda = (other.longitude - self.longitude).to_radians();
        let a = (delta_theta / 2.0).sin().powi(2)
            + theta1.cos() * theta2.cos() * (delta_lambda / 2.0).sin().powi(2);
        2.0 * a.sqrt().asin()
    }
}

/// A sub-query of `$inQuery` / `$notInQuery` / `$select` / `$dontSelect`: a class and its
/// `where` (no limit, skip, order or include).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubQuery {
    pub class: String,
    pub filter: Box<Filter>,
}

/// One condition on a field's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Cond {
    Eq(Value),
    Ne(Value),
    Lt(Value),
    Lte(Value),
    Gt(Value),
    Gte(Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exists(bool),
    All(Vec<Value>),
    /// Pattern and flags (`i`, `m`, `s`, `x`); compiled where it is evaluated.
    Regex {
        pattern: String,
        options: String,
    },
    /// Within `max_radians` of `point` (distance order is the planner's business).
    Near {
        point: GeoPoint,
        max_radians: f64,
    },
    /// Inside the box from south-west to north-east corner.
    WithinBox {
        sw: GeoPoint,
        ne: GeoPoint,
    },
    /// Pointers to objects matching the sub-query (unresolved).
    InQuery(SubQuery),
    NotInQuery(SubQuery),
    /// Values equal to `key` of an object matching the sub-query (unresolved).
    Select {
        key: String,
        query: SubQuery,
    },
    DontSelect {
        key: String,
        query: SubQuery,
    },
}

/// A `where` tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub enum Filter {
    /// Everything.
    #[default]
    All,
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Field {
        path: String,
        cond: Cond,
    },
    /// Objects that `key` relation of `class/object_id` holds (unresolved `$relatedTo`).
    RelatedTo {
        class: String,
        object_id: String,
        key: String,
    },
    /// Objects whose objectId is in the set (what `$relatedTo` resolves to).
    IdIn(Vec<String>),
}

fn number_or_date(v: &Value) -> bool {
    v.is_number() || v.is_string() || is_date(v)
}

fn is_date(v: &Value) -> bool {
    v.get("__type").and_then(Value::as_str) == Some("Date")
}

fn is_file(v: &Value) -> bool {
    v.get("__type").and_then(Value::as_str) == Some("File")
}

fn is_pointer(v: &Value) -> bool {
    v.get("__type").and_then(Value::as_str) == Some("Pointer")
}

/// The comparable form of a value: Dates become their ISO string (so they compare with
/// `createdAt`/`updatedAt`), Pointers their `className/objectId`, Files their `url`. Indexes
/// store values in this form too.
pub(crate) fn comparable(v: &Value) -> Value {
    if is_file(v) {
        return v.get("url").cloned().unwrap_or(Value::Null);
    }
    if is_date(v) {
        return v.get("iso").cloned().unwrap_or(Value::Null);
    }
    if is_pointer(v) {
        let class = v.get("className").and_then(Value::as_str).unwrap_or("");
        let id = v.get("objectId").and_then(Value::as_str).unwrap_or("");
        return Value::String(format!("{class}/{id}"));
    }
    v.clone()
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => compare_values(a, b) == Ordering::Equal,
        _ if is_pointer(a)
            || is_pointer(b)
            || is_date(a)
            || is_date(b)
            || is_file(a)
            || is_file(b) =>
        {
            comparable(a) == comparable(b)
        }
        _ => a == b,
    }
}

/// Compares only values of one kind (numbers, strings/Dates); `None` across kinds.
fn ordered(a: &Value, b: &Value) -> Option<Ordering> {
    let (a, b) = (comparable(a), comparable(b));
    match (&a, &b) {
        (Value::Number(_), Value::Number(_)) | (Value::String(_), Value::String(_)) => {
            Some(compare_values(&a, &b))
        }
        _ => None,
    }
}

fn array_of(v: &Value, op: &str) -> Result<Vec<Value>, FilterError> {
    match v {
        Value::Array(a) => Ok(a.clone()),
        _ => invalid(format!("{op} needs an array")),
    }
}

fn geo_arg(v: &Value, op: &str) -> Result<GeoPoint, FilterError> {
    GeoPoint::from_value(v).map_or_else(|| invalid(format!("{op} needs a valid GeoPoint")), Ok)
}

fn sub_query(v: &Value, op: &str) -> Result<SubQuery, FilterError> {
    let m = v
        .as_object()
        .ok_or_else(|| FilterError::Invalid(format!("{op} needs an object")))?;
    let class = m
        .get("className")
        .and_then(Value::as_str)
        .ok_or_else(|| FilterError::Invalid(format!("{op} needs className")))?;
    for k in m.keys() {
        if !["className", "where"].contains(&k.as_str()) {
            return invalid(format!("{op} accepts only className and where, not {k}"));
        }
    }
    let filter = match m.get("where") {
        None | Some(Value::Null) => Filter::All,
        Some(Value::Object(w)) => Filter::parse(w)?,
        Some(_) => return invalid(format!("{op}.where must be an object")),
    };
    Ok(SubQuery {
        class: class.to_string(),
        filter: Box::new(filter),
    })
}

fn select_arg(v: &Value, op: &str) -> Result<(String, SubQuery), FilterError> {
    let key = v
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| FilterError::Invalid(format!("{op} needs key")))?;
    let query = v
        .get("query")
        .ok_or_else(|| FilterError::Invalid(format!("{op} needs query")))?;
    Ok((key.to_string(), sub_query(query, op)?))
}

fn radians_from(ops: &Map<String, Value>) -> Result<f64, FilterError> {
    let num = |k: &str| -> Result<Option<f64>, FilterError> {
        match ops.get(k) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x >= 0.0 => Ok(Some(x)),
                _ => invalid(format!("{k} must be a non-negative number")),
            },
        }
    };
    Ok(if let Some(r) = num("$maxDistanceInRadians")? {
        r
    } else if let Some(km) = num("$maxDistanceInKilometers")? {
        km / EARTH_RADIUS_KM
    } else if let Some(mi) = num("$maxDistanceInMiles")? {
        mi * KM_PER_MILE / EARTH_RADIUS_KM
    } else if let Some(r) = num("$maxDistance")? {
        r
    } else {
        DEFAULT_NEAR_KM / EARTH_RADIUS_KM
    })
}

/// `v` with every Date (also inside arrays) rewritten to the stored wire form, so a
/// condition compares with stored Dates and `createdAt`/`updatedAt` as strings do.
fn stored_form(v: &Value) -> Result<Value, FilterError> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(stored_form)
            .collect::<Result<_, _>>()
            .map(Value::Array),
        _ if is_date(v) => {
            let iso = v.get("iso").and_then(Value::as_str).unwrap_or_default();
            let t = parse_wire_time(iso)
                .ok_or_else(|| FilterError::Invalid(format!("invalid Date {iso:?}")))?;
            Ok(serde_json::json!({"__type": "Date", "iso": query_time(t)}))
        }
        other => Ok(other.clone()),
    }
}

fn field_conds(v: &Value) -> Result<Vec<Cond>, FilterError> {
    let Some(ops) = v
        .as_object()
        .filter(|m| m.keys().any(|k| k.starts_with('$')))
    else {
        return Ok(vec![Cond::Eq(stored_form(v)?)]);
    };
    let mut out = Vec::new();
    let geo_modifiers = [
        "$maxDistance",
        "$maxDistanceInRadians",
        "$maxDistanceInKilometers",
        "$maxDistanceInMiles",
    ];
    for (op, arg) in ops {
        let arg = &stored_form(arg)?;
        let cond = match op.as_str() {
            "$lt" | "$lte" | "$gt" | "$gte" => {
                if !number_or_date(arg) {
                    return invalid(format!("{op} needs a number, string or Date"));
                }
                match op.as_str() {
                    "$lt" => Cond::Lt(arg.clone()),
                    "$lte" => Cond::Lte(arg.clone()),
                    "$gt" => Cond::Gt(arg.clone()),
                    _ => Cond::Gte(arg.clone()),
                }
            }
            "$ne" => Cond::Ne(arg.clone()),
            "$in" => Cond::In(array_of(arg, op)?),
            "$nin" => Cond::Nin(array_of(arg, op)?),
            "$all" => Cond::All(array_of(arg, op)?),
            "$exists" => match arg {
                Value::Bool(b) => Cond::Exists(*b),
                _ => return invalid("$exists needs true or false"),
            },
            "$regex" => {
                let pattern = arg
                    .as_str()
                    .ok_or_else(|| FilterError::Invalid("$regex needs a string".into()))?;
                let options = match ops.get("$options") {
                    None => String::new(),
                    Some(Value::String(o)) if o.chars().all(|c| "imsx".contains(c)) => o.clone(),
                    Some(_) => return invalid("$options may hold only i, m, s, x"),
                };
                compile(pattern, &options)?;
                Cond::Regex {
                    pattern: pattern.to_string(),
                    options,
                }
            }
            "$options" if ops.contains_key("$regex") => continue,
            "$nearSphere" => Cond::Near {
                point: geo_arg(arg, op)?,
                max_radians: radians_from(ops)?,
            },
            m if geo_modifiers.contains(&m) && ops.contains_key("$nearSphere") => continue,
            "$within" | "$geoWithin" => {
                let corners = arg
                    .get("$box")
                    .and_then(Value::as_array)
                    .filter(|a| a.len() == 2)
                    .ok_or_else(|| FilterError::Invalid("$within needs {$box: [sw, ne]}".into()))?;
                Cond::WithinBox {
                    sw: geo_arg(&corners[0], "$box")?,
                    ne: geo_arg(&corners[1], "$box")?,
                }
            }
            "$inQuery" => Cond::InQuery(sub_query(arg, op)?),
            "$notInQuery" => Cond::NotInQuery(sub_query(arg, op)?),
            "$select" => {
                let (key, query) = select_arg(arg, op)?;
                Cond::Select { key, query }
            }
            "$dontSelect" => {
                let (key, query) = select_arg(arg, op)?;
                Cond::DontSelect { key, query }
            }
            other => return invalid(format!("unknown operator {other}")),
        };
        out.push(cond);
    }
    Ok(out)
}

/// Compiles a `$regex` with its options, within the size limits (linear-time engine).
pub fn compile(pattern: &str, options: &str) -> Result<Regex, FilterError> {
    if pattern.len() > REGEX_MAX_LEN {
        return invalid(format!("$regex longer than {REGEX_MAX_LEN} bytes"));
    }
    RegexBuilder::new(pattern)
        .case_insensitive(options.contains('i'))
        .multi_line(options.contains('m'))
        .dot_matches_new_line(options.contains('s'))
        .ignore_whitespace(options.contains('x'))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| FilterError::Invalid(format!("$regex: {e}")))
}

impl Filter {
    /// Parses a `where` object. Top-level keys are ANDed; `$or` / `$and` take arrays of
    /// `where` objects; `$relatedTo` takes `{object: Pointer, key}`.
    pub fn parse(w: &Map<String, Value>) -> Result<Filter, FilterError> {
        let mut parts = Vec::new();
        for (k, v) in w {
            match k.as_str() {
                "$or" | "$and" => {
                    let subs = v
                        .as_array()
                        .ok_or_else(|| FilterError::Invalid(format!("{k} needs an array")))?
                        .iter()
                        .map(|s| match s {
                            Value::Object(m) => {
                                if let Some(bad) = ["limit", "skip", "order", "include", "keys"]
                                    .iter()
                                    .find(|p| m.contains_key(**p))
                                {
                                    return invalid(format!("{k} elements cannot hold {bad}"));
                                }
                                Filter::parse(m)
                            }
                            _ => invalid(format!("{k} elements must be objects")),
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    parts.push(if k == "$or" {
                        Filter::Or(subs)
                    } else {
                        Filter::And(subs)
                    });
                }
                "$relatedTo" => {
                    let object = v.get("object").filter(|o| is_pointer(o)).ok_or_else(|| {
                        FilterError::Invalid("$relatedTo needs object: Pointer".into())
                    })?;
                    let key = v
                        .get("key")
                        .and_then(Value::as_str)
                        .ok_or_else(|| FilterError::Invalid("$relatedTo needs key".into()))?;
                    parts.push(Filter::RelatedTo {
                        class: object["className"].as_str().unwrap_or_default().to_string(),
                        object_id: object["objectId"].as_str().unwrap_or_default().to_string(),
                        key: key.to_string(),
                    });
                }
                k if k.starts_with('$') => return invalid(format!("unknown operator {k}")),
                path => {
                    for cond in field_conds(v)? {
                        parts.push(Filter::Field {
                            path: path.to_string(),
                            cond,
                        });
                    }
                }
            }
        }
        Ok(match parts.len() {
            0 => Filter::All,
            1 => parts.remove(0),
            _ => Filter::And(parts),
        })
    }

    /// True when the filter still holds sub-queries the coordinator must resolve.
    pub fn sub_queries(&self) -> bool {
        match self {
            Filter::All | Filter::IdIn(_) => false,
            Filter::And(fs) | Filter::Or(fs) => fs.iter().any(Filter::sub_queries),
            Filter::RelatedTo { .. } => true,
            Filter::Field { cond, .. } => matches!(
                cond,
                Cond::InQuery(_)
                    | Cond::NotInQuery(_)
                    | Cond::Select { .. }
                    | Cond::DontSelect { .. }
            ),
        }
    }

    /// How many sub-queries the filter holds (nested ones included), each of which the
    /// coordinator runs as a scan of its own.
    pub fn sub_query_count(&self) -> usize {
        match self {
            Filter::All | Filter::IdIn(_) => 0,
            Filter::RelatedTo { .. } => 1,
            Filter::And(fs) | Filter::Or(fs) => fs.iter().map(Filter::sub_query_count).sum(),
            Filter::Field { cond, .. } => match cond {
                Cond::InQuery(q)
                | Cond::NotInQuery(q)
                | Cond::Select { query: q, .. }
                | Cond::DontSelect { query: q, .. } => 1 + q.filter.sub_query_count(),
                _ => 0,
            },
        }
    }

    /// True when some field condition's path satisfies `pred` (sub-queries included).
    pub fn any_path(&self, pred: &dyn Fn(&str) -> bool) -> bool {
        match self {
            Filter::All | Filter::IdIn(_) => false,
            Filter::RelatedTo { key, .. } => pred(key),
            Filter::And(fs) | Filter::Or(fs) => fs.iter().any(|f| f.any_path(pred)),
            Filter::Field { path, cond } => {
                pred(path)
                    || match cond {
                        Cond::InQuery(q) | Cond::NotInQuery(q) => q.filter.any_path(pred),
                        Cond::Select { key, query } | Cond::DontSelect { key, query } => {
                            pred(key) || query.filter.any_path(pred)
                        }
                        _ => false,
                    }
            }
        }
    }

    /// The `$nearSphere` point of the filter's top level, if any (its rows sort by distance
    /// unless the query orders them).
    pub fn near(&self) -> Option<(&str, GeoPoint)> {
        match self {
            Filter::Field {
                path,
                cond: Cond::Near { point, .. },
            } => Some((path.as_str(), *point)),
            Filter::And(fs) => fs.iter().find_map(Filter::near),
            _ => None,
        }
    }

    /// Whether only objects holding top-level `field` can match: some conjunct is a
    /// condition on it that an absent value never meets (equality, `$in`, a range,
    /// `$exists: true`, `$all`, a regex or a geo condition).
    pub fn needs_value(&self, field: &str) -> bool {
        match self {
            Filter::And(fs) => fs.iter().any(|f| f.needs_value(field)),
            Filter::Field { path, cond } if path == field => matches!(
                cond,
                Cond::Eq(_)
                    | Cond::In(_)
                    | Cond::Lt(_)
                    | Cond::Lte(_)
                    | Cond::Gt(_)
                    | Cond::Gte(_)
                    | Cond::Exists(true)
                    | Cond::All(_)
                    | Cond::Regex { .. }
                    | Cond::Near { .. }
                    | Cond::WithinBox { .. }
            ),
            _ => false,
        }
    }

    /// Compiles the filter's regexes once for evaluating many objects.
    pub fn prepare(&self) -> Result<Prepared<'_>, FilterError> {
        let mut regexes = Vec::new();
        self.collect_regexes(&mut regexes)?;
        Ok(Prepared {
            filter: self,
            regexes,
        })
    }

    fn collect_regexes(&self, out: &mut Vec<Regex>) -> Result<(), FilterError> {
        match self {
            Filter::And(fs) | Filter::Or(fs) => {
                for f in fs {
                    f.collect_regexes(out)?;
                }
            }
            Filter::Field {
                cond: Cond::Regex { pattern, options },
                ..
            } => out.push(compile(pattern, options)?),
            _ => {}
        }
        Ok(())
    }
}

/// A filter with its regexes compiled (in the order a depth-first walk meets them).
pub struct Prepared<'a> {
    filter: &'a Filter,
    regexes: Vec<Regex>,
}

impl<'a> Prepared<'a> {
    /// The filter it was prepared from.
    pub fn filter(&self) -> &'a Filter {
        self.filter
    }

    /// Whether a rendered object (with `objectId`, `createdAt`, `updatedAt`) matches.
    /// Unresolved sub-queries match nothing.
    pub fn matches(&self, object: &Value) -> bool {
        let mut next_regex = 0;
        eval(self.filter, object, &self.regexes, &mut next_regex)
    }
}

/// A filter with its regexes compiled, owning both: for a filter kept to judge objects long
/// after it was parsed (a realtime subscription's `where`).
#[derive(Debug)]
pub struct Matcher {
    filter: Filter,
    regexes: Vec<Regex>,
}

impl Matcher {
    pub fn new(filter: Filter) -> Result<Matcher, FilterError> {
        let mut regexes = Vec::new();
        filter.collect_regexes(&mut regexes)?;
        Ok(Matcher { filter, regexes })
    }

    /// As `Prepared::matches`.
    pub fn matches(&self, object: &Value) -> bool {
        let mut next_regex = 0;
        eval(&self.filter, object, &self.regexes, &mut next_regex)
    }
}

fn eval(f: &Filter, object: &Value, regexes: &[Regex], next: &mut usize) -> bool {
    match f {
        Filter::All => true,
        // Walk every branch so regex numbering stays aligned with `collect_regexes`.
        Filter::And(fs) => fs
            .iter()
            .map(|f| eval(f, object, regexes, next))
            .fold(true, |a, b| a & b),
        Filter::Or(fs) => fs
            .iter()
            .map(|f| eval(f, object, regexes, next))
            .fold(false, |a, b| a | b),
        Filter::IdIn(ids) => object
            .get("objectId")
            .and_then(Value::as_str)
            .is_some_and(|id| ids.iter().any(|i| i == id)),
        Filter::RelatedTo { .. } => false,
        Filter::Field { path, cond } => {
            let regex = if matches!(cond, Cond::Regex { .. }) {
                let r = regexes.get(*next);
                *next += 1;
                r
            } else {
                None
            };
            field_matches(lookup(object, path), cond, regex)
        }
    }
}

/// The value itself, or each element of an array value.
fn candidates(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) => a.iter().chain(std::iter::once(v)).collect(),
        other => vec![other],
    }
}

fn field_matches(v: Option<&Value>, cond: &Cond, regex: Option<&Regex>) -> bool {
    let any =
        |pred: &dyn Fn(&Value) -> bool| v.is_some_and(|v| candidates(v).into_iter().any(pred));
    match cond {
        Cond::Eq(want) => any(&|x| same(x, want)),
        Cond::Ne(want) => !any(&|x| same(x, want)),
        Cond::Lt(b) => any(&|x| ordered(x, b) == Some(Ordering::Less)),
        Cond::Lte(b) => any(&|x| matches!(ordered(x, b), Some(Ordering::Less | Ordering::Equal))),
        Cond::Gt(b) => any(&|x| ordered(x, b) == Some(Ordering::Greater)),
        Cond::Gte(b) => {
            any(&|x| matches!(ordered(x, b), Some(Ordering::Greater | Ordering::Equal)))
        }
        Cond::In(set) => any(&|x| set.iter().any(|w| same(x, w))),
        Cond::Nin(set) => !any(&|x| set.iter().any(|w| same(x, w))),
        Cond::Exists(want) => v.is_some_and(|v| !v.is_null()) == *want,
        Cond::All(set) => match v {
            Some(Value::Array(items)) => set.iter().all(|w| items.iter().any(|x| same(x, w))),
            _ => false,
        },
        Cond::Regex { .. } => {
            regex.is_some_and(|r| any(&|x| x.as_str().is_some_and(|s| r.is_match(s))))
        }
        Cond::Near { point, max_radians } => v
            .and_then(GeoPoint::from_value)
            .is_some_and(|p| point.radians_to(&p) <= *max_radians),
        Cond::WithinBox { sw, ne } => v.and_then(GeoPoint::from_value).is_some_and(|p| {
            (sw.latitude..=ne.latitude).contains(&p.latitude)
                && if sw.longitude <= ne.longitude {
                    (sw.longitude..=ne.longitude).contains(&p.longitude)
                } else {
                    // A box across the antimeridian.
                    p.longitude >= sw.longitude || p.longitude <= ne.longitude
                }
        }),
        Cond::InQuery(_) | Cond::NotInQuery(_) | Cond::Select { .. } | Cond::DontSelect { .. } => {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(w: Value) -> Filter {
        Filter::parse(w.as_object().unwrap()).unwrap()
    }

    fn hit(w: Value, o: Value) -> bool {
        parse(w).prepare().unwrap().matches(&o)
    }

    fn geo(lat: f64, lng: f64) -> Value {
        json!({"__type": "GeoPoint", "latitude": lat, "longitude": lng})
    }

    #[test]
    fn great_circle_distances_in_radians() {
        let p = |latitude, longitude| GeoPoint {
            latitude,
            longitude,
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert_eq!(p(10.0, 20.0).radians_to(&p(10.0, 20.0)), 0.0);
        assert!(close(
            p(0.0, 0.0).radians_to(&p(0.0, 90.0)),
            std::f64::consts::FRAC_PI_2
        ));
        assert!(close(
            p(0.0, 0.0).radians_to(&p(90.0, 0.0)),
            std::f64::consts::FRAC_PI_2
        ));
        assert!(close(
            p(0.0, -90.0).radians_to(&p(0.0, 90.0)),
            std::f64::consts::PI
        ));
        // Paris to London, 343.5 km on a sphere of 6,371 km.
        let km = p(48.8566, 2.3522).radians_to(&p(51.5074, -0.1278)) * 6371.0;
        assert!((km - 343.5).abs() < 0.5, "{km}");
        // Symmetric.
        let (a, b) = (p(-33.9, 151.2), p(40.7, -74.0));
        assert!(close(a.radians_to(&b), b.radians_to(&a)));
    }

    #[test]
    fn comparisons_on_numbers_strings_and_dates() {
        // Stored objects hold Dates and timestamps in the wire form; queries may use ISO 8601.
        let o = json!({"n": 5, "s": "m", "d": {"__type": "Date", "iso": "2026-01-02 00:00:00"},
                       "createdAt": "2026-03-01 10:00:00"});
        assert!(hit(json!({"n": {"$gt": 4, "$lte": 5}}), o.clone()));
        assert!(!hit(json!({"n": {"$lt": 5}}), o.clone()));
        assert!(hit(json!({"n": {"$gte": 4.5}}), o.clone()));
        assert!(hit(json!({"s": {"$gt": "a", "$lt": "z"}}), o.clone()));
        assert!(
            !hit(json!({"s": {"$gt": 1}}), o.clone()),
            "no order across kinds"
        );
        let date = |iso: &str| json!({"__type": "Date", "iso": iso});
        assert!(hit(
            json!({"d": {"$lt": date("2026-01-03T00:00:00.000Z")}}),
            o.clone()
        ));
        assert!(hit(
            json!({"createdAt": {"$gte": date("2026-03-01T10:00:00.000Z")}}),
            o.clone()
        ));
        assert!(!hit(
            json!({"createdAt": {"$gt": date("2026-03-01T10:00:00.000Z")}}),
            o.clone()
        ));
        assert!(hit(json!({"d": date("2026-01-02T00:00:00Z")}), o.clone()));
        assert!(hit(
            json!({"d": {"$in": [date("2026-01-02 00:00:00")]}}),
            o.clone()
        ));
        assert!(Filter::parse(json!({"d": {"$lt": date("soon")}}).as_object().unwrap()).is_err());
        assert!(hit(json!({"n": {"$ne": 4}}), o.clone()));
        assert!(hit(json!({"missing": {"$ne": 4}}), o.clone()));
        assert!(!hit(json!({"missing": {"$gt": 4}}), o));
    }

    #[test]
    fn sets_arrays_existence_and_pointers() {
        let ptr = |id: &str| json!({"__type": "Pointer", "className": "U", "objectId": id});
        let o = json!({"n": 2, "tags": ["a", "b"], "owner": ptr("x"), "nul": null});
        assert!(hit(json!({"n": {"$in": [1, 2]}}), o.clone()));
        assert!(hit(json!({"n": {"$nin": [1, 3]}}), o.clone()));
        assert!(
            hit(json!({"tags": "a"}), o.clone()),
            "an array holds the value"
        );
        assert!(hit(json!({"tags": {"$in": ["z", "b"]}}), o.clone()));
        assert!(hit(json!({"tags": {"$all": ["b", "a"]}}), o.clone()));
        assert!(!hit(json!({"tags": {"$all": ["a", "c"]}}), o.clone()));
        assert!(
            hit(json!({"tags": ["a", "b"]}), o.clone()),
            "whole-array equality"
        );
        assert!(hit(json!({"owner": ptr("x")}), o.clone()));
        assert!(!hit(json!({"owner": ptr("y")}), o.clone()));
        assert!(hit(
            json!({"owner": {"$in": [ptr("y"), ptr("x")]}}),
            o.clone()
        ));
        assert!(hit(
            json!({"n": {"$exists": true}, "gone": {"$exists": false}}),
            o.clone()
        ));
        assert!(hit(json!({"nul": {"$exists": false}}), o));
    }

    #[test]
    fn dot_paths_or_and() {
        let o = json!({"a": {"b": {"c": 3}}, "x": 1});
        assert!(hit(json!({"a.b.c": 3}), o.clone()));
        assert!(hit(
            json!({"$or": [{"x": 2}, {"a.b.c": {"$gt": 2}}]}),
            o.clone()
        ));
        assert!(!hit(
            json!({"$or": [{"x": 2}, {"a.b.c": {"$gt": 3}}]}),
            o.clone()
        ));
        assert!(hit(json!({"$and": [{"x": 1}, {"a.b.c": 3}]}), o.clone()));
        assert!(!hit(json!({"x": 1, "$and": [{"a.b.c": 4}]}), o));
    }

    #[test]
    fn regexes_are_linear_limited_and_aligned() {
        let o = json!({"name": "Basalt Rock", "tags": ["granite", "slate"]});
        assert!(hit(
            json!({"name": {"$regex": "^bas", "$options": "i"}}),
            o.clone()
        ));
        assert!(!hit(json!({"name": {"$regex": "^bas"}}), o.clone()));
        assert!(hit(json!({"tags": {"$regex": "^sl"}}), o.clone()));
        // Two regexes in different branches each use their own pattern.
        assert!(hit(
            json!({"$or": [{"name": {"$regex": "^x"}}, {"tags": {"$regex": "nite$"}}]}),
            o.clone()
        ));
        // The classic catastrophic pattern runs in linear time on a long input.
        let long = json!({"s": format!("{}!", "a".repeat(50_000))});
        assert!(!hit(json!({"s": {"$regex": "^(a+)+$"}}), long));
        for bad in [
            json!({"s": {"$regex": "("}}),
            json!({"s": {"$regex": "a".repeat(REGEX_MAX_LEN + 1)}}),
            json!({"s": {"$regex": "a", "$options": "g"}}),
            json!({"s": {"$regex": "\\w{1000}{1000}"}}),
        ] {
            assert!(Filter::parse(bad.as_object().unwrap()).is_err(), "{bad}");
        }
    }

    #[test]
    fn geo_near_and_box() {
        let sfo = geo(37.6189, -122.3750);
        let sf = json!({"loc": geo(37.7749, -122.4194)});
        let sacramento = json!({"loc": geo(38.5816, -121.4944)});
        let honolulu = json!({"loc": geo(21.3069, -157.8583)});
        let near = |km: f64| json!({"loc": {"$nearSphere": sfo, "$maxDistanceInKilometers": km}});
        assert!(hit(near(100.0), sf.clone()));
        assert!(!hit(near(100.0), sacramento.clone()));
        assert!(hit(near(3700.0), sacramento.clone()));
        assert!(!hit(near(3700.0), honolulu.clone()));
        assert!(hit(near(4800.0), honolulu.clone()));
        assert!(!hit(near(10.0), sf.clone()));
        assert!(
            hit(json!({"loc": {"$nearSphere": sfo}}), sf.clone()),
            "100 km default"
        );
        assert!(hit(
            json!({"loc": {"$nearSphere": sfo, "$maxDistanceInMiles": 70.0}}),
            sf.clone()
        ));
        let bx = json!({"loc": {"$within": {"$box": [geo(37.0, -123.0), geo(38.0, -122.0)]}}});
        assert!(hit(bx.clone(), sf));
        assert!(!hit(bx, sacramento));
        assert!(Filter::parse(
            json!({"loc": {"$nearSphere": geo(91.0, 0.0)}})
                .as_object()
                .unwrap()
        )
        .is_err());
    }

    #[test]
    fn sub_queries_parse_and_must_be_resolved() {
        let f = parse(
            json!({"post": {"$inQuery": {"className": "Post", "where": {"n": 1}}},
                             "$relatedTo": {"object": {"__type": "Pointer", "className": "P", "objectId": "x"}, "key": "likes"}}),
        );
        assert!(f.sub_queries());
        assert!(!f.prepare().unwrap().matches(&json!({"post": 1})));
        assert!(Filter::parse(
            json!({"a": {"$inQuery": {"className": "P", "limit": 3}}})
                .as_object()
                .unwrap()
        )
        .is_err());
        assert!(Filter::parse(
            json!({"a": {"$select": {"query": {"className": "P"}}}})
                .as_object()
                .unwrap()
        )
        .is_err());
        assert!(Filter::parse(json!({"a": {"$bogus": 1}}).as_object().unwrap()).is_err());
        assert!(Filter::parse(json!({"$or": {}}).as_object().unwrap()).is_err());
        assert!(
            Filter::parse(json!({"$or": [{"a": 1, "limit": 2}]}).as_object().unwrap()).is_err()
        );
        assert!(!parse(json!({"a": 1})).sub_queries());
    }
}
