//! One group's part of a backup, on the node whose replica writes it: once the replica applied
//! the group's barrier, it pins a point-in-time view of the group's state (answering the
//! coordinator, which may then lower the fence) and streams it — in the snapshot file format,
//! zstd-compressed, hashed with SHA-256 — to the destination as one object, while the stored
//! files whose records it holds are noted in a spool file on the node and copied beside it
//! once it is written (`stored_files`), at most `--rate` bytes per second for all of this
//! node's groups. Each group's state is read and compressed on a thread of its own at nice
//! `WRITER_NICE` (requests come first), once the node's write fence is down (the barriers and
//! pins of the other groups come first too). At most `STREAMS` groups stream at once on a node
//! (the others' views wait, pinned, on their threads); each holds a few chunks
//! in memory (`CHUNK_BYTES`, parts of `PART_BYTES`). An upload that fails or is aborted
//! (`abort`: the backup failed elsewhere) leaves no object under its name.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::destination::Destination;
use super::upload::{upload, Pace, CHUNK_BYTES};
use crate::admin::GroupJob;
use crate::backup_manifest::GroupBackup;
use crate::error::{Error, Result};
use crate::files::bucket::BucketOptions;
use crate::files::record::{FileId, FileRecord};
use crate::ids::GroupId;
use crate::namespace::Namespace;
use crate::replicas::Replicas;
use crate::services::files::Files;
use crate::statemachine::snapshot;
use crate::storage::keys;
use crate::storage::records::StoredRecord;

/// The nice value of the threads that read and compress group states (on Linux, where nice is
/// per thread): the node's requests get the CPU first.
const WRITER_NICE: i32 = 10;
/// Chunks queued between the compressing thread and the upload.
const CHUNKS_QUEUED: usize = 2;

/// Groups a node streams at once.
const STREAMS: usize = 2;
/// zstd's level: its fastest, which leaves the most CPU to requests (an eighth of the state's
/// size for the bench's JSON objects, against a ninth at level 3).
const ZSTD_LEVEL: i32 = 1;
/// How long a replica may take to apply its group's barrier.
const APPLY_WAIT: Duration = Duration::from_secs(10);
/// Jobs nobody waited for are forgotten after this long.
const FORGET_AFTER: Duration = Duration::from_secs(6 * 3600);

/// This node's group jobs, by backup and group, and what they reach: the stored files, and
/// the options of S3 destinations.
pub struct GroupJobs {
    jobs: Mutex<HashMap<(String, GroupId), Running>>,
    runs: Arc<Mutex<HashMap<String, Arc<Run>>>>,
    streams: Arc<tokio::sync::Semaphore>,
    files: Files,
    s3: Option<BucketOptions>,
}

/// What this node's groups of one backup share: the pace, and whether it was aborted.
struct Run {
    pace: Pace,
    aborted: Arc<AtomicBool>,
    /// Its group jobs on this node still running: the run is forgotten when the last ends.
    tasks: AtomicUsize,
}

struct Running {
    started: Instant,
    done: oneshot::Receiver<Result<GroupBackup>>,
}

impl GroupJobs {
    pub fn new(files: Files, s3: Option<BucketOptions>) -> GroupJobs {
        GroupJobs {
            jobs: Mutex::default(),
            runs: Arc::default(),
            streams: Arc::new(tokio::sync::Semaphore::new(STREAMS)),
            files,
            s3,
        }
    }

    /// The options of S3 destinations (the files bucket's endpoint, region and keys).
    pub(crate) fn s3(&self) -> Option<&BucketOptions> {
        self.s3.as_ref()
    }

    /// The stored files of this node.
    pub(crate) fn files(&self) -> &Files {
        &self.files
    }

