//! Aggregation queries (spec 4.4): `sum average max min groupby groupcount having`.
//!
//! Each shard folds its matching objects into partial groups (`fold_partial`): per group key, the
//! object count and, per aggregated column, the exact sum (integers in an `i128`, others in an
//! `f64`), the count of numeric values, the minimum and the maximum. The coordinating node adds
//! the shards' partials group by group (`merge_partials`) and only then computes averages,
//! applies `having`, `order`, `skip` and `limit` over the result rows (`finish`), so the result
//! equals a computation over all objects at once. Time columns (Dates, `createdAt`,
//! `updatedAt`) group by day, `YYYY-mm-dd`.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::eval::{compare_values, lookup};
use super::filter::Filter;
use super::order::RowOrder;
use super::SortKey;
use crate::acl::Principals;
use crate::error::{Error, Result};
use crate::names::{AppId, ClassName};

/// Most groups an aggregation may produce (per shard and merged).
pub const MAX_GROUPS: usize = 100_000;

/// An aggregate function of one column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Metric {
    Sum,
    Average,
    Max,
    Min,
}

impl Metric {
    fn prefix(self) -> &'static str {
        match self {
            Metric::Sum => "_sum",
            Metric::Average => "_avg",
            Metric::Max => "_max",
            Metric::Min => "_min",
        }
    }

    /// The result column of this metric over `column` (`_sumScore` for `score`).
    pub fn column_name(self, column: &str) -> String {
        let mut chars = column.chars();
        let capital: String = chars
            .next()
            .map(|c| c.to_uppercase().chain(chars).collect())
            .unwrap_or_default();
        format!("{}{capital}", self.prefix())
    }
}

/// What to aggregate: group columns, metrics, and whether to count each group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AggregateSpec {
    pub group_by: Vec<String>,
    pub metrics: Vec<(Metric, String)>,
    pub group_count: bool,
}

impl AggregateSpec {
    /// The distinct columns the metrics read, in first-use order.
    pub fn columns(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, c) in &self.metrics {
            if !out.contains(c) {
                out.push(c.clone());
            }
        }
        out
    }
}

/// The aggregation a shard runs over its objects of one class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AggregateRequest {
    pub app: AppId,
    pub class: ClassName,
    #[serde(default)]
    pub filter: Filter,
    pub spec: AggregateSpec,
    #[serde(
        default = "Principals::master",
        skip_serializing_if = "Principals::is_master"
    )]
    pub principals: Principals,
}

/// A column's partial aggregate on one shard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ColumnPartial {
    /// Sum of the integer values.
    pub int_sum: i128,
    /// Sum of the other numeric values.
    pub float_sum: f64,
    /// How many values were numbers (the divisor of the average).
    pub numbers: u64,
    /// True when some number was not an integer.
    pub fractional: bool,
    pub min: Option<Value>,
    pub max: Option<Value>,
}

impl ColumnPartial {
    fn add(&mut self, v: &Value) {
        if v.is_null() {
            return;
        }
        if let Value::Number(n) = v {
            match n.as_i64() {
                Some(i) => self.int_sum += i128::from(i),
                None => {
                    self.float_sum += n.as_f64().unwrap_or(0.0);
                    self.fractional = true;
                }
            }
            self.numbers += 1;
        }
        // Min and max over scalars and Dates; other objects and arrays have no order.
        let orderable = match v {
            Value::Array(_) => false,
            Value::Object(m) => m.contains_key("iso"),
            _ => true,
        };
        if orderable {
            self.add_extreme(v);
        }
    }

    fn merge(&mut self, other: ColumnPartial) {
        self.int_sum += other.int_sum;
        self.float_sum += other.float_sum;
        self.numbers += other.numbers;
        self.fractional |= other.fractional;
        for v in other.min.iter().chain(other.max.iter()) {
            self.add_extreme(v);
        }
    }

    fn add_extreme(&mut self, v: &Value) {
        if self
            .min
            .as_ref()
            .is_none_or(|m| compare_values(v, m) == Ordering::Less)
        {
            self.min = Some(v.clone());
        }
        if self
            .max
            .as_ref()
            .is_none_or(|m| compare_values(v, m) == Ordering::Greater)
        {
            self.max = Some(v.clone());
        }
    }

    fn sum(&self) -> Value {
        if self.fractional {
            number(self.int_sum as f64 + self.float_sum)
        } else {
            i64::try_from(self.int_sum)
                .map(Value::from)
                .unwrap_or_else(|_| number(self.int_sum as f64))
        }
    }

    fn average(&self) -> Value {
        if self.numbers == 0 {
            return Value::Null;
        }
        number((self.int_sum as f64 + self.float_sum) / self.numbers as f64)
    }
}

fn number(f: f64) -> Value {
    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// One group's partial aggregate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PartialGroup {
    /// The group's values, one per `group_by` column.
    pub key: Vec<Value>,
    pub count: u64,
    /// One per column of `AggregateSpec::columns`.
    pub columns: Vec<ColumnPartial>,
}

