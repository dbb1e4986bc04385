//! `Bucket`: files' bytes in an S3-compatible bucket instead of copies on the nodes
//! (`--files-backend s3://bucket/prefix`, decisions/0020 §8), through the `object_store` crate.
//! Each file is one object, `<prefix>/<id>`: `BucketWriter` sends an upload's bytes as one PUT
//! when they fit in a part and as a multipart upload past that (aborted when the upload is
//! dropped before it finishes), its buffered bytes counted against the node's budget for them;
//! `Bucket::read` streams a range of one; `Bucket::delete` removes objects; `Bucket::list` and
//! `unrecorded` find the objects no file record names, which `upkeep` reclaims. `upload` writes
//! through it and `Files` reads and deletes through it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload,
    RetryConfig, WriteMultipart,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::record::FileId;
use crate::error::{Error, Result};

/// Bytes per part of a multipart upload (S3's smallest part but the last is 5 MiB), and the
/// most a file sent in one PUT has.
const PART: usize = 5 << 20;
/// Parts of one upload in flight at once (each holds a part in memory).
const PARTS_IN_FLIGHT: usize = 2;
/// Objects deleted at once by one round of upkeep.
const DELETES_IN_FLIGHT: usize = 8;
/// The most bytes all uploads to the bucket may hold in memory on one node at once (a file's
/// bytes until they make a part, then its parts in flight), in KiB.
const MEMORY_BUDGET_KIB: usize = 256 << 10;
/// How long an upload waits for memory under that budget before it answers 503.
const MEMORY_WAIT: Duration = Duration::from_secs(30);
/// How long a request that writes, lists or deletes may take, and a read until its answer
/// starts (the body of a read then streams as slowly as its client reads it).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
const READ_START_TIMEOUT: Duration = Duration::from_secs(30);

/// Where and how to reach the bucket (`--files-backend`, `--s3-*`). What is not given comes
/// from the environment the way AWS tools read it (`AWS_ACCESS_KEY_ID`, `AWS_REGION`, ...).
#[derive(Debug, Clone, Default)]
pub struct BucketOptions {
    /// `s3://<bucket>[/<prefix>]`.
    pub url: String,
    /// The service's address (`http://127.0.0.1:9000`); AWS itself when not given.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Address buckets as `<bucket>.<endpoint host>` rather than `<endpoint>/<bucket>`.
    pub virtual_hosted: bool,
}

/// A bucket and prefix holding files' bytes (cheap to clone).
#[derive(Clone)]
pub struct Bucket {
    /// `s3://<bucket>[/<prefix>]` without a trailing slash: what file records name.
    url: String,
    /// Writes, listings and deletes: each request within `REQUEST_TIMEOUT`.
    store: Arc<dyn ObjectStore>,
    /// Reads, without a limit on the whole request: a download streams as slowly as its client
    /// reads (`Files::read` ends one that stalls).
    reader: Arc<dyn ObjectStore>,
    prefix: Path,
    /// Uploads' bytes held in memory, in KiB (`MEMORY_BUDGET_KIB`).
    memory: Arc<Semaphore>,
    /// How long an upload waits for some of it (`MEMORY_WAIT`).
    memory_wait: Duration,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("url", &self.url).finish()
    }
}

/// The bucket and prefix of `s3://<bucket>[/<prefix>]`.
pub fn parse_url(url: &str) -> Result<(String, String)> {
    let bad = |why: &str| Error::InvalidValue(format!("files backend {url:?}: {why}"));
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| bad("only s3://<bucket>/<prefix> is supported"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !bucket_ok {
        return Err(bad(
            "the bucket name is 3 to 63 lowercase letters, digits, '-' or '.'",
        ));
    }
    let prefix = prefix.trim_matches('/');
    if prefix
        .split('/')
        .any(|part| part == "." || part == ".." || (part.is_empty() && !prefix.is_empty()))
        || prefix.chars().any(|c| c.is_control() || c == '\\')
    {
        return Err(bad("the prefix has an empty, '.' or '..' part"));
    }
    Ok((bucket.to_string(), prefix.to_string()))
}

/// `endpoint` with `bucket` in front of its host (`http://host:9000` → `http://bucket.host:9000`):
/// object_store sends virtual-hosted requests to the endpoint as given.
fn virtual_host(endpoint: &str, bucket: &str) -> String {
    match endpoint.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{bucket}.{rest}"),
        None => format!("{bucket}.{endpoint}"),
    }
}

