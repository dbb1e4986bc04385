//! `basalt admin`: cluster administration through any node's gRPC address (`--rpc`), over
//! mutual TLS with an administrator's certificate (`--certs-dir`, `certs::admin_tls`) when
//! the cluster has them; `basalt admin certs` makes the certificates (`certs`).
//!
//! Placement is read from every member: for each group, the view of the node that reports
//! itself its leader is the current one.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_cluster::admin::{
    AdminRequest, AdminResponse, GroupStatus, NodeState, SplitSettingsChange,
};
use basalt_cluster::cluster::admin_at;
use basalt_cluster::ids::{GroupId, NodeId};
use basalt_cluster::tls::PeerTls;
use serde_json::json;

#[derive(Debug, Clone, clap::Subcommand)]
pub enum AdminCommand {
    /// Print every group's state as the node sees it (`Status`: its leader, voters, learners,
    /// log and applied indexes, bytes; whether the node drains), the cluster's rebalancing
    /// (`Rebalance`, as `rebalance status` prints it), its version (`Upgrade`, as `upgrade
    /// status` prints it) and its slot map (`Slots`, as `slots` prints it).
    Status,
    /// Print the cluster's members.
    Members,
    /// Print each group's leader, voters and learners, as their leaders see them.
    Placement,
    /// Move the leadership of every group to another of its voters, picked at random.
    ShuffleLeaders,
    /// Print a digest of every group's state as this node holds it: replicas at the same
    /// applied index hold the same state exactly when their digests match.
    Digest,
    /// Take a node out of the cluster for good: mark it removed (its `/health?ready=1` answers
    /// 503 at once), move its replicas to the other nodes, waiting until it holds none (else
    /// name the groups still on it), then drain and stop it as `drain` does.
    RemoveNode {
        node_id: u64,
        /// Seconds to wait for its replicas to move, and then for it to stop.
        #[arg(long, default_value_t = 120)]
        wait_secs: u64,
        /// Leave the node running once it holds no replica.
        #[arg(long)]
        keep_running: bool,
    },
    /// Drain node N and stop it, as SIGTERM does: its `/health?ready=1` answers 503 at once,
    /// after its `--drain-wait` its leaderships move to other nodes, then it finishes the
    /// requests in flight and exits 0. Waits until it stopped answering.
    Drain {
        node_id: u64,
        /// Seconds to wait for it to stop.
        #[arg(long, default_value_t = 60)]
        wait_secs: u64,
    },
    /// Print the members whose disks are low or critical (their level, free and total bytes)
    /// and the groups whose replicas the last consistency check found differing.
    Alarms,
    /// Check that every group's replicas hold the same state: each replica hashes its state at
    /// one committed index; prints each group's digests and the replicas that differ, and
    /// exits 1 when any do (the finding stays an alarm until a check finds none).
    Check {
        /// Seconds to wait for the check.
        #[arg(long, default_value_t = 600)]
        wait_secs: u64,
    },
    /// Remove the disk ballast of the node `--rpc` names, giving its room back so that a full
    /// disk can be cleaned up (it is made again at a start with room for it).
    ReleaseBallast,
    /// Back the whole cluster up (`--to DIR | s3://bucket/prefix`): writes wait a moment at a
    /// fence while every group commits a barrier, then each group's leader writes its state as
    /// it was at the barrier into `<DEST>/<backup id>/`, with `manifest.json` last. A directory
    /// must be the same on every node's machine (a shared mount, or one machine).
    /// `backup verify SRC` checks a backup's every object against its manifest.
    #[command(args_conflicts_with_subcommands = true)]
    Backup {
        #[command(subcommand)]
        command: Option<BackupCommand>,
        /// Where to: an absolute directory (a relative one is taken from here) or
        /// s3://bucket/prefix (the nodes reach it with their --s3-* options and AWS_* variables).
        #[arg(long)]
        to: Option<String>,
        /// MB per second each node may write (default: no limit).
        #[arg(long)]
        rate: Option<f64>,
        /// Seconds to wait for the backup to be written.
        #[arg(long, default_value_t = 6 * 3600)]
        wait_secs: u64,
    },
    /// Make the first node of a new cluster from a backup, offline: checks the manifest, then
    /// installs every group's state (and the stored files it holds) in the new data dir,
    /// checking each object as it reads it. Start it with `basalt serve
    /// --node-id N --data-dir DIR --rpc-addr ADDR` (no --init), and join more nodes to it.
    Restore {
        /// The backup: `<DEST>/<backup id>` (a directory or s3://bucket/prefix/id).
        #[arg(long)]
        from: String,
        /// A new data dir for the node (it must not hold one).
        #[arg(long)]
        data_dir: std::path::PathBuf,
        /// The node's id in the new cluster.
        #[arg(long, default_value_t = 1)]
        node_id: u64,
        /// The gRPC address its peers will reach it at (the --rpc-addr it will start with).
        #[arg(long, default_value = "127.0.0.1:9080")]
        rpc_addr: String,
    },
    /// The rebalancer: `status` (each node's share, moves in flight and left), `pause` (no
    /// balancing move begins; repairs go on), `resume`, `limits` (replica moves per node,
    /// snapshot MB/s per node, leader moves per second). Prints the status.
    Rebalance {
        #[command(subcommand)]
        command: RebalanceCommand,
    },
    /// The cluster's version: `status` (the cluster version, whether it is finalized, the
    /// features that are on and pending, each member's build), `hold` (finalize nothing by
    /// itself, so the previous build can be brought back), `finalize` (turn on every feature
    /// all members have and end a hold: from then on an older build cannot start). Prints the
    /// status.
    Upgrade {
        #[command(subcommand)]
        command: UpgradeCommand,
    },
    /// Split data group G in two (hash slots, needs the `slots` feature finalized): half its
    /// slots go to a new group with the same voters once their objects are copied; writes to
    /// those objects wait for their batch's copy (503 "try again" after 10 s). The slots move
    /// in batches of about `--move-batch-kb` of the group (see `slots`), or `--batch-slots`.
    /// One split at a time. Prints the slot map; with `--wait-secs`, waits until the split is
    /// done.
    Split {
        group: u32,
        #[arg(long)]
        wait_secs: Option<u64>,
        /// Slots moved at a time (0: all at once).
        #[arg(long)]
        batch_slots: Option<u32>,
    },
    /// Merge every slot of data group G back into another (by default the group of its family
    /// holding fewest slots: for a split's child, the group it was split from). The source's
    /// objects are copied as a split copies them; writes to them wait for the copy (503 "try
    /// again" after 10 s). A source that began as a split's child is then retired: every node
    /// erases its replica, and its id is not taken again. One split or merge at a time. Prints
    /// the slot map; with `--wait-secs`, waits until the merge is done.
    Merge {
        group: u32,
        #[arg(long)]
        into: Option<u32>,
        #[arg(long)]
        wait_secs: Option<u64>,
        /// Slots moved at a time (0: all at once; default: as a split's).
        #[arg(long)]
        batch_slots: Option<u32>,
    },
    /// Print the slot map: its epoch, the slots each data group holds, the split under way,
    /// and when groups split by themselves (`auto`); the options change that first (0: never,
    /// except as said).
    Slots {
        /// Split a data group whose state passes this many MiB on disk (default 256).
        #[arg(long)]
        split_above_mb: Option<u32>,
        /// Split a data group that applied more than this many writes a second over the last
        /// minute (default 3000).
        #[arg(long)]
        split_above_writes_per_s: Option<u32>,
        /// Merge a group that began as a split's child back into its family's smallest group
        /// when the two hold less than this many MiB together and both are quiet (default 64).
        #[arg(long)]
        merge_below_mb: Option<u32>,
        /// Leave a split's or merge's groups alone this many seconds after it is done
        /// (default 600).
        #[arg(long)]
        settle_secs: Option<u32>,
        /// Move a split's or merge's slots in batches of about this many KiB of the group, at
        /// most a second of `--move-kb-per-s` (writes to a batch's slots wait for its copy;
        /// default 2048; 0: all at once). For splits and merges begun afterwards.
        #[arg(long)]
        move_batch_kb: Option<u32>,
        /// Copy and drop a split's or merge's objects at most about this many KiB a second on
        /// average, leaving the CPUs and disks to requests (default 1024; 0: no limit, as fast
        /// as the nodes can). Batches of splits and merges begun afterwards hold at most a
        /// second of it.
        #[arg(long)]
        move_kb_per_s: Option<u32>,
    },
    /// Make the cluster's certificates: a CA, nodes', administrators'.
    Certs {
        #[command(subcommand)]
        command: crate::certs::CertsCommand,
    },
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum UpgradeCommand {
    /// Print the cluster version, whether it is finalized, and each member's build.
    Status,
    /// Finalize nothing by itself until `finalize`: new features stay off, so every node can
    /// go back to the previous build.
    Hold,
    /// Turn on every feature all members' builds have (refused while a member runs an older
    /// build) and end a hold.
    Finalize,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum RebalanceCommand {
    /// Print each node's share, the moves in flight and how many are left.
    Status,
    /// Begin no balancing move until `resume` (moves in flight finish; replicas on removed
    /// nodes are still replaced and groups short of replicas still filled).
    Pause,
    Resume,
    /// Change the limits given; the others stay.
    Limits {
        /// Moves in flight each node may take part in (1 to 64; default 1).
        #[arg(long)]
        replica_moves_per_node: Option<u32>,
        /// MB per second each node may send in snapshots (0: no limit; default 64).
        #[arg(long)]
        snapshot_mb_per_s: Option<u32>,
        /// Preferred leaders changed per second (default 4).
        #[arg(long)]
        leader_moves_per_s: Option<f64>,
    },
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum BackupCommand {
    /// Check the backup in SRC (`<DEST>/<backup id>`, a directory or s3://bucket/prefix/id)
    /// without a cluster: every object is there, has its manifest's size and SHA-256, and holds
    /// a whole state. Exits 1, naming each bad object, when not.
    Verify { src: String },
}

const TIMEOUT: Duration = Duration::from_secs(15);

/// The slot map an answer to `Split` or `Slots` carries.
fn slots_answer(resp: AdminResponse) -> anyhow::Result<serde_json::Value> {
    match resp {
        AdminResponse::Slots(view) => Ok(view),
        other => anyhow::bail!("unexpected answer to a slots request: {other:?}"),
    }
}

/// With `wait_secs`, the slot map once no split or merge is under way (an error after that
/// long); without, `view` as it is.
async fn wait_slots_done(
    rpc: &str,
    tls: Option<&Arc<PeerTls>>,
    mut view: serde_json::Value,
    wait_secs: Option<u64>,
    what: &str,
) -> anyhow::Result<serde_json::Value> {
    let Some(wait_secs) = wait_secs else {
        return Ok(view);
    };
    let deadline = Instant::now() + Duration::from_secs(wait_secs);
    while view["splits"].as_array().is_some_and(|s| !s.is_empty()) {
        if Instant::now() > deadline {
            anyhow::bail!(
                "the {what} is not done after {wait_secs} s: {}",
                serde_json::to_string(&view["splits"])?
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        view = slots_answer(admin_at(rpc, AdminRequest::Slots, TIMEOUT, tls).await?)?;
    }
    Ok(view)
}

/// `spec` as the nodes and the checks take it: an s3:// address as it is, a directory made
/// absolute from where the command runs.
fn destination_spec(spec: &str) -> anyhow::Result<String> {
    if spec.starts_with("s3://") || Path::new(spec).is_absolute() {
        return Ok(spec.to_string());
    }
    Ok(std::env::current_dir()?.join(spec).display().to_string())
}

/// The backup at `spec` (`destination_spec`) to read: a directory must exist.
fn open_source(spec: &str) -> anyhow::Result<basalt_cluster::services::backup::Destination> {
    let spec = destination_spec(spec)?;
    basalt_cluster::services::backup::Destination::open_existing(&spec, None)?
        .ok_or_else(|| anyhow::anyhow!("{spec}: no such directory"))
}

async fn restore(
    from: &str,
    data_dir: std::path::PathBuf,
    node_id: u64,
    rpc_addr: String,
) -> anyhow::Result<()> {
    use basalt_cluster::cluster::RestoreTarget;
    let src = open_source(from)?;
    let target = RestoreTarget {
        data_dir: data_dir.clone(),
        node_id: NodeId::new(node_id),
        rpc_addr,
    };
    let manifest = basalt_cluster::Cluster::restore(&src, &target).await?;
    println!(
        "restored backup {} ({} groups, {} bytes of state) into {}; start it with: basalt serve \
         --node-id {node_id} --data-dir {} --rpc-addr {}",
        manifest.backup,
        manifest.groups.len(),
        manifest.state_bytes(),
        data_dir.display(),
        data_dir.display(),
        target.rpc_addr
    );
    Ok(())
}

async fn backup(
    rpc: &str,
    tls: Option<&Arc<PeerTls>>,
    command: Option<BackupCommand>,
    to: Option<String>,
    rate: Option<f64>,
    wait_secs: u64,
) -> anyhow::Result<()> {
    use basalt_cluster::services::backup::verify::verify;
    if let Some(BackupCommand::Verify { src }) = command {
        let src = open_source(&src)?;
        let report = verify(&src).await?;
        match &report.manifest {
            Some(m) => println!(
                "backup {} of {} groups, {} bytes of state, taken {}",
                m.backup,
                m.groups.len(),
                m.state_bytes(),
                chrono::DateTime::from_timestamp_millis(m.started_ms).unwrap_or_default()
            ),
            None => println!("{}: no readable manifest", src.shown()),
        }
        if let Some(m) = &report.manifest {
            let files = m.groups.iter().filter_map(|g| g.files.as_ref());
            let (copied, in_bucket, missing) = files.fold((0, 0, 0), |(c, b, x), f| {
                (c + f.copied, b + f.in_bucket, x + f.missing)
            });
            println!(
                "stored files: {copied} copied into it, {in_bucket} listed in their bucket, \
                 {missing} no copy of could be read when it was taken"
            );
        }
        if report.problems.is_empty() {
            println!("every object is whole");
            return Ok(());
        }
        for p in &report.problems {
            println!("{p}");
        }
        anyhow::bail!("{} problem(s) in {}", report.problems.len(), src.shown());
    }
    let Some(to) = to else {
        anyhow::bail!("say where to: backup --to DIR | s3://bucket/prefix (or backup verify SRC)");
    };
    let rate = match rate {
        Some(mb) if !(mb > 0.0 && mb.is_finite()) => {
            anyhow::bail!("--rate is MB per second, above 0")
        }
        Some(mb) => Some((mb * 1_000_000.0) as u64),
        None => None,
    };
    let req = basalt_cluster::admin::BackupRequest {
        dest: destination_spec(&to)?,
        rate,
        scheduled: false,
    };
    let resp = admin_at(
        rpc,
        AdminRequest::Backup(req),
        Duration::from_secs(wait_secs.max(1)),
        tls,
    )
    .await?;
    let AdminResponse::BackedUp(manifest) = resp else {
        anyhow::bail!("unexpected answer to Backup: {resp:?}");
    };
    println!("{}", serde_json::to_string_pretty(&manifest)?);
    Ok(())
}

type Tls = Option<Arc<PeerTls>>;

/// Asks node `node_id` (a member in state `state`) to drain and stop, as SIGTERM does, then
/// waits up to `wait_secs` until it stops answering.
async fn drain_and_stop(
    rpc: &str,
    node_id: NodeId,
    wait_secs: u64,
    tls: Option<&Arc<PeerTls>>,
    state: NodeState,
) -> anyhow::Result<()> {
    let AdminResponse::ClusterInfo { nodes, .. } =
        admin_at(rpc, AdminRequest::ClusterInfo, TIMEOUT, tls).await?
    else {
        anyhow::bail!("unexpected answer to ClusterInfo");
    };
    let Some(addr) = nodes
        .iter()
        .find(|n| n.id == node_id && n.state == state)
        .map(|n| n.rpc_addr.clone())
    else {
        match state {
            NodeState::Active => anyhow::bail!("node {node_id} is not an active member"),
            _ => anyhow::bail!("node {node_id} is not a member being removed"),
        }
    };
    if let Err(e) = admin_at(&addr, AdminRequest::Drain, TIMEOUT, tls).await {
        // A node being removed because it will not come back does not answer.
        let answers = admin_at(&addr, AdminRequest::Status, Duration::from_secs(2), tls)
            .await
            .is_ok();
        if state == NodeState::Removed && !answers {
            println!("node {node_id} does not answer: not running");
            return Ok(());
        }
        return Err(e.into());
    }
    println!("node {node_id} is draining; waiting for it to stop");
    let deadline = Instant::now() + Duration::from_secs(wait_secs);
    loop {
        let status = admin_at(&addr, AdminRequest::Status, Duration::from_secs(2), tls).await;
        if status.is_err() {
            println!("node {node_id} stopped");
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("node {node_id} is still running after {wait_secs} s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Each group's status as reported by its leader (groups without a reachable leader are absent).
pub async fn placement(rpc: &str, tls: &Tls) -> anyhow::Result<BTreeMap<GroupId, GroupStatus>> {
    let tls = tls.as_ref();
    let AdminResponse::ClusterInfo { nodes, .. } =
        admin_at(rpc, AdminRequest::ClusterInfo, TIMEOUT, tls).await?
    else {
        anyhow::bail!("unexpected answer to ClusterInfo");
    };
    let mut out = BTreeMap::new();
    for node in nodes
        .iter()
        .filter(|n| n.state == NodeState::Active || n.state == NodeState::Removed)
    {
        let Ok(AdminResponse::Status(status)) = admin_at(
            &node.rpc_addr,
            AdminRequest::Status,
            Duration::from_secs(3),
            tls,
        )
        .await
        else {
            continue;
        };
        for g in status.groups {
            if g.leader == Some(status.node_id) {
                out.insert(g.group, g);
            }
        }
    }
    Ok(out)
}

pub async fn run(rpc: &str, certs_dir: Option<&Path>, cmd: AdminCommand) -> anyhow::Result<()> {
    if let AdminCommand::Certs { command } = cmd {
        return crate::certs::run(command);
    }
    if let AdminCommand::Restore {
        from,
        data_dir,
        node_id,
        rpc_addr,
    } = cmd
    {
        return restore(&from, data_dir, node_id, rpc_addr).await;
    }
    let tls = crate::certs::admin_tls(certs_dir)?;
    let tls_ref = tls.as_ref();
    match cmd {
        AdminCommand::Certs { .. } | AdminCommand::Restore { .. } => {}
        AdminCommand::Check { wait_secs } => {
            let resp = admin_at(
                rpc,
                AdminRequest::Check,
                Duration::from_secs(wait_secs.max(1)),
                tls_ref,
            )
            .await?;
            let AdminResponse::Checked(report) = resp else {
                anyhow::bail!("unexpected answer to Check: {resp:?}");
            };
            println!("{}", serde_json::to_string_pretty(&report)?);
            let mismatched = report.mismatched();
            if !mismatched.is_empty() {
                for g in &mismatched {
                    eprintln!("group {}: replicas {:?} differ", g.group, g.differing);
                }
                anyhow::bail!("{} group(s) with differing replicas", mismatched.len());
            }
            let incomplete = report.incomplete();
            if !incomplete.is_empty() {
                for g in &incomplete {
                    eprintln!(
                        "group {}: not compared (unanswered {:?})",
                        g.group, g.unanswered
                    );
                }
                anyhow::bail!("{} group(s) not compared in full", incomplete.len());
            }
        }
        AdminCommand::Backup {
            command,
            to,
            rate,
            wait_secs,
        } => backup(rpc, tls_ref, command, to, rate, wait_secs).await?,
        AdminCommand::Status => {
            let resp = admin_at(rpc, AdminRequest::Status, TIMEOUT, tls_ref).await?;
            let mut out = serde_json::to_value(&resp)?;
            // The cluster's rebalancing beside the node's groups (a node of an older build
            // does not answer it).
            let rebalance = admin_at(
                rpc,
                AdminRequest::Rebalance(basalt_cluster::admin::RebalanceRequest::Status),
                TIMEOUT,
                tls_ref,
            )
            .await;
            if let (Ok(AdminResponse::Rebalance(r)), Some(obj)) = (rebalance, out.as_object_mut()) {
                obj.insert("Rebalance".into(), serde_json::to_value(r)?);
            }
            let upgrade = admin_at(
                rpc,
                AdminRequest::Upgrade(basalt_cluster::admin::UpgradeRequest::Status),
                TIMEOUT,
                tls_ref,
            )
            .await;
            if let (Ok(AdminResponse::Upgrade(u)), Some(obj)) = (upgrade, out.as_object_mut()) {
                obj.insert("Upgrade".into(), serde_json::to_value(u)?);
            }
            let slots = admin_at(rpc, AdminRequest::Slots, TIMEOUT, tls_ref).await;
            if let (Ok(AdminResponse::Slots(s)), Some(obj)) = (slots, out.as_object_mut()) {
                obj.insert("Slots".into(), s);
            }
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        AdminCommand::Digest => {
            let resp = admin_at(rpc, AdminRequest::Digest, TIMEOUT, tls_ref).await?;
            println!("{}", serde_json::to_string_pretty(&resp)?);
        }
        AdminCommand::Alarms => {
            let AdminResponse::ClusterInfo { nodes, .. } =
                admin_at(rpc, AdminRequest::ClusterInfo, TIMEOUT, tls_ref).await?
            else {
                anyhow::bail!("unexpected answer to ClusterInfo");
            };
            let mut alarms: Vec<_> = nodes
                .iter()
                .filter(|n| n.state == NodeState::Active)
                .filter_map(|n| n.disk_alarm())
                .collect();
            if let AdminResponse::Consistency(Some(c)) =
                admin_at(rpc, AdminRequest::ConsistencyAlarm, TIMEOUT, tls_ref).await?
            {
                for (group, nodes) in &c.groups {
                    alarms.push(
                        json!({"alarm": "consistency", "group": group, "nodes": nodes,
                        "check": c.check, "atMs": c.at_ms}),
                    );
                }
            }
            println!("{}", serde_json::to_string_pretty(&alarms)?);
        }
        AdminCommand::ReleaseBallast => {
            let resp = admin_at(rpc, AdminRequest::ReleaseBallast, TIMEOUT, tls_ref).await?;
            println!("{}", serde_json::to_string_pretty(&resp)?);
        }
        AdminCommand::Members => {
            let resp = admin_at(rpc, AdminRequest::ClusterInfo, TIMEOUT, tls_ref).await?;
            println!("{}", serde_json::to_string_pretty(&resp)?);
        }
        AdminCommand::Placement => {
            let p = placement(rpc, &tls).await?;
            let rows: BTreeMap<String, _> = p
                .iter()
                .map(|(g, s)| {
                    (
                        g.to_string(),
                        json!({"leader": s.leader, "voters": s.voters, "learners": s.learners}),
                    )
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        AdminCommand::ShuffleLeaders => {
            let AdminResponse::ClusterInfo { nodes, .. } =
                admin_at(rpc, AdminRequest::ClusterInfo, TIMEOUT, tls_ref).await?
            else {
                anyhow::bail!("unexpected answer to ClusterInfo");
            };
            let mut moved = 0;
            for (group, g) in placement(rpc, &tls).await? {
                let Some(leader) = g.leader else { continue };
                let others: Vec<NodeId> =
                    g.voters.iter().copied().filter(|&v| v != leader).collect();
                let Some(addr) = nodes
                    .iter()
                    .find(|n| n.id == leader)
                    .map(|n| n.rpc_addr.clone())
                else {
                    continue;
                };
                if others.is_empty() {
                    continue;
                }
                let to = others[rand::random_range(0..others.len())];
                if admin_at(
                    &addr,
                    AdminRequest::TransferLeader { group, to },
                    Duration::from_secs(3),
                    tls_ref,
                )
                .await
                .is_ok()
                {
                    moved += 1;
                }
            }
            println!("moved the leadership of {moved} groups");
        }
        AdminCommand::Rebalance { command } => {
            use basalt_cluster::admin::RebalanceRequest;
            let req = match command {
                RebalanceCommand::Status => RebalanceRequest::Status,
                RebalanceCommand::Pause => RebalanceRequest::Pause,
                RebalanceCommand::Resume => RebalanceRequest::Resume,
                RebalanceCommand::Limits {
                    replica_moves_per_node,
                    snapshot_mb_per_s,
                    leader_moves_per_s,
                } => RebalanceRequest::Limits {
                    replica_moves_per_node,
                    snapshot_mb_per_s,
                    leader_moves_per_s,
                },
            };
            let resp = admin_at(rpc, AdminRequest::Rebalance(req), TIMEOUT, tls_ref).await?;
            let AdminResponse::Rebalance(status) = resp else {
                anyhow::bail!("unexpected answer to Rebalance: {resp:?}");
            };
            println!("{}", serde_json::to_string_pretty(&status)?);
        }
        AdminCommand::Split {
            group,
            wait_secs,
            batch_slots,
        } => {
            let req = AdminRequest::Split {
                group: GroupId::new(group),
                batch_slots,
            };
            let view = slots_answer(admin_at(rpc, req, TIMEOUT, tls_ref).await?)?;
            let view = wait_slots_done(rpc, tls_ref, view, wait_secs, "split").await?;
            println!("{}", serde_json::to_string_pretty(&view)?);
        }
        AdminCommand::Merge {
            group,
            into,
            wait_secs,
            batch_slots,
        } => {
            let req = AdminRequest::Merge {
                group: GroupId::new(group),
                into: into.map(GroupId::new),
                batch_slots,
            };
            let view = slots_answer(admin_at(rpc, req, TIMEOUT, tls_ref).await?)?;
            let view = wait_slots_done(rpc, tls_ref, view, wait_secs, "merge").await?;
            println!("{}", serde_json::to_string_pretty(&view)?);
        }
        AdminCommand::Slots {
            split_above_mb,
            split_above_writes_per_s,
            merge_below_mb,
            settle_secs,
            move_batch_kb,
            move_kb_per_s,
        } => {
            let change = SplitSettingsChange {
                split_above_mb,
                split_above_writes_per_s,
                merge_below_mb,
                settle_secs,
                move_batch_kb,
                move_kb_per_s,
            };
            let req = if change.is_empty() {
                AdminRequest::Slots
            } else {
                AdminRequest::SplitSettings(change)
            };
            let view = slots_answer(admin_at(rpc, req, TIMEOUT, tls_ref).await?)?;
            // A node of a build without the setting takes the rest and drops it.
            if move_kb_per_s.is_some() && view["auto"].get("moveKbPerS").is_none() {
                eprintln!(
                    "warning: the cluster's metadata leader runs a build without --move-kb-per-s: \
                     the rate is not kept (upgrade every node first)"
                );
            }
            println!("{}", serde_json::to_string_pretty(&view)?);
        }
        AdminCommand::Upgrade { command } => {
            use basalt_cluster::admin::UpgradeRequest;
            let req = match command {
                UpgradeCommand::Status => UpgradeRequest::Status,
                UpgradeCommand::Hold => UpgradeRequest::Hold,
                UpgradeCommand::Finalize => UpgradeRequest::Finalize,
            };
            let resp = admin_at(rpc, AdminRequest::Upgrade(req), TIMEOUT, tls_ref).await?;
            let AdminResponse::Upgrade(status) = resp else {
                anyhow::bail!("unexpected answer to Upgrade: {resp:?}");
            };
            println!("{}", serde_json::to_string_pretty(&status)?);
        }
        AdminCommand::Drain { node_id, wait_secs } => {
            drain_and_stop(
                rpc,
                NodeId::new(node_id),
                wait_secs,
                tls_ref,
                NodeState::Active,
            )
            .await?;
        }
        AdminCommand::RemoveNode {
            node_id,
            wait_secs,
            keep_running,
        } => {
            let node_id = NodeId::new(node_id);
            admin_at(rpc, AdminRequest::RemoveNode(node_id), TIMEOUT, tls_ref).await?;
            println!("node {node_id} marked removed; waiting for its replicas to move");
            let deadline = Instant::now() + Duration::from_secs(wait_secs);
            loop {
                let p = placement(rpc, &tls).await?;
                let left = p.values().filter(|g| g.hosts(node_id)).count();
                if left == 0 && !p.is_empty() {
                    if keep_running {
                        println!("node {node_id} holds no replicas; it can be stopped");
                    } else {
                        println!("node {node_id} holds no replicas; stopping it");
                        drain_and_stop(rpc, node_id, wait_secs, tls_ref, NodeState::Removed)
                            .await?;
                    }
                    return Ok(());
                }
                if Instant::now() > deadline {
                    // What blocks: the groups still on it, with the members they have.
                    let blocked: Vec<String> = p
                        .iter()
                        .filter(|(_, g)| g.hosts(node_id))
                        .map(|(group, g)| {
                            format!(
                                "group {group} (voters {:?}, learners {:?})",
                                g.voters, g.learners
                            )
                        })
                        .collect();
                    anyhow::bail!(
                        "node {node_id} still holds {left} replicas: {}. Each needs another \
                         active member with room to take it (`basalt admin members`, \
                         `basalt admin alarms`)",
                        blocked.join(", ")
                    );
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    Ok(())
}
