//! The real client SDKs against a `--header-brand Bmob` node: python-bmob 1.8.0 (installed by
//! `make test`'s `sdks` step, scripts/install-sdks.sh, into ~/.cache/basalt/sdks/python or
//! `BASALT_SDKS_DIR`) uploads and deletes files through its own `upload` and `delFile`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::common::TestCluster;

/// Where scripts/install-sdks.sh put python-bmob.
fn python_sdk_dir() -> PathBuf {
    let base = std::env::var_os("BASALT_SDKS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/basalt/sdks")
        });
    let dir = base.join("python");
    assert!(
        dir.join("bmobpy").exists(),
        "python-bmob is not installed in {dir:?}: run scripts/install-sdks.sh (make test does)"
    );
    dir
}

/// Runs `code` with python-bmob importable and `b` a client of node 1; its last output line
/// as JSON.
fn run_python(cluster: &TestCluster, code: &str) -> Value {
    let prelude = format!(
        "import json, sys\nfrom bmobpy.bmob import Bmob\nb = Bmob({:?}, {:?})\nb.resetDomain({:?})\n",
        cluster.keys.application_id,
        cluster.keys.rest_key,
        format!("http://{}", cluster.nodes[0].http)
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(format!("{prelude}{code}"))
        .env("PYTHONPATH", python_sdk_dir())
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_bmob_uploads_and_deletes_files() {
    let cluster = TestCluster::start(1, &[], &["--header-brand", "Bmob"]).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("photo.png");
    let bytes: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, &bytes).unwrap();

    let cluster_ref = &cluster;
    let uploaded = tokio::task::block_in_place(|| {
        run_python(
            cluster_ref,
            &format!(
                "f = b.upload({:?})\nprint(json.dumps({{'url': f.url, 'filename': f.filename}}))",
                path.to_str().unwrap()
            ),
        )
    });
    assert_eq!(uploaded["filename"], "photo.png");
    let url = uploaded["url"].as_str().unwrap().to_string();
    assert!(url.ends_with(".png"), "{url}");
    let got = reqwest::get(&url).await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().as_ref(), bytes.as_slice());

    let delete = format!("print(json.dumps({{'deleted': b.delFile({url:?})}}))");
    let deleted = tokio::task::block_in_place(|| run_python(cluster_ref, &delete));
    assert_eq!(deleted["deleted"], true);
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 404);
    // Deleting it again: the SDK sees the error (151).
    let again = tokio::task::block_in_place(|| {
        run_python(
            cluster_ref,
            &format!("{delete}\nprint(json.dumps({{'code': b.error['code']}}))"),
        )
    });
    assert_eq!(again["code"], 151);
}