/// A client of `options`' bucket whose requests are bounded by `client`: AWS_* variables first
/// (as `AmazonS3Builder::from_env` reads them, on top of `client`), then what `options` give.
pub(crate) fn s3_store(
    options: &BucketOptions,
    bucket: &str,
    client: ClientOptions,
) -> Result<Arc<dyn ObjectStore>> {
    let mut builder = AmazonS3Builder::new()
        .with_client_options(client)
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 3,
            retry_timeout: Duration::from_secs(30),
        });
    for (key, value) in std::env::vars() {
        if key.starts_with("AWS_") {
            if let Ok(key) = key.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                builder = builder.with_config(key, value);
            }
        }
    }
    builder = builder.with_bucket_name(bucket);
    if options.virtual_hosted {
        builder = builder.with_virtual_hosted_style_request(true);
    }
    if let Some(endpoint) = &options.endpoint {
        let endpoint = if options.virtual_hosted {
            virtual_host(endpoint, bucket)
        } else {
            endpoint.clone()
        };
        if endpoint.starts_with("http://") {
            builder = builder.with_allow_http(true);
        }
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(region) = &options.region {
        builder = builder.with_region(region);
    }
    if let Some(key) = &options.access_key_id {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &options.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    let store = builder
        .build()
        .map_err(|e| Error::InvalidValue(format!("files backend {:?}: {e}", options.url)))?;
    Ok(Arc::new(store))
}

impl Bucket {
    /// Connects to the bucket `options` name (no request is sent yet: `check` sends one).
    pub fn open(options: &BucketOptions) -> Result<Bucket> {
        let (bucket, prefix) = parse_url(&options.url)?;
        let connect = Duration::from_secs(5);
        let store = s3_store(
            options,
            &bucket,
            ClientOptions::new()
                .with_timeout(REQUEST_TIMEOUT)
                .with_connect_timeout(connect),
        )?;
        let reader = s3_store(
            options,
            &bucket,
            ClientOptions::new()
                .with_timeout_disabled()
                .with_connect_timeout(connect),
        )?;
        let mut opened = Bucket::with_store(&bucket, &prefix, store);
        opened.reader = reader;
        Ok(opened)
    }

    /// Lists the prefix once: fails when the bucket cannot be reached or read (a missing
    /// bucket, wrong credentials).
    pub async fn check(&self) -> Result<()> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        self.store
            .list_with_delimiter(prefix)
            .await
            .map(|_| ())
            .map_err(|e| Error::Unavailable(format!("the files bucket {}: {e}", self.url)))
    }

    /// `prefix` of `bucket` in `store` (any `object_store` implementation).
    pub fn with_store(bucket: &str, prefix: &str, store: Arc<dyn ObjectStore>) -> Bucket {
        let url = if prefix.is_empty() {
            format!("s3://{bucket}")
        } else {
            format!("s3://{bucket}/{prefix}")
        };
        Bucket {
            url,
            reader: store.clone(),
            store,
            prefix: Path::from(prefix),
            memory: Arc::new(Semaphore::new(MEMORY_BUDGET_KIB)),
            memory_wait: MEMORY_WAIT,
        }
    }

    /// `s3://<bucket>[/<prefix>]`, as file records name it.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn key(&self, id: &FileId) -> Path {
        self.prefix.clone().join(id.as_str())
    }

    /// A writer of the object of `id`.
    pub fn writer(&self, id: &FileId) -> BucketWriter {
        BucketWriter {
            store: self.store.clone(),
            key: self.key(id),
            state: WriteState::Buffer(Vec::new(), 0),
            memory: self.memory.clone(),
            memory_wait: self.memory_wait,
            held: None,
        }
    }

    /// Streams `len` bytes of the object of `id` from `offset`; fails when the object does not
    /// hold `size` bytes.
    pub async fn read(
        &self,
        id: &FileId,
        size: u64,
        offset: u64,
        len: u64,
    ) -> Result<BoxStream<'static, Result<Bytes>>> {
        if len == 0 {
            return Ok(futures::stream::empty().boxed());
        }
        let whole = offset == 0 && len == size;
        let options = GetOptions {
            range: (!whole).then(|| GetRange::Bounded(offset..offset.saturating_add(len))),
            ..GetOptions::default()
        };
        let key = self.key(id);
        let started = self.reader.get_opts(&key, options);
        let got = tokio::time::timeout(READ_START_TIMEOUT, started)
            .await
            .map_err(|_| Error::Timeout(format!("the files bucket did not answer a read of {id}")))?
            .map_err(store_error)?;
        if got.meta.size != size {
            return Err(Error::Internal(format!(
                "the object of {id} holds {} bytes, not {size}",
                got.meta.size
            )));
        }
        Ok(got.into_stream().map_err(store_error).boxed())
    }

    /// Deletes the objects of `ids` (an absent one counts as deleted); how many it deleted.
    pub async fn delete(&self, ids: &[FileId]) -> Result<u64> {
        let keys: Vec<Path> = ids.iter().map(|id| self.key(id)).collect();
        let deletes = futures::stream::iter(keys.into_iter().map(|key| {
            let store = self.store.clone();
            async move {
                match store.delete(&key).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(store_error(e)),
                }
            }
        }))
        .buffer_unordered(DELETES_IN_FLIGHT);
        let outcomes: Vec<Result<()>> = deletes.collect().await;
        let mut deleted = 0;
        for outcome in outcomes {
            outcome?;
            deleted += 1;
        }
        Ok(deleted)
    }

    /// The objects right under the prefix that a file id names (others are left alone).
    pub async fn list(&self) -> Result<Vec<FileId>> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let mut listed = self.store.list(prefix);
        let mut out = Vec::new();
        while let Some(meta) = listed.try_next().await.map_err(store_error)? {
            let Some(id) = meta.location.filename().and_then(FileId::parse) else {
                continue;
            };
            if meta.location == self.key(&id) {
                out.push(id);
            }
        }
        Ok(out)
    }
}

