//! Image processing on stored files (issue 15, decisions/0021): the `GET` of an image file's
//! url with `?imageView2/...` or `?watermark/...` answers a thumbnail, a re-encoding or a
//! watermarked copy. `ops` parses what the query asks for, `render` does it to the pixels,
//! `text` draws text marks. `Images` (one per node, in `api::context::Shared`) reads the file
//! (and a watermark's picture, only from the same app) from the cluster's `files`, runs the
//! work on a bounded number of blocking threads, and keeps results in a bounded cache, so a
//! popular thumbnail is computed once per node. The caller is `files::download`.

pub mod error;
pub mod ops;
pub mod render;
pub mod text;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use basalt_cluster::files::record::FileRecord;
use basalt_cluster::Cluster;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use tokio::sync::Semaphore;

use crate::files::FileRef;
pub use error::ImageError;
use ops::{Mark, Op, Pipeline};
use render::{Marks, Rendered};
use text::Font;

/// Largest file that is processed, in bytes (its picture is decoded whole in memory).
pub const MAX_SOURCE_BYTES: u64 = 20 * 1024 * 1024;
/// Bytes of processed images a node keeps.
pub const CACHE_BYTES: u64 = 64 * 1024 * 1024;
/// How long a request waits for a free worker before answering 503.
const WORKER_WAIT: Duration = Duration::from_secs(30);

/// A cache's weight of a result: its bytes.
#[derive(Clone)]
struct ByBytes;

impl quick_cache::Weighter<(String, String), Rendered> for ByBytes {
    fn weight(&self, key: &(String, String), value: &Rendered) -> u64 {
        (key.0.len() + key.1.len() + value.bytes.len()) as u64
    }
}

/// This node's image processing: its workers, its cache of results, its font.
pub struct Images {
    cache: quick_cache::sync::Cache<(String, String), Rendered, ByBytes>,
    workers: Arc<Semaphore>,
    font: OnceLock<Option<Arc<Font>>>,
}

impl Default for Images {
    fn default() -> Self {
        Images::new(CACHE_BYTES)
    }
}

impl Images {
    /// Image processing keeping up to `cache_bytes` of results, with one worker per core.
    pub fn new(cache_bytes: u64) -> Images {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Images {
            cache: quick_cache::sync::Cache::with_weighter(1024, cache_bytes, ByBytes),
            workers: Arc::new(Semaphore::new(cores)),
            font: OnceLock::new(),
        }
    }

    /// The font of text watermarks, found on first use.
    fn font(&self) -> Option<Arc<Font>> {
        self.font
            .get_or_init(|| {
                let font = Font::find().map(Arc::new);
                match &font {
                    Some(f) => tracing::info!(path = %f.path, "watermark font"),
                    None => tracing::warn!(
                        paths = ?text::FONT_PATHS,
                        "no font for text watermarks is installed"
                    ),
                }
                font
            })
            .clone()
    }

    /// The file `record` (id `id`) processed as `query` (parsed: `pipeline`) asks: from the
    /// cache, or computed once while other requests for the same result wait for it.
    pub async fn answer(
        &self,
        cluster: &Cluster,
        record: &FileRecord,
        file: &FileRef,
        query: &str,
        pipeline: &Pipeline,
    ) -> Result<Rendered, ImageError> {
        let key = (file.id.to_string(), query.to_string());
        if let Some(hit) = self.cache.get(&key) {
            metrics::counter!("basalt_images_cache_hits_total").increment(1);
            return Ok(hit);
        }
        self.cache
            .get_or_insert_async(&key, self.compute(cluster, record, file, pipeline))
            .await
    }

    async fn compute(
        &self,
        cluster: &Cluster,
        record: &FileRecord,
        file: &FileRef,
        pipeline: &Pipeline,
    ) -> Result<Rendered, ImageError> {
        let started = std::time::Instant::now();
        // The permit comes first: what is read for one image counts against it.
        let permit = tokio::time::timeout(WORKER_WAIT, self.workers.clone().acquire_owned())
            .await
            .map_err(|_| ImageError::Busy)?
            .map_err(|e| ImageError::Worker(e.to_string()))?;
        let source = read_whole(cluster, file, record).await?;
        let mut images = Vec::new();
        let mut wants_font = false;
        for step in &pipeline.steps {
            match step {
                Op::Watermark(w) => match &w.mark {
                    Mark::Image { url, .. } => {
                        images.push(mark_picture(cluster, record, url).await?)
                    }
                    Mark::Text { .. } => wants_font = true,
                },
                Op::View(_) => {}
            }
        }
        let font = if wants_font {
            Some(self.font().ok_or(ImageError::NoFont)?)
        } else {
            None
        };
        let pipeline = pipeline.clone();
        let rendered = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let marks = Marks {
                images,
                font: font.as_deref(),
            };
            render::run(&source, &pipeline, &marks)
        })
        .await
        .map_err(|e| ImageError::Worker(e.to_string()))??;
        metrics::counter!("basalt_images_rendered_total").increment(1);
        metrics::histogram!("basalt_images_render_seconds").record(started.elapsed().as_secs_f64());
        Ok(rendered)
    }
}

/// All of a file's bytes, when it is small enough to process.
async fn read_whole(
    cluster: &Cluster,
    file: &FileRef,
    record: &FileRecord,
) -> Result<Bytes, ImageError> {
    if record.size > MAX_SOURCE_BYTES {
        return Err(ImageError::TooLarge(format!(
            "files larger than {} MiB are not processed",
            MAX_SOURCE_BYTES >> 20
        )));
    }
    let mut chunks = cluster
        .files()
        .read(&file.id, record, 0, record.size)
        .await?;
    let mut whole = BytesMut::with_capacity(record.size as usize);
    while let Some(chunk) = chunks.next().await {
        whole.extend_from_slice(&chunk?);
    }
    Ok(whole.freeze())
}

/// The picture of a `watermark/1`: a stored file of the same app as the image it marks (never
/// a fetch from elsewhere).
async fn mark_picture(
    cluster: &Cluster,
    base: &FileRecord,
    url: &str,
) -> Result<Bytes, ImageError> {
    let not_found = || ImageError::MarkNotFound(url.to_string());
    let file = FileRef::parse(url).ok_or_else(not_found)?;
    let record = cluster
        .files()
        .record(&file.id)
        .await?
        .filter(|r| r.path == file.path && r.app == base.app)
        .ok_or_else(not_found)?;
    read_whole(cluster, &file, &record).await
}
