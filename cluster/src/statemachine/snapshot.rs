//! Snapshots of a group's state machine as files, streamed and never held in memory whole.
//!
//! Building iterates the group's key range in one RocksDB point-in-time view and writes it to
//! `snapshots/g<group>/<index>-<id>.snap`; `current` names the newest file. Installing replaces
//! the group's range with a received file's content — a range delete, then the records written
//! as one sorted table file and ingested (`Store::ingest`) — guarded by a synced marker in
//! `raft_meta` so that an install a crash interrupted is redone on the next start.
//!
//! File format: `BSNAP001`, u32-LE length + JSON `SnapshotMeta`, then records of u32-LE key
//! length, key (without the group prefix), u32-LE value length, value; a zero key length ends it.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::alias::SnapshotOf;
use openraft::RaftSnapshotBuilder;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::applied_state::AppliedState;
use super::upgrade;
use crate::admin::GroupDigest;
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::namespace::Namespace;
use crate::raft::{SnapshotMeta, TypeConfig};
use crate::storage::keys::{self, CF_RAFT_META, CF_SM};
use crate::storage::store::{TableFile, TableOptions};
use crate::storage::{Store, WriteBatch};

const MAGIC: &[u8; 8] = b"BSNAP001";

/// A snapshot's data: a file on local disk.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    pub path: PathBuf,
}

pub struct ShardSnapshotBuilder {
    group: GroupId,
    store: Arc<Store>,
    dir: PathBuf,
    /// The state machine's liveness token (`ShardStateMachine::alive`), held until the
    /// build's files are written.
    alive: Arc<()>,
}

impl ShardSnapshotBuilder {
    pub fn new(group: GroupId, store: Arc<Store>, dir: PathBuf) -> Self {
        ShardSnapshotBuilder {
            group,
            store,
            dir,
            alive: Arc::new(()),
        }
    }

    /// The builder holding `alive` (its state machine's token) while it works.
    pub fn holding(mut self, alive: Arc<()>) -> Self {
        self.alive = alive;
        self
    }
}

impl RaftSnapshotBuilder<TypeConfig> for ShardSnapshotBuilder {
    type SnapshotData = SnapshotFile;

    async fn build_snapshot(
        &mut self,
    ) -> std::result::Result<SnapshotOf<TypeConfig, SnapshotFile>, std::io::Error> {
        let (group, store, dir) = (self.group, Arc::clone(&self.store), self.dir.clone());
        let started = std::time::Instant::now();
        let alive = Arc::clone(&self.alive);
        let snap = tokio::task::spawn_blocking(move || {
            let _alive = alive;
            build_when_room(group, &store, &dir)
        })
        .await
        .map_err(std::io::Error::other)?
        .map_err(|e| std::io::Error::other(e.to_string()))?;
        metrics::histogram!("basalt_raft_snapshot_build_seconds")
            .record(started.elapsed().as_secs_f64());
        Ok(snap)
    }
}

fn write_u32(w: &mut (impl Write + ?Sized), n: usize) -> Result<()> {
    let n = u32::try_from(n).map_err(|_| Error::Storage("snapshot record too large".into()))?;
    w.write_all(&n.to_le_bytes())?;
    Ok(())
}

fn read_u32(r: &mut impl Read) -> Result<usize> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b) as usize)
}