/// The objects of `listed` to delete: a deleted file's (`gone`) at once, and one no record
/// names once it has been seen so in rounds more than `grace_ms` apart. `seen` holds, from one
/// round to the next, when each object without a record was first seen without one (by this
/// node's clock: neither the bucket's clock nor an object's time, which for a multipart upload
/// is when it began, is needed). The objects must be listed before the records are read: an
/// object listed is complete, and an upload commits its record right after completing its
/// object, so an object seen without a record twice, a grace apart, is one whose record was
/// never written.
pub fn unrecorded(
    listed: &[FileId],
    recorded: &HashSet<String>,
    gone: &HashSet<String>,
    now_ms: i64,
    grace_ms: i64,
    seen: &mut HashMap<FileId, i64>,
) -> Vec<FileId> {
    let mut doomed = Vec::new();
    let mut still = HashMap::new();
    for id in listed {
        if recorded.contains(id.as_str()) {
            continue;
        }
        if gone.contains(id.as_str()) {
            doomed.push(id.clone());
            continue;
        }
        let first = seen.get(id).copied().unwrap_or(now_ms);
        if now_ms - first > grace_ms {
            doomed.push(id.clone());
        } else {
            still.insert(id.clone(), first);
        }
    }
    *seen = still;
    doomed
}

enum WriteState {
    /// Less than a part so far.
    Buffer(Vec<Bytes>, usize),
    /// A multipart upload under way.
    Parts(WriteMultipart),
    Done,
}

/// The bytes of one new object, sent as they come: kept until they pass a part, then sent in
/// parts of a multipart upload. Dropped before `finish`, a started multipart upload is aborted
/// (the service drops its parts); nothing is ever visible under the object's key until
/// `finish` succeeds.
pub struct BucketWriter {
    store: Arc<dyn ObjectStore>,
    key: Path,
    state: WriteState,
    memory: Arc<Semaphore>,
    memory_wait: Duration,
    /// This upload's share of `memory`, in KiB.
    held: Option<OwnedSemaphorePermit>,
}

impl BucketWriter {
    /// Holds at least `bytes` of the node's memory for uploads; `Overloaded` when it is not
    /// free within `MEMORY_WAIT`.
    async fn hold(&mut self, bytes: usize) -> Result<()> {
        let want = bytes.div_ceil(1024).min(MEMORY_BUDGET_KIB);
        let have = self.held.as_ref().map_or(0, |p| p.num_permits());
        if want <= have {
            return Ok(());
        }
        let more = (want - have) as u32;
        let granted = tokio::time::timeout(
            self.memory_wait,
            self.memory.clone().acquire_many_owned(more),
        )
        .await
        .map_err(|_| {
            Error::Overloaded("uploads to the files bucket hold all the memory they may".into())
        })?
        .map_err(|_| Error::Internal("the upload memory budget is closed".into()))?;
        match &mut self.held {
            Some(held) => held.merge(granted),
            None => self.held = Some(granted),
        }
        Ok(())
    }

