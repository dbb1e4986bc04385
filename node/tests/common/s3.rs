//! A local S3-compatible server for the tests of the S3 files backend: moto's server (`moto[s3]`
//! from PyPI), installed by `make test`'s `test-servers` step (scripts/install-test-servers.sh)
//! into ~/.cache/basalt/test-servers/moto or `$BASALT_TEST_SERVERS_DIR/moto`, started on a
//! loopback port with one bucket and killed when dropped. Tests look into the bucket from
//! outside Basalt with boto3, which moto brings.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The credentials the tests give Basalt (moto accepts any).
const ACCESS_KEY: &str = "basalt-test";
const SECRET_KEY: &str = "basalt-test-secret";
const REGION: &str = "us-east-1";

pub struct S3Server {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    pub bucket: String,
    python_path: PathBuf,
    child: Option<Child>,
}

/// Where scripts/install-test-servers.sh put moto.
fn moto_dir() -> PathBuf {
    let base = std::env::var_os("BASALT_TEST_SERVERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                .join(".cache/basalt/test-servers")
        });
    let dir = base.join("moto");
    assert!(
        dir.join("moto").exists(),
        "no moto server in {dir:?}: run scripts/install-test-servers.sh (make test does)"
    );
    dir
}

impl S3Server {
    /// Starts the server on a free loopback port and creates `bucket` in it.
    pub async fn start(bucket: &str) -> S3Server {
        let python_path = moto_dir();
        let port = super::free_port();
        let child = Command::new("python3")
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .env("PYTHONPATH", &python_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the moto server");
        let server = S3Server {
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket: bucket.to_string(),
            python_path,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // moto creates a bucket from an unsigned PUT.
            let made = reqwest::Client::new()
                .put(format!("{}/{bucket}", server.endpoint))
                .send()
                .await;
            match made {
                Ok(r) if r.status().is_success() => break,
                _ => {
                    assert!(Instant::now() < deadline, "the moto server did not start");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        server
    }

    /// The options that point Basalt's files at `prefix` of the bucket.
    pub fn args(&self, prefix: &str) -> Vec<String> {
        [
            "--files-backend",
            &format!("s3://{}/{prefix}", self.bucket),
            "--s3-endpoint",
            &self.endpoint,
            "--s3-region",
            REGION,
            "--s3-access-key-id",
            ACCESS_KEY,
            "--s3-secret-access-key",
            SECRET_KEY,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Runs `code` with `s3` a boto3 client of the server and `bucket` its bucket; its last
    /// output line as JSON.
    fn boto(&self, code: &str) -> Value {
        let prelude = format!(
            "import json, boto3\ns3 = boto3.client('s3', endpoint_url={:?}, region_name={REGION:?}, aws_access_key_id={ACCESS_KEY:?}, aws_secret_access_key={SECRET_KEY:?})\nbucket = {:?}\n",
            self.endpoint, self.bucket
        );
        let out = Command::new("python3")
            .arg("-c")
            .arg(format!("{prelude}{code}"))
            .env("PYTHONPATH", &self.python_path)
            .output()
            .expect("run boto3");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "boto3 failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let last = stdout.lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }

    /// The objects under `prefix/` with their sizes, by key.
    pub fn objects(&self, prefix: &str) -> Vec<(String, u64)> {
        let listed = self.boto(&format!(
            "pages = s3.get_paginator('list_objects_v2').paginate(Bucket=bucket, Prefix={:?})\nprint(json.dumps([[o['Key'], o['Size']] for p in pages for o in p.get('Contents', [])]))",
            format!("{prefix}/")
        ));
        serde_json::from_value(listed).expect("objects")
    }

    /// Puts an object at `key` from outside Basalt.
    pub fn put(&self, key: &str, bytes: &[u8]) {
        self.boto(&format!(
            "s3.put_object(Bucket=bucket, Key={key:?}, Body=bytes({bytes:?}))\nprint('{{}}')"
        ));
    }

    /// The incomplete multipart uploads of the bucket.
    pub fn multipart_uploads(&self) -> usize {
        let listed = self.boto(
            "print(json.dumps(len(s3.list_multipart_uploads(Bucket=bucket).get('Uploads', []))))",
        );
        listed.as_u64().expect("a count") as usize
    }

    /// Stops the server (its objects are gone with it).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
