//! Per-app storage quotas (`objectsQuotaMb`, `filesQuotaMb`, set through app management;
//! unlimited when absent). The shards count exactly what each app stores
//! (`basalt_cluster::usage`); each node checks a write that adds data against the app's
//! cluster-wide usage as it last read it plus what it admitted since, and refuses one that
//! would pass the quota (400, 10082); deletes, and updates that add nothing, always go through.
//! How old that reading may be shrinks with the room left: at most a second, and no older than
//! the time the app's writes (as fast as they grew between readings, or as this node admits
//! them times the cluster's nodes) would take to fill half the room left — so near the quota
//! every write waits for a reading begun after it arrived (one reading serves all that wait).
//! Writes racing through several nodes can then pass the quota by about the writes in flight
//! at that moment. When the usage cannot be read (a shard without a leader), the last reading
//! serves, so one unavailable shard does not stop the app's writes to the others. Neighbours: `api::objects` and `api::object_writes` admit object writes,
//! `files::store` admits an upload once its size is known.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use basalt_cluster::names::AppId;
use basalt_cluster::update::{FieldUpdate, UpdateOp};
use basalt_cluster::usage::AppUsage;
use basalt_cluster::Cluster;

/// How old the usage a node checks against may be, far from the quota.
const MAX_AGE: Duration = Duration::from_secs(1);
const MIB: u64 = 1 << 20;

/// What a quota bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Objects,
    Files,
}

impl Stored {
    pub fn setting(self) -> &'static str {
        match self {
            Stored::Objects => "objectsQuotaMb",
            Stored::Files => "filesQuotaMb",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// The write would pass the app's quota.
    #[error("this app's {what} would pass its quota of {quota_mb} MiB ({setting}): delete some first, or raise it.", what = match .stored { Stored::Objects => "objects", Stored::Files => "files" }, setting = .stored.setting())]
    Exceeded { stored: Stored, quota_mb: u64 },
    /// The app's usage could not be read.
    #[error(transparent)]
    Cluster(#[from] basalt_cluster::Error),
}

/// This node's view of each app's usage.
#[derive(Default)]
pub struct StorageQuotas {
    apps: Mutex<HashMap<String, Arc<AppView>>>,
}

#[derive(Default)]
struct AppView {
    seen: Mutex<Seen>,
    /// One reading of the app's usage at a time.
    reading: tokio::sync::Mutex<()>,
}

/// A write this node admitted, counted until a reading begun after it ended includes it.
#[derive(Debug, Clone, Copy)]
struct Ticket {
    id: u64,
    stored: Stored,
    bytes: u64,
    ended: Option<Instant>,
}

#[derive(Default, Clone)]
struct Seen {
    usage: AppUsage,
    read_at: Option<Instant>,
    tickets: Vec<Ticket>,
    next_ticket: u64,
    /// Bytes of objects and files this node admitted since the reading began.
    admitted: [u64; 2],
    /// How fast the app's objects and files grew (bytes a second) between the last two
    /// readings.
    grew: [f64; 2],
}

impl Stored {
    fn index(self) -> usize {
        match self {
            Stored::Objects => 0,
            Stored::Files => 1,
        }
    }

    fn of(self, usage: &AppUsage) -> u64 {
        match self {
            Stored::Objects => usage.object_bytes,
            Stored::Files => usage.file_bytes,
        }
    }
}

impl Seen {
    /// What the app stores as this node sees it: the reading, and the writes it admitted that
    /// the reading may miss.
    fn used(&self, stored: Stored) -> u64 {
        self.tickets
            .iter()
            .filter(|t| t.stored == stored)
            .fold(stored.of(&self.usage), |n, t| n.saturating_add(t.bytes))
    }

    fn admit(&mut self, stored: Stored, bytes: u64) -> u64 {
        let id = self.next_ticket;
        self.next_ticket += 1;
        self.tickets.push(Ticket {
            id,
            stored,
            bytes,
            ended: None,
        });
        let n = &mut self.admitted[stored.index()];
        *n = n.saturating_add(bytes);
        id
    }

    fn end(&mut self, id: u64) {
        if let Some(t) = self.tickets.iter_mut().find(|t| t.id == id) {
            t.ended = Some(Instant::now());
        }
    }

    /// Whether the reading is recent enough to judge a write of `adds` bytes that arrived at
    /// `arrived`, on a node of a cluster of `members` nodes: begun after it arrived, or younger
    /// than the time the app's writes would take to fill half the room left (at most
    /// `MAX_AGE`).
    fn fresh(
        &self,
        stored: Stored,
        quota: u64,
        adds: u64,
        arrived: Instant,
        members: usize,
    ) -> bool {
        let Some(read_at) = self.read_at else {
            return false;
        };
        if read_at >= arrived {
            return true;
        }
        let age = read_at.elapsed();
        let admitted = self.admitted[stored.index()];
        let here = admitted as f64 / age.as_secs_f64().max(0.001) * members.max(1) as f64;
        let rate = self.grew[stored.index()].max(here).max(1.0);
        let room = quota.saturating_sub(self.used(stored).saturating_add(adds)) as f64;
        age.as_secs_f64() < (room / rate / 2.0).min(MAX_AGE.as_secs_f64())
    }

    /// Takes the reading `usage`, begun at `began`: the writes that ended before it began are
    /// in it; those still in flight, or ended since, may not be and still count.
    fn read(&mut self, usage: AppUsage, began: Instant) {
        if let Some(last) = self.read_at {
            let secs = began
                .saturating_duration_since(last)
                .as_secs_f64()
                .max(0.001);
            for stored in [Stored::Objects, Stored::Files] {
                let grown = stored.of(&usage).saturating_sub(stored.of(&self.usage));
                self.grew[stored.index()] = grown as f64 / secs;
            }
        }
        self.tickets.retain(|t| t.ended.is_none_or(|e| e >= began));
        self.admitted = [0; 2];
        self.usage = usage;
        self.read_at = Some(began);
    }
}

/// An admitted write: counted by this node until a reading begun after it ended (hold it until
/// the write has been applied or refused).
pub struct Admitted {
    ticket: Option<(Arc<AppView>, u64)>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some((view, id)) = self.ticket.take() {
            lock(&view.seen).end(id);
        }
    }
}

impl StorageQuotas {
    /// Admits a write adding `adds` bytes of `stored` to `app`, whose quota is `quota_mb`
    /// (none: unlimited): refused when it would pass the quota; counted by this node while
    /// the answer is held and until its usage is read again. `arrived` is when the write
    /// arrived: a reading begun since then serves it (the operations of one `/1/batch` share
    /// theirs).
    pub async fn admit(
        &self,
        cluster: &Cluster,
        app: &AppId,
        stored: Stored,
        quota_mb: Option<u64>,
        (adds, arrived): (u64, Instant),
    ) -> Result<Admitted, QuotaError> {
        let view = self
            .settle(cluster, app, stored, quota_mb, (adds, arrived), true)
            .await?;
        Ok(Admitted { ticket: view })
    }

