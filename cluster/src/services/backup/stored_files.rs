//! The stored files of one group's part of a backup (`writer`): the group's state written, the
//! file records it held (noted in the writer's spool file, one `(FileId, FileRecord)` JSON line
//! each) are read back; each file's bytes are read (this node's copy, else a peer's:
//! `services::files::Files::read`), written to the backup as `files/<id>` and checked against
//! the record's size and MD5, and the file is listed in the group's listing (`GroupFiles`: one
//! `BackedUpFile` per line). Files in the cluster's bucket are listed, not copied. A file no
//! copy of can be read is listed as missing (and logged) and the backup goes on; a destination
//! that cannot be written fails it.
//!
//! Every member holds its copies while a backup runs (`files::copies::CopyStore::hold`), so a
//! file deleted after the barrier is still there to be read. Bounds: `COPYING` files at a time
//! per group, each holding up to three parts (`PART_BYTES`: its buffer and two in flight) in
//! memory, and a chunk of the listing; the bytes count against the backup's `--rate`.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use sha2::{Digest, Sha256};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use super::destination::Destination;
use super::upload::{upload, Pace, CHUNK_BYTES, PART_BYTES};
use crate::backup_manifest::{BackedUpFile, GroupFiles};
use crate::error::{Error, Result};
use crate::files::copies::Md5Sum;
use crate::files::record::{FileId, FileRecord};
use crate::ids::GroupId;
use crate::services::files::Files;

/// Files of one group copied at a time.
const COPYING: usize = 4;
/// How the copier's error says the listing's upload went away first.
const LISTING_STOPPED: &str = "the upload of the listing stopped";

/// Copies the files of the spool file `spool` into `dest`, and writes the group's listing
/// there: what it holds.
pub(super) async fn copy_files(
    files: &Files,
    dest: &Destination,
    group: GroupId,
    spool: &std::path::Path,
    pace: &Pace,
    aborted: &AtomicBool,
) -> Result<GroupFiles> {
    let object = GroupFiles::object_name(group);
    let lines = tokio::io::BufReader::new(tokio::fs::File::open(spool).await?).lines();
    let (chunks_tx, chunks_rx) = mpsc::channel::<Bytes>(2);
    let listing = upload(dest, &object, chunks_rx, pace);
    let copying = async {
        // Owned here: when copying fails, the listing's upload sees the channel close early
        // and is aborted.
        let chunks_tx = chunks_tx;
        let mut summary = GroupFiles {
            object: object.clone(),
            size: 0,
            sha256: String::new(),
            files: 0,
            bytes: 0,
            copied: 0,
            in_bucket: 0,
            missing: 0,
        };
        let (mut hash, mut buf) = (Sha256::new(), Vec::new());
        let records = futures::stream::unfold(lines, |mut lines| async move {
            let line = match lines.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(e) => return Some((Err(Error::from(e)), lines)),
            };
            let parsed = serde_json::from_str::<(FileId, FileRecord)>(&line).map_err(Error::from);
            Some((parsed, lines))
        });
        let entries = records
            .map(|parsed| async move {
                let (id, record) = parsed?;
                backed_up(files, dest, id, record, pace).await
            })
            .buffered(COPYING);
        futures::pin_mut!(entries);
        let stopped = || Error::Internal(format!("{LISTING_STOPPED}: {object}"));
        while let Some(entry) = entries.next().await {
            if aborted.load(Ordering::SeqCst) {
                return Err(Error::Internal("the backup was aborted".into()));
            }
            let entry = entry?;
            summary.files += 1;
            summary.bytes += entry.size;
            match (&entry.sha256, &entry.bucket, &entry.missing) {
                (Some(_), _, _) => summary.copied += 1,
                (_, Some(_), _) => summary.in_bucket += 1,
                _ => summary.missing += 1,
            }
            let mut line = serde_json::to_vec(&entry)?;
            line.push(b'\n');
            hash.update(&line);
            summary.size += line.len() as u64;
            buf.extend_from_slice(&line);
            if buf.len() >= CHUNK_BYTES {
                let chunk = Bytes::from(std::mem::take(&mut buf));
                chunks_tx.send(chunk).await.map_err(|_| stopped())?;
            }
        }
        if aborted.load(Ordering::SeqCst) {
            return Err(Error::Internal("the backup was aborted".into()));
        }
        if !buf.is_empty() {
            chunks_tx
                .send(Bytes::from(buf))
                .await
                .map_err(|_| stopped())?;
        }
        // The empty chunk: the listing is whole.
        chunks_tx.send(Bytes::new()).await.map_err(|_| stopped())?;
        summary.sha256 = format!("{:x}", hash.finalize());
        Ok(summary)
    };
    let (copied, listed) = tokio::join!(copying, listing);
    match (copied, listed) {
        (Ok(summary), Ok(())) => Ok(summary),
        (Ok(_), Err(e)) | (Err(e), Ok(())) => Err(e),
        // The listing's own failure says more than the copier's "stopped", and the copier's
        // says more than the listing's "the writer stopped".
        (Err(Error::Internal(m)), Err(listed)) if m.starts_with(LISTING_STOPPED) => Err(listed),
        (Err(e), Err(_)) => Err(e),
    }
}

