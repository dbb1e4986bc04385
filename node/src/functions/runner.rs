//! Where invocations run: each on its own thread, never on the async runtime's workers, so a
//! busy or runaway function cannot hold up the node's other requests or Raft's heartbeats.
//! A node admits at most `--function-threads` invocations started by clients, triggers and
//! the scheduler at once; one more waits for a slot up to its wall time, then answers 503.
//! Each app has a share of them — half the node's slots unless its settings say how many
//! (`functions.concurrency`) — so one app's slow functions never take every slot from the
//! others: its invocation past the share waits for one of its own.
//! Invocations a running function waits for (calling another function, or a write that runs
//! a before-trigger) are nested: they take a nested slot at once or fail (waiting for a
//! normal slot could deadlock on the slots their callers hold), `NESTED_PER_SLOT` per slot,
//! and nest at most `MAX_DEPTH` deep. After-triggers, which nobody waits for, queue for a
//! normal slot, at most `BACKGROUND_QUEUE` of them per node (more are dropped and counted).
//! Metrics: `basalt_function_calls_total{outcome}` and `basalt_function_seconds`, labelled
//! with `app` and `function` too under `--metrics-per-app`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use tokio::sync::Semaphore;

use super::engine::{self, Host, Limits, Program, RunError};

/// How deep functions may call each other (or write through triggers) within one request.
pub const MAX_DEPTH: u8 = 8;
/// Nested invocations a node runs at once, per slot.
const NESTED_PER_SLOT: usize = 4;
/// Invocations nobody waits for (after-triggers) that may queue for a slot.
const BACKGROUND_QUEUE: usize = 1024;
/// Stack a function's thread has beyond its interpreter's limit (Rust and C frames).
const THREAD_STACK_MARGIN: usize = 2 << 20;

/// The script that gives functions `Basalt`, `fetch` and timers (over `__host`).
pub const PRELUDE: &str = include_str!("prelude.js");

/// One invocation to run.
pub struct Invocation {
    pub app: String,
    pub function: String,
    /// The body of the async function of `request`.
    pub body: String,
    pub request: Value,
    pub limits: Limits,
    pub host: Arc<dyn Host>,
    /// 0 for an invocation from outside; one more for each function or trigger it starts.
    pub depth: u8,
    /// Nobody waits for its answer (an after-trigger).
    pub detached: bool,
}

/// An app's share of the slots, and the size it was made with.
type Share = (Arc<Semaphore>, usize);

/// The node's function slots.
#[derive(Clone)]
pub struct Runner {
    slots: Arc<Semaphore>,
    /// Slots of the node (`--function-threads`).
    threads: usize,
    /// Each app's share: its semaphore and the size it was made with.
    shares: Arc<Mutex<HashMap<String, Share>>>,
    nested: Arc<Semaphore>,
    background: Arc<Semaphore>,
    runtime: tokio::runtime::Handle,
    /// `fetch`'s client (no redirects: each url is checked against the allow list).
    http: reqwest::Client,
}

/// Trips its flag when dropped: the awaiting request went away, the invocation should stop.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Runner {
    /// A runner with `threads` slots (at least one), on the current async runtime.
    pub fn new(threads: usize) -> Result<Runner, reqwest::Error> {
        Ok(Runner {
            slots: Arc::new(Semaphore::new(threads.max(1))),
            threads: threads.max(1),
            shares: Arc::default(),
            nested: Arc::new(Semaphore::new(threads.max(1) * NESTED_PER_SLOT)),
            background: Arc::new(Semaphore::new(BACKGROUND_QUEUE)),
            runtime: tokio::runtime::Handle::current(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
        })
    }

    /// The client `fetch` uses.
    pub fn http(&self) -> reqwest::Client {
        self.http.clone()
    }

    /// Runs `inv` to its end; what the function's promise resolved to, as JSON.
    pub async fn run(&self, inv: Invocation) -> Result<Value, RunError> {
        let started = Instant::now();
        let labels = super::metric_labels(&inv.app, &inv.function);
        let outcome = self.run_uncounted(inv).await;
        let kind = match &outcome {
            Ok(_) => "ok",
            Err(RunError::Thrown(_)) => "error",
            Err(RunError::Timeout(_)) => "timeout",
            Err(RunError::OutOfMemory(_)) => "memory",
            Err(RunError::StackOverflow) => "stack",
            Err(RunError::Busy) => "busy",
            Err(RunError::Cancelled) => "cancelled",
            Err(RunError::Compile(_) | RunError::NeverSettles | RunError::Engine(_)) => "failed",
            Err(RunError::TooDeep) => "depth",
        };
        let mut with_outcome = labels.clone();
        with_outcome.push(("outcome", kind.to_string()));
        metrics::counter!("basalt_function_calls_total", &with_outcome).increment(1);
        metrics::histogram!("basalt_function_seconds", &labels)
            .record(started.elapsed().as_secs_f64());
        outcome
    }

    /// How many invocations `app` may run at once on this node: what it asked for, at most the
    /// node's slots, or half of them (at least one).
    fn share_size(&self, asked: Option<usize>) -> usize {
        asked.unwrap_or(self.threads / 2).clamp(1, self.threads)
    }

    /// `app`'s share of the slots, made (or made again, when its size changed) on first use.
    fn share(&self, app: &str, size: usize) -> Arc<Semaphore> {
        let mut shares = self.shares.lock().unwrap_or_else(|p| p.into_inner());
        match shares.get(app) {
            Some((s, n)) if *n == size => s.clone(),
            _ => {
                let s = Arc::new(Semaphore::new(size));
                shares.insert(app.to_string(), (s.clone(), size));
                s
            }
        }
    }

    async fn run_uncounted(&self, inv: Invocation) -> Result<Value, RunError> {
        if inv.depth > MAX_DEPTH {
            return Err(RunError::TooDeep);
        }
        let _queued = match inv.detached {
            true => Some(
                self.background
                    .clone()
                    .try_acquire_owned()
                    .map_err(|_| RunError::Busy)?,
            ),
            false => None,
        };
        let _slot = match inv.depth == 0 || inv.detached {
            true => {
                // The app's share first, then a slot of the node, both within the wall time.
                let share = self.share(&inv.app, self.share_size(inv.limits.concurrency));
                let both = async {
                    let own = share.acquire_owned().await;
                    let node = self.slots.clone().acquire_owned().await;
                    (own, node)
                };
                match tokio::time::timeout(inv.limits.wall, both).await {
                    Ok((Ok(own), Ok(node))) => (node, Some(own)),
                    _ => return Err(RunError::Busy),
                }
            }
            false => {
                let nested = self
                    .nested
                    .clone()
                    .try_acquire_owned()
                    .map_err(|_| RunError::Busy)?;
                // Nested invocations run within their caller's share.
                (nested, None)
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let _stop_on_drop = StopOnDrop(stop.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let runtime = self.runtime.clone();
        let stack = inv.limits.stack_bytes + THREAD_STACK_MARGIN;
        std::thread::Builder::new()
            .name("basalt-function".into())
            .stack_size(stack)
            .spawn(move || {
                let program = Program {
                    prelude: PRELUDE,
                    name: &inv.function,
                    body: &inv.body,
                };
                let r = engine::run(&program, &inv.request, inv.limits, inv.host, &runtime, stop);
                let _ = tx.send(r);
            })
            .map_err(|e| RunError::Engine(format!("starting a function thread: {e}")))?;
        rx.await
            .unwrap_or_else(|_| Err(RunError::Engine("the function's thread ended".into())))
    }
}