fn read_exact_vec(r: &mut impl Read, len: usize) -> Result<Vec<u8>> {
    let mut v = vec![0u8; len];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn unique_name(index: u64) -> String {
    format!("{index:020}-{:016x}.snap", rand::rng().random::<u64>())
}

/// Free space a snapshot of a group needs besides its own size (what the store may write
/// meanwhile).
const ROOM_BESIDES: u64 = 32 << 20;

/// Whether the disk of `dir` has room for a snapshot of `group`: twice the group's state as
/// the store holds it (a snapshot is not compressed) and `ROOM_BESIDES`.
pub(super) fn has_room(group: GroupId, store: &Store, dir: &Path) -> bool {
    let state = store
        .approximate_range_size(CF_SM, &keys::group_prefix(group), &keys::group_end(group))
        .unwrap_or(0);
    let probe = if dir.exists() { dir } else { store.path() };
    match rustix::fs::statvfs(probe) {
        Ok(s) => {
            let free = s.f_bavail.saturating_mul(s.f_frsize);
            free >= state.saturating_mul(2).saturating_add(ROOM_BESIDES)
        }
        Err(_) => true,
    }
}

/// Runs `op` until it does not fail for want of space, backing off from 50 ms to 2 s and
/// waiting for `room` before each new try; gives up when the node shuts down. Snapshot files
/// are written beside the store: a full disk must not fail a build or an install, which
/// would stop the group's Raft for good.
fn until_room<T>(
    store: &Store,
    what: &str,
    room: impl Fn() -> bool,
    mut op: impl FnMut() -> Result<T>,
) -> Result<T> {
    let mut wait = std::time::Duration::from_millis(50);
    loop {
        match op() {
            Err(e) if crate::storage::store::is_no_space(&e) && !store.is_closing() => {
                metrics::counter!("basalt_raft_snapshot_no_space_total").increment(1);
                tracing::warn!("{what}: the disk is full, trying again once there is room: {e}");
                loop {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(std::time::Duration::from_secs(2));
                    if store.is_closing() || room() {
                        break;
                    }
                }
            }
            other => return other,
        }
    }
}

/// `build`, tried again whenever the disk had no room for the file.
fn build_when_room(
    group: GroupId,
    store: &Store,
    dir: &Path,
) -> Result<SnapshotOf<TypeConfig, SnapshotFile>> {
    until_room(
        store,
        "building a snapshot",
        || has_room(group, store, dir),
        || build(group, store, dir),
    )
}

/// Writes the group's current state to a new snapshot file and makes it `current`; a file
/// left half written is removed.
pub fn build(
    group: GroupId,
    store: &Store,
    dir: &Path,
) -> Result<SnapshotOf<TypeConfig, SnapshotFile>> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("building-{:016x}", rand::rng().random::<u64>()));
    let built = build_into(group, store, dir, &tmp);
    if built.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    built
}

fn build_into(
    group: GroupId,
    store: &Store,
    dir: &Path,
    tmp: &Path,
) -> Result<SnapshotOf<TypeConfig, SnapshotFile>> {
    fail::fail_point!("snapshot-build-nospace", |_| Err(Error::Storage(
        "No space left on device (fail point)".into()
    )));
    let mut w = BufWriter::new(File::create(tmp)?);
    let (meta, _) = write_state(group, store, &mut w, || {})?;
    let file = w.into_inner().map_err(|e| Error::Storage(e.to_string()))?;
    file.sync_all()?;
    let index = meta.last_log_id.as_ref().map(|l| l.index).unwrap_or(0);
    let path = dir.join(unique_name(index));
    fs::rename(tmp, &path)?;
    set_current(dir, &path)?;
    Ok(SnapshotOf::<TypeConfig, SnapshotFile> {
        meta,
        snapshot: SnapshotFile { path },
    })
}

/// Writes `group`'s replicated state to `w` in the snapshot file format, from one
/// point-in-time view (`pinned` is called once the view is taken, before anything is read):
/// answers the view's meta and how many records it holds. Snapshots and backups
/// (`services::backup`) are written this way.
pub fn write_state(
    group: GroupId,
    store: &Store,
    w: &mut impl Write,
    pinned: impl FnOnce(),
) -> Result<(SnapshotMeta, u64)> {
    write_state_seeing(group, store, w, pinned, |_, _| Ok(()))
}

