//! The proposals a node makes as a group's leader, queued while earlier ones are in flight and
//! then appended together (decisions/0029). `Replicas::local_propose` hands every command here.
//! At most `RaftTuning::proposals_in_flight` submissions of a group run at once, each waiting
//! until its entries are applied; what arrives meanwhile waits in the group's queue and goes to
//! openraft in one `client_write_many` call: one message to the group's core, one log append,
//! one fsync and one replication round for all of it. Each command stays its own log entry
//! with its own answer, so nothing about what an entry means or how it applies changes.
//!
//! A batch's callers come back together, and the first of them would otherwise find the
//! queue empty and go alone, splitting the next batches in two that take turns. So after
//! answering a batch, the submission waits until the callers it answered and those already
//! waiting are all queued, before it submits the next: at most a quarter of that batch's
//! round and at most `RaftTuning::proposal_gather_us` (decisions/0030; tokio's timer rounds
//! the bound up to a whole millisecond). A group with a single writer never waits, and
//! nothing is gathered with more than one submission in flight.
//!
//! With `proposals_in_flight` 0 each command goes to openraft alone, as `client_write`; so
//! does a backup's `BackupBarrier` always (the cluster's writes wait at the fence meanwhile).
//!
//! Neighbours: `Replicas::local_propose` (the only caller), openraft's `Raft` (the group).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::WriteResult;
use tokio::sync::{oneshot, Notify};

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
    /// The longest a submission waits for its callers to queue again (0: never).
    gather: Duration,
}

#[derive(Default)]
struct GroupQueue {
    state: Mutex<QueueState>,
    /// Held from taking a batch to handing it to openraft, so batches reach the log in the
    /// order they were taken.
    submit: tokio::sync::Mutex<()>,
    /// Woken when `QueueState::want` proposals wait.
    gathered: Notify,
}

#[derive(Default)]
struct QueueState {
    waiting: Vec<Waiting>,
    /// Submissions running (each a task that drains the queue until it is empty).
    running: usize,
    /// How many waiting proposals a submission gathering them wants (0: none gathers).
    want: usize,
}

struct Waiting {
    cmd: Command,
    answer: oneshot::Sender<Result<Proposed>>,
}

