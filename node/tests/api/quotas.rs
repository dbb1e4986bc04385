//! Per-app storage quotas (docs/api.md, "Limits"): `objectsQuotaMb` and `filesQuotaMb` set
//! through app management; a write that would pass them answers 400/10082 and writes nothing,
//! deletes and updates that add nothing go on, and the room deletes free is usable again at
//! once. What an app stores is counted exactly on the shards (`GET /1/apps/<id>/usage`), also
//! when writes race through every node of a cluster.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::{assert_api_error, TestCluster};
use super::files::url_path;

/// `GET /1/apps/<default app>/usage` through node `i`.
async fn usage(cluster: &TestCluster, i: usize) -> Value {
    cluster
        .console_client(i)
        .request(
            Method::GET,
            &format!("/1/apps/{}/usage", cluster.keys.application_id),
            None,
            false,
        )
        .await
        .expect("usage")
        .body
}

/// An object of about `kib` KiB.
fn blob(kib: usize, i: usize) -> Value {
    json!({"s": "x".repeat(kib * 1024), "i": i})
}

/// Story — a bound: an app fills its quotas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_objects_and_files_stay_within_its_quotas_and_deletes_make_room() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    for bad in [json!({"objectsQuotaMb": 0}), json!({"filesQuotaMb": "1"})] {
        assert_api_error(cluster.try_app_settings(&bad).await, 400, 107, "bad quota");
    }
    let c = cluster.client(0);
    // A user signed up before the app is full still logs in after.
    c.request(
        Method::POST,
        "/1/users",
        Some(&json!({"username": "ann", "password": "p"})),
        false,
    )
    .await
    .expect("sign up");
    cluster
        .set_app_settings(json!({"objectsQuotaMb": 1, "filesQuotaMb": 1}))
        .await;

    // 100 KiB objects until the next would pass 1 MiB.
    let mut ids = Vec::new();
    let refused = loop {
        match c.create_object("Blob", &blob(100, ids.len())).await {
            Ok(created) => ids.push(created.object_id),
            Err(e) => break e,
        }
        assert!(ids.len() <= 11, "no quota");
    };
    assert_eq!(
        (refused.status(), refused.code()),
        (Some(400), Some(10082)),
        "{refused}"
    );
    assert!((9..=10).contains(&ids.len()), "{} created", ids.len());
    let u = usage(&cluster, 0).await;
    assert_eq!(u["objects"]["quotaMb"], 1, "{u}");
    let bytes = u["objects"]["bytes"].as_u64().unwrap();
    // Every Blob and the user: exactly what is stored, within the quota.
    assert_eq!(u["objects"]["count"], ids.len() + 1, "{u}");
    assert!(
        bytes >= ids.len() as u64 * 102_400 && bytes <= 1 << 20,
        "{u}"
    );
    let count = c
        .query("Blob", &[("count", "1"), ("limit", "0")])
        .await
        .unwrap();
    assert_eq!(count["count"], ids.len(), "nothing refused was written");

    // Updates that add data are refused; those that remove, deletes and logins go on.
    assert_api_error(
        c.update_object("Blob", &ids[0], &json!({"t": "y".repeat(100 * 1024)}))
            .await,
        400,
        10082,
        "an update adding 100 KiB",
    );
    c.update_object("Blob", &ids[0], &json!({"s": {"__op": "Delete"}}))
        .await
        .expect("an update that removes");
    c.request(
        Method::POST,
        "/1/login",
        Some(&json!({"username": "ann", "password": "p"})),
        false,
    )
    .await
    .expect("a login at the quota");
    assert_api_error(
        c.request(
            Method::POST,
            "/1/users",
            Some(&json!({"username": "bob", "password": "p", "bio": "z".repeat(200 * 1024)})),
            false,
        )
        .await,
        400,
        10082,
        "a sign-up past the quota",
    );
    // Another app is not bounded by this one's quota.
    let other_app = cluster.create_app(0, "other").await;
    let other = cluster.app_client(0, &other_app);
    for i in 0..12 {
        other
            .create_object("Blob", &blob(100, i))
            .await
            .expect("another app");
    }

    // The room deletes free is there at once (also through a batch).
    for id in ids.drain(1..4) {
        c.delete_object("Blob", &id).await.expect("delete");
    }
    let ops: Vec<Value> = (0..6)
        .map(|i| json!({"method": "POST", "path": "/1/classes/Blob", "body": blob(100, 100 + i)}))
        .collect();
    let answers = c
        .request(
            Method::POST,
            "/1/batch",
            Some(&json!({"requests": ops})),
            false,
        )
        .await
        .expect("batch")
        .body;
    let answers = answers.as_array().expect("answers");
    let ok = answers
        .iter()
        .filter(|a| a.get("success").is_some())
        .count();
    assert!((3..=4).contains(&ok), "{answers:?}");
    for a in answers.iter().filter(|a| a.get("success").is_none()) {
        assert_eq!(a["error"]["code"], 10082, "{a}");
    }
    let u = usage(&cluster, 0).await;
    assert!(u["objects"]["bytes"].as_u64().unwrap() <= 1 << 20, "{u}");

    // Files: 600 KiB fit, a second 600 KiB does not until the first is deleted.
    let file = vec![7u8; 600 * 1024];
    let first = c
        .upload_file("a.bin", "application/octet-stream", file.clone())
        .await
        .expect("first file")
        .body;
    assert_api_error(
        c.upload_file("b.bin", "application/octet-stream", file.clone())
            .await,
        400,
        10082,
        "a file past the quota",
    );
    let u = usage(&cluster, 0).await;
    assert_eq!(
        (u["files"]["count"].as_u64(), u["files"]["bytes"].as_u64()),
        (Some(1), Some(600 * 1024)),
        "{u}"
    );
    let path = url_path(first["url"].as_str().unwrap());
    c.request(Method::DELETE, &format!("/2/files/{path}"), None, false)
        .await
        .expect("delete the file");
    c.upload_file("c.bin", "application/octet-stream", file)
        .await
        .expect("room again");

    // Without quotas, nothing is refused.
    cluster
        .set_app_settings(json!({"objectsQuotaMb": null, "filesQuotaMb": null}))
        .await;
    for i in 0..3 {
        c.create_object("Blob", &blob(100, 200 + i))
            .await
            .expect("unlimited");
    }
}