    /// As `admit`, without counting it: whether a write of `adds` bytes would be admitted now
    /// (an upload of a declared size, before its body is read).
    pub async fn fits(
        &self,
        cluster: &Cluster,
        app: &AppId,
        stored: Stored,
        quota_mb: Option<u64>,
        adds: u64,
    ) -> Result<(), QuotaError> {
        self.settle(
            cluster,
            app,
            stored,
            quota_mb,
            (adds, Instant::now()),
            false,
        )
        .await
        .map(drop)
    }

    async fn settle(
        &self,
        cluster: &Cluster,
        app: &AppId,
        stored: Stored,
        quota_mb: Option<u64>,
        (adds, arrived): (u64, Instant),
        count: bool,
    ) -> Result<Option<(Arc<AppView>, u64)>, QuotaError> {
        let (Some(quota_mb), true) = (quota_mb, adds > 0) else {
            return Ok(None);
        };
        let quota = quota_mb.saturating_mul(MIB);
        let members = cluster.active_members().len();
        let view = self.view(app);
        let fresh = |view: &AppView| lock(&view.seen).fresh(stored, quota, adds, arrived, members);
        if !fresh(&view) {
            let _reading = view.reading.lock().await;
            if !fresh(&view) {
                let began = Instant::now();
                match cluster.app_usage(app).await {
                    Ok(usage) => lock(&view.seen).read(usage, began),
                    // A shard that cannot be read now (no leader) does not stop the app's
                    // writes to the others: the last reading serves, and with none the write
                    // is judged by what this node admitted.
                    Err(e) => tracing::debug!(app = app.as_str(), "reading the app's usage: {e}"),
                }
            }
        }
        let mut seen = lock(&view.seen);
        if seen.used(stored).saturating_add(adds) > quota {
            metrics::counter!("basalt_writes_refused_total", "reason" => "quota").increment(1);
            return Err(QuotaError::Exceeded { stored, quota_mb });
        }
        if !count {
            return Ok(None);
        }
        let id = seen.admit(stored, adds);
        drop(seen);
        Ok(Some((view, id)))
    }