    /// Starts `job` on this node's replica, answering once its view is pinned.
    pub(crate) async fn start(&self, replicas: &Replicas, job: GroupJob) -> Result<()> {
        let raft = replicas.group(job.group)?;
        raft.wait(Some(APPLY_WAIT))
            .applied_index_at_least(Some(job.barrier), "backup barrier")
            .await
            .map_err(|e| {
                Error::Timeout(format!(
                    "group {} did not apply backup {}'s barrier here: {e}",
                    job.group, job.backup
                ))
            })?;
        let dest = Destination::open(&job.dest, self.s3())?.folder(&job.backup);
        let files = self.files.clone();
        let store = replicas.store();
        let run = self.run(&job, &spool_dir(&store));
        let streams = Arc::clone(&self.streams);
        let (pinned_tx, pinned_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let node = replicas.node_id();
        let (group, barrier) = (job.group, job.barrier);
        let spool = spool_dir(&store).join(format!("{}.g{:05}.files", job.backup, group.get()));
        let (runs, backup) = (Arc::clone(&self.runs), job.backup.clone());
        // Told once this node's fence is down (or gone with the node): the writer starts then.
        let (fence_down_tx, fence_down_rx) = oneshot::channel::<()>();
        let mut fence = replicas.fence().watch();
        tokio::spawn(async move {
            fence.pass().await;
            let _ = fence_down_tx.send(());
        });
        tokio::spawn(async move {
            let object = GroupBackup::object_name(group);
            let (chunks_tx, chunks_rx) = mpsc::channel(CHUNKS_QUEUED);
            let aborted = Arc::clone(&run.aborted);
            let spooled = spool.clone();
            let write = move || {
                let sink = ChunkSink::new(chunks_tx, aborted);
                let mut w = Counting::new(zstd::stream::write::Encoder::new(sink, ZSTD_LEVEL)?);
                let mut turn = None;
                if let Some(dir) = spooled.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                let mut spool = std::io::BufWriter::new(std::fs::File::create(&spooled)?);
                let file_prefix = keys::record_ns_prefix(group, Namespace::File.name());
                // The stored files the state names, kept aside to be copied once the state is
                // written (the view is not held open while files are copied).
                let seen = |k: &[u8], v: &[u8]| {
                    if let Some(file) = file_record(&file_prefix[4..], k, v) {
                        serde_json::to_writer(&mut spool, &file)?;
                        spool.write_all(b"\n")?;
                    }
                    Ok(())
                };
                let pinned = || {
                    let _ = pinned_tx.send(());
                    // Pinned (the fence may come down): from now on, requests come first.
                    lower_priority();
                    // The view is taken: it waits here, pinned, until the fence is down (the
                    // other groups' barriers and pins come first), then for its turn to stream.
                    let _ = fence_down_rx.blocking_recv();
                    turn = futures::executor::block_on(streams.acquire_owned()).ok();
                };
                let (meta, records) =
                    snapshot::write_state_seeing(group, &store, &mut w, pinned, seen)?;
                spool
                    .into_inner()
                    .map_err(|e| Error::Storage(e.to_string()))?
                    .sync_all()?;
                let bytes = w.count;
                let mut sink = w.inner.finish()?;
                sink.end()?;
                drop(turn);
                Ok::<_, Error>((meta, records, bytes, sink.size, sink.sha256()))
            };
            // A thread of its own, at a lower CPU priority: requests come first.
            let (written_tx, written_rx) = oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name(format!("backup-g{}", group.get()))
                .spawn(move || {
                    let _ = written_tx.send(write());
                });
            let writing = async move {
                spawned?;
                written_rx
                    .await
                    .map_err(|_| Error::Internal("the backup's writer thread died".into()))?
            };
            let uploading = upload(&dest, &object, chunks_rx, &run.pace);
            let (written, uploaded) = tokio::join!(writing, uploading);
            let written = match (written, uploaded) {
                (Ok(written), Ok(())) => Ok(written),
                (Err(e), _) | (_, Err(e)) => Err(e),
            };
            let result = match written {
                Ok((meta, records, bytes, size, sha256)) => super::stored_files::copy_files(
                    &files,
                    &dest,
                    group,
                    &spool,
                    &run.pace,
                    &run.aborted,
                )
                .await
                .map(|files| GroupBackup {
                    group,
                    barrier,
                    applied: meta.last_log_id.map(|l| l.index).unwrap_or(0),
                    records,
                    bytes,
                    object,
                    size,
                    sha256,
                    node,
                    files: Some(files),
                }),
                Err(e) => Err(e),
            };
            let _ = tokio::fs::remove_file(&spool).await;
            // The last of this run's jobs here forgets it (an abort may have already).
            if run.tasks.fetch_sub(1, Ordering::SeqCst) == 1 {
                let mut runs = runs.lock().unwrap_or_else(|p| p.into_inner());
                if runs.get(&backup).is_some_and(|r| Arc::ptr_eq(r, &run)) {
                    runs.remove(&backup);
                }
            }
            let _ = done_tx.send(result);
        });
        {
            let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            jobs.retain(|_, r| r.started.elapsed() < FORGET_AFTER);
            jobs.insert(
                (job.backup.clone(), job.group),
                Running {
                    started: Instant::now(),
                    done: done_rx,
                },
            );
        }
        if pinned_rx.await.is_err() {
            // The writer stopped before it took its view: its error is the answer.
            return match self.wait(&job.backup, job.group).await {
                Err(e) => Err(e),
                Ok(_) => Err(Error::Internal("backup writer ended unpinned".into())),
            };
        }
        Ok(())
    }

    /// Waits for the group's job of `backup` to end: what it wrote.
    pub(crate) async fn wait(&self, backup: &str, group: GroupId) -> Result<GroupBackup> {
        let running = {
            let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            jobs.remove(&(backup.to_string(), group))
        }
        .ok_or_else(|| {
            Error::InvalidOperation(format!("no backup {backup} of group {group} here"))
        })?;
        running
            .done
            .await
            .map_err(|_| Error::Internal("backup writer gone".into()))?
    }

    /// Forgets `backup` once its jobs here ended.
    pub(crate) fn forget(&self, backup: &str) {
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(backup);
    }

    /// Stops this node's jobs of `backup` (it failed elsewhere): their uploads are aborted.
    pub(crate) fn abort(&self, backup: &str) {
        if let Some(run) = self
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(backup)
        {
            run.aborted.store(true, Ordering::SeqCst);
        }
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(b, _), _| b != backup);
    }

