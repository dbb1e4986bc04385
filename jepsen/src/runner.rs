//! One run: start a cluster, drive it with concurrent clients while the nemesis injects
//! faults, heal, read everything back, check, and write the run directory:
//! `history.jsonl`, `summary.json`, `plot.svg`, and `cluster/` with every node's log and data.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::{json, Value};

use crate::checker::Verdict;
use crate::db::Db;
use crate::history::{self, Kind, Recorder};
use crate::nemesis::{self, Fault};
use crate::plot;
use crate::workload::{self, Workload};

/// MiB of the tmpfs each node's data lives on in runs with the `disk-full` nemesis.
const VOLUME_MB: u64 = 1024;

#[derive(Debug, Clone)]
pub struct RunConfig {
    pub workload: Workload,
    pub faults: Vec<Fault>,
    pub nodes: usize,
    pub shards: u32,
    /// How long clients run (faults happen within it).
    pub seconds: u64,
    pub clients: usize,
    /// Upper bound on operations, whatever the time.
    pub max_ops: u64,
    pub quiet: Duration,
    pub active: Duration,
    /// Time the checker may spend on each key before answering `unknown`.
    pub check_budget: Duration,
    pub out: PathBuf,
    /// The `basalt` binary.
    pub bin: PathBuf,
    /// The previous release's build: the cluster starts on it (`rolling-upgrade` needs it).
    pub previous: Option<crate::db::Build>,
}

impl RunConfig {
    pub fn name(&self) -> String {
        let faults: Vec<&str> = self.faults.iter().map(Fault::name).collect();
        let nemesis = if faults.is_empty() {
            "none".to_string()
        } else {
            faults.join("+")
        };
        format!("{}-{}", self.workload.name(), nemesis)
    }
}

#[derive(Debug, Clone)]
pub struct RunReport {
    pub verdict: Verdict,
    pub summary: Value,
    pub dir: PathBuf,
}

pub async fn run(cfg: &RunConfig) -> anyhow::Result<RunReport> {
    std::fs::create_dir_all(&cfg.out)?;
    let dir = cfg.out.join("cluster");
    let upgrading = cfg.faults.contains(&Fault::RollingUpgrade);
    let mut db = match (cfg.faults.contains(&Fault::DiskFull), &cfg.previous) {
        (true, _) if upgrading => {
            anyhow::bail!("the rolling-upgrade nemesis does not run with disk-full")
        }
        (true, _) => Db::start_on_volumes(&cfg.bin, &dir, cfg.nodes, cfg.shards, VOLUME_MB).await?,
        (false, Some(previous)) if upgrading => {
            Db::start_previous(&cfg.bin, previous.clone(), &dir, cfg.nodes, cfg.shards).await?
        }
        (false, None) if upgrading => {
            anyhow::bail!(
                "the rolling-upgrade nemesis needs the previous build (--previous-binary)"
            )
        }
        (false, _) => Db::start(&cfg.bin, &dir, cfg.nodes, cfg.shards).await?,
    };
    let timeout = Duration::from_secs(4);
    let clients = (0..cfg.nodes)
        .map(|i| db.client(i, timeout))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let setup = Arc::new(workload::setup(cfg.workload, &clients[0]).await?);
    let rec = Arc::new(Recorder::default());
    let t0 = rec.start();
    let until = Instant::now() + Duration::from_secs(cfg.seconds);
    let budget = Arc::new(AtomicU64::new(cfg.max_ops));

    let mut tasks = Vec::new();
    for c in 0..cfg.clients {
        let node = c % cfg.nodes;
        let client = clients[node].clone();
        let (rec, setup, budget, w, stride) = (
            rec.clone(),
            setup.clone(),
            budget.clone(),
            cfg.workload,
            cfg.clients as u64,
        );
        tasks.push(tokio::spawn(async move {
            let mut process = c as u64;
            let mut seq = 0u64;
            while Instant::now() < until
                && budget
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                    .is_ok()
            {
                seq += 1;
                let (f, key, value) = workload::next_op(w, &setup, process, seq, &mut rand::rng());
                rec.record(
                    process,
                    Kind::Invoke,
                    &f,
                    key.as_deref(),
                    value.clone(),
                    node,
                );
                let (kind, result) =
                    workload::perform(w, &client, &setup, &f, key.as_deref(), &value).await;
                rec.record(process, kind, &f, key.as_deref(), result, node);
                if kind == Kind::Info {
                    // The op may still be in flight: this client continues as a new process.
                    process += stride;
                }
                let pause = rand::rng().random_range(0..8);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }));
    }
    let intervals = nemesis::run(&mut db, &cfg.faults, t0, until, cfg.quiet, cfg.active).await;
    for t in tasks {
        let _ = t.await;
    }
    eprintln!("[jepsen] {}: load done, healing", cfg.name());
    db.heal_all().await?;
    db.wait_settled(Duration::from_secs(120)).await?;
    eprintln!("[jepsen] {}: healed; final reads", cfg.name());
    let events = rec.events();
    let ops = history::pair(&events);
    let mut finals = None;
    for attempt in 0..5 {
        match workload::final_reads(cfg.workload, &clients, &setup, &ops).await {
            Ok(f) => {
                finals = Some(f);
                break;
            }
            Err(e) if attempt < 4 => {
                eprintln!("[jepsen] final reads failed ({e}); retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => return Err(e),
        }
    }
    let finals = finals.unwrap_or_default();
    // Every group's replicas, compared at one committed index (`basalt admin check`).
    let consistency = match db.admin(0, &["check", "--wait-secs", "120"]) {
        Ok(_) => "agree".to_string(),
        Err(e) if e.to_string().contains("differing replicas") => format!("differ: {e}"),
        Err(e) => format!("unchecked: {e}"),
    };
    eprintln!("[jepsen] {}: replicas {consistency}", cfg.name());
    eprintln!("[jepsen] {}: checking {} operations", cfg.name(), ops.len());
    let verdict = workload::check(cfg.workload, &ops, &finals, cfg.check_budget);
    db.stop_all();

    let count = |k: Kind| ops.iter().filter(|o| o.outcome == k).count();
    let elapsed = t0.elapsed().as_secs_f64();
    let summary = json!({
        "name": cfg.name(),
        "workload": cfg.workload.name(),
        "nemesis": cfg.faults.iter().map(Fault::name).collect::<Vec<_>>(),
        "nodes": cfg.nodes,
        "shards": cfg.shards,
        "seconds": cfg.seconds,
        "ops": {"total": ops.len(), "ok": count(Kind::Ok), "fail": count(Kind::Fail), "info": count(Kind::Info)},
        "faults": intervals,
        "final_values": finals.values,
        "consistency": consistency,
        "result": verdict,
        "valid": verdict.name(),
    });
    history::write_jsonl(&cfg.out.join("history.jsonl"), &events)?;
    std::fs::write(
        cfg.out.join("summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    std::fs::write(
        cfg.out.join("plot.svg"),
        plot::render(&cfg.name(), &ops, &intervals, elapsed),
    )?;
    Ok(RunReport {
        verdict,
        summary,
        dir: cfg.out.clone(),
    })
}