    fn view(&self, app: &str) -> Arc<AppView> {
        let mut apps = lock(&self.apps);
        if apps.len() > 100_000 {
            apps.retain(|_, v| Arc::strong_count(v) > 1);
        }
        apps.entry(app.to_string()).or_default().clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The bytes a write's updates may add to an object: what it sets or adds (as JSON, with its
/// field names); nothing for deletes, removals and the service's own fields (`_`: a login's
/// session), so that they go through at any usage.
pub fn bytes_added(updates: &[FieldUpdate]) -> u64 {
    updates
        .iter()
        .filter(|u| !u.path.first().is_some_and(|c| c.starts_with('_')))
        .map(|u| {
            let value = match &u.op {
                UpdateOp::Delete | UpdateOp::Remove(_) | UpdateOp::RemoveRelation { .. } => {
                    return 0
                }
                UpdateOp::Set(v) => serde_json::to_vec(v).map_or(0, |b| b.len()),
                UpdateOp::Add(vs) | UpdateOp::AddUnique(vs) => {
                    serde_json::to_vec(vs).map_or(0, |b| b.len())
                }
                UpdateOp::AddRelation { ids, .. } => ids.iter().map(|i| i.len() + 8).sum(),
                _ => 8,
            };
            (value + u.path.iter().map(|p| p.len() + 1).sum::<usize>()) as u64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_cluster::update::parse_updates;
    use serde_json::json;

    #[test]
    fn what_a_write_adds_counts_values_set_and_nothing_removed() {
        let adds = |body: serde_json::Value| {
            bytes_added(&parse_updates(body.as_object().unwrap()).unwrap())
        };
        assert_eq!(adds(json!({"name": "abc"})), 5 + 5);
        assert!(adds(json!({"list": {"__op": "Add", "objects": ["x".repeat(100)]}})) > 100);
        assert_eq!(adds(json!({"name": {"__op": "Delete"}})), 0);
        assert_eq!(adds(json!({"list": {"__op": "Remove", "objects": [1]}})), 0);
    }

    #[test]
    fn the_nearer_the_quota_the_fresher_the_reading_a_write_is_judged_by() {
        let ago = |ms: u64| {
            Instant::now()
                .checked_sub(Duration::from_millis(ms))
                .unwrap()
        };
        let mut seen = Seen::default();
        assert!(
            !seen.fresh(Stored::Objects, 100 * MIB, MIB, ago(0), 3),
            "never read"
        );
        // Growing 10 MiB/s between two readings 990 ms apart.
        seen.read(AppUsage::default(), ago(1050));
        let grown = AppUsage {
            object_bytes: 99 * MIB / 10,
            ..AppUsage::default()
        };
        seen.read(grown, ago(60));
        assert!((seen.grew[0] - 10.0 * MIB as f64).abs() < 0.2 * MIB as f64);
        // A reading begun after the write arrived serves however near the quota.
        assert!(seen.fresh(Stored::Objects, 10 * MIB, 0, ago(100), 3));
        // Far from it, a reading up to a second old serves; with 1.1 MiB left (55 ms of
        // growth for half of it), one 60 ms old does not.
        assert!(seen.fresh(Stored::Objects, 100 * MIB, MIB, ago(0), 3));
        assert!(!seen.fresh(Stored::Objects, 11 * MIB, 0, ago(0), 3));
        assert!(
            seen.fresh(Stored::Files, 11 * MIB, 0, ago(0), 3),
            "files did not grow"
        );
        // What this node admits counts, as if each node of the cluster admitted as much.
        let mut local = Seen::default();
        local.read(AppUsage::default(), ago(50));
        let first = local.admit(Stored::Files, 4 * MIB);
        assert!(!local.fresh(Stored::Files, 10 * MIB, 0, ago(0), 3));
        assert!(local.fresh(Stored::Files, 10_000 * MIB, 0, ago(0), 3));
        // A write still in flight counts past a reading; one ended before a reading began
        // is in it.
        let second = local.admit(Stored::Files, MIB);
        local.end(first);
        std::thread::sleep(Duration::from_millis(2));
        local.read(AppUsage::default(), Instant::now());
        assert_eq!(local.used(Stored::Files), MIB);
        local.end(second);
        local.read(AppUsage::default(), ago(1));
        assert_eq!(
            local.used(Stored::Files),
            MIB,
            "ended after the reading began"
        );
        local.read(AppUsage::default(), Instant::now());
        assert_eq!(local.used(Stored::Files), 0);
    }
}
