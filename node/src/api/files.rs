//! Files (spec 4.7, decisions/0020): upload (`POST /2/files/<name>`, a raw body or a
//! multipart/form-data `file` part, streamed into the cluster), delete
//! (`DELETE /2/files/<cdn>/<path>` and `POST /2/cdnBatchDelete`), and download (`GET` of a
//! file's url from any node, with `Range`, `ETag` and cache headers). Names, paths and the
//! streaming are `crate::files`; the bytes are the cluster's `files`.

use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use basalt_cluster::files::record::FileRecord;
use futures::{StreamExt, TryStreamExt};
use md5::Digest;
use serde_json::{json, Map, Value};

use super::context::{ApiBody, AppState, RequestCtx};
use super::error::{closing, ApiError, DRAIN_BYTES};
use crate::apps::{find_app, FileDelete};
use crate::auth::PendingSignature;
use crate::files::{
    drain, multipart_file, store, url_of, FileRef, FilesError, UploadName, Uploader,
};
use crate::files::{links, serving};
use crate::images::ops::{Mark, Op, Pipeline, Watermark};
use crate::images::render::Rendered;
use crate::images::ImageError;
use crate::storage_quota::Stored;
use crate::users::session::session_user;
use crate::users::UsersError;
use crate::video::{snapshot, Request as SnapshotRequest};

/// `GET /1/apps/<appId>/files` (console): how many files the app stores and their bytes.
pub async fn usage(
    State(state): State<AppState>,
    account: super::context::ConsoleAccount,
    super::context::ApiPath(id): super::context::ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let app = super::apps::owned_app(&state, &account, &id).await?;
    let (files, bytes) = state
        .cluster
        .files()
        .usage(app.application_id.as_str())
        .await?;
    Ok(Json(json!({"files": files, "bytes": bytes})))
}

/// Urls one `cdnBatchDelete` may name.
const MAX_BATCH_URLS: usize = 1000;
/// Deletes of one batch running at once.
const BATCH_DELETES_AT_ONCE: usize = 8;

/// The answer to an upload: `{filename, url, cdn}`.
fn uploaded(state: &AppState, record: &FileRecord) -> Json<Value> {
    Json(json!({
        "filename": record.filename,
        "url": url_of(state.files.base(&state.public_url), &record.cdn, &record.path),
        "cdn": record.cdn,
    }))
}

/// `POST /2/files/<name>`: the body (raw, or the `file` part of a multipart body) becomes a
/// new file of the app.
pub async fn upload(
    State(state): State<AppState>,
    ctx: RequestCtx,
    Path(name): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let name = UploadName::parse(&name)?;
    let config = state.files.for_app(ctx.app.max_file_mb);
    let config = &config;
    let (parts, body) = req.into_parts();
    let declared = axum::body::HttpBody::size_hint(&body).exact();
    let waits = parts
        .headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let mut body = Box::pin(body.into_data_stream());
    if let Some(len) = declared.filter(|&n| n > config.max_bytes) {
        // A client waiting for `100 Continue` has sent nothing: answer at once. So too when
        // even draining the body would not let it read the answer.
        let drained =
            !waits && len <= DRAIN_BYTES as u64 && drain(&mut body, DRAIN_BYTES, config.idle).await;
        return Ok(too_large(config.max_bytes, drained));
    }
    let uploader = uploader(&state, &ctx).await?;
    let app = ctx.app.application_id.as_str();
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let multipart = content_type
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("multipart/form-data");
    // A signature over the body (the JS SDK's, from Node) is checked as the body streams.
    let signature = ctx.body_signature.as_deref().map(PendingSignature::digests);
    if multipart && signature.is_some() {
        // No client signs a multipart body: its signature is the formula without it.
        return Ok(closing(ApiError::Unauthorized.into_response()));
    }
    // An upload that says its size is refused before it is read when it would pass the app's
    // quota (multipart bodies are judged by what they carry).
    if let Some(len) = declared.filter(|_| !multipart) {
        let quota = ctx.app.files_quota_mb;
        if let Err(e) = state
            .storage_quotas
            .fits(&state.cluster, app, Stored::Files, quota, len)
            .await
        {
            let drained = !waits
                && len <= DRAIN_BYTES as u64
                && drain(&mut body, DRAIN_BYTES, config.idle).await;
            let resp = ApiError::from(e).into_response();
            return Ok(if drained { resp } else { closing(resp) });
        }
    }
    let who = Uploader {
        app,
        user: uploader,
        signature,
        quota: (&state.storage_quotas, ctx.app.files_quota_mb),
    };
    let stored = if multipart {
        let mut part = Box::pin(multipart_file(content_type, body, config).await?);
        let stored = store(&state.cluster, config, &mut part, &name, who).await;
        if matches!(stored, Err(FilesError::TooLarge(_))) {
            let drained = drain(&mut part, DRAIN_BYTES, config.idle).await;
            return Ok(too_large(config.max_bytes, drained));
        }
        stored
    } else {
        let stored = store(&state.cluster, config, &mut body, &name, who).await;
        if matches!(stored, Err(FilesError::TooLarge(_))) {
            let drained = drain(&mut body, DRAIN_BYTES, config.idle).await;
            return Ok(too_large(config.max_bytes, drained));
        }
        stored
    };
    Ok(uploaded(&state, &stored?).into_response())
}

