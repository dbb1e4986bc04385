//! Video snapshots (`POST /2/cdnVedioSnapshot`, issue 15): the frame of a stored video at a
//! point in time, extracted by ffmpeg (`--ffmpeg`, run as a separate process on a temporary
//! copy of the video) and stored as a new file of the same app. Bounded: the video's stream is
//! probed first (`ffprobe` beside `--ffmpeg`) and frames larger than an image may be
//! (`images::render::MAX_SOURCE_PIXELS`) are refused before anything is decoded; ffmpeg decodes
//! with `-max_pixels` and 2 threads, under `prlimit` (address space `FFMPEG_MEMORY`, CPU
//! `FFMPEG_CPU_SECS`) where the system has it, one per core at a time, for at most
//! `FFMPEG_TIMEOUT`; a frame file past the node's file size is not read. Neighbours: `files` names and
//! stores the frame; the video's bytes come from the cluster's `files`; the handler is
//! `api::files::video_snapshot`.

use std::path::Path;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use basalt_cluster::files::record::FileRecord;
use basalt_cluster::Cluster;
use bytes::Bytes;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

use crate::files::{store, FileRef, FilesConfig, FilesError, UploadName, Uploader};

/// The containers ffmpeg may read (demuxer names): no playlists, manifests or concat lists.
const VIDEO_FORMATS: &str = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,flv,mpegts,mpeg,ogg";
/// Longest ffmpeg may take for one frame.
const FFMPEG_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a request waits for one of the node's ffmpeg slots.
const SLOT_WAIT: Duration = Duration::from_secs(30);
/// Address space one ffmpeg (or ffprobe) process may take.
const FFMPEG_MEMORY: u64 = 1536 << 20;
/// CPU time one ffmpeg process may take.
const FFMPEG_CPU_SECS: u64 = 60;
/// Largest frame, in pixels: an image's limit.
const MAX_FRAME_PIXELS: u64 = crate::files::images::render::MAX_SOURCE_PIXELS;

/// Why a snapshot was refused or failed; `api::error` gives each its code.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A member missing or not a string, or a point not `HH:MM:SS` (107).
    #[error("{0}")]
    BadRequest(String),
    /// `save_as` does not name a `.jpg`, `.jpeg` or `.png` file (146).
    #[error("save_as must name a .jpg, .jpeg or .png file, not {0:?}.")]
    BadName(String),
    /// The video has no frame at the point: past its end, or not a video (155).
    #[error(
        "the video has no frame at {0}: the point is past its end, or the file is not a video."
    )]
    NoFrame(String),
    /// ffmpeg cannot be run on this node (156).
    #[error("video snapshots need ffmpeg, which this node cannot run: {0}.")]
    NoFfmpeg(String),
    /// The video's frames are larger than a snapshot may be (160).
    #[error("{0}")]
    TooLarge(String),
    /// ffmpeg took longer than `FFMPEG_TIMEOUT`, or every slot stayed busy (503).
    #[error("{0}")]
    Busy(String),
    #[error("a temporary file for the snapshot: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Files(#[from] FilesError),
}

/// A snapshot's request: `source` (a stored video's url), `save_as` (the frame's file name, or
/// a url or path ending in it), `point` (`HH:MM:SS`, optionally with a fraction).
pub struct Request<'a> {
    pub source: &'a str,
    pub save_as: &'a str,
    pub point: &'a str,
}

/// The stored frame and its type.
pub struct Snapshot {
    pub record: FileRecord,
    pub content_type: String,
}

/// ffmpeg processes this node runs at once: one per core.
fn slots() -> &'static Semaphore {
    static SLOTS: OnceLock<Semaphore> = OnceLock::new();
    SLOTS
        .get_or_init(|| Semaphore::new(std::thread::available_parallelism().map_or(1, |n| n.get())))
}

/// A point `HH:MM:SS` or `HH:MM:SS.fff` as seconds for ffmpeg (`"75.250"`).
pub fn parse_point(point: &str) -> Result<String, SnapshotError> {
    let bad = || SnapshotError::BadRequest(format!("point must be HH:MM:SS, not {point:?}."));
    let (clock, fraction) = point.split_once('.').unwrap_or((point, ""));
    let parts: Vec<&str> = clock.split(':').collect();
    let [h, m, s] = parts.as_slice() else {
        return Err(bad());
    };
    let field = |v: &str, max: u64| {
        (!v.is_empty() && v.len() <= 2 && v.bytes().all(|b| b.is_ascii_digit()))
            .then(|| v.parse::<u64>().ok())
            .flatten()
            .filter(|n| *n <= max)
    };
    let (Some(h), Some(m), Some(s)) = (field(h, 99), field(m, 59), field(s, 59)) else {
        return Err(bad());
    };
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let millis = format!("{fraction:0<3}");
    Ok(format!("{}.{millis}", h * 3600 + m * 60 + s))
}

