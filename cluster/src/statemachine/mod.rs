//! The state machine of every group: objects, records with expiry, and applied state.
//!
//! Invariant: apply is deterministic. Everything it needs (objectIds, timestamps, the sweep's
//! "now") comes inside the command; it reads no clock and draws no random numbers. One call
//! of `apply` writes one RocksDB batch (data, TTL index, last-applied and membership) and only
//! then answers the proposers. A rejected command writes nothing, and a later command in the
//! same batch sees what an earlier one staged (`staged::Staged`).
//!
//! A committed entry that cannot be applied (the command fails on the stored state in a way
//! apply itself cannot handle) never stops the group: its writes are undone, its outcome is
//! `Rejected(NotApplied)` on every replica alike, and apply goes on with the next entry. Only a
//! failure of this node's own storage stops apply.

mod applied_state;
mod apply;
mod apply_schema;
mod change_writes;
pub mod check;
mod index_upkeep;
pub mod ops;
mod record_writes;
#[cfg(test)]
mod shard_query_tests;
mod slot_index;
pub mod snapshot;
#[cfg(test)]
mod split_read_tests;
mod split_state;
mod split_writes;
mod staged;
pub mod upgrade;
pub mod usage_writes;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::EntryPayload;

use crate::command::CommandResult;
use crate::error::Error;
use crate::ids::GroupId;
use crate::raft::{LogId, SnapshotMeta, StoredMembership, TypeConfig};
use crate::storage::keys;
use crate::storage::Store;
pub use snapshot::{ShardSnapshotBuilder, SnapshotFile};
use staged::Staged;

pub use applied_state::AppliedState;

pub struct ShardStateMachine {
    group: GroupId,
    store: Arc<Store>,
    snapshot_dir: PathBuf,
    applied: AppliedState,
    /// Log indexes of changes the group keeps (`ClusterSettings::changes_kept`).
    changes_kept: u64,
    /// Where the digests of consistency checks go (`check`).
    checks: check::StateChecks,
    /// Held by the state machine and all the work it starts (snapshot builds, installs):
    /// once every holder is gone nothing writes the group's state any more
    /// (`ShardStateMachine::alive`).
    alive: Arc<()>,
}

impl ShardStateMachine {
    /// Opens a group's state machine, finishing a snapshot install a crash interrupted.
    pub fn open(
        group: GroupId,
        store: Arc<Store>,
        snapshot_root: PathBuf,
    ) -> crate::error::Result<Self> {
        let snapshot_dir = snapshot_root.join(format!("g{group}"));
        std::fs::create_dir_all(&snapshot_dir)?;
        snapshot::resume_interrupted_install(group, &store)?;
        let applied = AppliedState::load(&store, group)?;
        Ok(ShardStateMachine {
            group,
            store,
            snapshot_dir,
            applied,
            changes_kept: crate::changes::KEPT_ENTRIES,
            checks: check::StateChecks::default(),
            alive: Arc::new(()),
        })
    }

    /// What tells whether this state machine, or work it started, may still write the
    /// group's state: it cannot once this no longer upgrades (the Raft stopped, its state
    /// machine worker and snapshot builds ended). What erases a replica waits for that
    /// (`replicas::erase`).
    pub fn alive(&self) -> std::sync::Weak<()> {
        Arc::downgrade(&self.alive)
    }

    /// The state machine handing its consistency checks' digests to `checks`.
    pub fn with_checks(mut self, checks: check::StateChecks) -> Self {
        self.checks = checks;
        self
    }

    /// Writes what `staged` holds with the applied state `next` in one batch.
    async fn write_applied(&mut self, staged: Staged<'_>, next: &AppliedState) -> io::Result<()> {
        let mut staged = staged;
        let applied_bytes = serde_json::to_vec(next).map_err(io::Error::other)?;
        staged.put(
            keys::meta_key(self.group, keys::SM_APPLIED).to_vec(),
            applied_bytes,
        );
        let freed = staged.freed();
        let batch = staged.into_batch().map_err(io_err)?;
        fail::fail_point!("apply-staged");
        self.store
            .write_until_room(batch, false)
            .await
            .map_err(io_err)?;
        fail::fail_point!("apply-written");
        self.store.note_freed(self.group, freed);
        self.applied = next.clone();
        Ok(())
    }

