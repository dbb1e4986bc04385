//! The bytes of a backup on their way to the destination: `upload` sends a stream of chunks as
//! one object (a multipart upload of `PART_BYTES` parts, made only once the stream says it is
//! whole), and `Pace` spreads one backup's bytes on a node over time (`--rate`). Used by
//! `writer` (group states) and `stored_files` (files and their listings).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use object_store::{ObjectStoreExt, WriteMultipart};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::destination::Destination;
use crate::error::{Error, Result};

/// Bytes handed to an upload at a time.
pub(super) const CHUNK_BYTES: usize = 4 << 20;
/// Parts of a multipart upload (S3 wants at least 5 MiB but for the last).
pub(super) const PART_BYTES: usize = 8 << 20;

/// Uploads the chunks `chunks` brings as object `name` of `dest`; the object is made only when
/// the writer's last chunk (an empty one) arrives, and the upload aborted otherwise.
pub(super) async fn upload(
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
    w.finish().await.map_err(|e| dest.error(name, e))?;
    dest.sync(name).await
}

/// Spreads a backup's bytes on this node over time: at most `rate` per second in all.
pub(super) struct Pace {
    rate: Option<u64>,
    start: Instant,
    sent: AtomicU64,
}

impl Pace {
    pub(super) fn new(rate: Option<u64>) -> Pace {
        Pace {
            rate: rate.filter(|r| *r > 0),
            start: Instant::now(),
            sent: AtomicU64::new(0),
        }
    }

    pub(super) async fn take(&self, bytes: u64) {
        if let Some(rate) = self.rate {
            let sent = self.sent.fetch_add(bytes, Ordering::SeqCst) + bytes;
            let due = self.start + Duration::from_secs_f64(sent as f64 / rate as f64);
            tokio::time::sleep_until(due).await;
        }
    }
}
