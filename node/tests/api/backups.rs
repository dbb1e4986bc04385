//! Backups from the console (`src/api/backups.rs`): `POST`/`GET /admin/backups`, who may call
//! them, and a backup taken and listed through them.

use serde_json::json;

use super::common::scenario::{run_rows, As, Row};
use super::common::TestCluster;

/// Who may take and list backups, as a table: the console account only, and on a node
/// without `--backup-to` it is told so (10301).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_endpoints_answer_as_their_table_says() {
    use basalt_client::Method;
    let cluster = TestCluster::start(1, &[], &[]).await;
    let rows = vec![
        Row::new("backups, without keys", Method::POST, "/admin/backups")
            .auth(As::Nobody)
            .answers(401),
        Row::new(
            "backups, with the master key",
            Method::POST,
            "/admin/backups",
        )
        .auth(As::Master)
        .answers(401),
        Row::new(
            "backup list, with the master key",
            Method::GET,
            "/admin/backups",
        )
        .auth(As::Master)
        .answers(401),
        Row::new(
            "backups, with the console account, on a node without --backup-to",
            Method::POST,
            "/admin/backups",
        )
        .auth(As::Console)
        .fails(400, 10301),
        Row::new(
            "backup list, on a node without --backup-to",
            Method::GET,
            "/admin/backups",
        )
        .auth(As::Console)
        .fails(400, 10301),
    ];
    run_rows(&cluster, &rows).await;
}

/// Story — backups from the console (`--backup-to`): the node's first scheduled backup is
/// listed once written; `POST /admin/backups` takes one by hand and answers its manifest; the
/// list shows both, newest first; the backup verifies whole; a bad rate is refused (107).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_takes_and_lists_backups() {
    use basalt_client::Method;
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("backups");
    let dest_arg = dest.to_str().unwrap().to_string();
    let cluster = TestCluster::start(1, &["--shards", "2"], &["--backup-to", &dest_arg]).await;
    cluster
        .client(0)
        .create_object("Kept", &json!({"n": 1}))
        .await
        .unwrap();
    let console = cluster.console_client(0);
    let list = || async {
        console
            .request(Method::GET, "/admin/backups", None, false)
            .await
            .unwrap()
    };
    // The schedule's missed tick is taken at the scheduler's first look (within 20 s).
    let mut listed = list().await;
    for _ in 0..200 {
        if listed.body["backups"][0]["manifest"]["scheduled"] == json!(true) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        listed = list().await;
    }
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    assert_eq!(listed.body["destination"], json!(dest_arg));
    assert_eq!(
        listed.body["backups"][0]["manifest"]["scheduled"],
        json!(true),
        "{:?}",
        listed.body
    );
    let taken = console
        .request(
            Method::POST,
            "/admin/backups",
            Some(&json!({"rate": 50})),
            false,
        )
        .await
        .unwrap();
    assert_eq!(taken.status, 200, "{:?}", taken.body);
    let manifest = taken.body;
    assert_eq!(manifest["scheduled"], json!(false));
    assert_eq!(
        manifest["groups"].as_array().unwrap().len(),
        3,
        "{manifest}"
    );
    let id = manifest["backup"].as_str().unwrap().to_string();
    let listed = list().await;
    let backups = listed.body["backups"].as_array().unwrap().clone();
    assert_eq!(backups.len(), 2, "{backups:?}");
    assert_eq!(backups[0]["backup"], json!(id), "newest first");
    assert_eq!(backups[0]["manifest"], manifest);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["admin", "backup", "verify"])
        .arg(dest.join(&id))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for body in [
        json!({"rate": -1}),
        json!({"rate": "fast"}),
        json!({"to": "/tmp"}),
    ] {
        let refused = console
            .request(Method::POST, "/admin/backups", Some(&body), false)
            .await;
        match refused {
            Err(basalt_client::Error::Api { status, code, .. }) => {
                assert_eq!((status, code), (400, Some(107)), "{body}")
            }
            other => panic!("{body}: {other:?}"),
        }
    }
}
