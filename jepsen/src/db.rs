//! The cluster under test: real `basalt serve` processes on loopback, each with its own data
//! dir and log, peers talking through the harness's proxies (`proxy`). Processes are killed,
//! paused, restarted, removed and replaced here; every process started is reaped when the
//! `Db` is dropped, also when a check fails or the run panics. The nodes speak mutual TLS to
//! each other, as a production cluster does: a CA and each node's certificate are made with
//! `basalt admin certs` in the run's directory (`certs/`), and `basalt admin` uses an
//! administrator's certificate. With `Db::start_on_volumes`, each node slot's data lives on a
//! tmpfs of its own (`Volumes`: `unshare -rm` and `nsenter`, no privilege needed), which the
//! `disk-full` nemesis fills and empties.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use basalt_client::ports::free_port;
use basalt_client::volumes::Volumes;
use basalt_client::{AppKeys, Client};
use serde_json::Value;

use crate::proxy::{source_ip, Net};

pub struct NodeProc {
    /// Cluster node id (a replaced node gets a fresh one).
    pub id: u64,
    pub http: String,
    pub rpc_listen: SocketAddr,
    /// The proxy address peers dial.
    pub rpc_proxy: SocketAddr,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    pub paused: bool,
    /// The process whose namespaces the node runs in (`Volumes`), if any.
    namespace_of: Option<u32>,
    /// It runs the previous build (`Db::previous`) rather than `Db::bin`.
    pub runs_previous: bool,
}

/// A build of `basalt` nodes may run instead of `Db::bin`: the previous release, for the
/// rolling-upgrade nemesis, with environment of its own.
#[derive(Debug, Clone)]
pub struct Build {
    pub bin: PathBuf,
    pub env: Vec<(String, String)>,
}

pub struct Db {
    pub bin: PathBuf,
    /// The previous build: the cluster starts on it, and `upgrade` moves a node to `bin`.
    pub previous: Option<Build>,
    /// A node was upgraded: nodes added from then on run `bin`.
    upgrading: bool,
    pub dir: PathBuf,
    pub nodes: Vec<NodeProc>,
    pub net: Net,
    pub keys: Option<AppKeys>,
    next_id: u64,
    shards: u32,
    volumes: Option<Volumes>,
}

impl Db {
    /// Starts an `n`-node cluster with `shards` data shards; returns once every node is healthy
    /// and every group has min(3, n) voters.
    pub async fn start(bin: &Path, dir: &Path, n: usize, shards: u32) -> anyhow::Result<Db> {
        Self::start_on(bin, dir, n, shards, None, None).await
    }

    /// As `start`, every node running `previous` until `upgrade` moves it to `bin`.
    pub async fn start_previous(
        bin: &Path,
        previous: Build,
        dir: &Path,
        n: usize,
        shards: u32,
    ) -> anyhow::Result<Db> {
        Self::start_on(bin, dir, n, shards, None, Some(previous)).await
    }

    /// As `start`, each node slot's data on a tmpfs of `mb` MiB (`Volumes`).
    pub async fn start_on_volumes(
        bin: &Path,
        dir: &Path,
        n: usize,
        shards: u32,
        mb: u64,
    ) -> anyhow::Result<Db> {
        Self::start_on(bin, dir, n, shards, Some(mb), None).await
    }

    async fn start_on(
        bin: &Path,
        dir: &Path,
        n: usize,
        shards: u32,
        volume_mb: Option<u64>,
        previous: Option<Build>,
    ) -> anyhow::Result<Db> {
        std::fs::create_dir_all(dir)?;
        let volumes = match volume_mb {
            Some(mb) => Some(Volumes::make(dir, n, mb)?),
            None => None,
        };
        let mut db = Db {
            bin: bin.to_path_buf(),
            previous,
            upgrading: false,
            dir: dir.to_path_buf(),
            nodes: Vec::new(),
            net: Net::default(),
            keys: None,
            next_id: 1,
            shards,
            volumes,
        };
        db.certs(&["create-ca", "--ca-dir", &db.ca_dir().display().to_string()])?;
        let (ca, admin) = (db.ca_dir(), db.admin_certs());
        db.certs(&[
            "create-admin",
            "--ca-dir",
            &ca.display().to_string(),
            "--out",
            &admin.display().to_string(),
        ])?;
        for i in 0..n {
            db.add_node(i == 0).await?;
        }
        let creds = db.nodes[0].data_dir.join("credentials.json");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !creds.exists() {
            if Instant::now() > deadline {
                bail!("node 1 wrote no credentials.json");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&creds)?)?;
        db.keys = Some(serde_json::from_value(doc["app"].clone())?);
        db.wait_settled(Duration::from_secs(120)).await?;
        Ok(db)
    }

