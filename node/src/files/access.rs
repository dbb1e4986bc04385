//! Who may do what with an app's files: whose session an upload is recorded under, whose files
//! a delete may remove as the app's `fileDelete` says (any client with its keys, the master key
//! only, or the uploader's session), and the signed urls that read a private app's files
//! (`links`; checked by `download`). Callers: `api::files` (uploads, deletes, batch deletes,
//! `cdnSignedUrls`).

/// Deletes of one batch running at once.
const BATCH_DELETES_AT_ONCE: usize = 8;

use basalt_cluster::Cluster;
use futures::StreamExt;
use serde_json::{Map, Value};

use super::{links, url_of, FileRef, FilesError};
use crate::apps::{AppRecord, FileDelete};
use crate::auth::RequestCtx;
use crate::users::session::session_user;
use crate::users::UsersError;

/// The user whose session a request carries, recorded as a new file's uploader.
pub async fn uploader(cluster: &Cluster, ctx: &RequestCtx) -> Result<Option<String>, UsersError> {
    Ok(match &ctx.session_token {
        Some(token) => session_user(cluster, &ctx.app.application_id, token)
            .await?
            .map(|(id, _)| id.to_string()),
        None => None,
    })
}

/// Whose files a delete request may delete, as the app's `fileDelete` says.
pub enum Deleter {
    /// Any of the app's files.
    Any,
    /// The files this user uploaded.
    Uploader(String),
}

/// Whose files the request may delete: refused outright (10061, 206) when it may delete none.
pub async fn deleter(cluster: &Cluster, ctx: &RequestCtx) -> Result<Deleter, FilesError> {
    match ctx.app.file_delete {
        _ if ctx.master => Ok(Deleter::Any),
        FileDelete::Any => Ok(Deleter::Any),
        FileDelete::Master => Err(FilesError::DeleteNeedsMaster),
        FileDelete::Uploader => {
            let token = ctx
                .session_token
                .as_deref()
                .ok_or(FilesError::DeleteNeedsSession)?;
            let user = session_user(cluster, &ctx.app.application_id, token)
                .await
                .map_err(|e| match e {
                    UsersError::Cluster(e) => FilesError::Cluster(e),
                    other => FilesError::Session(other.to_string()),
                })?
                .map(|(id, _)| id.to_string())
                .ok_or(FilesError::DeleteNeedsSession)?;
            Ok(Deleter::Uploader(user))
        }
    }
}

/// Deletes the app's file at `url` when `deleter` may (151 for a file it does not have, or may
/// not delete).
pub async fn delete_one(
    cluster: &Cluster,
    ctx: &RequestCtx,
    deleter: &Deleter,
    url: &str,
) -> Result<(), FilesError> {
    let not_found = || FilesError::NotFound(basalt_cluster::error::clip(url));
    let file = FileRef::parse(url).ok_or_else(not_found)?;
    if let Deleter::Uploader(user) = deleter {
        // The uploader never changes: the delete below removes this record or nothing.
        let record = cluster.files().record(&file.id).await?;
        if record.and_then(|r| r.uploader).as_ref() != Some(user) {
            return Err(not_found());
        }
    }
    cluster
        .files()
        .delete(&ctx.app.application_id, &file.id, &file.path)
        .await?
        .ok_or_else(not_found)?;
    Ok(())
}

/// Deletes each `(cdn, url)` asked, a few at a time; answers the urls that did not go, by cdn.
pub async fn delete_many(
    cluster: &Cluster,
    ctx: &RequestCtx,
    deleter: &Deleter,
    asked: Vec<(String, String)>,
) -> Map<String, Value> {
    let outcomes: Vec<(String, String, Result<(), FilesError>)> =
        futures::stream::iter(asked.into_iter().map(|(cdn, url)| async move {
            let outcome = delete_one(cluster, ctx, deleter, &url).await;
            (cdn, url, outcome)
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
            if let Value::Array(urls) = fail.entry(cdn).or_insert_with(|| Value::Array(Vec::new()))
            {
                urls.push(Value::String(url));
            }
        }
    }
    fail
}

/// `url` of one of `app`'s files with the `e` and `token` that let it be read until `deadline`
/// (seconds), on `base` (151 for a url that names none of the app's files).
pub async fn signed_url(
    cluster: &Cluster,
    app: &AppRecord,
    url: &str,
    deadline: i64,
    base: &str,
) -> Result<String, FilesError> {
    let not_found = || FilesError::NotFound(basalt_cluster::error::clip(url));
    let file = FileRef::parse(url).ok_or_else(not_found)?;
    let record = cluster
        .files()
        .record(&file.id)
        .await?
        .filter(|r| r.path == file.path && r.app == app.application_id.as_str())
        .ok_or_else(not_found)?;
    let query = links::signed_query(&app.master_key, &record.path, deadline)?;
    Ok(format!(
        "{}?{query}",
        url_of(base, &record.cdn, &record.path)
    ))
}