    /// The state machine keeping `kept` log indexes of changes (the same on every replica).
    pub fn keeping_changes(mut self, kept: u64) -> Self {
        self.changes_kept = kept;
        self
    }
}

/// Applies one committed command. A failure of the command itself (e.g. stored data it cannot
/// decode) is the entry's outcome on every replica alike: its partial writes are undone and it
/// answers `Rejected(NotApplied)`. Only a failure of this node's storage is an error, which
/// stops apply (the entry is applied again after restart).
fn apply_entry(
    staged: &mut Staged<'_>,
    index: u64,
    cmd: crate::command::Command,
) -> crate::error::Result<CommandResult> {
    staged.set_entry_index(index);
    if matches!(cmd, crate::command::Command::CreateObject { .. }) {
        // Tests make one replica's state differ from the others' (what a consistency check
        // finds): this replica skips a create.
        fail::fail_point!("apply-skip-create", |_| Ok(CommandResult::None));
    }
    match cmd {
        // Each command of a batch applies as it would alone, in order, seeing what the ones
        // before it staged; one refused or not applied leaves the others.
        crate::command::Command::Batch(cmds) => {
            let mut results = Vec::with_capacity(cmds.len());
            for cmd in cmds {
                results.push(apply_one(staged, index, cmd)?);
            }
            Ok(CommandResult::Batch(results))
        }
        cmd => apply_one(staged, index, cmd),
    }
}

/// Applies one command of the entry at `index` (alone, or one of a batch), undoing its writes
/// when it cannot be applied.
fn apply_one(
    staged: &mut Staged<'_>,
    index: u64,
    cmd: crate::command::Command,
) -> crate::error::Result<CommandResult> {
    let mark = staged.savepoint();
    let label = cmd.to_string();
    match apply::apply_command(staged, cmd) {
        Ok(result) => Ok(result),
        Err(e) if e.is_local_fault() => Err(e),
        Err(e) => {
            staged.rollback_to(mark);
            let group = staged.group;
            metrics::counter!("basalt_apply_failures_total", "group" => group.to_string())
                .increment(1);
            tracing::error!(%group, index, command = %label, "entry could not be applied: {e}");
            Ok(CommandResult::Rejected(Error::NotApplied(e.to_string())))
        }
    }
}

