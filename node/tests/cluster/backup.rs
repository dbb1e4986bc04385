//! Backups (`basalt admin backup`): taken while clients write, checked with `backup verify`,
//! and every kind of damage to one named.

use std::collections::BTreeSet;
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

/// Milliseconds since the epoch, as the nodes on this machine count them.
fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Story — a backup while four clients write through every node: no write fails or waits
/// long at the fence, every group's state is written at its barrier or after it, the backup
/// verifies whole, and a cluster restored from it holds every write acknowledged before the
/// fence went up and none sent after it came down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_writes_holds_every_write_acknowledged_before_its_fence() {
    let kept = tempfile::tempdir().unwrap();
    let (manifest, folder, writes, keys) = {
        let cluster = TestCluster::start(3, &["--shards", "6"], &[]).await;
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let (client, stop) = (cluster.client(w % 3), Arc::clone(&stop));
                tokio::spawn(async move {
                    // (id, sent, acknowledged), in ms since the epoch.
                    let mut done = Vec::new();
                    while !stop.load(Ordering::SeqCst) {
                        let sent = now_ms();
                        let created = client
                            .create_object("Score", &json!({"writer": w, "n": done.len()}))
                            .await
                            .unwrap_or_else(|e| panic!("writer {w}'s create #{}: {e}", done.len()));
                        done.push((created.object_id, sent, now_ms()));
                    }
                    done
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (manifest, folder) = tokio::task::block_in_place(|| backup(&cluster, 1, kept.path()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, Ordering::SeqCst);
        let mut writes = Vec::new();
        for w in writers {
            let done = w.await.unwrap();
            assert!(!done.is_empty(), "a writer wrote nothing");
            writes.extend(done);
        }
        let secrets = cluster.data_dir(0).join("secrets.key");
        std::fs::copy(secrets, kept.path().join("secrets.key")).unwrap();
        (manifest, folder, writes, cluster.keys.clone())
    };
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

    // The fence went up at startedMs and came down fenceMs later: the barriers are in between.
    let raised = manifest["startedMs"].as_i64().unwrap();
    let lowered = raised + manifest["fenceMs"].as_i64().unwrap();
    let restored =
        TestCluster::start_restored(1, &folder, &[], &kept.path().join("secrets.key"), keys).await;
    let held = crate::all_ids(&restored.client(0), "Score").await;
    let before: Vec<&String> = writes
        .iter()
        .filter(|w| w.2 < raised)
        .map(|w| &w.0)
        .collect();
    let after: Vec<&String> = writes
        .iter()
        .filter(|w| w.1 > lowered)
        .map(|w| &w.0)
        .collect();
    assert!(
        !before.is_empty() && !after.is_empty(),
        "writes on both sides of the barrier"
    );
    let lost: Vec<&&String> = before.iter().filter(|id| !held.contains(**id)).collect();
    assert!(
        lost.is_empty(),
        "acknowledged before the fence, not in the backup: {lost:?}"
    );
    let late: Vec<&&String> = after.iter().filter(|id| held.contains(**id)).collect();
    assert!(
        late.is_empty(),
        "sent after the fence, in the backup: {late:?}"
    );
    let ids: BTreeSet<&String> = writes.iter().map(|w| &w.0).collect();
    assert!(
        held.iter().all(|id| ids.contains(id)),
        "only what the writers wrote"
    );
}

/// What is done to a copy of a backup, what verify must say of it, and the object it names.
type Damage = (&'static str, fn(&Path), &'static str, &'static str);

/// A copy of the backup folder `from` (its `files/` too) at `to`.
fn copy_backup(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_backup(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// The path of the one stored file copied into the backup `f`.
fn stored_file(f: &Path) -> PathBuf {
    std::fs::read_dir(f.join("files"))
        .unwrap()
        .next()
        .expect("a stored file in the backup")
        .unwrap()
        .path()
}

/// Flips one byte in the middle of the file at `p`.
fn flip_a_byte(p: &Path) {
    let mut bytes = std::fs::read(p).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(p, bytes).unwrap();
}

/// Table — damage verify and restore name: one flipped byte in a group's state or in a stored
/// file, a group's state or a stored file gone, a manifest cut short; the untouched backup
/// passes, and a restore of a damaged one fails naming the object. A folder that is not there
/// is named too, and neither command makes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_and_restore_name_every_kind_of_damage() {
    let cluster = TestCluster::start(1, &["--shards", "1"], &[]).await;
    for n in 0..20 {
        cluster
            .client(0)
            .create_object("Thing", &json!({"n": n, "pad": "x".repeat(200)}))
            .await
            .unwrap();
    }
    let up = cluster
        .client(0)
        .upload_file("kept.bin", "application/octet-stream", vec![7u8; 5000])
        .await
        .unwrap();
    assert!(up.status < 300, "{:?}", up.body);
    let dir = tempfile::tempdir().unwrap();
    let (_, folder) = tokio::task::block_in_place(|| backup(&cluster, 0, dir.path()));
    let (ok, out) = verify(&folder);
    assert!(ok, "the untouched backup: {out}");
    let damages: [Damage; 5] = [
        (
            "a flipped byte in a state",
            |f| flip_a_byte(&f.join("g00001.state.zst")),
            "SHA-256",
            "g00001.state.zst",
        ),
        (
            "a missing state",
            |f| std::fs::remove_file(f.join("g00001.state.zst")).unwrap(),
            "missing",
            "g00001.state.zst",
        ),
        (
            "a flipped byte in a stored file",
            |f| flip_a_byte(&stored_file(f)),
            "SHA-256",
            "files/",
        ),
        (
            "a missing stored file",
            |f| std::fs::remove_file(stored_file(f)).unwrap(),
            "missing",
            "files/",
        ),
        (
            "a truncated manifest",
            |f| {
                let p = f.join("manifest.json");
                let bytes = std::fs::read(&p).unwrap();
                std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
            },
            "not a whole manifest",
            "manifest.json",
        ),
    ];
    for (what, damage, said, object) in damages {
        let copy = dir.path().join(format!("copy-{}", what.replace(' ', "-")));
        copy_backup(&folder, &copy);
        damage(&copy);
        let (ok, out) = verify(&copy);
        assert!(!ok, "{what} passed verify: {out}");
        assert!(out.contains(said) && out.contains(object), "{what}: {out}");
        let target = dir
            .path()
            .join(format!("restored-{}", what.replace(' ', "-")));
        let restored = Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args(["admin", "restore", "--from"])
            .arg(&copy)
            .arg("--data-dir")
            .arg(&target)
            .args(["--node-id", "1", "--rpc-addr", "127.0.0.1:1"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&restored.stderr);
        assert!(!restored.status.success(), "{what} was restored");
        assert!(
            text.contains(object),
            "{what}: the restore does not name {object}: {text}"
        );
    }
    let gone = dir.path().join("not-a-backup");
    let (ok, out) = verify(&gone);
    assert!(!ok && out.contains("no such directory"), "{out}");
    let restored = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "restore", "--from"])
        .arg(&gone)
        .arg("--data-dir")
        .arg(dir.path().join("restored-from-nothing"))
        .args(["--node-id", "1", "--rpc-addr", "127.0.0.1:1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&restored.stderr);
    assert!(
        !restored.status.success() && text.contains("no such directory"),
        "{text}"
    );
    assert!(
        !gone.exists(),
        "verify or restore made the folder they read"
    );
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

/// Story — a cluster that split is backed up and restored: the manifest names the group the
/// split made, `verify` takes it whole, and the 3-node cluster restored from it has the source's
/// slot map (the new group holds its slots) and every object, read through every node and
/// counted once; it takes writes to the moved slots, and its replicas agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_split_is_backed_up_and_restored_with_its_groups() {
    let kept = tempfile::tempdir().unwrap();
    let (folder, keys, ids) = {
        let cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
        crate::wait_slots_feature(&cluster).await;
        let ids = crate::create_numbered(&cluster.client(0), "Kept", 60, |n| json!({"n": n})).await;
        let slots: Value = serde_json::from_str(&tokio::task::block_in_place(|| {
            cluster.admin(0, &["split", "1", "--wait-secs", "120"])
        }))
        .expect("the slot map, as JSON");
        assert_eq!(
            slots["groups"]["3"],
            json!(128),
            "the split is done: {slots}"
        );
        let (manifest, folder) = tokio::task::block_in_place(|| backup(&cluster, 0, kept.path()));
        assert_eq!(manifest["splitGroups"], json!([3]), "{manifest}");
        let listed: BTreeSet<u64> = manifest["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["group"].as_u64().unwrap())
            .collect();
        assert_eq!(listed, BTreeSet::from([0, 1, 2, 3]));
        let secrets = cluster.data_dir(0).join("secrets.key");
        std::fs::copy(secrets, kept.path().join("secrets.key")).unwrap();
        (folder, cluster.keys.clone(), ids)
    };
    let (ok, text) = verify(&folder);
    assert!(ok, "verify takes the backup of a split cluster: {text}");
    // A manifest that leaves the split's group out, as if no split had been made, disagrees
    // with the slot map the metadata group's state holds.
    let short = kept.path().join("short");
    std::fs::create_dir_all(&short).unwrap();
    for entry in std::fs::read_dir(&folder).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), short.join(entry.file_name())).unwrap();
        }
    }
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(folder.join("manifest.json")).unwrap()).unwrap();
    manifest["splitGroups"] = json!([]);
    manifest["groups"]
        .as_array_mut()
        .unwrap()
        .retain(|g| g["group"] != json!(3));
    std::fs::write(short.join("manifest.json"), manifest.to_string()).unwrap();
    let (ok, text) = verify(&short);
    assert!(!ok, "a manifest without the split's group: {text}");
    assert!(
        text.contains("group 3 is one of the slot map's"),
        "named: {text}"
    );
    let secrets = kept.path().join("secrets.key");
    let restored = TestCluster::start_restored(3, &folder, &[], &secrets, keys).await;
    let slots: Value = serde_json::from_str(&restored.admin(0, &["slots"])).expect("slots json");
    assert_eq!(
        slots["groups"]["3"],
        json!(128),
        "the restored map: {slots}"
    );
    assert_eq!(
        slots["groups"]["1"],
        json!(128),
        "the restored map: {slots}"
    );
    for node in 0..3 {
        let client = restored.client(node);
        for (n, id) in ids.iter().enumerate() {
            let got = client.get_object("Kept", id).await.unwrap();
            assert_eq!(got.expect("restored")["n"], json!(n), "through node {node}");
        }
        let count = client
            .query("Kept", &[("count", "1"), ("limit", "0")])
            .await
            .unwrap();
        assert_eq!(count["count"], json!(ids.len()), "through node {node}");
    }
    // The split's group came back with its objects, and takes writes like the others.
    let records_of_3 = |digests: &std::collections::BTreeMap<u64, (u64, u64, String)>| {
        digests.get(&3).map(|d| d.1).unwrap_or(0)
    };
    let before = records_of_3(&restored.digests(0));
    assert!(before > 0, "group 3 holds its objects again");
    let more =
        crate::create_numbered(&restored.client(1), "Kept", 40, |n| json!({"n": 100 + n})).await;
    for id in &more {
        assert!(restored
            .client(2)
            .get_object("Kept", id)
            .await
            .unwrap()
            .is_some());
    }
    assert_eq!(
        crate::all_ids(&restored.client(0), "Kept").await.len(),
        ids.len() + more.len()
    );
    // 40 objects over 4 groups of which group 3 holds a quarter of the slots: all missing it
    // has a chance below one in 100,000.
    TestCluster::eventually(Duration::from_secs(10), "group 3 takes writes", || {
        records_of_3(&restored.digests(0)) > before
    })
    .await;
    restored
        .wait_same_state("the restored replicas", Duration::from_secs(60))
        .await;
}

/// Story — a backup into an S3 bucket (moto's server) of a cluster whose files are in a
/// bucket: a group's state larger than one part goes up as a multipart upload, the stored file
/// is listed (not copied), the bucket holds the backup's objects and no unfinished upload, and
/// `verify` and `restore` read it from the bucket with the AWS_* variables.
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
        let up = cluster
            .client(0)
            .upload_file(
                "in-bucket.txt",
                "text/plain",
                b"kept in the bucket".to_vec(),
            )
            .await
            .unwrap();
        assert!(up.status < 300, "{:?}", up.body);
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
    assert_eq!(shard["files"]["files"], json!(1), "{shard}");
    assert_eq!(
        shard["files"]["inBucket"],
        json!(1),
        "listed, not copied: {shard}"
    );
    let stored = s3.objects(&format!("nightly/{id}"));
    let mut names: Vec<&str> = stored
        .iter()
        .map(|(k, _)| k.rsplit('/').next().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "g00000.files.jsonl",
            "g00000.state.zst",
            "g00001.files.jsonl",
            "g00001.state.zst",
            "manifest.json"
        ],
        "the manifest, two states and two listings: {stored:?}"
    );
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
    // Backups go on every 2 s: one whose manifest was just written is pruned down to two a
    // moment later.
    let whole_ones = || {
        let mut whole: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("manifest.json").exists())
            .collect();
        whole.sort();
        whole
    };
    TestCluster::eventually(Duration::from_secs(10), "the newest two are kept", || {
        let whole = whole_ones();
        assert!(whole.len() <= 3, "at most one more than kept: {whole:?}");
        whole.len() == 2
    })
    .await;
    let whole = whole_ones();
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

