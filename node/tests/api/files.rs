//! Files (spec 4.7): uploads (raw and multipart), downloads (Range, ETag, caching) through any
//! node, deletes (every path form the SDKs send, batches), the errors of each, and what the
//! cluster does with the copies: a majority before an upload answers, none of a failed upload,
//! pulled by a node added later, reclaimed once deleted.

use std::io::{Read, Write};
use std::time::Duration;

use basalt_client::{Client, Method};
use md5::{Digest, Md5};
use serde_json::{json, Value};

use crate::common::scenario::{run_rows, As, Row};
use crate::common::{assert_api_error, assert_unauthorized, TestCluster};

pub(super) fn md5_hex(bytes: &[u8]) -> String {
    Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `n` bytes that differ from one test file to the next.
pub(super) fn bytes_of(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub(super) async fn upload(c: &Client, name: &str, bytes: &[u8]) -> Value {
    c.upload_file(name, "application/octet-stream", bytes.to_vec())
        .await
        .expect("upload")
        .body
}

pub(super) fn url_path(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split_once('/')
        .map(|(_, p)| p.to_string())
        .unwrap_or_default()
}

/// GET of `url` on another node's address (same path), with optional extra headers.
pub(super) async fn get_at(base: &str, url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = reqwest::Client::new().get(format!("{base}/{}", url_path(url)));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("GET file")
}

/// Copies in place under a node's data dir (`files/<2 hex>/<id>`).
pub(super) fn copies_on(cluster: &TestCluster, i: usize) -> Vec<String> {
    let dir = cluster.nodes[i].data_dir.join("files");
    let mut out = Vec::new();
    for shelf in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        if shelf.file_name() == "tmp" {
            continue;
        }
        for f in std::fs::read_dir(shelf.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            out.push(f.file_name().to_string_lossy().to_string());
        }
    }
    out
}

pub(super) fn file_id(url: &str) -> String {
    let name = url.rsplit('/').next().unwrap_or_default();
    name.split('.').next().unwrap_or_default().to_string()
}

/// The files endpoints as a table: uploads, deletes, batch deletes, signed urls, video
/// snapshots and downloads, with each refusal's code; a refused delete deletes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_endpoints_answer_as_their_table_says() {
    let cluster = TestCluster::start(1, &[], &["--max-file-mb", "1"]).await;
    let c = cluster.client(0);
    let kept = upload(&c, "kept.txt", b"kept").await;
    let kept_path = format!("/{}", url_path(kept["url"].as_str().expect("url")));
    let kept_id = file_id(&kept_path);
    let unknown = kept_path.replace(&kept_id, &"0".repeat(32));
    let rows = vec![
        Row::new("upload", Method::POST, "/2/files/hello.txt")
            .body("hello")
            .succeeds(200),
        Row::new("upload without keys", Method::POST, "/2/files/hello.txt")
            .auth(As::Nobody)
            .body("hello")
            .unauthorized(),
        Row::new(
            "upload with a wrong key",
            Method::POST,
            "/2/files/hello.txt",
        )
        .auth(As::WrongKey)
        .body("hello")
        .unauthorized(),
        Row::new(
            "upload a name without an extension",
            Method::POST,
            "/2/files/noext",
        )
        .body("x")
        .fails(400, 146),
        Row::new("upload an empty file", Method::POST, "/2/files/empty.txt")
            .body("")
            .fails(400, 149),
        Row::new(
            "upload past --max-file-mb",
            Method::POST,
            "/2/files/big.bin",
        )
        .body("x".repeat((1 << 20) + 1))
        .fails(400, 1500),
        Row::new(
            "delete without keys",
            Method::DELETE,
            format!("/2/files{kept_path}"),
        )
        .auth(As::Nobody)
        .unauthorized(),
        Row::new(
            "delete a file the app does not have",
            Method::DELETE,
            format!("/2/files{unknown}"),
        )
        .fails(400, 151),
        Row::new(
            "batch delete with urls that are not a list",
            Method::POST,
            "/2/cdnBatchDelete",
        )
        .body(r#"{"basalt": "x"}"#)
        .fails(400, 107),
        Row::new(
            "batch delete of unknown files",
            Method::POST,
            "/2/cdnBatchDelete",
        )
        .body(format!(r#"{{"basalt": ["{unknown}"]}}"#))
        .fails(400, 154),
        Row::new(
            "signed urls without a list",
            Method::POST,
            "/2/cdnSignedUrls",
        )
        .body(r#"{"urls": 1}"#)
        .fails(400, 107),
        Row::new(
            "signed urls with a lifetime out of bounds",
            Method::POST,
            "/2/cdnSignedUrls",
        )
        .body(r#"{"urls": [], "expires": 0}"#)
        .fails(400, 107),
        Row::new(
            "a signed url of a file the app does not have",
            Method::POST,
            "/2/cdnSignedUrls",
        )
        .body(format!(r#"{{"urls": ["{unknown}"]}}"#))
        .fails(400, 151),
        Row::new("signed urls", Method::POST, "/2/cdnSignedUrls")
            .body(format!(r#"{{"urls": ["{kept_path}"]}}"#))
            .succeeds(200),
        Row::new(
            "a video snapshot without its members",
            Method::POST,
            "/2/cdnVedioSnapshot",
        )
        .body("{}")
        .fails(400, 107),
        Row::new("download", Method::GET, kept_path.clone())
            .auth(As::Nobody)
            .answers(200),
        Row::new(
            "download a url the cluster never gave",
            Method::GET,
            unknown.clone(),
        )
        .auth(As::Nobody)
        .fails(404, 404),
        Row::new(
            "an image operation of an unknown mode",
            Method::GET,
            format!("{kept_path}?imageView2/9/w/10"),
        )
        .auth(As::Nobody)
        .fails(400, 161),
        Row::new(
            "an image operation on a file that is no image",
            Method::GET,
            format!("{kept_path}?imageView2/2/w/10"),
        )
        .auth(As::Nobody)
        .fails(400, 160),
    ];
    run_rows(&cluster, &rows).await;
    // What must not happen: the refused deletes left the kept file where it was.
    let r = reqwest::get(format!("http://{}{kept_path}", cluster.nodes[0].http))
        .await
        .expect("download");
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.expect("bytes").as_ref(), b"kept");
}

/// A one-node cluster with files up to 1 MiB, its app's client and its base url.
async fn files_cluster() -> (TestCluster, Client, String) {
    let cluster = TestCluster::start(1, &[], &["--max-file-mb", "1"]).await;
    let c = cluster.client(0);
    let base = format!("http://{}", cluster.nodes[0].http);
    (cluster, c, base)
}

/// A raw upload answers its name, an absolute url under the cdn name and today's date; the
/// download is whole with type, length, ETag and cache headers, in ranges (206, 416), and
/// revalidated (304); a url the cluster never gave is 404 whatever part is wrong.
#[tokio::test]
async fn an_upload_is_served_whole_in_ranges_and_revalidated() {
    let (_cluster, c, base) = files_cluster().await;
    let body = upload(&c, "hello.txt", b"hello, files").await;
    assert_eq!(
        (&body["filename"], &body["cdn"]),
        (&json!("hello.txt"), &json!("basalt"))
    );
    let url = body["url"].as_str().unwrap().to_string();
    let today = chrono::Utc::now().format("%Y/%m/%d").to_string();
    assert!(url.starts_with(&format!("{base}/basalt/{today}/")), "{url}");
    assert!(url.ends_with(".txt"), "{url}");
    assert_eq!(file_id(&url).len(), 32);
    let r = reqwest::get(&url).await.unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(
        (&h["content-type"], &h["content-length"]),
        (&"text/plain".parse().unwrap(), &"12".parse().unwrap())
    );
    let etag = format!("\"{}\"", md5_hex(b"hello, files"));
    assert_eq!(h["etag"], etag.as_str());
    assert!(h["cache-control"].to_str().unwrap().contains("max-age"));
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"hello, files");
    for (range, content_range, bytes) in [
        ("bytes=1-4", "bytes 1-4/12", &b"ello"[..]),
        ("bytes=-5", "bytes 7-11/12", &b"files"[..]),
    ] {
        let r = get_at(&base, &url, &[("range", range)]).await;
        assert_eq!(
            (r.status().as_u16(), &r.headers()["content-range"]),
            (206, &content_range.parse().unwrap())
        );
        assert_eq!(r.bytes().await.unwrap().as_ref(), bytes);
    }
    let r = get_at(&base, &url, &[("range", "bytes=12-")]).await;
    assert_eq!(
        (r.status().as_u16(), &r.headers()["content-range"]),
        (416, &"bytes */12".parse().unwrap())
    );
    assert_eq!(
        get_at(&base, &url, &[("if-none-match", &etag)])
            .await
            .status(),
        304
    );
    let r = reqwest::Client::new().head(&url).send().await.unwrap();
    let length = r.headers()["content-length"].to_str().unwrap().to_string();
    assert_eq!((r.status().as_u16(), length.as_str()), (200, "12"));
    let wrong_date = url.replace(&today, "2001/01/01");
    let wrong_ext = url.replace(".txt", ".png");
    let other_cdn = url.replace("/basalt/", "/other/");
    let unknown = url.replace(&file_id(&url), &"0".repeat(32));
    for bad in [wrong_date, wrong_ext, other_cdn, unknown] {
        assert_eq!(get_at(&base, &bad, &[]).await.status(), 404, "{bad}");
    }
}

/// A multipart upload stores its `file` part, whatever comes before it (107 without one);
/// refused uploads: no extension or a bad one 146, empty 149, over `--max-file-mb` 1500 (also
/// past the limit in the middle of a chunked body), no keys 401.
#[tokio::test]
async fn uploads_keep_their_file_part_or_are_refused_with_their_codes() {
    let (cluster, c, _base) = files_cluster().await;
    let picture = bytes_of(300_000, 1);
    let parts: [(&str, Option<&str>, &[u8]); 2] = [
        ("note", None, b"skipped"),
        ("file", Some("p.png"), &picture),
    ];
    let r = multipart_upload(&cluster, "p.png", &parts).await;
    assert_eq!(r.status(), 200);
    let multipart: Value = r.json().await.unwrap();
    let got = reqwest::get(multipart["url"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(got.headers()["content-type"], "image/png");
    assert_eq!(md5_hex(&got.bytes().await.unwrap()), md5_hex(&picture));
    let r = multipart_upload(&cluster, "q.png", &[("other", None, b"x")]).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], 107);

    for (name, bytes, code) in [
        ("noext", b"x".to_vec(), 146),
        ("a.t-t", b"x".to_vec(), 146),
        ("empty.txt", Vec::new(), 149),
        ("big.bin", vec![7u8; (1 << 20) + 1], 1500),
    ] {
        let r = c.upload_file(name, "text/plain", bytes).await;
        assert_api_error(r, 400, code, name);
    }
    let answer = chunked_upload(&cluster.nodes[0].http, &cluster.keys, "big.bin", 3 << 19);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("\"code\":1500"), "{answer}");
    let anonymous = cluster.anonymous_client(0);
    let r = anonymous
        .upload_file("a.txt", "text/plain", b"x".to_vec())
        .await;
    assert_unauthorized(r, "no keys");
}

/// A File value saved into an object reads back unchanged, also once its file is deleted;
/// another app cannot delete the file (151), its own app can, once (151 after), by every path
/// form the SDKs send.
#[tokio::test]
async fn a_file_is_deleted_once_by_its_own_app_and_objects_keep_their_value() {
    let (cluster, c, base) = files_cluster().await;
    let url = upload(&c, "hello.txt", b"hello, files").await["url"]
        .as_str()
        .unwrap()
        .to_string();
    let file_value =
        json!({"__type": "File", "filename": "hello.txt", "url": url, "cdn": "basalt"});
    let created = c
        .create_object("Doc", &json!({"attachment": file_value}))
        .await
        .unwrap();
    let attachment = || async {
        let doc = c
            .get_object("Doc", &created.object_id)
            .await
            .unwrap()
            .unwrap();
        doc["attachment"].clone()
    };
    assert_eq!(attachment().await, file_value);
    let other = cluster.create_app(0, "other").await;
    let path = format!("/2/files/{}", url_path(&url));
    let theirs = cluster
        .app_client(0, &other)
        .request(Method::DELETE, &path, None, false)
        .await;
    assert_api_error(theirs, 400, 151, "another app's file");
    let deleted = c.request(Method::DELETE, &path, None, false).await.unwrap();
    assert_eq!(deleted.body, json!({"msg": "ok"}));
    assert_eq!(get_at(&base, &url, &[]).await.status(), 404);
    let twice = c.request(Method::DELETE, &path, None, false).await;
    assert_api_error(twice, 400, 151, "deleted twice");
    assert_eq!(attachment().await, file_value);
    for form in ["upyun/{path}", "upyun//{path}"] {
        let u = upload(&c, "f.txt", b"sdk form").await["url"]
            .as_str()
            .unwrap()
            .to_string();
        let p = form.replace("{path}", &url_path(&u));
        let r = c
            .request(Method::DELETE, &format!("/2/files/{p}"), None, false)
            .await
            .unwrap();
        assert_eq!(r.body, json!({"msg": "ok"}), "{p}");
        assert_eq!(get_at(&base, &u, &[]).await.status(), 404, "{p}");
    }
}

/// Batch deletes: every file named goes; those that could not are listed under `fail` (154);
/// a batch that is no list is 107.
#[tokio::test]
async fn batch_deletes_name_the_files_they_could_not_delete() {
    let (_cluster, c, base) = files_cluster().await;
    let a = upload(&c, "a.txt", b"a").await["url"].clone();
    let b = upload(&c, "b.txt", b"b").await["url"].clone();
    let bogus = format!("{base}/basalt/2020/01/01/{}.txt", "f".repeat(32));
    let batch = |list: Value| {
        let c = c.clone();
        async move {
            let body = json!({"basalt": list});
            c.request(Method::POST, "/2/cdnBatchDelete", Some(&body), false)
                .await
        }
    };
    match batch(json!([a, b, bogus])).await {
        Err(basalt_client::Error::Api { body, status, .. }) => {
            assert_eq!((status, &body["code"]), (400, &json!(154)));
            assert_eq!(body["fail"], json!({"basalt": [bogus]}));
        }
        other => panic!("batch with an unknown url: {other:?}"),
    }
    for u in [&a, &b] {
        assert_eq!(get_at(&base, u.as_str().unwrap(), &[]).await.status(), 404);
    }
    let d = upload(&c, "d.txt", b"d").await["url"].clone();
    assert_eq!(batch(json!([d])).await.unwrap().body, json!({"msg": "ok"}));
    assert_api_error(
        batch(json!("not a list")).await,
        400,
        107,
        "batch of a non-array",
    );
}

/// The console sees what an app stores (another app nothing); a deleted file's copy leaves
/// the disk, and refused, cut-off or batch-deleted uploads are neither counted nor kept.
#[tokio::test]
async fn the_console_counts_an_apps_files_and_deleted_copies_leave_the_disk() {
    let (cluster, c, _base) = files_cluster().await;
    let picture = bytes_of(300_000, 1);
    let r = multipart_upload(&cluster, "p.png", &[("file", Some("p.png"), &picture)]).await;
    let kept: Value = r.json().await.unwrap();
    let gone = upload(&c, "gone.txt", b"gone").await["url"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/2/files/{}", url_path(&gone));
    c.request(Method::DELETE, &path, None, false).await.unwrap();
    // Refused and cut-off uploads keep nothing; a batch delete takes its files' copies too.
    for (name, bytes) in [
        ("noext", b"x".to_vec()),
        ("empty.txt", Vec::new()),
        ("big.bin", vec![7u8; (1 << 20) + 1]),
    ] {
        assert!(
            c.upload_file(name, "text/plain", bytes).await.is_err(),
            "{name}"
        );
    }
    chunked_upload(&cluster.nodes[0].http, &cluster.keys, "big.bin", 3 << 19);
    let r = multipart_upload(&cluster, "q.png", &[("other", None, b"x")]).await;
    assert_eq!(r.status(), 400);
    let batched = upload(&c, "batched.txt", b"b").await["url"].clone();
    let batch = json!({"basalt": [batched]});
    c.request(Method::POST, "/2/cdnBatchDelete", Some(&batch), false)
        .await
        .unwrap();
    let other = cluster.create_app(0, "other").await;
    let usage = |app: String| {
        let console = cluster.console_client(0);
        async move {
            let path = format!("/1/apps/{app}/files");
            console
                .request(Method::GET, &path, None, false)
                .await
                .unwrap()
                .body
        }
    };
    let ours = usage(cluster.keys.application_id.clone()).await;
    assert_eq!(ours, json!({"files": 1, "bytes": 300_000}));
    let theirs = usage(other["applicationId"].as_str().unwrap().to_string()).await;
    assert_eq!(theirs, json!({"files": 0, "bytes": 0}));
    let pic_id = file_id(kept["url"].as_str().unwrap());
    TestCluster::eventually(Duration::from_secs(10), "deleted copies gone", || {
        copies_on(&cluster, 0) == vec![pic_id.clone()]
    })
    .await;
}

/// Encrypted mode: an upload may be signed over its body — its raw bytes, or as the JS SDK
/// signs from Node, `JSON.stringify` of a Buffer of them — and the signature is checked once
/// the body streamed past: a body other than the signed one is refused (401) and nothing of it
/// is kept; a multipart body must be signed without its body.
#[tokio::test]
async fn uploads_signed_over_their_body_are_checked_before_they_are_kept() {
    use basalt_client::signing::{self, Formula, SignedKeys};
    let cluster = TestCluster::start(1, &[], &[]).await;
    let app = cluster.create_app(0, "signed files").await;
    let keys = SignedKeys::new(
        app["secretKey"].as_str().unwrap(),
        app["safeToken"].as_str().unwrap(),
        Formula::JsSdk,
    );
    let base = format!("http://{}", cluster.nodes[0].http);
    let post = |signed: Vec<u8>, sent: Vec<u8>, content_type: &'static str| {
        let (keys, base) = (&keys, &base);
        async move {
            let path = "/2/files/data.bin";
            let ts = signing::timestamp_now(Formula::JsSdk);
            let nonce = signing::new_nonce();
            let mut req = reqwest::Client::new()
                .post(format!("{base}{path}"))
                .header("Content-Type", content_type)
                .body(sent);
            for (name, value) in signing::sign(keys, path, &signed, &ts, &nonce) {
                req = req.header(format!("X-Service-{name}"), value);
            }
            let resp = req.send().await.expect("send");
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let buffer = |bytes: &[u8]| {
        let numbers: Vec<String> = bytes.iter().map(u8::to_string).collect();
        format!(r#"{{"type":"Buffer","data":[{}]}}"#, numbers.join(",")).into_bytes()
    };
    let a = bytes_of(300_000, 41);
    let mut b = a.clone();
    b[150_000] ^= 1;

    let (status, file) = post(buffer(&a), a.clone(), "application/json").await;
    assert_eq!(status, 200, "{file}");
    let got = reqwest::get(file["url"].as_str().unwrap()).await.unwrap();
    assert_eq!(got.bytes().await.unwrap().as_ref(), a.as_slice());
    let (status, file) = post(a.clone(), a.clone(), "application/octet-stream").await;
    assert_eq!(status, 200, "raw body: {file}");

    let (status, body) = post(buffer(&a), b.clone(), "application/json").await;
    assert_eq!(status, 401, "another body: {body}");
    let (status, body) = post(a.clone(), b.clone(), "application/octet-stream").await;
    assert_eq!(status, 401, "another raw body: {body}");
    let multipart = b"--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\n\r\nabc\r\n--x--\r\n";
    let (status, body) = post(
        multipart.to_vec(),
        multipart.to_vec(),
        "multipart/form-data; boundary=x",
    )
    .await;
    assert_eq!(status, 401, "a multipart body signed with it: {body}");

    // The app keeps the two files it was sent as signed.
    let console = cluster.console_client(0);
    let id = app["applicationId"].as_str().unwrap();
    let usage = console
        .request(Method::GET, &format!("/1/apps/{id}/files"), None, false)
        .await
        .unwrap()
        .body;
    assert_eq!(usage, json!({"files": 2, "bytes": 600_000}));
}

/// Uploads a multipart/form-data body of `parts` (name, file name, bytes) as `name` to node 1.
pub(super) async fn multipart_upload(
    cluster: &TestCluster,
    name: &str,
    parts: &[(&str, Option<&str>, &[u8])],
) -> reqwest::Response {
    let boundary = "----basalt-test-boundary";
    let mut body = Vec::new();
    for (field, file_name, bytes) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let disposition = match file_name {
            Some(f) => format!("Content-Disposition: form-data; name=\"{field}\"; filename=\"{f}\"\r\nContent-Type: application/octet-stream\r\n\r\n"),
            None => format!("Content-Disposition: form-data; name=\"{field}\"\r\n\r\n"),
        };
        body.extend_from_slice(disposition.as_bytes());
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    reqwest::Client::new()
        .post(format!("http://{}/2/files/{name}", cluster.nodes[0].http))
        .header("X-Service-Application-Id", &cluster.keys.application_id)
        .header("X-Service-REST-API-Key", &cluster.keys.rest_key)
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .expect("multipart upload")
}

/// Sends an upload of `len` bytes with a chunked body (no length known in advance) to node
/// `addr`; the raw answer.
fn chunked_upload(addr: &str, keys: &basalt_client::AppKeys, name: &str, len: usize) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "POST /2/files/{name} HTTP/1.1\r\nHost: {addr}\r\nX-Service-Application-Id: {}\r\nX-Service-REST-API-Key: {}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        keys.application_id, keys.rest_key
    );
    s.write_all(head.as_bytes()).unwrap();
    let piece = vec![b'x'; 64 << 10];
    let mut sent = 0;
    while sent < len {
        let n = piece.len().min(len - sent);
        // The node may answer and close before the whole body is sent.
        if s.write_all(format!("{n:x}\r\n").as_bytes()).is_err()
            || s.write_all(&piece[..n]).is_err()
            || s.write_all(b"\r\n").is_err()
        {
            break;
        }
        sent += n;
    }
    let _ = s.write_all(b"0\r\n\r\n");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
}

/// Writes an HTTP/1.1 upload of `total` bytes to `addr` by hand, calling `midway` after half
/// of it; answers the status line and body, or None when the connection broke.
fn raw_upload(
    addr: &str,
    keys: &basalt_client::AppKeys,
    name: &str,
    bytes: &[u8],
    midway: impl FnOnce(),
) -> Option<(u16, Value)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    let head = format!(
        "POST /2/files/{name} HTTP/1.1\r\nHost: {addr}\r\nX-Service-Application-Id: {}\r\nX-Service-REST-API-Key: {}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        keys.application_id,
        keys.rest_key,
        bytes.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    let half = bytes.len() / 2;
    s.write_all(&bytes[..half]).ok()?;
    s.flush().ok()?;
    std::thread::sleep(Duration::from_millis(500));
    midway();
    s.write_all(&bytes[half..]).ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    let status: u16 = answer.split(' ').nth(1)?.parse().ok()?;
    let body = answer.split("\r\n\r\n").nth(1)?;
    Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

/// Story — through every node, and with one of them down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_stored_on_a_quorum_and_served_by_every_node() {
    let mut cluster = TestCluster::start(3, &[], &["--files-upkeep-secs", "1"]).await;
    let c = cluster
        .client(0)
        .with_timeout(Duration::from_secs(120))
        .unwrap();

    // 50 MiB through node 1, read whole and by range through the others.
    let big = bytes_of(50 << 20, 7);
    let body = upload(&c, "big.bin", &big).await;
    let url = body["url"].as_str().unwrap().to_string();
    let id = file_id(&url);
    for i in [1, 2] {
        let base = format!("http://{}", cluster.nodes[i].http);
        let r = get_at(&base, &url, &[]).await;
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["content-length"],
            (50u64 << 20).to_string().as_str()
        );
        assert_eq!(
            md5_hex(&r.bytes().await.unwrap()),
            md5_hex(&big),
            "node {i}"
        );
        let r = get_at(&base, &url, &[("range", "bytes=1000000-1000999")]).await;
        assert_eq!(r.status(), 206);
        assert_eq!(
            r.bytes().await.unwrap().as_ref(),
            &big[1_000_000..1_001_000]
        );
    }
    // Three nodes, three replicas: every node holds a copy.
    for i in 0..3 {
        assert_eq!(copies_on(&cluster, i), vec![id.clone()], "node {i}");
    }

    // A holder killed in the middle of an upload: it still succeeds on the other two, whole.
    let second = bytes_of(8 << 20, 8);
    let addr = cluster.nodes[0].http.clone();
    let keys = cluster.keys.clone();
    let (status, answer) = tokio::task::block_in_place(|| {
        raw_upload(&addr, &keys, "mid.bin", &second, || cluster.kill(2))
    })
    .expect("an answer");
    assert_eq!(status, 200, "{answer}");
    let mid_url = answer["url"].as_str().unwrap().to_string();
    let r = get_at(&format!("http://{}", cluster.nodes[1].http), &mid_url, &[]).await;
    assert_eq!(md5_hex(&r.bytes().await.unwrap()), md5_hex(&second));

    // With the holder down, files are still served; deleted meanwhile, its copy is an orphan.
    let r = get_at(&format!("http://{}", cluster.nodes[1].http), &url, &[]).await;
    assert_eq!(md5_hex(&r.bytes().await.unwrap()), md5_hex(&big));
    let path = url_path(&url);
    c.request(Method::DELETE, &format!("/2/files/{path}"), None, false)
        .await
        .unwrap();
    // The restarted node receives the copy it missed and drops the deleted file's.
    cluster.restart(2).await;
    let mid_id = file_id(&mid_url);
    TestCluster::eventually(Duration::from_secs(60), "copies repaired", || {
        (0..3).all(|i| copies_on(&cluster, i) == vec![mid_id.clone()])
    })
    .await;

    // The receiving node killed mid-upload: nothing is stored anywhere.
    let before: Vec<Vec<String>> = (0..3).map(|i| copies_on(&cluster, i)).collect();
    let addr = cluster.nodes[0].http.clone();
    let answer = tokio::task::block_in_place(|| {
        raw_upload(&addr, &keys, "cut.bin", &bytes_of(8 << 20, 9), || {
            cluster.kill(0)
        })
    });
    assert!(
        answer.as_ref().is_none_or(|(status, _)| *status != 200),
        "{answer:?}"
    );
    for i in [1, 2] {
        let tmp = cluster.nodes[i].data_dir.join("files/tmp");
        TestCluster::eventually(Duration::from_secs(20), "partial copies discarded", || {
            std::fs::read_dir(&tmp).map(|d| d.count()).unwrap_or(0) == 0
        })
        .await;
        assert_eq!(copies_on(&cluster, i), before[i], "node {i}");
    }

    // With two of the three nodes down, an upload cannot reach a majority: 503, nothing kept.
    cluster.kill(2);
    let alone = cluster.client(1);
    assert_api_error(
        alone
            .upload_file("lonely.bin", "application/octet-stream", b"x".to_vec())
            .await,
        503,
        503,
        "upload without a majority",
    );
    let tmp = cluster.nodes[1].data_dir.join("files/tmp");
    assert_eq!(std::fs::read_dir(&tmp).map(|d| d.count()).unwrap_or(0), 0);
    assert_eq!(copies_on(&cluster, 1), before[1]);
}

#[tokio::test]
async fn a_node_added_later_receives_its_copies_and_the_others_keep_three() {
    let mut cluster = TestCluster::start(3, &[], &["--files-upkeep-secs", "1"]).await;
    let c = cluster.client(0);
    let mut urls = Vec::new();
    for i in 0..12 {
        let body = upload(&c, &format!("f{i}.txt"), format!("file {i}").as_bytes()).await;
        urls.push(body["url"].as_str().unwrap().to_string());
    }
    let ids: Vec<String> = urls.iter().map(|u| file_id(u)).collect();
    cluster.add_node().await;
    TestCluster::eventually(Duration::from_secs(90), "copies rebalanced", || {
        let held: Vec<Vec<String>> = (0..4).map(|i| copies_on(&cluster, i)).collect();
        !held[3].is_empty()
            && ids
                .iter()
                .all(|id| held.iter().filter(|h| h.contains(id)).count() == 3)
    })
    .await;
    // Every file still reads back through the new node.
    let base = format!("http://{}", cluster.nodes[3].http);
    for (i, url) in urls.iter().enumerate() {
        let r = get_at(&base, url, &[]).await;
        assert_eq!(r.status(), 200, "{url}");
        assert_eq!(r.text().await.unwrap(), format!("file {i}"));
    }

    // Two deletes of each file racing through different nodes: exactly one succeeds.
    let (c0, c3) = (cluster.client(0), cluster.client(3));
    for url in &urls {
        let path = format!("/2/files/{}", url_path(url));
        let (a, b) = tokio::join!(
            c0.request(Method::DELETE, &path, None, false),
            c3.request(Method::DELETE, &path, None, false)
        );
        let codes: Vec<Option<i64>> = [&a, &b]
            .iter()
            .map(|r| r.as_ref().err().and_then(|e| e.code()))
            .collect();
        assert!(
            (a.is_ok() && codes[1] == Some(151)) || (b.is_ok() && codes[0] == Some(151)),
            "{url}: {a:?} {b:?}"
        );
    }
    TestCluster::eventually(Duration::from_secs(30), "every copy dropped", || {
        (0..4).all(|i| copies_on(&cluster, i).is_empty())
    })
    .await;
}

/// `DELETE /2/files/<path>` of the file at `url`, by `client` (with its master key when
/// `master`).
async fn delete_file(
    client: &Client,
    url: &str,
    master: bool,
) -> Result<basalt_client::Response, basalt_client::Error> {
    let path = format!("/2/files/{}", url_path(url));
    client.request(Method::DELETE, &path, None, master).await
}

/// The app's file settings are checked when set (107); with `fileDelete` "master" only the
/// master key deletes a file (10061 for the REST key, a session, or a batch without it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_settings_are_checked_and_master_deletes_need_the_master_key() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let c = cluster.client(0);
    let master = cluster.master_client(0);
    let (_, alice) = crate::common::register_user(&c, "alice").await;

    // Settings are checked.
    for bad in [
        json!({"fileDelete": "owner"}),
        json!({"maxFileMb": 0}),
        json!({"maxFileMb": "1"}),
        json!({"privateFiles": "yes"}),
    ] {
        let r = cluster.try_app_settings(&bad).await;
        assert_api_error(r, 400, 107, &bad.to_string());
    }

    // fileDelete "master": only the master key deletes (10061 otherwise).
    cluster
        .set_app_settings(json!({"fileDelete": "master"}))
        .await;
    let url = upload(&c, "a.txt", b"a").await["url"]
        .as_str()
        .unwrap()
        .to_string();
    assert_api_error(delete_file(&c, &url, false).await, 400, 10061, "rest key");
    assert_api_error(
        delete_file(&c.clone().with_session(Some(&alice)), &url, false).await,
        400,
        10061,
        "a session",
    );
    // A batch without the master key is refused as a whole.
    let batch = json!({"basalt": [url.clone()]});
    let r = c
        .request(Method::POST, "/2/cdnBatchDelete", Some(&batch), false)
        .await;
    assert_api_error(r, 400, 10061, "batch without the master key");
    delete_file(&master, &url, true)
        .await
        .expect("master deletes");
}

/// Story — a race through every node: with `fileDelete` "uploader", the uploading user's
/// session deletes (no session 206, another user's 151 as if the file were not there, a batch
/// leaves such files, 154), and two deletes of one file through two nodes at once: one wins,
/// the other finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploader_deletes_need_the_uploaders_session_and_race_to_one_winner() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let c = cluster.client(0);
    let master = cluster.master_client(0);
    let (_, alice) = crate::common::register_user(&c, "alice").await;
    let (_, bob) = crate::common::register_user(&c, "bob").await;

    // fileDelete "uploader": the uploading user's session (or the master key); no session is
    // 206, another user's is 151 (as if the file were not there), and a batch leaves such files.
    cluster
        .set_app_settings(json!({"fileDelete": "uploader"}))
        .await;
    let as_alice = c.clone().with_session(Some(&alice));
    let hers = as_alice
        .upload_file("b.txt", "text/plain", b"b".to_vec())
        .await
        .unwrap()
        .body["url"]
        .as_str()
        .unwrap()
        .to_string();
    let anonymous_upload = upload(&c, "c.txt", b"c").await["url"]
        .as_str()
        .unwrap()
        .to_string();
    assert_api_error(delete_file(&c, &hers, false).await, 400, 206, "no session");
    let batch = json!({"basalt": [hers.clone()]});
    let r = c
        .request(Method::POST, "/2/cdnBatchDelete", Some(&batch), false)
        .await;
    assert_api_error(r, 400, 206, "batch without a session");
    let as_bob = c.clone().with_session(Some(&bob));
    assert_api_error(delete_file(&as_bob, &hers, false).await, 400, 151, "bob");
    assert_api_error(
        delete_file(&as_alice, &anonymous_upload, false).await,
        400,
        151,
        "no uploader",
    );
    let batch = json!({"basalt": [hers.clone()]});
    let r = as_bob
        .request(Method::POST, "/2/cdnBatchDelete", Some(&batch), false)
        .await;
    assert_api_error(r, 400, 154, "bob's batch");
    assert_eq!(reqwest::get(&hers).await.unwrap().status(), 200);
    // Alice deletes it through two nodes at once: one delete wins, the other finds nothing.
    let via = |i: usize| cluster.client(i).with_session(Some(&alice));
    let (one, two) = (via(1), via(2));
    let (one, two) = tokio::join!(
        delete_file(&one, &hers, false),
        delete_file(&two, &hers, false)
    );
    let outcomes = [
        one.map(|_| 200).unwrap_or_else(|e| e.code().unwrap_or(0)),
        two.map(|_| 200).unwrap_or_else(|e| e.code().unwrap_or(0)),
    ];
    let mut sorted = outcomes;
    sorted.sort();
    assert_eq!(sorted, [151, 200], "{outcomes:?}");
    assert_eq!(reqwest::get(&hers).await.unwrap().status(), 404);
    delete_file(&master, &anonymous_upload, true)
        .await
        .expect("master deletes");
}

/// `maxFileMb` caps an app's uploads below the node's cap (1500 above it); removed, the
/// node's cap holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_apps_max_file_mb_caps_its_uploads() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let c = cluster.client(0);
    // maxFileMb: the app's own cap, below the node's (1500 above it).
    cluster.set_app_settings(json!({"maxFileMb": 1})).await;
    let r = c
        .upload_file(
            "big.bin",
            "application/octet-stream",
            bytes_of(1_100_000, 7),
        )
        .await;
    assert_api_error(r, 400, 1500, "over the app's cap");
    upload(&c, "fits.bin", &bytes_of(1_000_000, 8)).await;
    cluster.set_app_settings(json!({"maxFileMb": null})).await;
    upload(&c, "big.bin", &bytes_of(1_100_000, 7)).await;
}

/// `privateFiles`: a url alone is refused (403); a signed one is served by any node, kept by
/// the client only until it expires; its token opens its file only and cannot be stretched;
/// public again, the url alone is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn private_files_are_served_by_their_signed_urls_only() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let c = cluster.client(0);
    let url_of = |b: Value| b["url"].as_str().unwrap().to_string();
    let photo = url_of(upload(&c, "p.txt", b"private bytes").await);
    let other = url_of(upload(&c, "q.txt", b"other bytes").await);
    cluster
        .set_app_settings(json!({"privateFiles": true}))
        .await;
    let status = |url: String| async move { reqwest::get(url).await.unwrap().status().as_u16() };
    let r = reqwest::get(&photo).await.unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], 403);
    let sign = |urls: Vec<String>, expires: Option<i64>| {
        let c = c.clone();
        async move {
            let mut body = json!({"urls": urls});
            if let Some(e) = expires {
                body["expires"] = json!(e);
            }
            c.request(Method::POST, "/2/cdnSignedUrls", Some(&body), false)
                .await
        }
    };
    let signed = sign(vec![photo.clone(), other.clone()], None)
        .await
        .unwrap()
        .body;
    let signed_photo = signed["results"][0].as_str().unwrap().to_string();
    let signed_other = signed["results"][1].as_str().unwrap().to_string();
    assert!(
        signed_photo.starts_with(&format!("{photo}?e=")),
        "{signed_photo}"
    );
    for i in 0..3 {
        let r = get_at(
            &format!("http://{}", cluster.nodes[i].http),
            &signed_photo,
            &[],
        )
        .await;
        assert_eq!(r.status(), 200);
        // Kept by the client only, and not past the url's expiry.
        let cache = r.headers()["cache-control"].to_str().unwrap().to_string();
        let age: i64 = cache
            .strip_prefix("private, max-age=")
            .unwrap()
            .parse()
            .unwrap();
        assert!((3500..=3600).contains(&age), "{cache}");
        assert_eq!(r.bytes().await.unwrap().as_ref(), b"private bytes");
    }
    // The token of one file does not open another; a later deadline breaks the token.
    let query = signed_photo.split_once('?').unwrap().1;
    assert_eq!(status(format!("{other}?{query}")).await, 403);
    let e: i64 = query.split('&').next().unwrap()[2..].parse().unwrap();
    let stretched = signed_photo.replace(&format!("e={e}"), &format!("e={}", e + 3600));
    assert_eq!(status(stretched).await, 403);
    assert_eq!(status(signed_other.clone()).await, 200);
    let expiring = sign(vec![photo.clone()], Some(1)).await.unwrap().body["results"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(status(expiring.clone()).await, 200);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(status(expiring).await, 403);
    // Public again: the url alone is served.
    cluster
        .set_app_settings(json!({"privateFiles": false}))
        .await;
    assert_eq!(status(photo).await, 200);
}

/// Signing needs the app's own files (151) and a lifetime from 1 s to 7 days (107).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn signing_needs_the_apps_own_files_and_a_sane_lifetime() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let c = cluster.client(0);
    let photo = upload(&c, "p.txt", b"private bytes").await["url"]
        .as_str()
        .unwrap()
        .to_string();
    let sign = |urls: Vec<String>, expires: Option<i64>| {
        let c = c.clone();
        async move {
            let mut body = json!({"urls": urls});
            if let Some(e) = expires {
                body["expires"] = json!(e);
            }
            c.request(Method::POST, "/2/cdnSignedUrls", Some(&body), false)
                .await
        }
    };
    assert_api_error(
        sign(vec!["https://elsewhere/x.jpg".into()], None).await,
        400,
        151,
        "not a file",
    );
    assert_api_error(
        sign(vec![photo.clone()], Some(0)).await,
        400,
        107,
        "expires 0",
    );
    assert_api_error(
        sign(vec![photo.clone()], Some(8 * 24 * 3600)).await,
        400,
        107,
        "8 days",
    );
}

