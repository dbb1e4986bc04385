//! Backups (`basalt admin backup`): taken while clients write, checked with `backup verify`,
//! and every kind of damage to one named.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::TestCluster;

/// `basalt admin backup verify <src>`: whether it passed, and what it printed.
fn verify(src: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "backup", "verify"])
        .arg(src)
        .output()
        .expect("run basalt admin backup verify");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Takes a backup through node `i` into `dir`: its manifest and folder.
fn backup(cluster: &TestCluster, i: usize, dir: &Path) -> (Value, PathBuf) {
    let out = cluster.admin(i, &["backup", "--to", dir.to_str().unwrap()]);
    let manifest: Value = serde_json::from_str(&out).expect("the manifest, as JSON");
    let folder = dir.join(manifest["backup"].as_str().expect("a backup id"));
    (manifest, folder)
}

/// Story — a backup while four clients write through every node: no write fails or waits
/// long at the fence, every group's state is written at its barrier or after it, and the
/// backup verifies whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_writes_verifies_whole() {
    let cluster = TestCluster::start(3, &["--shards", "6"], &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (client, stop) = (cluster.client(w % 3), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    client
                        .create_object("Score", &json!({"writer": w, "n": n}))
                        .await
                        .unwrap_or_else(|e| panic!("writer {w}'s create #{n}: {e}"));
                    n += 1;
                }
                n
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (manifest, folder) = tokio::task::block_in_place(|| backup(&cluster, 1, dir.path()));
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        assert!(w.await.unwrap() > 0, "a writer wrote nothing");
    }
    let groups = manifest["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 7, "the metadata group and 6 shards");
    for g in groups {
        assert!(g["applied"].as_u64() >= g["barrier"].as_u64(), "{g}");
        assert!(g["records"].as_u64().unwrap() > 0, "{g}");
    }
    assert!(manifest["fenceMs"].as_u64().unwrap() < 3000, "{manifest}");
    assert!(folder.join("manifest.json").exists());
    let (ok, out) = verify(&folder);
    assert!(ok, "{out}");
    assert!(out.contains("every object is whole"), "{out}");
}

/// What is done to a copy of a backup, and what verify must say of it.
type Damage = (&'static str, fn(&Path), &'static str);

/// Table — damage verify names: one flipped byte in a group's state, a group's state gone,
/// a manifest cut short; the untouched backup passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_every_kind_of_damage() {
    let cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    for n in 0..20 {
        cluster
            .client(0)
            .create_object("Thing", &json!({"n": n, "pad": "x".repeat(200)}))
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, folder) = tokio::task::block_in_place(|| backup(&cluster, 0, dir.path()));
    let (ok, out) = verify(&folder);
    assert!(ok, "the untouched backup: {out}");
    let state = "g00001.state.zst";
    let damages: [Damage; 3] = [
        (
            "a flipped byte",
            |f| {
                let p = f.join("g00001.state.zst");
                let mut bytes = std::fs::read(&p).unwrap();
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0x01;
                std::fs::write(&p, bytes).unwrap();
            },
            "SHA-256",
        ),
        (
            "a missing state",
            |f| std::fs::remove_file(f.join("g00001.state.zst")).unwrap(),
            "missing",
        ),
        (
            "a truncated manifest",
            |f| {
                let p = f.join("manifest.json");
                let bytes = std::fs::read(&p).unwrap();
                std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
            },
            "manifest.json: not a whole manifest",
        ),
    ];
    for (what, damage, named) in damages {
        let copy = dir.path().join(format!("copy-{}", what.replace(' ', "-")));
        std::fs::create_dir(&copy).unwrap();
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
        }
        damage(&copy);
        let (ok, out) = verify(&copy);
        assert!(!ok, "{what} passed verify: {out}");
        assert!(out.contains(named), "{what}: {out}");
        if what != "a truncated manifest" {
            assert!(out.contains(state), "{what} is not named: {out}");
        }
    }
}

