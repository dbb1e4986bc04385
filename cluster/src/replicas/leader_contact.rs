//! `LeaderContact`: when this node's replica of each group last heard from its leader, and the
//! lease that contact grants (`freshness` decides with it whether a replica may answer alone).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::ids::GroupId;
use crate::raft::RaftTuning;

/// When this node last heard from each group's leader.
pub(super) struct LeaderContact {
    started: Instant,
    /// Milliseconds after `started` of the last contact, plus one (0: never).
    last: Vec<AtomicU64>,
    /// The same for any append the leader sent, however late it was answered (`/health`:
    /// whether the leader is heard from at all, not whether a read may trust it).
    heard: Vec<AtomicU64>,
    lease: Duration,
    heartbeat: Duration,
    /// Since when this node has seen itself lead each group, in which term.
    leading: std::sync::Mutex<std::collections::HashMap<GroupId, (u64, Instant)>>,
}

impl LeaderContact {
    pub(super) fn new(groups: usize, tuning: &RaftTuning) -> LeaderContact {
        LeaderContact {
            started: Instant::now(),
            last: (0..groups).map(|_| AtomicU64::new(0)).collect(),
            heard: (0..groups).map(|_| AtomicU64::new(0)).collect(),
            lease: lease(tuning),
            heartbeat: Duration::from_millis(tuning.heartbeat_ms),
            leading: Default::default(),
        }
    }

    pub(super) fn note(&self, group: GroupId) {
        self.note_heard(group);
        if let Some(slot) = self.last.get(group.get() as usize) {
            let ms = self.started.elapsed().as_millis() as u64 + 1;
            slot.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// An append from the leader arrived (answered late or not).
    pub(super) fn note_heard(&self, group: GroupId) {
        if let Some(slot) = self.heard.get(group.get() as usize) {
            let ms = self.started.elapsed().as_millis() as u64 + 1;
            slot.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// How long this node has been seen leading `group` in `term` (from the first time it was
    /// asked in that term): a leader no quorum answered yet is heard from for that long.
    pub(super) fn leading_for(&self, group: GroupId, term: u64) -> Duration {
        let mut leading = match self.leading.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let entry = leading.entry(group).or_insert((term, Instant::now()));
        if entry.0 != term {
            *entry = (term, Instant::now());
        }
        entry.1.elapsed()
    }

    pub(super) fn lease(&self) -> Duration {
        self.lease
    }

    /// A Raft message's deadline: one heartbeat interval.
    pub(super) fn heartbeat(&self) -> Duration {
        self.heartbeat
    }

    /// How long a write that nodes read from their own replica waits for the members to apply
    /// it: 3 s, and at least twice the lease plus a heartbeat (a Raft message's deadline), so a
    /// member that has not applied it by then has stopped vouching for its replica.
    pub(super) fn settle_timeout(&self) -> Duration {
        Duration::from_secs(3).max((self.lease + self.heartbeat) * 2)
    }

    /// How long ago this node last heard from `group`'s leader (`None`: never).
    pub(super) fn since(&self, group: GroupId) -> Option<Duration> {
        let last = self
            .heard
            .get(group.get() as usize)?
            .load(Ordering::Relaxed);
        (last > 0).then(|| (self.started + Duration::from_millis(last - 1)).elapsed())
    }

    pub(super) fn within_lease(&self, group: GroupId) -> bool {
        let Some(last) = self
            .last
            .get(group.get() as usize)
            .map(|s| s.load(Ordering::Relaxed))
        else {
            return false;
        };
        last > 0 && {
            let heard = self.started + Duration::from_millis(last - 1);
            heard.elapsed() < self.lease
        }
    }
}

/// How long a replica vouches for itself after hearing from the leader: four heartbeats, and
/// less than an election timeout (no other leader can have committed anything meanwhile
/// without this one's settle giving up on it first).
fn lease(tuning: &RaftTuning) -> Duration {
    Duration::from_millis((tuning.heartbeat_ms * 4).min(tuning.election_min_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contact_lasts_one_lease() {
        let tuning = RaftTuning {
            heartbeat_ms: 10,
            election_min_ms: 1000,
            ..RaftTuning::default()
        };
        let contact = LeaderContact::new(2, &tuning);
        assert_eq!(contact.lease, Duration::from_millis(40));
        assert!(!contact.within_lease(GroupId::new(0)), "never heard from");
        contact.note(GroupId::new(0));
        assert!(contact.within_lease(GroupId::new(0)));
        assert!(!contact.within_lease(GroupId::new(1)));
        assert!(!contact.within_lease(GroupId::new(7)), "no such group");
        std::thread::sleep(Duration::from_millis(60));
        assert!(!contact.within_lease(GroupId::new(0)), "lease over");
    }
}
