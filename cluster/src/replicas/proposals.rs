//! The proposals a node makes as a group's leader, queued while earlier ones are in flight and
//! then appended together (decisions/0029). `Replicas::local_propose` hands every command here.
//! At most `RaftTuning::proposals_in_flight` submissions of a group run at once, each waiting
//! until its entries are applied; what arrives meanwhile waits in the group's queue and goes to
//! openraft in one `client_write_many` call: one message to the group's core, one log append,
//! one fsync and one replication round for all of it. Each command stays its own log entry
//! with its own answer, so nothing about what an entry means or how it applies changes.
//!
//! With `proposals_in_flight` 0 each command goes to openraft alone, as `client_write`.
//!
//! Neighbours: `Replicas::local_propose` (the only caller), openraft's `Raft` (the group).

use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::WriteResult;
use tokio::sync::oneshot;

use crate::command::{Command, CommandResult, Proposed};
use crate::error::{Error, Result};
use crate::ids::GroupId;

use crate::raft::TypeConfig;
use crate::statemachine::ShardStateMachine;

/// A group's Raft handle (as `replicas::GroupRaft`).
type GroupRaft = openraft::Raft<TypeConfig, ShardStateMachine>;

/// The queues of this node's groups.
pub(super) struct Proposals {
    queues: Vec<Arc<GroupQueue>>,
    in_flight: usize,
}

#[derive(Default)]
struct GroupQueue {
    state: Mutex<QueueState>,
    /// Held from taking a batch to handing it to openraft, so batches reach the log in the
    /// order they were taken.
    submit: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct QueueState {
    waiting: Vec<Waiting>,
    /// Submissions running (each a task that drains the queue until it is empty).
    running: usize,
}

struct Waiting {
    cmd: Command,
    answer: oneshot::Sender<Result<Proposed>>,
}

impl Proposals {
    /// Queues for `groups` groups, with at most `in_flight` submissions each (0: none, each
    /// proposal goes alone).
    pub(super) fn new(groups: usize, in_flight: usize) -> Self {
        Proposals {
            queues: (0..groups).map(|_| Arc::default()).collect(),
            in_flight,
        }
    }

    /// Proposes `cmd` through `raft` (group `group`, led by this node) and waits for its
    /// answer: at once when fewer than `in_flight` submissions run, else with the commands
    /// that queue behind them. A caller that stops waiting before its command is submitted
    /// withdraws it.
    pub(super) async fn propose(
        &self,
        raft: &GroupRaft,
        group: GroupId,
        cmd: Command,
    ) -> Result<Proposed> {
        if self.in_flight == 0 {
            return match raft.client_write(cmd).await {
                Ok(applied) => answer_of(group, Ok(applied.into())),
                Err(RaftError::APIError(e)) => answer_of(group, Err(e)),
                Err(RaftError::Fatal(fatal)) => Err(Error::Unavailable(fatal.to_string())),
            };
        }
        let queue = self
            .queues
            .get(group.get() as usize)
            .ok_or_else(|| Error::InvalidOperation(format!("no group {group}")))?;
        let (answer, answered) = oneshot::channel();
        let start = {
            let mut state = lock(&queue.state);
            state.waiting.push(Waiting { cmd, answer });
            let start = state.running < self.in_flight;
            if start {
                state.running += 1;
            }
            start
        };
        if start {
            tokio::spawn(drain(Arc::clone(queue), raft.clone(), group));
        }
        answered.await.map_err(|_| stopped(group))?
    }
}

/// Submits what waits in `queue`, batch after batch, until it finds the queue empty.
async fn drain(queue: Arc<GroupQueue>, raft: GroupRaft, group: GroupId) {
    let mut slot = Slot {
        queue,
        raft,
        group,
        released: false,
    };
    loop {
        let turn = slot.queue.submit.lock().await;
        let batch = {
            let mut state = lock(&slot.queue.state);
            if state.waiting.is_empty() {
                state.running -= 1;
                slot.released = true;
                return;
            }
            std::mem::take(&mut state.waiting)
        };
        let (cmds, answers): (Vec<Command>, Vec<_>) = batch
            .into_iter()
            .filter(|w| !w.answer.is_closed())
            .map(|w| (w.cmd, w.answer))
            .unzip();
        if cmds.is_empty() {
            continue;
        }
        metrics::histogram!("basalt_raft_proposal_batch_size").record(cmds.len() as f64);
        let submitted = slot.raft.client_write_many(cmds).await;
        drop(turn);
        let mut outcomes = match submitted {
            Ok(outcomes) => outcomes,
            Err(fatal) => {
                for answer in answers {
                    let _ = answer.send(Err(Error::Unavailable(fatal.to_string())));
                }
                continue;
            }
        };
        // Answers come in the order submitted; if the group stops part way, the answers
        // left are dropped and their callers see it stopped.
        for answer in answers {
            let Some(outcome) = outcomes.next().await else {
                break;
            };
            let _ = answer.send(match outcome {
                Ok(outcome) => answer_of(slot.group, outcome),
                Err(fatal) => Err(Error::Unavailable(fatal.to_string())),
            });
        }
    }
}

/// A running submission's place among a group's `in_flight`. Given back when its task finds
/// the queue empty; if the task ends otherwise (a panic), dropping it gives the place back and
/// starts another task for what waits.
struct Slot {
    queue: Arc<GroupQueue>,
    raft: GroupRaft,
    group: GroupId,
    released: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let mut state = lock(&self.queue.state);
        if state.waiting.is_empty() {
            state.running -= 1;
            return;
        }
        drop(state);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(drain(
                Arc::clone(&self.queue),
                self.raft.clone(),
                self.group,
            ));
        }
    }
}

/// A proposal's answer in Basalt's terms.
fn answer_of(group: GroupId, outcome: WriteResult<TypeConfig>) -> Result<Proposed> {
    match outcome {
        Ok(applied) => match applied.response {
            CommandResult::Rejected(e) => Err(e),
            result => Ok(Proposed {
                result,
                log_index: applied.log_id.index,
            }),
        },
        Err(ClientWriteError::ForwardToLeader(f)) => Err(Error::NotLeader {
            group,
            leader: f.leader_id,
            leader_addr: f.leader_node.map(|n| n.addr),
        }),
        // Appended, then replaced by another leader's log: it may still commit.
        Err(ClientWriteError::LogEntryDiscarded(_)) => Err(Error::Timeout(format!(
            "proposal to group {group} was displaced by a leader change; it may or may not take effect"
        ))),
        Err(e) => Err(Error::Internal(e.to_string())),
    }
}

fn stopped(group: GroupId) -> Error {
    Error::Unavailable(format!("group {group} stopped before answering a proposal"))
}

fn lock(state: &Mutex<QueueState>) -> MutexGuard<'_, QueueState> {
    match state.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}
