//! A download of a stored file (`GET /<cdn>/YYYY/MM/DD/<id>.<ext>`, from any node): the file's
//! record and app are found by its url; a private app's file needs a signed url (`links`, the
//! pictures of its watermarks too); an `imageView2`/`watermark` query hands the file to
//! `images`; otherwise its bytes are streamed whole or the one range asked for (`ranges`), with
//! its `ETag`, cache headers and the `serving` guard. Caller: `api::files::download`.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use basalt_cluster::files::record::FileRecord;
use basalt_cluster::Cluster;
use futures::TryStreamExt;
use md5::Digest;

use super::images::ops::{Mark, Op, Pipeline, Watermark};
use super::images::render::Rendered;
use super::images::{ImageError, Images};
use super::ranges::{byte_range, matches_etag, Unsatisfiable};
use super::{links, serving, FileRef, FilesError};
use crate::apps::find_app;

/// Cache lifetime of a file's answers: a url never changes content.
const CACHE_CONTROL: &str = "public, max-age=31536000, immutable";

/// What a download asks for.
pub struct Asked {
    /// The url's path after the cdn: `YYYY/MM/DD/<id>.<ext>`.
    pub path: String,
    /// The url's file name (`<id>.<ext>`), named by an attachment's `Content-Disposition`.
    pub name: String,
    /// The url's query, as sent: image operations first, then `&`-separated parameters.
    pub query: String,
    pub method: Method,
    pub headers: HeaderMap,
}

/// Where a download is served from: the cluster's files, this node's images, and the files'
/// own origin (`--files-public-url`) if they have one.
pub struct Downloads<'a> {
    pub cluster: &'a Cluster,
    pub images: &'a Images,
    pub origin: Option<&'a str>,
}

