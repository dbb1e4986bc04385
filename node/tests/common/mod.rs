//! Test harness: starts real `basalt serve` processes on loopback with their own data dirs,
//! and stops (or kills) them. Only one cluster runs at a time in a test binary, so tests do not
//! starve each other of the two cores. Node logs are printed when a test fails.
#![allow(dead_code)]

pub mod platforms;
pub mod push;
pub mod s3;
pub mod scenario;
pub mod smtp;
pub mod webhook;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use basalt_client::volumes::Volumes;
use basalt_client::{AppKeys, Client};
use serde_json::Value;

static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Serves `app` on a free loopback port until the test process ends; the port.
pub async fn serve_on_loopback(app: axum::Router) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    port
}

/// Holds the one-cluster-at-a-time lock for a test that starts processes itself.
pub fn exclusive() -> MutexGuard<'static, ()> {
    ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A loopback port nothing listens on now, for a node to bind (`basalt_client::ports`).
/// The `node` package's directory: as `cargo test` says when it runs the test (a binary built
/// from a checkout elsewhere into a shared target dir still finds this checkout's files), else
/// where it was built.
pub fn package_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

pub fn free_port() -> u16 {
    basalt_client::ports::free_port().expect("a free loopback port")
}

/// The nodes' log filter: `BASALT_TEST_LOG` when set (to chase a failure), else info.
fn node_log_filter() -> String {
    std::env::var("BASALT_TEST_LOG").unwrap_or_else(|_| "info,openraft=error".to_string())
}

pub struct Node {
    pub id: u64,
    pub http: String,
    pub rpc: String,
    pub data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
    /// The node's `RUST_LOG`.
    log_filter: String,
    /// Extra environment of the next start only (e.g. fail points).
    next_env: Vec<(String, String)>,
    /// Extra environment of every start (`TestCluster::set_env`).
    env: Vec<(String, String)>,
    /// The process whose namespaces the node runs in (`Volumes`), if any.
    in_namespace_of: Option<u32>,
}

