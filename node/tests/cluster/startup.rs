//! Starting a cluster, as a new user's `make run` (`basalt dev`) does: a first start on a port
//! another program holds fails naming the address and leaves a data dir the next start uses;
//! two dev clusters on different HTTP ports get different peer ports; the console account of
//! `BASALT_ADMIN_EMAIL`/`BASALT_ADMIN_PASSWORD` is the cluster's; a node is first ready only
//! once every group it hosts has the voters the cluster wants.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common;

/// An HTTP port whose peer port (`+ 1000`, `basalt dev`'s default) is free too, both below
/// the kernel's ephemeral range.
fn dev_port() -> u16 {
    loop {
        let p = common::free_port();
        if p < 31_000 && std::net::TcpListener::bind(("127.0.0.1", p + 1000)).is_ok() {
            return p;
        }
    }
}

fn dev(dir: &std::path::Path, http: u16, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_basalt"));
    c.args(["dev", "--shards", "2", "--data-dir"])
        .arg(dir)
        .args(["--http-port", &http.to_string()])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    c
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
}

async fn wait_ready(url: &str, within: Duration) {
    let client = basalt_client::Client::new(url, None).expect("client");
    let deadline = Instant::now() + within;
    while !client.healthy().await {
        assert!(Instant::now() < deadline, "{url} not ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The app keys node 1 wrote in `dir`.
fn keys(dir: &std::path::Path) -> basalt_client::AppKeys {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("node1/credentials.json")).expect("credentials"),
    )
    .expect("json");
    serde_json::from_value(doc["app"].clone()).expect("keys")
}

async fn wait_credentials(dir: &std::path::Path) {
    let path = dir.join("node1/credentials.json");
    common::TestCluster::eventually(Duration::from_secs(30), "credentials written", || {
        path.exists()
    })
    .await;
}

// The lock only keeps other tests' clusters from running at the same time.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_on_a_taken_port_names_it_and_the_next_start_serves() {
    let _one = common::exclusive();
    for taken in ["peer", "http"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let http = dev_port();
        let held = if taken == "peer" { http + 1000 } else { http };
        let holder = std::net::TcpListener::bind(("127.0.0.1", held)).expect("hold the port");
        let out = dev(dir.path(), http, &["--insecure"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("run basalt dev");
        assert!(!out.status.success(), "{taken}: the start fails");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(&format!("cannot listen on 127.0.0.1:{held}")),
            "{taken}: the error names the address: {said}"
        );
        drop(holder);
        // The same command again, the port free: a cluster that serves.
        let node = dev(dir.path(), http, &["--insecure"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start basalt dev");
        let url = format!("http://127.0.0.1:{http}");
        wait_ready(&url, Duration::from_secs(60)).await;
        wait_credentials(dir.path()).await;
        let client = basalt_client::Client::new(&url, Some(keys(dir.path()))).expect("client");
        let id = client
            .create_object("Note", &json!({"n": 1}))
            .await
            .expect("create")
            .object_id;
        assert!(client.get_object("Note", &id).await.expect("get").is_some());
        stop(node);
    }
}

#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dev_clusters_on_other_http_ports_do_not_collide_and_take_the_admin_account() {
    let _one = common::exclusive();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (port_a, port_b) = (dev_port(), dev_port());
    let mut first = dev(a.path(), port_a, &[])
        .env("BASALT_ADMIN_EMAIL", "owner@example.com")
        .env("BASALT_ADMIN_PASSWORD", "a long chosen password")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the first");
    // What it prints, as it prints it.
    let printed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut stdout = first.stdout.take().expect("stdout");
    let sink = printed.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let second = dev(b.path(), port_b, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the second");
    let (url_a, url_b) = (
        format!("http://127.0.0.1:{port_a}"),
        format!("http://127.0.0.1:{port_b}"),
    );
    wait_ready(&url_a, Duration::from_secs(60)).await;
    wait_ready(&url_b, Duration::from_secs(60)).await;
    wait_credentials(a.path()).await;
    wait_credentials(b.path()).await;
    assert_ne!(keys(a.path()).application_id, keys(b.path()).application_id);
    // The console account is the one asked for, not a generated one.
    let console = basalt_client::Client::new(&url_a, None)
        .expect("client")
        .with_console("owner@example.com", "a long chosen password");
    let apps = console
        .request(reqwest::Method::GET, "/1/apps", None, false)
        .await
        .expect("the chosen account manages the apps");
    assert!(apps
        .body
        .to_string()
        .contains(&keys(a.path()).application_id));
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(a.path().join("node1/credentials.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(doc["console"]["email"], "owner@example.com");
    assert!(
        doc["console"].get("password").is_none(),
        "a chosen password is not written"
    );
    // The first printed its peer port.
    let line = format!("(peer port 127.0.0.1:{})", port_a + 1000);
    common::TestCluster::eventually(Duration::from_secs(30), "the peer port printed", || {
        printed.lock().unwrap().contains(&line)
    })
    .await;
    stop(first);
    stop(second);
}

/// The first 200 of a node of a new 3-node dev cluster comes only once every group has its
/// three voters: what is acknowledged from then on survives the loss of any one node.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_is_ready_only_once_its_groups_have_every_voter() {
    let _one = common::exclusive();
    let dir = tempfile::tempdir().expect("temp dir");
    let http = dev_port();
    let cluster = dev(dir.path(), http, &["--nodes", "3", "--insecure"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start basalt dev");
    let http_client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut checked = 0;
    let mut ready = [false; 3];
    while ready.iter().any(|r| !r) {
        assert!(Instant::now() < deadline, "nodes ready: {ready:?}");
        for (i, r) in ready.iter_mut().enumerate().filter(|(_, r)| !**r) {
            let base = format!("http://127.0.0.1:{}", http + i as u16);
            let Ok(resp) = http_client.get(format!("{base}/health")).send().await else {
                continue;
            };
            if resp.status() != 200 {
                continue;
            }
            *r = true;
            let health: Value = resp.json().await.unwrap();
            // Node 1 may have been ready while it was the only member (then one voter was
            // every voter wanted) and be read here only once the others joined.
            if i > 0 {
                assert_eq!(
                    health["underReplicated"],
                    json!([]),
                    "node {}: {health}",
                    i + 1
                );
            }
            // Right then, from outside: this node's groups all have three voters, unless
            // it was ready while it was the cluster's only member.
            let metrics = http_client
                .get(format!("{base}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let voters: Vec<f64> = metrics
                .lines()
                .filter(|l| l.starts_with("basalt_raft_voters{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
                .collect();
            assert_eq!(voters.len(), 3, "node {}: {metrics}", i + 1);
            if i > 0 {
                checked += 1;
                assert!(
                    voters.iter().all(|&v| v == 3.0),
                    "node {} ready with groups of {voters:?} voters",
                    i + 1
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(checked, 2);
    stop(cluster);
}
