//! One group's part of a backup, on the node whose replica writes it: once the replica applied
//! the group's barrier, it pins a point-in-time view of the group's state (answering the
//! coordinator, which may then lower the fence) and streams it — in the snapshot file format,
//! zstd-compressed, hashed with SHA-256 — to the destination as one object, at most `--rate`
//! bytes per second for all of this node's groups. At most `STREAMS` groups stream at once on
//! a node (the others' views wait, pinned, on a blocking thread each); each holds a few chunks
//! in memory (`CHUNK_BYTES`, parts of `PART_BYTES`). An upload that fails or is aborted
//! (`abort`: the backup failed elsewhere) leaves no object under its name.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use object_store::{ObjectStoreExt, WriteMultipart};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::destination::Destination;
use crate::admin::GroupJob;
use crate::backup_manifest::GroupBackup;
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::replicas::Replicas;
use crate::statemachine::snapshot;

/// Bytes handed from the compressing thread to the upload at a time.
const CHUNK_BYTES: usize = 4 << 20;
/// Chunks queued between them.
const CHUNKS_QUEUED: usize = 2;
/// Parts of a multipart upload (S3 wants at least 5 MiB but for the last).
const PART_BYTES: usize = 8 << 20;
/// Groups a node streams at once.
const STREAMS: usize = 2;
/// zstd's level: fast, about a third of the state's size for JSON objects.
const ZSTD_LEVEL: i32 = 3;
/// How long a replica may take to apply its group's barrier.
const APPLY_WAIT: Duration = Duration::from_secs(10);
/// Jobs nobody waited for are forgotten after this long.
const FORGET_AFTER: Duration = Duration::from_secs(6 * 3600);

/// This node's group jobs, by backup and group.
pub struct GroupJobs {
    jobs: Mutex<HashMap<(String, GroupId), Running>>,
    runs: Mutex<HashMap<String, Arc<Run>>>,
    streams: Arc<tokio::sync::Semaphore>,
}

impl Default for GroupJobs {
    fn default() -> Self {
        GroupJobs {
            jobs: Mutex::default(),
            runs: Mutex::default(),
            streams: Arc::new(tokio::sync::Semaphore::new(STREAMS)),
        }
    }
}

/// What this node's groups of one backup share: the pace, and whether it was aborted.
struct Run {
    pace: Pace,
    aborted: Arc<AtomicBool>,
}

struct Running {
    started: Instant,
    done: oneshot::Receiver<Result<GroupBackup>>,
}

impl GroupJobs {
    /// Starts `job` on this node's replica, answering once its view is pinned.
    pub(crate) async fn start(
        &self,
        replicas: &Replicas,
        s3: Option<&crate::files::bucket::BucketOptions>,
        job: GroupJob,
    ) -> Result<()> {
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
        let dest = Destination::open(&job.dest, s3)?.folder(&job.backup);
        let run = self.run(&job);
        let streams = Arc::clone(&self.streams);
        let (pinned_tx, pinned_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let node = replicas.node_id();
        let store = replicas.store();
        let (group, barrier) = (job.group, job.barrier);
        tokio::spawn(async move {
            let object = GroupBackup::object_name(group);
            let (chunks_tx, chunks_rx) = mpsc::channel(CHUNKS_QUEUED);
            let aborted = Arc::clone(&run.aborted);
            let writing = tokio::task::spawn_blocking(move || {
                let sink = ChunkSink::new(chunks_tx, aborted);
                let mut w = Counting::new(zstd::stream::write::Encoder::new(sink, ZSTD_LEVEL)?);
                let mut turn = None;
                let (meta, records) = snapshot::write_state(group, &store, &mut w, || {
                    let _ = pinned_tx.send(());
                    // The view is taken: it waits here, pinned, for its turn to stream.
                    turn = futures::executor::block_on(streams.acquire_owned()).ok();
                })?;
                let bytes = w.count;
                let mut sink = w.inner.finish()?;
                sink.end()?;
                drop(turn);
                Ok::<_, Error>((meta, records, bytes, sink.size, sink.sha256()))
            });
            let uploading = upload(&dest, &object, chunks_rx, &run.pace);
            let (written, uploaded) = tokio::join!(writing, uploading);
            let result = match (written, uploaded) {
                (Ok(Ok((meta, records, bytes, size, sha256))), Ok(())) => Ok(GroupBackup {
                    group,
                    barrier,
                    applied: meta.last_log_id.map(|l| l.index).unwrap_or(0),
                    records,
                    bytes,
                    object,
                    size,
                    sha256,
                    node,
                }),
                (Ok(Err(e)), _) => Err(e),
                (Err(e), _) => Err(Error::Internal(format!("backup writer: {e}"))),
                (_, Err(e)) => Err(e),
            };
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
            let running = jobs.remove(&(backup.to_string(), group));
            if !jobs.keys().any(|(b, _)| b == backup) {
                self.forget(backup);
            }
            running
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

    fn run(&self, job: &GroupJob) -> Arc<Run> {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(runs.entry(job.backup.clone()).or_insert_with(|| {
            Arc::new(Run {
                pace: Pace::new(job.rate),
                aborted: Arc::new(AtomicBool::new(false)),
            })
        }))
    }
}

/// Uploads the chunks `chunks` brings as object `name` of `dest`; the object is made only when
/// the writer's last chunk (an empty one) arrives, and the upload aborted otherwise.
async fn upload(
    dest: &Destination,
    name: &str,
    mut chunks: mpsc::Receiver<Bytes>,
    pace: &Pace,
) -> Result<()> {
    let path = dest.path(name);
    let upload = dest
        .store()
        .put_multipart(&path)
        .await
        .map_err(|e| dest.error(name, e))?;
    let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    let mut ended = false;
    while let Some(chunk) = chunks.recv().await {
        if chunk.is_empty() {
            ended = true;
            break;
        }
        pace.take(chunk.len() as u64).await;
        if let Err(e) = w.wait_for_capacity(2).await {
            let _ = w.abort().await;
            return Err(dest.error(name, e));
        }
        w.write(&chunk);
    }
    if !ended {
        let _ = w.abort().await;
        return Err(Error::Internal(format!(
            "{}/{name}: the writer stopped",
            dest.shown()
        )));
    }
    w.finish()
        .await
        .map(|_| ())
        .map_err(|e| dest.error(name, e))
}

/// Spreads a backup's bytes on this node over time: at most `rate` per second in all.
struct Pace {
    rate: Option<u64>,
    start: Instant,
    sent: AtomicU64,
}

impl Pace {
    fn new(rate: Option<u64>) -> Pace {
        Pace {
            rate: rate.filter(|r| *r > 0),
            start: Instant::now(),
            sent: AtomicU64::new(0),
        }
    }

    async fn take(&self, bytes: u64) {
        if let Some(rate) = self.rate {
            let sent = self.sent.fetch_add(bytes, Ordering::SeqCst) + bytes;
            let due = self.start + Duration::from_secs_f64(sent as f64 / rate as f64);
            tokio::time::sleep_until(due).await;
        }
    }
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