/// Story — a backup restored into new 1- and 3-node clusters: every object, user and schema
/// the source held at the backup is there, through every node, and the write acknowledged
/// after it is not; the restored clusters take writes, and their replicas agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_into_one_and_three_node_clusters() {
    let kept = tempfile::tempdir().unwrap();
    let (folder, keys, ids) = {
        let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
        let mut ids = Vec::new();
        for n in 0..24 {
            let c = cluster.client(n % 3);
            let created = c.create_object("Kept", &json!({"n": n})).await.unwrap();
            ids.push(created.object_id);
        }
        crate::common::register_user(&cluster.client(1), "ada").await;
        let (_, folder) = tokio::task::block_in_place(|| backup(&cluster, 2, kept.path()));
        cluster
            .client(0)
            .create_object("Kept", &json!({"n": 1000}))
            .await
            .unwrap();
        let secrets = cluster.data_dir(0).join("secrets.key");
        std::fs::copy(secrets, kept.path().join("secrets.key")).unwrap();
        (folder, cluster.keys.clone(), ids)
    };
    for nodes in [1, 3] {
        let secrets = kept.path().join("secrets.key");
        let restored =
            TestCluster::start_restored(nodes, &folder, &[], &secrets, keys.clone()).await;
        for (n, id) in ids.iter().enumerate() {
            let got = restored
                .client(n % nodes)
                .get_object("Kept", id)
                .await
                .unwrap();
            assert_eq!(got.expect("restored")["n"], json!(n), "{nodes} nodes");
        }
        let count = restored
            .client(0)
            .query("Kept", &[("count", "1"), ("limit", "0")])
            .await
            .unwrap();
        assert_eq!(
            count["count"],
            json!(24),
            "{nodes} nodes: nothing after the backup"
        );
        let login = restored
            .client(nodes - 1)
            .request(
                reqwest::Method::POST,
                "/1/login",
                Some(&json!({"username": "ada", "password": "p"})),
                false,
            )
            .await
            .unwrap();
        assert_eq!(
            login.status, 200,
            "{nodes} nodes: the user logs in: {:?}",
            login.body
        );
        restored
            .client(0)
            .create_object("Kept", &json!({"n": 24}))
            .await
            .expect("the restored cluster takes writes");
        let members: Value = serde_json::from_str(&restored.admin(0, &["members"])).unwrap();
        let listed = members["ClusterInfo"]["nodes"].as_array().unwrap().len();
        assert_eq!(listed, nodes, "only the new cluster's members: {members}");
        if nodes == 3 {
            restored
                .wait_same_state("the restored replicas", Duration::from_secs(30))
                .await;
        }
    }
}

/// Story — a backup into an S3 bucket (moto's server): a group's state larger than one part
/// goes up as a multipart upload, the bucket holds the backup's objects and no unfinished
/// upload, and `verify` and `restore` read it from the bucket with the AWS_* variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_goes_to_a_bucket_and_restores_from_it() {
    use rand::Rng;
    let s3 = crate::common::s3::S3Server::start("backups").await;
    let kept = tempfile::tempdir().unwrap();
    let (manifest, keys) = {
        let args = s3.args("files");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let cluster = TestCluster::start(1, &["--shards", "1"], &args).await;
        for n in 0..96 {
            // Random text compresses little: the shard's state is over one 8 MiB part.
            let noise: String = (0..120_000)
                .map(|_| rand::rng().sample(rand::distr::Alphanumeric) as char)
                .collect();
            cluster
                .client(0)
                .create_object("Blob", &json!({"n": n, "noise": noise}))
                .await
                .unwrap();
        }
        let to = format!("s3://{}/nightly", s3.bucket);
        let out = tokio::task::block_in_place(|| cluster.admin(0, &["backup", "--to", &to]));
        let manifest: Value = serde_json::from_str(&out).unwrap();
        let secrets = cluster.data_dir(0).join("secrets.key");
        std::fs::copy(secrets, kept.path().join("secrets.key")).unwrap();
        (manifest, cluster.keys.clone())
    };
    let id = manifest["backup"].as_str().unwrap();
    let shard = &manifest["groups"][1];
    assert!(shard["size"].as_u64().unwrap() > 8 << 20, "{shard}");
    let stored = s3.objects(&format!("nightly/{id}"));
    let names: Vec<&str> = stored.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names.len(), 3, "the manifest and two states: {names:?}");
    assert_eq!(s3.multipart_uploads(), 0, "no upload left unfinished");
    let src = format!("s3://{}/nightly/{id}", s3.bucket);
    let env = [
        ("AWS_ENDPOINT_URL", s3.endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "basalt-test"),
        ("AWS_SECRET_ACCESS_KEY", "basalt-test-secret"),
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "backup", "verify", &src])
        .envs(env)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("every object is whole"),
        "{text}"
    );
    let restored = TestCluster::start_restored(
        1,
        std::path::Path::new(&src),
        &env,
        &kept.path().join("secrets.key"),
        keys,
    )
    .await;
    let count = restored
        .client(0)
        .query("Blob", &[("count", "1"), ("limit", "0")])
        .await
        .unwrap();
    assert_eq!(count["count"], json!(96));
}

/// Scheduled backups (`--backup-to`, `--backup-schedule` every 2 seconds, `--backup-keep 2`):
/// they are taken on their own, the newest two whole ones are kept, the last one verifies,
/// and `/metrics` tells when the last one finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_backups_are_taken_and_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().to_str().unwrap().to_string();
    let schedule = [
        "--backup-to",
        &to,
        "--backup-schedule",
        "*/2 * * * * *",
        "--backup-keep",
        "2",
    ];
    let cluster = TestCluster::start(1, &["--shards", "2"], &schedule).await;
    cluster
        .client(0)
        .create_object("Thing", &json!({"n": 1}))
        .await
        .unwrap();
    cluster
        .wait_metric_sum(
            &[0],
            "basalt_backups_scheduled_total{outcome=\"ok\"}",
            4.0,
            Duration::from_secs(60),
            "four scheduled backups",
        )
        .await;
    let mut whole: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifest.json").exists())
        .collect();
    whole.sort();
    assert_eq!(whole.len(), 2, "the newest two are kept: {whole:?}");
    let (ok, out) = verify(whole.last().unwrap());
    assert!(ok, "{out}");
    let last = cluster
        .metric(0, "basalt_backup_last_success_timestamp_seconds")
        .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        now - last < 30.0,
        "the last backup finished {} s ago",
        now - last
    );
}