/// Six writers, two through each node of three, create 50 KiB objects until refused: the
/// shards' count is exactly the acknowledged creates, the quota is passed by at most the
/// writes in flight at once, and once every writer deleted its objects (through another
/// node) the app stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_exact_when_writes_race_through_every_node() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    cluster.set_app_settings(json!({"objectsQuotaMb": 2})).await;
    let writers = (0..6).map(|w| {
        let c = cluster.client(w % 3);
        async move {
            let mut ids = Vec::new();
            loop {
                match c
                    .create_object("Race", &blob(50, w * 1000 + ids.len()))
                    .await
                {
                    Ok(created) => ids.push(created.object_id),
                    Err(e) if e.code() == Some(10082) => break ids,
                    Err(e) => panic!("writer {w}: {e}"),
                }
                assert!(ids.len() < 200, "no quota");
            }
        }
    });
    let created: Vec<Vec<String>> = futures::future::join_all(writers).await;
    let total: usize = created.iter().map(Vec::len).sum();
    for i in 0..3 {
        let u = usage(&cluster, i).await;
        assert_eq!(u["objects"]["count"], total, "node {i}: {u}");
        let bytes = u["objects"]["bytes"].as_u64().unwrap();
        assert!(bytes >= total as u64 * 51_200, "{u}");
        // At most one write in flight per writer past the quota.
        assert!(
            bytes <= (2 << 20) + 6 * 52_000,
            "{bytes} stored for a 2 MiB quota"
        );
    }
    let deleters = created.into_iter().enumerate().map(|(w, ids)| {
        let c = cluster.client((w + 1) % 3);
        async move {
            for id in ids {
                c.delete_object("Race", &id).await.expect("delete");
            }
        }
    });
    futures::future::join_all(deleters).await;
    let u = usage(&cluster, 2).await;
    assert_eq!(
        (
            u["objects"]["count"].as_u64(),
            u["objects"]["bytes"].as_u64()
        ),
        (Some(0), Some(0)),
        "{u}"
    );
}

/// Six uploaders, two through each node of three, upload 256 KiB files until refused: the
/// shards count exactly the acknowledged uploads, the files quota is passed by at most the
/// uploads in flight at once, and once every file is deleted (through another node) the app
/// stores no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_usage_is_exact_when_uploads_race_through_every_node() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    cluster.set_app_settings(json!({"filesQuotaMb": 2})).await;
    const SIZE: usize = 256 * 1024;
    let uploaders = (0..6).map(|w| {
        let c = cluster.client(w % 3);
        async move {
            let mut urls = Vec::new();
            loop {
                let name = format!("w{w}-{}.bin", urls.len());
                match c
                    .upload_file(&name, "application/octet-stream", vec![w as u8; SIZE])
                    .await
                {
                    Ok(r) => urls.push(r.body["url"].as_str().expect("url").to_string()),
                    Err(e) if e.code() == Some(10082) => break urls,
                    Err(e) => panic!("uploader {w}: {e}"),
                }
                assert!(urls.len() < 100, "no quota");
            }
        }
    });
    let uploaded: Vec<Vec<String>> = futures::future::join_all(uploaders).await;
    let total: usize = uploaded.iter().map(Vec::len).sum();
    assert!(total >= 8, "{total} files of 256 KiB under a 2 MiB quota");
    for i in 0..3 {
        let u = usage(&cluster, i).await;
        assert_eq!(u["files"]["count"], total, "node {i}: {u}");
        let bytes = u["files"]["bytes"].as_u64().unwrap();
        assert_eq!(bytes, (total * SIZE) as u64, "{u}");
        // At most one upload in flight per uploader past the quota.
        assert!(
            bytes <= (2 << 20) + 6 * SIZE as u64,
            "{bytes} stored for a 2 MiB quota"
        );
    }
    let deleters = uploaded.into_iter().enumerate().map(|(w, urls)| {
        let c = cluster.client((w + 1) % 3);
        async move {
            for url in urls {
                c.request(
                    Method::DELETE,
                    &format!("/2/files/{}", url_path(&url)),
                    None,
                    false,
                )
                .await
                .expect("delete a file");
            }
        }
    });
    futures::future::join_all(deleters).await;
    let u = usage(&cluster, 2).await;
    assert_eq!(
        (u["files"]["count"].as_u64(), u["files"]["bytes"].as_u64()),
        (Some(0), Some(0)),
        "{u}"
    );
}
