//! The one routing loop: a proposal or a read goes to the leader this node's replica knows
//! (from its Raft metrics), else to the local replica first; a `NotLeader`
//! answer sends it to the leader named in the answer (or, when none is known, to each member in
//! turn), and a failed attempt is retried — after a short backoff, cut short once the local
//! replica learns of a new leader, other than the one it knew and the node that refused (a
//! leadership handed over is followed at once), at the leader the failure named — until the
//! deadline. What may be retried depends on what is routed (`Attempts`): a
//! proposal only while it certainly did not take effect, a read after any failure to reach a
//! leader. A timeout is reported as such: a write may or may not have been applied.

use std::future::Future;
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;

use crate::admin::NodeState;
use crate::command::{Command, Proposed, ReadRequest, ReadResponse};
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId};
use crate::rpc::router::FORWARD_TIMEOUT;

use super::Replicas;

/// Which failures of an attempt leave the next attempt safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempts {
    /// A write: retried only when it certainly did not take effect (`Error::is_retryable`).
    NotApplied,
    /// A read changes nothing: any failure to reach a leader may be retried.
    Idempotent,
}

impl Attempts {
    pub fn may_retry(self, e: &Error) -> bool {
        match self {
            Attempts::NotApplied => e.is_retryable(),
            Attempts::Idempotent => e.is_retryable() || matches!(e, Error::Unavailable(_)),
        }
    }
}

/// Time left until `deadline` (at least a moment, so a last attempt can still answer).
fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100))
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((25u64 << attempt.min(4)).min(400))
}

impl Replicas {
    /// Proposes `cmd` to `group` through its leader and waits until it is applied.
    pub async fn propose(&self, group: GroupId, cmd: Command) -> Result<Proposed> {
        let started = Instant::now();
        let result = self
            .route(
                group,
                started + FORWARD_TIMEOUT,
                Attempts::NotApplied,
                || self.local_propose(group, &cmd),
                |node, _left| self.router().propose(node, group, &cmd),
            )
            .await;
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!("basalt_raft_proposals_total", "outcome" => outcome).increment(1);
        metrics::histogram!("basalt_raft_proposal_seconds").record(started.elapsed().as_secs_f64());
        result
    }

    /// A linearizable read of `group`, served by its leader, with the point-read deadline.
    pub async fn read(&self, group: GroupId, req: ReadRequest) -> Result<ReadResponse> {
        self.read_within(group, req, FORWARD_TIMEOUT).await
    }

    /// A linearizable read of `groups` (the shards of a scan or aggregation) served together
    /// by `node`, which leads them all, within `timeout`. No retry: a failure that another
    /// attempt may cure (`Attempts::Idempotent`) leaves each group to `read_within`.
    pub async fn read_groups_at(
        &self,
        node: NodeId,
        groups: &[GroupId],
        req: &ReadRequest,
        timeout: Duration,
    ) -> Result<ReadResponse> {
        if node == self.node_id() {
            tokio::time::timeout(timeout, self.local_read_groups(groups, req))
                .await
                .map_err(|_| Error::Timeout(format!("read of {} groups", groups.len())))?
        } else {
            self.router().read_groups(node, groups, req, timeout).await
        }
    }

    /// A linearizable read of `group` that gives up after `timeout`.
    pub async fn read_within(
        &self,
        group: GroupId,
        req: ReadRequest,
        timeout: Duration,
    ) -> Result<ReadResponse> {
        self.route(
            group,
            Instant::now() + timeout,
            Attempts::Idempotent,
            || self.local_read(group, &req),
            |node, left| self.router().read(node, group, &req, left),
        )
        .await
    }