/// `write_state`, showing `seen` every record written (its key without the group's prefix,
/// and its value) once it is written: a backup lists the stored files the state names.
pub fn write_state_seeing(
    group: GroupId,
    store: &Store,
    w: &mut impl Write,
    pinned: impl FnOnce(),
    mut seen: impl FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<(SnapshotMeta, u64)> {
    w.write_all(MAGIC)?;
    let applied_key = keys::meta_key(group, keys::SM_APPLIED);
    let mut meta: Option<SnapshotMeta> = None;
    let mut records = 0u64;
    let write_header = |w: &mut dyn Write, applied: Option<&[u8]>| -> Result<SnapshotMeta> {
        let state: AppliedState = match applied {
            Some(b) => serde_json::from_slice(b)?,
            None => AppliedState::default(),
        };
        let meta = SnapshotMeta {
            last_log_id: state.last_applied,
            last_membership: state.membership,
        };
        let bytes = serde_json::to_vec(&meta)?;
        write_u32(w, bytes.len())?;
        w.write_all(&bytes)?;
        Ok(meta)
    };
    // The applied state sorts first in the group's range, so the header is known before any
    // record is written, and both come from the same point-in-time view.
    scan_state(group, store, pinned, |k, v| {
        if k == applied_key {
            meta = Some(write_header(w, Some(v))?);
            return Ok(true);
        }
        if meta.is_none() {
            meta = Some(write_header(w, None)?);
        }
        let k = &k[4..];
        write_u32(w, k.len())?;
        w.write_all(k)?;
        write_u32(w, v.len())?;
        w.write_all(v)?;
        records += 1;
        seen(k, v)?;
        Ok(true)
    })?;
    let meta = match meta {
        Some(m) => m,
        None => write_header(w, None)?,
    };
    write_u32(w, 0)?;
    Ok((meta, records))
}

/// Copies a state written by `write_state` from `r` to `w`, its meta replaced by what
/// `rewrite` makes of it (a restore gives it the new cluster's membership): the meta written.
pub fn copy_state(
    r: &mut impl Read,
    w: &mut impl Write,
    rewrite: impl FnOnce(SnapshotMeta) -> Result<SnapshotMeta>,
) -> Result<SnapshotMeta> {
    let meta = rewrite(read_header(r)?)?;
    w.write_all(MAGIC)?;
    let bytes = serde_json::to_vec(&meta)?;
    write_u32(w, bytes.len())?;
    w.write_all(&bytes)?;
    std::io::copy(r, w)?;
    Ok(meta)
}

/// A whole state read by `read_state`: its meta, how many records it holds, and the value of
/// the key it was asked to keep, if the state holds it.
pub struct ReadState {
    pub meta: SnapshotMeta,
    pub records: u64,
    pub kept: Option<Vec<u8>>,
}

/// Reads a whole state written by `write_state` from `r`, checking its format to the end
/// marker and that nothing follows it, keeping the value of the key `keep` (a key of the
/// state's group without the group's 4-byte prefix, as `write_state` writes keys) when given.
pub fn read_state(r: &mut impl Read, keep: Option<&[u8]>) -> Result<ReadState> {
    let meta = read_header(r)?;
    let mut records = 0u64;
    let mut kept = None;
    loop {
        let klen = read_u32(r)?;
        if klen == 0 {
            break;
        }
        let wanted = keep.filter(|k| k.len() == klen);
        let matched = match wanted {
            Some(k) => {
                let mut key = vec![0u8; klen];
                r.read_exact(&mut key)?;
                key == k
            }
            None => {
                std::io::copy(&mut r.by_ref().take(klen as u64), &mut std::io::sink())?;
                false
            }
        };
        let vlen = read_u32(r)?;
        let copied = if matched {
            let mut value = Vec::with_capacity(vlen.min(1 << 20));
            let n = std::io::copy(&mut r.by_ref().take(vlen as u64), &mut value)?;
            kept = Some(value);
            n
        } else {
            std::io::copy(&mut r.by_ref().take(vlen as u64), &mut std::io::sink())?
        };
        if copied != vlen as u64 {
            return Err(Error::Storage("the state ends inside a record".into()));
        }
        records += 1;
    }
    if r.read(&mut [0u8; 1])? != 0 {
        return Err(Error::Storage("bytes follow the state's end".into()));
    }
    Ok(ReadState {
        meta,
        records,
        kept,
    })
}

/// Points `current` at `path` and removes older snapshot files.
fn set_current(dir: &Path, path: &Path) -> Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::Storage("bad snapshot path".into()))?;
    let tmp = dir.join("current.tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(name.as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join("current"))?;
    for entry in fs::read_dir(dir)? {
        let p = entry?.path();
        let is_snap = p.extension().is_some_and(|e| e == "snap");
        if is_snap && p.file_name().and_then(|n| n.to_str()) != Some(name) {
            let _ = fs::remove_file(&p);
        }
    }
    Ok(())
}