/// The user whose session a request carries, recorded as a new file's uploader.
async fn uploader(state: &AppState, ctx: &RequestCtx) -> Result<Option<String>, ApiError> {
    Ok(match &ctx.session_token {
        Some(token) => session_user(&state.cluster, &ctx.app.application_id, token)
            .await?
            .map(|(id, _)| id),
        None => None,
    })
}

/// `POST /2/cdnVedioSnapshot` `{source, save_as, point}`: the frame of the app's stored video
/// `source` at `point` (`HH:MM:SS`), stored as a new file named after `save_as` (`video`).
pub async fn video_snapshot(
    State(state): State<AppState>,
    ctx: RequestCtx,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    let member = |key: &str| match body.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.as_str()),
        _ => Err(ApiError::InvalidBody(format!(
            "{key} must be a non-empty string."
        ))),
    };
    let req = SnapshotRequest {
        source: member("source")?,
        save_as: member("save_as")?,
        point: member("point")?,
    };
    let who = Uploader {
        app: ctx.app.application_id.as_str(),
        user: uploader(&state, &ctx).await?,
        signature: None,
        quota: (&state.storage_quotas, ctx.app.files_quota_mb),
    };
    let config = state.files.for_app(ctx.app.max_file_mb);
    let shot = snapshot(&state.cluster, &config, req, who).await?;
    let url = url_of(
        state.files.base(&state.public_url),
        &shot.record.cdn,
        &shot.record.path,
    );
    Ok(Json(json!({
        "status_code": 200,
        "message": "ok",
        "content_type": shot.content_type,
        "content_length": shot.record.size,
        "save_as": url,
        "filename": shot.record.filename,
        "url": url,
        "cdn": shot.record.cdn,
    })))
}

/// Urls one `cdnSignedUrls` may sign.
const MAX_SIGNED_URLS: usize = 1000;

/// `POST /2/cdnSignedUrls` `{"urls": [url, ...], "expires": seconds}`: each url of the app's
/// files with the `e` and `token` that let it be read until `expires` seconds from now (3,600
/// when not given, at most 7 days): `{"results": [signed url, ...]}` in the same order. The
/// only way to read a private app's files (`privateFiles`); harmless for the others.
pub async fn signed_urls(
    State(state): State<AppState>,
    ctx: RequestCtx,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    let urls = match body.get("urls") {
        Some(Value::Array(urls)) if urls.len() <= MAX_SIGNED_URLS => urls,
        _ => {
            return Err(ApiError::InvalidBody(format!(
                "urls must be an array of at most {MAX_SIGNED_URLS} urls."
            )))
        }
    };
    let lifetime = match body.get("expires") {
        None => links::DEFAULT_LIFETIME_SECS,
        Some(v) => v
            .as_i64()
            .filter(|s| (1..=links::MAX_LIFETIME_SECS).contains(s))
            .ok_or_else(|| {
                ApiError::InvalidBody(format!(
                    "expires must be a number of seconds from 1 to {}.",
                    links::MAX_LIFETIME_SECS
                ))
            })?,
    };
    let deadline = basalt_cluster::now_ms() / 1000 + lifetime;
    let app = ctx.app.application_id.as_str();
    let mut results = Vec::with_capacity(urls.len());
    for url in urls {
        let Value::String(url) = url else {
            return Err(ApiError::InvalidBody("urls must be strings.".into()));
        };
        let not_found = || FilesError::NotFound(basalt_cluster::error::clip(url));
        let file = FileRef::parse(url).ok_or_else(not_found)?;
        let record = state
            .cluster
            .files()
            .record(&file.id)
            .await?
            .filter(|r| r.path == file.path && r.app == app)
            .ok_or_else(not_found)?;
        let query = links::signed_query(&ctx.app.master_key, &record.path, deadline)
            .map_err(FilesError::from)?;
        let url = url_of(
            state.files.base(&state.public_url),
            &record.cdn,
            &record.path,
        );
        results.push(Value::String(format!("{url}?{query}")));
    }
    Ok(Json(json!({"results": results})))
}

