//! Stored files as the REST API sees them (spec 4.7, decisions/0020): the names an upload may
//! have (`UploadName`), the path and url a new file gets, the file a url or a delete path names
//! (`FileRef`), its content type, and uploads streamed from a raw or multipart body into the
//! cluster (`store`, `multipart_file`). Beside it: `access` (who may upload and delete what),
//! `download` (a file's answer: `links` for private apps, `ranges`, `serving`'s guard, the
//! `images` pipeline), `video` (snapshots of stored videos). The bytes and records are
//! `basalt_cluster::files`' business; the handlers, which parse and answer, are `api::files`.

pub mod access;
pub mod download;
pub mod images;
pub mod links;
pub mod ranges;
pub mod serving;
pub mod upload;
pub mod video;

use std::time::Duration;

use crate::auth::BodyDigests;
use crate::storage_quota::{StorageQuotas, Stored};
use basalt_cluster::files::record::{FileId, FileRecord, NewFile};
use basalt_cluster::names::AppId;
use basalt_cluster::{Cluster, Error as ClusterError};
use bytes::Bytes;
use futures::{Stream, StreamExt};

/// How stored files are named and bounded (`--files-cdn`, `--max-file-mb`), and what makes
/// video snapshots (`--ffmpeg`).
#[derive(Debug, Clone)]
pub struct FilesConfig {
    /// The storage name answered as `cdn` and the first part of every file's url path.
    pub cdn: String,
    /// Largest file, in bytes.
    pub max_bytes: u64,
    /// How long an upload may wait for the next piece of its body, and the time it has before
    /// `min_rate` applies.
    pub idle: Duration,
    /// Slowest average an upload may keep, in bytes per second, counted after `idle`: an
    /// upload has `idle` + its size / `min_rate` in all (`--upload-min-kib-per-sec`).
    pub min_rate: u64,
    /// The ffmpeg program video snapshots run (`--ffmpeg`).
    pub ffmpeg: String,
    /// The base url of files' urls when they are served from an origin of their own
    /// (`--files-public-url`): only requests to that host get active types (HTML, SVG, ...)
    /// inline; elsewhere they are attachments in a sandbox (`serving`).
    pub origin: Option<String>,
}

impl FilesConfig {
    /// The base of files' urls: their own origin, else the API's `public_url`.
    pub fn base<'a>(&'a self, public_url: &'a str) -> &'a str {
        self.origin.as_deref().unwrap_or(public_url)
    }
}