/// Reads the meta at the head of a snapshot file, leaving the reader at the first record.
fn read_header(r: &mut impl Read) -> Result<SnapshotMeta> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(Error::Storage("not a Basalt snapshot file".into()));
    }
    let len = read_u32(r)?;
    Ok(serde_json::from_slice(&read_exact_vec(r, len)?)?)
}

/// The group's newest snapshot, if any. A snapshot being built meanwhile moves `current` on
/// and removes the file it named: the pointer is read again then (a file gone under the
/// reader is not an error of the store, which would stop the group's Raft).
pub fn current(dir: &Path) -> Result<Option<SnapshotOf<TypeConfig, SnapshotFile>>> {
    let mut attempts = 0;
    loop {
        let name = match fs::read_to_string(dir.join("current")) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let path = dir.join(name.trim());
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempts < 100 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let meta = read_header(&mut BufReader::new(file))?;
        return Ok(Some(SnapshotOf::<TypeConfig, SnapshotFile> {
            meta,
            snapshot: SnapshotFile { path },
        }));
    }
}

#[derive(Serialize, Deserialize)]
struct InstallMarker {
    path: PathBuf,
    meta: SnapshotMeta,
}

/// Replaces the group's state with a received snapshot file.
pub fn install(
    group: GroupId,
    store: &Store,
    dir: &Path,
    meta: &SnapshotMeta,
    snapshot: SnapshotFile,
) -> Result<AppliedState> {
    let index = meta.last_log_id.as_ref().map(|l| l.index).unwrap_or(0);
    let path = dir.join(unique_name(index));
    let some_room = || store_has_room(store);
    until_room(store, "installing a snapshot", some_room, || {
        fs::create_dir_all(dir)?;
        if fs::rename(&snapshot.path, &path).is_err() {
            if let Err(e) = fs::copy(&snapshot.path, &path) {
                let _ = fs::remove_file(&path);
                return Err(e.into());
            }
            let _ = fs::remove_file(&snapshot.path);
        }
        Ok(File::open(&path)?.sync_all()?)
    })?;
    let marker = InstallMarker {
        path: path.clone(),
        meta: meta.clone(),
    };
    let mut b = WriteBatch::default();
    b.put_cf(
        store.cf(CF_RAFT_META)?,
        keys::meta_key(group, keys::META_INSTALLING),
        serde_json::to_vec(&marker)?,
    );
    store.write_until_room_blocking(b, true)?;
    let applied = load(group, store, &marker)?;
    until_room(store, "installing a snapshot", some_room, || {
        set_current(dir, &path)
    })?;
    Ok(applied)
}

/// Visits every record of `group`'s replicated state (what a snapshot carries) in key order,
/// from one point-in-time view.
fn scan_state(
    group: GroupId,
    store: &Store,
    pinned: impl FnOnce(),
    visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
) -> Result<()> {
    store.scan_snapshot_pinned(
        CF_SM,
        &keys::group_prefix(group),
        &keys::group_end(group),
        pinned,
        visit,
    )
}

