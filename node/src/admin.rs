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

use basalt_cluster::admin::{AdminRequest, AdminResponse, GroupStatus, NodeState};
use basalt_cluster::cluster::admin_at;
use basalt_cluster::ids::{GroupId, NodeId};
use basalt_cluster::tls::PeerTls;
use serde_json::json;

#[derive(Debug, Clone, clap::Subcommand)]
pub enum AdminCommand {
    /// Print every group's state as the node sees it.
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
    /// Move a node's replicas to the other nodes and mark it removed; waits until it holds none.
    RemoveNode {
        node_id: u64,
        /// Seconds to wait for its replicas to move.
        #[arg(long, default_value_t = 120)]
        wait_secs: u64,
    },
    /// Print the members whose disks are low or critical (their level, free and total bytes).
    Alarms,
    /// Remove the disk ballast of the node `--rpc` names, giving its room back so that a full
    /// disk can be cleaned up (it is made again at a start with room for it).
    ReleaseBallast,
    /// Make the cluster's certificates: a CA, nodes', administrators'.
    Certs {
        #[command(subcommand)]
        command: crate::certs::CertsCommand,
    },
}

const TIMEOUT: Duration = Duration::from_secs(15);

type Tls = Option<Arc<PeerTls>>;

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
    let tls = crate::certs::admin_tls(certs_dir)?;
    let tls_ref = tls.as_ref();
    match cmd {
        AdminCommand::Certs { .. } => {}
        AdminCommand::Status => {
            let resp = admin_at(rpc, AdminRequest::Status, TIMEOUT, tls_ref).await?;
            println!("{}", serde_json::to_string_pretty(&resp)?);
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
            let alarms: Vec<_> = nodes
                .iter()
                .filter(|n| n.state == NodeState::Active)
                .filter_map(|n| n.disk_alarm())
                .collect();
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
        AdminCommand::RemoveNode { node_id, wait_secs } => {
            let node_id = NodeId::new(node_id);
            admin_at(rpc, AdminRequest::RemoveNode(node_id), TIMEOUT, tls_ref).await?;
            println!("node {node_id} marked removed; waiting for its replicas to move");
            let deadline = Instant::now() + Duration::from_secs(wait_secs);
            loop {
                let p = placement(rpc, &tls).await?;
                let left = p.values().filter(|g| g.hosts(node_id)).count();
                if left == 0 && !p.is_empty() {
                    println!("node {node_id} holds no replicas; it can be stopped");
                    return Ok(());
                }
                if Instant::now() > deadline {
                    anyhow::bail!("node {node_id} still holds {left} replicas");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    Ok(())
}
