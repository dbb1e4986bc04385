//! `CopyStore`: this node's copies of stored files, one plain file each under
//! `<data>/files/<id[0..2]>/<id>` (decisions/0020). A copy is written to `files/tmp/` and only
//! renamed into place once its size and MD5 are the ones its uploader announced and it is
//! fsync'd (`CopyWriter::finish`), so a copy in place is always whole. An in-memory index of
//! the copies in place (size, time stored) answers `has`/`list` without touching the disk.
//!
//! While a backup copies the cluster's files (`services::backup`), it holds the copies here
//! (`hold`): a copy asked to go (its file deleted, or upkeep moving it) stays until the last
//! hold is released or lapses, so a file deleted after the backup's barrier is still there to
//! be copied; at most `DEFERRED_MAX` such drops wait.
//!
//! Used by `files::upload` and `files::read` (the node's own copies) and by
//! `peer_service::file_service` (copies written, read, listed and dropped for peers).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use md5::{Digest, Md5};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::record::FileId;
use crate::error::{Error, Result};

/// A copy in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyInfo {
    pub size: u64,
    /// When it was put in place (ms since the epoch), from its modification time.
    pub stored_ms: i64,
}

/// This node's copies (cheap to clone).
#[derive(Clone)]
pub struct CopyStore {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    index: Mutex<HashMap<FileId, CopyInfo>>,
    holds: Mutex<Holds>,
}

/// Drops that wait for the holds to end, at most (past it, copies go at once).
pub const DEFERRED_MAX: usize = 100_000;

/// The holds on this node's copies, by name (a backup's id), each until its deadline, and the
/// drops waiting for them.
#[derive(Default)]
struct Holds {
    until: HashMap<String, Instant>,
    deferred: HashSet<FileId>,
}

impl Holds {
    /// Whether a hold is on; when none is (they ended or lapsed), the drops that waited are
    /// handed out in `due`.
    fn any(&mut self, due: &mut Vec<FileId>) -> bool {
        let now = Instant::now();
        self.until.retain(|_, t| *t > now);
        if self.until.is_empty() {
            due.extend(self.deferred.drain());
            return false;
        }
        true
    }
}

