//! `ReadIndexRounds`: batches the read-index rounds of a group's concurrent linearizable reads
//! when reads do not use the leader's lease (`--no-lease-reads`, decisions/0015).
//!
//! `Replicas::linearize` (mod.rs) hands it each such read with the round to run for it (a
//! heartbeat round to a quorum, then the wait until the read index is applied:
//! `GroupRaft::ensure_linearizable`). A read that finds no round running for its group starts
//! one; reads that arrive while a round runs never join it (it may have fixed its read index
//! before they arrived) but wait together for the next round, which starts as soon as the
//! running one ends, and all share its outcome. Rounds run on a spawned task, so a read that
//! gives up (its future dropped), the one that started the round included, never stalls those
//! that wait with it. Its neighbours `freshness` and `leader_contact` vouch for reads of a
//! follower's own replica instead. Nothing here knows Raft: the tests drive it with plain
//! futures.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use crate::ids::GroupId;

/// What confirms, when run after every read of its batch arrived, that they may be served.
type Round<E> = Box<dyn FnOnce() -> BoxFuture<'static, Result<(), E>> + Send>;

/// The task running a read's round ended without an answer (the round panicked, or the
/// runtime is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Abandoned;

/// The read-index rounds of every group on this node: at most one runs per group at a time.
pub(super) struct ReadIndexRounds<E> {
    /// Indexed by group id.
    groups: Arc<Vec<Mutex<Slot<E>>>>,
}

/// One group's rounds.
struct Slot<E> {
    /// Whether a task is running this group's rounds (it runs `next` when its round ends).
    running: bool,
    /// The reads that arrived while a round was running, waiting for the next one.
    next: Option<Batch<E>>,
}

/// Reads that share one round.
struct Batch<E> {
    /// The round of the batch's first read.
    round: Round<E>,
    readers: Vec<oneshot::Sender<Result<(), E>>>,
}

impl<E: Clone + Send + 'static> ReadIndexRounds<E> {
    /// Rounds for groups `0..groups`.
    pub(super) fn new(groups: usize) -> ReadIndexRounds<E> {
        ReadIndexRounds {
            groups: Arc::new(
                (0..groups)
                    .map(|_| {
                        Mutex::new(Slot {
                            running: false,
                            next: None,
                        })
                    })
                    .collect(),
            ),
        }
    }

    /// Waits for a round of `group` that starts after this call (`round`, or that of a read
    /// that waits with this one) and answers with its outcome. Dropping the future only gives
    /// up this read. A group it does not know runs `round` alone.
    pub(super) async fn read<R, F>(
        &self,
        group: GroupId,
        round: R,
    ) -> Result<Result<(), E>, Abandoned>
    where
        R: FnOnce() -> F + Send + 'static,
        F: Future<Output = Result<(), E>> + Send + 'static,
    {
        let index = group.get() as usize;
        let Some(slot) = self.groups.get(index) else {
            return Ok(round().await);
        };
        let (tx, rx) = oneshot::channel();
        let round: Round<E> =
            Box::new(move || -> BoxFuture<'static, Result<(), E>> { Box::pin(round()) });
        let start = {
            let mut slot = lock(slot);
            if slot.running {
                match slot.next.as_mut() {
                    Some(next) => next.readers.push(tx),
                    None => {
                        slot.next = Some(Batch {
                            round,
                            readers: vec![tx],
                        })
                    }
                }
                None
            } else {
                slot.running = true;
                Some(Batch {
                    round,
                    readers: vec![tx],
                })
            }
        };
        if let Some(batch) = start {
            tokio::spawn(run(Arc::clone(&self.groups), index, batch));
        }
        rx.await.map_err(|_| Abandoned)
    }

    /// Whether `group` runs a round, and how many reads wait for the next one.
    #[cfg(test)]
    fn state(&self, group: GroupId) -> (bool, usize) {
        self.groups
            .get(group.get() as usize)
            .map(|slot| {
                let slot = lock(slot);
                (
                    slot.running,
                    slot.next.as_ref().map_or(0, |b| b.readers.len()),
                )
            })
            .unwrap_or((false, 0))
    }
}

/// Runs the rounds of one group, `first` then each batch that gathered meanwhile, until no read
/// waits. A batch whose reads all left is answered by nobody: its round is skipped.
async fn run<E: Clone + Send + 'static>(
    groups: Arc<Vec<Mutex<Slot<E>>>>,
    index: usize,
    first: Batch<E>,
) {
    let mut running = Running {
        groups,
        index,
        done: false,
    };
    let mut batch = Some(first);
    while let Some(Batch { round, mut readers }) = batch {
        readers.retain(|r| !r.is_closed());
        if !readers.is_empty() {
            metrics::counter!("basalt_read_index_rounds_total").increment(1);
            metrics::counter!("basalt_read_index_reads_total").increment(readers.len() as u64);
            let outcome = round().await;
            for reader in readers {
                // A reader that left meanwhile does not need it.
                let _ = reader.send(outcome.clone());
            }
        }
        batch = running.take_next();
    }
}

