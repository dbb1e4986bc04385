//! `basalt dev`: a local cluster of N node processes for development.
//!
//! Node i serves HTTP on `http_port + i - 1` and gRPC on `rpc_port + i - 1` (by default
//! `rpc_port` is `http_port + 1000`, so dev clusters on other HTTP ports do not collide), with
//! its data in `<data-dir>/node<i>`. Node 1 initialises the cluster, the others join it; started again on
//! the same data dir, every node resumes its part of the same cluster. Ctrl-C or SIGTERM stops
//! them all. Every option of `serve` that is not about one node (`serve::ServiceArgs`: header
//! brand, SMTP, SMS webhook, public URL, timeouts, limits, ...) is passed to all nodes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::bootstrap::{describe, CREDENTIALS_FILE};

use crate::serve::DEV_CHILD_ENV;

/// Options of `basalt dev`: the local cluster's shape, and every option its nodes share
/// (passed to each node).
#[derive(Debug, Clone, clap::Args)]
pub struct DevArgs {
    /// Number of node processes.
    #[arg(long, default_value_t = 1, env = "BASALT_NODES")]
    pub nodes: u32,
    /// Directory holding every node's data.
    #[arg(long, default_value = "./data", env = "BASALT_DATA_DIR")]
    pub data_dir: PathBuf,
    /// HTTP port of node 1 (node i uses port + i - 1).
    #[arg(long, default_value_t = 8080, env = "BASALT_HTTP_PORT")]
    pub http_port: u16,
    /// gRPC (peer) port of node 1 (node i uses port + i - 1); by default `--http-port` + 1000.
    #[arg(long, env = "BASALT_RPC_PORT")]
    pub rpc_port: Option<u16>,
    /// Data shards of a new cluster.
    #[arg(long, default_value_t = 16, env = "BASALT_SHARDS")]
    pub shards: u32,
    /// Replicas per group of a new cluster.
    #[arg(long, default_value_t = 3, env = "BASALT_REPLICAS")]
    pub replicas: u32,
    /// Run the nodes' peer links in plaintext instead of making a CA and certificates in the
    /// data dir (`<data-dir>/certs`, `<data-dir>/node<i>/certs`) and using mutual TLS.
    #[arg(long, env = "BASALT_INSECURE")]
    pub insecure: bool,
    #[command(flatten)]
    pub service: crate::serve::ServiceArgs,
}

/// True when `GET /health` at `addr` answers 200.
pub async fn health_ok(addr: &str, https: bool) -> bool {
    if https {
        // The node's own certificate, on loopback: what is probed is that it serves, not who
        // signed its certificate (clients verify that).
        let Ok(client) = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(2))
            .build()
        else {
            return false;
        };
        return matches!(
            client.get(format!("https://{addr}/health")).send().await,
            Ok(r) if r.status() == reqwest::StatusCode::OK
        );
    }
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        Some(buf.starts_with(b"HTTP/1.1 200") || buf.starts_with(b"HTTP/1.0 200"))
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

fn terminate(child: &Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status();
    }
}

async fn stop_all(children: &mut [Child]) {
    for c in children.iter() {
        terminate(c);
    }
    for c in children.iter_mut() {
        if tokio::time::timeout(Duration::from_secs(10), c.wait())
            .await
            .is_err()
        {
            let _ = c.kill().await;
        }
    }
}

impl DevArgs {
    /// The peer port of node 1: `--rpc-port`, else `--http-port` + 1000.
    pub fn rpc_base(&self) -> anyhow::Result<u16> {
        match self.rpc_port {
            Some(p) => Ok(p),
            None => self.http_port.checked_add(1000).ok_or_else(|| {
                anyhow::anyhow!(
                    "--http-port {} leaves no room for the peer ports: give --rpc-port",
                    self.http_port
                )
            }),
        }
    }

    /// Node `i`'s HTTP and peer addresses.
    fn addrs(&self, i: u32) -> anyhow::Result<(String, String)> {
        let port = |base: u16| {
            u16::try_from(u32::from(base) + i - 1)
                .map_err(|_| anyhow::anyhow!("node {i}'s port is past 65535"))
        };
        Ok((
            format!("127.0.0.1:{}", port(self.http_port)?),
            format!("127.0.0.1:{}", port(self.rpc_base()?)?),
        ))
    }
}

/// Node `i`'s data dir.
fn node_dir(args: &DevArgs, i: u32) -> PathBuf {
    args.data_dir.join(format!("node{i}"))
}

