//! Server time (`src/api/timestamp.rs`): `/1/timestamp`.

use super::common::scenario::{run_rows, As, Row};
use super::common::TestCluster;

/// `/1/timestamp` as a table: the time for the app's keys, 401 without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamp_answers_as_its_table_says() {
    use basalt_client::Method;
    let cluster = TestCluster::start(1, &[], &[]).await;
    let rows = vec![
        Row::new("the time", Method::GET, "/1/timestamp").succeeds(200),
        Row::new("the time without keys", Method::GET, "/1/timestamp")
            .auth(As::Nobody)
            .unauthorized(),
        Row::new("the time with a wrong key", Method::GET, "/1/timestamp")
            .auth(As::WrongKey)
            .unauthorized(),
    ];
    run_rows(&cluster, &rows).await;
}

/// The time is unix seconds and Beijing time (UTC+8), as the hosted service answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_is_unix_seconds_and_beijing_time() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let before = chrono::Utc::now().timestamp();
    let t = cluster
        .client(0)
        .request(reqwest::Method::GET, "/1/timestamp/", None, false)
        .await
        .expect("timestamp")
        .body;
    let ts = t["timestamp"].as_i64().expect("integer timestamp");
    assert!((before - 2..=before + 2).contains(&ts), "{t}");
    let beijing = chrono::DateTime::from_timestamp(ts, 0).unwrap() + chrono::Duration::hours(8);
    assert_eq!(
        t["datetime"],
        beijing.format("%Y-%m-%d %H:%M:%S").to_string()
    );
}
