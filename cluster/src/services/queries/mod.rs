//! The coordinator of a query: the node that received it asks every group that stores the
//! class (`ids::class_groups`) for its part concurrently — the groups one node leads in one
//! read there (`shard_exec` runs there, over those groups together) — merges the
//! shards' rows under the query's order (`merge`) or their partial groups (`aggregate`), and
//! resolves sub-queries first (`resolve`). A scan asks each node for about its share of the
//! page, and asks again the rare node that held more. Any shard that fails fails the query:
//! results are never silently partial.

mod resolve;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::command::{ReadRequest, ReadResponse};
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId};
use crate::object::trim_query_times;
use crate::query::aggregate::{merge_partials, AggregateRequest, PartialGroup};
use crate::query::merge::merge_rows;
use crate::query::order::RowOrder;
use crate::query::ScanRequest;
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

    /// Asks every group of `class` for its part of `req` (`scatter_groups`).
    /// The groups are those of the slot map this node routes by, and the read carries its
    /// epoch; a group that dropped objects this map still routes to it (a split's,
    /// decisions/0038) refuses it `Moved`, and it is asked again by each newer map
    /// (`Replicas::by_newest_map`).
    async fn scatter(&self, class: &str, req: ReadRequest) -> Result<Vec<ReadResponse>> {
        let once = || async {
            let (epoch, groups) = self.replicas.class_groups_at(class);
            let req = req.clone().at_epoch(epoch);
            let answers = self.scatter_groups(groups, |_| req.clone()).await?;
            Ok::<_, Error>(answers.into_iter().map(|a| a.response).collect())
        };
        self.replicas.by_newest_map(once).await
    }

    /// Asks `groups` for their parts, concurrently: the groups one node leads (as this node
    /// last heard) in one read of `request(n)` (`n` of them) served from one snapshot there;
    /// each group alone, through the routing loop, when its leader is unknown or that read
    /// failed in a way a retry may cure (a leader changed).
    async fn scatter_groups(
        &self,
        groups: Vec<GroupId>,
        request: impl Fn(usize) -> ReadRequest,
    ) -> Result<Vec<PartAnswer>> {
        let mut by_leader: BTreeMap<Option<NodeId>, Vec<GroupId>> = BTreeMap::new();
        for g in groups {
            by_leader
                .entry(self.replicas.leader_of(g))
                .or_default()
                .push(g);
        }
        let deadline = Instant::now() + self.timeout;
        let parts = by_leader.into_iter().map(|(leader, groups)| {
            let req = request(groups.len());
            async move { self.read_part(leader, groups, &req, deadline).await }
        });
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
    ) -> Result<Vec<PartAnswer>> {
        let part = groups.len();
        if let Some(node) = leader.filter(|_| groups.len() > 1) {
            match self
                .replicas
                .read_groups_at(node, &groups, req, self.timeout)
                .await
            {
                Ok(response) => {
                    return Ok(vec![PartAnswer {
                        groups,
                        part,
                        response,
                    }])
                }
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
        let reads = groups.into_iter().map(|g| async move {
            let response = self.replicas.read_within(g, req.clone(), left).await?;
            Ok::<_, Error>(PartAnswer {
                groups: vec![g],
                part,
                response,
            })
        });
        futures::future::try_join_all(reads).await
    }

    /// A scan of a class: the page of rows under the order, skip and limit, and how many
    /// objects match in all. Each node is asked for about its share of the page
    /// (`rows_asked`), not all of it; a node whose last row still made the page may hold
    /// more of it, and its groups are asked again for the whole page (rarely: the share has
    /// a margin of three standard deviations).
    pub async fn scan(&self, req: ScanRequest) -> Result<(Vec<serde_json::Value>, u64)> {
        self.replicas.by_newest_map(|| self.scan_once(&req)).await
    }

    /// `scan` by the slot map this node routes by now: a group that dropped objects this map
    /// still routes to it (a split's, decisions/0038) refuses the read `Moved`, and `scan`
    /// reads again by each newer map (`Replicas::by_newest_map`).
    async fn scan_once(&self, req: &ScanRequest) -> Result<(Vec<serde_json::Value>, u64)> {
        let (epoch, groups) = self.replicas.class_groups_at(&req.class);
        let all = groups.len();
        let keep = match req.limit {
            0 => 0,
            limit => req.skip.saturating_add(limit),
        };
        let asking = |rows: usize| {
            let mut part = req.clone();
            if rows < req.skip.saturating_add(req.limit) {
                part.skip = 0;
                part.limit = rows;
            }
            ReadRequest::ScanObjects(part).at_epoch(epoch)
        };
        let answers = self
            .scatter_groups(groups, |part| asking(rows_asked(keep, part, all)))
            .await?;
        let mut parts = answers
            .into_iter()
            .map(|a| ScanPart::of(a, keep, all))
            .collect::<Result<Vec<_>>>()?;
        let order = RowOrder::new(&req.order, &req.filter);
        let short = cut_short(&parts, &order, keep);
        if !short.is_empty() {
            metrics::counter!("basalt_query_parts_read_again_total").increment(short.len() as u64);
            let mut again = Vec::new();
            for i in short.into_iter().rev() {
                again.extend(parts.swap_remove(i).groups);
            }
            let answers = self.scatter_groups(again, |_| asking(keep)).await?;
            for a in answers {
                parts.push(ScanPart::of(a, keep, 1)?);
            }
        }
        let count = parts.iter().map(|p| p.count).sum();
        let shards = parts.into_iter().map(|p| p.rows).collect();
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

/// One answer to a scattered read: the groups it covers, how many groups the request it
/// answers was made for (the part of the class one node leads), and the answer.
struct PartAnswer {
    groups: Vec<GroupId>,
    part: usize,
    response: ReadResponse,
}

/// One answer to a scattered scan: its rows (in the query's order), how many it was asked
/// for, and its count.
struct ScanPart {
    groups: Vec<GroupId>,
    asked: usize,
    rows: Vec<serde_json::Value>,
    count: u64,
}

impl ScanPart {
    /// The scan answer of `a`, asked for its share of `keep` rows among `all` groups.
    fn of(a: PartAnswer, keep: usize, all: usize) -> Result<ScanPart> {
        match a.response {
            ReadResponse::Scan { rows, count } => Ok(ScanPart {
                asked: rows_asked(keep, a.part, all),
                groups: a.groups,
                rows,
                count,
            }),
            other => Err(unexpected(other)),
        }
    }
}

/// How many rows to ask of `part` of a class's `all` groups when the page needs the best
/// `keep`: objects are spread over groups by the hash of their objectId, so the part holds
/// about `keep * part / all` of the page, and more than its share plus three standard
/// deviations (of that binomial count) in well under one query of a hundred.
fn rows_asked(keep: usize, part: usize, all: usize) -> usize {
    if keep == 0 || part >= all {
        return keep;
    }
    let (k, p) = (keep as f64, part as f64 / all as f64);
    let share = k * p + 3.0 * (k * p * (1.0 - p)).sqrt();
    // `as` saturates; the share is finite and at most about `keep`.
    (share.ceil() as usize).clamp(1, keep)
}

/// The parts that answered as many rows as they were asked for, fewer than `keep`, while
/// their last row is among the best `keep` of all: rows they did not send may belong to the
/// page.
fn cut_short(parts: &[ScanPart], order: &RowOrder, keep: usize) -> Vec<usize> {
    let mut rows: Vec<&serde_json::Value> = parts.iter().flat_map(|p| &p.rows).collect();
    let worst = match keep.checked_sub(1) {
        Some(nth) if nth < rows.len() => {
            let (_, worst, _) = rows.select_nth_unstable_by(nth, |a, b| order.compare(a, b));
            Some(*worst)
        }
        _ => None,
    };
    parts
        .iter()
        .enumerate()
        .filter(|(_, p)| p.asked < keep && p.rows.len() >= p.asked)
        .filter(|(_, p)| match (p.rows.last(), worst) {
            (Some(last), Some(worst)) => order.compare(last, worst).is_le(),
            _ => true,
        })
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::SortKey;
    use serde_json::json;

    /// A node leading every group is asked for the whole page; one leading a share of them,
    /// for its share and a margin, never more than the page nor less than one row.
    #[test]
    fn each_part_is_asked_for_its_share_of_the_page() {
        assert_eq!(rows_asked(20, 16, 16), 20);
        assert_eq!(rows_asked(0, 5, 16), 0);
        assert_eq!(rows_asked(20, 6, 16), 14);
        assert_eq!(rows_asked(20, 5, 16), 13);
        assert_eq!(rows_asked(2, 5, 16), 2);
        assert_eq!(rows_asked(1, 1, 16), 1);
        assert_eq!(rows_asked(1000, 5, 16), 357);
        assert!(rows_asked(usize::MAX, 1, 2) >= usize::MAX / 2);
    }

    fn part(asked: usize, scores: &[i64]) -> ScanPart {
        ScanPart {
            groups: Vec::new(),
            asked,
            rows: scores
                .iter()
                .map(|s| json!({"objectId": format!("o{s}"), "score": s}))
                .collect(),
            count: 0,
        }
    }

    /// A part is asked again only when it sent all it was asked for and its last row made
    /// the page: then rows it did not send may belong there too.
    #[test]
    fn parts_whose_last_row_made_the_page_are_asked_again() {
        let keys = [SortKey {
            field: "score".into(),
            descending: true,
        }];
        let order = RowOrder::new(&keys, &Default::default());
        // A page of 4: 9, 8, 7, 6.
        let parts = [
            part(2, &[9, 8]),    // full, its last row on the page: asked again
            part(2, &[7, 1]),    // full, its last row below the page
            part(2, &[6]),       // sent less than asked: it had no more
            part(4, &[5, 4, 3]), // asked for the whole page
        ];
        assert_eq!(cut_short(&parts, &order, 4), [0]);
        // Fewer rows in all than the page: every full part may hold more.
        let parts = [part(2, &[9, 8]), part(2, &[7])];
        assert_eq!(cut_short(&parts, &order, 6), [0]);
        // The last row tied with the page's worst one is on the page too.
        let parts = [part(1, &[9]), part(1, &[8])];
        assert_eq!(cut_short(&parts, &order, 2), [0, 1]);
        assert!(cut_short(&parts, &order, 0).is_empty());
    }
}