/// The nodes' certificates, made on first start (and for nodes added since).
fn ensure_certs(args: &DevArgs) -> anyhow::Result<()> {
    let nodes: Vec<_> = (1..=args.nodes)
        .map(|i| {
            (
                basalt_cluster::ids::NodeId::new(u64::from(i)),
                node_dir(args, i),
            )
        })
        .collect();
    let rpc = (1..=args.nodes)
        .map(|i| args.addrs(i).map(|(_, rpc)| rpc))
        .collect::<anyhow::Result<Vec<String>>>()?;
    crate::certs::ensure_dev(&args.data_dir, &nodes, &rpc)
}

fn spawn_node(exe: &Path, args: &DevArgs, shared: &[String], i: u32) -> anyhow::Result<Child> {
    let (http, rpc) = args.addrs(i)?;
    let mut cmd = Command::new(exe);
    // Every option is on the node's command line: the parent's `BASALT_*` variables (which
    // name the parent's own ports and data dir) must not reach it.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BASALT_") {
            cmd.env_remove(name);
        }
    }
    // The bucket's secret goes by environment, not on command lines other users can read.
    if let Some(secret) = &args.service.s3_secret_access_key {
        cmd.env("BASALT_S3_SECRET_ACCESS_KEY", secret);
    }
    if let Some(token) = &args.service.metrics_token {
        cmd.env("BASALT_METRICS_TOKEN", token);
    }
    // The console account the cluster is initialised with (bootstrap), to the node that does.
    if i == 1 {
        for name in ["BASALT_ADMIN_EMAIL", "BASALT_ADMIN_PASSWORD"] {
            if let Some(value) = std::env::var_os(name) {
                cmd.env(name, value);
            }
        }
    }
    cmd.arg("serve")
        .args(shared)
        .arg("--node-id")
        .arg(i.to_string())
        .arg("--data-dir")
        .arg(node_dir(args, i))
        .arg("--http-addr")
        .arg(&http)
        .arg("--rpc-addr")
        .arg(&rpc)
        .env(DEV_CHILD_ENV, "1")
        // Stopping a dev cluster stops every node together: none waits for a proxy.
        .args(["--drain-wait", "0"])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if !args.insecure {
        cmd.arg("--certs-dir")
            .arg(crate::certs::dev_node_dir(&node_dir(args, i)));
    }
    if i == 1 {
        cmd.arg("--init")
            .arg("--shards")
            .arg(args.shards.to_string())
            .arg("--replicas")
            .arg(args.replicas.to_string());
    } else {
        cmd.arg("--join").arg(args.addrs(1)?.1);
    }
    Ok(cmd.spawn()?)
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.nodes >= 1, "--nodes must be at least 1");
    std::fs::create_dir_all(&args.data_dir)?;
    if !args.insecure {
        ensure_certs(&args)?;
    }
    let exe = std::env::current_exe()?;
    let shared = args.service.to_args()?;
    let mut children = Vec::new();
    for i in 1..=args.nodes {
        children.push(spawn_node(&exe, &args, &shared, i)?);
    }
    let result = wait_and_serve(&args, &mut children).await;
    stop_all(&mut children).await;
    println!("all nodes stopped");
    result
}

async fn wait_and_serve(args: &DevArgs, children: &mut [Child]) -> anyhow::Result<()> {
    let addrs = (1..=args.nodes)
        .map(|i| args.addrs(i))
        .collect::<anyhow::Result<Vec<(String, String)>>>()?;
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut signal = Box::pin(crate::drain::stop_signal());
    for (addr, _) in &addrs {
        loop {
            if health_ok(addr, args.service.tls_cert.is_some()).await {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "node at {addr} did not become ready"
            );
            for c in children.iter_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    anyhow::bail!("a node exited during start-up ({status})");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(300)) => {}
                _ = &mut signal => return Ok(()),
            }
        }
    }
    let creds_path = args.data_dir.join("node1").join(CREDENTIALS_FILE);
    while !creds_path.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if let Ok(text) = std::fs::read_to_string(&creds_path) {
        if let Ok(doc) = serde_json::from_str(&text) {
            println!("{}", describe(&doc));
        }
    }
    let scheme = if args.service.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    for (i, (addr, rpc)) in addrs.iter().enumerate() {
        println!(
            "node {} serving HTTP at {scheme}://{addr} (peer port {rpc})",
            i + 1
        );
    }
    if args.insecure {
        println!("peer links are plaintext (--insecure)");
    } else {
        println!(
            "peer links use mutual TLS; administer with: basalt admin --rpc {} --certs-dir {} status",
            addrs.first().map(|a| a.1.as_str()).unwrap_or_default(),
            crate::certs::dev_admin_dir(&args.data_dir).display()
        );
    }
    println!("Ctrl-C stops the cluster.");
    signal.await;
    Ok(())
}
