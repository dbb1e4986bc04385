//! Nemeses: faults scheduled on a timeline. Each cycle waits a quiet period, applies one fault
//! for an active period, then heals it; faults rotate through the configured kinds. The run
//! ends with everything healed. Every fault interval is recorded for the plot and summary.

use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::db::Db;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// `kill -9` of the node leading the most groups, restarted at the end of the period.
    Kill,
    /// SIGSTOP of a random node, SIGCONT at the end.
    Pause,
    /// A random minority cut off from the majority.
    PartitionMajority,
    /// The node leading the most groups cut off from all others.
    PartitionLeader,
    /// Two halves that only talk through one bridge node.
    PartitionBridge,
    /// One node's messages to the others are dropped; theirs to it arrive.
    PartitionAsymmetric,
    /// Leadership of every group moved to another voter through the admin interface.
    ShuffleLeaders,
    /// A node removed from the cluster and replaced by a fresh one (new id, empty disk).
    Membership,
}

impl Fault {
    pub const ALL: [Fault; 8] = [
        Fault::Kill,
        Fault::Pause,
        Fault::PartitionMajority,
        Fault::PartitionLeader,
        Fault::PartitionBridge,
        Fault::PartitionAsymmetric,
        Fault::ShuffleLeaders,
        Fault::Membership,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::PartitionMajority => "partition-majority",
            Fault::PartitionLeader => "partition-leader",
            Fault::PartitionBridge => "partition-bridge",
            Fault::PartitionAsymmetric => "partition-asymmetric",
            Fault::ShuffleLeaders => "shuffle-leaders",
            Fault::Membership => "membership",
        }
    }

    /// Parses a comma list; `partition` means the four partition kinds, `all` every fault,
    /// `none` no fault.
    pub fn parse_list(s: &str) -> anyhow::Result<Vec<Fault>> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "none" => {}
                "all" => out.extend(Fault::ALL),
                "partition" => out.extend([
                    Fault::PartitionMajority,
                    Fault::PartitionLeader,
                    Fault::PartitionBridge,
                    Fault::PartitionAsymmetric,
                ]),
                other => match Fault::ALL.iter().find(|f| f.name() == other) {
                    Some(f) => out.push(*f),
                    None => anyhow::bail!("unknown nemesis {other:?}"),
                },
            }
        }
        Ok(out)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Interval {
    pub fault: String,
    pub start_s: f64,
    pub end_s: f64,
    pub detail: String,
}

/// Runs the nemesis until `until`, returning the fault intervals (seconds since `t0`).
pub async fn run(
    db: &mut Db,
    faults: &[Fault],
    t0: Instant,
    until: Instant,
    quiet: Duration,
    active: Duration,
) -> Vec<Interval> {
    let mut intervals = Vec::new();
    if faults.is_empty() {
        tokio::time::sleep_until(until.into()).await;
        return intervals;
    }
    let mut cycle = 0usize;
    loop {
        tokio::time::sleep(quiet).await;
        if Instant::now() + active > until {
            break;
        }
        let fault = faults[cycle % faults.len()];
        cycle += 1;
        let start = t0.elapsed().as_secs_f64();
        let detail = apply(db, fault).await;
        tracing_line(&format!("nemesis {} start: {detail}", fault.name()));
        tokio::time::sleep(active).await;
        if let Err(e) = db.heal_all().await {
            tracing_line(&format!("nemesis heal failed: {e}"));
        }
        intervals.push(Interval {
            fault: fault.name().into(),
            start_s: start,
            end_s: t0.elapsed().as_secs_f64(),
            detail,
        });
    }
    intervals
}

fn tracing_line(s: &str) {
    eprintln!("[jepsen] {s}");
}

async fn apply(db: &mut Db, fault: Fault) -> String {
    let n = db.nodes.len();
    let mut rng = rand::rng();
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    match fault {
        Fault::Kill => {
            let v = db.busiest_leader().unwrap_or(order[0]);
            db.kill(v);
            format!("killed node {}", v + 1)
        }
        Fault::Pause => {
            let v = order[0];
            db.pause(v);
            format!("paused node {}", v + 1)
        }
        Fault::PartitionMajority => {
            let (minority, majority) = order.split_at(n / 2);
            db.net.partition(minority, majority);
            format!("{:?} | {:?}", plus1(minority), plus1(majority))
        }
        Fault::PartitionLeader => {
            let l = db.busiest_leader().unwrap_or(order[0]);
            let rest: Vec<usize> = (0..n).filter(|&i| i != l).collect();
            db.net.partition(&[l], &rest);
            format!("isolated leader node {}", l + 1)
        }
        Fault::PartitionBridge => {
            let bridge = order[0];
            let rest = &order[1..];
            let (a, b) = rest.split_at(rest.len() / 2);
            db.net.partition(a, b);
            format!("{:?} <- node {} -> {:?}", plus1(a), bridge + 1, plus1(b))
        }
        Fault::PartitionAsymmetric => {
            let x = order[0];
            db.net.set_cut((0..n).filter(|&i| i != x).map(|i| (x, i)));
            format!("node {} cannot send", x + 1)
        }
        Fault::ShuffleLeaders => {
            let live = (0..n).find(|&i| db.is_running(i)).unwrap_or(0);
            match db.admin(live, &["shuffle-leaders"]) {
                Ok(out) => out.trim().to_string(),
                Err(e) => format!("shuffle failed: {e}"),
            }
        }
        Fault::Membership => {
            let v = order[rng.random_range(0..n)];
            let old = db.nodes[v].id;
            match db.replace(v).await {
                Ok(()) => format!("replaced node id {old} by id {}", db.nodes[v].id),
                Err(e) => format!("replace failed: {e}"),
            }
        }
    }
}

fn plus1(v: &[usize]) -> Vec<usize> {
    v.iter().map(|i| i + 1).collect()
}