    /// The run of `job`'s backup on this node, begun now when it is the first of its jobs here.
    /// The first run while none other is under way empties the spool `spool` (what a crash
    /// left): under the lock, so before any job of it spools.
    fn run(&self, job: &GroupJob, spool: &std::path::Path) -> Arc<Run> {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if runs.is_empty() {
            let _ = std::fs::remove_dir_all(spool);
        }
        let run = Arc::clone(runs.entry(job.backup.clone()).or_insert_with(|| {
            Arc::new(Run {
                pace: Pace::new(job.rate),
                aborted: Arc::new(AtomicBool::new(false)),
                tasks: AtomicUsize::new(0),
            })
        }));
        run.tasks.fetch_add(1, Ordering::SeqCst);
        run
    }
}

/// Lowers the calling thread's CPU priority to `WRITER_NICE` (Linux, where nice is per
/// thread; elsewhere it would be the whole process's, so nothing is done).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    let _ = rustix::process::setpriority_process(None, WRITER_NICE);
}

/// Where a node's group jobs keep the stored files each state names until they are copied
/// (`<data dir>/backup-spool/`, one JSON line per file: about 300 bytes each).
fn spool_dir(store: &crate::storage::Store) -> std::path::PathBuf {
    store.path().with_file_name("backup-spool")
}

/// The stored file a state record is, when `k` (a key without its group's prefix) is one of
/// namespace `file` (`file_prefix`, also without it): its id and record. A record that does
/// not read as one is logged and left out.
fn file_record(file_prefix: &[u8], k: &[u8], v: &[u8]) -> Option<(FileId, FileRecord)> {
    let id = k.strip_prefix(file_prefix)?;
    let parsed = std::str::from_utf8(id)
        .ok()
        .and_then(FileId::parse)
        .zip(StoredRecord::decode(v).ok())
        .and_then(|(id, stored)| {
            let record = serde_json::from_value::<FileRecord>(stored.value).ok()?;
            Some((id, record))
        });
    if parsed.is_none() {
        tracing::warn!(key = %String::from_utf8_lossy(k), "a file record that does not read as one is left out of the backup");
    }
    parsed
}

/// Counts the bytes written through it.
struct Counting<W> {
    inner: W,
    count: u64,
}

impl<W> Counting<W> {
    fn new(inner: W) -> Self {
        Counting { inner, count: 0 }
    }
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Hashes and counts compressed bytes and hands them on in chunks (blocking the writing thread
/// while the upload is behind).
struct ChunkSink {
    tx: mpsc::Sender<Bytes>,
    aborted: Arc<AtomicBool>,
    buf: Vec<u8>,
    hash: Sha256,
    size: u64,
}

impl ChunkSink {
    fn new(tx: mpsc::Sender<Bytes>, aborted: Arc<AtomicBool>) -> Self {
        ChunkSink {
            tx,
            aborted,
            buf: Vec::with_capacity(CHUNK_BYTES),
            hash: Sha256::new(),
            size: 0,
        }
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.aborted.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("the backup was aborted"));
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(CHUNK_BYTES),
        ));
        self.tx
            .blocking_send(chunk)
            .map_err(|_| std::io::Error::other("the backup upload stopped"))
    }

    /// Sends what is left, then the empty chunk that tells the upload it is whole.
    fn end(&mut self) -> std::io::Result<()> {
        self.send()?;
        self.tx
            .blocking_send(Bytes::new())
            .map_err(|_| std::io::Error::other("the backup upload stopped"))
    }

    fn sha256(&self) -> String {
        format!("{:x}", self.hash.clone().finalize())
    }
}

impl Write for ChunkSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.hash.update(buf);
        self.size += buf.len() as u64;
        self.buf.extend_from_slice(buf);
        if self.buf.len() >= CHUNK_BYTES {
            self.send()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