/// The digest of `group`'s state in `store` (`admin::GroupDigest`): the same records a snapshot
/// carries, from one point-in-time view.
pub fn digest(group: GroupId, store: &Store) -> Result<GroupDigest> {
    digest_pinned(group, store, || {})
}

/// `digest`, calling `pinned` once the view is taken: SHA-256 of every key's and value's length
/// and bytes, in key order (the same in every build).
pub fn digest_pinned(group: GroupId, store: &Store, pinned: impl FnOnce()) -> Result<GroupDigest> {
    use sha2::{Digest, Sha256};
    let applied_key = keys::meta_key(group, keys::SM_APPLIED);
    let mut hasher = Sha256::new();
    let (mut records, mut applied) = (0u64, 0u64);
    scan_state(group, store, pinned, |k, v| {
        if k == applied_key {
            let state: AppliedState = serde_json::from_slice(v)?;
            applied = state.last_applied.map(|l| l.index).unwrap_or(0);
        }
        hasher.update((k.len() as u64).to_le_bytes());
        hasher.update(k);
        hasher.update((v.len() as u64).to_le_bytes());
        hasher.update(v);
        records += 1;
        Ok(true)
    })?;
    Ok(GroupDigest {
        group,
        applied,
        records,
        digest: format!("{:x}", hasher.finalize()),
    })
}

/// Finishes an install that a crash interrupted.
pub fn resume_interrupted_install(group: GroupId, store: &Store) -> Result<()> {
    if let Some(bytes) = store.get(CF_RAFT_META, &keys::meta_key(group, keys::META_INSTALLING))? {
        let marker: InstallMarker = serde_json::from_slice(&bytes)?;
        tracing::warn!(%group, path = %marker.path.display(), "redoing an interrupted snapshot install");
        load(group, store, &marker)?;
        if let Some(dir) = marker.path.parent() {
            set_current(dir, &marker.path)?;
        }
    }
    Ok(())
}

/// What a snapshot's records held, for the counts an older snapshot lacks.
#[derive(Default)]
struct Found {
    data: bool,
    usage: bool,
    changes: bool,
    change_bytes: bool,
}

/// Writes the records of the snapshot file `snapshot` (of `group`) as the table file
/// `table_path`, keys with the group's prefix, values in the current encoding.
fn write_table(
    group: GroupId,
    snapshot: &Path,
    options: &TableOptions,
    table_path: &Path,
) -> Result<(crate::storage::store::FinishedTable, Found)> {
    let mut r = BufReader::new(File::open(snapshot)?);
    read_header(&mut r)?;
    let mut table = TableFile::create(options, table_path)?;
    // A snapshot built before apply counted usage (or the change log's bytes) holds data (or
    // changes) but no counts: the group is counted once installed.
    let usage_prefix = keys::record_ns_prefix(group, Namespace::Usage.name());
    let files_prefix = keys::record_ns_prefix(group, Namespace::File.name());
    let changes_prefix = keys::sm_family(group, keys::SM_CHANGES);
    let change_bytes_prefix = keys::sm_family(group, keys::SM_CHANGES_BYTES);
    let mut found = Found::default();
    loop {
        let klen = read_u32(&mut r)?;
        if klen == 0 {
            break;
        }
        let mut key = keys::group_prefix(group).to_vec();
        key.extend_from_slice(&read_exact_vec(&mut r, klen)?);
        let vlen = read_u32(&mut r)?;
        let value = upgrade::current_encoding(&key, read_exact_vec(&mut r, vlen)?);
        found.usage |= key.starts_with(&usage_prefix);
        found.changes |= key.starts_with(&changes_prefix);
        found.change_bytes |= key.starts_with(&change_bytes_prefix);
        found.data |= key.get(4) == Some(&keys::SM_OBJECT) || key.starts_with(&files_prefix);
        table.put(&key, &value)?;
    }
    Ok((table.finish()?, found))
}

