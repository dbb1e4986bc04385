//! Files in an S3-compatible bucket (`--files-backend s3://...`) on a local S3 server
//! (`common::s3`, moto): the uploads, downloads and deletes of `files.rs` through every node,
//! with the bytes in the bucket and none on the nodes; an upload given up midway leaves no
//! object and no open multipart upload; upkeep deletes a deleted file's object that came back,
//! and leaves objects that are not files' alone; the bucket down answers 503.

use std::io::Write;
use std::time::Duration;

use basalt_client::Method;
use serde_json::{json, Value};

use super::files::{bytes_of, copies_on, file_id, get_at, md5_hex, multipart_upload, upload};
use crate::common::s3::S3Server;
use crate::common::{assert_api_error, TestCluster};

const PREFIX: &str = "apps/files";

/// Sends the head of an upload of `total` bytes and `sent` of them to `addr`; the connection,
/// to hang up by dropping it.
fn unfinished_upload(
    addr: &str,
    keys: &basalt_client::AppKeys,
    total: usize,
    sent: usize,
) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST /2/files/gone.bin HTTP/1.1\r\nHost: {addr}\r\nX-Service-Application-Id: {}\r\nX-Service-REST-API-Key: {}\r\nContent-Type: application/octet-stream\r\nContent-Length: {total}\r\n\r\n",
        keys.application_id, keys.rest_key
    );
    s.write_all(head.as_bytes()).expect("head");
    s.write_all(&bytes_of(sent, 99)).expect("body");
    s.flush().expect("flush");
    s
}