/// The frame's file name: the last part of `save_as` (a name, a path or a url), with a JPEG or
/// PNG extension.
pub fn frame_name(save_as: &str) -> Result<UploadName, SnapshotError> {
    let last = save_as
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .rsplit('/')
        .next()
        .unwrap_or_default();
    let name = UploadName::parse(last).map_err(|_| SnapshotError::BadName(save_as.into()))?;
    if !matches!(name.ext.as_str(), "jpg" | "jpeg" | "png") {
        return Err(SnapshotError::BadName(save_as.into()));
    }
    Ok(name)
}

/// Extracts the frame `req` asks for from a video of `who.app` and stores it as a new file.
pub async fn snapshot(
    cluster: &Cluster,
    config: &FilesConfig,
    req: Request<'_>,
    who: Uploader<'_>,
) -> Result<Snapshot, SnapshotError> {
    let started = std::time::Instant::now();
    let seconds = parse_point(req.point)?;
    let name = frame_name(req.save_as)?;
    let not_found = || SnapshotError::Files(FilesError::NotFound(req.source.to_string()));
    let file = FileRef::parse(req.source).ok_or_else(not_found)?;
    let record = cluster
        .files()
        .record(&file.id)
        .await
        .map_err(FilesError::from)?
        .filter(|r| r.path == file.path && r.app == who.app.as_str())
        .ok_or_else(not_found)?;
    let _slot = tokio::time::timeout(SLOT_WAIT, slots().acquire())
        .await
        .map_err(|_| SnapshotError::Busy("the node is busy with other snapshots.".into()))?
        .map_err(|e| SnapshotError::Busy(e.to_string()))?;
    let dir = tempfile::Builder::new()
        .prefix("basalt-snapshot-")
        .tempdir()?;
    let video = dir.path().join("video");
    copy_out(cluster, &file, &record, &video).await?;
    probe(&config.ffmpeg, &video).await?;
    let frame_path = dir.path().join(format!("frame.{}", name.ext));
    let frame = extract(
        &config.ffmpeg,
        &video,
        &seconds,
        &frame_path,
        req.point,
        config.max_bytes,
    )
    .await?;
    let mut body = futures::stream::iter([Ok::<Bytes, std::io::Error>(frame)]);
    let stored = store(cluster, config, &mut body, &name, who).await?;
    metrics::histogram!("basalt_video_snapshot_seconds").record(started.elapsed().as_secs_f64());
    Ok(Snapshot {
        content_type: name.content_type(),
        record: stored,
    })
}

/// Writes the file's bytes to `to`.
async fn copy_out(
    cluster: &Cluster,
    file: &FileRef,
    record: &FileRecord,
    to: &Path,
) -> Result<(), SnapshotError> {
    let mut out = tokio::fs::File::create(to).await?;
    let mut chunks = cluster
        .files()
        .read(&file.id, record, 0, record.size)
        .await
        .map_err(FilesError::from)?;
    while let Some(chunk) = chunks.next().await {
        out.write_all(&chunk.map_err(FilesError::from)?).await?;
    }
    out.flush().await?;
    Ok(())
}

/// Where `program` is: a path as given, else the first match in `PATH`; `None` when there is
/// no executable file there (so that `prlimit` is never asked to run what does not exist).
fn find_program(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = Path::new(program);
        return runnable(p).then(|| p.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| runnable(p))
}

/// `program` run under the process limits (`prlimit`, when the system has it).
fn limited(program: &str) -> tokio::process::Command {
    static PRLIMIT: OnceLock<bool> = OnceLock::new();
    let has_prlimit = *PRLIMIT.get_or_init(|| {
        let found = std::process::Command::new("prlimit")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            tracing::warn!("prlimit not found: ffmpeg runs without a memory and CPU limit");
        }
        found
    });
    if !has_prlimit {
        return tokio::process::Command::new(program);
    }
    let mut c = tokio::process::Command::new("prlimit");
    c.arg(format!("--as={FFMPEG_MEMORY}"))
        .arg(format!("--cpu={FFMPEG_CPU_SECS}"))
        .arg("--")
        .arg(program);
    c
}

/// The ffprobe beside `ffmpeg` (same directory, or looked up in `PATH` like it).
fn ffprobe_of(ffmpeg: &str) -> String {
    match Path::new(ffmpeg)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        Some(dir) => dir.join("ffprobe").to_string_lossy().into_owned(),
        None => "ffprobe".to_string(),
    }
}

/// The copied video's input argument: only that file, only as a video container (a playlist or
/// manifest disguised as a video must not make ffmpeg fetch urls or read other files).
fn input_args(video: &Path) -> Vec<std::ffi::OsString> {
    let mut input = std::ffi::OsString::from("file:");
    input.push(video);
    vec![
        "-protocol_whitelist".into(),
        "file".into(),
        "-format_whitelist".into(),
        VIDEO_FORMATS.into(),
        "-i".into(),
        input,
    ]
}