impl Proposals {
    /// Queues for `groups` groups, with at most `in_flight` submissions each (0: none, each
    /// proposal goes alone), each waiting at most `gather` for its callers to come back.
    pub(super) fn new(groups: usize, in_flight: usize, gather: Duration) -> Self {
        Proposals {
            queues: (0..groups).map(|_| Arc::default()).collect(),
            in_flight,
            gather,
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
        // A backup's barrier goes at once, not behind the batches queued: writes wait at the
        // fence until every group's barrier is in (`fence`).
        if self.in_flight == 0 || matches!(cmd, Command::BackupBarrier { .. }) {
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
        let start = queue.enqueue(Waiting { cmd, answer }, self.in_flight);
        if start {
            tokio::spawn(drain(
                Arc::clone(queue),
                raft.clone(),
                group,
                (self.gather, self.in_flight),
            ));
        }
        answered.await.map_err(|_| stopped(group))?
    }
}

/// Submits what waits in `queue`, batch after batch, until it finds the queue empty.
async fn drain(
    queue: Arc<GroupQueue>,
    raft: GroupRaft,
    group: GroupId,
    (gather, in_flight): (Duration, usize),
) {
    let mut slot = Slot {
        queue,
        raft,
        group,
        gather,
        in_flight,
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
        let size = cmds.len();
        metrics::histogram!("basalt_raft_proposal_batch_size").record(size as f64);
        let started = Instant::now();
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
        let mut answered = 0;
        for answer in answers {
            let Some(outcome) = outcomes.next().await else {
                break;
            };
            let sent = answer.send(match outcome {
                Ok(outcome) => answer_of(slot.group, outcome),
                Err(fatal) => Err(Error::Unavailable(fatal.to_string())),
            });
            // A caller that stopped waiting will not come back.
            answered += usize::from(sent.is_ok());
        }
        // With more than one submission in flight, another takes what queues at once:
        // nothing is gathered.
        if !slot.gather.is_zero() && slot.in_flight == 1 {
            let linger = (started.elapsed() / 4).min(slot.gather);
            slot.queue.gather(answered, linger).await;
        }
    }
}

impl GroupQueue {
    /// Queues a proposal, waking a gathering submission when it makes the count; whether
    /// the caller must start a submission (fewer than `in_flight` run).
    fn enqueue(&self, waiting: Waiting, in_flight: usize) -> bool {
        let (start, gathered) = {
            let mut state = lock(&self.state);
            state.waiting.push(waiting);
            let start = state.running < in_flight;
            if start {
                state.running += 1;
            }
            let gathered = state.want > 0 && state.waiting.len() >= state.want;
            if gathered {
                state.want = 0;
            }
            (start, gathered)
        };
        if gathered {
            self.gathered.notify_waiters();
        }
        start
    }

    /// After `answered` proposals were answered: when they and those waiting are more than
    /// one, waits until that many wait again (the answered callers come back) or `linger`
    /// has passed.
    async fn gather(&self, answered: usize, linger: Duration) {
        let gathered = self.gathered.notified();
        tokio::pin!(gathered);
        // Registered before the count is checked, so a proposal queued in between wakes it.
        gathered.as_mut().enable();
        {
            let mut state = lock(&self.state);
            let want = answered + state.waiting.len();
            if want <= 1 {
                return;
            }
            state.want = want;
        }
        let waited = tokio::time::timeout(linger, gathered).await;
        lock(&self.state).want = 0;
        metrics::counter!("basalt_raft_proposal_gathers_total", "full" => if waited.is_ok() { "true" } else { "false" })
            .increment(1);
    }
}

/// A running submission's place among a group's `in_flight`. Given back when its task finds
/// the queue empty; if the task ends otherwise (a panic), dropping it gives the place back and
/// starts another task for what waits.
struct Slot {
    queue: Arc<GroupQueue>,
    raft: GroupRaft,
    group: GroupId,
    gather: Duration,
    in_flight: usize,
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
                (self.gather, self.in_flight),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::Principals;

    fn waiting() -> Waiting {
        let (answer, _) = oneshot::channel();
        Waiting {
            cmd: Command::DeleteObject {
                app: "a".into(),
                class: "C".into(),
                object_id: "o".into(),
                principals: Principals::master(),
            },
            answer,
        }
    }

    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn a_submission_waits_until_the_callers_it_answered_are_back() {
        let queue = Arc::new(GroupQueue::default());
        assert!(
            queue.enqueue(waiting(), 1),
            "the first proposal starts a submission"
        );
        lock(&queue.state).waiting.clear();
        // Three were answered and one more waits: it gathers until four wait.
        queue.enqueue(waiting(), 1);
        let gathering = tokio::spawn({
            let queue = Arc::clone(&queue);
            async move { queue.gather(3, LONG).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!gathering.is_finished(), "two of four queued: it waits");
        queue.enqueue(waiting(), 1);
        queue.enqueue(waiting(), 1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!gathering.is_finished(), "three of four queued: it waits");
        assert!(
            !queue.enqueue(waiting(), 1),
            "a submission runs: none starts"
        );
        tokio::time::timeout(Duration::from_secs(5), gathering)
            .await
            .expect("the fourth wakes it")
            .unwrap();
        assert_eq!(lock(&queue.state).want, 0);
    }

    #[tokio::test]
    async fn a_lone_caller_never_waits() {
        let queue = GroupQueue::default();
        tokio::time::timeout(Duration::from_secs(5), queue.gather(1, LONG))
            .await
            .expect("one answered, none waiting: no wait");
    }

    #[tokio::test]
    async fn a_submission_stops_gathering_after_its_linger() {
        let queue = GroupQueue::default();
        let started = Instant::now();
        queue.gather(5, Duration::from_millis(50)).await;
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(lock(&queue.state).want, 0, "nobody is left wanting");
        // A later proposal is not taken for a gathered count.
        queue.enqueue(waiting(), 1);
        assert_eq!(lock(&queue.state).want, 0);
    }
}
