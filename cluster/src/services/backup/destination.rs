//! Where backups go and are read from: a directory (`/var/backups/basalt`: every node writes
//! its groups' objects there itself, so on several machines it is a shared mount) or an
//! S3-compatible bucket (`s3://bucket/prefix`, reached with the node's `--s3-*` options and
//! the `AWS_*` variables, as the files bucket is). Both through `object_store`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::{Error, Result};
use crate::files::bucket::{parse_url, s3_store, BucketOptions};

/// How long one request to a bucket may take (a part of an upload, a read's start).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// A folder of a directory or bucket (cheap to clone).
#[derive(Clone)]
pub struct Destination {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// The directory of a directory destination (its folders are removed with their objects).
    dir: Option<std::path::PathBuf>,
    /// The folder as given, for messages.
    shown: String,
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Destination {
    /// Opens `spec` to write backups to: `s3://bucket[/prefix]` (with the endpoint, region and
    /// keys of `s3`, when given) or an absolute directory, created when missing.
    pub fn open(spec: &str, s3: Option<&BucketOptions>) -> Result<Destination> {
        Self::open_with(spec, s3, true)?.ok_or_else(|| {
            Error::InvalidValue(format!("backup destination {spec:?}: no such directory"))
        })
    }

    /// Opens `spec` to read backups from, as `open` does, but a directory that does not exist
    /// is `None` (not made: reading leaves no trace).
    pub fn open_existing(spec: &str, s3: Option<&BucketOptions>) -> Result<Option<Destination>> {
        Self::open_with(spec, s3, false)
    }

    fn open_with(
        spec: &str,
        s3: Option<&BucketOptions>,
        create: bool,
    ) -> Result<Option<Destination>> {
        let shown = spec.trim_end_matches('/').to_string();
        if spec.starts_with("s3://") {
            let (bucket, prefix) = parse_url(spec)?;
            let options = BucketOptions {
                url: spec.to_string(),
                ..s3.cloned().unwrap_or_default()
            };
            let client = ClientOptions::new()
                .with_timeout(REQUEST_TIMEOUT)
                .with_connect_timeout(Duration::from_secs(5));
            let store = s3_store(&options, &bucket, client)?;
            return Ok(Some(Destination {
                store,
                prefix: Path::from(prefix),
                dir: None,
                shown,
            }));
        }
        let dir = std::path::Path::new(spec);
        if !dir.is_absolute() {
            return Err(Error::InvalidValue(format!(
                "backup destination {spec:?}: give an absolute directory or s3://bucket/prefix"
            )));
        }
        if create {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::InvalidValue(format!("backup destination {spec:?}: {e}")))?;
        } else {
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(Error::InvalidValue(format!(
                        "backup destination {spec:?}: not a directory"
                    )))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => {
                    return Err(Error::InvalidValue(format!(
                        "backup destination {spec:?}: {e}"
                    )))
                }
            }
        }
        let local = LocalFileSystem::new_with_prefix(dir)
            .map_err(|e| Error::InvalidValue(format!("backup destination {spec:?}: {e}")))?;
        Ok(Some(Destination {
            store: Arc::new(local),
            prefix: Path::default(),
            dir: Some(dir.to_path_buf()),
            shown,
        }))
    }

    /// The folder `name` inside this one.
    pub fn folder(&self, name: &str) -> Destination {
        Destination {
            store: Arc::clone(&self.store),
            prefix: self.prefix.clone().join(name),
            dir: self.dir.as_ref().map(|d| d.join(name)),
            shown: format!("{}/{name}", self.shown),
        }
    }

    /// The folder as given (`/backups/20261129T060102Z-1a2b`, `s3://bucket/prefix/…`).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    pub(crate) fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The path of object `name` in this folder (`files/<id>`: `<id>` in its folder `files`).
    pub(crate) fn path(&self, name: &str) -> Path {
        name.split('/')
            .filter(|part| !part.is_empty())
            .fold(self.prefix.clone(), |path, part| path.join(part))
    }

    /// Writes object `name` whole, durably: in a directory, through a file of its own synced
    /// to disk before it takes the name (a crash leaves the old object or the whole new one),
    /// then the folder holding it synced (`sync_folder`).
    pub async fn put(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        let Some(file) = self.local_file(name) else {
            return self
                .store
                .put(&self.path(name), PutPayload::from(Bytes::from(bytes)))
                .await
                .map(|_| ())
                .map_err(|e| self.error(name, e));
        };
        let shown = format!("{}/{name}", self.shown);
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let folder = file.parent().map(std::path::Path::to_path_buf);
            if let Some(folder) = &folder {
                std::fs::create_dir_all(folder)?;
            }
            let part = file.with_extension("part");
            let mut f = std::fs::File::create(&part)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&part, &file)?;
            match folder {
                Some(folder) => sync_dir(&folder),
                None => Ok(()),
            }
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
        .map_err(|e| Error::Storage(format!("{shown}: {e}")))
    }

    /// The file of object `name`, in a directory destination.
    fn local_file(&self, name: &str) -> Option<std::path::PathBuf> {
        let dir = self.dir.as_ref()?;
        Some(
            name.split('/')
                .filter(|part| !part.is_empty())
                .fold(dir.clone(), |path, part| path.join(part)),
        )
    }

    /// Makes object `name`, once written, durable: in a directory, its file is synced to disk
    /// (object_store writes local files without syncing them); a bucket's objects are durable
    /// once written. The folders holding it are synced by `sync_folders`.
    pub(crate) async fn sync(&self, name: &str) -> Result<()> {
        let Some(file) = self.local_file(name) else {
            return Ok(());
        };
        let shown = format!("{}/{name}", self.shown);
        tokio::task::spawn_blocking(move || std::fs::File::open(&file)?.sync_all())
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
            .map_err(|e| Error::Storage(format!("{shown}: syncing to disk: {e}")))
    }

    /// Syncs the directories a backup's files are named in (in a directory; a bucket has
    /// none): this folder's folders (`files/`), itself, and the two holding it (a new backup's
    /// folder, and `--backup-to` when it was made for it).
    pub(crate) async fn sync_folders(&self) -> Result<()> {
        let Some(dir) = self.dir.clone() else {
            return Ok(());
        };
        let shown = self.shown.clone();
        tokio::task::spawn_blocking(move || {
            let mut dirs = Vec::new();
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                if entry.file_type()?.is_dir() {
                    dirs.push(entry.path());
                }
            }
            dirs.push(dir.clone());
            dirs.extend(
                dir.ancestors()
                    .skip(1)
                    .take(2)
                    .map(std::path::Path::to_path_buf),
            );
            // Deepest first: a folder's name is synced after what it holds.
            for d in &dirs {
                sync_dir(d)?;
            }
            Ok::<_, std::io::Error>(())
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
        .map_err(|e| Error::Storage(format!("{shown}: syncing its folders to disk: {e}")))
    }

    /// Reads object `name` whole (a manifest; group states are streamed by `verify`).
    pub async fn get(&self, name: &str) -> Result<Bytes> {
        let got = self
            .store
            .get(&self.path(name))
            .await
            .map_err(|e| self.error(name, e))?;
        got.bytes().await.map_err(|e| self.error(name, e))
    }

    /// The bytes of object `name` as they arrive.
    pub(crate) async fn stream(
        &self,
        name: &str,
    ) -> Result<futures::stream::BoxStream<'static, Result<Bytes>>> {
        use futures::StreamExt;
        let got = self
            .store
            .get(&self.path(name))
            .await
            .map_err(|e| self.error(name, e))?;
        let (this, name) = (self.clone(), name.to_string());
        Ok(got
            .into_stream()
            .map(move |chunk| chunk.map_err(|e| this.error(&name, e)))
            .boxed())
    }

    /// The names of the folders right inside this one.
    pub async fn folders(&self) -> Result<Vec<String>> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let listed = self
            .store
            .list_with_delimiter(prefix)
            .await
            .map_err(|e| self.error("", e))?;
        Ok(listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect())
    }

    /// Removes every object under this folder.
    pub async fn remove_all(&self) -> Result<()> {
        use futures::TryStreamExt;
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let objects: Vec<Path> = self
            .store
            .list(prefix)
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .map_err(|e| self.error("", e))?;
        for path in objects {
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.error(path.as_ref(), e)),
            }
        }
        // A directory's emptied folders go too (a bucket has none once its objects are gone).
        if let Some(dir) = &self.dir {
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::Storage(format!("{}: {e}", self.shown)))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Reads object `name` through `consume`, which runs on a blocking thread fed chunk by
    /// chunk as they arrive, hashing it on the way: what `consume` answered, the object's size
    /// and its SHA-256 in hex. What `consume` leaves unread is still read and hashed.
    pub(crate) async fn read_through<T: Send + 'static>(
        &self,
        name: &str,
        consume: impl FnOnce(&mut ChunkReader) -> T + Send + 'static,
    ) -> Result<(T, u64, String)> {
        use futures::StreamExt;
        use sha2::{Digest, Sha256};
        let got = self
            .store
            .get(&self.path(name))
            .await
            .map_err(|e| self.error(name, e))?;
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let consuming = tokio::task::spawn_blocking(move || {
            let mut reader = ChunkReader {
                rx,
                chunk: Bytes::new(),
            };
            let out = consume(&mut reader);
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
            out
        });
        let (mut hash, mut size) = (Sha256::new(), 0u64);
        let mut stream = got.into_stream();
        let mut failed = None;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(chunk) => {
                    hash.update(&chunk);
                    size += chunk.len() as u64;
                    let _ = tx.send(chunk).await;
                }
                Err(e) => {
                    failed = Some(self.error(name, e));
                    break;
                }
            }
        }
        drop(tx);
        let out = consuming
            .await
            .map_err(|e| Error::Internal(format!("reading {name}: {e}")))?;
        match failed {
            Some(e) => Err(e),
            None => Ok((out, size, format!("{:x}", hash.finalize()))),
        }
    }

    pub(crate) fn error(&self, name: &str, e: object_store::Error) -> Error {
        match e {
            object_store::Error::NotFound { .. } => {
                Error::Storage(format!("{}/{name} is missing", self.shown))
            }
            e => Error::Unavailable(format!("{}/{name}: {e}", self.shown)),
        }
    }
}

/// The chunks of an object being read, as one byte stream (`Destination::read_through`).
pub(crate) struct ChunkReader {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    chunk: Bytes,
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                Some(c) => self.chunk = c,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// Syncs directory `dir` to disk. Filesystems that cannot sync a directory (some network and
/// FUSE mounts answer EINVAL; others EBADF or ENOTSUP) are taken as having done what they can,
/// as PostgreSQL does.
fn sync_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use rustix::io::Errno;
    let cannot = [Errno::INVAL, Errno::BADF, Errno::NOTSUP].map(Errno::raw_os_error);
    match std::fs::File::open(dir)?.sync_all() {
        Err(e) if e.raw_os_error().is_some_and(|code| cannot.contains(&code)) => Ok(()),
        other => other,
    }
}