/// Refuses a video whose first video stream has frames larger than `MAX_FRAME_PIXELS`, before
/// anything is decoded. Without ffprobe (or when it cannot tell), ffmpeg's own `-max_pixels`
/// still refuses such a frame.
async fn probe(ffmpeg: &str, video: &Path) -> Result<(), SnapshotError> {
    let Some(ffprobe) = find_program(&ffprobe_of(ffmpeg)) else {
        return Ok(());
    };
    let mut command = limited(&ffprobe.to_string_lossy());
    command
        .args(["-hide_banner", "-loglevel", "error"])
        .args([
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=width,height",
        ])
        .args(["-of", "json"])
        .args(input_args(video))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let Ok(child) = command.spawn() else {
        return Ok(());
    };
    let Ok(Ok(output)) = tokio::time::timeout(FFMPEG_TIMEOUT, child.wait_with_output()).await
    else {
        return Ok(());
    };
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let stream = &shown["streams"][0];
    let (Some(w), Some(h)) = (stream["width"].as_u64(), stream["height"].as_u64()) else {
        return Ok(());
    };
    if w.saturating_mul(h) > MAX_FRAME_PIXELS {
        return Err(SnapshotError::TooLarge(format!(
            "the video's frames are {w}×{h}: a snapshot may have at most {MAX_FRAME_PIXELS} pixels."
        )));
    }
    Ok(())
}

/// Runs ffmpeg for the frame at `seconds` of `video` into `frame` and answers its bytes (at
/// most `max_bytes`).
async fn extract(
    ffmpeg: &str,
    video: &Path,
    seconds: &str,
    frame: &Path,
    point: &str,
    max_bytes: u64,
) -> Result<Bytes, SnapshotError> {
    let program = find_program(ffmpeg)
        .ok_or_else(|| SnapshotError::NoFfmpeg(format!("{ffmpeg}: not found")))?;
    let mut command = limited(&program.to_string_lossy());
    command
        .args(["-hide_banner", "-loglevel", "error", "-nostdin"])
        .args([
            "-threads",
            "2",
            "-max_pixels",
            &MAX_FRAME_PIXELS.to_string(),
        ])
        .args(["-ss", seconds])
        .args(input_args(video))
        .args(["-frames:v", "1", "-q:v", "2", "-update", "1", "-y"])
        .arg(frame)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command
        .spawn()
        .map_err(|e| SnapshotError::NoFfmpeg(format!("{ffmpeg}: {e}")))?;
    let output = tokio::time::timeout(FFMPEG_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| {
            SnapshotError::Busy(format!(
                "ffmpeg took longer than {} s for the frame.",
                FFMPEG_TIMEOUT.as_secs()
            ))
        })??;
    let size = tokio::fs::metadata(frame)
        .await
        .map(|m| m.len())
        .unwrap_or(0);
    if size > max_bytes {
        return Err(SnapshotError::TooLarge(format!(
            "the frame is larger than {max_bytes} bytes."
        )));
    }
    let bytes = match tokio::fs::read(frame).await {
        Ok(b) if output.status.success() && !b.is_empty() => b,
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            tracing::info!(status = %output.status, stderr = %stderr.trim(), point, "no frame");
            return Err(SnapshotError::NoFrame(point.to_string()));
        }
    };
    Ok(bytes.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_clock_times() {
        for (point, seconds) in [
            ("00:00:00", "0.000"),
            ("00:00:05", "5.000"),
            ("01:02:03", "3723.000"),
            ("00:00:01.5", "1.500"),
            ("00:00:01.250", "1.250"),
        ] {
            assert_eq!(parse_point(point).ok().as_deref(), Some(seconds), "{point}");
        }
        for point in [
            "",
            "5",
            "00:05",
            "00:60:00",
            "00:00:61",
            "0:0:x",
            "00:00:01.2345",
            "-1:00:00",
            "00:00:05 ",
        ] {
            assert!(
                matches!(parse_point(point), Err(SnapshotError::BadRequest(_))),
                "{point}"
            );
        }
    }

    #[test]
    fn frames_are_named_after_the_last_part_of_save_as() {
        let name = |s: &str| frame_name(s).map(|n| n.filename);
        assert_eq!(name("cover.jpg").ok().as_deref(), Some("cover.jpg"));
        assert_eq!(
            name("https://cdn.example/a/b/f4ca.png?x=1").ok().as_deref(),
            Some("f4ca.png")
        );
        assert_eq!(name("/snap/c.JPEG").ok().as_deref(), Some("c.JPEG"));
        for bad in ["cover", "cover.gif", "https://x/", "dir/"] {
            assert!(
                matches!(frame_name(bad), Err(SnapshotError::BadName(_))),
                "{bad}"
            );
        }
    }
}
