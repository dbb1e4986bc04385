//! Nemeses: faults scheduled on a timeline. Each cycle waits a quiet period, applies one fault
//! for an active period, then heals it; faults rotate through the configured kinds. The run
//! ends with everything healed. Every fault interval is recorded for the plot and summary.
//! `pause-leader` also acts partway through its period: it resumes the leader it stopped and
//! lets the period run on with that node back.

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
    /// SIGSTOP of the node leading the most groups for longer than its read lease plus an
    /// election (`pause_leader_hold`), then SIGCONT while the period runs on: the others elect
    /// new leaders and accept writes meanwhile, and the resumed node must not serve reads from
    /// its expired lease.
    PauseLeader,
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
    /// A random node's disk filled until `DISK_FULL_LEAVES` bytes are free (under its critical
    /// mark), emptied at the end: the groups it holds refuse writes (507, certainly not
    /// applied) meanwhile, and nothing acknowledged may be lost. Runs on volumes
    /// (`Db::start_on_volumes`).
    DiskFull,
    /// Every node in turn stopped as an operator does (SIGTERM: it drains, hands its
    /// leaderships over and exits), started again, and waited for until healthy before the
    /// next: the period lasts as long as that takes.
    RollingRestart,
    /// A split of the data group holding the most slots asked through the admin interface
    /// (`basalt admin split`) — or, half the time once a group was split off, a merge of the
    /// split-off group holding fewest slots back into its family (`basalt admin merge`) —
    /// then, 0 to 1.5 s later, while it freezes, copies and switches its slots, one of
    /// `kill`, `pause`, `partition-majority` or `partition-leader` for the period. The split
    /// or merge goes on, and completes once healed.
    Split,
    /// The cluster starts on the previous release's binary (`Db::previous`); every node in
    /// turn is stopped as for a rolling restart and started again on this build. Once every
    /// node runs it, a cycle is a rolling restart. Needs `RunConfig::previous`; not in `all`.
    RollingUpgrade,
}

/// What `disk-full` leaves free on the node's disk: under the 256 MiB critical mark, with room
/// for the store to flush its memtables (a disk filled in one step, faster than any client
/// could, leaves the node no time to say so first).
pub const DISK_FULL_LEAVES: u64 = 200 << 20;

impl Fault {
    pub const ALL: [Fault; 12] = [
        Fault::Kill,
        Fault::Pause,
        Fault::PauseLeader,
        Fault::PartitionMajority,
        Fault::PartitionLeader,
        Fault::PartitionBridge,
        Fault::PartitionAsymmetric,
        Fault::ShuffleLeaders,
        Fault::Membership,
        Fault::DiskFull,
        Fault::RollingRestart,
        Fault::Split,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::PauseLeader => "pause-leader",
            Fault::PartitionMajority => "partition-majority",
            Fault::PartitionLeader => "partition-leader",
            Fault::PartitionBridge => "partition-bridge",
            Fault::PartitionAsymmetric => "partition-asymmetric",
            Fault::ShuffleLeaders => "shuffle-leaders",
            Fault::Membership => "membership",
            Fault::DiskFull => "disk-full",
            Fault::RollingRestart => "rolling-restart",
            Fault::RollingUpgrade => "rolling-upgrade",
            Fault::Split => "split",
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
                "rolling-upgrade" => out.push(Fault::RollingUpgrade),
                other => match Fault::ALL.iter().find(|f| f.name() == other) {
                    Some(f) => out.push(*f),
                    None => anyhow::bail!("unknown nemesis {other:?}"),
                },
            }
        }
        Ok(out)
    }
}

/// The nodes' smallest election timeout in milliseconds when `BASALT_ELECTION_MS` is unset:
/// `basalt serve --election-ms`'s default. The harness starts nodes without the flag, so they
/// run with this or with the variable they inherit from the harness.
const DEFAULT_ELECTION_MS: u64 = 1200;

