//! The query engine: shard-local scans and their merge (the coordinator that runs them across
//! the shards is `services::queries`).
//!
//! A scan runs on each data shard (`shard_exec`): it filters the shard's objects of one class,
//! sorts them and keeps the first `skip + limit`; the coordinating node merges the shards'
//! rows under the same order (`merge`) and applies skip and limit once. Counts add up. The
//! `where` is a `filter::Filter`; its sub-queries run first on the coordinator (`services::queries::resolve`).
//! Aggregations fold per shard and merge on the coordinator (`aggregate`).

pub mod aggregate;
pub mod eval;
pub mod filter;
pub mod index;
pub mod merge;
pub mod order;
pub mod plan;
pub mod shard_exec;
pub mod tally;

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::acl::Principals;
use crate::names::{AppId, ClassName};

/// One sort key: a field name and its direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SortKey {
    pub field: String,
    pub descending: bool,
}

/// A scan of one class on one shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanRequest {
    pub app: AppId,
    pub class: ClassName,
    /// The `where` every returned object satisfies, its sub-queries already resolved.
    #[serde(default)]
    pub filter: filter::Filter,
    pub order: Vec<SortKey>,
    pub skip: usize,
    pub limit: usize,
    /// The caller's principals: objects they may not read are skipped before counting and
    /// paging. The master's see everything.
    #[serde(
        default = "Principals::master",
        skip_serializing_if = "Principals::is_master"
    )]
    pub principals: Principals,
    /// Whether every match must be counted (`count=1`). Without it a shard stops once it has
    /// its rows, and the count it answers is meaningless. Absent (an older node): counted.
    #[serde(default = "counted")]
    pub count: bool,
    /// The fields the answer keeps (`keys`; a dotted key keeps its top-level field): each
    /// shard decodes and renders only these, the order's and the reserved ones. Empty (and
    /// from an older node): whole objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

fn counted() -> bool {
    true
}

impl ScanRequest {
    /// The top-level fields each row must keep (`keys` and what the rows are merged by: the
    /// order's fields, or without them a `$nearSphere`'s), or `None` for all.
    pub fn kept_fields(&self) -> Option<HashSet<&str>> {
        if self.keys.is_empty() {
            return None;
        }
        let near = match self.order.is_empty() {
            true => self.filter.near().map(|(path, _)| path),
            false => None,
        };
        Some(
            self.keys
                .iter()
                .map(String::as_str)
                .chain(self.order.iter().map(|k| k.field.as_str()))
                .chain(near)
                .map(|f| f.split('.').next().unwrap_or(f))
                .collect(),
        )
    }

    /// Parses an `order` parameter: `a,-b` sorts by a ascending, then b descending.
    pub fn parse_order(order: &str) -> Vec<SortKey> {
        order
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| match s.strip_prefix('-') {
                Some(f) => SortKey {
                    field: f.to_string(),
                    descending: true,
                },
                None => SortKey {
                    field: s.trim_start_matches('+').to_string(),
                    descending: false,
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(w: serde_json::Value, order: &str, keys: &[&str]) -> ScanRequest {
        ScanRequest {
            app: "a".into(),
            class: "C".into(),
            filter: filter::Filter::parse(w.as_object().unwrap()).unwrap(),
            order: ScanRequest::parse_order(order),
            skip: 0,
            limit: 10,
            principals: Principals::master(),
            count: false,
            keys: keys.iter().map(|k| k.to_string()).collect(),
        }
    }

    /// Rows keep what the coordinator merges them by: the order's fields, or without an
    /// order the `$nearSphere` point (rows are merged nearest first).
    #[test]
    fn kept_fields_hold_what_rows_are_merged_by() {
        let near =
            json!({"at": {"$nearSphere": {"__type": "GeoPoint", "latitude": 0, "longitude": 0}}});
        let kept = |w: &serde_json::Value, order: &str, keys: &[&str]| {
            let req = request(w.clone(), order, keys);
            let mut kept: Vec<String> = req
                .kept_fields()
                .map(|k| k.into_iter().map(str::to_string).collect())
                .unwrap_or_default();
            kept.sort();
            kept
        };
        assert_eq!(kept(&near, "", &["rank"]), ["at", "rank"]);
        assert_eq!(kept(&near, "-score", &["rank"]), ["rank", "score"]);
        assert_eq!(kept(&json!({}), "a.b", &["c.d"]), ["a", "c"]);
        assert!(request(near, "", &[]).kept_fields().is_none());
    }
}
