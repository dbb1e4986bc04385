//! The files service (decisions/0020): this node's door to stored files ([`Files`],
//! `Cluster::files`). `upload` streams a new file to its holders (or its bucket) and commits its
//! record once a majority of them hold it; this module reads (`Files::read`: the record's
//! bucket, this node's copy, else a peer's), deletes and pulls copies; `upkeep` re-replicates
//! copies and reclaims the copies and objects no record needs. What it works with are the
//! leaves of `crate::files` (records, copies on disk, buckets, the copy RPCs' messages) and
//! this node's replicas; the peer side of the copy RPCs is `peer_service::file_service`, their
//! client side `rpc::file_client`.

pub mod upkeep;
mod upload;

use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;

use crate::error::{Error, Result};
use crate::files::bucket::Bucket;
use crate::files::copies::CopyStore;
use crate::files::record::{FileId, FileRecord};
use crate::files::wire::{CopyRequest, HeldCopy};
use crate::ids::{copy_score, GroupId, NodeId};
use crate::names::AppId;
use crate::namespace::Namespace;
use crate::replicas::Replicas;
pub use upload::Upload;

/// How long a holder may take to drop copies or list its copies.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a pull (a whole copy fetched from a peer and made durable) may take.
const PULL_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a peer may take to send the next piece of a copy.
const PIECE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a deleted file is remembered (`Namespace::FileGone`), so that upkeep drops the
/// copies of members that missed the delete at once.
const GONE_FOR_MS: i64 = 24 * 3600 * 1000;

/// This node's door to stored files (cheap to clone).
#[derive(Clone)]
pub struct Files {
    replicas: Replicas,
    copies: CopyStore,
    /// Where new files go when the cluster stores them in a bucket (`--files-backend`).
    bucket: Option<Bucket>,
}

impl Files {
    pub fn new(replicas: Replicas, copies: CopyStore, bucket: Option<Bucket>) -> Files {
        Files {
            replicas,
            copies,
            bucket,
        }
    }

    /// This node's copies.
    pub fn copies(&self) -> &CopyStore {
        &self.copies
    }

    /// The bucket new files go to, when there is one.
    pub fn bucket(&self) -> Option<&Bucket> {
        self.bucket.as_ref()
    }

    /// The bucket a record names, when this node is configured with it.
    fn bucket_named(&self, url: &str) -> Result<&Bucket> {
        self.bucket
            .as_ref()
            .filter(|b| b.url() == url)
            .ok_or_else(|| {
                Error::Unavailable(format!(
                    "the file is stored in {url}, which this node is not configured with (--files-backend)"
                ))
            })
    }

    /// The active members ranked for the copies of `id`, best first.
    fn ranked(&self, id: &FileId) -> Vec<NodeId> {
        let members: Vec<NodeId> = self.replicas.member_addrs().into_keys().collect();
        rank_among(id, &members)
    }

    /// How many copies a file should have among `members` active nodes.
    fn wanted(&self, members: usize) -> usize {
        (self.replicas.settings().replicas as usize).clamp(1, members.max(1))
    }

    fn shards(&self) -> u32 {
        self.replicas.settings().shards
    }

    /// The record of `id`, read linearizably from its shard.
    pub async fn record(&self, id: &FileId) -> Result<Option<FileRecord>> {
        let group = self.replicas.slot_map().file_group(id.as_str());
        match self
            .replicas
            .get_record(group, Namespace::File, id.as_str())
            .await?
        {
            Some(v) => Ok(Some(serde_json::from_value(v)?)),
            None => Ok(None),
        }
    }

    /// How many files `app` stores and their bytes, as the shards count them
    /// (`Replicas::app_usage`).
    pub async fn usage(&self, app: &AppId) -> Result<(u64, u64)> {
        let usage = self.replicas.app_usage(app).await?;
        Ok((usage.files, usage.file_bytes))
    }

