//! The coordinator of a query: the node that received it asks every group that stores the
//! class (`ids::class_groups`) for its part concurrently (`shard_exec` runs there), merges the
//! shards' rows under the query's order (`merge`) or their partial groups (`aggregate`), and
//! resolves sub-queries first (`resolve`). Any shard that fails fails the query: results are
//! never silently partial.

use std::time::Duration;

use super::aggregate::{merge_partials, AggregateRequest, PartialGroup};
use super::merge::merge_rows;
use super::order::RowOrder;
use super::ScanRequest;
use crate::command::{ReadRequest, ReadResponse};
use crate::error::Result;
use crate::object::trim_query_times;
use crate::replicas::{unexpected, Replicas};

/// Runs queries through this node's replicas, each shard's part within `timeout`.
#[derive(Clone)]
pub struct Coordinator {
    pub(super) replicas: Replicas,
    /// Deadline of each shard's part (scans of large unindexed classes take seconds; point
    /// reads and writes keep the shorter forward deadline).
    timeout: Duration,
}

impl Coordinator {
    pub fn new(replicas: Replicas, timeout: Duration) -> Self {
        Coordinator { replicas, timeout }
    }

    /// Asks every group of `class` for its part of `req`, concurrently.
    async fn scatter(&self, class: &str, req: ReadRequest) -> Result<Vec<ReadResponse>> {
        let reads = self
            .replicas
            .class_groups(class)
            .into_iter()
            .map(|g| self.replicas.read_within(g, req.clone(), self.timeout));
        futures::future::join_all(reads).await.into_iter().collect()
    }

    /// A scan of a class: the page of rows under the order, skip and limit, and how many
    /// objects match in all.
    pub async fn scan(&self, req: ScanRequest) -> Result<(Vec<serde_json::Value>, u64)> {
        let answers = self
            .scatter(&req.class, ReadRequest::ScanObjects(req.clone()))
            .await?;
        let mut shards = Vec::with_capacity(answers.len());
        let mut count = 0;
        for answer in answers {
            match answer {
                ReadResponse::Scan { rows, count: c } => {
                    shards.push(rows);
                    count += c;
                }
                other => return Err(unexpected(other)),
            }
        }
        let order = RowOrder::new(&req.order, &req.filter);
        let mut rows = merge_rows(shards, &order, req.skip, req.limit);
        rows.iter_mut().for_each(trim_query_times);
        Ok((rows, count))
    }

    /// An aggregation of a class: every shard's partial groups, merged.
    pub async fn aggregate(&self, req: AggregateRequest) -> Result<Vec<PartialGroup>> {
        let answers = self
            .scatter(&req.class, ReadRequest::Aggregate(req.clone()))
            .await?;
        let mut shards = Vec::with_capacity(answers.len());
        for answer in answers {
            match answer {
                ReadResponse::Groups(groups) => shards.push(groups),
                other => return Err(unexpected(other)),
            }
        }
        merge_partials(shards)
    }
}