fn io_err(e: crate::error::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl RaftStateMachine<TypeConfig> for ShardStateMachine {
    type SnapshotData = SnapshotFile;
    type SnapshotBuilder = ShardSnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        Ok((self.applied.last_applied, self.applied.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + Send,
    {
        let started = std::time::Instant::now();
        let store = Arc::clone(&self.store);
        let mut staged = Staged::new(&store, self.group);
        let mut next = self.applied.clone();
        let mut replies = Vec::new();
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let mut check = None;
            let result = match entry.payload {
                EntryPayload::Blank => CommandResult::None,
                EntryPayload::Normal(crate::command::Command::CheckState { check: id }) => {
                    check = Some(id);
                    CommandResult::Done
                }
                EntryPayload::Normal(cmd) => {
                    apply_entry(&mut staged, entry.log_id.index, cmd).map_err(io_err)?
                }
                EntryPayload::Membership(m) => {
                    next.membership = StoredMembership::new(Some(entry.log_id), m);
                    CommandResult::None
                }
            };
            change_writes::trim(&mut staged, entry.log_id.index, self.changes_kept)
                .map_err(io_err)?;
            next.last_applied = Some(entry.log_id);
            if let Some(r) = responder {
                replies.push((r, result));
            }
            if let Some(check) = check {
                // The state as this entry leaves it is written, then pinned and hashed before
                // any later entry is applied.
                let done = std::mem::replace(&mut staged, Staged::new(&store, self.group));
                self.write_applied(done, &next).await?;
                self.checks.pin(check, self.group, Arc::clone(&store)).await;
            }
        }
        self.write_applied(staged, &next).await?;
        metrics::histogram!("basalt_raft_apply_seconds").record(started.elapsed().as_secs_f64());
        for (r, result) in replies {
            r.send(result);
        }
        Ok(())
    }

    /// Defers the snapshots the log's length asks for while the disk is full or has no room
    /// for one (a forced one, `reclaim`'s, checked its room itself).
    async fn try_create_snapshot_builder(&mut self, force: bool) -> Option<Self::SnapshotBuilder> {
        let pressed = self.store.out_of_space()
            || !snapshot::has_room(self.group, &self.store, &self.snapshot_dir);
        if pressed && !force {
            metrics::counter!("basalt_raft_snapshots_deferred_total").increment(1);
            return None;
        }
        Some(self.get_snapshot_builder().await)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        ShardSnapshotBuilder::new(
            self.group,
            Arc::clone(&self.store),
            self.snapshot_dir.clone(),
        )
        .holding(Arc::clone(&self.alive))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotFile,
    ) -> Result<(), io::Error> {
        let (group, store, dir, meta) = (
            self.group,
            Arc::clone(&self.store),
            self.snapshot_dir.clone(),
            meta.clone(),
        );
        let alive = Arc::clone(&self.alive);
        let applied = tokio::task::spawn_blocking(move || {
            let _alive = alive;
            snapshot::install(group, &store, &dir, &meta, snapshot)
        })
        .await
        .map_err(io::Error::other)?
        .map_err(io_err)?;
        self.applied = applied;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<openraft::alias::SnapshotOf<TypeConfig, SnapshotFile>>, io::Error> {
        snapshot::current(&self.snapshot_dir).map_err(io_err)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::acl::Principals;
    use crate::command::Command;
    use crate::ids::GroupId;
    use crate::storage::keys::CF_SM;
    use crate::update::{FieldUpdate, UpdateOp};
    use serde_json::json;

    fn set(id: &str, v: serde_json::Value) -> Command {
        Command::UpdateObject {
            app: "a".into(),
            class: "C".into(),
            object_id: id.into(),
            now_ms: 2,
            updates: vec![FieldUpdate {
                path: vec!["f".into()],
                op: UpdateOp::Set(v),
            }],
            principals: Principals::master(),
            unset: Vec::new(),
            holds: Vec::new(),
        }
    }

    fn create(id: &str) -> Command {
        Command::CreateObject {
            app: "a".into(),
            class: "C".into(),
            object_id: id.into(),
            now_ms: 1,
            updates: vec![],
        }
    }

    /// Large changes are cut by bytes long before the log reaches its entries: the oldest
    /// stretches go, the count of bytes stays exact, a read from before the cut is a gap, and
    /// what the cut frees is noted for compaction.
    #[test]
    fn the_change_log_keeps_at_most_its_bytes() {
        use crate::changes::{log::read_page, BYTES_STRETCH, KEPT_BYTES};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let g = GroupId::new(1);
        let big = "x".repeat(200 << 10);
        let mut freed = 0;
        for index in 1..=80u64 {
            let mut staged = Staged::new(&store, g);
            let id = format!("o{index}");
            let both = Command::Batch(vec![create(&id), set(&id, json!(big))]);
            apply_entry(&mut staged, index, both).unwrap();
            change_writes::trim(&mut staged, index, crate::changes::KEPT_ENTRIES).unwrap();
            freed += staged.freed();
            store.write(staged.into_batch().unwrap(), false).unwrap();
        }
        let mut kept = 0u64;
        store
            .scan(
                CF_SM,
                &keys::change_key(g, 0),
                &keys::change_key(g, u64::MAX),
                |k, v| {
                    kept += (k.len() + v.len()) as u64;
                    Ok(true)
                },
            )
            .unwrap();
        let counted = store
            .get(CF_SM, &keys::sm_family(g, keys::SM_CHANGES_BYTES))
            .unwrap()
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .unwrap();
        // What is kept is counted exactly, as a recount finds it.
        assert_eq!(counted, kept);
        assert_eq!(recounted(&store, g), counted_all(&store, g));
        let stretch = BYTES_STRETCH * (400 << 10);
        assert!(kept <= KEPT_BYTES + stretch, "{kept} bytes kept");
        assert!(kept >= KEPT_BYTES / 2, "{kept} bytes kept");
        assert!(freed > 10 * (200 << 10), "{freed} bytes noted freed");
        let page = read_page(&store, g, Some(1), 10).unwrap();
        assert!(page.gap);
        assert!(page.floor > 1 && page.floor.is_multiple_of(BYTES_STRETCH));
    }

    /// The change log's byte counts of `g` as stored, in all and per stretch.
    fn counted_all(store: &Store, g: GroupId) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let start = keys::sm_family(g, keys::SM_CHANGES_BYTES);
        let end = keys::sm_family(g, keys::SM_CHANGES_BYTES + 1);
        store
            .scan(CF_SM, &start, &end, |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(true)
            })
            .unwrap();
        out
    }

    fn recounted(store: &Store, g: GroupId) -> Vec<(Vec<u8>, Vec<u8>)> {
        upgrade::group_change_bytes(store, g).unwrap()
    }

    /// A cut by entries that falls inside a stretch takes off that stretch's bytes below it:
    /// the counts stay those of the changes kept, as a first count of the store would find
    /// (so replicas that started counting at different indexes agree).
    #[test]
    fn a_cut_inside_a_stretch_keeps_the_counts_exact() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let g = GroupId::new(1);
        for index in 1..=2100u64 {
            let mut staged = Staged::new(&store, g);
            apply_entry(&mut staged, index, create(&format!("o{index}"))).unwrap();
            change_writes::trim(&mut staged, index, 1030).unwrap();
            store.write(staged.into_batch().unwrap(), false).unwrap();
            if index == 1500 || index == 2100 {
                assert_eq!(recounted(&store, g), counted_all(&store, g), "at {index}");
            }
        }
        let page = crate::changes::log::read_page(&store, g, Some(0), 1).unwrap();
        assert_eq!(page.floor, 2048 - 1030 + 1);
    }

    /// Every object write logs its change under its entry's index, a refused one none; the
    /// entry at a multiple of 1,024 cuts the log to the last `kept` indexes, and a read from
    /// before the cut is a gap.
    #[test]
    fn object_writes_log_their_changes_and_the_log_is_cut_at_fixed_indexes() {
        use crate::changes::{log::read_page, ChangeKind};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let g = GroupId::new(1);
        let mut staged = Staged::new(&store, g);
        let mut index = 0;
        let mut next = |staged: &mut Staged<'_>, cmd: Command| {
            index += 1;
            let r = apply_entry(staged, index, cmd).unwrap();
            change_writes::trim(staged, index, 1024).unwrap();
            (index, r)
        };
        next(&mut staged, create("a"));
        next(&mut staged, set("a", json!(1)));
        let (refused, r) = next(&mut staged, set("missing", json!(1)));
        assert!(matches!(r, CommandResult::Rejected(_)));
        next(
            &mut staged,
            Command::DeleteObject {
                app: "a".into(),
                class: "C".into(),
                object_id: "a".into(),
                principals: Principals::master(),
            },
        );
        let applied = |staged: &mut Staged<'_>, index: u64| {
            let state = json!({"last_applied": {"index": index}}).to_string();
            staged.put(
                keys::meta_key(g, keys::SM_APPLIED).to_vec(),
                state.into_bytes(),
            );
        };
        applied(&mut staged, 2);
        store.write(staged.into_batch().unwrap(), true).unwrap();
        // Only what the replica applied is read.
        assert_eq!(read_page(&store, g, Some(0), 100).unwrap().entries.len(), 2);
        let mut staged = Staged::new(&store, g);
        applied(&mut staged, 4);
        store.write(staged.into_batch().unwrap(), true).unwrap();
        let page = read_page(&store, g, Some(0), 100).unwrap();
        let changes = page.decode(g).unwrap();
        let kinds: Vec<(u64, ChangeKind)> = changes.iter().map(|c| (c.index, c.kind)).collect();
        assert_eq!(
            kinds,
            [
                (1, ChangeKind::Create),
                (2, ChangeKind::Update),
                (4, ChangeKind::Delete)
            ]
        );
        assert!(!kinds.iter().any(|(i, _)| *i == refused));
        let update = &changes[1];
        assert_eq!(update.object.fields["f"], json!(1));
        assert!(update.before.as_ref().unwrap().fields.get("f").is_none());
        assert_eq!((page.upto, page.gap), (4, false));

        // 2,044 more writes: the entry at 2,048 cuts everything before 1,025.
        let mut staged = Staged::new(&store, g);
        for i in 0..2044 {
            next(&mut staged, create(&format!("o{i}")));
        }
        applied(&mut staged, 2048);
        store.write(staged.into_batch().unwrap(), true).unwrap();
        let old = read_page(&store, g, Some(4), 100).unwrap();
        assert!(
            old.gap && old.entries.is_empty(),
            "{:?}",
            (old.gap, old.floor)
        );
        assert_eq!(old.floor, 1025);
        // Nothing below the floor is left, whichever batch staged it.
        let mut below = 0;
        let (from, to) = (keys::change_key(g, 0), keys::change_key(g, 1025));
        store
            .scan(CF_SM, &from, &to, |_, _| {
                below += 1;
                Ok(true)
            })
            .unwrap();
        assert_eq!(below, 0);
        let kept = read_page(&store, g, Some(1024), 5000).unwrap();
        assert!(!kept.gap);
        assert_eq!(kept.entries.len(), 1024);
        assert_eq!(kept.entries.first().map(|e| e.0), Some(1025));
        let limited = read_page(&store, g, Some(1024), 10).unwrap();
        assert_eq!((limited.entries.len(), limited.upto), (10, 1034));
    }

    /// An entry whose stored object cannot be decoded fails alone: it writes nothing, answers
    /// NotApplied, and the entries around it in the same batch apply.
    #[test]
    fn an_entry_that_cannot_apply_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let bad_key = keys::object_key(GroupId::new(1), "a", "C", "bad");
        let mut setup = crate::storage::WriteBatch::default();
        setup.put_cf(store.cf(CF_SM).unwrap(), &bad_key, b"\x01not json");
        // Cut short in the current encoding: its first field's length runs past the end.
        let cut_key = keys::object_key(GroupId::new(1), "a", "C", "cut");
        let mut cut = vec![2u8];
        cut.extend_from_slice(&[0; 16]);
        cut.extend_from_slice(&[9, 0, 0, 0, b'f']);
        setup.put_cf(store.cf(CF_SM).unwrap(), &cut_key, &cut);
        store.write(setup, true).unwrap();

        let mut staged = Staged::new(&store, GroupId::new(1));
        assert!(matches!(
            apply_entry(&mut staged, 1, create("ok")).unwrap(),
            CommandResult::Created { .. }
        ));
        let r = apply_entry(&mut staged, 2, set("bad", json!(1))).unwrap();
        assert!(
            matches!(r, CommandResult::Rejected(Error::NotApplied(_))),
            "{r:?}"
        );
        let r = apply_entry(&mut staged, 3, set("cut", json!(1))).unwrap();
        assert!(
            matches!(r, CommandResult::Rejected(Error::NotApplied(_))),
            "{r:?}"
        );
        assert!(matches!(
            apply_entry(&mut staged, 4, set("ok", json!(2))).unwrap(),
            CommandResult::Updated { .. }
        ));
        store.write(staged.into_batch().unwrap(), true).unwrap();
        assert_eq!(
            store.get(CF_SM, &bad_key).unwrap().unwrap(),
            b"\x01not json"
        );
        let ok = store
            .get(CF_SM, &keys::object_key(GroupId::new(1), "a", "C", "ok"))
            .unwrap()
            .unwrap();
        let ok = crate::object::StoredObject::decode(&ok).unwrap();
        assert_eq!(ok.fields["f"], json!(2));
    }

    /// A batch entry applies its commands in order, each as alone: a refused or unappliable
    /// one writes nothing and the others apply (a later one sees an earlier one's writes);
    /// each object write logs its own change under the entry's index, and a page of changes
    /// never ends inside an entry.
    #[test]
    fn a_batch_entry_applies_each_command_as_alone_and_logs_each_change() {
        use crate::changes::{log::read_page, ChangeKind};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let g = GroupId::new(1);
        let bad_key = keys::object_key(g, "a", "C", "bad");
        let mut setup = crate::storage::WriteBatch::default();
        setup.put_cf(store.cf(CF_SM).unwrap(), &bad_key, b"\x01not json");
        store.write(setup, true).unwrap();

        let mut staged = Staged::new(&store, g);
        apply_entry(&mut staged, 1, create("x")).unwrap();
        let batch = Command::Batch(vec![
            create("b1"),
            set("b1", json!(1)),
            set("missing", json!(1)),
            set("bad", json!(1)),
            set("b1", json!(2)),
            Command::CreateObject {
                app: "a".into(),
                class: "C".into(),
                object_id: "x".into(),
                now_ms: 5,
                updates: vec![],
            },
            Command::DeleteObject {
                app: "a".into(),
                class: "C".into(),
                object_id: "x".into(),
                principals: Principals::master(),
            },
        ]);
        assert!(batch.check_limits().is_ok());
        let CommandResult::Batch(results) = apply_entry(&mut staged, 2, batch).unwrap() else {
            panic!("a batch answers a batch");
        };
        assert_eq!(results.len(), 7);
        assert!(matches!(results[0], CommandResult::Created { .. }));
        assert!(matches!(results[1], CommandResult::Updated { .. }));
        assert!(matches!(
            results[2],
            CommandResult::Rejected(Error::ObjectNotFound)
        ));
        assert!(matches!(
            results[3],
            CommandResult::Rejected(Error::NotApplied(_))
        ));
        assert!(matches!(results[4], CommandResult::Updated { .. }));
        // "x" exists with another creation time: refused; then deleted.
        assert!(matches!(
            results[5],
            CommandResult::Rejected(Error::Conflict(_))
        ));
        assert!(matches!(results[6], CommandResult::Deleted));
        apply_entry(&mut staged, 3, create("after")).unwrap();
        let state = json!({"last_applied": {"index": 3}}).to_string();
        staged.put(
            keys::meta_key(g, keys::SM_APPLIED).to_vec(),
            state.into_bytes(),
        );
        store.write(staged.into_batch().unwrap(), true).unwrap();
        let b1 = store
            .get(CF_SM, &keys::object_key(g, "a", "C", "b1"))
            .unwrap()
            .unwrap();
        assert_eq!(
            crate::object::StoredObject::decode(&b1).unwrap().fields["f"],
            json!(2)
        );
        assert_eq!(
            store.get(CF_SM, &bad_key).unwrap().unwrap(),
            b"\x01not json"
        );

        let page = read_page(&store, g, Some(0), 100).unwrap();
        let kinds: Vec<(u64, ChangeKind, String)> = page
            .decode(g)
            .unwrap()
            .iter()
            .map(|c| (c.index, c.kind, c.object_id.clone()))
            .collect();
        let want = [
            (1, ChangeKind::Create, "x"),
            (2, ChangeKind::Create, "b1"),
            (2, ChangeKind::Update, "b1"),
            (2, ChangeKind::Update, "b1"),
            (2, ChangeKind::Delete, "x"),
            (3, ChangeKind::Create, "after"),
        ];
        let want: Vec<(u64, ChangeKind, String)> = want
            .iter()
            .map(|(i, k, o)| (*i, *k, o.to_string()))
            .collect();
        assert_eq!(kinds, want);
        // A page of at most 2 changes that would end inside entry 2 takes the rest of it.
        let page = read_page(&store, g, Some(0), 2).unwrap();
        assert_eq!((page.entries.len(), page.upto), (5, 2));
        let rest = read_page(&store, g, Some(page.upto), 2).unwrap();
        assert_eq!(rest.entries.iter().map(|e| e.0).collect::<Vec<_>>(), [3]);

        // Only object commands, and no batch inside a batch, reach a log.
        assert!(Command::Batch(vec![Command::Batch(vec![])])
            .check_limits()
            .is_err());
        assert!(Command::Batch(vec![Command::ExpireRecords { now_ms: 1 }])
            .check_limits()
            .is_err());
    }
}