    /// Streams `len` bytes of the file `id` (whose record is `record`) from `offset`: from the
    /// bucket the record names, else this node's copy when it holds one, else a peer's, the
    /// best ranked first.
    pub async fn read(
        &self,
        id: &FileId,
        record: &FileRecord,
        offset: u64,
        len: u64,
    ) -> Result<BoxStream<'static, Result<Bytes>>> {
        let size = record.size;
        if let Some(url) = &record.bucket {
            let stream = self.bucket_named(url)?.read(id, size, offset, len).await?;
            return Ok(relay(stream));
        }
        if self.copies.get(id).is_some_and(|c| c.size == size) {
            if let Some(reader) = self.copies.reader(id, offset, len).await? {
                return Ok(stream_of(reader));
            }
        }
        let me = self.replicas.node_id();
        let mut last = Error::Unavailable(format!("no node holds a copy of {id}"));
        for node in self.ranked(id).into_iter().filter(|&n| n != me) {
            match self.replicas.router().get_copy(node, id, offset, len).await {
                Ok((held, stream)) if held == size => return Ok(relay(stream)),
                Ok((held, _)) => {
                    last = Error::Internal(format!(
                        "node {node} holds {held} bytes of {id}, not {size}"
                    ))
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Deletes the file `id` of `app` at `path`: takes its record away (compare-and-set on the
    /// record as read, so of two racing deletes one succeeds), then asks every member to drop
    /// its copy. `None` when `app` has no such file.
    pub async fn delete(&self, app: &AppId, id: &FileId, path: &str) -> Result<Option<FileRecord>> {
        let group = self.replicas.slot_map().file_group(id.as_str());
        let Some(value) = self
            .replicas
            .get_record(group, Namespace::File, id.as_str())
            .await?
        else {
            return Ok(None);
        };
        let record: FileRecord = serde_json::from_value(value.clone())?;
        if record.app != app.as_str() || record.path != path {
            return Ok(None);
        }
        match self
            .replicas
            .cas_record(group, Namespace::File, id.as_str(), Some(value), None)
            .await
        {
            Ok(_) => {}
            Err(Error::Conflict(_)) => return Ok(None),
            Err(e) => return Err(e),
        }
        // The copies go now; a member that misses this drops its copy at the next upkeep, which
        // knows the file is gone for a day.
        let gone = self
            .replicas
            .put_record(
                group,
                Namespace::FileGone,
                id.as_str(),
                serde_json::json!({}),
                Some(crate::replicas::now_ms() + GONE_FOR_MS),
            )
            .await;
        if let Err(e) = gone {
            tracing::debug!(%id, "recording a deleted file failed (its copies go after the orphan grace): {e}");
        }
        let files = self.clone();
        let id = id.clone();
        let bucket = record.bucket.clone();
        tokio::spawn(async move {
            match bucket {
                Some(url) => {
                    let deleted = match files.bucket_named(&url) {
                        Ok(bucket) => bucket.delete(std::slice::from_ref(&id)).await,
                        Err(e) => Err(e),
                    };
                    if let Err(e) = deleted {
                        tracing::debug!(%id, "deleting a file's object failed (upkeep deletes it): {e}");
                    }
                }
                None => files.drop_everywhere(&[id]).await,
            }
        });
        Ok(Some(record))
    }

    /// Asks every active member (this node included) to drop its copies of `ids`.
    pub(crate) async fn drop_everywhere(&self, ids: &[FileId]) {
        let members = self.replicas.member_addrs().into_keys();
        futures::future::join_all(members.map(|node| self.drop_copies_of(node, ids))).await;
    }

    /// Drops `node`'s copies of `ids` (this node's directly); failures are only logged (upkeep
    /// drops what is left).
    pub(crate) async fn drop_copies_of(&self, node: NodeId, ids: &[FileId]) {
        if node == self.replicas.node_id() {
            if let Err(e) = self.drop_here(ids).await {
                tracing::warn!("dropping copies failed: {e}");
            }
            return;
        }
        let req = CopyRequest::Drop { ids: ids.to_vec() };
        if let Err(e) = self
            .replicas
            .router()
            .copy_request::<u64>(node, &req, ASK_TIMEOUT)
            .await
        {
            tracing::debug!(%node, "dropping copies failed: {e}");
        }
    }

    /// Deletes this node's copies of `ids` (every one tried); how many it held.
    pub(crate) async fn drop_here(&self, ids: &[FileId]) -> Result<u64> {
        let mut dropped = 0u64;
        let mut failed = None;
        for id in ids {
            match self.copies.drop_copy(id).await {
                Ok(true) => dropped += 1,
                Ok(false) => {}
                Err(e) => failed = Some(e),
            }
        }
        failed.map_or(Ok(dropped), Err)
    }

    /// The copies this node holds of files whose records are in `group` (by the slot map).
    pub(crate) fn held_here(&self, group: GroupId) -> Vec<HeldCopy> {
        let now = crate::replicas::now_ms();
        let map = self.replicas.slot_map();
        self.copies
            .list(|id| map.file_group(id.as_str()) == group)
            .into_iter()
            .map(|(id, c)| HeldCopy {
                id,
                size: c.size,
                age_ms: now - c.stored_ms,
            })
            .collect()
    }

    /// Refuses new copies on this node while its disk is critical (`disk`).
    pub fn room_for_copies(&self) -> Result<()> {
        if self.replicas.disk().level == crate::disk::DiskLevel::Critical {
            metrics::counter!("basalt_writes_refused_total", "reason" => "disk").increment(1);
            return Err(Error::DiskFull(format!(
                "the disk of node {} is nearly full: it takes no new file copies",
                self.replicas.node_id()
            )));
        }
        Ok(())
    }

    /// Fetches a copy of `id` (`size` bytes with `md5`) from the first of `sources` that
    /// serves it, unless this node holds one already.
    pub async fn pull(&self, id: &FileId, size: u64, md5: &str, sources: &[NodeId]) -> Result<()> {
        if self.copies.get(id).is_some_and(|c| c.size == size) {
            return Ok(());
        }
        self.room_for_copies()?;
        let mut last = Error::Unavailable(format!("no source served {id}"));
        for &node in sources {
            let (held, mut stream) = match self.replicas.router().get_copy(node, id, 0, size).await
            {
                Ok(s) => s,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            if held != size {
                continue;
            }
            let mut writer = self.copies.writer(id).await?;
            let copied: Result<()> = async {
                while let Some(bytes) = next_piece(&mut stream).await? {
                    writer.write(&bytes).await?;
                }
                writer.finish(size, md5).await.map(|_| ())
            }
            .await;
            match copied {
                Ok(()) => {
                    metrics::counter!("basalt_files_pulled_total").increment(1);
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Asks `node` to pull a copy of `record`'s file from `sources`.
    pub(crate) async fn pull_on(
        &self,
        node: NodeId,
        id: &FileId,
        record: &FileRecord,
        sources: Vec<NodeId>,
    ) -> Result<()> {
        if node == self.replicas.node_id() {
            let pull = self.pull(id, record.size, &record.md5, &sources);
            return tokio::time::timeout(PULL_TIMEOUT, pull)
                .await
                .map_err(|_| Error::Timeout(format!("pulling {id}")))?;
        }
        let req = CopyRequest::Pull {
            id: id.clone(),
            size: record.size,
            md5: record.md5.clone(),
            sources,
        };
        self.replicas
            .router()
            .copy_request::<()>(node, &req, PULL_TIMEOUT)
            .await
    }
}

/// `members` ranked for the copies of `id`, best first (`ids::copy_score`).
pub(crate) fn rank_among(id: &FileId, members: &[NodeId]) -> Vec<NodeId> {
    let mut ranked = members.to_vec();
    ranked.sort_by_key(|&n| std::cmp::Reverse(copy_score(id.as_str(), n)));
    ranked
}

/// The next piece of a peer's copy stream, within `PIECE_TIMEOUT`.
async fn next_piece(stream: &mut BoxStream<'static, Result<Bytes>>) -> Result<Option<Bytes>> {
    match tokio::time::timeout(PIECE_TIMEOUT, stream.next()).await {
        Err(_) => Err(Error::Timeout("a peer stopped sending a copy".into())),
        Ok(piece) => piece.transpose(),
    }
}

/// A peer's copy stream handed on through a small buffer by a task of its own: a reader that
/// stops reading for `PIECE_TIMEOUT` (a stalled download) ends the peer's stream instead of
/// holding it open, with the flow-control credit of the connection it shares.
fn relay(mut stream: BoxStream<'static, Result<Bytes>>) -> BoxStream<'static, Result<Bytes>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes>>(2);
    tokio::spawn(async move {
        loop {
            let piece = next_piece(&mut stream).await;
            let last = !matches!(piece, Ok(Some(_)));
            let Some(item) = piece.transpose() else {
                return;
            };
            match tokio::time::timeout(PIECE_TIMEOUT, tx.send(item)).await {
                Ok(Ok(())) if !last => {}
                _ => return,
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx).boxed()
}

/// Bytes per piece read from a local copy.
const READ_CHUNK: usize = 256 << 10;

/// The bytes of `reader` as a stream of pieces; a read error ends it.
pub(crate) fn stream_of(
    reader: impl tokio::io::AsyncRead + Send + Unpin + 'static,
) -> BoxStream<'static, Result<Bytes>> {
    futures::stream::unfold(Some(reader), |reader| async move {
        let mut reader = reader?;
        let mut buf = vec![0u8; READ_CHUNK];
        match tokio::io::AsyncReadExt::read(&mut reader, &mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), Some(reader)))
            }
            Err(e) => Some((Err(Error::from(e)), None)),
        }
    })
    .boxed()
}