    fn ca_dir(&self) -> PathBuf {
        self.dir.join("certs").join("ca")
    }

    fn admin_certs(&self) -> PathBuf {
        self.dir.join("certs").join("admin")
    }

    /// Node `id`'s certificates directory, made (by the run's CA) when it has none yet.
    fn node_certs(&self, id: u64, addr: SocketAddr) -> anyhow::Result<PathBuf> {
        let dir = self.dir.join("certs").join(format!("node{id}"));
        if !dir.join("node.pem").exists() {
            self.certs(&[
                "create-node",
                "--ca-dir",
                &self.ca_dir().display().to_string(),
                "--node-id",
                &id.to_string(),
                "--addr",
                &addr.to_string(),
                "--out",
                &dir.display().to_string(),
            ])?;
        }
        Ok(dir)
    }

    /// `basalt admin certs <args>`.
    fn certs(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = Command::new(&self.bin)
            .args(["admin", "certs"])
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "basalt admin certs {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Adds a node with a fresh id (the first one initialises the cluster).
    pub async fn add_node(&mut self, init: bool) -> anyhow::Result<usize> {
        let index = self.nodes.len();
        let id = self.next_id;
        self.next_id += 1;
        let http = format!("127.0.0.1:{}", free_port()?);
        let rpc_listen: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let rpc_proxy: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        self.net.start_proxy(index, rpc_proxy, rpc_listen).await?;
        let data_dir = self.dir.join(format!("n{index}-id{id}"));
        if let Some(v) = &self.volumes {
            v.place(index, id, &data_dir)?;
        }
        let certs = self.node_certs(id, rpc_proxy)?;
        let mut args: Vec<String> = [
            "serve",
            "--certs-dir",
            &certs.display().to_string(),
            "--node-id",
            &id.to_string(),
            "--data-dir",
            &data_dir.display().to_string(),
            "--http-addr",
            &http,
            "--rpc-addr",
            &rpc_listen.to_string(),
            "--rpc-advertise",
            &rpc_proxy.to_string(),
            "--rpc-source-ip",
            &source_ip(index).to_string(),
            "--snapshot-logs",
            "2000",
            "--keep-logs",
            "200",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if init {
            args.extend([
                "--init".to_string(),
                "--shards".to_string(),
                self.shards.to_string(),
            ]);
        } else {
            args.extend(["--join".to_string(), self.nodes[0].rpc_proxy.to_string()]);
        }
        let log = self.dir.join(format!("node-{index}-id{id}.log"));
        let mut node = NodeProc {
            id,
            http,
            rpc_listen,
            rpc_proxy,
            data_dir,
            log,
            args,
            child: None,
            paused: false,
            namespace_of: self.volumes.as_ref().map(Volumes::holder_pid),
            runs_previous: self.previous.is_some() && !self.upgrading,
        };
        let (bin, env) = build_of(&self.bin, &self.previous, &node);
        spawn(bin, env, &mut node)?;
        self.nodes.push(node);
        self.wait_healthy(index, Duration::from_secs(90)).await?;
        Ok(index)
    }

    pub fn client(&self, i: usize, timeout: Duration) -> anyhow::Result<Client> {
        Ok(
            Client::new(&format!("http://{}", self.nodes[i].http), self.keys.clone())?
                .with_timeout(timeout)?,
        )
    }

    pub async fn wait_healthy(&self, i: usize, timeout: Duration) -> anyhow::Result<()> {
        let client = Client::new(&format!("http://{}", self.nodes[i].http), None)?
            .with_timeout(Duration::from_secs(2))?;
        let deadline = Instant::now() + timeout;
        while !client.healthy().await {
            if Instant::now() > deadline {
                bail!("node {} did not become healthy", i + 1);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// Waits until every group (the first ones, and any a split made) has a leader and
    /// min(3, live nodes) voters.
    pub async fn wait_settled(&self, timeout: Duration) -> anyhow::Result<()> {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].child.is_some())
            .collect();
        let want = live.len().min(3);
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(&first) = live.first() {
                if let Ok(p) = self.placement(first) {
                    let groups: Vec<&Value> = p
                        .as_object()
                        .map(|m| m.values().collect())
                        .unwrap_or_default();
                    // Splits add groups to the first ones.
                    if groups.len() > self.shards as usize
                        && groups
                            .iter()
                            .all(|g| g["voters"].as_array().map_or(0, Vec::len) == want)
                    {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                bail!("placement did not settle");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// `basalt admin --rpc <node i> <args>`.
    pub fn admin(&self, i: usize, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(&self.bin)
            .arg("admin")
            .arg("--rpc")
            .arg(self.nodes[i].rpc_listen.to_string())
            .arg("--certs-dir")
            .arg(self.admin_certs())
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "basalt admin {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn placement(&self, i: usize) -> anyhow::Result<Value> {
        Ok(serde_json::from_str(&self.admin(i, &["placement"])?)?)
    }

    /// The node (index) leading the most groups, among running nodes.
    pub fn busiest_leader(&self) -> Option<usize> {
        let live = (0..self.nodes.len())
            .find(|&i| self.nodes[i].child.is_some() && !self.nodes[i].paused)?;
        let p = self.placement(live).ok()?;
        let mut counts = vec![0usize; self.nodes.len()];
        for g in p.as_object()?.values() {
            if let Some(l) = g["leader"].as_u64() {
                if let Some(i) = self.nodes.iter().position(|n| n.id == l) {
                    counts[i] += 1;
                }
            }
        }
        (0..counts.len()).max_by_key(|&i| counts[i])
    }

    /// Every group's leader as the running, unpaused nodes report it (`basalt admin status`):
    /// group id → (term, leader's node index). For each group the report with the highest term
    /// wins; a group whose latest term has no known leader (an election under way) is left out,
    /// and so is a node that does not answer.
    pub fn group_leaders(&self) -> BTreeMap<u64, (u64, usize)> {
        let mut seen: BTreeMap<u64, (u64, Option<usize>)> = BTreeMap::new();
        for i in 0..self.nodes.len() {
            if !self.is_running(i) || self.nodes[i].paused {
                continue;
            }
            let Ok(out) = self.admin(i, &["status"]) else {
                continue;
            };
            let Ok(status) = serde_json::from_str::<Value>(&out) else {
                continue;
            };
            let Some(groups) = status["Status"]["groups"].as_array() else {
                continue;
            };
            for g in groups {
                let (Some(group), Some(term)) = (g["group"].as_u64(), g["term"].as_u64()) else {
                    continue;
                };
                let leader = g["leader"]
                    .as_u64()
                    .and_then(|id| self.nodes.iter().position(|n| n.id == id));
                let entry = seen.entry(group).or_insert((term, leader));
                if term > entry.0 || (term == entry.0 && entry.1.is_none()) {
                    *entry = (term, leader);
                }
            }
        }
        seen.into_iter()
            .filter_map(|(group, (term, leader))| leader.map(|l| (group, (term, l))))
            .collect()
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    pub fn kill(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        if node.paused {
            signal(node, "-CONT");
            node.paused = false;
        }
        if let Some(mut c) = node.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops node `i` as an operator does: SIGTERM, then waits (at most `within`) for it to
    /// drain and exit; killed when it has not by then. Its exit status, or what happened.
    pub async fn stop_gracefully(&mut self, i: usize, within: Duration) -> String {
        let node = &mut self.nodes[i];
        if node.paused {
            signal(node, "-CONT");
            node.paused = false;
        }
        if node.child.is_none() {
            return "not running".into();
        }
        signal(node, "-TERM");
        let deadline = Instant::now() + within;
        loop {
            let Some(child) = node.child.as_mut() else {
                return "not running".into();
            };
            match child.try_wait() {
                Ok(Some(status)) => {
                    node.child = None;
                    return format!(
                        "exited {}",
                        status
                            .code()
                            .map_or("by a signal".to_string(), |c| c.to_string())
                    );
                }
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    node.child = None;
                    return format!("killed: still running {} s after SIGTERM", within.as_secs());
                }
            }
        }
    }

    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        if self.nodes[i].child.is_none() {
            let (bin, env) = build_of(&self.bin, &self.previous, &self.nodes[i]);
            spawn(bin, env, &mut self.nodes[i])?;
        }
        Ok(())
    }

    /// Node `i` runs `bin` from its next start on (the rolling-upgrade nemesis), as does every
    /// node added from now on.
    pub fn upgrade(&mut self, i: usize) {
        self.nodes[i].runs_previous = false;
        self.upgrading = true;
    }

    pub fn pause(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        if node.child.is_some() && !node.paused {
            signal(node, "-STOP");
            node.paused = true;
        }
    }

    pub fn resume(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        if node.paused {
            signal(node, "-CONT");
            node.paused = false;
        }
    }

    /// Removes node `i` from the cluster (its replicas move away), stops it, and starts a
    /// replacement with a fresh id and empty data dir in its slot.
    pub async fn replace(&mut self, i: usize) -> anyhow::Result<()> {
        let other = (0..self.nodes.len())
            .find(|&j| j != i && self.is_running(j))
            .context("no other live node")?;
        let id = self.nodes[i].id.to_string();
        self.admin(other, &["remove-node", &id, "--wait-secs", "120"])?;
        self.kill(i);
        // A fresh node: new id, new data dir, same slot (and proxy address).
        let new_id = self.next_id;
        self.next_id += 1;
        let certs = self.node_certs(new_id, self.nodes[i].rpc_proxy)?;
        let data_dir = self.dir.join(format!("n{i}-id{new_id}"));
        if let Some(v) = &self.volumes {
            // The removed node's data goes with it: its slot's disk is the new node's.
            let old = self.nodes[i].id;
            let gone = v.mounts[i].join(format!("id{old}")).display().to_string();
            v.run(&["rm", "-rf", &gone])?;
            v.place(i, new_id, &data_dir)?;
        }
        let node = &mut self.nodes[i];
        node.id = new_id;
        node.data_dir = data_dir;
        node.log = self.dir.join(format!("node-{i}-id{new_id}.log"));
        let mut args: Vec<String> = Vec::new();
        let mut it = node.args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--node-id" => {
                    args.extend(["--node-id".to_string(), new_id.to_string()]);
                    it.next();
                }
                "--data-dir" => {
                    args.extend([
                        "--data-dir".to_string(),
                        node.data_dir.display().to_string(),
                    ]);
                    it.next();
                }
                "--certs-dir" => {
                    args.extend(["--certs-dir".to_string(), certs.display().to_string()]);
                    it.next();
                }
                "--init" => {}
                "--shards" => {
                    it.next();
                }
                "--join" => {
                    it.next();
                }
                _ => args.push(a.clone()),
            }
        }
        args.extend([
            "--join".to_string(),
            self.nodes[other].rpc_proxy.to_string(),
        ]);
        self.nodes[i].args = args;
        self.nodes[i].runs_previous = self.previous.is_some() && !self.upgrading;
        self.restart(i)?;
        self.wait_healthy(i, Duration::from_secs(90)).await
    }

    /// Fills node `i`'s disk until `leave` bytes are free (a `disk-full` fault); the bytes
    /// written. Only on volumes.
    pub fn fill_disk(&self, i: usize, leave: u64) -> anyhow::Result<u64> {
        self.volumes
            .as_ref()
            .context("the nodes' disks are not volumes of their own")?
            .fill(i, leave)
    }

    /// Ends every fault: resumes paused nodes, restarts killed ones, heals the network, frees
    /// filled disks.
    pub async fn heal_all(&mut self) -> anyhow::Result<()> {
        self.net.heal();
        if let Some(v) = &self.volumes {
            v.empty()?;
        }
        for i in 0..self.nodes.len() {
            self.resume(i);
            self.restart(i)?;
        }
        for i in 0..self.nodes.len() {
            self.wait_healthy(i, Duration::from_secs(90)).await?;
        }
        Ok(())
    }

    pub fn stop_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        self.net.shutdown();
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The binary and environment `node` runs: the previous build's while it runs that.
fn build_of<'a>(
    bin: &'a Path,
    previous: &'a Option<Build>,
    node: &NodeProc,
) -> (&'a Path, &'a [(String, String)]) {
    match previous {
        Some(p) if node.runs_previous => (&p.bin, &p.env),
        _ => (bin, &[]),
    }
}

fn spawn(bin: &Path, env: &[(String, String)], node: &mut NodeProc) -> anyhow::Result<()> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&node.log)?;
    let mut command = match node.namespace_of {
        Some(pid) => {
            let mut c = Command::new("nsenter");
            c.args(["-U", "-m", "-t", &pid.to_string(), "--"]).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let child = command
        .args(&node.args)
        .env("RUST_LOG", "info,openraft=error")
        .envs(env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    node.child = Some(child);
    node.paused = false;
    Ok(())
}

fn signal(node: &NodeProc, sig: &str) {
    if let Some(c) = &node.child {
        let _ = Command::new("kill")
            .arg(sig)
            .arg(c.id().to_string())
            .status();
    }
}