impl Node {
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let mut command = match self.in_namespace_of {
            Some(pid) => {
                let mut c = Command::new("nsenter");
                c.args(["-U", "-m", "-t", &pid.to_string(), "--"])
                    .arg(env!("CARGO_BIN_EXE_basalt"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_basalt")),
        };
        let child = command
            .args(&self.args)
            .env("RUST_LOG", &self.log_filter)
            .envs(self.env.iter().cloned())
            .envs(std::mem::take(&mut self.next_env))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("start basalt");
        self.child = Some(child);
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
    pub keys: AppKeys,
    /// Replicas per group the cluster was initialised with (`--replicas`, default 3).
    replicas: usize,
    common_args: Vec<String>,
    log_filter: String,
    /// With mutual TLS between the nodes: the CA's directory (`basalt admin certs`).
    pub ca_dir: Option<PathBuf>,
    /// With the API on HTTPS (`--tls-cert`): the PEM of the CA clients trust.
    pub https_ca: Option<Vec<u8>>,
    /// With small disks (`start_on_volumes`): the filesystems the nodes' data lives on.
    volumes: Option<Volumes>,
    /// Extra environment of every node added (`start_with_env`).
    node_env: Vec<(String, String)>,
    _guard: MutexGuard<'static, ()>,
}

/// What a start adds to every node: a small filesystem of its own of `volume_mb` MiB
/// (`Volumes`), environment variables.
#[derive(Default)]
struct StartExtras {
    volume_mb: Option<u64>,
    env: Vec<(String, String)>,
}

/// An HTTPS certificate for 127.0.0.1 (`--tls-cert`, `--tls-key`) and its CA's PEM.
pub struct HttpsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca_pem: Vec<u8>,
}

impl HttpsFiles {
    /// A new CA and a certificate for 127.0.0.1 it signed, written into `dir`.
    pub fn make(dir: &std::path::Path) -> HttpsFiles {
        use basalt_cluster::tls::issue::{Authority, Validity};
        let ca = Authority::create(Validity::days(2)).expect("ca");
        let leaf = ca
            .issue_node(
                basalt_cluster::ids::NodeId::new(1),
                &["127.0.0.1".into(), "localhost".into()],
                Validity::days(1),
            )
            .expect("leaf");
        std::fs::create_dir_all(dir).expect("dir");
        leaf.write(dir, "api.pem", "api.key").expect("write");
        HttpsFiles {
            cert: dir.join("api.pem"),
            key: dir.join("api.key"),
            ca_pem: ca.cert_pem().as_bytes().to_vec(),
        }
    }
}

/// Runs `basalt admin certs <args>`, asserting it succeeds.
pub fn certs_cli(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "certs"])
        .args(args)
        .output()
        .expect("run basalt admin certs");
    assert!(
        out.status.success(),
        "basalt admin certs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Node arguments that spread new objects over every shard a node leads, each on one drawn
/// at random, instead of one led shard at a time (the create lane, decisions/0028): for
/// suites that need a few dozen objects on every shard.
pub const SPREAD_CREATES: [&str; 2] = ["--create-lane-ms", "0"];

impl TestCluster {
    /// Starts `n` nodes: node 1 with `--init` (plus `init_args`), the others joining it; every
    /// node gets `common_args`. Returns once every node is healthy.
    pub async fn start(n: usize, init_args: &[&str], common_args: &[&str]) -> TestCluster {
        Self::start_logging(n, init_args, common_args, &node_log_filter()).await
    }

    /// `start`, then waits (up to a minute) until `leading` nodes each lead a data shard.
    pub async fn start_spread(
        n: usize,
        init_args: &[&str],
        common_args: &[&str],
        leading: usize,
    ) -> TestCluster {
        let cluster = Self::start(n, init_args, common_args).await;
        cluster
            .wait_leaders_spread(leading, Duration::from_secs(60))
            .await;
        cluster
    }

    /// As `start`, with the nodes' log filter (`RUST_LOG`) given.
    pub async fn start_logging(
        n: usize,
        init_args: &[&str],
        common_args: &[&str],
        log_filter: &str,
    ) -> TestCluster {
        Self::start_inner(n, init_args, common_args, log_filter, false).await
    }

    /// As `start`, with mutual TLS between the nodes: a CA made with `basalt admin certs
    /// create-ca` in the cluster's directory (`ca/`), each node's certificate in
    /// `node<i>-certs/`, the administrator's in `admin-certs/`.
    pub async fn start_secure(n: usize, init_args: &[&str], common_args: &[&str]) -> TestCluster {
        Self::start_inner(n, init_args, common_args, &node_log_filter(), true).await
    }

    /// The administrator's certificates directory of a cluster started with `start_secure`.
    pub fn admin_certs(&self) -> PathBuf {
        self.dir.path().join("admin-certs")
    }

    /// Node `i`'s certificates directory of a cluster started with `start_secure`.
    pub fn node_certs(&self, i: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!("node{}-certs", self.nodes[i].id))
    }

    /// As `start_secure`, with the API served over HTTPS with `tls` (a certificate for
    /// 127.0.0.1 and its key, and the CA that signed it).
    pub async fn start_https(n: usize, common_args: &[&str], tls: &HttpsFiles) -> TestCluster {
        let mut args: Vec<&str> = common_args.to_vec();
        let (cert, key) = (
            tls.cert.display().to_string(),
            tls.key.display().to_string(),
        );
        args.extend(["--tls-cert", &cert, "--tls-key", &key]);
        Self::start_full(
            n,
            &[],
            &args,
            &node_log_filter(),
            true,
            Some(tls.ca_pem.clone()),
        )
        .await
    }

    async fn start_inner(
        n: usize,
        init_args: &[&str],
        common_args: &[&str],
        log_filter: &str,
        secure: bool,
    ) -> TestCluster {
        Self::start_full(n, init_args, common_args, log_filter, secure, None).await
    }

    /// As `start`, each node's data on a filesystem of its own of `mb` MiB (`Volumes`).
    pub async fn start_on_volumes(
        n: usize,
        mb: u64,
        init_args: &[&str],
        common_args: &[&str],
    ) -> TestCluster {
        Self::start_full_on(
            n,
            init_args,
            common_args,
            &node_log_filter(),
            false,
            None,
            StartExtras {
                volume_mb: Some(mb),
                ..StartExtras::default()
            },
        )
        .await
    }

    async fn start_full(
        n: usize,
        init_args: &[&str],
        common_args: &[&str],
        log_filter: &str,
        secure: bool,
        https_ca: Option<Vec<u8>>,
    ) -> TestCluster {
        Self::start_full_on(
            n,
            init_args,
            common_args,
            log_filter,
            secure,
            https_ca,
            StartExtras::default(),
        )
        .await
    }

    /// As `start`, every node (and every node added later) with `env` at each start, until
    /// `set_env` changes a node's: for instance `BASALT_TESTING_WITHOUT_FEATURES`, to stand
    /// in for an older build. Does not wait for the rebalancer.
    pub async fn start_with_env(
        n: usize,
        init_args: &[&str],
        common_args: &[&str],
        env: &[(&str, &str)],
    ) -> TestCluster {
        Self::start_full_on(
            n,
            init_args,
            common_args,
            &node_log_filter(),
            false,
            None,
            StartExtras {
                volume_mb: None,
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
        )
        .await
    }

    /// Node `i`'s extra environment from its next start on.
    pub fn set_env(&mut self, i: usize, env: &[(&str, &str)]) {
        self.nodes[i].env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    }

    async fn start_full_on(
        n: usize,
        init_args: &[&str],
        common_args: &[&str],
        log_filter: &str,
        secure: bool,
        https_ca: Option<Vec<u8>>,
        extras: StartExtras,
    ) -> TestCluster {
        let StartExtras { volume_mb, env } = extras;
        let mut cluster = TestCluster::empty(
            AppKeys {
                application_id: String::new(),
                rest_key: String::new(),
                master_key: None,
            },
            log_filter.to_string(),
        );
        cluster.replicas = init_args
            .iter()
            .position(|a| *a == "--replicas")
            .and_then(|i| init_args.get(i + 1)?.parse().ok())
            .unwrap_or(3);
        cluster.common_args = common_args.iter().map(|s| s.to_string()).collect();
        cluster.https_ca = https_ca;
        cluster.node_env = env;
        if let Some(mb) = volume_mb {
            cluster.volumes =
                Some(Volumes::make(cluster.dir.path(), n, mb).expect("the nodes' small disks"));
        }
        if secure {
            let ca = cluster.dir.path().join("ca");
            let ca_arg = ca.display().to_string();
            certs_cli(&["create-ca", "--ca-dir", &ca_arg]);
            let admin = cluster.admin_certs().display().to_string();
            certs_cli(&["create-admin", "--ca-dir", &ca_arg, "--out", &admin]);
            cluster.ca_dir = Some(ca);
        }
        let mut extra: Vec<String> = vec!["--init".into()];
        extra.extend(init_args.iter().map(|s| s.to_string()));
        cluster.add_node_with(extra).await;
        let creds = cluster.nodes[0].data_dir.join("credentials.json");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !creds.exists() {
            assert!(Instant::now() < deadline, "no credentials.json");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&creds).expect("credentials"))
                .expect("json");
        cluster.keys = serde_json::from_value(doc["app"].clone()).expect("app keys");
        for _ in 1..n {
            cluster.add_node().await;
        }
        cluster
            .wait_placement_settled(Duration::from_secs(90))
            .await;
        // A build told to stand in for an older one (`start_with_env`) may not plan.
        if n > 1 && cluster.node_env.is_empty() {
            cluster.wait_balanced(Duration::from_secs(60)).await;
        }
        cluster
    }

    /// Waits until the rebalancer says the placement is balanced and every node leads the
    /// groups it is preferred for (`basalt admin rebalance status`): a new cluster spreads its
    /// leaders in its first seconds.
    pub async fn wait_balanced(&self, timeout: Duration) {
        let Some(first) = (0..self.nodes.len()).find(|&i| self.nodes[i].is_running()) else {
            return;
        };
        Self::eventually(timeout, "the rebalancer balanced", || {
            let s: Value = serde_json::from_str(&self.admin(first, &["rebalance", "status"]))
                .unwrap_or(Value::Null);
            s["balanced"] == true
                && s["nodes"].as_array().is_some_and(|nodes| {
                    nodes.iter().all(|n| n["leaders"] == n["preferredLeaders"])
                })
        })
        .await;
    }

    /// Waits until every group has a leader and min(replicas, running nodes) voters.
    pub async fn wait_placement_settled(&self, timeout: Duration) {
        let running: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_running())
            .collect();
        let want = running.len().min(self.replicas);
        let first = running[0];
        Self::eventually(timeout, "placement settles", || {
            let p = self.placement(first);
            let groups: Vec<&Value> = p
                .as_object()
                .map(|m| m.values().collect())
                .unwrap_or_default();
            let shards = self.expected_groups();
            groups.len() == shards
                && groups
                    .iter()
                    .all(|g| g["voters"].as_array().map_or(0, Vec::len) == want)
        })
        .await;
    }

