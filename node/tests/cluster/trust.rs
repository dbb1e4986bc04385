//! Trust on the peer port (docs/security.md, decisions/0031): a cluster whose nodes speak
//! mutual TLS refuses every RPC from a client without a certificate of its CA, lets an
//! administrator's certificate call admin requests only, and refuses a node's certificate
//! used under another node's name; its certificates rotate under load with no failed request;
//! app keys are sealed in the metadata group's records.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use basalt_cluster::ids::{GroupId, NodeId, META_GROUP};
use basalt_cluster::rpc::convert::{from_reply, group_message};
use basalt_cluster::rpc::pb::file_service_client::FileServiceClient;
use basalt_cluster::rpc::pb::node_service_client::NodeServiceClient;
use basalt_cluster::rpc::pb::raft_service_client::RaftServiceClient;
use basalt_cluster::rpc::pb::{ChangesRequest, CopyMessage, GroupMessage};
use basalt_cluster::rpc::router::channel_for_addr;
use basalt_cluster::tls::{CertFiles, PeerIdentity, PeerTls};
use serde_json::{json, Value};
use tonic::transport::Channel;

use crate::common::{certs_cli, TestCluster};

/// One peer RPC as a stranger, an admin or a node would send it; `Err` when refused (by the
/// handshake, the server's check, or the answer).
async fn call(channel: &Channel, rpc: &str) -> Result<Value, String> {
    let msg = |group: GroupId, v: Value| group_message(group, &v).map_err(|e| e.to_string());
    let timeout = Duration::from_secs(5);
    let with_deadline = |m: GroupMessage| {
        let mut r = tonic::Request::new(m);
        r.set_timeout(timeout);
        r
    };
    let node = || NodeServiceClient::new(channel.clone());
    let raft = || RaftServiceClient::new(channel.clone());
    let vote = json!({
        "vote": {"leader_id": {"term": 999, "node_id": 3}, "committed": false},
        "last_log_id": null,
    });
    let reply = match rpc {
        "read" => node()
            .read(with_deadline(msg(META_GROUP, json!({"ListRecords": {"ns": "app", "prefix": ""}}))?))
            .await,
        "propose" => node()
            .propose(with_deadline(msg(
                META_GROUP,
                json!({"PutRecord": {"ns": "app", "key": "evil", "value": {"masterKey": "mine"}, "expires_at_ms": null}}),
            )?))
            .await,
        "remove-node" => node()
            .admin(with_deadline(msg(META_GROUP, json!({"RemoveNode": 3}))?))
            .await,
        "join-as-4" => node()
            .admin(with_deadline(msg(
                META_GROUP,
                json!({"Join": {"id": 4, "rpc_addr": "127.0.0.1:1", "http_addr": "127.0.0.1:1", "state": "Active"}}),
            )?))
            .await,
        "status" => node()
            .admin(with_deadline(msg(META_GROUP, json!("Status"))?))
            .await,
        "shared-secret" => node()
            .admin(with_deadline(msg(META_GROUP, json!("SharedSecret"))?))
            .await,
        "release-ballast" => node()
            .admin(with_deadline(msg(META_GROUP, json!("ReleaseBallast"))?))
            .await,
        "drain" => node()
            .admin(with_deadline(msg(META_GROUP, json!("Drain"))?))
            .await,
        "rebalance-pause" => node()
            .admin(with_deadline(msg(META_GROUP, json!({"Rebalance": "Pause"}))?))
            .await,
        "rebalance-status" => node()
            .admin(with_deadline(msg(META_GROUP, json!({"Rebalance": "Status"}))?))
            .await,
        "upgrade-finalize" => node()
            .admin(with_deadline(msg(META_GROUP, json!({"Upgrade": "Finalize"}))?))
            .await,
        "upgrade-status" => node()
            .admin(with_deadline(msg(META_GROUP, json!({"Upgrade": "Status"}))?))
            .await,
        "split" => node()
            .admin(with_deadline(msg(META_GROUP, json!({"Split": {"group": 1}}))?))
            .await,
        "merge" => node()
            .admin(with_deadline(msg(
                META_GROUP,
                json!({"Merge": {"group": 3, "into": null}}),
            )?))
            .await,
        "split-settings" => node()
            .admin(with_deadline(msg(
                META_GROUP,
                json!({"SplitSettings": {"split_above_mb": 1, "split_above_writes_per_s": 1}}),
            )?))
            .await,
        "slots" => node()
            .admin(with_deadline(msg(META_GROUP, json!("Slots"))?))
            .await,
        "vote-as-3" => raft().vote(with_deadline(msg(GroupId::new(1), vote)?)).await,
        "append-as-3" => raft()
            .append_entries(with_deadline(msg(
                GroupId::new(1),
                json!({
                    "vote": {"leader_id": {"term": 999, "node_id": 3}, "committed": true},
                    "prev_log_id": null, "entries": [], "leader_commit": null,
                }),
            )?))
            .await,
        "changes" => {
            let mut req = tonic::Request::new(ChangesRequest {
                group: 1,
                after: 0,
                from_head: true,
            });
            req.set_timeout(timeout);
            let status = |s: tonic::Status| format!("{:?}: {}", s.code(), s.message());
            return match node().watch_changes(req).await {
                Ok(mut stream) => match stream.get_mut().message().await {
                    Ok(_) => Ok(Value::Null),
                    Err(s) => Err(status(s)),
                },
                Err(s) => Err(status(s)),
            };
        }
        "copies" => {
            let payload = serde_json::to_vec(&json!({"List": {"group": 1, "shards": 16}}))
                .map_err(|e| e.to_string())?;
            let mut req = tonic::Request::new(CopyMessage { payload });
            req.set_timeout(timeout);
            FileServiceClient::new(channel.clone()).copies(req).await
        }
        other => panic!("no rpc {other}"),
    };
    let reply = reply.map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
    from_reply::<Value>(reply.into_inner()).map_err(|e| e.to_string())
}

