//! The coordinator of a query: the node that received it asks every group that stores the
//! class (`ids::class_groups`) for its part concurrently — the groups one node leads in one
//! read there (`shard_exec` runs there, over those groups together) — merges the
//! shards' rows under the query's order (`merge`) or their partial groups (`aggregate`), and
//! resolves sub-queries first (`resolve`). Any shard that fails fails the query: results are
//! never silently partial.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::aggregate::{merge_partials, AggregateRequest, PartialGroup};
use super::merge::merge_rows;
use super::order::RowOrder;
use super::ScanRequest;
use crate::command::{ReadRequest, ReadResponse};
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId};
use crate::object::trim_query_times;
use crate::replicas::{unexpected, Attempts, Replicas};

/// Runs queries through this node's replicas, each shard's part within `timeout`.
#[derive(Clone)]
pub struct Coordinator {
    pub(super) replicas: Replicas,
    /// Deadline of each shard's part (scans of large unindexed classes take seconds; point
    /// reads and writes keep the shorter forward deadline).
    timeout: Duration,
    /// Queries this node runs now (`admit`), and how many it may.
    in_flight: Arc<AtomicUsize>,
    max_in_flight: usize,
}

/// A query's place among those the node runs (`Coordinator::admit`), given back when dropped.
pub struct QuerySlot(Arc<AtomicUsize>);

impl Drop for QuerySlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Coordinator {
    pub fn new(replicas: Replicas, timeout: Duration, max_in_flight: usize) -> Self {
        Coordinator {
            replicas,
            timeout,
            in_flight: Arc::default(),
            max_in_flight: max_in_flight.max(1),
        }
    }

    /// A place for one more query (its sub-queries, scans and aggregation included), or
    /// `Overloaded` when the node already runs as many as it may: a node sheds queries it
    /// could only queue behind the others instead of letting them all slow down to timeouts.
    pub fn admit(&self) -> Result<QuerySlot> {
        let before = self.in_flight.fetch_add(1, Ordering::Relaxed);
        let slot = QuerySlot(Arc::clone(&self.in_flight));
        if before >= self.max_in_flight {
            metrics::counter!("basalt_queries_shed_total").increment(1);
            return Err(Error::Overloaded(format!(
                "{} queries already run on this node",
                self.max_in_flight
            )));
        }
        Ok(slot)
    }

    /// Asks every group of `class` for its part of `req`, concurrently: the groups one node
    /// leads (as this node last heard) in one read served from one snapshot there; each group
    /// alone, through the routing loop, when its leader is unknown or that read failed in a
    /// way a retry may cure (a leader changed).
    async fn scatter(&self, class: &str, req: ReadRequest) -> Result<Vec<ReadResponse>> {
        let mut by_leader: BTreeMap<Option<NodeId>, Vec<GroupId>> = BTreeMap::new();
        for g in self.replicas.class_groups(class) {
            by_leader
                .entry(self.replicas.leader_of(g))
                .or_default()
                .push(g);
        }
        let deadline = Instant::now() + self.timeout;
        let parts = by_leader
            .into_iter()
            .map(|(leader, groups)| self.read_part(leader, groups, &req, deadline));
        // The first part to fail answers the query: the others are dropped, which cancels
        // their reads on every node (`cancel`).
        let answers = futures::future::try_join_all(parts).await?;
        Ok(answers.into_iter().flatten().collect())
    }

    /// The answers of `groups`, whose leader is thought to be `leader`, by `deadline`.
    async fn read_part(
        &self,
        leader: Option<NodeId>,
        groups: Vec<GroupId>,
        req: &ReadRequest,
        deadline: Instant,
    ) -> Result<Vec<ReadResponse>> {
        if let Some(node) = leader.filter(|_| groups.len() > 1) {
            match self
                .replicas
                .read_groups_at(node, &groups, req, self.timeout)
                .await
            {
                Ok(answer) => return Ok(vec![answer]),
                Err(e) if Attempts::Idempotent.may_retry(&e) => {
                    tracing::debug!(%node, "groups read one by one after: {e}");
                }
                Err(e) => return Err(e),
            }
        }
        // What is left of the query's time (a failed batch already used some).
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        let reads = groups
            .into_iter()
            .map(|g| self.replicas.read_within(g, req.clone(), left));
        futures::future::try_join_all(reads).await
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