fn ms_of(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The MD5 of bytes fed in pieces, as lowercase hex.
#[derive(Default, Clone)]
pub struct Md5Sum(Md5);

impl Md5Sum {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn hex(self) -> String {
        self.0
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

impl CopyStore {
    /// Opens (creating) the copies under `dir`: drops unfinished copies left in `tmp/` by a
    /// crash and indexes the copies in place.
    pub fn open(dir: &Path) -> Result<CopyStore> {
        let tmp = dir.join("tmp");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir_all(&tmp)?;
        // Every shelf exists from the start, its entry durable: a copy renamed into one and
        // acknowledged never disappears with a shelf lost in a crash.
        for shelf in 0..=255u8 {
            std::fs::create_dir_all(dir.join(format!("{shelf:02x}")))?;
        }
        std::fs::File::open(dir)?.sync_all()?;
        let mut index = HashMap::new();
        for shelf in std::fs::read_dir(dir)? {
            let shelf = shelf?;
            if shelf.file_name() == "tmp" || !shelf.file_type()?.is_dir() {
                continue;
            }
            for entry in std::fs::read_dir(shelf.path())? {
                let entry = entry?;
                let name = entry.file_name();
                let Some(id) = name.to_str().and_then(FileId::parse) else {
                    continue;
                };
                let meta = entry.metadata()?;
                index.insert(
                    id,
                    CopyInfo {
                        size: meta.len(),
                        stored_ms: meta.modified().map(ms_of).unwrap_or(0),
                    },
                );
            }
        }
        let store = CopyStore {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                index: Mutex::new(index),
                holds: Mutex::default(),
            }),
        };
        store.report();
        Ok(store)
    }

    fn index(&self) -> Result<std::sync::MutexGuard<'_, HashMap<FileId, CopyInfo>>> {
        self.inner
            .index
            .lock()
            .map_err(|_| Error::Internal("copy index poisoned".into()))
    }

    fn path_of(&self, id: &FileId) -> PathBuf {
        let id = id.as_str();
        self.inner.dir.join(&id[..2]).join(id)
    }

    /// Sets the gauges of what this node stores.
    fn report(&self) {
        if let Ok(index) = self.index() {
            metrics::gauge!("basalt_files_stored").set(index.len() as f64);
            let bytes: u64 = index.values().map(|c| c.size).sum();
            metrics::gauge!("basalt_files_stored_bytes").set(bytes as f64);
        }
    }

    /// The copy of `id` in place, if any.
    pub fn get(&self, id: &FileId) -> Option<CopyInfo> {
        self.index().ok()?.get(id).copied()
    }

    /// The copies in place whose id `keep` accepts.
    pub fn list(&self, keep: impl Fn(&FileId) -> bool) -> Vec<(FileId, CopyInfo)> {
        self.index()
            .map(|index| {
                index
                    .iter()
                    .filter(|(id, _)| keep(id))
                    .map(|(id, c)| (id.clone(), *c))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Starts writing a copy of `id` (in `tmp/` until finished).
    pub async fn writer(&self, id: &FileId) -> Result<CopyWriter> {
        let tmp = self.inner.dir.join("tmp").join(format!(
            "{}.{:016x}",
            id.as_str(),
            rand::random::<u64>()
        ));
        let file = tokio::fs::File::create(&tmp).await?;
        Ok(CopyWriter {
            store: self.clone(),
            id: id.clone(),
            tmp: Some(tmp),
            file: Some(file),
            size: 0,
            md5: Md5Sum::default(),
        })
    }

    /// A reader of up to `len` bytes of the copy of `id` from `offset`; `None` when this node
    /// holds no copy.
    pub async fn reader(
        &self,
        id: &FileId,
        offset: u64,
        len: u64,
    ) -> Result<Option<tokio::io::Take<tokio::fs::File>>> {
        if self.get(id).is_none() {
            return Ok(None);
        }
        let mut file = match tokio::fs::File::open(self.path_of(id)).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        file.seek(std::io::SeekFrom::Start(offset)).await?;
        Ok(Some(file.take(len)))
    }

    /// Holds every copy here (drops wait) until `release(name)` or for `ttl`.
    pub fn hold(&self, name: &str, ttl: Duration) {
        let mut due = Vec::new();
        {
            let mut holds = self.inner.holds.lock().unwrap_or_else(|p| p.into_inner());
            holds.any(&mut due);
            holds.until.insert(name.to_string(), Instant::now() + ttl);
        }
        self.drop_later(due);
    }

    /// Ends the hold `name`; once none is left, the copies whose drops waited go (in the
    /// background: there may be many).
    pub fn release(&self, name: &str) {
        let mut due = Vec::new();
        {
            let mut holds = self.inner.holds.lock().unwrap_or_else(|p| p.into_inner());
            holds.until.remove(name);
            holds.any(&mut due);
        }
        self.drop_later(due);
    }

    /// Drops the copies of `ids` in the background (their drops waited for a hold).
    fn drop_later(&self, ids: Vec<FileId>) {
        if ids.is_empty() {
            return;
        }
        let store = self.clone();
        tokio::spawn(async move {
            for id in ids {
                if let Err(e) = store.drop_copy(&id).await {
                    tracing::warn!(%id, "dropping a copy held for a backup: {e}");
                }
            }
        });
    }

    /// Deletes the copy of `id` — or, while a hold is on, marks it to go when the holds end;
    /// false when there was none.
    pub async fn drop_copy(&self, id: &FileId) -> Result<bool> {
        let mut due = Vec::new();
        {
            let mut holds = self.inner.holds.lock().unwrap_or_else(|p| p.into_inner());
            if holds.any(&mut due) && self.get(id).is_some() {
                if holds.deferred.len() < DEFERRED_MAX || holds.deferred.contains(id) {
                    holds.deferred.insert(id.clone());
                    return Ok(true);
                }
                tracing::warn!(%id, "more than {DEFERRED_MAX} drops wait for a backup: this copy goes now");
            }
        }
        // Holds that lapsed leave their waiting drops to the next drop.
        self.drop_later(due);
        let had = self.index()?.remove(id).is_some();
        match tokio::fs::remove_file(self.path_of(id)).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        self.report();
        Ok(had)
    }
}

/// A copy being written. Dropped unfinished, its temporary file is deleted.
pub struct CopyWriter {
    store: CopyStore,
    id: FileId,
    tmp: Option<PathBuf>,
    file: Option<tokio::fs::File>,
    size: u64,
    md5: Md5Sum,
}

impl CopyWriter {
    pub async fn write(&mut self, bytes: &[u8]) -> Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| Error::Internal("copy already finished".into()))?;
        file.write_all(bytes).await?;
        self.size += bytes.len() as u64;
        self.md5.update(bytes);
        Ok(())
    }

    /// Puts the copy in place once it holds exactly `size` bytes with MD5 `md5`: fsync'd,
    /// renamed, and the directory fsync'd, so it survives a crash from then on.
    pub async fn finish(mut self, size: u64, md5: &str) -> Result<CopyInfo> {
        let mut file = self
            .file
            .take()
            .ok_or_else(|| Error::Internal("copy already finished".into()))?;
        let got = std::mem::take(&mut self.md5).hex();
        if self.size != size || got != md5 {
            return Err(Error::InvalidOperation(format!(
                "the copy of {} holds {} bytes with MD5 {got}, not {size} with {md5}",
                self.id.as_str(),
                self.size
            )));
        }
        file.flush().await?;
        file.sync_all().await?;
        drop(file);
        let tmp = self
            .tmp
            .take()
            .ok_or_else(|| Error::Internal("copy already finished".into()))?;
        let dest = self.store.path_of(&self.id);
        let shelf = dest
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| Error::Internal("copy path has no parent".into()))?;
        let moved = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            std::fs::rename(&tmp, &dest)?;
            std::fs::File::open(&shelf)?.sync_all()
        })
        .await
        .map_err(|e| Error::Internal(format!("copy rename task: {e}")))?;
        moved?;
        let info = CopyInfo {
            size,
            stored_ms: ms_of(SystemTime::now()),
        };
        self.store.index()?.insert(self.id.clone(), info);
        self.store.report();
        Ok(info)
    }
}