/// The value an object contributes to a group column: time values by day.
fn group_value<'o>(object: &'o Value, column: &str) -> Cow<'o, Value> {
    let Some(v) = lookup(object, column) else {
        return Cow::Owned(Value::Null);
    };
    let day = |s: &str| Cow::Owned(Value::String(s.get(..10).unwrap_or(s).to_string()));
    match v {
        Value::String(s) if column == "createdAt" || column == "updatedAt" => day(s),
        Value::Object(m) if m.get("__type").and_then(Value::as_str) == Some("Date") => m
            .get("iso")
            .and_then(Value::as_str)
            .map_or(Cow::Owned(Value::Null), day),
        _ => Cow::Borrowed(v),
    }
}

/// Folds matching objects into groups, as one shard does.
#[derive(Debug, Default)]
pub struct Folder {
    /// Each group's place in `groups`, by the group's values written as one JSON array.
    index: BTreeMap<String, usize>,
    groups: Vec<PartialGroup>,
    /// The last group values as JSON, reused: finding a known group allocates nothing.
    id: Vec<u8>,
}

impl Folder {
    pub fn add(&mut self, spec: &AggregateSpec, columns: &[String], object: &Value) -> Result<()> {
        self.id.clear();
        self.id.push(b'[');
        for (i, c) in spec.group_by.iter().enumerate() {
            if i > 0 {
                self.id.push(b',');
            }
            serde_json::to_writer(&mut self.id, group_value(object, c).as_ref())?;
        }
        self.id.push(b']');
        let g = self.group(columns.len(), || {
            spec.group_by
                .iter()
                .map(|c| group_value(object, c).into_owned())
                .collect()
        })?;
        g.fold(columns, object);
        Ok(())
    }

    /// Adds `n` objects to the group of `value`, for an aggregation by one column without
    /// metrics (`shard_exec` counts them from the column's index entries).
    pub fn add_counted(&mut self, value: Value, n: u64) -> Result<()> {
        self.id.clear();
        self.id.push(b'[');
        serde_json::to_writer(&mut self.id, &value)?;
        self.id.push(b']');
        self.group(0, || vec![value])?.count += n;
        Ok(())
    }

    /// The group whose values `self.id` holds, made from `key` when new.
    fn group(
        &mut self,
        columns: usize,
        key: impl FnOnce() -> Vec<Value>,
    ) -> Result<&mut PartialGroup> {
        let id = std::str::from_utf8(&self.id)
            .map_err(|_| Error::Internal("a group key is not UTF-8".into()))?;
        let at = match self.index.get(id) {
            Some(&at) => at,
            None => {
                if self.groups.len() >= MAX_GROUPS {
                    return Err(too_many_groups());
                }
                self.index.insert(id.to_string(), self.groups.len());
                self.groups.push(PartialGroup {
                    key: key(),
                    count: 0,
                    columns: vec![ColumnPartial::default(); columns],
                });
                self.groups.len() - 1
            }
        };
        self.groups
            .get_mut(at)
            .ok_or_else(|| Error::Internal("a group went missing".into()))
    }

    /// The groups in the order of their values' JSON.
    pub fn into_partials(self) -> Vec<PartialGroup> {
        let mut groups: Vec<Option<PartialGroup>> = self.groups.into_iter().map(Some).collect();
        self.index
            .values()
            .filter_map(|&at| groups.get_mut(at).and_then(Option::take))
            .collect()
    }
}

impl PartialGroup {
    fn fold(&mut self, columns: &[String], object: &Value) {
        self.count += 1;
        for (c, partial) in columns.iter().zip(self.columns.iter_mut()) {
            if let Some(v) = lookup(object, c) {
                partial.add(v);
            }
        }
    }
}

pub(crate) fn too_many_groups() -> Error {
    Error::InvalidValue(format!("the aggregation has more than {MAX_GROUPS} groups"))
}

/// Adds the shards' partial groups together, group by group.
pub fn merge_partials(shards: Vec<Vec<PartialGroup>>) -> Result<Vec<PartialGroup>> {
    let mut merged: BTreeMap<String, PartialGroup> = BTreeMap::new();
    for g in shards.into_iter().flatten() {
        let id = serde_json::to_string(&g.key)?;
        match merged.get_mut(&id) {
            Some(m) => {
                m.count += g.count;
                for (a, b) in m.columns.iter_mut().zip(g.columns) {
                    a.merge(b);
                }
            }
            None => {
                if merged.len() >= MAX_GROUPS {
                    return Err(too_many_groups());
                }
                merged.insert(id, g);
            }
        }
    }
    Ok(merged.into_values().collect())
}