/// The task running a group's rounds: when it ends without handing the group back (the round
/// panicked, or the task was dropped with the runtime), the group is freed and the reads
/// waiting for its next round learn that it was abandoned.
struct Running<E> {
    groups: Arc<Vec<Mutex<Slot<E>>>>,
    index: usize,
    /// The group was handed back (`take_next` found no read waiting).
    done: bool,
}

impl<E> Running<E> {
    /// The batch that gathered during the round that just ended; none: no read waits, and the
    /// group runs no round any more (the next read starts one).
    fn take_next(&mut self) -> Option<Batch<E>> {
        let Some(slot) = self.groups.get(self.index) else {
            self.done = true;
            return None;
        };
        let mut slot = lock(slot);
        let next = slot.next.take();
        if next.is_none() {
            slot.running = false;
            self.done = true;
        }
        next
    }
}

impl<E> Drop for Running<E> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(slot) = self.groups.get(self.index) {
            let abandoned = {
                let mut slot = lock(slot);
                slot.running = false;
                slot.next.take()
            };
            // Its readers' senders go with it: they see `Abandoned`.
            drop(abandoned);
        }
    }
}

/// A slot's lock; a panic never leaves a slot half-updated, so a poisoned lock is still sound.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::Semaphore;
    use tokio::task::JoinHandle;

    const G: GroupId = GroupId::new(1);

    type Answer = Result<Result<(), String>, Abandoned>;

    /// Rounds that count themselves, then wait for a permit of `gate`; with `fail`, round `n`
    /// answers `Err("round n")`.
    #[derive(Clone)]
    struct Gated {
        started: Arc<AtomicUsize>,
        gate: Arc<Semaphore>,
        fail: bool,
    }

    impl Gated {
        fn new(fail: bool) -> Gated {
            Gated {
                started: Arc::new(AtomicUsize::new(0)),
                gate: Arc::new(Semaphore::new(0)),
                fail,
            }
        }

        fn started(&self) -> usize {
            self.started.load(Ordering::SeqCst)
        }

        fn release(&self, rounds: usize) {
            self.gate.add_permits(rounds);
        }

        /// A read of `G` on its own task.
        fn read(&self, rounds: &Arc<ReadIndexRounds<String>>) -> JoinHandle<Answer> {
            let rounds = Arc::clone(rounds);
            let Gated {
                started,
                gate,
                fail,
            } = self.clone();
            tokio::spawn(async move {
                rounds
                    .read(G, move || async move {
                        let n = started.fetch_add(1, Ordering::SeqCst) + 1;
                        gate.acquire().await.map_err(|e| e.to_string())?.forget();
                        match fail {
                            true => Err(format!("round {n}")),
                            false => Ok(()),
                        }
                    })
                    .await
            })
        }
    }

    /// Yields to the spawned tasks until `cond` holds.
    async fn until(what: &str, cond: impl Fn() -> bool) {
        for _ in 0..10_000 {
            if cond() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("never happened: {what}");
    }

    #[tokio::test]
    async fn reads_arriving_during_a_round_share_the_next_one() {
        let rounds = Arc::new(ReadIndexRounds::new(3));
        let gated = Gated::new(false);
        let first = gated.read(&rounds);
        until("the first round starts", || gated.started() == 1).await;
        let later: Vec<_> = (0..10).map(|_| gated.read(&rounds)).collect();
        until("the later reads wait", || rounds.state(G) == (true, 10)).await;
        assert_eq!(gated.started(), 1, "no round starts while one runs");

        gated.release(1);
        assert_eq!(first.await.unwrap(), Ok(Ok(())));
        until("the second round starts", || gated.started() == 2).await;
        assert_eq!(rounds.state(G), (true, 0));
        assert!(
            later.iter().all(|h| !h.is_finished()),
            "a read never shares a round that started before it"
        );

        gated.release(1);
        for read in later {
            assert_eq!(read.await.unwrap(), Ok(Ok(())));
        }
        assert_eq!(gated.started(), 2, "eleven reads, two rounds");
        until("the group is idle", || rounds.state(G) == (false, 0)).await;
    }

    #[tokio::test]
    async fn an_idle_group_starts_a_round_for_each_read() {
        let rounds = Arc::new(ReadIndexRounds::new(3));
        let gated = Gated::new(false);
        gated.release(3);
        for n in 1..=3 {
            assert_eq!(gated.read(&rounds).await.unwrap(), Ok(Ok(())));
            assert_eq!(gated.started(), n, "a finished round is never reused");
        }
    }

    #[tokio::test]
    async fn errors_reach_every_waiter() {
        let rounds = Arc::new(ReadIndexRounds::new(3));
        let gated = Gated::new(true);
        let first = gated.read(&rounds);
        until("the first round starts", || gated.started() == 1).await;
        let later: Vec<_> = (0..5).map(|_| gated.read(&rounds)).collect();
        until("the later reads wait", || rounds.state(G) == (true, 5)).await;
        gated.release(2);
        assert_eq!(first.await.unwrap(), Ok(Err("round 1".to_string())));
        for read in later {
            assert_eq!(read.await.unwrap(), Ok(Err("round 2".to_string())));
        }
    }

    #[tokio::test]
    async fn reads_that_leave_do_not_stall_the_others() {
        let rounds = Arc::new(ReadIndexRounds::new(3));
        let gated = Gated::new(false);
        let starter = gated.read(&rounds);
        until("the first round starts", || gated.started() == 1).await;
        let leaving = gated.read(&rounds);
        let staying = gated.read(&rounds);
        until("the later reads wait", || rounds.state(G) == (true, 2)).await;
        starter.abort();
        leaving.abort();
        until("the reads left", || {
            starter.is_finished() && leaving.is_finished()
        })
        .await;

        // The round of the read that left still ends, and the next one serves who stayed.
        gated.release(1);
        until("the second round starts", || gated.started() == 2).await;
        gated.release(1);
        assert_eq!(staying.await.unwrap(), Ok(Ok(())));

        // Nothing is left running: the next read starts its round at once.
        until("the group is idle", || rounds.state(G) == (false, 0)).await;
        gated.release(1);
        assert_eq!(gated.read(&rounds).await.unwrap(), Ok(Ok(())));
        assert_eq!(gated.started(), 3);
    }

    #[tokio::test]
    async fn a_round_no_read_waits_for_is_skipped() {
        let rounds = Arc::new(ReadIndexRounds::new(3));
        let gated = Gated::new(false);
        let first = gated.read(&rounds);
        until("the first round starts", || gated.started() == 1).await;
        let leaving = gated.read(&rounds);
        until("the later read waits", || rounds.state(G) == (true, 1)).await;
        leaving.abort();
        until("the read left", || leaving.is_finished()).await;
        gated.release(1);
        assert_eq!(first.await.unwrap(), Ok(Ok(())));
        until("the group is idle", || rounds.state(G) == (false, 0)).await;
        assert_eq!(gated.started(), 1);
    }

    #[tokio::test]
    async fn a_round_that_panics_abandons_its_reads_and_frees_the_group() {
        let rounds = Arc::new(ReadIndexRounds::<String>::new(3));
        let gate = Arc::new(Semaphore::new(0));
        let panicking = |rounds: &Arc<ReadIndexRounds<String>>| {
            let (rounds, gate) = (Arc::clone(rounds), Arc::clone(&gate));
            tokio::spawn(async move {
                rounds
                    .read(G, move || async move {
                        match gate.acquire().await {
                            Ok(_) => panic!("the round fails"),
                            Err(e) => Err::<(), String>(e.to_string()),
                        }
                    })
                    .await
            })
        };
        let first = panicking(&rounds);
        until("the first round starts", || rounds.state(G) == (true, 0)).await;
        let later = panicking(&rounds);
        until("the later read waits", || rounds.state(G) == (true, 1)).await;
        gate.add_permits(1);
        assert_eq!(first.await.unwrap(), Err(Abandoned));
        assert_eq!(later.await.unwrap(), Err(Abandoned));
        until("the group is idle", || rounds.state(G) == (false, 0)).await;
        let fine = rounds.read(G, || async { Ok::<(), String>(()) }).await;
        assert_eq!(fine, Ok(Ok(())));
    }

    #[tokio::test]
    async fn groups_run_their_rounds_apart() {
        let rounds = Arc::new(ReadIndexRounds::new(3));
        let gated = Gated::new(false);
        let blocked = gated.read(&rounds);
        until("group 1's round starts", || gated.started() == 1).await;
        let other = rounds.read(GroupId::new(2), || async { Ok::<(), String>(()) });
        assert_eq!(other.await, Ok(Ok(())));
        let unknown = rounds.read(GroupId::new(7), || async {
            Err::<(), String>("alone".to_string())
        });
        assert_eq!(unknown.await, Ok(Err("alone".to_string())));
        gated.release(1);
        assert_eq!(blocked.await.unwrap(), Ok(Ok(())));
    }
}