/// How long a `pause-leader` period runs on after the leader resumes, at least: requests its
/// clients queued during the stop reach it at once, later ones while it learns it was deposed.
const PAUSE_LEADER_AFTER: Duration = Duration::from_secs(2);

/// The smallest election timeout the nodes run with: `BASALT_ELECTION_MS` (inherited by the
/// node processes), else the node's default.
fn election_ms() -> u64 {
    std::env::var("BASALT_ELECTION_MS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_ELECTION_MS)
}

/// How long `pause-leader` keeps its node stopped when the smallest election timeout is
/// `election_ms`: twice the largest election timeout (itself 2 × `election_ms`) plus a second.
/// That is past the read lease (0.9 × the largest timeout, decisions/0015) plus the time the
/// others need to elect a leader: 5.8 s with the defaults, against a 2.16 s lease.
pub fn pause_leader_hold(election_ms: u64) -> Duration {
    Duration::from_millis(election_ms.saturating_mul(4).saturating_add(1000))
}

/// How long a node of a rolling restart takes at most to drain and exit (its `--drain-wait`,
/// 5 s, its hand-over, at most 10 s, and its in-flight requests), and then to be healthy again.
const RESTART_STOP_WITHIN: Duration = Duration::from_secs(60);
const RESTART_HEALTHY_WITHIN: Duration = Duration::from_secs(90);

/// What one node of a rolling restart is expected to take (drain wait, hand-over, start): the
/// period a `rolling-restart` cycle needs before the end of the load, per node.
const RESTART_EXPECTED: Duration = Duration::from_secs(9);

/// How long `fault`'s period lasts when periods are `active` on `nodes` nodes: `pause-leader`
/// needs its `hold` plus `PAUSE_LEADER_AFTER`, and gets that much when `active` is shorter;
/// `rolling-restart` restarts every node (its period is as long as that takes; this is what
/// it is expected to take).
fn period_of(fault: Fault, active: Duration, hold: Duration, nodes: usize) -> Duration {
    match fault {
        Fault::PauseLeader => active.max(hold + PAUSE_LEADER_AFTER),
        Fault::RollingRestart | Fault::RollingUpgrade => RESTART_EXPECTED * nodes as u32,
        _ => active,
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
    let hold = pause_leader_hold(election_ms());
    let mut cycle = 0usize;
    loop {
        tokio::time::sleep(quiet).await;
        let fault = faults[cycle % faults.len()];
        let period = period_of(fault, active, hold, db.nodes.len());
        if Instant::now() + period > until {
            break;
        }
        cycle += 1;
        let start = t0.elapsed().as_secs_f64();
        let applied = apply(db, fault, hold).await;
        let mut detail = applied.detail;
        tracing_line(&format!("nemesis {} start: {detail}", fault.name()));
        match applied.paused_leader {
            Some(paused) => {
                tokio::time::sleep_until((paused.since + hold).into()).await;
                let note = resume_paused_leader(db, &paused);
                tracing_line(&format!("nemesis {} resume: {note}", fault.name()));
                detail = format!("{detail}; {note}");
                tokio::time::sleep_until((paused.since + period).into()).await;
            }
            None if applied.ran_its_course => {}
            None => tokio::time::sleep(period).await,
        }
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

/// A fault just applied: the line to record, and for `pause-leader` the node to resume partway
/// through the period.
struct Applied {
    detail: String,
    paused_leader: Option<PausedLeader>,
    /// The fault has run its whole period already (`rolling-restart`).
    ran_its_course: bool,
}

impl From<String> for Applied {
    fn from(detail: String) -> Applied {
        Applied {
            detail,
            paused_leader: None,
            ran_its_course: false,
        }
    }
}

/// A node `pause-leader` stopped, with the groups it led when it stopped.
struct PausedLeader {
    node: usize,
    groups: Vec<u64>,
    /// When SIGSTOP was sent.
    since: Instant,
}

/// Applies `fault`; `hold` is how long `pause-leader` keeps its node stopped (for the record).
async fn apply(db: &mut Db, fault: Fault, hold: Duration) -> Applied {
    let n = db.nodes.len();
    let mut rng = rand::rng();
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    match fault {
        Fault::Kill => {
            let v = db.busiest_leader().unwrap_or(order[0]);
            db.kill(v);
            format!("killed node {}", v + 1).into()
        }
        Fault::Pause => {
            let v = order[0];
            db.pause(v);
            format!("paused node {}", v + 1).into()
        }
        Fault::PauseLeader => {
            let leaders = db.group_leaders();
            let mut counts = vec![0usize; n];
            for &(_, l) in leaders.values() {
                if let Some(c) = counts.get_mut(l) {
                    *c += 1;
                }
            }
            let busiest = (0..n).filter(|&i| counts[i] > 0).max_by_key(|&i| counts[i]);
            let v = busiest.unwrap_or(order[0]);
            let groups: Vec<u64> = leaders
                .iter()
                .filter(|(_, (_, l))| *l == v)
                .map(|(&g, _)| g)
                .collect();
            db.pause(v);
            let since = Instant::now();
            let secs = hold.as_secs_f64();
            let detail = match busiest {
                Some(_) => format!(
                    "paused leader node {} (leading {} of {} groups) for {secs:.1} s",
                    v + 1,
                    groups.len(),
                    leaders.len()
                ),
                None => format!("no leader known; paused node {} for {secs:.1} s", v + 1),
            };
            Applied {
                detail,
                paused_leader: Some(PausedLeader {
                    node: v,
                    groups,
                    since,
                }),
                ran_its_course: false,
            }
        }
        Fault::PartitionMajority => {
            let (minority, majority) = order.split_at(n / 2);
            db.net.partition(minority, majority);
            format!("{:?} | {:?}", plus1(minority), plus1(majority)).into()
        }
        Fault::PartitionLeader => {
            let l = db.busiest_leader().unwrap_or(order[0]);
            let rest: Vec<usize> = (0..n).filter(|&i| i != l).collect();
            db.net.partition(&[l], &rest);
            format!("isolated leader node {}", l + 1).into()
        }
        Fault::PartitionBridge => {
            let bridge = order[0];
            let rest = &order[1..];
            let (a, b) = rest.split_at(rest.len() / 2);
            db.net.partition(a, b);
            format!("{:?} <- node {} -> {:?}", plus1(a), bridge + 1, plus1(b)).into()
        }
        Fault::PartitionAsymmetric => {
            let x = order[0];
            db.net.set_cut((0..n).filter(|&i| i != x).map(|i| (x, i)));
            format!("node {} cannot send", x + 1).into()
        }
        Fault::ShuffleLeaders => {
            let live = (0..n).find(|&i| db.is_running(i)).unwrap_or(0);
            match db.admin(live, &["shuffle-leaders"]) {
                Ok(out) => out.trim().to_string().into(),
                Err(e) => format!("shuffle failed: {e}").into(),
            }
        }
        Fault::DiskFull => {
            let v = (0..n)
                .map(|k| order[k])
                .find(|&i| db.is_running(i))
                .unwrap_or(order[0]);
            match db.fill_disk(v, DISK_FULL_LEAVES) {
                Ok(bytes) => format!(
                    "filled node {}'s disk with {} MiB ({} MiB left)",
                    v + 1,
                    bytes >> 20,
                    DISK_FULL_LEAVES >> 20
                )
                .into(),
                Err(e) => format!("filling a disk failed: {e}").into(),
            }
        }
        Fault::RollingRestart => Applied {
            detail: rolling_restart(db, false).await,
            paused_leader: None,
            ran_its_course: true,
        },
        Fault::RollingUpgrade => Applied {
            detail: rolling_restart(db, true).await,
            paused_leader: None,
            ran_its_course: true,
        },
        Fault::Split => {
            let delay = Duration::from_millis(rng.random_range(0..1500));
            let companion = SPLIT_COMPANIONS[rng.random_range(0..SPLIT_COMPANIONS.len())];
            let asked = ask_split(db, rng.random_bool(0.5));
            tracing_line(&format!("nemesis split: {asked}"));
            tokio::time::sleep(delay).await;
            let with = Box::pin(apply(db, companion, hold)).await;
            format!(
                "{asked}; {} ms later {}: {}",
                delay.as_millis(),
                companion.name(),
                with.detail
            )
            .into()
        }
        Fault::Membership => {
            let v = order[rng.random_range(0..n)];
            let old = db.nodes[v].id;
            match db.replace(v).await {
                Ok(()) => format!("replaced node id {old} by id {}", db.nodes[v].id).into(),
                Err(e) => format!("replace failed: {e}").into(),
            }
        }
    }
}

/// The faults `split` applies while its split runs.
const SPLIT_COMPANIONS: [Fault; 4] = [
    Fault::Kill,
    Fault::Pause,
    Fault::PartitionMajority,
    Fault::PartitionLeader,
];

/// Asks a running node to split the data group holding the most slots — or, when `merge` and
/// a group split off earlier holds slots, to merge the one holding fewest back
/// (`basalt admin merge`); what it answered.
fn ask_split(db: &Db, merge: bool) -> String {
    let Some(live) = (0..db.nodes.len()).find(|&i| db.is_running(i)) else {
        return "no node runs: no split asked".into();
    };
    let map: serde_json::Value = match db.admin(live, &["slots"]) {
        Ok(out) => serde_json::from_str(&out).unwrap_or_default(),
        Err(e) => return format!("the slot map did not read: {e}"),
    };
    let shards = map["shards"].as_u64().unwrap_or(u64::MAX);
    let child = map["groups"].as_object().and_then(|groups| {
        groups
            .iter()
            .filter_map(|(g, n)| Some((g.parse::<u64>().ok()?, n.as_u64()?)))
            .filter(|&(g, n)| g > shards && n >= 1)
            .min_by_key(|&(_, n)| n)
    });
    if let (true, Some((child, slots))) = (merge, child) {
        let child = child.to_string();
        return match db.admin(live, &["merge", &child]) {
            Ok(out) => {
                let map: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
                let into = map["splits"][0]["child"].as_u64().unwrap_or(0);
                format!("merge of group {child} ({slots} slots) into group {into}")
            }
            Err(e) => format!("merge of group {child} refused: {}", e.to_string().trim()),
        };
    }
    let group = map["groups"].as_object().and_then(|groups| {
        groups
            .iter()
            .filter_map(|(g, n)| Some((g.clone(), n.as_u64()?)))
            .filter(|&(_, n)| n >= 2)
            .max_by_key(|&(_, n)| n)
    });
    let Some((group, slots)) = group else {
        return "no group holds two slots: no split asked".into();
    };
    match db.admin(live, &["split", &group]) {
        Ok(out) => {
            let map: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
            let child = map["splits"][0]["child"].as_u64().unwrap_or(0);
            format!("split group {group} ({slots} slots) to group {child}")
        }
        Err(e) => format!("split of group {group} refused: {}", e.to_string().trim()),
    }
}

/// Stops every node in turn with SIGTERM (it drains and exits), starts it again — on this
/// build when `upgrade` — and waits until it is healthy before the next; what happened to
/// each.
async fn rolling_restart(db: &mut Db, upgrade: bool) -> String {
    let mut notes = Vec::new();
    let name = if upgrade {
        "rolling-upgrade"
    } else {
        "rolling-restart"
    };
    for i in 0..db.nodes.len() {
        let started = Instant::now();
        let was_previous = db.nodes[i].runs_previous;
        let stopped = db.stop_gracefully(i, RESTART_STOP_WITHIN).await;
        let drained = started.elapsed().as_secs_f64();
        if upgrade {
            db.upgrade(i);
        }
        let stopped = if was_previous && upgrade {
            format!("{stopped}, upgraded")
        } else {
            stopped
        };
        let note = match db.restart(i) {
            Ok(()) => match db.wait_healthy(i, RESTART_HEALTHY_WITHIN).await {
                Ok(()) => format!(
                    "node {}: {stopped} after {drained:.1} s, healthy again after {:.1} s",
                    i + 1,
                    started.elapsed().as_secs_f64()
                ),
                Err(e) => format!("node {}: {stopped} after {drained:.1} s; {e}", i + 1),
            },
            Err(e) => format!("node {}: {stopped}; not started again: {e}", i + 1),
        };
        tracing_line(&format!("nemesis {name}: {note}"));
        notes.push(note);
    }
    notes.join("; ")
}

/// Ends `pause-leader`'s stop: asks the other nodes, before the stopped one resumes, how many
/// of the groups it led have elected another leader meanwhile (none means this cycle probed
/// nothing), then sends SIGCONT.
fn resume_paused_leader(db: &mut Db, paused: &PausedLeader) -> String {
    let leaders = db.group_leaders();
    let moved = paused
        .groups
        .iter()
        .filter(|&g| leaders.get(g).is_some_and(|&(_, l)| l != paused.node))
        .count();
    db.resume(paused.node);
    format!(
        "{moved} of its {} groups had elected another leader; resumed node {} after {:.1} s",
        paused.groups.len(),
        paused.node + 1,
        paused.since.elapsed().as_secs_f64()
    )
}

fn plus1(v: &[usize]) -> Vec<usize> {
    v.iter().map(|i| i + 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_matches_serde() {
        for f in Fault::ALL.into_iter().chain([Fault::RollingUpgrade]) {
            assert_eq!(Fault::parse_list(f.name()).unwrap(), vec![f]);
            assert_eq!(serde_json::to_value(f).unwrap(), f.name());
        }
        let mut names: Vec<&str> = Fault::ALL.iter().map(Fault::name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Fault::ALL.len());
    }

    #[test]
    fn lists_and_groups_parse() {
        assert_eq!(Fault::parse_list("all").unwrap(), Fault::ALL.to_vec());
        assert!(Fault::ALL.contains(&Fault::PauseLeader));
        assert_eq!(
            Fault::parse_list("pause, pause-leader").unwrap(),
            vec![Fault::Pause, Fault::PauseLeader]
        );
        assert!(!Fault::parse_list("partition")
            .unwrap()
            .contains(&Fault::PauseLeader));
        assert!(Fault::parse_list("none").unwrap().is_empty());
        assert!(Fault::parse_list("pause-leaders").is_err());
    }

    #[test]
    fn pause_leader_outlasts_lease_and_election_and_fits_its_period() {
        let hold = pause_leader_hold(DEFAULT_ELECTION_MS);
        assert_eq!(hold, Duration::from_millis(5800));
        let election_max = Duration::from_millis(2 * DEFAULT_ELECTION_MS);
        let lease = election_max * 9 / 10;
        assert!(hold > election_max + lease);
        // The default 8 s period already leaves 2.2 s after the resume.
        let active = Duration::from_secs(8);
        assert_eq!(period_of(Fault::PauseLeader, active, hold, 3), active);
        // A shorter period is stretched for pause-leader only.
        let short = Duration::from_secs(3);
        assert_eq!(
            period_of(Fault::PauseLeader, short, hold, 3),
            hold + PAUSE_LEADER_AFTER
        );
        assert_eq!(period_of(Fault::Pause, short, hold, 3), short);
        // A rolling restart gets what restarting every node takes.
        assert_eq!(
            period_of(Fault::RollingRestart, short, hold, 5),
            RESTART_EXPECTED * 5
        );
    }
}