/// Every RPC the issue names: reads, proposals, admin, Raft, files, changes.
const EVERY_RPC: [&str; 8] = [
    "read",
    "propose",
    "remove-node",
    "status",
    "vote-as-3",
    "append-as-3",
    "changes",
    "copies",
];

fn node_tls(dir: &Path, id: u64) -> Arc<PeerTls> {
    Arc::new(
        PeerTls::load(CertFiles::node_in(dir), PeerIdentity::Node(NodeId::new(id)))
            .expect("node tls"),
    )
}

fn admin_tls(dir: &Path) -> Arc<PeerTls> {
    Arc::new(PeerTls::load(CertFiles::admin_in(dir), PeerIdentity::Admin).expect("admin tls"))
}

/// A channel to `addr` (node 1) over mutual TLS with `tls`, or in plaintext.
fn channel(addr: &str, tls: Option<&Arc<PeerTls>>) -> Channel {
    channel_for_addr(addr, Some(NodeId::new(1)), None, tls).expect("channel")
}

/// Story — an attack on the peer port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_port_answers_only_the_cluster_s_certificates() {
    let cluster = TestCluster::start_secure(3, &[], &[]).await;
    let addr = cluster.nodes[0].rpc.clone();
    let before = cluster
        .client(1)
        .create_object("Trust", &json!({"n": 1}))
        .await
        .expect("create");

    // A stranger: plaintext, or a certificate of another CA (trusting this cluster's CA, so
    // the refusal is the server's).
    let foreign = cluster.dir.path().join("foreign");
    let (foreign_ca, foreign_node) = (foreign.join("ca"), foreign.join("node"));
    let fca = foreign_ca.display().to_string();
    certs_cli(&["create-ca", "--ca-dir", &fca]);
    certs_cli(&[
        "create-node",
        "--ca-dir",
        &fca,
        "--node-id",
        "1",
        "--addr",
        "127.0.0.1",
        "--out",
        &foreign_node.display().to_string(),
    ]);
    let bundle = format!(
        "{}{}",
        std::fs::read_to_string(foreign_ca.join("ca.pem")).expect("foreign ca"),
        std::fs::read_to_string(cluster.node_certs(0).join("ca.pem")).expect("ca")
    );
    std::fs::write(foreign_node.join("ca.pem"), bundle).expect("bundle");
    let strangers = [
        ("plaintext", channel(&addr, None)),
        (
            "foreign CA",
            channel(&addr, Some(&node_tls(&foreign_node, 1))),
        ),
    ];
    for (who, ch) in &strangers {
        for rpc in EVERY_RPC
            .iter()
            .chain(&["join-as-4", "shared-secret", "release-ballast", "drain"])
            .chain(&["rebalance-pause", "rebalance-status"])
            .chain(&["upgrade-finalize", "upgrade-status"])
            .chain(&["split", "merge", "split-settings", "slots"])
        {
            let r = call(ch, rpc).await;
            assert!(r.is_err(), "{who} {rpc}: {r:?}");
        }
    }
    // `basalt admin` without the administrator's certificate gets nowhere either.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "--rpc", &addr, "remove-node", "3"])
        .current_dir(cluster.dir.path())
        .output()
        .expect("basalt admin");
    assert!(!out.status.success(), "remove-node without a certificate");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "--rpc", &addr, "release-ballast"])
        .current_dir(cluster.dir.path())
        .output()
        .expect("basalt admin");
    assert!(
        !out.status.success(),
        "release-ballast without a certificate"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "--rpc", &addr, "rebalance", "pause"])
        .current_dir(cluster.dir.path())
        .output()
        .expect("basalt admin");
    assert!(
        !out.status.success(),
        "rebalance pause without a certificate"
    );
    for args in [
        &["split", "1"][..],
        &["merge", "3"],
        &["slots", "--split-above-mb", "1"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args(["admin", "--rpc", &addr])
            .args(args)
            .current_dir(cluster.dir.path())
            .output()
            .expect("basalt admin");
        assert!(!out.status.success(), "{args:?} without a certificate");
    }

    // The administrator: admin requests, and nothing else.
    let admin = channel(&addr, Some(&admin_tls(&cluster.admin_certs())));
    assert!(call(&admin, "status").await.is_ok());
    let rebalance = call(&admin, "rebalance-status").await;
    assert!(
        rebalance
            .as_ref()
            .is_ok_and(|v| v["Rebalance"]["settings"].is_object()),
        "admin rebalance status: {rebalance:?}"
    );
    let upgrade = call(&admin, "upgrade-status").await;
    assert!(
        upgrade
            .as_ref()
            .is_ok_and(|v| v["Upgrade"]["finalized"] == true),
        "admin upgrade status: {upgrade:?}"
    );
    let slots = call(&admin, "slots").await;
    assert!(
        slots.as_ref().is_ok_and(|v| v["Slots"]["auto"].is_object()),
        "admin slots: {slots:?}"
    );
    // Nothing split or changed meanwhile: the strangers and node 2 were refused.
    assert_eq!(
        slots.as_ref().ok().map(|v| &v["Slots"]["splits"]),
        Some(&json!([]))
    );
    assert_eq!(
        slots
            .as_ref()
            .ok()
            .map(|v| &v["Slots"]["auto"]["splitAboveMb"]),
        Some(&json!(256))
    );
    let released = call(&admin, "release-ballast").await;
    assert!(
        released
            .as_ref()
            .is_ok_and(|v| v["BallastReleased"].is_object()),
        "admin release-ballast: {released:?}"
    );
    for rpc in [
        "read",
        "propose",
        "vote-as-3",
        "append-as-3",
        "changes",
        "copies",
        "shared-secret",
    ] {
        let r = call(&admin, rpc).await;
        assert!(
            r.as_ref().is_err_and(|e| e.contains("PermissionDenied")),
            "admin {rpc}: {r:?}"
        );
    }

    // Node 2's certificate: a node's requests as itself, never as node 3 or a new node 4.
    let node2 = channel(&addr, Some(&node_tls(&cluster.node_certs(1), 2)));
    assert!(call(&node2, "read").await.is_ok());
    assert!(call(&node2, "status").await.is_ok());
    for rpc in ["vote-as-3", "append-as-3"] {
        let r = call(&node2, rpc).await;
        assert!(
            r.as_ref().is_err_and(|e| e.contains("as node 3")),
            "node 2 {rpc}: {r:?}"
        );
    }
    for rpc in [
        "join-as-4",
        "remove-node",
        "release-ballast",
        "drain",
        "rebalance-pause",
        "rebalance-status",
        "upgrade-finalize",
        "upgrade-status",
        "split",
        "merge",
        "split-settings",
    ] {
        let r = call(&node2, rpc).await;
        assert!(
            r.as_ref().is_err_and(|e| e.contains("PermissionDenied")),
            "node 2 {rpc}: {r:?}"
        );
    }
    // A process started as node 4 with node 2's certificate does not start.
    let stolen = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args([
            "serve",
            "--node-id",
            "4",
            "--http-addr",
            "127.0.0.1:0",
            "--rpc-addr",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(cluster.dir.path().join("node4"))
        .arg("--certs-dir")
        .arg(cluster.node_certs(1))
        .args(["--join", &addr])
        .output()
        .expect("basalt serve");
    assert!(!stolen.status.success());
    assert!(
        String::from_utf8_lossy(&stolen.stderr).contains("names node 2, not node 4"),
        "{}",
        String::from_utf8_lossy(&stolen.stderr)
    );

    // A node certificate the CA revoked is refused once the nodes have the list.
    let (ca, spare) = (
        cluster.ca_dir.clone().expect("ca"),
        cluster.dir.path().join("node9"),
    );
    let (ca_arg, spare_arg) = (ca.display().to_string(), spare.display().to_string());
    certs_cli(&[
        "create-node",
        "--ca-dir",
        &ca_arg,
        "--node-id",
        "9",
        "--addr",
        "127.0.0.1",
        "--out",
        &spare_arg,
    ]);
    let node9 = channel(&addr, Some(&node_tls(&spare, 9)));
    assert!(
        call(&node9, "read").await.is_ok(),
        "a node certificate of the CA"
    );
    certs_cli(&[
        "revoke",
        "--ca-dir",
        &ca_arg,
        "--cert",
        &spare.join("node.pem").display().to_string(),
    ]);
    for i in 0..3 {
        std::fs::copy(ca.join("crl.pem"), cluster.node_certs(i).join("crl.pem")).expect("crl");
        cluster.hangup(i);
    }
    let mut refused = false;
    for _ in 0..50 {
        // A new connection each time: one opened before the nodes reloaded keeps its session.
        let revoked = channel(&addr, Some(&node_tls(&spare, 9)));
        if call(&revoked, "read").await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(refused, "a revoked certificate is refused");
    assert!(call(
        &channel(&addr, Some(&node_tls(&cluster.node_certs(1), 2))),
        "read"
    )
    .await
    .is_ok());

    // Nothing any of them tried took effect: three active members, no planted record, and the
    // data as it was.
    let members: Value = serde_json::from_str(&cluster.admin(0, &["members"])).expect("members");
    let nodes = members["ClusterInfo"]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3);
    assert!(nodes.iter().all(|n| n["state"] == "Active"), "{nodes:?}");
    let node1 = channel(&addr, Some(&node_tls(&cluster.node_certs(0), 1)));
    let apps = call(&node1, "read").await.expect("apps");
    assert!(!apps.to_string().contains("evil"), "{apps}");
    let got = cluster
        .client(2)
        .get_object("Trust", &before.object_id)
        .await
        .expect("get")
        .expect("the object");
    assert_eq!(got["n"], 1);

    // The metadata group's records hold no working key: the app's keys are sealed.
    let keys = &cluster.keys;
    let master = keys.master_key.clone().expect("master key");
    let text = apps.to_string();
    assert!(text.contains(&keys.application_id), "{text}");
    assert!(
        !text.contains(&master) && !text.contains(&keys.rest_key),
        "{text}"
    );
    assert!(text.contains("$sealed:v1:"), "{text}");
    // Nodes hand the secrets key to nodes only, and the REST API still answers the keys.
    let secret = call(&node2, "shared-secret").await.expect("shared secret");
    assert!(secret["SharedSecret"].is_array(), "{secret}");
    let health = cluster
        .client(0)
        .request(reqwest::Method::GET, "/health", None, false)
        .await
        .expect("health");
    assert_eq!(health.body["peerTls"], true);
    assert!(health.body.get("insecure").is_none(), "{}", health.body);
}

/// Story — a rotation under load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_under_load_with_no_failed_request() {
    let mut cluster = TestCluster::start_secure(3, &[], &[]).await;
    let clients: Vec<_> = (0..3).map(|i| cluster.client(i)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut load = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let (stop, done, failed) = (Arc::clone(&stop), Arc::clone(&done), Arc::clone(&failed));
        load.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 100_000 {
                n += 1;
                let created = c
                    .create_object("Rotation", &json!({"node": i, "n": n}))
                    .await;
                let ok = match created {
                    Ok(o) => c.get_object("Rotation", &o.object_id).await.is_ok(),
                    Err(_) => false,
                };
                let counter = if ok { &done } else { &failed };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let wait_some = |at_least: usize| {
        let done = Arc::clone(&done);
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while done.load(Ordering::Relaxed) < at_least {
                assert!(
                    std::time::Instant::now() < deadline,
                    "load does not progress"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let hup_all = |cluster: &TestCluster| (0..3).for_each(|i| cluster.hangup(i));
    wait_some(20).await;
    let reloads = |cluster: &TestCluster, i| {
        let log = cluster.log_text(i);
        (
            log.matches("peer certificates reloaded").count(),
            log.matches("peer certificates kept").count(),
        )
    };

    // A bad certificate is refused and the one in use kept.
    let node3 = cluster.node_certs(2);
    let good = std::fs::read(node3.join("node.pem")).expect("node.pem");
    std::fs::write(node3.join("node.pem"), b"not a certificate").expect("break");
    cluster.hangup(2);
    TestCluster::eventually(
        Duration::from_secs(10),
        "the bad certificate is refused",
        || reloads(&cluster, 2).1 == 1,
    )
    .await;
    std::fs::write(node3.join("node.pem"), good).expect("mend");

    // 1. A new CA, trusted beside the old one everywhere.
    let old_ca = cluster.ca_dir.clone().expect("ca");
    let new_ca = cluster.dir.path().join("ca-new");
    let new_arg = new_ca.display().to_string();
    certs_cli(&["create-ca", "--ca-dir", &new_arg]);
    let old_pem = std::fs::read_to_string(old_ca.join("ca.pem")).expect("old ca");
    let new_pem = std::fs::read_to_string(new_ca.join("ca.pem")).expect("new ca");
    let mut dirs: Vec<_> = (0..3).map(|i| cluster.node_certs(i)).collect();
    dirs.push(cluster.admin_certs());
    for d in &dirs {
        std::fs::write(d.join("ca.pem"), format!("{old_pem}{new_pem}")).expect("bundle");
    }
    hup_all(&cluster);
    wait_some(done.load(Ordering::Relaxed) + 20).await;
    // 2. Each node's certificate from the new CA.
    for i in 0..3 {
        let (id, out) = (
            cluster.nodes[i].id.to_string(),
            cluster.node_certs(i).display().to_string(),
        );
        let rpc = cluster.nodes[i].rpc.clone();
        certs_cli(&[
            "create-node",
            "--ca-dir",
            &new_arg,
            "--node-id",
            &id,
            "--addr",
            &rpc,
            "--out",
            &out,
        ]);
    }
    let admin = cluster.admin_certs().display().to_string();
    certs_cli(&["create-admin", "--ca-dir", &new_arg, "--out", &admin]);
    hup_all(&cluster);
    wait_some(done.load(Ordering::Relaxed) + 20).await;
    // 3. The old CA no longer trusted.
    for d in &dirs {
        std::fs::write(d.join("ca.pem"), &new_pem).expect("new bundle");
    }
    hup_all(&cluster);
    wait_some(done.load(Ordering::Relaxed) + 20).await;
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.expect("load task");
    }
    for i in 0..3 {
        assert_eq!(reloads(&cluster, i).0, 3, "node {} reloads", i + 1);
    }
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests failed during the rotation ({} done)",
        done.load(Ordering::Relaxed)
    );

    // New connections use the new certificates only: a restarted node rejoins, and the old
    // CA's certificates are refused.
    cluster.stop(2);
    cluster.restart(2).await;
    cluster.wait_healthy(2, Duration::from_secs(90)).await;
    cluster
        .wait_placement_settled(Duration::from_secs(90))
        .await;
    let c = cluster.client(2);
    let o = c
        .create_object("Rotation", &json!({"after": true}))
        .await
        .expect("create after restart");
    assert!(cluster
        .client(0)
        .get_object("Rotation", &o.object_id)
        .await
        .is_ok());
    let old_admin = cluster.dir.path().join("old-admin");
    let old_arg = old_ca.display().to_string();
    certs_cli(&[
        "create-admin",
        "--ca-dir",
        &old_arg,
        "--out",
        &old_admin.display().to_string(),
    ]);
    std::fs::write(old_admin.join("ca.pem"), format!("{old_pem}{new_pem}"))
        .expect("old admin bundle");
    let old = channel(&cluster.nodes[0].rpc, Some(&admin_tls(&old_admin)));
    assert!(
        call(&old, "status").await.is_err(),
        "the old CA's admin is refused"
    );
    let new = channel(
        &cluster.nodes[0].rpc,
        Some(&admin_tls(&cluster.admin_certs())),
    );
    assert!(call(&new, "status").await.is_ok());
    assert!(
        cluster
            .metric(0, "basalt_tls_certificate_expiry_timestamp_seconds{")
            .await
            > 0.0
    );
}

/// Story — an upgrade: apps stored by an earlier build.
///
/// An app stored in the clear (as before sealing existed) is sealed when a node starts and
/// keeps working with its keys, standard and signed; a node that lost its secrets key fetches
/// it from a peer; a node whose key file holds another key does not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_stored_in_the_clear_are_sealed_and_keys_follow_the_cluster() {
    let mut cluster = TestCluster::start_secure(3, &[], &[]).await;
    let addr = cluster.nodes[0].rpc.clone();
    let node1 = channel(&addr, Some(&node_tls(&cluster.node_certs(0), 1)));
    let owner = cluster.credentials()["console"]["email"]
        .as_str()
        .expect("email")
        .to_string();
    let (id, master, rest, secret, token) = (
        "LegacyApp0000000000000000000000a",
        "legacy-master-key-000000000000aa",
        "legacy-rest-key-00000000000000aa",
        "legacysecret0001",
        "lgcy01",
    );
    let record = json!({
        "appName": "legacy", "applicationId": id, "restKey": rest, "masterKey": master,
        "accessKey": "legacy-access-key-0000000000000a", "secretKey": secret, "status": 1,
        "notAllowedCreateTable": 0, "owner": owner, "safeToken": token,
    });
    // Written as an older build did: in the clear, the index keyed by the secret key.
    for (ns, key, value) in [
        ("app_secret", secret, json!({"applicationId": id})),
        ("app", id, record),
    ] {
        let cmd =
            json!({"PutRecord": {"ns": ns, "key": key, "value": value, "expires_at_ms": null}});
        let msg = group_message(META_GROUP, &cmd).expect("encode");
        NodeServiceClient::new(node1.clone())
            .propose(tonic::Request::new(msg))
            .await
            .expect("propose");
    }
    // The app records as the metadata group's leader reads them (node 1 may lead it or not:
    // a stopped node hands its leaderships over).
    let stored = |cluster: &TestCluster| {
        let nodes: Vec<Channel> = (0..cluster.nodes.len())
            .map(|i| {
                channel(
                    &cluster.nodes[i].rpc,
                    Some(&node_tls(&cluster.node_certs(i), i as u64 + 1)),
                )
            })
            .collect();
        async move {
            for _ in 0..50 {
                for node in &nodes {
                    if let Ok(apps) = call(node, "read").await {
                        return apps.to_string();
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            panic!("no node reads the app records as the metadata group's leader")
        }
    };
    assert!(
        stored(&cluster).await.contains(master),
        "written in the clear"
    );

    // Node 1 starts again: what it finds in the clear it seals.
    cluster.stop(0);
    cluster.restart(0).await;
    cluster.wait_healthy(0, Duration::from_secs(90)).await;
    let mut sealed = false;
    for _ in 0..100 {
        let text = stored(&cluster).await;
        if !text.contains(master)
            && !text.contains(rest)
            && !text.contains(&format!("\"{secret}\""))
        {
            sealed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        sealed,
        "the legacy app is sealed: {}",
        stored(&cluster).await
    );
    let keys = basalt_client::AppKeys {
        application_id: id.into(),
        rest_key: rest.into(),
        master_key: Some(master.into()),
    };
    for i in 0..3 {
        let c = basalt_client::Client::new(&cluster.url(i), Some(keys.clone())).expect("client");
        c.create_object("Legacy", &json!({"i": i}))
            .await
            .expect("the legacy keys still work");
        let signed =
            cluster
                .anonymous_client(i)
                .with_signing(basalt_client::signing::SignedKeys::new(
                    secret,
                    token,
                    basalt_client::signing::Formula::JsSdk,
                ));
        signed
            .create_object("Legacy", &json!({"signed": i}))
            .await
            .expect("signed by the legacy secret");
    }

    // Node 2 lost its key file: it fetches the cluster's from a peer.
    let key2 = cluster.nodes[1].data_dir.join("secrets.key");
    let before = std::fs::read_to_string(&key2).expect("key");
    cluster.stop(1);
    std::fs::remove_file(&key2).expect("lose the key");
    cluster.restart(1).await;
    cluster.wait_healthy(1, Duration::from_secs(90)).await;
    assert_eq!(std::fs::read_to_string(&key2).expect("fetched"), before);
    assert!(cluster
        .client(1)
        .create_object("Legacy", &json!({"after": 2}))
        .await
        .is_ok());

    // Node 3 with another key does not start (it could open no app's keys).
    let key3 = cluster.nodes[2].data_dir.join("secrets.key");
    let good = std::fs::read(&key3).expect("key");
    cluster.stop(2);
    std::fs::write(&key3, format!("{}\n", "ab".repeat(32))).expect("another key");
    cluster.restart(2).await;
    let exit = cluster.wait_exit(2, Duration::from_secs(60)).await;
    assert!(
        exit.is_some_and(|s| !s.success()),
        "a node with another key stops"
    );
    assert!(cluster
        .log_text(2)
        .contains("another secrets key than the cluster's"));
    std::fs::write(&key3, good).expect("the right key");
    cluster.restart(2).await;
    cluster.wait_healthy(2, Duration::from_secs(90)).await;
}