    /// Takes the next bytes of the object.
    pub async fn write(&mut self, bytes: Bytes) -> Result<()> {
        match &self.state {
            WriteState::Buffer(_, len) => {
                let len = *len + bytes.len();
                // Past a part, the parts in flight and the one filling are held instead.
                let need = if len >= PART {
                    PART * (PARTS_IN_FLIGHT + 1)
                } else {
                    len
                };
                self.hold(need).await?;
            }
            WriteState::Parts(_) => {}
            WriteState::Done => {
                return Err(Error::Internal("the object was already written".into()))
            }
        }
        match &mut self.state {
            WriteState::Buffer(pieces, len) => {
                *len += bytes.len();
                pieces.push(bytes);
                if *len >= PART {
                    let pieces = std::mem::take(pieces);
                    let upload = self
                        .store
                        .put_multipart(&self.key)
                        .await
                        .map_err(store_error)?;
                    let mut parts = WriteMultipart::new_with_chunk_size(upload, PART);
                    for piece in pieces {
                        parts.put(piece);
                    }
                    self.state = WriteState::Parts(parts);
                }
                Ok(())
            }
            WriteState::Parts(parts) => {
                parts
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(store_error)?;
                parts.put(bytes);
                Ok(())
            }
            WriteState::Done => Err(Error::Internal("the object was already written".into())),
        }
    }

    /// Makes the object whole and visible. A multipart upload whose parts failed is aborted.
    pub async fn finish(mut self) -> Result<()> {
        match std::mem::replace(&mut self.state, WriteState::Done) {
            WriteState::Buffer(pieces, _) => {
                let payload: PutPayload = pieces.into_iter().collect();
                self.store
                    .put(&self.key, payload)
                    .await
                    .map(|_| ())
                    .map_err(store_error)
            }
            WriteState::Parts(mut parts) => {
                // Every part sent so far stored, or the upload aborted; then the last part and
                // the completion (a failure of those is left to the bucket's lifecycle rule).
                if let Err(e) = parts.wait_for_capacity(0).await {
                    if let Err(abort) = parts.abort().await {
                        tracing::debug!(key = %self.key, "aborting a multipart upload failed: {abort}");
                    }
                    return Err(store_error(e));
                }
                parts.finish().await.map(|_| ()).map_err(store_error)
            }
            WriteState::Done => Err(Error::Internal("the object was already written".into())),
        }
    }
}

impl Drop for BucketWriter {
    fn drop(&mut self) {
        if let WriteState::Parts(parts) = std::mem::replace(&mut self.state, WriteState::Done) {
            let key = self.key.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    if let Err(e) = parts.abort().await {
                        tracing::debug!(%key, "aborting a multipart upload failed: {e}");
                    }
                });
            }
        }
    }
}

