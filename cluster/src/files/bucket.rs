//! `Bucket`: files' bytes in an S3-compatible bucket instead of copies on the nodes
//! (`--files-backend s3://bucket/prefix`, decisions/0020 §8), through the `object_store` crate.
//! Each file is one object, `<prefix>/<id>`: `BucketWriter` sends an upload's bytes as one PUT
//! when they fit in a part and as a multipart upload past that (aborted when the upload is
//! dropped before it finishes); `Bucket::read` streams a range of one; `Bucket::delete` removes
//! objects; `Bucket::list` and `unrecorded` find the objects no file record names, which
//! `upkeep` reclaims. `upload` writes through it and `Files` reads and deletes through it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload,
    RetryConfig, WriteMultipart,
};

use super::record::FileId;
use crate::error::{Error, Result};

/// Bytes per part of a multipart upload (S3's smallest part but the last is 5 MiB), and the
/// most a file sent in one PUT has.
const PART: usize = 5 << 20;
/// Parts of one upload in flight at once (each holds a part in memory).
const PARTS_IN_FLIGHT: usize = 2;
/// Objects deleted at once by one round of upkeep.
const DELETES_IN_FLIGHT: usize = 8;

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
    store: Arc<dyn ObjectStore>,
    prefix: Path,
}

/// An object under the prefix named by a file id, and how old it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    pub id: FileId,
    pub age_ms: i64,
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

impl Bucket {
    /// Connects to the bucket `options` name (no request is sent yet).
    pub fn open(options: &BucketOptions) -> Result<Bucket> {
        let (bucket, prefix) = parse_url(&options.url)?;
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&bucket)
            .with_virtual_hosted_style_request(options.virtual_hosted)
            .with_client_options(
                ClientOptions::new()
                    // A single request (a part, a delete, a listing page); a long download is
                    // cut and resumed where it stopped by object_store's retries.
                    .with_timeout(Duration::from_secs(120))
                    .with_connect_timeout(Duration::from_secs(5)),
            )
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: 3,
                retry_timeout: Duration::from_secs(30),
            });
        if let Some(endpoint) = &options.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"));
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
        Ok(Bucket::with_store(&bucket, &prefix, Arc::new(store)))
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
            store,
            prefix: Path::from(prefix),
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
        let got = self
            .store
            .get_opts(&self.key(id), options)
            .await
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

    /// The objects right under the prefix that a file id names (others are left alone), with
    /// their age by the bucket's clock against `now_ms`.
    pub async fn list(&self, now_ms: i64) -> Result<Vec<StoredObject>> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let mut listed = self.store.list(prefix);
        let mut out = Vec::new();
        while let Some(meta) = listed.try_next().await.map_err(store_error)? {
            let Some(id) = meta.location.filename().and_then(FileId::parse) else {
                continue;
            };
            if meta.location != self.key(&id) {
                continue;
            }
            out.push(StoredObject {
                id,
                age_ms: now_ms - meta.last_modified.timestamp_millis(),
            });
        }
        Ok(out)
    }
}

/// The objects of `listed` to delete: a deleted file's (`gone`) at once, and any other no record
/// names once older than `grace_ms` (an upload whose record was never written). The objects
/// must be listed before the records are read, so that an object older than the grace whose
/// upload succeeded has its record among `recorded`.
pub fn unrecorded(
    listed: &[StoredObject],
    recorded: &HashSet<String>,
    gone: &HashSet<String>,
    grace_ms: i64,
) -> Vec<FileId> {
    listed
        .iter()
        .filter(|o| !recorded.contains(o.id.as_str()))
        .filter(|o| gone.contains(o.id.as_str()) || o.age_ms > grace_ms)
        .map(|o| o.id.clone())
        .collect()
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
}

impl BucketWriter {
    /// Takes the next bytes of the object.
    pub async fn write(&mut self, bytes: Bytes) -> Result<()> {
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

    /// Makes the object whole and visible.
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
            WriteState::Parts(parts) => parts.finish().await.map(|_| ()).map_err(store_error),
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
        let listed = bucket
            .list(chrono::Utc::now().timestamp_millis())
            .await
            .unwrap();
        assert_eq!(listed.len(), 4);
    }

    #[tokio::test]
    async fn a_dropped_writer_leaves_no_object() {
        let bucket = bucket();
        let id = FileId::random();
        let mut writer = bucket.writer(&id);
        writer
            .write(Bytes::from(vec![7u8; PART + 1]))
            .await
            .unwrap();
        drop(writer);
        assert!(bucket.read(&id, 1, 0, 1).await.is_err());
        assert!(bucket.list(0).await.unwrap().is_empty());
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
        let now = chrono::Utc::now().timestamp_millis();
        let listed = bucket.list(now).await.unwrap();
        assert_eq!(listed.iter().map(|o| &o.id).collect::<Vec<_>>(), [&id]);
        assert!(listed[0].age_ms < 60_000);
        assert_eq!(bucket.delete(&[id.clone(), other]).await.unwrap(), 2);
        assert!(bucket.list(now).await.unwrap().is_empty());
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
    fn unrecorded_objects_go_when_deleted_or_past_the_grace() {
        let ids: Vec<FileId> = (0..4).map(|_| FileId::random()).collect();
        let listed: Vec<StoredObject> = ids
            .iter()
            .zip([10, 5_000, 10, 5_000])
            .map(|(id, age_ms)| StoredObject {
                id: id.clone(),
                age_ms,
            })
            .collect();
        // 0: recorded, young; 1: recorded, old; 2: deleted, young; 3: no record, old.
        let recorded: HashSet<String> =
            [&ids[0], &ids[1]].iter().map(|id| id.to_string()).collect();
        let gone: HashSet<String> = [ids[2].to_string()].into();
        let mut doomed = unrecorded(&listed, &recorded, &gone, 1_000);
        doomed.sort();
        let mut want = vec![ids[2].clone(), ids[3].clone()];
        want.sort();
        assert_eq!(doomed, want);
        assert!(unrecorded(&listed[3..], &recorded, &HashSet::new(), 10_000).is_empty());
    }
}