    /// Number of groups (metadata + shards), from node 1's health.
    fn expected_groups(&self) -> usize {
        let status: Value =
            serde_json::from_str(&self.admin(0, &["status"])).unwrap_or(Value::Null);
        status["Status"]["groups"].as_array().map_or(0, Vec::len)
    }

    /// Adds a node that joins the cluster through node 1; returns its index.
    pub async fn add_node(&mut self) -> usize {
        let join = vec!["--join".to_string(), self.nodes[0].rpc.clone()];
        self.add_node_with(join).await
    }

    async fn add_node_with(&mut self, extra: Vec<String>) -> usize {
        self.add_node_prepared(extra, |_, _| {}).await
    }

    /// Starts `n` nodes of a new cluster made from the backup in `backup` (`basalt admin
    /// restore` into node 1's data dir, with `env` — a bucket's AWS_* variables — and the
    /// source's secrets key copied beside it; the others join it) whose default app has `keys`;
    /// returns once placement settled.
    pub async fn start_restored(
        n: usize,
        backup: &std::path::Path,
        env: &[(&str, &str)],
        secrets_key: &std::path::Path,
        keys: AppKeys,
    ) -> TestCluster {
        let mut cluster = TestCluster::empty(keys, node_log_filter());
        cluster
            .add_node_prepared(Vec::new(), |data_dir, rpc| {
                let out = Command::new(env!("CARGO_BIN_EXE_basalt"))
                    .args(["admin", "restore", "--from"])
                    .arg(backup)
                    .arg("--data-dir")
                    .arg(data_dir)
                    .args(["--node-id", "1", "--rpc-addr", rpc])
                    .envs(env.iter().copied())
                    .output()
                    .expect("run basalt admin restore");
                assert!(
                    out.status.success(),
                    "restore: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                std::fs::copy(secrets_key, data_dir.join("secrets.key")).expect("secrets key");
            })
            .await;
        for _ in 1..n {
            cluster.add_node().await;
        }
        cluster
            .wait_placement_settled(Duration::from_secs(90))
            .await;
        cluster
    }

    /// A cluster of no nodes yet, in a new temp dir, holding the one-cluster-at-a-time lock.
    fn empty(keys: AppKeys, log_filter: String) -> TestCluster {
        let guard = ONE_CLUSTER_AT_A_TIME
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        TestCluster {
            dir: tempfile::tempdir().expect("temp dir"),
            nodes: Vec::new(),
            keys,
            replicas: 3,
            common_args: Vec::new(),
            log_filter,
            ca_dir: None,
            https_ca: None,
            volumes: None,
            node_env: Vec::new(),
            _guard: guard,
        }
    }

    /// Node `i`'s gRPC address.
    pub fn rpc(&self, i: usize) -> String {
        self.nodes[i].rpc.clone()
    }

    /// Node `i`'s data dir.
    pub fn data_dir(&self, i: usize) -> &std::path::Path {
        &self.nodes[i].data_dir
    }

    /// Adds a node, calling `prepare` with its data dir and gRPC address before it starts.
    async fn add_node_prepared(
        &mut self,
        extra: Vec<String>,
        prepare: impl FnOnce(&std::path::Path, &str),
    ) -> usize {
        let id = self.nodes.len() as u64 + 1;
        let http = format!("127.0.0.1:{}", free_port());
        let rpc = format!("127.0.0.1:{}", free_port());
        let data_dir = self.dir.path().join(format!("node{id}"));
        prepare(&data_dir, &rpc);
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--node-id".into(),
            id.to_string(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--http-addr".into(),
            http.clone(),
            "--rpc-addr".into(),
            rpc.clone(),
        ];
        args.extend(self.common_args.iter().cloned());
        if let Some(ca) = &self.ca_dir {
            let certs = self.dir.path().join(format!("node{id}-certs"));
            let (ca, out) = (ca.display().to_string(), certs.display().to_string());
            let id = id.to_string();
            certs_cli(&[
                "create-node",
                "--ca-dir",
                &ca,
                "--node-id",
                &id,
                "--addr",
                &rpc,
                "--out",
                &out,
            ]);
            args.extend(["--certs-dir".to_string(), out]);
        }
        args.extend(extra);
        // Tests stop nodes often: they stop at once (a leader still hands its groups over)
        // unless the test drains with a wait of its own.
        if !args.iter().any(|a| a == "--drain-wait") {
            args.extend(["--drain-wait".to_string(), "0".to_string()]);
        }
        let in_namespace_of = self.volumes.as_ref().map(|v| {
            v.place(self.nodes.len(), id, &data_dir)
                .expect("a small disk for every node");
            v.holder_pid()
        });
        let mut node = Node {
            id,
            http,
            rpc,
            log: self.dir.path().join(format!("node{id}.log")),
            data_dir,
            child: None,
            args,
            log_filter: self.log_filter.clone(),
            next_env: Vec::new(),
            env: self.node_env.clone(),
            in_namespace_of,
        };
        node.spawn();
        self.nodes.push(node);
        let i = self.nodes.len() - 1;
        self.wait_healthy(i, Duration::from_secs(90)).await;
        i
    }

    /// Waits until every node holds the same state: equal digests of every group (`what` names
    /// the wait in the failure).
    pub async fn wait_same_state(&self, what: &str, timeout: Duration) {
        let nodes: Vec<usize> = (0..self.nodes.len()).collect();
        TestCluster::eventually(timeout, what, || {
            let d: Vec<_> = nodes.iter().map(|&i| self.digests(i)).collect();
            d.windows(2).all(|w| w[0] == w[1])
        })
        .await;
    }

    /// The small filesystems the nodes' data lives on (`start_on_volumes`).
    pub fn volumes(&self) -> &Volumes {
        self.volumes.as_ref().expect("a cluster started on volumes")
    }

    /// What node `i` has logged so far.
    pub fn log_text(&self, i: usize) -> String {
        std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
    }

    /// Node `i`'s base URL: `https://` when the nodes serve the API over TLS.
    pub fn url(&self, i: usize) -> String {
        let scheme = if self.https_ca.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.nodes[i].http)
    }