/// The 1500 answer to a file over the limit, closing the connection unless the rest of the
/// body was read.
fn too_large(max: u64, drained: bool) -> Response {
    let resp = ApiError::from(FilesError::TooLarge(max)).into_response();
    if drained {
        resp
    } else {
        closing(resp)
    }
}

/// `DELETE /2/files/<cdn>/<path>` (also `<other name>/<cdn>/<path>` and doubled slashes, as
/// the SDKs send it): `{"msg":"ok"}`, or 151 for a file the app does not have.
pub async fn delete_file(
    State(state): State<AppState>,
    ctx: RequestCtx,
    Path(path): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let deleter = deleter(&state, &ctx).await?;
    delete_one(&state, &ctx, &deleter, &path).await?;
    Ok(Json(json!({"msg": "ok"})))
}

/// Whose files a delete request may delete, as the app's `fileDelete` says.
enum Deleter {
    /// Any of the app's files.
    Any,
    /// The files this user uploaded.
    Uploader(String),
}

/// Whose files the request may delete: refused outright (10061, 206) when it may delete none.
async fn deleter(state: &AppState, ctx: &RequestCtx) -> Result<Deleter, FilesError> {
    match ctx.app.file_delete {
        _ if ctx.master => Ok(Deleter::Any),
        FileDelete::Any => Ok(Deleter::Any),
        FileDelete::Master => Err(FilesError::DeleteNeedsMaster),
        FileDelete::Uploader => {
            let token = ctx
                .session_token
                .as_deref()
                .ok_or(FilesError::DeleteNeedsSession)?;
            let user = session_user(&state.cluster, &ctx.app.application_id, token)
                .await
                .map_err(|e| match e {
                    UsersError::Cluster(e) => FilesError::Cluster(e),
                    other => FilesError::Session(other.to_string()),
                })?
                .map(|(id, _)| id)
                .ok_or(FilesError::DeleteNeedsSession)?;
            Ok(Deleter::Uploader(user))
        }
    }
}

async fn delete_one(
    state: &AppState,
    ctx: &RequestCtx,
    deleter: &Deleter,
    url: &str,
) -> Result<(), FilesError> {
    let not_found = || FilesError::NotFound(basalt_cluster::error::clip(url));
    let file = FileRef::parse(url).ok_or_else(not_found)?;
    if let Deleter::Uploader(user) = deleter {
        // The uploader never changes: the delete below removes this record or nothing.
        let record = state.cluster.files().record(&file.id).await?;
        if record.and_then(|r| r.uploader).as_ref() != Some(user) {
            return Err(not_found());
        }
    }
    state
        .cluster
        .files()
        .delete(ctx.app.application_id.as_str(), &file.id, &file.path)
        .await?
        .ok_or_else(not_found)?;
    Ok(())
}

/// `POST /2/cdnBatchDelete` `{<cdn>: [url, ...], ...}`: deletes every file named;
/// `{"msg":"ok"}` when all went, else 154 with the urls that did not under `fail`.
pub async fn batch_delete(
    State(state): State<AppState>,
    ctx: RequestCtx,
    body: ApiBody,
) -> Result<Response, ApiError> {
    let body = body.object()?;
    let mut asked = Vec::new();
    for (cdn, urls) in &body {
        let Value::Array(urls) = urls else {
            return Err(ApiError::InvalidBody(format!(
                "{:?} must name an array of urls.",
                basalt_cluster::error::clip(cdn)
            )));
        };
        for url in urls {
            let Value::String(url) = url else {
                return Err(ApiError::InvalidBody("urls must be strings.".into()));
            };
            asked.push((cdn.clone(), url.clone()));
        }
    }
    if asked.len() > MAX_BATCH_URLS {
        return Err(ApiError::InvalidBody(format!(
            "one batch deletes at most {MAX_BATCH_URLS} files."
        )));
    }
    let deleter = deleter(&state, &ctx).await?;
    let outcomes: Vec<(String, String, Result<(), FilesError>)> =
        futures::stream::iter(asked.into_iter().map(|(cdn, url)| {
            let (state, ctx, deleter) = (&state, &ctx, &deleter);
            async move {
                let outcome = delete_one(state, ctx, deleter, &url).await;
                (cdn, url, outcome)
            }
        }))
        .buffered(BATCH_DELETES_AT_ONCE)
        .collect()
        .await;
    let mut fail: Map<String, Value> = Map::new();
    for (cdn, url, outcome) in outcomes {
        if let Err(e) = outcome {
            if let FilesError::Cluster(e) = &e {
                tracing::warn!(%url, "batch delete: {e}");
            }
            push_failed(&mut fail, cdn, url);
        }
    }
    if fail.is_empty() {
        return Ok(Json(json!({"msg": "ok"})).into_response());
    }
    Err(ApiError::FilesNotDeleted(Value::Object(fail)))
}