/// A bucket's failure as the cluster's: the service unreachable or refusing is `Unavailable`
/// (503), a missing object behind a record `Internal`.
fn store_error(e: object_store::Error) -> Error {
    match e {
        object_store::Error::NotFound { path, .. } => {
            Error::Internal(format!("the files bucket has no object {path}"))
        }
        other => Error::Unavailable(format!("the files bucket: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn bucket() -> Bucket {
        Bucket::with_store("files", "app/one", Arc::new(InMemory::new()))
    }

    async fn collect(stream: BoxStream<'static, Result<Bytes>>) -> Vec<u8> {
        let pieces: Vec<Bytes> = stream.try_collect().await.unwrap();
        pieces.concat()
    }

    #[test]
    fn urls_name_a_bucket_and_a_prefix() {
        assert_eq!(
            parse_url("s3://files/a/b/").unwrap(),
            ("files".to_string(), "a/b".to_string())
        );
        assert_eq!(
            parse_url("s3://my.files").unwrap(),
            ("my.files".to_string(), String::new())
        );
        for bad in [
            "http://files/a",
            "s3://",
            "s3://Files",
            "s3://f",
            "s3://files/a//b",
            "s3://files/../b",
            "s3://files/a\\b",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn small_and_multipart_objects_read_back_whole_and_by_range() {
        let bucket = bucket();
        for size in [1usize, PART - 1, PART, 2 * PART + 12345] {
            let id = FileId::random();
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let mut writer = bucket.writer(&id);
            for piece in bytes.chunks(256 << 10) {
                writer.write(Bytes::copy_from_slice(piece)).await.unwrap();
            }
            writer.finish().await.unwrap();
            let s = size as u64;
            let whole = collect(bucket.read(&id, s, 0, s).await.unwrap()).await;
            assert_eq!(whole, bytes, "size {size}");
            let (off, len) = (s / 3, (s / 2).max(1).min(s - s / 3));
            let part = collect(bucket.read(&id, s, off, len).await.unwrap()).await;
            assert_eq!(
                part,
                &bytes[off as usize..(off + len) as usize],
                "size {size}"
            );
            assert!(bucket.read(&id, s + 1, 0, s).await.is_err());
        }
        assert_eq!(bucket.list().await.unwrap().len(), 4);
        // Everything written is released from the memory budget.
        assert_eq!(bucket.memory.available_permits(), MEMORY_BUDGET_KIB);
    }

    #[tokio::test]
    async fn uploads_wait_for_memory_and_give_up_when_none_frees() {
        let bucket = Bucket {
            memory: Arc::new(Semaphore::new(PART.div_ceil(1024) * 4)),
            memory_wait: Duration::from_millis(100),
            ..bucket()
        };
        // One upload past a part holds three parts; a second cannot get three more.
        let mut first = bucket.writer(&FileId::random());
        first.write(Bytes::from(vec![1u8; PART + 1])).await.unwrap();
        let mut second = bucket.writer(&FileId::random());
        second.write(Bytes::from(vec![2u8; 1024])).await.unwrap();
        let refused = second.write(Bytes::from(vec![2u8; PART])).await;
        assert!(matches!(refused, Err(Error::Overloaded(_))), "{refused:?}");
        // Once the first finishes, its memory is free again.
        first.finish().await.unwrap();
        assert_eq!(
            bucket.memory.available_permits(),
            PART.div_ceil(1024) * 4 - 1
        );
    }

    #[tokio::test]
    async fn deletes_and_listing_touch_only_file_objects_under_the_prefix() {
        let store = Arc::new(InMemory::new());
        let bucket = Bucket::with_store("files", "app/one", store.clone());
        let id = FileId::random();
        let mut writer = bucket.writer(&id);
        writer.write(Bytes::from_static(b"abc")).await.unwrap();
        writer.finish().await.unwrap();
        let other = FileId::random();
        for foreign in [
            format!("app/two/{other}"),
            format!("app/one/nested/{other}"),
            "app/one/readme.txt".to_string(),
        ] {
            store
                .put(&Path::from(foreign), PutPayload::from_static(b"x"))
                .await
                .unwrap();
        }
        assert_eq!(bucket.list().await.unwrap(), std::slice::from_ref(&id));
        assert_eq!(bucket.delete(&[id.clone(), other]).await.unwrap(), 2);
        assert!(bucket.list().await.unwrap().is_empty());
        assert_eq!(
            store
                .list(None)
                .try_collect::<Vec<_>>()
                .await
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn unrecorded_objects_go_when_deleted_or_seen_so_a_grace_apart() {
        let ids: Vec<FileId> = (0..4).map(|_| FileId::random()).collect();
        // 0: recorded; 1: deleted; 2, 3: no record (3 only in the first round).
        let recorded: HashSet<String> = [ids[0].to_string()].into();
        let gone: HashSet<String> = [ids[1].to_string()].into();
        let mut seen = HashMap::new();
        let grace = 1_000;
        let doomed = unrecorded(&ids, &recorded, &gone, 10_000, grace, &mut seen);
        assert_eq!(doomed, [ids[1].clone()]);
        assert_eq!(seen.len(), 2);
        // Within the grace: kept, first seen still the first round.
        let doomed = unrecorded(&ids[..3], &recorded, &gone, 10_900, grace, &mut seen);
        assert_eq!(doomed, [ids[1].clone()]);
        assert_eq!(seen.get(&ids[2]), Some(&10_000));
        assert_eq!(seen.get(&ids[3]), None, "no longer listed: forgotten");
        // Past it: deleted. 3 listed again counts from now.
        let doomed = unrecorded(&ids, &recorded, &gone, 11_001, grace, &mut seen);
        assert_eq!(doomed, [ids[1].clone(), ids[2].clone()]);
        assert_eq!(seen.get(&ids[3]), Some(&11_001));
        // An object that got its record meanwhile is never deleted.
        let recorded_late: HashSet<String> = [ids[0].to_string(), ids[3].to_string()].into();
        let doomed = unrecorded(
            &ids[3..],
            &recorded_late,
            &HashSet::new(),
            99_999,
            grace,
            &mut seen,
        );
        assert!(doomed.is_empty());
        assert!(seen.is_empty());
    }
}