impl Drop for CopyWriter {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md5_of(bytes: &[u8]) -> String {
        let mut m = Md5Sum::default();
        m.update(bytes);
        m.hex()
    }

    #[tokio::test]
    async fn a_copy_is_in_place_only_when_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = CopyStore::open(dir.path()).unwrap();
        let id = FileId::random();
        // Unfinished, then with the wrong size: never in place, nothing left in tmp.
        let mut w = store.writer(&id).await.unwrap();
        w.write(b"hello").await.unwrap();
        drop(w);
        let mut w = store.writer(&id).await.unwrap();
        w.write(b"hello").await.unwrap();
        assert!(w.finish(6, &md5_of(b"hello")).await.is_err());
        assert_eq!(store.get(&id), None);
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0
        );

        let mut w = store.writer(&id).await.unwrap();
        w.write(b"hel").await.unwrap();
        w.write(b"lo").await.unwrap();
        w.finish(5, &md5_of(b"hello")).await.unwrap();
        assert_eq!(store.get(&id).map(|c| c.size), Some(5));
        let mut r = store.reader(&id, 1, 3).await.unwrap().unwrap();
        let mut s = String::new();
        r.read_to_string(&mut s).await.unwrap();
        assert_eq!(s, "ell");

        // A reopened store finds it; a dropped one is gone.
        let again = CopyStore::open(dir.path()).unwrap();
        assert_eq!(again.get(&id).map(|c| c.size), Some(5));
        assert!(again.drop_copy(&id).await.unwrap());
        assert!(!again.drop_copy(&id).await.unwrap());
        assert!(again.reader(&id, 0, 5).await.unwrap().is_none());
        assert_eq!(CopyStore::open(dir.path()).unwrap().get(&id), None);
    }

    async fn stored(store: &CopyStore, bytes: &[u8]) -> FileId {
        let id = FileId::random();
        let mut w = store.writer(&id).await.unwrap();
        w.write(bytes).await.unwrap();
        w.finish(bytes.len() as u64, &md5_of(bytes)).await.unwrap();
        id
    }

    #[tokio::test]
    async fn held_copies_stay_until_the_last_hold_ends_or_lapses() {
        let dir = tempfile::tempdir().unwrap();
        let store = CopyStore::open(dir.path()).unwrap();
        let (a, b) = (stored(&store, b"a").await, stored(&store, b"b").await);
        store.hold("backup-1", Duration::from_secs(60));
        store.hold("backup-2", Duration::from_secs(60));
        assert!(
            store.drop_copy(&a).await.unwrap(),
            "a drop while held is taken"
        );
        assert!(
            store.reader(&a, 0, 1).await.unwrap().is_some(),
            "still readable"
        );
        store.release("backup-1");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(store.get(&a).is_some(), "backup-2 still holds it");
        store.release("backup-2");
        let path = dir.path().join(&a.as_str()[..2]).join(a.as_str());
        for _ in 0..100 {
            if !path.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(store.get(&a), None, "gone with the last hold");
        assert!(!path.exists());

        // A hold that lapses holds nothing, and the drops that waited for it go with the next.
        let c = stored(&store, b"c").await;
        store.hold("backup-3", Duration::from_millis(20));
        assert!(store.drop_copy(&c).await.unwrap());
        assert!(store.get(&c).is_some(), "held");
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(store.drop_copy(&b).await.unwrap());
        assert_eq!(store.get(&b), None);
        for _ in 0..100 {
            if store.get(&c).is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(store.get(&c), None, "the lapsed hold's waiting drop went");
    }
}
