//! `SnapshotPace`: spreads the snapshots this node sends to its peers over time, at most a
//! rate of bytes per second over all of them together (the rebalancer's snapshot MB/s, which
//! placement sets each tick; 0: no limit), so that moving replicas leaves the disk and the
//! network to the requests. Neighbour: `router` takes from it before each chunk it sends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct SnapshotPace {
    /// Bytes per second (0: no limit).
    rate: AtomicU64,
    /// When the bytes taken so far have all been sent at the rate.
    free_at: Mutex<Option<Instant>>,
}

impl SnapshotPace {
    pub fn set_rate(&self, bytes_per_second: u64) {
        self.rate.store(bytes_per_second, Ordering::Relaxed);
    }

    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Waits until `bytes` more may be sent.
    pub async fn take(&self, bytes: u64) {
        let rate = self.rate();
        if rate == 0 {
            return;
        }
        let start = {
            let Ok(mut free_at) = self.free_at.lock() else {
                return;
            };
            let now = Instant::now();
            let start = free_at.map_or(now, |t| t.max(now));
            *free_at = Some(start + Duration::from_secs_f64(bytes as f64 / rate as f64));
            start
        };
        tokio::time::sleep_until(start.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn chunks_go_out_at_the_rate() {
        let pace = SnapshotPace::default();
        // No limit: nothing waits.
        let started = Instant::now();
        pace.take(1 << 30).await;
        assert!(started.elapsed() < Duration::from_millis(100));
        pace.set_rate(40 << 20);
        let started = Instant::now();
        for _ in 0..9 {
            pace.take(1 << 20).await;
        }
        // The first chunk goes at once, each next one 25 ms later.
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(195), "{took:?}");
    }
}