/// Why a file request failed; `api::error` gives each its code.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("the file name {0:?} has no extension.")]
    NoExtension(String),
    #[error("invalid file name {0:?}.")]
    BadName(String),
    #[error("the file is empty.")]
    Empty,
    #[error("the file is larger than {0} bytes.")]
    TooLarge(u64),
    #[error("no file {0:?}.")]
    NotFound(String),
    /// The body ended early, is not the multipart it says, or has no `file` part.
    #[error("{0}")]
    BadBody(String),
    /// No piece of the body arrived within the idle time.
    #[error("the upload stalled for {0} s.")]
    Stalled(u64),
    /// The body came slower than the slowest rate an upload may keep (`Pace`).
    #[error("the upload was slower than {0} KiB/s.")]
    TooSlow(u64),
    /// The upload's signature covers none of its body's renderings
    /// (`auth::BodyDigests`).
    #[error("the upload's signature does not match its body.")]
    BadSignature,
    /// The app deletes files with the master key only (`fileDelete: "master"`).
    #[error("this app's files are deleted with the master key only.")]
    DeleteNeedsMaster,
    /// The app deletes files with the uploader's session or the master key
    /// (`fileDelete: "uploader"`), and the request has no session.
    #[error(
        "this app's files are deleted by the user who uploaded them: a session token is needed."
    )]
    DeleteNeedsSession,
    /// The session of a delete could not be checked.
    #[error("{0}")]
    Session(String),
    /// A private file's url without a valid signature.
    #[error(transparent)]
    Private(#[from] links::LinkError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The file would pass the app's `filesQuotaMb`.
    #[error(transparent)]
    Quota(#[from] crate::storage_quota::QuotaError),
    /// A download's url names no stored file (or one of an app that is gone).
    #[error("no such file")]
    NoSuchUrl,
    /// A download's image operations, or what they met.
    #[error(transparent)]
    Image(#[from] crate::files::images::error::ImageError),
    #[error(transparent)]
    Apps(#[from] crate::apps::AppsError),
    /// The uploader's session could not be read.
    #[error(transparent)]
    Users(#[from] crate::users::UsersError),
    /// A download's answer could not be built.
    #[error("building a response: {0}")]
    Response(#[from] axum::http::Error),
}

impl FilesConfig {
    /// These limits with an app's own cap on file size (`maxFileMb`), which can only lower the
    /// node's.
    pub fn for_app(&self, max_file_mb: Option<u64>) -> FilesConfig {
        let mut config = self.clone();
        if let Some(mb) = max_file_mb {
            config.max_bytes = config.max_bytes.min(mb.saturating_mul(1 << 20));
        }
        config
    }
}

/// Longest file name, in bytes.
const MAX_NAME_BYTES: usize = 255;
/// Longest extension, in characters.
const MAX_EXT_CHARS: usize = 16;

/// A checked upload name: the name as sent and its extension (lowercased).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadName {
    pub filename: String,
    pub ext: String,
}

impl UploadName {
    /// The name of `POST /2/files/<name>`: no path separators or control characters, at most
    /// 255 bytes, and an extension of ASCII letters and digits (146 otherwise).
    pub fn parse(name: &str) -> Result<UploadName, FilesError> {
        let bad = || FilesError::BadName(basalt_cluster::error::clip(name));
        if name.is_empty()
            || name.len() > MAX_NAME_BYTES
            || name
                .chars()
                .any(|c| c.is_control() || c == '/' || c == '\\')
        {
            return Err(bad());
        }
        let ext = match name.rsplit_once('.') {
            Some((_, ext)) if !ext.is_empty() => ext,
            _ => return Err(FilesError::NoExtension(basalt_cluster::error::clip(name))),
        };
        if ext.chars().count() > MAX_EXT_CHARS || !ext.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(bad());
        }
        Ok(UploadName {
            filename: name.to_string(),
            ext: ext.to_ascii_lowercase(),
        })
    }

    /// The content type of a file with this name.
    pub fn content_type(&self) -> String {
        mime_guess::from_ext(&self.ext)
            .first_or_octet_stream()
            .essence_str()
            .to_string()
    }
}

/// The path under the cdn name of a new file: `YYYY/MM/DD/<id>.<ext>` (UTC date of `now_ms`).
pub fn new_path(id: &FileId, ext: &str, now_ms: i64) -> String {
    let day = chrono::DateTime::from_timestamp_millis(now_ms)
        .unwrap_or_default()
        .format("%Y/%m/%d");
    format!("{day}/{id}.{ext}")
}

/// A file's absolute url.
pub fn url_of(public_url: &str, cdn: &str, path: &str) -> String {
    format!("{}/{cdn}/{path}", public_url.trim_end_matches('/'))
}

/// The file a url, or the path of a delete request, names: its last four parts are
/// `YYYY/MM/DD/<id>.<ext>`, whatever comes before (a scheme and host, the cdn name, doubled
/// slashes, another storage name as the SDKs send).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    pub id: FileId,
    /// `YYYY/MM/DD/<id>.<ext>`.
    pub path: String,
}

impl FileRef {
    pub fn parse(url: &str) -> Option<FileRef> {
        let url = url.split(['?', '#']).next().unwrap_or_default();
        let parts: Vec<&str> = url.split('/').filter(|p| !p.is_empty()).collect();
        let [.., y, m, d, name] = parts.as_slice() else {
            return None;
        };
        let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
        if !(digits(y, 4) && digits(m, 2) && digits(d, 2)) {
            return None;
        }
        let (stem, ext) = name.split_once('.')?;
        if ext.is_empty() || ext.contains('.') {
            return None;
        }
        Some(FileRef {
            id: FileId::parse(stem)?,
            path: format!("{y}/{m}/{d}/{name}"),
        })
    }
}

/// Who uploads a file: its app, the user whose session the upload carried, and the signature
/// of its body still to check (encrypted mode, `auth::PendingSignature`).
pub struct Uploader<'a> {
    pub app: &'a AppId,
    pub user: Option<String>,
    pub signature: Option<BodyDigests>,
    /// The app's `filesQuotaMb` and this node's view of its usage (`storage_quota`).
    pub quota: (&'a StorageQuotas, Option<u64>),
}

/// Streams `body` into a new file named `name` of `who.app` (uploaded by `who.user`), within
/// the size and idle limits of `config`; answers its record once it is stored. A signature
/// over the body is checked once the body ended and before the file is recorded: a mismatch
/// keeps nothing. Past the size limit it stops reading: what is left of `body` is the caller's
/// to drain.
pub async fn store<E: std::fmt::Display>(
    cluster: &Cluster,
    config: &FilesConfig,
    body: &mut (impl Stream<Item = Result<Bytes, E>> + Unpin),
    name: &UploadName,
    who: Uploader<'_>,
) -> Result<FileRecord, FilesError> {
    let Uploader {
        app,
        user: uploader,
        mut signature,
        quota: (quotas, quota_mb),
    } = who;
    let started = std::time::Instant::now();
    let pace = Pace::new(config);
    let mut upload = cluster.files().begin_upload().await?;
    loop {
        let next = pace.next(body, upload.size()).await?;
        let Some(piece) = next else { break };
        let piece =
            piece.map_err(|e| FilesError::BadBody(format!("the body could not be read: {e}")))?;
        if upload.size() + piece.len() as u64 > config.max_bytes {
            return Err(FilesError::TooLarge(config.max_bytes));
        }
        if let Some(signature) = signature.as_mut() {
            signature.update(&piece);
        }
        upload.write(&piece).await?;
    }
    if upload.size() == 0 {
        return Err(FilesError::Empty);
    }
    // Dropped unfinished, the upload leaves nothing on its holders.
    if signature.is_some_and(|s| !s.verify()) {
        return Err(FilesError::BadSignature);
    }
    let adds = (upload.size(), std::time::Instant::now());
    let _admitted = quotas
        .admit(cluster, app, Stored::Files, quota_mb, adds)
        .await?;
    let now = basalt_cluster::now_ms();
    let path = new_path(upload.id(), &name.ext, now);
    let record = upload
        .finish(NewFile {
            app: app.to_string(),
            path,
            filename: name.filename.clone(),
            content_type: name.content_type(),
            uploader,
            created_ms: now,
            cdn: config.cdn.clone(),
        })
        .await?;
    metrics::histogram!("basalt_files_upload_seconds").record(started.elapsed().as_secs_f64());
    Ok(record)
}

/// The time an upload has: `idle` for each piece, and `idle` + size / `min_rate` in all, so that
/// a client trickling bytes (one every few seconds) cannot hold a connection and a file's
/// buffers for ever.
struct Pace {
    started: tokio::time::Instant,
    idle: Duration,
    min_rate: u64,
}

impl Pace {
    fn new(config: &FilesConfig) -> Pace {
        Pace {
            started: tokio::time::Instant::now(),
            idle: config.idle,
            min_rate: config.min_rate.max(1),
        }
    }

    /// When an upload that has received `received` bytes runs out of time.
    fn deadline(&self, received: u64) -> tokio::time::Instant {
        let earned = Duration::from_secs_f64(received as f64 / self.min_rate as f64);
        self.started + self.idle + earned.min(Duration::from_secs(86_400))
    }

    fn too_slow(&self) -> FilesError {
        FilesError::TooSlow(self.min_rate.div_ceil(1024))
    }

    /// The next piece of `body`, which has carried `received` bytes so far, within its time.
    async fn next<S, E>(
        &self,
        body: &mut S,
        received: u64,
    ) -> Result<Option<Result<Bytes, E>>, FilesError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
    {
        let deadline = self.deadline(received);
        let idle = tokio::time::Instant::now() + self.idle;
        if tokio::time::Instant::now() >= deadline {
            return Err(self.too_slow());
        }
        match tokio::time::timeout_at(deadline.min(idle), body.next()).await {
            Ok(next) => Ok(next),
            Err(_) if deadline < idle => Err(self.too_slow()),
            Err(_) => Err(FilesError::Stalled(self.idle.as_secs())),
        }
    }
}

/// Bytes a multipart body may carry beside its `file` part (other fields, headers, boundaries).
const MULTIPART_SLACK: u64 = 1 << 20;

/// The `file` part of a multipart/form-data body whose Content-Type is `content_type`, as a
/// stream of its bytes (the parts before it are skipped). The body may hold a file of
/// `config.max_bytes` and little else, and must keep arriving (`config.idle`).
pub async fn multipart_file<S, E>(
    content_type: &str,
    body: S,
    config: &FilesConfig,
) -> Result<impl Stream<Item = Result<Bytes, multer::Error>>, FilesError>
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let boundary = multer::parse_boundary(content_type)
        .map_err(|e| FilesError::BadBody(format!("bad multipart Content-Type: {e}")))?;
    let limits = multer::SizeLimit::new()
        .whole_stream(config.max_bytes + 2 * MULTIPART_SLACK)
        .per_field(MULTIPART_SLACK)
        .for_field("file", config.max_bytes + MULTIPART_SLACK);
    // The whole body keeps the pace too, with twice the grace: the file part's own `Pace` (in
    // `store`) is what ends a slow upload, this one a slow preamble.
    let mut whole = Pace::new(config);
    whole.idle = config.idle.saturating_mul(2);
    let body = paced(body, whole);
    let mut parts = multer::Multipart::with_constraints(
        body,
        boundary,
        multer::Constraints::new().size_limit(limits),
    );
    loop {
        let next = tokio::time::timeout(config.idle, parts.next_field())
            .await
            .map_err(|_| FilesError::Stalled(config.idle.as_secs()))?;
        match next {
            Ok(Some(field)) if field.name() == Some("file") => return Ok(field),
            Ok(Some(_)) => continue,
            Ok(None) => {
                return Err(FilesError::BadBody(
                    "the multipart body has no part named \"file\".".into(),
                ))
            }
            Err(e) => return Err(FilesError::BadBody(format!("bad multipart body: {e}"))),
        }
    }
}

/// `body`, ending with an error when it falls behind `pace`.
fn paced<S, E>(
    body: S,
    pace: Pace,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: std::fmt::Display + Send + 'static,
{
    futures::stream::unfold(Some((body, pace, 0u64)), |state| async move {
        let (mut body, pace, received) = state?;
        match pace.next(&mut body, received).await {
            Ok(Some(Ok(piece))) => {
                let received = received.saturating_add(piece.len() as u64);
                Some((Ok(piece), Some((body, pace, received))))
            }
            Ok(None) => None,
            Ok(Some(Err(e))) => Some((Err(std::io::Error::other(e.to_string())), None)),
            Err(e) => Some((
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    e.to_string(),
                )),
                None,
            )),
        }
    })
}

