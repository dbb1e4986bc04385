//! A real Prometheus (Debian's `prometheus`, which `make test-servers` installs) scraping a
//! 3-node cluster with the alert rules of `docs/ops/alerts.yml`: every query of
//! `docs/ops/grafana-dashboard.json` returns data through its HTTP API, and a killed node
//! fires `BasaltNodeDown`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_client::Method;
use serde_json::{json, Value};

use crate::common::push::PushWebhook;
use crate::common::{free_port, TestCluster};

/// A Prometheus server on loopback, stopped when dropped.
struct Prometheus {
    child: Child,
    base: String,
    http: reqwest::Client,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The alert rules with every `for:` cut to 2 s, so that a test sees them fire in seconds
/// (how long each waits is what `promtool test rules` checks).
fn quick_rules() -> String {
    let rules =
        std::fs::read_to_string(crate::common::package_dir().join("../docs/ops/alerts.yml"))
            .expect("docs/ops/alerts.yml");
    rules
        .lines()
        .map(|l| match l.trim_start().strip_prefix("for: ") {
            Some(_) => format!("{}for: 2s", &l[..l.len() - l.trim_start().len()]),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (host:port) every second as job `basalt`, its
    /// rules evaluated every second; returns once it answers.
    async fn start(dir: &Path, targets: &[String]) -> Prometheus {
        std::fs::write(dir.join("alerts.yml"), quick_rules()).unwrap();
        let config = json!({
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                "evaluation_interval": "1s"},
            "rule_files": [dir.join("alerts.yml")],
            "scrape_configs": [{"job_name": "basalt",
                "static_configs": [{"targets": targets}]}],
        });
        // JSON is YAML.
        std::fs::write(dir.join("prometheus.yml"), config.to_string()).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("run prometheus (Debian's prometheus package: make test-servers)");
        let p = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = p.http.get(format!("{}/-/ready", p.base)).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return p;
            }
            let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "prometheus never got ready: {log}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The samples `expr` evaluates to now.
    async fn query(&self, expr: &str) -> Vec<Value> {
        let answer: Value = self
            .http
            .get(format!("{}/api/v1/query", self.base))
            .query(&[("query", expr)])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
        answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The alerts firing now, each as (name, instance).
    async fn firing(&self) -> Vec<(String, String)> {
        let answer: Value = self
            .http
            .get(format!("{}/api/v1/alerts", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["data"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter(|a| a["state"] == "firing")
            .map(|a| {
                let label = |k: &str| a["labels"][k].as_str().unwrap_or_default().to_string();
                (label("alertname"), label("instance"))
            })
            .collect()
    }
}

/// Every panel's queries of the dashboard: (panel title, PromQL).
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(
        crate::common::package_dir().join("../docs/ops/grafana-dashboard.json"),
    )
    .expect("docs/ops/grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queries.push((
                panel["title"].as_str().unwrap().to_string(),
                target["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    queries
}

/// Story — Prometheus scrapes three nodes while clients write, call a function and push, and
/// after a backup: every dashboard query returns data; a killed node fires `BasaltNodeDown`
/// for its instance only, and with a second node gone the writes that fail show as 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_sees_every_dashboard_query_and_a_node_down() {
    let hook = PushWebhook::start().await;
    let mut cluster = TestCluster::start(3, &["--shards", "3"], &[]).await;
    cluster.set_app_settings(hook.settings()).await;
    let m = cluster.master_client(0);
    let deployed = m
        .request(
            Method::PUT,
            "/1/functions/hello",
            Some(&json!({"source": "return 'hi';"})),
            true,
        )
        .await
        .unwrap();
    assert!(deployed.status < 300, "{:?}", deployed.body);
    let device = cluster
        .client(1)
        .request(
            Method::POST,
            "/1/installations",
            Some(&json!({"deviceType": "android", "installationId": "p-1",
                "deviceToken": "fcm-token-p", "channels": ["all"]})),
            false,
        )
        .await
        .unwrap();
    assert_eq!(device.status, 201, "{:?}", device.body);
    let pushed = m
        .request(
            Method::POST,
            "/1/push",
            Some(&json!({"channels": ["all"], "data": {"alert": "hi"}})),
            true,
        )
        .await
        .unwrap();
    assert_eq!(pushed.status, 200, "{:?}", pushed.body);
    let backups = tempfile::tempdir().unwrap();
    tokio::task::block_in_place(|| {
        cluster.admin(0, &["backup", "--to", backups.path().to_str().unwrap()])
    });

    let targets: Vec<String> = cluster.nodes.iter().map(|n| n.http.clone()).collect();
    let dir = tempfile::tempdir().unwrap();
    let prometheus = Prometheus::start(dir.path(), &targets).await;

    // Clients keep writing and calling the function through every node while it scrapes.
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..3)
        .map(|i| {
            let (c, stop) = (cluster.client(i), Arc::clone(&stop));
            tokio::spawn(async move {
                let (mut n, until) = (0, Instant::now() + Duration::from_secs(300));
                while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                    let _ = c.create_object("Scraped", &json!({"n": n})).await;
                    let _ = c
                        .request(Method::POST, "/1/functions/hello", Some(&json!({})), false)
                        .await;
                    n += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        })
        .collect();

    let queries = dashboard_queries();
    assert!(queries.len() >= 20, "{queries:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut empty: Vec<(String, String)>;
    loop {
        empty = Vec::new();
        for (title, expr) in &queries {
            // 5xx needs a failing request: checked once two nodes are gone, below.
            if expr.contains("status=~\"5..\"") {
                continue;
            }
            if prometheus.query(expr).await.is_empty() {
                empty.push((title.clone(), expr.clone()));
            }
        }
        if empty.is_empty() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        empty.is_empty(),
        "dashboard queries without data: {empty:#?}"
    );
    let up = prometheus.query("sum(up{job=\"basalt\"})").await;
    assert_eq!(up[0]["value"][1], "3", "{up:?}");
    let quiet = [
        "BasaltNodeDown",
        "BasaltGroupLeaderless",
        "BasaltNoRecentBackup",
        "BasaltReplicasDiffer",
    ];
    let firing = prometheus.firing().await;
    assert!(
        !firing
            .iter()
            .any(|(name, _)| quiet.contains(&name.as_str())),
        "a healthy cluster just backed up: {firing:?}"
    );

    cluster.kill(2);
    let killed = cluster.nodes[2].http.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    let firing = loop {
        let firing = prometheus.firing().await;
        if firing.iter().any(|(name, _)| name == "BasaltNodeDown") || Instant::now() > deadline {
            break firing;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let down: Vec<&String> = firing
        .iter()
        .filter(|(name, _)| name == "BasaltNodeDown")
        .map(|(_, instance)| instance)
        .collect();
    assert_eq!(down, vec![&killed], "{firing:?}");

    // With two of three nodes gone, writes through the last one fail on the server's side.
    cluster.kill(1);
    let five_xx: Vec<&(String, String)> = queries
        .iter()
        .filter(|(_, expr)| expr.contains("status=~\"5..\""))
        .collect();
    assert!(!five_xx.is_empty());
    let deadline = Instant::now() + Duration::from_secs(90);
    for (title, expr) in five_xx {
        while prometheus.query(expr).await.is_empty() {
            assert!(Instant::now() < deadline, "{title} never had data: {expr}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
}
