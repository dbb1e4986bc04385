//! Per-app request rates (`requestsPerSecond`, set through app management; unlimited when
//! absent): a token bucket per app in each node's memory, refilled at the app's rate divided
//! among the cluster's active members (each node takes its part of the traffic a load balancer
//! spreads), holding at most one second of it. A request past it answers 429 with
//! `Retry-After` (10077). Requests of a `/1/batch` count once; realtime subscriptions, file
//! downloads and the console do not count. Neighbours: `api::context` takes a request's token
//! once the app is known.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// The node's buckets, by app.
#[derive(Default)]
pub struct AppRates {
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl AppRates {
    /// Takes one request of `app`, allowed `per_second` across a cluster of `members` nodes;
    /// when none is left, the seconds until one is.
    pub fn take(&self, app: &str, per_second: u64, members: usize) -> Result<(), u64> {
        self.take_at(app, per_second, members, Instant::now())
    }

    fn take_at(&self, app: &str, per_second: u64, members: usize, now: Instant) -> Result<(), u64> {
        let rate = (per_second as f64 / members.max(1) as f64).max(0.01);
        let burst = rate.max(1.0);
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = buckets.entry(app.to_string()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate).min(burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Ok(());
        }
        Err(((1.0 - b.tokens) / rate).ceil().max(1.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_node_admits_its_part_of_the_rate_and_says_when_to_retry() {
        let rates = AppRates::default();
        let t0 = Instant::now();
        // 30 a second over 3 nodes: 10 here at once, then one every 100 ms.
        for _ in 0..10 {
            assert!(rates.take_at("a", 30, 3, t0).is_ok());
        }
        assert_eq!(rates.take_at("a", 30, 3, t0), Err(1));
        assert!(rates.take_at("b", 30, 3, t0).is_ok(), "apps have their own");
        assert!(rates
            .take_at("a", 30, 3, t0 + Duration::from_millis(100))
            .is_ok());
        assert!(rates
            .take_at("a", 30, 3, t0 + Duration::from_millis(150))
            .is_err());
        // A slow rate: one every 10 s on this node.
        assert!(rates.take_at("c", 1, 10, t0).is_ok());
        assert_eq!(rates.take_at("c", 1, 10, t0), Err(10));
    }
}