/// One file as the backup holds it: copied (when its bytes are the record's), listed in its
/// bucket, or missing.
async fn backed_up(
    files: &Files,
    dest: &Destination,
    id: FileId,
    record: FileRecord,
    pace: &Pace,
) -> Result<BackedUpFile> {
    let mut entry = BackedUpFile {
        id,
        size: record.size,
        md5: record.md5.clone(),
        sha256: None,
        bucket: record.bucket.clone(),
        missing: None,
    };
    if entry.bucket.is_some() {
        return Ok(entry);
    }
    let name = BackedUpFile::object_name(&entry.id);
    let stream = match files.read(&entry.id, &record, 0, record.size).await {
        Ok(stream) => stream,
        Err(e) => {
            tracing::warn!(id = %entry.id, "no copy of the file could be read for the backup: {e}");
            entry.missing = Some(e.to_string());
            return Ok(entry);
        }
    };
    match put_stream(dest, &name, stream, pace).await? {
        Ok((size, md5, sha256)) if size == record.size && md5 == record.md5 => {
            entry.sha256 = Some(sha256);
        }
        Ok((size, md5, _)) => {
            let _ = dest.store().delete(&dest.path(&name)).await;
            entry.missing = Some(format!(
                "the copy read holds {size} bytes with MD5 {md5}, not {} with {}",
                record.size, record.md5
            ));
        }
        Err(read) => {
            tracing::warn!(id = %entry.id, "reading the file for the backup failed: {read}");
            entry.missing = Some(read);
        }
    }
    Ok(entry)
}

/// Writes what `stream` brings as object `name` of `dest` — one PUT when it fits in a part, a
/// multipart upload past that: its size, MD5 and SHA-256; `Ok(Err)` when reading `stream`
/// failed (nothing is left under `name`), `Err` when the destination failed.
async fn put_stream(
    dest: &Destination,
    name: &str,
    mut stream: BoxStream<'static, Result<Bytes>>,
    pace: &Pace,
) -> Result<std::result::Result<(u64, String, String), String>> {
    let path = dest.path(name);
    let (mut md5, mut sha, mut size) = (Md5Sum::default(), Sha256::new(), 0u64);
    let mut buf: Vec<u8> = Vec::new();
    let mut multipart: Option<WriteMultipart> = None;
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(e) => {
                if let Some(w) = multipart {
                    let _ = w.abort().await;
                }
                return Ok(Err(e.to_string()));
            }
        };
        pace.take(chunk.len() as u64).await;
        md5.update(&chunk);
        sha.update(&chunk);
        size += chunk.len() as u64;
        match &mut multipart {
            Some(w) => {
                if let Err(e) = w.wait_for_capacity(2).await {
                    if let Some(w) = multipart {
                        let _ = w.abort().await;
                    }
                    return Err(dest.error(name, e));
                }
                w.write(&chunk);
            }
            None => {
                buf.extend_from_slice(&chunk);
                if buf.len() >= PART_BYTES {
                    let upload = dest
                        .store()
                        .put_multipart(&path)
                        .await
                        .map_err(|e| dest.error(name, e))?;
                    let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
                    w.write(&std::mem::take(&mut buf));
                    multipart = Some(w);
                }
            }
        }
    }
    match multipart {
        Some(w) => {
            w.finish().await.map_err(|e| dest.error(name, e))?;
        }
        None => {
            dest.store()
                .put(&path, PutPayload::from(Bytes::from(buf)))
                .await
                .map_err(|e| dest.error(name, e))?;
        }
    }
    dest.sync(name).await?;
    Ok(Ok((size, md5.hex(), format!("{:x}", sha.finalize()))))
}