impl Downloads<'_> {
    /// The answer to a download: the file's bytes, whole or the one range asked for; with
    /// `?imageView2/...` or `?watermark/...`, the image processed as asked (`images`).
    pub async fn answer(&self, asked: &Asked) -> Result<Response, FilesError> {
        // Parameters are checked before the file is looked up. Operations come first in the
        // query; `&` starts other parameters (a private file's `e` and `token`).
        let query = asked.query.split('&').next().unwrap_or_default();
        let pipeline = Pipeline::parse(query)?;
        let file = FileRef::parse(&asked.path).ok_or(FilesError::NoSuchUrl)?;
        let record = self
            .cluster
            .files()
            .record(&file.id)
            .await?
            .filter(|r| r.path == file.path)
            .ok_or(FilesError::NoSuchUrl)?;
        let cache_control = self
            .cache_control(&record, &file, asked, pipeline.as_ref())
            .await?;
        if let Some(pipeline) = pipeline {
            match self
                .images
                .answer(self.cluster, &record, &file, query, &pipeline)
                .await
            {
                Ok(image) => return processed(&record, query, image, &cache_control, asked),
                // `ignore-error/1`: the file as it is.
                Err(e) if pipeline.ignore_error && e.is_about_the_file() => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.bytes(&record, &file, &cache_control, asked).await
    }

    /// How long the file's answers may be kept: a year by anyone, or — a private app's file,
    /// whose url must be signed — by the client only, until the url expires.
    async fn cache_control(
        &self,
        record: &FileRecord,
        file: &FileRef,
        asked: &Asked,
        pipeline: Option<&Pipeline>,
    ) -> Result<String, FilesError> {
        let app = find_app(self.cluster, &record.app)
            .await?
            .ok_or(FilesError::NoSuchUrl)?;
        if !app.private_files {
            return Ok(CACHE_CONTROL.to_string());
        }
        let now = basalt_cluster::now_ms() / 1000;
        let deadline = links::check(&app.master_key, &file.path, &asked.query, now)?;
        if let Some(pipeline) = pipeline {
            marks_signed(&app.master_key, pipeline, now)?;
        }
        Ok(format!("private, max-age={}", deadline - now))
    }

    /// The file's own bytes: whole, the one range asked for (416 for one outside it), or
    /// nothing new (304); a HEAD gets the headers only, without a copy being opened.
    async fn bytes(
        &self,
        record: &FileRecord,
        file: &FileRef,
        cache_control: &str,
        asked: &Asked,
    ) -> Result<Response, FilesError> {
        let etag = format!("\"{}\"", record.md5);
        let own_origin = serving::on_files_origin(self.origin, &asked.headers);
        let mut resp = serving::guard(
            Response::builder(),
            &record.content_type,
            own_origin,
            &asked.name,
        )
        .header(header::ETAG, &etag)
        .header(header::CACHE_CONTROL, cache_control)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(
            header::LAST_MODIFIED,
            httpdate::fmt_http_date(
                std::time::UNIX_EPOCH
                    + std::time::Duration::from_millis(record.created_ms.max(0) as u64),
            ),
        );
        if matches_etag(&asked.headers, &etag) {
            return Ok(resp.status(StatusCode::NOT_MODIFIED).body(Body::empty())?);
        }
        let size = record.size;
        let range = match asked
            .headers
            .get(header::RANGE)
            .and_then(|v| v.to_str().ok())
        {
            None => None,
            Some(range) => match byte_range(range, size) {
                Ok(range) => range,
                Err(Unsatisfiable) => {
                    return Ok(resp
                        .status(StatusCode::RANGE_NOT_SATISFIABLE)
                        .header(header::CONTENT_RANGE, format!("bytes */{size}"))
                        .body(Body::empty())?)
                }
            },
        };
        let (status, offset, len) = match range {
            Some((start, end)) => {
                resp = resp.header(header::CONTENT_RANGE, format!("bytes {start}-{end}/{size}"));
                (StatusCode::PARTIAL_CONTENT, start, end - start + 1)
            }
            None => (StatusCode::OK, 0, size),
        };
        let content_type = HeaderValue::from_str(&record.content_type)
            .unwrap_or(HeaderValue::from_static("application/octet-stream"));
        resp = resp
            .status(status)
            .header(header::CONTENT_TYPE, content_type)
            .header(header::CONTENT_LENGTH, len);
        let body = if asked.method == Method::HEAD {
            Body::empty()
        } else {
            let bytes = self
                .cluster
                .files()
                .read(&file.id, record, offset, len)
                .await?;
            metrics::counter!("basalt_files_downloaded_bytes_total").increment(len);
            Body::from_stream(bytes.map_err(std::io::Error::other))
        };
        Ok(resp.body(body)?)
    }
}

/// The answer of an image processed as `query` asked: its own ETag (the file's and the
/// query's), cached as the file is; ranges are not served of it.
fn processed(
    record: &FileRecord,
    query: &str,
    image: Rendered,
    cache_control: &str,
    asked: &Asked,
) -> Result<Response, FilesError> {
    let query_md5 = md5::Md5::digest(query.as_bytes());
    let etag = format!("\"{}-{:x}\"", record.md5, query_md5);
    let resp = serving::guard(Response::builder(), image.format.content_type(), false, "")
        .header(header::ETAG, &etag)
        .header(header::CACHE_CONTROL, cache_control);
    if matches_etag(&asked.headers, &etag) {
        return Ok(resp.status(StatusCode::NOT_MODIFIED).body(Body::empty())?);
    }
    metrics::counter!("basalt_files_downloaded_bytes_total").increment(image.bytes.len() as u64);
    let len = image.bytes.len();
    let body = if asked.method == Method::HEAD {
        Body::empty()
    } else {
        Body::from(image.bytes)
    };
    Ok(resp
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, image.format.content_type())
        .header(header::CONTENT_LENGTH, len)
        .body(body)?)
}

/// Checks that every watermark picture of a private app's pipeline is named by a url signed for
/// it: a signature opens its own file only, never another one laid over it.
fn marks_signed(key: &str, pipeline: &Pipeline, now: i64) -> Result<(), FilesError> {
    for step in &pipeline.steps {
        if let Op::Watermark(Watermark {
            mark: Mark::Image { url, .. },
            ..
        }) = step
        {
            let file = FileRef::parse(url).ok_or_else(|| ImageError::MarkNotFound(url.clone()))?;
            let query = url.split_once('?').map_or("", |(_, q)| q);
            links::check(key, &file.path, query, now)?;
        }
    }
    Ok(())
}
