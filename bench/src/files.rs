//! File workloads: `upload-1k`, `upload-1m` and `upload-20m` store one file of 1 KiB, 1 MiB or
//! 20 MiB per operation (`POST /2/files/<name>`, a raw body); `download-1k`, `download-1m` and
//! `download-20m` read whole, through the nodes in turn, one of the files of that size stored
//! in a warm-up (`GET` of its url). Their table rows add MB/s: file bytes moved per second
//! (MB = 2^20 bytes).

use std::collections::HashMap;

use anyhow::Context;
use basalt_client::Client;
use bytes::Bytes;

/// Files of each size stored in the warm-up for the download workloads.
const STORED_PER_SIZE: usize = 16;

/// Whether `workload` uploads (true) or downloads, and its files' size, when it is a file
/// workload.
pub fn file_workload(workload: &str) -> Option<(bool, usize)> {
    let (upload, size) = workload
        .strip_prefix("upload-")
        .map(|s| (true, s))
        .or_else(|| workload.strip_prefix("download-").map(|s| (false, s)))?;
    let bytes = match size {
        "1k" => 1 << 10,
        "1m" => 1 << 20,
        "20m" => 20 << 20,
        _ => return None,
    };
    Some((upload, bytes))
}

/// What the file workloads of one run send and read.
#[derive(Default)]
pub struct FileSet {
    /// An upload's body, by size.
    bodies: HashMap<usize, Bytes>,
    /// The url paths of the files stored for downloads, by size.
    stored: HashMap<usize, Vec<String>>,
}

/// `n` bytes that do not compress.
fn noise(n: usize, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let bytes: Vec<u8> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    bytes.into()
}

/// The path of an uploaded file's `url`.
fn url_path(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    rest.find('/').map(|i| rest[i..].to_string())
}

impl FileSet {
    /// The bodies `workloads` upload, and the files they download stored through `clients`.
    pub async fn prepare(clients: &[Client], workloads: &[String]) -> anyhow::Result<FileSet> {
        let mut set = FileSet::default();
        for (upload, size) in workloads.iter().filter_map(|w| file_workload(w)) {
            let body = set
                .bodies
                .entry(size)
                .or_insert_with(|| noise(size, size as u64))
                .clone();
            if upload || set.stored.contains_key(&size) {
                continue;
            }
            let mut paths = Vec::new();
            for n in 0..STORED_PER_SIZE {
                let c = &clients[n % clients.len()];
                let answer = c
                    .upload_file("stored.bin", "application/octet-stream", body.clone())
                    .await
                    .context("storing the download workloads' files")?;
                let url = answer.body["url"].as_str().unwrap_or_default();
                paths.push(url_path(url).context("an upload answered no url")?);
            }
            set.stored.insert(size, paths);
        }
        Ok(set)
    }

    /// One operation of the file workload `workload` (the `i`th pseudo-random draw): the file
    /// bytes it moved.
    pub async fn run(&self, client: &Client, workload: &str, i: usize) -> anyhow::Result<u64> {
        let (upload, size) = file_workload(workload).context("not a file workload")?;
        if upload {
            let body = self.bodies.get(&size).context("no body")?.clone();
            client
                .upload_file("bench.bin", "application/octet-stream", body)
                .await?;
            return Ok(size as u64);
        }
        let paths = self.stored.get(&size).context("no stored files")?;
        let got = client
            .download_file(&paths[i % paths.len()], |_| {})
            .await?;
        anyhow::ensure!(got == size as u64, "read {got} bytes of {size}");
        Ok(got)
    }
}
