//! `Upload`: a new file's bytes streamed once to all its holders at the same time — this node's
//! `CopyStore` when it is one, `rpc::file_client::CopySink`s for the others — or to the
//! cluster's bucket (`bucket::BucketWriter`), in chunks, while its size and MD5 are computed;
//! `finish` waits until a majority of the holders made their copies durable (or the bucket
//! holds the whole object) and then commits the file's record (decisions/0020). Dropped before
//! that, every holder discards what it received and a multipart upload is aborted.

use std::time::Duration;

use futures::future::join_all;

use super::Files;
use crate::error::{Error, Result};
use crate::files::bucket::BucketWriter;
use crate::files::copies::{CopyWriter, Md5Sum};
use crate::files::record::{FileId, FileRecord, NewFile};
use crate::ids::NodeId;
use crate::namespace::Namespace;
use crate::rpc::file_client::CopySink;

/// Bytes sent to the holders at a time.
const CHUNK: usize = 256 << 10;
/// How long a holder may take to make its whole copy durable once the last byte is sent.
const FINISH_TIMEOUT: Duration = Duration::from_secs(60);

enum Holder {
    Local(CopyWriter),
    Remote(CopySink),
}

/// A file being uploaded.
pub struct Upload {
    files: Files,
    id: FileId,
    local: Option<CopyWriter>,
    remotes: Vec<CopySink>,
    /// Copies that must be durable before the record is written: a majority of those wanted.
    quorum: usize,
    /// The object and its bucket's url, instead of copies, when the cluster has a bucket.
    object: Option<(BucketWriter, String)>,
    /// Bytes received and not sent yet (less than a chunk).
    pending: Vec<u8>,
    size: u64,
    md5: Md5Sum,
}

impl Files {
    /// Starts an upload: opens a copy on each of the nodes ranked first for a new id, replacing
    /// one that cannot take it by the next in the ranking. `Unavailable` when fewer than a
    /// majority of the copies wanted can be opened.
    pub async fn begin_upload(&self) -> Result<Upload> {
        let id = FileId::random();
        if let Some(bucket) = &self.bucket {
            return Ok(Upload {
                files: self.clone(),
                object: Some((bucket.writer(&id), bucket.url().to_string())),
                id,
                local: None,
                remotes: Vec::new(),
                quorum: 0,
                pending: Vec::new(),
                size: 0,
                md5: Md5Sum::default(),
            });
        }
        // The node taking the upload streams it to the holders: its own disk must have room.
        self.room_for_copies()?;
        let ranked = self.ranked(&id);
        let wanted = self.wanted(ranked.len());
        let quorum = wanted / 2 + 1;
        let (first, spares) = ranked.split_at(wanted.min(ranked.len()));
        let mut local = None;
        let mut remotes = Vec::new();
        let mut missing = 0;
        let mut disk_full = 0;
        let opened = join_all(first.iter().map(|&n| self.open_holder(n, &id))).await;
        let mut take = |opened: Result<Holder>, node: NodeId| match opened {
            Ok(Holder::Local(w)) => {
                local = Some(w);
                true
            }
            Ok(Holder::Remote(s)) => {
                remotes.push(s);
                true
            }
            Err(e) => {
                tracing::debug!(%node, "cannot open a copy: {e}");
                if matches!(e, Error::DiskFull(_)) {
                    disk_full += 1;
                }
                false
            }
        };
        for (opened, &node) in opened.into_iter().zip(first) {
            if !take(opened, node) {
                missing += 1;
            }
        }
        for &node in spares {
            if missing == 0 {
                break;
            }
            if take(self.open_holder(node, &id).await, node) {
                missing -= 1;
            }
        }
        let holders = remotes.len() + usize::from(local.is_some());
        if holders < quorum && disk_full > 0 {
            return Err(Error::DiskFull(format!(
                "only {holders} of the {wanted} nodes that should hold the file have room for it"
            )));
        }
        if holders < quorum {
            return Err(Error::Unavailable(format!(
                "only {holders} of the {wanted} nodes that should hold the file can take it"
            )));
        }
        Ok(Upload {
            files: self.clone(),
            id,
            local,
            remotes,
            quorum,
            object: None,
            pending: Vec::new(),
            size: 0,
            md5: Md5Sum::default(),
        })
    }

    async fn open_holder(&self, node: NodeId, id: &FileId) -> Result<Holder> {
        if self.replicas.is_full_node(node) {
            return Err(Error::DiskFull(format!(
                "node {node}'s disk is nearly full"
            )));
        }
        if node == self.replicas.node_id() {
            Ok(Holder::Local(self.copies.writer(id).await?))
        } else {
            Ok(Holder::Remote(
                self.replicas.router().open_copy(node, id).await?,
            ))
        }
    }
}