/// Story — through every node, with a real S3-compatible server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_s3_backend_keeps_files_in_the_bucket_and_serves_them_from_every_node() {
    let mut s3 = S3Server::start("basalt-files").await;
    let mut args = s3.args(PREFIX);
    args.extend(["--files-upkeep-secs", "1", "--files-cdn", "s3"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cluster = TestCluster::start(3, &[], &args).await;
    let c = cluster
        .client(0)
        .with_timeout(Duration::from_secs(120))
        .unwrap();
    let base = |i: usize| format!("http://{}", cluster.nodes[i].http);
    let object_of = |url: &str| format!("{PREFIX}/{}", file_id(url));

    // A small raw upload: answered with the storage's name, kept as one object of its size.
    let small = bytes_of(1024, 1);
    let body = upload(&c, "small.bin", &small).await;
    assert_eq!(body["cdn"], "s3");
    let small_url = body["url"].as_str().unwrap().to_string();
    let today = chrono::Utc::now().format("%Y/%m/%d").to_string();
    assert!(
        small_url.starts_with(&format!("{}/s3/{today}/", base(0))),
        "{small_url}"
    );
    assert_eq!(s3.objects(PREFIX), vec![(object_of(&small_url), 1024)]);

    // 12 MiB through node 2: a multipart upload of three parts, nothing left open.
    let big = bytes_of(12 << 20, 2);
    let big_url = upload(
        &cluster
            .client(1)
            .with_timeout(Duration::from_secs(120))
            .unwrap(),
        "big.bin",
        &big,
    )
    .await["url"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(s3
        .objects(PREFIX)
        .contains(&(object_of(&big_url), 12 << 20)));
    assert_eq!(s3.multipart_uploads(), 0);

    // A multipart/form-data upload.
    let picture = bytes_of(300_000, 3);
    let r = multipart_upload(&cluster, "p.png", &[("file", Some("p.png"), &picture)]).await;
    assert_eq!(r.status(), 200);
    let picture_url = r.json::<Value>().await.unwrap()["url"]
        .as_str()
        .unwrap()
        .to_string();

    // Every node serves every file, whole and by range (across a part boundary for the big one).
    for i in 0..3 {
        let r = get_at(&base(i), &small_url, &[]).await;
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["etag"],
            format!("\"{}\"", md5_hex(&small)).as_str()
        );
        assert_eq!(r.bytes().await.unwrap().as_ref(), &small[..], "node {i}");
        let r = get_at(&base(i), &big_url, &[]).await;
        assert_eq!(
            r.headers()["content-length"],
            (12u64 << 20).to_string().as_str()
        );
        assert_eq!(
            md5_hex(&r.bytes().await.unwrap()),
            md5_hex(&big),
            "node {i}"
        );
        let r = get_at(&base(i), &big_url, &[("range", "bytes=5242000-5243999")]).await;
        assert_eq!(r.status(), 206);
        assert_eq!(
            r.headers()["content-range"],
            "bytes 5242000-5243999/12582912"
        );
        assert_eq!(
            r.bytes().await.unwrap().as_ref(),
            &big[5_242_000..5_244_000]
        );
        let r = get_at(&base(i), &picture_url, &[]).await;
        assert_eq!(r.headers()["content-type"], "image/png");
        assert_eq!(md5_hex(&r.bytes().await.unwrap()), md5_hex(&picture));
    }
    // The bytes are in the bucket only: no node holds a copy.
    for i in 0..3 {
        assert!(copies_on(&cluster, i).is_empty(), "node {i}");
    }

    // An upload given up past its first part: no file, no object, its multipart upload aborted.
    let before = s3.objects(PREFIX);
    let (addr, keys) = (cluster.nodes[0].http.clone(), cluster.keys.clone());
    let upload = tokio::task::block_in_place(|| unfinished_upload(&addr, &keys, 12 << 20, 7 << 20));
    TestCluster::eventually(Duration::from_secs(20), "a multipart upload begun", || {
        s3.multipart_uploads() == 1
    })
    .await;
    drop(upload);
    TestCluster::eventually(Duration::from_secs(20), "multipart upload aborted", || {
        s3.multipart_uploads() == 0
    })
    .await;
    assert_eq!(s3.objects(PREFIX), before);

    // Deletes: by path (then 404 and its object gone), and in a batch with a url never given.
    let path = small_url.split("/s3/").nth(1).unwrap().to_string();
    let deleted = c
        .request(Method::DELETE, &format!("/2/files/s3/{path}"), None, false)
        .await
        .unwrap();
    assert_eq!(deleted.body, json!({"msg": "ok"}));
    for i in 0..3 {
        assert_eq!(get_at(&base(i), &small_url, &[]).await.status(), 404);
    }
    let unknown = picture_url.replace(&file_id(&picture_url), &"0".repeat(32));
    let batch = c
        .request(
            Method::POST,
            "/2/cdnBatchDelete",
            Some(&json!({"s3": [picture_url, unknown]})),
            false,
        )
        .await;
    match batch {
        Err(basalt_client::Error::Api { body, status, .. }) => {
            assert_eq!((status, &body["code"]), (400, &json!(154)));
            assert_eq!(body["fail"], json!({"s3": [unknown]}));
        }
        other => panic!("batch with an unknown url: {other:?}"),
    }
    assert_eq!(get_at(&base(1), &picture_url, &[]).await.status(), 404);
    TestCluster::eventually(Duration::from_secs(20), "deleted objects gone", || {
        s3.objects(PREFIX) == vec![(object_of(&big_url), 12 << 20)]
    })
    .await;

    // A deleted file's object put back (a delete that failed to reach the bucket) is deleted
    // by upkeep; an object that is not a file's, and another prefix, are left alone.
    let small_key = object_of(&small_url);
    s3.put(&small_key, b"stale");
    s3.put(&format!("{PREFIX}/notes.txt"), b"not a file");
    s3.put(&format!("other/{}", file_id(&big_url)), b"another prefix");
    TestCluster::eventually(
        Duration::from_secs(30),
        "upkeep deletes the stale object",
        || !s3.objects(PREFIX).iter().any(|(k, _)| *k == small_key),
    )
    .await;
    let left: Vec<String> = s3.objects(PREFIX).into_iter().map(|(k, _)| k).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&format!("{PREFIX}/notes.txt")), "{left:?}");
    assert_eq!(s3.objects("other").len(), 1);
    assert_eq!(get_at(&base(2), &big_url, &[]).await.status(), 200);

    // The bucket unreachable: uploads and downloads answer 503, nothing is recorded.
    s3.stop();
    assert_api_error(
        c.upload_file("down.txt", "text/plain", b"x".to_vec()).await,
        503,
        503,
        "upload with the bucket down",
    );
    assert_eq!(get_at(&base(0), &big_url, &[]).await.status(), 503);
}