/// The path of a stored file's url (`/<cdn>/YYYY/MM/DD/<id>.<ext>`).
fn url_path(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.find('/')
        .map_or_else(String::new, |i| rest[i..].to_string())
}

/// Copies of stored files in place under node `i`'s data dir.
fn copies_on(cluster: &TestCluster, i: usize) -> usize {
    let dir = cluster.data_dir(i).join("files");
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|shelf| shelf.file_name() != "tmp")
        .map(|shelf| {
            std::fs::read_dir(shelf.path())
                .into_iter()
                .flatten()
                .count()
        })
        .sum()
}

/// Story — stored files in a backup: six files deleted while a slow backup (`--rate`) copies
/// them are in it whole (every node holds its copies until the backup ends, then drops the
/// deleted ones), verify reads each, and a cluster restored from it serves every file with its
/// bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_deleted_during_a_backup_are_in_it_and_restored() {
    let kept = tempfile::tempdir().unwrap();
    let cluster = TestCluster::start(1, &["--shards", "1"], &[]).await;
    let c = cluster.client(0);
    let mut files = Vec::new();
    for n in 0..6u8 {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8 ^ n).collect();
        let up = c
            .upload_file(
                &format!("f{n}.bin"),
                "application/octet-stream",
                bytes.clone(),
            )
            .await
            .unwrap();
        assert!(up.status < 300, "{:?}", up.body);
        files.push((url_path(up.body["url"].as_str().unwrap()), bytes));
    }
    assert_eq!(copies_on(&cluster, 0), 6);
    // 600 kB of files at 0.2 MB/s: about 3 s, four files at a time.
    let (rpc, dest) = (cluster.rpc(0), kept.path().to_str().unwrap().to_string());
    let backing_up = std::thread::spawn(move || {
        Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args([
                "admin", "--rpc", &rpc, "backup", "--to", &dest, "--rate", "0.2",
            ])
            .output()
            .expect("run basalt admin backup")
    });
    // The backup's folder appears with its first object, once every group is pinned.
    let kept_dir = kept.path().to_path_buf();
    TestCluster::eventually(Duration::from_secs(30), "the backup's first object", || {
        std::fs::read_dir(&kept_dir).is_ok_and(|mut d| d.next().is_some())
    })
    .await;
    let m = cluster.master_client(0);
    for (path, _) in &files {
        let r = m
            .request(
                reqwest::Method::DELETE,
                &format!("/2/files{path}"),
                None,
                true,
            )
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{path}: {:?}", r.body);
    }
    let out = tokio::task::block_in_place(|| backing_up.join().unwrap());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: Value = serde_json::from_slice(&out.stdout).expect("the manifest");
    let listed = &manifest["groups"][1]["files"];
    assert_eq!(listed["files"], json!(6), "{manifest}");
    assert_eq!(listed["copied"], json!(6), "{manifest}");
    assert_eq!(listed["missing"], json!(0), "{manifest}");
    TestCluster::eventually(
        Duration::from_secs(10),
        "the deleted files' copies go",
        || copies_on(&cluster, 0) == 0,
    )
    .await;
    let folder = kept.path().join(manifest["backup"].as_str().unwrap());
    let copied = std::fs::read_dir(folder.join("files")).unwrap().count();
    assert_eq!(copied, 6, "each file's bytes in the backup's files/");
    let (ok, text) = verify(&folder);
    assert!(ok, "{text}");
    let secrets = kept.path().join("secrets.key");
    std::fs::copy(cluster.data_dir(0).join("secrets.key"), &secrets).unwrap();
    let keys = cluster.keys.clone();
    drop(cluster);
    let restored = TestCluster::start_restored(1, &folder, &[], &secrets, keys).await;
    for (path, bytes) in &files {
        let mut got = Vec::new();
        restored
            .client(0)
            .download_file(path, |piece| got.extend_from_slice(piece))
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(got == *bytes, "{path}: the restored file's bytes differ");
    }
}
