//! The node's disk: how much room the filesystems of its data have (the store's and the files'
//! directories, the fuller counting), sampled every `EVERY`, and the ballast file kept there.
//!
//! Levels (`DiskLevel`): `Ok`; `Low` under `DiskLimits::low_percent` free — an alarm (metrics,
//! `/health`, the node's member record, `basalt admin alarms`) and no new replica is placed
//! here (`placement`); `Critical` under `critical_percent` free or `critical_bytes` — writes
//! that add objects or file bytes to a group this node holds are refused (`Error::DiskFull`,
//! checked in `Replicas::local_propose` and by `files`), while deletes, records (sessions,
//! throttles), admin requests and Raft's own traffic go on, so space can be freed and reads
//! served.
//!
//! The ballast (`DiskLimits::ballast_bytes`, default 1 GiB or 1 % of the disk, whichever is
//! less) is a file of reserved blocks beside the store, made at start when the disk has room
//! for it above the low mark. Removing it (`basalt admin release-ballast`, or by itself at a
//! start that finds the disk critical) gives back room to start, compact and delete.
//! Neighbours: `cluster::bootstrap` makes the watch and publishes its level in the member
//! record; `replicas` refuses growth on it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How often the disk is sampled and its level published (a disk can fill at hundreds of MiB a
/// second: the critical mark must hold what arrives meanwhile).
pub const EVERY: Duration = Duration::from_millis(250);
/// How old this node's last sample may be when a write asks whether there is room.
const FRESH: Duration = Duration::from_millis(100);
/// The ballast's file name, in the store's directory.
pub const BALLAST_FILE: &str = "BASALT-BALLAST";
/// The most a ballast takes by default.
const DEFAULT_BALLAST_MAX: u64 = 1 << 30;

/// How full a node's disk is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DiskLevel {
    #[default]
    Ok,
    Low,
    Critical,
}

impl DiskLevel {
    pub fn name(self) -> &'static str {
        match self {
            DiskLevel::Ok => "ok",
            DiskLevel::Low => "low",
            DiskLevel::Critical => "critical",
        }
    }
}

/// The marks (`--disk-low`, `--disk-critical`, `--disk-critical-bytes`, `--ballast-bytes`).
#[derive(Debug, Clone, Copy)]
pub struct DiskLimits {
    /// Under this share of the disk free (percent), the disk is low.
    pub low_percent: f64,
    /// Under this share free (percent), or under `critical_bytes`, it is critical.
    pub critical_percent: f64,
    pub critical_bytes: u64,
    /// The ballast's size; `None`: 1 GiB or 1 % of the disk, whichever is less; `Some(0)`: none.
    pub ballast_bytes: Option<u64>,
}

impl Default for DiskLimits {
    fn default() -> Self {
        DiskLimits {
            low_percent: 10.0,
            critical_percent: 2.0,
            critical_bytes: 256 << 20,
            ballast_bytes: None,
        }
    }
}

impl DiskLimits {
    /// The level of a disk of `total` bytes with `free` available.
    pub fn level(&self, free: u64, total: u64) -> DiskLevel {
        let percent = match total {
            0 => 100.0,
            t => free as f64 * 100.0 / t as f64,
        };
        if percent < self.critical_percent || free < self.critical_bytes {
            DiskLevel::Critical
        } else if percent < self.low_percent {
            DiskLevel::Low
        } else {
            DiskLevel::Ok
        }
    }

    fn ballast_for(&self, total: u64) -> u64 {
        self.ballast_bytes
            .unwrap_or_else(|| (total / 100).min(DEFAULT_BALLAST_MAX))
    }
}

/// A disk's room at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskStatus {
    pub level: DiskLevel,
    pub free_bytes: u64,
    pub total_bytes: u64,
    /// Bytes the ballast holds now (0 once released).
    pub ballast_bytes: u64,
}

/// The node's disk, sampled.
pub struct DiskWatch {
    /// The directories whose filesystems hold the node's data.
    paths: Vec<PathBuf>,
    ballast: PathBuf,
    limits: DiskLimits,
    last: Mutex<DiskStatus>,
    sampled: Mutex<std::time::Instant>,
    /// The ballast was given back since this process started: it is made again only by the
    /// next start (a disk that was just full must not fill again with it).
    released: std::sync::atomic::AtomicBool,
}

/// Room of the filesystem holding `path`: (available to this process, total), in bytes.
fn room(path: &Path) -> std::io::Result<(u64, u64)> {
    let s = rustix::fs::statvfs(path)?;
    Ok((
        s.f_bavail.saturating_mul(s.f_frsize),
        s.f_blocks.saturating_mul(s.f_frsize),
    ))
}

impl DiskWatch {
    /// Watches the filesystems of `paths` (made when missing); the ballast lives in `store`.
    pub fn new(store: &Path, paths: Vec<PathBuf>, limits: DiskLimits) -> std::io::Result<Self> {
        for p in &paths {
            std::fs::create_dir_all(p)?;
        }
        let watch = DiskWatch {
            ballast: store.join(BALLAST_FILE),
            paths,
            limits,
            last: Mutex::new(DiskStatus::default()),
            sampled: Mutex::new(std::time::Instant::now()),
            released: std::sync::atomic::AtomicBool::new(false),
        };
        watch.sample();
        Ok(watch)
    }