    /// Runs `local` (this node's replica) or `remote` (a peer, with the time left) until one
    /// answers, a failure may not be retried, or `deadline` passes.
    async fn route<T, L, LF, R, RF>(
        &self,
        group: GroupId,
        deadline: Instant,
        attempts: Attempts,
        local: L,
        remote: R,
    ) -> Result<T>
    where
        L: Fn() -> LF,
        LF: Future<Output = Result<T>>,
        R: Fn(NodeId, Duration) -> RF,
        RF: Future<Output = Result<T>>,
    {
        // The leader this node's replica knows of gets the first attempt directly, without a
        // round through the local replica only to hear that it does not lead.
        let mut hint: Option<NodeId> = self.remote_leader(group);
        let mut attempt = 0u32;
        // The peer that failed the last attempt without naming a leader: when this node's
        // replica names that peer as leader, it is stale (this replica was removed from the
        // group, or has not heard of an election yet) and the next attempt asks the others in
        // turn.
        let mut leaderless: Option<NodeId> = None;
        loop {
            // The node whose answer this attempt's outcome is.
            let mut refuser = self.node_id();
            let outcome = match hint.filter(|&n| n != self.node_id()) {
                Some(node) => {
                    refuser = node;
                    remote(node, remaining(deadline)).await
                }
                None => match local().await {
                    Err(Error::NotLeader {
                        leader,
                        leader_addr,
                        ..
                    }) => match self.forward_target(
                        leader.filter(|&l| Some(l) != leaderless),
                        leader_addr,
                        attempt,
                        leaderless,
                    ) {
                        Some(node) => {
                            refuser = node;
                            remote(node, remaining(deadline)).await
                        }
                        None => Err(Error::NotLeader {
                            group,
                            leader: None,
                            leader_addr: None,
                        }),
                    },
                    other => other,
                },
            };
            match outcome {
                Err(e) if attempts.may_retry(&e) && Instant::now() < deadline => {
                    tracing::debug!(%group, attempt, "retried: {e:?}");
                    leaderless = (refuser != self.node_id()
                        && !matches!(
                            e,
                            Error::NotLeader {
                                leader: Some(_),
                                ..
                            }
                        ))
                    .then_some(refuser);
                    hint = self.retry_hint(e, attempt);
                    attempt += 1;
                    let known = self.group_metrics(group, |m| m.current_leader).flatten();
                    tokio::select! {
                        () = tokio::time::sleep(backoff(attempt)) => {}
                        () = self.new_leader(group, known, refuser) => {}
                    }
                }
                Err(e) if attempts.may_retry(&e) => {
                    return Err(Error::Unavailable(format!(
                        "group {group} has no reachable leader"
                    )))
                }
                other => return other,
            }
        }
    }

    /// Where the next attempt goes after a retryable failure: the leader a peer named, else
    /// the local replica again (which knows whether a new leader was elected). A peer that
    /// names this node as the leader sends the attempt back here: during a leadership
    /// transfer to this node the peers already know and this node is about to.
    fn retry_hint(&self, e: Error, attempt: u32) -> Option<NodeId> {
        match e {
            Error::NotLeader {
                leader: Some(l),
                leader_addr,
                ..
            } if l != self.node_id() => {
                self.forward_target(Some(l), leader_addr, attempt + 1, None)
            }
            _ => None,
        }
    }

    /// Returns once this node's replica of `group` learns of a new leader: one other than
    /// `known` (the one it knew when the attempt failed) and than `refuser` (never, when this
    /// node holds no replica of it). A leader that does not change — one cut off from its
    /// peers, a handover that stalls — leaves the backoff to run.
    async fn new_leader(&self, group: GroupId, known: Option<NodeId>, refuser: NodeId) {
        let Ok(raft) = self.group(group) else {
            return std::future::pending().await;
        };
        let mut metrics = raft.metrics();
        loop {
            let leader = metrics.borrow_watched().current_leader;
            if leader.is_some_and(|l| Some(l) != known && l != refuser) {
                return;
            }
            if metrics.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// The leader of `group` known to this node's replica, when it is another node (whose
    /// address the router then knows).
    fn remote_leader(&self, group: GroupId) -> Option<NodeId> {
        let raft = self.group(group).ok()?;
        let m = raft.metrics();
        let m = m.borrow_watched();
        let leader = m.current_leader.filter(|&l| l != self.node_id())?;
        // A replica removed from its group keeps naming the leader it last knew.
        m.membership_config.membership().get_node(&self.node_id())?;
        let node = m.membership_config.membership().get_node(&leader)?;
        self.router().learn(leader, &node.addr);
        Some(leader)
    }

    /// Where to send a request this node cannot serve: the named leader, else each known
    /// member in turn (a node that holds no replica of the group knows no leader), `skip` (the
    /// peer that just answered knowing none) left out while another remains.
    fn forward_target(
        &self,
        leader: Option<NodeId>,
        leader_addr: Option<String>,
        attempt: u32,
        skip: Option<NodeId>,
    ) -> Option<NodeId> {
        if let Some(l) = leader.filter(|&l| l != self.node_id()) {
            if let Some(addr) = leader_addr {
                self.router().learn(l, &addr);
            }
            return Some(l);
        }
        let others: Vec<NodeId> = self
            .local_nodes()
            .into_iter()
            .filter(|n| n.id != self.node_id() && n.state == NodeState::Active)
            .map(|n| {
                self.router().learn(n.id, &n.rpc_addr);
                n.id
            })
            .collect();
        let others = match others
            .iter()
            .copied()
            .filter(|&n| Some(n) != skip)
            .collect::<Vec<_>>()
        {
            fewer if !fewer.is_empty() => fewer,
            _ => others,
        };
        (!others.is_empty()).then(|| others[attempt as usize % others.len()])
    }
}