/// Reads and drops what is left of `body`, at most `max` bytes and `idle` between pieces, so
/// that a client refused while it sends reads its answer instead of a reset; false when more
/// was left.
pub async fn drain<E>(
    body: &mut (impl Stream<Item = Result<Bytes, E>> + Unpin),
    max: usize,
    idle: Duration,
) -> bool {
    let mut seen = 0usize;
    loop {
        match tokio::time::timeout(idle, body.next()).await {
            Ok(Some(Ok(piece))) => {
                seen = seen.saturating_add(piece.len());
                if seen > max {
                    return false;
                }
            }
            Ok(None) => return true,
            Ok(Some(Err(_))) | Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_names() {
        let n = UploadName::parse("Photo 1.JPG").unwrap();
        assert_eq!(
            (n.filename.as_str(), n.ext.as_str()),
            ("Photo 1.JPG", "jpg")
        );
        assert_eq!(n.content_type(), "image/jpeg");
        assert_eq!(
            UploadName::parse("a.unknownext").unwrap().content_type(),
            "application/octet-stream"
        );
        assert_eq!(UploadName::parse("报告.pdf").unwrap().ext, "pdf");
        for name in ["noext", "trailing.", ""] {
            assert!(
                matches!(
                    UploadName::parse(name),
                    Err(FilesError::NoExtension(_) | FilesError::BadName(_))
                ),
                "{name}"
            );
        }
        assert!(matches!(
            UploadName::parse("noext"),
            Err(FilesError::NoExtension(_))
        ));
        for name in [
            "a/b.txt",
            "a\\b.txt",
            "a\u{0}.txt",
            "a.t-t",
            &"x".repeat(300),
        ] {
            assert!(
                matches!(UploadName::parse(name), Err(FilesError::BadName(_))),
                "{name}"
            );
        }
    }

    #[test]
    fn file_refs_from_urls_and_delete_paths() {
        let id = FileId::random();
        let path = new_path(&id, "png", 1_700_000_000_000);
        assert_eq!(path, format!("2023/11/14/{id}.png"));
        let url = url_of("http://127.0.0.1:8080/", "basalt", &path);
        assert_eq!(url, format!("http://127.0.0.1:8080/basalt/{path}"));
        let want = Some(FileRef {
            id: id.clone(),
            path: path.clone(),
        });
        for form in [
            url.clone(),
            format!("{url}?imageView2/1/w/10"),
            format!("basalt/{path}"),
            format!("upyun/basalt/{path}"),
            format!("upyun//basalt/{path}"),
            format!("/basalt/{path}"),
        ] {
            assert_eq!(FileRef::parse(&form), want, "{form}");
        }
        for bad in [
            format!("basalt/2023/11/{id}.png"),
            format!("basalt/2023/1/14/{id}.png"),
            format!("basalt/2023/11/14/{id}"),
            "basalt/2023/11/14/../../x.png".to_string(),
            "basalt/2023/11/14/ABC.png".to_string(),
        ] {
            assert_eq!(FileRef::parse(&bad), None, "{bad}");
        }
    }
}