/// The result rows of merged groups: group columns, metric columns and `_count`, filtered by
/// `having`, ordered (by the group columns when `order` is empty), then `skip` and `limit`.
/// Without `groupby` there is one row even when nothing matched.
pub fn finish(
    spec: &AggregateSpec,
    groups: Vec<PartialGroup>,
    having: &Filter,
    order: &[SortKey],
    skip: usize,
    limit: usize,
) -> Result<Vec<Value>> {
    let columns = spec.columns();
    let mut groups = groups;
    if groups.is_empty() && spec.group_by.is_empty() {
        groups.push(PartialGroup {
            key: Vec::new(),
            count: 0,
            columns: vec![ColumnPartial::default(); columns.len()],
        });
    }
    let having = having
        .prepare()
        .map_err(|e| Error::InvalidValue(e.to_string()))?;
    let mut rows: Vec<Value> = Vec::with_capacity(groups.len());
    for g in groups {
        let mut row = Map::new();
        for (c, v) in spec.group_by.iter().zip(g.key) {
            row.insert(c.clone(), v);
        }
        for (metric, column) in &spec.metrics {
            let Some(i) = columns.iter().position(|c| c == column) else {
                continue;
            };
            let p = &g.columns[i];
            let v = match metric {
                Metric::Sum => p.sum(),
                Metric::Average => p.average(),
                Metric::Max => p.max.clone().unwrap_or(Value::Null),
                Metric::Min => p.min.clone().unwrap_or(Value::Null),
            };
            row.insert(metric.column_name(column), v);
        }
        if spec.group_count {
            row.insert("_count".into(), Value::from(g.count));
        }
        let row = Value::Object(row);
        if having.matches(&row) {
            rows.push(row);
        }
    }
    let keys: Vec<SortKey> = if order.is_empty() {
        spec.group_by
            .iter()
            .map(|c| SortKey {
                field: c.clone(),
                descending: false,
            })
            .collect()
    } else {
        order.to_vec()
    };
    let order = RowOrder::new(&keys, &Filter::All);
    rows.sort_by(|a, b| order.compare(a, b));
    Ok(rows.into_iter().skip(skip).take(limit).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> AggregateSpec {
        AggregateSpec {
            group_by: vec!["team".into()],
            metrics: vec![
                (Metric::Sum, "score".into()),
                (Metric::Average, "score".into()),
                (Metric::Max, "score".into()),
                (Metric::Min, "when".into()),
            ],
            group_count: true,
        }
    }

    fn fold(objects: &[Value]) -> Vec<PartialGroup> {
        let s = spec();
        let cols = s.columns();
        let mut f = Folder::default();
        for o in objects {
            f.add(&s, &cols, o).unwrap();
        }
        f.into_partials()
    }

    fn date(iso: &str) -> Value {
        json!({"__type": "Date", "iso": iso})
    }

    #[test]
    fn partials_from_shards_merge_into_exact_results() {
        let a = fold(&[
            json!({"team": "red", "score": 3, "when": date("2026-01-02 10:00:00")}),
            json!({"team": "blue", "score": 1.5}),
        ]);
        let b = fold(&[
            json!({"team": "red", "score": 4, "when": date("2026-01-01 09:00:00")}),
            json!({"team": "red"}),
            json!({"team": "blue", "score": 2}),
        ]);
        let merged = merge_partials(vec![a, b]).unwrap();
        let rows = finish(&spec(), merged, &Filter::All, &[], 0, 100).unwrap();
        assert_eq!(
            rows,
            vec![
                json!({"team": "blue", "_sumScore": 3.5, "_avgScore": 1.75, "_maxScore": 2,
                       "_minWhen": null, "_count": 2}),
                json!({"team": "red", "_sumScore": 7, "_avgScore": 3.5, "_maxScore": 4,
                       "_minWhen": date("2026-01-01 09:00:00"), "_count": 3}),
            ]
        );
    }

    #[test]
    fn having_order_skip_limit_and_days() {
        let s = AggregateSpec {
            group_by: vec!["createdAt".into()],
            metrics: vec![],
            group_count: true,
        };
        let mut f = Folder::default();
        for t in [
            "2026-01-01 10:00:00.000",
            "2026-01-01 23:59:59.999",
            "2026-01-02 00:00:00.000",
        ] {
            f.add(&s, &[], &json!({"createdAt": t})).unwrap();
        }
        let groups = merge_partials(vec![f.into_partials()]).unwrap();
        let having = Filter::parse(json!({"_count": {"$gt": 1}}).as_object().unwrap()).unwrap();
        let rows = finish(&s, groups.clone(), &having, &[], 0, 10).unwrap();
        assert_eq!(rows, vec![json!({"createdAt": "2026-01-01", "_count": 2})]);
        let order = crate::query::ScanRequest::parse_order("-createdAt");
        let rows = finish(&s, groups, &Filter::All, &order, 1, 1).unwrap();
        assert_eq!(rows, vec![json!({"createdAt": "2026-01-01", "_count": 2})]);
    }

    #[test]
    fn no_group_gives_one_row_and_names_capitalize() {
        let s = AggregateSpec {
            group_by: vec![],
            metrics: vec![(Metric::Sum, "score".into()), (Metric::Max, "score".into())],
            group_count: true,
        };
        let rows = finish(&s, vec![], &Filter::All, &[], 0, 10).unwrap();
        assert_eq!(
            rows,
            vec![json!({"_sumScore": 0, "_maxScore": null, "_count": 0})]
        );
        assert_eq!(Metric::Average.column_name("élan"), "_avgÉlan");
    }
}
