//! `BytePace`: spreads bulk work over time, at most a rate of bytes per second over all of it
//! together (0: no limit), so that moving data leaves the CPUs, the disk and the network to the
//! requests. Users: `router` takes from one before each snapshot chunk it sends (the
//! rebalancer's snapshot MB/s, which placement sets each tick), and the `splits` job before
//! each page a split or merge copies or drops (`moveKbPerS`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct BytePace {
    /// Bytes per second (0: no limit).
    rate: AtomicU64,
    /// When the bytes taken so far have all been sent at the rate.
    free_at: Mutex<Option<Instant>>,
}

impl BytePace {
    /// Sets the rate; a new one forgets what was taken at the old (none waits for it).
    pub fn set_rate(&self, bytes_per_second: u64) {
        if self.rate.swap(bytes_per_second, Ordering::Relaxed) != bytes_per_second {
            if let Ok(mut free_at) = self.free_at.lock() {
                *free_at = None;
            }
        }
    }

    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// How long until the bytes taken so far are all spent at the rate (zero: free now).
    pub fn free_in(&self) -> Duration {
        if self.rate() == 0 {
            return Duration::ZERO;
        }
        let Ok(free_at) = self.free_at.lock() else {
            return Duration::ZERO;
        };
        free_at.map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        })
    }

    /// Waits until `bytes` more may be sent.
    pub async fn take(&self, bytes: u64) {
        if let Some(start) = self.reserve(bytes) {
            tokio::time::sleep_until(start.into()).await;
        }
    }

    /// Counts `bytes` sent already, without waiting: what is taken next waits for them too.
    pub fn charge(&self, bytes: u64) {
        self.reserve(bytes);
    }

    /// Counts `bytes` in: when they may start (none without a limit).
    fn reserve(&self, bytes: u64) -> Option<Instant> {
        let rate = self.rate();
        if rate == 0 {
            return None;
        }
        let mut free_at = self.free_at.lock().ok()?;
        let now = Instant::now();
        let start = free_at.map_or(now, |t| t.max(now));
        *free_at = Some(start + Duration::from_secs_f64(bytes as f64 / rate as f64));
        Some(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn chunks_go_out_at_the_rate() {
        let pace = BytePace::default();
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
        // The last chunk is still being spent; bytes charged without waiting count too.
        assert!(pace.free_in() > Duration::ZERO);
        pace.charge(40 << 20);
        assert!(pace.free_in() > Duration::from_millis(900));
        // No limit: nothing taken before waits.
        pace.set_rate(0);
        assert_eq!(pace.free_in(), Duration::ZERO);
        pace.take(1 << 30).await;
        // A new rate forgets what was taken at the old one.
        pace.set_rate(1 << 20);
        pace.charge(100 << 20);
        assert!(pace.free_in() > Duration::from_secs(90));
        pace.set_rate(2 << 20);
        assert_eq!(pace.free_in(), Duration::ZERO);
    }
}
