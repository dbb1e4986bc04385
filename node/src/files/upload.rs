//! An upload (`POST /2/files/<name>`) as policy: a body that says it passes the size limit, or
//! the app's files quota, is refused before it is read; a multipart body carries no body
//! signature; the body (raw, or the `file` part of a multipart body) is streamed into a new file
//! (`store`) under the uploader's session (`access::uploader`). A refused body is read on (up
//! to `body_budget::DRAIN_BYTES`) so its client can read the answer, else the connection is to
//! be closed. Caller: `api::files::upload`.

use axum::body::Body;
use basalt_cluster::files::record::FileRecord;
use basalt_cluster::Cluster;

use super::{access, drain, multipart_file, store, FilesConfig, FilesError, UploadName, Uploader};
use crate::auth::{PendingSignature, RequestCtx};
use crate::body_budget::DRAIN_BYTES;
use crate::storage_quota::{StorageQuotas, Stored};

/// What an upload brings.
pub struct Incoming {
    pub name: UploadName,
    /// The request's `Content-Type` (a multipart body's carries its boundary).
    pub content_type: String,
    /// The body's size, when the request says it.
    pub declared: Option<u64>,
    /// The client waits for `100 Continue` before it sends the body.
    pub waits: bool,
    pub body: Body,
}

/// Why an upload stored nothing, and whether the connection is to be closed (part of the body
/// may be unread).
pub struct Refused {
    pub error: FilesError,
    pub close: bool,
}

impl<E: Into<FilesError>> From<E> for Refused {
    fn from(e: E) -> Refused {
        Refused {
            error: e.into(),
            close: false,
        }
    }
}

/// Where uploads go: the cluster, this node's view of the apps' stored bytes, the node's file
/// limits.
pub struct Uploads<'a> {
    pub cluster: &'a Cluster,
    pub quotas: &'a StorageQuotas,
    pub config: &'a FilesConfig,
}

impl Uploads<'_> {
    /// Stores the body as a new file of `ctx`'s app; answers its record.
    pub async fn receive(&self, ctx: &RequestCtx, up: Incoming) -> Result<FileRecord, Refused> {
        let config = &self.config.for_app(ctx.app.max_file_mb);
        let mut body = Box::pin(up.body.into_data_stream());
        // A client waiting for `100 Continue` has sent nothing: answer at once. So too when
        // even draining the body would not let it read the answer.
        let may_drain = |len: u64| !up.waits && len <= DRAIN_BYTES as u64;
        if let Some(len) = up.declared.filter(|&n| n > config.max_bytes) {
            let drained = may_drain(len) && drain(&mut body, DRAIN_BYTES, config.idle).await;
            return Err(refused(FilesError::TooLarge(config.max_bytes), drained));
        }
        let user = access::uploader(self.cluster, ctx).await?;
        let app = &ctx.app.application_id;
        let multipart = up
            .content_type
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("multipart/form-data");
        // A signature over the body (the JS SDK's, from Node) is checked as the body streams.
        let signature = ctx.body_signature.as_deref().map(PendingSignature::digests);
        if multipart && signature.is_some() {
            // No client signs a multipart body: its signature is the formula without it.
            return Err(refused(FilesError::BadSignature, false));
        }
        // An upload that says its size is refused before it is read when it would pass the
        // app's quota (multipart bodies are judged by what they carry).
        if let Some(len) = up.declared.filter(|_| !multipart) {
            let quota = ctx.app.files_quota_mb;
            if let Err(e) = self
                .quotas
                .fits(self.cluster, app, Stored::Files, quota, len)
                .await
            {
                let drained = may_drain(len) && drain(&mut body, DRAIN_BYTES, config.idle).await;
                return Err(refused(e.into(), drained));
            }
        }
        let who = Uploader {
            app,
            user,
            signature,
            quota: (self.quotas, ctx.app.files_quota_mb),
        };
        if multipart {
            let mut part = Box::pin(multipart_file(&up.content_type, body, config).await?);
            let stored = store(self.cluster, config, &mut part, &up.name, who).await;
            return past_limit(stored, &mut part, config).await;
        }
        let stored = store(self.cluster, config, &mut body, &up.name, who).await;
        past_limit(stored, &mut body, config).await
    }
}

/// An upload refused with `error`: the connection closes unless the body was read to its end.
fn refused(error: FilesError, drained: bool) -> Refused {
    Refused {
        error,
        close: !drained,
    }
}

/// What `store` answered; past the size limit, the rest of the body is read so the client sees
/// the answer (else the connection closes).
async fn past_limit<E>(
    stored: Result<FileRecord, FilesError>,
    body: &mut (impl futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin),
    config: &FilesConfig,
) -> Result<FileRecord, Refused> {
    match stored {
        Err(FilesError::TooLarge(_)) => {
            let drained = drain(body, DRAIN_BYTES, config.idle).await;
            Err(refused(FilesError::TooLarge(config.max_bytes), drained))
        }
        other => Ok(other?),
    }
}