/// Uploaded files cannot attack the app's users from the API's origin: every answer says
/// `nosniff`; HTML, SVG, XHTML, XML and PDF are sandboxed attachments unless the request came
/// to the files' own origin (`--files-public-url`); pictures stay inline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_files_are_sandboxed_attachments_off_their_own_origin() {
    let port = super::common::free_port();
    let files_origin = format!("http://files.localhost:{port}");
    let cluster = TestCluster::start(
        1,
        &["--shards", "1"],
        &["--files-public-url", &files_origin],
    )
    .await;
    let c = cluster.client(0);
    let base = cluster.url(0);
    let page = b"<html><script>alert(document.cookie)</script></html>".to_vec();
    for (name, content, active) in [
        ("x.html", page.clone(), true),
        (
            "x.svg",
            b"<svg xmlns='http://www.w3.org/2000/svg'><script>1</script></svg>".to_vec(),
            true,
        ),
        ("x.xhtml", page.clone(), true),
        ("x.pdf", b"%PDF-1.4".to_vec(), true),
        ("x.png", bytes_of(300, 1), false),
        ("x.txt", page.clone(), false),
    ] {
        let up = upload(&c, name, &content).await;
        let url = up["url"].as_str().expect("url");
        assert!(url.starts_with(&files_origin), "{url}");
        // On the API's own host.
        let r = get_at(&base, url, &[]).await;
        assert_eq!(r.status(), 200, "{name}");
        let h = r.headers().clone();
        assert_eq!(h["x-content-type-options"], "nosniff", "{name}");
        match active {
            true => {
                let disposition = h["content-disposition"].to_str().unwrap();
                assert!(
                    disposition.starts_with("attachment"),
                    "{name}: {disposition}"
                );
                assert_eq!(h["content-security-policy"], "sandbox", "{name}");
            }
            false => {
                assert!(h.get("content-disposition").is_none(), "{name}");
                assert!(h.get("content-security-policy").is_none(), "{name}");
            }
        }
        assert_eq!(
            r.bytes().await.unwrap().as_ref(),
            content.as_slice(),
            "{name}"
        );
        // On the files' own host: inline.
        let own = get_at(&base, url, &[("host", &format!("files.localhost:{port}"))]).await;
        assert_eq!(own.status(), 200, "{name}");
        assert_eq!(own.headers()["x-content-type-options"], "nosniff");
        assert!(
            own.headers().get("content-disposition").is_none(),
            "{name} on its own origin"
        );
    }
}

/// A client trickling an upload (a byte every 300 ms, each arriving well within the idle
/// time) is cut off once it falls behind the slowest pace an upload may keep: 408/107, having
/// sent a few dozen of its 1,000 bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_trickling_bytes_is_cut_off_at_its_pace() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = TestCluster::start(
        1,
        &[],
        &[
            "--http-body-timeout-secs",
            "3",
            "--upload-min-kib-per-sec",
            "1",
        ],
    )
    .await;
    let addr = cluster.nodes[0].http.clone();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let head = format!(
        "POST /2/files/slow.txt HTTP/1.1\r\nHost: {addr}\r\nX-Service-Application-Id: {}\r\nX-Service-REST-API-Key: {}\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n",
        cluster.keys.application_id, cluster.keys.rest_key
    );
    wr.write_all(head.as_bytes()).await.unwrap();
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    let writer = tokio::spawn(async move {
        for _ in 0..1000 {
            if wr.write_all(b"x").await.is_err() {
                return;
            }
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(120), rd.read_to_end(&mut answer)).await;
    let bytes_sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    writer.abort();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("\"code\":107"), "{text}");
    assert!(bytes_sent < 100, "cut off after {bytes_sent} bytes");
}
