//! Building a query from the REST parameters of spec 4.3 and 4.4 (`where`, `order`, `skip`,
//! `limit`, `count`, `keys`, `include`, and the aggregate ones): `ListParams::query`. Callers:
//! `api::objects` (listings of any class), `api::users` and `api::roles`.

use basalt_cluster::query::aggregate::{AggregateSpec, Metric};
use basalt_cluster::query::filter::Filter;
use basalt_cluster::query::ScanRequest;
use serde::Deserialize;
use serde_json::Value;

use super::projection::{parse_include, parse_keys};
use super::{add_metrics, Aggregation, Query, QueryError};

#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    #[serde(rename = "where")]
    filter: Option<String>,
    limit: Option<String>,
    skip: Option<String>,
    order: Option<String>,
    count: Option<String>,
    include: Option<String>,
    keys: Option<String>,
    groupby: Option<String>,
    groupcount: Option<String>,
    sum: Option<String>,
    average: Option<String>,
    max: Option<String>,
    min: Option<String>,
    having: Option<String>,
}

fn parse_count(name: &str, v: &Option<String>) -> Result<Option<usize>, QueryError> {
    v.as_deref()
        .map(|s| {
            s.trim()
                .parse::<u64>()
                .ok()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    QueryError::Invalid(format!("{name} must be a non-negative integer."))
                })
        })
        .transpose()
}

/// Levels of objects and arrays a `where` or `having` parameter may nest.
pub const MAX_FILTER_DEPTH: usize = 64;

/// A JSON-object parameter (`where`, `having`) as a filter; absent or empty is no filter.
fn filter_param(name: &str, v: &Option<String>) -> Result<Filter, QueryError> {
    let Some(text) = v.as_deref().map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(Filter::All);
    };
    crate::json_text::check(text.as_bytes(), MAX_FILTER_DEPTH)
        .map_err(|e| QueryError::Invalid(format!("{name}: {e}.")))?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Filter::parse(&m).map_err(|e| QueryError::Invalid(e.to_string())),
        Ok(_) => Err(QueryError::Invalid(format!(
            "{name} must be a JSON object."
        ))),
        Err(e) => Err(QueryError::Invalid(format!(
            "{name} is not valid JSON: {e}."
        ))),
    }
}

impl ListParams {
    /// The query the parameters of spec 4.3 and 4.4 describe.
    pub fn query(&self, class: &str) -> Result<Query, QueryError> {
        let p = self;
        let mut spec = AggregateSpec {
            group_by: parse_keys(p.groupby.as_deref().unwrap_or("")),
            group_count: matches!(p.groupcount.as_deref().map(str::trim), Some("true" | "1")),
            ..Default::default()
        };
        for (metric, v) in [
            (Metric::Sum, &p.sum),
            (Metric::Average, &p.average),
            (Metric::Max, &p.max),
            (Metric::Min, &p.min),
        ] {
            add_metrics(&mut spec, metric, v.as_deref().unwrap_or(""));
        }
        let aggregated = !spec.group_by.is_empty() || spec.group_count || !spec.metrics.is_empty();
        if p.having.is_some() && !aggregated {
            return Err(QueryError::Invalid(
                "having needs groupby, groupcount or an aggregate.".into(),
            ));
        }
        Ok(Query {
            class: class.to_string(),
            filter: filter_param("where", &p.filter)?,
            order: ScanRequest::parse_order(p.order.as_deref().unwrap_or("")),
            skip: parse_count("skip", &p.skip)?.unwrap_or(0),
            limit: parse_count("limit", &p.limit)?,
            count: p.count.as_deref() == Some("1"),
            keys: parse_keys(p.keys.as_deref().unwrap_or("")),
            include: parse_include(p.include.as_deref().unwrap_or(""))?,
            aggregation: if aggregated {
                Some(Aggregation {
                    spec,
                    having: filter_param("having", &p.having)?,
                })
            } else {
                None
            },
            max_limit: None,
        })
    }
}