impl Upload {
    pub fn id(&self) -> &FileId {
        &self.id
    }

    /// Bytes received so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn holders(&self) -> usize {
        self.remotes.len() + usize::from(self.local.is_some())
    }

    /// Takes the next bytes of the file.
    pub async fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.size += bytes.len() as u64;
        self.md5.update(bytes);
        self.pending.extend_from_slice(bytes);
        while self.pending.len() >= CHUNK {
            let chunk: Vec<u8> = self.pending.drain(..CHUNK).collect();
            self.send(chunk).await?;
        }
        Ok(())
    }

    /// Sends `chunk` to every holder at once (a holder that fails is left out from then on), or
    /// to the bucket.
    async fn send(&mut self, chunk: Vec<u8>) -> Result<()> {
        if let Some((object, _)) = &mut self.object {
            return object.write(chunk.into()).await;
        }
        let Upload { local, remotes, .. } = self;
        let write_local = async {
            match local.as_mut() {
                Some(w) => w.write(&chunk).await.map(|()| true),
                None => Ok(false),
            }
        };
        let send_remote = join_all(remotes.iter_mut().map(|s| s.send(chunk.clone())));
        let (local, remotes) = futures::join!(write_local, send_remote);
        if let Err(e) = local {
            tracing::warn!(id = %self.id, "writing this node's copy failed: {e}");
            self.local = None;
        }
        let mut results = remotes.into_iter();
        self.remotes.retain(|sink| match results.next() {
            Some(Err(e)) => {
                tracing::debug!(node = %sink.node, "a holder failed during an upload: {e}");
                false
            }
            _ => true,
        });
        if self.holders() < self.quorum {
            return Err(Error::Unavailable(format!(
                "only {} nodes still take the file, {} must",
                self.holders(),
                self.quorum
            )));
        }
        Ok(())
    }

    /// Ends the upload: once a majority of the holders made their copies durable, commits the
    /// file's record and answers it. A copy whose record was never written is reclaimed by
    /// `files::upkeep`.
    pub async fn finish(mut self, file: NewFile) -> Result<FileRecord> {
        let rest = std::mem::take(&mut self.pending);
        if !rest.is_empty() {
            self.send(rest).await?;
        }
        let size = self.size;
        let md5 = std::mem::take(&mut self.md5).hex();
        if let Some((object, url)) = self.object.take() {
            object.finish().await?;
            let record = file.into_record(size, md5, Some(url));
            return self.files.commit(&self.id, record).await;
        }
        let me = self.files.replicas.node_id();
        let writer = self.local.take();
        let sinks: Vec<CopySink> = self.remotes.drain(..).collect();
        let local = async {
            match writer {
                Some(w) => Some(w.finish(size, &md5).await.map(|_| me)),
                None => None,
            }
        };
        let remotes = join_all(sinks.into_iter().map(|sink| {
            let node = sink.node;
            let md5 = &md5;
            async move { sink.finish(size, md5, FINISH_TIMEOUT).await.map(|()| node) }
        }));
        let (local, remotes) = futures::join!(local, remotes);
        let mut stored = Vec::new();
        for outcome in local.into_iter().chain(remotes) {
            match outcome {
                Ok(node) => stored.push(node),
                Err(e) => tracing::warn!(id = %self.id, "a holder failed to store its copy: {e}"),
            }
        }
        if stored.len() < self.quorum {
            let files = self.files.clone();
            let id = self.id.clone();
            tokio::spawn(async move { files.drop_everywhere(&[id]).await });
            return Err(Error::Unavailable(format!(
                "only {} copies of the file were stored, {} must be",
                stored.len(),
                self.quorum
            )));
        }
        let record = file.into_record(size, md5, None);
        self.files.commit(&self.id, record).await
    }
}

impl Files {
    /// Commits `record` of the file `id`, its bytes being stored. Should that fail, the bytes are left for
    /// `files::upkeep` (the record may have been written all the same).
    async fn commit(&self, id: &FileId, record: FileRecord) -> Result<FileRecord> {
        let size = record.size;
        let group = self.replicas.slot_map().file_group(id.as_str());
        self.replicas
            .insert_record(
                group,
                Namespace::File,
                id.as_str(),
                serde_json::to_value(&record)?,
                None,
            )
            .await?;
        metrics::counter!("basalt_files_uploaded_total").increment(1);
        metrics::counter!("basalt_files_uploaded_bytes_total").increment(size);
        Ok(record)
    }
}