    /// A client of `base` trusting the CA of the nodes' HTTPS certificate, if any.
    fn client_at(&self, base: &str, keys: Option<AppKeys>) -> Client {
        let c = Client::new(base, keys).expect("client");
        match &self.https_ca {
            Some(ca) => c.with_ca(ca).expect("CA"),
            None => c,
        }
    }

    pub fn client(&self, i: usize) -> Client {
        self.client_at(&self.url(i), Some(self.keys.clone()))
    }

    /// A client whose requests rotate over every started node.
    pub fn spread_client(&self) -> Client {
        let bases: Vec<String> = (0..self.nodes.len()).map(|i| self.url(i)).collect();
        let c = Client::over_nodes(&bases, Some(self.keys.clone())).expect("client");
        match &self.https_ca {
            Some(ca) => c.with_ca(ca).expect("CA"),
            None => c,
        }
    }

    pub fn master_client(&self, i: usize) -> Client {
        let mut keys = self.keys.clone();
        keys.master_key = Some(self.master_key());
        self.client_at(&self.url(i), Some(keys))
    }

    /// The default app's master key (from node 1's credentials when the keys lack it).
    pub fn master_key(&self) -> String {
        if let Some(k) = &self.keys.master_key {
            return k.clone();
        }
        self.credentials()["app"]["masterKey"]
            .as_str()
            .expect("master key")
            .to_string()
    }