/// Loads the snapshot file of `marker` over `group`'s state: the group's range deleted, then
/// the file's records written as one table file and ingested (so a crash leaves the range
/// either as it was, deleted, or whole), then the applied state written and the marker cleared
/// with one synced batch.
fn load(group: GroupId, store: &Store, marker: &InstallMarker) -> Result<AppliedState> {
    let cf = store.cf(CF_SM)?;
    let table_options = store.table_options();
    let table_path = marker.path.with_extension("table");
    let some_room = || store_has_room(store);
    // The table takes as much room as the state: written again while the disk has none.
    let (table, found) = until_room(store, "installing a snapshot", some_room, || {
        write_table(group, &marker.path, &table_options, &table_path)
    })?;
    let mut cleared = WriteBatch::default();
    cleared.delete_range_cf(
        cf,
        keys::group_prefix(group).to_vec(),
        keys::group_end(group),
    );
    store.write_until_room_blocking(cleared, false)?;
    // Flushed here rather than by the ingest, which would hold every write of the node
    // meanwhile (the range delete overlaps the table).
    store.flush(CF_SM)?;
    fail::fail_point!("snapshot-install-batch");
    let ingested = until_room(store, "installing a snapshot", some_room, || {
        store.ingest(CF_SM, &table)
    });
    drop(table);
    ingested?;
    let Found {
        data: has_data,
        usage: has_usage,
        changes: has_changes,
        change_bytes: has_change_bytes,
    } = found;
    let mut batch = WriteBatch::default();
    if (has_data && !has_usage) || (has_changes && !has_change_bytes) {
        store.write_until_room_blocking(std::mem::take(&mut batch), false)?;
        if has_data && !has_usage {
            for (k, v) in upgrade::group_usage(store, group)? {
                batch.put_cf(cf, k, v);
            }
        }
        if has_changes && !has_change_bytes {
            for (k, v) in upgrade::group_change_bytes(store, group)? {
                batch.put_cf(cf, k, v);
            }
        }
    }
    let applied = AppliedState {
        last_applied: marker.meta.last_log_id,
        membership: marker.meta.last_membership.clone(),
    };
    batch.put_cf(
        cf,
        keys::meta_key(group, keys::SM_APPLIED),
        serde_json::to_vec(&applied)?,
    );
    batch.delete_cf(
        store.cf(CF_RAFT_META)?,
        keys::meta_key(group, keys::META_INSTALLING),
    );
    store.write_until_room_blocking(batch, true)?;
    Ok(applied)
}