    /// The room of the fullest filesystem now (kept as the last sample, and in the metrics).
    pub fn sample(&self) -> DiskStatus {
        let mut worst: Option<(u64, u64)> = None;
        for p in &self.paths {
            match room(p) {
                Ok((free, total)) => {
                    let fuller = worst.is_none_or(|(f, t)| {
                        self.limits.level(free, total) > self.limits.level(f, t) || free < f
                    });
                    if fuller {
                        worst = Some((free, total));
                    }
                }
                Err(e) => tracing::warn!(path = %p.display(), "cannot read the disk's room: {e}"),
            }
        }
        if let Ok(mut at) = self.sampled.lock() {
            *at = std::time::Instant::now();
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((free, total)) = worst {
            *last = DiskStatus {
                level: self.limits.level(free, total),
                free_bytes: free,
                total_bytes: total,
                ballast_bytes: std::fs::metadata(&self.ballast).map_or(0, |m| m.len()),
            };
        }
        metrics::gauge!("basalt_disk_free_bytes").set(last.free_bytes as f64);
        metrics::gauge!("basalt_disk_total_bytes").set(last.total_bytes as f64);
        metrics::gauge!("basalt_disk_ballast_bytes").set(last.ballast_bytes as f64);
        metrics::gauge!("basalt_disk_level").set(match last.level {
            DiskLevel::Ok => 0.0,
            DiskLevel::Low => 1.0,
            DiskLevel::Critical => 2.0,
        });
        *last
    }

    /// The last sample.
    pub fn status(&self) -> DiskStatus {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A sample at most `FRESH` old (taken now when the last one is older): what a write that
    /// adds data is checked against.
    pub fn fresh_status(&self) -> DiskStatus {
        let stale = self
            .sampled
            .lock()
            .map(|at| at.elapsed() >= FRESH)
            .unwrap_or(true);
        match stale {
            true => self.sample(),
            false => self.status(),
        }
    }

    /// Makes the ballast when it is missing, was not released since this process started,
    /// and the disk has room for it with the level staying `Ok`. Blocks are reserved
    /// (`fallocate`), or written where the filesystem cannot.
    pub fn ensure_ballast(&self) -> std::io::Result<()> {
        let now = self.sample();
        let size = self.limits.ballast_for(now.total_bytes);
        let released = self.released.load(std::sync::atomic::Ordering::SeqCst);
        if size == 0 || now.ballast_bytes > 0 || released {
            return Ok(());
        }
        let after = now.free_bytes.saturating_sub(size);
        if self.limits.level(after, now.total_bytes) != DiskLevel::Ok {
            tracing::warn!(
                size,
                free = now.free_bytes,
                "no room for the disk ballast: none is kept"
            );
            return Ok(());
        }
        let file = std::fs::File::create(&self.ballast)?;
        let made = match rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, size)
        {
            Ok(()) => Ok(()),
            Err(_) => write_zeros(&file, size),
        };
        if let Err(e) = made.and_then(|()| file.sync_all()) {
            drop(file);
            let _ = std::fs::remove_file(&self.ballast);
            return Err(e);
        }
        tracing::info!(size, path = %self.ballast.display(), "disk ballast made");
        self.sample();
        Ok(())
    }

    /// Removes the ballast; the bytes it held.
    pub fn release_ballast(&self) -> std::io::Result<u64> {
        let held = match std::fs::metadata(&self.ballast) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        std::fs::remove_file(&self.ballast)?;
        self.released
            .store(true, std::sync::atomic::Ordering::SeqCst);
        tracing::warn!(
            held,
            "disk ballast released: free space, then restart to make it again"
        );
        self.sample();
        Ok(held)
    }
}

fn write_zeros(file: &std::fs::File, size: u64) -> std::io::Result<()> {
    use std::io::Write;
    let chunk = vec![0u8; 1 << 20];
    let mut out = std::io::BufWriter::new(file);
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        out.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_marks() {
        let l = DiskLimits {
            critical_bytes: 50,
            ..DiskLimits::default()
        };
        assert_eq!(l.level(500, 1000), DiskLevel::Ok);
        assert_eq!(l.level(99, 1000), DiskLevel::Low);
        assert_eq!(l.level(19, 1000), DiskLevel::Critical);
        assert_eq!(
            l.level(49, 100_000_000),
            DiskLevel::Critical,
            "the byte floor"
        );
        assert_eq!(l.ballast_for(10 << 30), (10 << 30) / 100);
        assert_eq!(l.ballast_for(1 << 40), 1 << 30);
    }

    #[test]
    fn the_ballast_is_made_once_and_released() {
        let dir = tempfile::tempdir().unwrap();
        let limits = DiskLimits {
            ballast_bytes: Some(1 << 20),
            low_percent: 0.0,
            critical_percent: 0.0,
            ..DiskLimits::default()
        };
        let w = DiskWatch::new(dir.path(), vec![dir.path().to_path_buf()], limits).unwrap();
        w.ensure_ballast().unwrap();
        assert_eq!(w.status().ballast_bytes, 1 << 20);
        w.ensure_ballast().unwrap();
        assert_eq!(w.release_ballast().unwrap(), 1 << 20);
        assert_eq!(w.status().ballast_bytes, 0);
        assert_eq!(w.release_ballast().unwrap(), 0);
        // Released, it is made again only by the next start.
        w.ensure_ballast().unwrap();
        assert_eq!(w.status().ballast_bytes, 0);
        let next = DiskWatch::new(dir.path(), vec![dir.path().to_path_buf()], limits).unwrap();
        next.ensure_ballast().unwrap();
        assert_eq!(next.status().ballast_bytes, 1 << 20);
    }
}