    /// Node `i`'s resident memory from `/proc/<pid>/status`, in KiB: (now, peak).
    pub fn memory_kib(&self, i: usize) -> (u64, u64) {
        let pid = self.nodes[i].child.as_ref().expect("running").id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// The credentials document node 1 wrote at bootstrap.
    pub fn credentials(&self) -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(self.nodes[0].data_dir.join("credentials.json"))
                .expect("credentials"),
        )
        .expect("json")
    }

    /// A client sending the console account's headers (app management).
    pub fn console_client(&self, i: usize) -> Client {
        let doc = self.credentials();
        self.anonymous_client(i).with_console(
            doc["console"]["email"].as_str().expect("email"),
            doc["console"]["password"].as_str().expect("password"),
        )
    }

    /// Creates an app through `POST /1/apps` on node `i`; returns its JSON.
    pub async fn create_app(&self, i: usize, name: &str) -> Value {
        self.console_client(i)
            .request(
                reqwest::Method::POST,
                "/1/apps",
                Some(&serde_json::json!({ "appName": name })),
                false,
            )
            .await
            .expect("create app")
            .body
    }

    /// Changes settings of the default app through the console API on node 1.
    pub async fn set_app_settings(&self, settings: Value) {
        self.try_app_settings(&settings)
            .await
            .expect("change app settings");
    }

    /// Asks to change settings of the default app through the console API on node 1.
    pub async fn try_app_settings(
        &self,
        settings: &Value,
    ) -> Result<basalt_client::Response, basalt_client::Error> {
        self.console_client(0)
            .request(
                reqwest::Method::PUT,
                &format!("/1/apps/{}", self.keys.application_id),
                Some(settings),
                false,
            )
            .await
    }

    /// A client of node `i` with the keys (REST and master) of an app's JSON.
    pub fn app_client(&self, i: usize, app: &Value) -> Client {
        let keys = AppKeys {
            application_id: app["applicationId"].as_str().expect("id").into(),
            rest_key: app["restKey"].as_str().expect("rest").into(),
            master_key: app["masterKey"].as_str().map(str::to_string),
        };
        self.client_at(&self.url(i), Some(keys))
    }

    pub fn anonymous_client(&self, i: usize) -> Client {
        self.client_at(&self.url(i), None)
    }

    pub async fn wait_healthy(&self, i: usize, timeout: Duration) {
        let client = self.client(i);
        let deadline = Instant::now() + timeout;
        while !client.healthy().await {
            assert!(
                Instant::now() < deadline,
                "node {} did not become healthy",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until at least `nodes` of the running nodes lead a data shard (placement moves
    /// leadership to each group's preferred node a few seconds after start): queries then
    /// gather their rows from several nodes.
    pub async fn wait_leaders_spread(&self, nodes: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let mut leading = 0;
            for i in (0..self.nodes.len()).filter(|&i| self.nodes[i].child.is_some()) {
                leading += usize::from(!self.led_shards(i).await.is_empty());
            }
            if leading >= nodes {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "leadership did not spread over {nodes} nodes"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The data shards node `i` leads, from its `/health` (none when it does not answer).
    /// Group 0 holds the metadata; the data shards follow.
    pub async fn led_shards(&self, i: usize) -> std::collections::BTreeSet<u32> {
        let health = self
            .client(i)
            .request(reqwest::Method::GET, "/health", None, false)
            .await
            .map(|r| r.body)
            .unwrap_or_default();
        health["leaderOf"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g.as_u64())
            .filter(|&g| g > 0)
            .filter_map(|g| u32::try_from(g).ok())
            .collect()
    }

    /// `kill -9`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, waiting for the process to exit.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGHUP: the node reads its certificates again.
    pub fn hangup(&self, i: usize) {
        self.signal(i, "-HUP");
    }

    /// SIGTERM, without waiting: the node drains, then exits (`wait_exit`).
    pub fn terminate(&self, i: usize) {
        self.signal(i, "-TERM");
    }

    /// Freezes a node (SIGSTOP): its sockets stay open but it answers nothing.
    pub fn pause(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// Thaws a paused node (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    fn signal(&self, i: usize, sig: &str) {
        if let Some(c) = &self.nodes[i].child {
            let status = Command::new("kill")
                .arg(sig)
                .arg(c.id().to_string())
                .status()
                .expect("run kill");
            assert!(status.success(), "kill {sig} node {}", i + 1);
        }
    }

    /// Starts a stopped node again with its original arguments and data dir.
    pub async fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].child.is_none(), "node {} is running", i + 1);
        self.nodes[i].spawn();
    }

    /// Starts a stopped node again with `BASALT_FAILPOINTS` set to `failpoints` for this start
    /// only (`basalt_cluster::failpoints`).
    pub fn restart_with_failpoints(&mut self, i: usize, failpoints: &str) {
        assert!(self.nodes[i].child.is_none(), "node {} is running", i + 1);
        self.nodes[i].next_env = vec![("BASALT_FAILPOINTS".into(), failpoints.into())];
        self.nodes[i].spawn();
    }

    /// Waits until node `i`'s process exits by itself (a crash); `None` if it still runs after
    /// `timeout`.
    pub async fn wait_exit(&mut self, i: usize, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(c) = self.nodes[i].child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    self.nodes[i].child = None;
                    return Some(status);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Each group's digest as node `i` holds it (`basalt admin digest`), by group:
    /// `(applied, records, digest)`.
    pub fn digests(&self, i: usize) -> BTreeMap<u64, (u64, u64, String)> {
        let out: Value = serde_json::from_str(&self.admin(i, &["digest"])).expect("digest json");
        out["Digests"]
            .as_array()
            .expect("digests")
            .iter()
            .map(|d| {
                (
                    d["group"].as_u64().expect("group"),
                    (
                        d["applied"].as_u64().expect("applied"),
                        d["records"].as_u64().expect("records"),
                        d["digest"].as_str().expect("digest").to_string(),
                    ),
                )
            })
            .collect()
    }

    /// Runs `basalt admin --rpc <node i> <args>` and returns its stdout.
    pub fn admin(&self, i: usize, args: &[&str]) -> String {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
        cmd.arg("admin").arg("--rpc").arg(&self.nodes[i].rpc);
        if self.ca_dir.is_some() {
            cmd.arg("--certs-dir").arg(self.admin_certs());
        }
        let out = cmd.args(args).output().expect("run basalt admin");
        assert!(
            out.status.success(),
            "basalt admin {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Stops every node (SIGTERM), starts them all again on their data, and waits until each is
    /// healthy.
    pub async fn restart_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.stop(i);
        }
        for i in 0..self.nodes.len() {
            self.restart(i).await;
        }
        for i in 0..self.nodes.len() {
            self.wait_healthy(i, Duration::from_secs(60)).await;
        }
    }

    /// Waits until node `lagging` has applied every data group to within 5 entries of node
    /// `lead` and at least to `floor`, then asserts that it received a snapshot on the way.
    pub async fn wait_caught_up_by_snapshot(&self, lagging: usize, lead: usize, floor: u64) {
        Self::eventually(Duration::from_secs(60), "the node catches up", || {
            let ahead = self.data_group_field(lead, "applied");
            let mine = self.data_group_field(lagging, "applied");
            mine.len() == ahead.len()
                && mine
                    .iter()
                    .zip(&ahead)
                    .all(|((_, m), (_, l))| *m >= floor && m + 5 >= *l)
        })
        .await;
        assert!(
            self.metric(lagging, "basalt_raft_snapshots_received_total")
                .await
                >= 1.0,
            "node {} caught up by snapshot",
            lagging + 1
        );
    }

    /// Waits until nodes `nodes` have purged part of every data group's log (a leader purges
    /// once its replication to a stopped node has failed again after the snapshot, so poll);
    /// answers the lowest purged index among them.
    pub async fn wait_logs_purged(&self, nodes: &[usize]) -> u64 {
        let purged_on = |node: usize| self.lowest_data_group_field(node, "purged");
        Self::eventually(
            Duration::from_secs(60),
            "the nodes purge their logs",
            || nodes.iter().all(|&n| purged_on(n) > 0),
        )
        .await;
        nodes.iter().map(|&n| purged_on(n)).min().unwrap_or(0)
    }

    /// The lowest `field` over the data groups node `i` reports (e.g. how far every group's log
    /// is purged).
    pub fn lowest_data_group_field(&self, i: usize, field: &str) -> u64 {
        self.data_group_field(i, field)
            .into_iter()
            .map(|(_, v)| v)
            .min()
            .unwrap_or(0)
    }

    /// `field` (e.g. `applied`, `purged`) of each data group as node `i` reports it
    /// (`basalt admin status`), by group.
    pub fn data_group_field(&self, i: usize, field: &str) -> Vec<(u64, u64)> {
        let status: Value =
            serde_json::from_str(&self.admin(i, &["status"])).unwrap_or(Value::Null);
        status["Status"]["groups"]
            .as_array()
            .map(|gs| {
                gs.iter()
                    .filter_map(|g| Some((g["group"].as_u64()?, g[field].as_u64().unwrap_or(0))))
                    .filter(|(g, _)| *g != 0)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Each group's leader, voters and learners (`basalt admin placement`).
    pub fn placement(&self, i: usize) -> Value {
        serde_json::from_str(&self.admin(i, &["placement"])).expect("placement json")
    }

    /// Polls `check` until it holds or `timeout` passes.
    pub async fn eventually<F: FnMut() -> bool>(timeout: Duration, what: &str, mut check: F) {
        let deadline = Instant::now() + timeout;
        while !check() {
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Waits until the samples matching `prefix` summed over `nodes` reach `at_least`.
    pub async fn wait_metric_sum(
        &self,
        nodes: &[usize],
        prefix: &str,
        at_least: f64,
        timeout: Duration,
        what: &str,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let mut sum = 0.0;
            for &i in nodes {
                sum += self.metric(i, prefix).await;
            }
            if sum >= at_least {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The value of a Prometheus sample (sum over label sets matching `prefix`).
    pub async fn metric(&self, i: usize, prefix: &str) -> f64 {
        let text = self.client(i).metrics().await.unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

/// Sends `requests` as one `/1/batch`; asserts 200 and answers the per-operation slots.
pub async fn batch(c: &Client, requests: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
    let body = serde_json::json!({ "requests": requests });
    let r = c
        .request(reqwest::Method::POST, "/1/batch", Some(&body), false)
        .await
        .expect("batch");
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.body.as_array().expect("slots").clone()
}

/// Registers a user with password `p`; answers its objectId and session token.
pub async fn register_user(c: &Client, name: &str) -> (String, String) {
    let body = serde_json::json!({"username": name, "password": "p"});
    let b = c
        .request(reqwest::Method::POST, "/1/users", Some(&body), false)
        .await
        .expect("register")
        .body;
    (
        b["objectId"].as_str().expect("objectId").to_string(),
        b["sessionToken"]
            .as_str()
            .expect("sessionToken")
            .to_string(),
    )
}

/// The first link of an emailed message, checked to be of `kind` (`verify`, `reset`).
pub fn link_in(mail: &str, kind: &str) -> String {
    let start = mail.find("http://").expect("a link");
    let url: String = mail[start..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    assert!(url.contains(&format!("/email/{kind}/")), "{url}");
    url
}

/// Asserts that a request failed with `status` and API `code`.
pub fn assert_api_error<T: std::fmt::Debug>(
    r: Result<T, basalt_client::Error>,
    status: u16,
    code: i64,
    what: &str,
) {
    match r {
        Err(e) => assert_eq!(
            (e.status(), e.code()),
            (Some(status), Some(code)),
            "{what}: {e}"
        ),
        Ok(v) => panic!("{what}: expected error {code}, got {v:?}"),
    }
}

/// Asserts that a request was refused with 401 `{"error":"unauthorized"}`.
pub fn assert_unauthorized<T: std::fmt::Debug>(r: Result<T, basalt_client::Error>, what: &str) {
    match r {
        Err(basalt_client::Error::Api { status, body, .. }) => {
            assert_eq!(status, 401, "{what}: {body}");
            assert_eq!(body, serde_json::json!({"error": "unauthorized"}), "{what}");
        }
        other => panic!("{what}: expected 401, got {other:?}"),
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        if std::thread::panicking() {
            if let Ok(keep) = std::env::var("BASALT_TEST_KEEP_LOGS") {
                for n in &self.nodes {
                    let to = PathBuf::from(&keep).join(format!("node{}.log", n.id));
                    let _ = std::fs::create_dir_all(&keep);
                    let _ = std::fs::copy(&n.log, to);
                }
            }
            for n in &self.nodes {
                let log = std::fs::read_to_string(&n.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(60).collect();
                eprintln!("----- node {} log (last lines) -----", n.id);
                for l in tail.into_iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
    }
}