/// Whether the store's disk has room to work again (`ROOM_BESIDES` free).
fn store_has_room(store: &Store) -> bool {
    match rustix::fs::statvfs(store.path()) {
        Ok(s) => s.f_bavail.saturating_mul(s.f_frsize) >= ROOM_BESIDES,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;
    use crate::ids::GroupId;
    use crate::statemachine::{apply::apply_command, staged::Staged};
    use serde_json::json;

    #[test]
    fn a_snapshot_installs_the_same_state_elsewhere() {
        let src_dir = tempfile::tempdir().unwrap();
        let src = Store::open(&src_dir.path().join("db")).unwrap();
        let mut st = Staged::new(&src, GroupId::new(3));
        for i in 0..50 {
            let cmd = Command::PutRecord {
                ns: "n".into(),
                key: format!("k{i}"),
                value: json!(i),
                expires_at_ms: None,
            };
            apply_command(&mut st, cmd).unwrap();
        }
        st.put(
            keys::meta_key(GroupId::new(3), keys::SM_APPLIED).to_vec(),
            serde_json::to_vec(&AppliedState::default()).unwrap(),
        );
        // An object stored before the current encoding (a snapshot built before a node's
        // upgrade holds such objects) is installed in the current one.
        let old = keys::object_key(GroupId::new(3), "app", "C", "old");
        let first = br#"{"v":1,"created_ms":1,"updated_ms":2,"fields":{"a":[1]}}"#;
        st.put(old.clone(), first.to_vec());
        src.write(st.into_batch().unwrap(), false).unwrap();
        let snap = build(GroupId::new(3), &src, &src_dir.path().join("snaps")).unwrap();

        let dst_dir = tempfile::tempdir().unwrap();
        let dst = Store::open(&dst_dir.path().join("db")).unwrap();
        // Stale data of the group on the receiver must disappear; other groups stay.
        let mut st = Staged::new(&dst, GroupId::new(3));
        apply_command(
            &mut st,
            Command::PutRecord {
                ns: "n".into(),
                key: "stale".into(),
                value: json!(0),
                expires_at_ms: None,
            },
        )
        .unwrap();
        dst.write(st.into_batch().unwrap(), false).unwrap();
        let mut st = Staged::new(&dst, GroupId::new(4));
        apply_command(
            &mut st,
            Command::PutRecord {
                ns: "n".into(),
                key: "other".into(),
                value: json!(0),
                expires_at_ms: None,
            },
        )
        .unwrap();
        dst.write(st.into_batch().unwrap(), false).unwrap();

        let copy = dst_dir.path().join("incoming.snap");
        fs::copy(&snap.snapshot.path, &copy).unwrap();
        install(
            GroupId::new(3),
            &dst,
            &dst_dir.path().join("snaps"),
            &snap.meta,
            SnapshotFile { path: copy },
        )
        .unwrap();
        // Built before apply counted usage (it holds an object and no usage record), the
        // snapshot's group is counted once installed.
        let object = dst.get(CF_SM, &old).unwrap().unwrap();
        let usage = dst
            .get(CF_SM, &keys::record_key(GroupId::new(3), "usage", "app"))
            .unwrap()
            .map(|b| super::super::usage_writes::decode(&b).unwrap());
        assert_eq!(
            usage.map(|u| (u.objects, u.object_bytes)),
            Some((1, object.len() as u64))
        );
        let mut n = 0;
        dst.scan(
            CF_SM,
            &keys::record_ns_prefix(GroupId::new(3), "n"),
            &keys::separated_end(&keys::record_ns_prefix(GroupId::new(3), "n")),
            |_, _| {
                n += 1;
                Ok(true)
            },
        )
        .unwrap();
        assert_eq!(n, 50);
        assert!(dst
            .get(CF_SM, &keys::record_key(GroupId::new(3), "n", "stale"))
            .unwrap()
            .is_none());
        assert!(dst
            .get(CF_SM, &keys::record_key(GroupId::new(4), "n", "other"))
            .unwrap()
            .is_some());
        assert!(dst
            .get(
                CF_RAFT_META,
                &keys::meta_key(GroupId::new(3), keys::META_INSTALLING)
            )
            .unwrap()
            .is_none());
        assert!(current(&dst_dir.path().join("snaps")).unwrap().is_some());
        let installed = dst.get(CF_SM, &old).unwrap().unwrap();
        assert!(crate::object::StoredObject::is_current_encoding(&installed));
        assert_eq!(
            crate::object::StoredObject::decode(&installed).unwrap(),
            crate::object::StoredObject::decode(first).unwrap()
        );
    }

    /// Snapshots built while another thread reads the current one: the reader always gets
    /// one (a file removed under it is read again through the moved pointer), never an error.
    #[test]
    fn the_current_snapshot_is_read_while_new_ones_are_built() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(Store::open(&dir.path().join("db")).unwrap());
        let snaps = dir.path().join("snaps");
        build(GroupId::new(1), &store, &snaps).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let builder = {
            let (store, snaps, stop) = (store.clone(), snaps.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut built = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && built < 2_000 {
                    build(GroupId::new(1), &store, &snaps).unwrap();
                    built += 1;
                }
                built
            })
        };
        for _ in 0..2_000 {
            assert!(current(&snaps).unwrap().is_some());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(builder.join().unwrap() > 0);
    }
}