fn push_failed(fail: &mut Map<String, Value>, cdn: String, url: String) {
    if let Value::Array(urls) = fail.entry(cdn).or_insert_with(|| Value::Array(Vec::new())) {
        urls.push(Value::String(url));
    }
}

/// Cache lifetime of a file's answers: a url never changes content.
const CACHE_CONTROL: &str = "public, max-age=31536000, immutable";

/// `GET /<cdn>/YYYY/MM/DD/<id>.<ext>`: the file's bytes, whole or the one range asked for;
/// with `?imageView2/...` or `?watermark/...`, the image processed as asked (`images`).
pub async fn download(
    State(state): State<AppState>,
    Path((y, m, d, name)): Path<(String, String, String, String)>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // Parameters are checked before the file is looked up. Operations come first in the query;
    // `&` starts other parameters (a private file's `e` and `token`).
    let raw_query = query.unwrap_or_default();
    let query = raw_query.split('&').next().unwrap_or_default();
    let pipeline = Pipeline::parse(query)?;
    let file = FileRef::parse(&format!("{y}/{m}/{d}/{name}")).ok_or(ApiError::RouteNotFound)?;
    let record = state
        .cluster
        .files()
        .record(&file.id)
        .await?
        .filter(|r| r.path == file.path)
        .ok_or(ApiError::RouteNotFound)?;
    let app = find_app(&state.cluster, &record.app)
        .await?
        .ok_or(ApiError::RouteNotFound)?;
    // A private file's answers may be kept only by the client, and only until its url expires.
    let cache_control = if app.private_files {
        let now = basalt_cluster::now_ms() / 1000;
        let deadline =
            links::check(&app.master_key, &file.path, &raw_query, now).map_err(FilesError::from)?;
        if let Some(pipeline) = &pipeline {
            marks_signed(&app.master_key, pipeline, now)?;
        }
        format!("private, max-age={}", deadline - now)
    } else {
        CACHE_CONTROL.to_string()
    };
    if let Some(pipeline) = pipeline {
        match state
            .images
            .answer(&state.cluster, &record, &file, query, &pipeline)
            .await
        {
            Ok(image) => {
                return processed(&record, query, image, &cache_control, &method, &headers)
            }
            // `ignore-error/1`: the file as it is.
            Err(e) if pipeline.ignore_error && e.is_about_the_file() => {}
            Err(e) => return Err(e.into()),
        }
    }
    let etag = format!("\"{}\"", record.md5);
    let own_origin = serving::on_files_origin(state.files.origin.as_deref(), &headers);
    let mut resp = serving::guard(Response::builder(), &record.content_type, own_origin, &name)
        .header(header::ETAG, &etag)
        .header(header::CACHE_CONTROL, &cache_control)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(
            header::LAST_MODIFIED,
            httpdate::fmt_http_date(
                std::time::UNIX_EPOCH
                    + std::time::Duration::from_millis(record.created_ms.max(0) as u64),
            ),
        );
    if matches_etag(&headers, &etag) {
        return resp
            .status(StatusCode::NOT_MODIFIED)
            .body(Body::empty())
            .map_err(|e| ApiError::fault("building a response", e));
    }
    let size = record.size;
    let range = match headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        None => None,
        Some(asked) => match byte_range(asked, size) {
            Ok(range) => range,
            Err(()) => {
                return resp
                    .status(StatusCode::RANGE_NOT_SATISFIABLE)
                    .header(header::CONTENT_RANGE, format!("bytes */{size}"))
                    .body(Body::empty())
                    .map_err(|e| ApiError::fault("building a response", e))
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
    // HEAD: the headers only, without opening a copy.
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        let bytes = state
            .cluster
            .files()
            .read(&file.id, &record, offset, len)
            .await?;
        metrics::counter!("basalt_files_downloaded_bytes_total").increment(len);
        Body::from_stream(bytes.map_err(std::io::Error::other))
    };
    resp.body(body)
        .map_err(|e| ApiError::fault("building a response", e))
}

/// The answer of an image processed as `query` asked: its own ETag (the file's and the
/// query's), cached as the file is; ranges are not served of it.
fn processed(
    record: &FileRecord,
    query: &str,
    image: Rendered,
    cache_control: &str,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let query_md5 = md5::Md5::digest(query.as_bytes());
    let etag = format!("\"{}-{:x}\"", record.md5, query_md5);
    let resp = serving::guard(Response::builder(), image.format.content_type(), false, "")
        .header(header::ETAG, &etag)
        .header(header::CACHE_CONTROL, cache_control);
    if matches_etag(headers, &etag) {
        return resp
            .status(StatusCode::NOT_MODIFIED)
            .body(Body::empty())
            .map_err(|e| ApiError::fault("building a response", e));
    }
    metrics::counter!("basalt_files_downloaded_bytes_total").increment(image.bytes.len() as u64);
    let len = image.bytes.len();
    let body = if *method == Method::HEAD {
        Body::empty()
    } else {
        Body::from(image.bytes)
    };
    resp.status(StatusCode::OK)
        .header(header::CONTENT_TYPE, image.format.content_type())
        .header(header::CONTENT_LENGTH, len)
        .body(body)
        .map_err(|e| ApiError::fault("building a response", e))
}

/// Checks that every watermark picture of a private app's pipeline is named by a url signed for
/// it: a signature opens its own file only, never another one laid over it.
fn marks_signed(key: &str, pipeline: &Pipeline, now: i64) -> Result<(), ApiError> {
    for step in &pipeline.steps {
        if let Op::Watermark(Watermark {
            mark: Mark::Image { url, .. },
            ..
        }) = step
        {
            let file = FileRef::parse(url)
                .ok_or_else(|| ApiError::from(ImageError::MarkNotFound(url.clone())))?;
            let query = url.split_once('?').map_or("", |(_, q)| q);
            links::check(key, &file.path, query, now).map_err(FilesError::from)?;
        }
    }
    Ok(())
}

/// True when the `If-None-Match` of `headers` names `etag` (or `*`).
fn matches_etag(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
}

/// The one byte range `bytes=a-b`, `bytes=a-` or `bytes=-n` of a `Range` header, inclusive
/// and cut to `size`. `Ok(None)`: serve the whole file (another unit, several ranges, or a
/// header that is not a range); `Err`: a range that lies wholly outside the file (416).
fn byte_range(asked: &str, size: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = asked.trim().strip_prefix("bytes=") else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Ok(None);
    };
    let (first, last) = (first.trim(), last.trim());
    let parse = |s: &str| s.parse::<u64>().ok();
    let range = match (first.is_empty(), last.is_empty()) {
        (true, true) => return Ok(None),
        // The last n bytes.
        (true, false) => match parse(last) {
            Some(0) => return Err(()),
            Some(n) => (size.saturating_sub(n), size.saturating_sub(1)),
            None => return Ok(None),
        },
        (false, _) => {
            let Some(start) = parse(first) else {
                return Ok(None);
            };
            let end = if last.is_empty() {
                Some(u64::MAX)
            } else {
                parse(last)
            };
            match end {
                Some(end) if end >= start => (start, end.min(size.saturating_sub(1))),
                _ => return Ok(None),
            }
        }
    };
    if size == 0 || range.0 >= size {
        return Err(());
    }
    Ok(Some(range))
}

#[cfg(test)]
mod tests {
    use super::byte_range;

    #[test]
    fn byte_ranges() {
        assert_eq!(byte_range("bytes=0-9", 100), Ok(Some((0, 9))));
        assert_eq!(byte_range("bytes=90-", 100), Ok(Some((90, 99))));
        assert_eq!(byte_range("bytes=-10", 100), Ok(Some((90, 99))));
        assert_eq!(byte_range("bytes=-200", 100), Ok(Some((0, 99))));
        assert_eq!(byte_range("bytes=50-500", 100), Ok(Some((50, 99))));
        assert_eq!(byte_range("bytes=100-", 100), Err(()));
        assert_eq!(byte_range("bytes=-0", 100), Err(()));
        assert_eq!(byte_range("bytes=0-1,5-6", 100), Ok(None));
        assert_eq!(byte_range("bytes=9-3", 100), Ok(None));
        assert_eq!(byte_range("items=0-9", 100), Ok(None));
        assert_eq!(byte_range("bytes=x-9", 100), Ok(None));
    }
}
