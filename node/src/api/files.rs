//! Files (spec 4.7, decisions/0020): upload (`POST /2/files/<name>`, a raw body or a
//! multipart/form-data `file` part, streamed into the cluster), delete
//! (`DELETE /2/files/<cdn>/<path>` and `POST /2/cdnBatchDelete`), and download (`GET` of a
//! file's url from any node, with `Range`, `ETag` and cache headers). These handlers parse and
//! answer; names, paths, the streaming, who may do what (`files::access`) and downloads
//! (`files::download`) are `crate::files`; the bytes are the cluster's `files`.

use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::Json;
use basalt_cluster::files::record::FileRecord;
use serde_json::{json, Map, Value};

use super::context::{ApiBody, AppState, RequestCtx};
use super::error::{closing, ApiError, CommonError, FilesApiError};
use crate::files::access::{delete_many, delete_one, deleter, signed_url, uploader};
use crate::files::download::{Asked, Downloads};
use crate::files::links;
use crate::files::upload::{Incoming, Refused, Uploads};
use crate::files::video::{snapshot, Request as SnapshotRequest};
use crate::files::{url_of, UploadName, Uploader};

/// `GET /1/apps/<appId>/files` (console): how many files the app stores and their bytes.
pub async fn usage(
    State(state): State<AppState>,
    account: super::context::ConsoleAccount,
    super::context::ApiPath(id): super::context::ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let app = super::apps::owned_app(&state, &account, &id).await?;
    let (files, bytes) = state.cluster.files().usage(&app.application_id).await?;
    Ok(Json(json!({"files": files, "bytes": bytes})))
}

/// Urls one `cdnBatchDelete` may name.
const MAX_BATCH_URLS: usize = 1000;

/// The answer to an upload: `{filename, url, cdn}`.
fn uploaded(state: &AppState, record: &FileRecord) -> Json<Value> {
    Json(json!({
        "filename": record.filename,
        "url": url_of(state.files.base(&state.public_url), &record.cdn, &record.path),
        "cdn": record.cdn,
    }))
}

/// `POST /2/files/<name>`: the body (raw, or the `file` part of a multipart body) becomes a
/// new file of the app (`files::upload`).
pub async fn upload(
    State(state): State<AppState>,
    ctx: RequestCtx,
    Path(name): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let name = UploadName::parse(&name)?;
    let (parts, body) = req.into_parts();
    let header = |name| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let incoming = Incoming {
        name,
        content_type: header(header::CONTENT_TYPE).unwrap_or_default().to_string(),
        declared: axum::body::HttpBody::size_hint(&body).exact(),
        waits: header(header::EXPECT).is_some_and(|v| v.eq_ignore_ascii_case("100-continue")),
        body,
    };
    let uploads = Uploads {
        cluster: &state.cluster,
        quotas: &state.storage_quotas,
        config: &state.files,
    };
    match uploads.receive(&ctx, incoming).await {
        Ok(record) => Ok(uploaded(&state, &record).into_response()),
        Err(Refused { error, close }) => {
            let resp = ApiError::from(error).into_response();
            Ok(if close { closing(resp) } else { resp })
        }
    }
}

/// `POST /2/cdnVedioSnapshot` `{source, save_as, point}`: the frame of the app's stored video
/// `source` at `point` (`HH:MM:SS`), stored as a new file named after `save_as` (`video`).
pub async fn video_snapshot(
    State(state): State<AppState>,
    ctx: RequestCtx,
    body: ApiBody,
) -> Result<Json<Value>, ApiError> {
    let body = body.object()?;
    let member = |key: &str| non_empty_member(&body, key);
    let req = SnapshotRequest {
        source: member("source")?,
        save_as: member("save_as")?,
        point: member("point")?,
    };
    let who = Uploader {
        app: &ctx.app.application_id,
        user: uploader(&state.cluster, &ctx).await?,
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

/// `body`'s member `key`, a non-empty string (107 otherwise).
fn non_empty_member<'a>(body: &'a Map<String, Value>, key: &str) -> Result<&'a str, CommonError> {
    match body.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.as_str()),
        _ => Err(CommonError::InvalidBody(format!(
            "{key} must be a non-empty string."
        ))),
    }
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
            return Err(CommonError::InvalidBody(format!(
                "urls must be an array of at most {MAX_SIGNED_URLS} urls."
            ))
            .into())
        }
    };
    let lifetime = match body.get("expires") {
        None => links::DEFAULT_LIFETIME_SECS,
        Some(v) => v
            .as_i64()
            .filter(|s| (1..=links::MAX_LIFETIME_SECS).contains(s))
            .ok_or_else(|| {
                CommonError::InvalidBody(format!(
                    "expires must be a number of seconds from 1 to {}.",
                    links::MAX_LIFETIME_SECS
                ))
            })?,
    };
    let deadline = basalt_cluster::now_ms() / 1000 + lifetime;
    let base = state.files.base(&state.public_url);
    let mut results = Vec::with_capacity(urls.len());
    for url in urls {
        let Value::String(url) = url else {
            return Err(CommonError::InvalidBody("urls must be strings.".into()).into());
        };
        let signed = signed_url(&state.cluster, &ctx.app, url, deadline, base).await?;
        results.push(Value::String(signed));
    }
    Ok(Json(json!({"results": results})))
}

/// `DELETE /2/files/<cdn>/<path>` (also `<other name>/<cdn>/<path>` and doubled slashes, as
/// the SDKs send it): `{"msg":"ok"}`, or 151 for a file the app does not have.
pub async fn delete_file(
    State(state): State<AppState>,
    ctx: RequestCtx,
    Path(path): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let deleter = deleter(&state.cluster, &ctx).await?;
    delete_one(&state.cluster, &ctx, &deleter, &path).await?;
    Ok(Json(json!({"msg": "ok"})))
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
            return Err(CommonError::InvalidBody(format!(
                "{:?} must name an array of urls.",
                basalt_cluster::error::clip(cdn)
            ))
            .into());
        };
        for url in urls {
            let Value::String(url) = url else {
                return Err(CommonError::InvalidBody("urls must be strings.".into()).into());
            };
            asked.push((cdn.clone(), url.clone()));
        }
    }
    if asked.len() > MAX_BATCH_URLS {
        return Err(CommonError::InvalidBody(format!(
            "one batch deletes at most {MAX_BATCH_URLS} files."
        ))
        .into());
    }
    let deleter = deleter(&state.cluster, &ctx).await?;
    let fail = delete_many(&state.cluster, &ctx, &deleter, asked).await;
    if fail.is_empty() {
        return Ok(Json(json!({"msg": "ok"})).into_response());
    }
    Err(FilesApiError::FilesNotDeleted(Value::Object(fail)).into())
}

/// `GET /<cdn>/YYYY/MM/DD/<id>.<ext>`: the file's bytes, whole or the one range asked for;
/// with `?imageView2/...` or `?watermark/...`, the image processed as asked (`files::download`).
pub async fn download(
    State(state): State<AppState>,
    Path((y, m, d, name)): Path<(String, String, String, String)>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let asked = Asked {
        path: format!("{y}/{m}/{d}/{name}"),
        name,
        query: query.unwrap_or_default(),
        method,
        headers,
    };
    let downloads = Downloads {
        cluster: &state.cluster,
        images: &state.images,
        origin: state.files.origin.as_deref(),
    };
    Ok(downloads.answer(&asked).await?)
}
