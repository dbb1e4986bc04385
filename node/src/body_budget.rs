//! The node's budget of memory for request bodies in flight (`--request-memory-mb`): a request
//! holds its share while its body is read and handled — `EXPANSION` times its bytes (what a
//! parsed body may take beside its text), at least `FLOOR`. Past the budget, a request waits
//! up to `WAIT` for others to finish, then answers 503 with `Retry-After`: a burst of large
//! bodies queues instead of exhausting memory. Each app may hold at most 1/`APP_SHARE` of the
//! budget besides (`hold_for_app`), so one app's large writes in flight never leave the others
//! without room. Used by `server`'s edge layer (the whole budget) and `api::context` (an
//! app's share, once the request's app is known). `DRAIN_BYTES` bounds what is read of a
//! refused body (`server`, `files::upload`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes a client may still send once its body has passed the limit: read and dropped, so that
/// it gets its 413 instead of a connection reset while it writes. Past this the connection is
/// closed.
pub const DRAIN_BYTES: usize = 64 << 20;

/// How many times its size a body may take once parsed (with the items a body may hold bounded
/// by `json_text`, a value costs at most a few times its text).
pub const EXPANSION: usize = 4;
/// What every request with a body holds at least.
const FLOOR: usize = 16 << 10;
/// The budget is counted in KiB.
const UNIT: usize = 1 << 10;
/// How long a request waits for room before it is refused.
pub const WAIT: Duration = Duration::from_secs(5);
/// The part of the budget one app may hold (1/`APP_SHARE`).
pub const APP_SHARE: usize = 4;

/// The node's budget.
#[derive(Clone)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    units: usize,
    wait: Duration,
    /// Each app's share, made on its first request with a body.
    apps: Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<Semaphore>>>>,
}

/// What one request holds of the budget (given back when dropped).
#[derive(Default)]
pub struct Held(Option<OwnedSemaphorePermit>);

/// The budget is spent and stayed spent for `WAIT`.
#[derive(Debug)]
pub struct Spent;

impl BodyBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> BodyBudget {
        let units = (bytes / UNIT).clamp(1, Semaphore::MAX_PERMITS);
        BodyBudget {
            permits: Arc::new(Semaphore::new(units)),
            units,
            wait: WAIT,
            apps: Arc::default(),
        }
    }

    /// Grows what `held` holds to the share of a body of `body_bytes` (never more than the
    /// whole budget, so that the largest body can always run alone).
    pub async fn hold(&self, held: &mut Held, body_bytes: usize) -> Result<(), Spent> {
        self.hold_in(&self.permits, self.units, held, body_bytes)
            .await
    }

    /// What `app` holds of its share for a body of `body_bytes`, for as long as `Held` lives.
    pub async fn hold_for_app(&self, app: &str, body_bytes: usize) -> Result<Held, Spent> {
        let units = (self.units / APP_SHARE).max(1);
        let share = {
            let mut apps = self.apps.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(
                apps.entry(app.to_string())
                    .or_insert_with(|| Arc::new(Semaphore::new(units))),
            )
        };
        let mut held = Held::default();
        self.hold_in(&share, units, &mut held, body_bytes).await?;
        Ok(held)
    }

    async fn hold_in(
        &self,
        permits: &Arc<Semaphore>,
        units: usize,
        held: &mut Held,
        body_bytes: usize,
    ) -> Result<(), Spent> {
        let wanted = (body_bytes.max(FLOOR).saturating_mul(EXPANSION) / UNIT).min(units);
        let has = held.0.as_ref().map_or(0, |p| p.num_permits());
        if wanted <= has {
            return Ok(());
        }
        let more = u32::try_from(wanted - has).map_err(|_| Spent)?;
        let got = tokio::time::timeout(self.wait, permits.clone().acquire_many_owned(more))
            .await
            .map_err(|_| Spent)?
            .map_err(|_| Spent)?;
        match &mut held.0 {
            Some(p) => p.merge(got),
            None => held.0 = Some(got),
        }
        Ok(())
    }

    /// Bytes of the budget free now.
    pub fn free_bytes(&self) -> usize {
        self.permits.available_permits() * UNIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_past_the_budget_wait_then_are_refused() {
        let mut budget = BodyBudget::new(1 << 20);
        budget.wait = Duration::from_millis(50);
        let mut a = Held::default();
        budget.hold(&mut a, 128 << 10).await.unwrap();
        assert_eq!(budget.free_bytes(), (1 << 20) - (512 << 10));
        budget.hold(&mut a, 256 << 10).await.unwrap();
        assert_eq!(budget.free_bytes(), 0);
        let mut b = Held::default();
        assert!(budget.hold(&mut b, 1).await.is_err(), "nothing left");
        drop(a);
        budget.hold(&mut b, 10 << 20).await.unwrap();
        assert_eq!(
            budget.free_bytes(),
            0,
            "one body larger than the budget takes it all"
        );
    }

    #[tokio::test]
    async fn an_app_holds_at_most_its_share() {
        let mut budget = BodyBudget::new(4 << 20);
        budget.wait = Duration::from_millis(50);
        let a = budget.hold_for_app("a", 256 << 10).await.unwrap();
        assert!(
            budget.hold_for_app("a", 1).await.is_err(),
            "a's share is taken"
        );
        let b = budget.hold_for_app("b", 256 << 10).await.unwrap();
        drop(a);
        assert!(budget.hold_for_app("a", 1).await.is_ok());
        drop(b);
    }
}
