//! Push (spec 4.12) on a 3-node cluster, delivered to a webhook on loopback: the body's codes
//! (141-144, 102, the master key or `clientPush`), targeting (channels, deviceType, a custom
//! boolean column, a user `$inQuery`, geo, everyone), the batches as the operator receives
//! them (signed, one idempotency key per page, custom keys as sent), `_PushStatus`, dead
//! tokens removed, retries of a failing provider, scheduled pushes, expired pushes never sent,
//! and the scheduler's node killed in the middle of a fan-out to 5,000 installations.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use basalt_client::{Client, Method};
use chrono::{Duration as Span, Timelike, Utc};
use serde_json::{json, Value};

use crate::common::push::{FakeApns, FakeFcm, FakeWns, OAuthFake, PushWebhook};
use crate::common::scenario::{run_rows, As, Row};
use crate::common::{register_user, TestCluster};

async fn push(c: &Client, body: Value, master: bool) -> Result<String, basalt_client::Error> {
    let r = c
        .request(Method::POST, "/1/push", Some(&body), master)
        .await?;
    assert_eq!(r.body, json!({"result": true}));
    Ok(r.push_id.expect("X-Basalt-Push-Id"))
}

async fn installation(c: &Client, body: Value) -> String {
    let r = c
        .request(Method::POST, "/1/installations", Some(&body), false)
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{:?}", r.body);
    r.body["objectId"].as_str().unwrap().to_string()
}

/// The status of a push once it is finished (or `within` passed).
async fn finished_status(m: &Client, push_id: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let s = m
            .request(Method::GET, &format!("/1/push/{push_id}"), None, true)
            .await
            .unwrap()
            .body;
        let state = s["status"].as_str().unwrap_or_default();
        if ["succeeded", "failed", "expired"].contains(&state) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "push {push_id} still {state}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn wire_time(t: chrono::DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

fn ids(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Push and its statuses as a table: the master key (or `clientPush`), each body refusal's
/// code (141-144, 102), the statuses for the master key only; a refused push leaves no status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_endpoints_answer_as_their_table_says() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let push = |name: &'static str, body: &str| {
        Row::new(name, Method::POST, "/1/push")
            .auth(As::Master)
            .body(body.to_string())
    };
    let rows = vec![
        push(
            "push",
            r#"{"data": {"alert": "hi"}, "where": {"deviceType": "none"}}"#,
        )
        .succeeds(200),
        Row::new("push with the app's keys", Method::POST, "/1/push")
            .body(r#"{"data": {"alert": "hi"}}"#)
            .fails(400, 10061),
        Row::new("push without keys", Method::POST, "/1/push")
            .auth(As::Nobody)
            .body(r#"{"data": {"alert": "hi"}}"#)
            .unauthorized(),
        push("push without data", r#"{"where": {}}"#).fails(400, 141),
        push(
            "push at a time not so written",
            r#"{"data": {}, "push_time": "tomorrow"}"#,
        )
        .fails(400, 142),
        push(
            "push expiring after an interval that is no number",
            r#"{"data": {}, "expiration_interval": "soon"}"#,
        )
        .fails(400, 143),
        push(
            "push at a time already past",
            r#"{"data": {}, "push_time": "2001-01-01 00:00:00"}"#,
        )
        .fails(400, 144),
        push(
            "push to a where that is no query",
            r#"{"data": {}, "where": {"$nope": 1}}"#,
        )
        .fails(400, 102),
        push("push with a body that is not an object", "[1]").fails(400, 107),
        push("push whose data is no object", r#"{"data": "hi"}"#).fails(400, 141),
        push(
            "push at a time in another format",
            r#"{"data": {}, "push_time": "2026/01/01 10:00"}"#,
        )
        .fails(400, 142),
        push(
            "push expiring at a number",
            r#"{"data": {}, "expiration_time": 1800000000}"#,
        )
        .fails(400, 142),
        push(
            "push expiring after an interval as text",
            r#"{"data": {}, "expiration_interval": "60"}"#,
        )
        .fails(400, 143),
        push(
            "push expiring at a time already past",
            r#"{"data": {}, "expiration_time": "2020-01-01 00:00:00"}"#,
        )
        .fails(400, 144),
        push(
            "push to a where that is text",
            r#"{"data": {}, "where": "channels"}"#,
        )
        .fails(400, 102),
        push(
            "push to an unknown operator",
            r#"{"data": {}, "where": {"channels": {"$bogus": 1}}}"#,
        )
        .fails(400, 102),
        push(
            "push to a hidden field",
            r#"{"data": {}, "where": {"_password": "x"}}"#,
        )
        .fails(400, 102),
        Row::new("statuses with the app's keys", Method::GET, "/1/push").fails(400, 10061),
        Row::new("statuses", Method::GET, "/1/push")
            .auth(As::Master)
            .succeeds(200),
        Row::new(
            "a status with the app's keys",
            Method::GET,
            "/1/push/abcdefghij",
        )
        .fails(400, 10061),
        Row::new(
            "the status of an unknown push",
            Method::GET,
            "/1/push/abcdefghij",
        )
        .auth(As::Master)
        .fails(404, 101),
    ];
    run_rows(&cluster, &rows).await;
    // What must not happen: a refused push left a status behind (only the accepted one is).
    let statuses = cluster
        .master_client(0)
        .request(Method::GET, "/1/push?count=1&limit=0", None, true)
        .await
        .expect("statuses");
    assert_eq!(statuses.body["count"], 1, "{}", statuses.body);
}

/// Four devices of a 3-node cluster whose pushes go to `hook`: an iOS one (channels news and
/// sport, vip, alice's, in Beijing), an Android one (news, not vip, in Shanghai), an Android
/// one whose token the provider reports dead (sport), a Windows phone (news).
struct Devices {
    cluster: TestCluster,
    ios: String,
    android: String,
    dead: String,
    wp: String,
}

async fn devices(hook: &PushWebhook) -> Devices {
    let cluster = TestCluster::start(3, &[], &[]).await;
    cluster.set_app_settings(hook.settings()).await;
    let c = cluster.client(0);
    let (alice, _) = register_user(&c, "alice").await;
    let (_bob, _) = register_user(&c, "bob").await;
    let user = |id: &str| json!({"__type": "Pointer", "className": "_User", "objectId": id});
    let at = |lat: f64, lng: f64| json!({"__type": "GeoPoint", "latitude": lat, "longitude": lng});
    let ios = installation(&c, json!({"deviceType": "ios", "deviceToken": "a".repeat(64),
        "channels": ["news", "sport"], "vip": true, "user": user(&alice), "location": at(39.9, 116.4)})).await;
    let android = installation(&c, json!({"deviceType": "android", "installationId": "and-1",
        "deviceToken": "fcm-token-1", "channels": ["news"], "vip": false, "location": at(31.2, 121.5)})).await;
    let dead = installation(
        &c,
        json!({"deviceType": "android", "installationId": "and-2",
        "deviceToken": "dead-token-2", "channels": ["sport"]}),
    )
    .await;
    let wp = installation(
        &c,
        json!({"deviceType": "windows phone", "installationId": "wp-1",
        "notificationUri": "https://db5.notify.windows.com/?token=x", "channels": ["news"]}),
    )
    .await;

    Devices {
        cluster,
        ios,
        android,
        dead,
        wp,
    }
}

/// Table — each target (channels, a `where` on type, a flag, both, a sub-query on users, a
/// distance, everyone) reaches the installations its query selects and only them, in batches
/// signed with the app's secret, each with its idempotency key and the payload as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_push_reaches_the_installations_its_query_selects() {
    let hook = PushWebhook::start().await;
    let Devices {
        cluster,
        ios,
        android,
        dead,
        wp,
    } = devices(&hook).await;
    let m = cluster.master_client(1);
    let at = |lat: f64, lng: f64| json!({"__type": "GeoPoint", "latitude": lat, "longitude": lng});
    let data = json!({"alert": "hello", "badge": 1, "title": "T", "custom": {"k": [1, 2]}});
    let targets = [
        (json!({"channels": ["news"]}), ids(&[&ios, &android, &wp])),
        (json!({"where": {"deviceType": "ios"}}), ids(&[&ios])),
        (json!({"where": {"vip": true}}), ids(&[&ios])),
        (
            json!({"where": {"vip": false}, "channels": ["news"]}),
            ids(&[&android]),
        ),
        (
            json!({"where": {"user": {"$inQuery": {"where": {"username": "alice"}, "className": "_User"}}}}),
            ids(&[&ios]),
        ),
        (
            json!({"where": {"location": {"$nearSphere": at(31.0, 121.0), "$maxDistanceInKilometers": 100.0}}}),
            ids(&[&android]),
        ),
        (json!({}), ids(&[&ios, &android, &dead, &wp])),
    ];
    for (target, expected) in targets {
        let mut body = target.clone();
        body["data"] = data.clone();
        let id = push(&m, body, true).await.unwrap();
        let status = finished_status(&m, &id, Duration::from_secs(30)).await;
        assert_eq!(status["status"], "succeeded", "{target}: {status}");
        let got: BTreeSet<String> = hook.messages_of(&id).into_keys().collect();
        assert_eq!(got, expected, "{target}");
        assert_eq!(status["numTargeted"], expected.len(), "{target}: {status}");
        for b in hook.batches_of(&id) {
            assert!(b.signed, "the batch is signed with the app's secret");
            assert_eq!(b.idempotency_key, format!("{id}/{}", b.body["page"]));
            assert_eq!(b.body["data"], data, "the payload as sent, custom keys too");
        }
    }
}

/// A broadcast sends each device its address; the dead token counts as failed, is removed
/// from its installation and is free for another device; the status says what was sent, per
/// type, and why one failed; statuses list by their state (who may read them: the table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_addresses_each_device_and_removes_a_dead_token() {
    let hook = PushWebhook::start().await;
    let Devices {
        cluster,
        ios,
        android,
        dead,
        wp,
    } = devices(&hook).await;
    let (c, m) = (cluster.client(0), cluster.master_client(1));
    let data = json!({"alert": "hello", "badge": 1, "title": "T", "custom": {"k": [1, 2]}});
    let id = push(&m, json!({ "data": data }), true).await.unwrap();
    finished_status(&m, &id, Duration::from_secs(30)).await;
    let everyone = hook.batches().last().unwrap().body.clone();
    let by_installation = |id: &str| {
        everyone["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["installation"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_installation(&ios)["deviceToken"], "a".repeat(64));
    assert_eq!(by_installation(&android)["installationId"], "and-1");
    assert_eq!(
        by_installation(&wp)["deviceToken"],
        "https://db5.notify.windows.com/?token=x"
    );
    // The dead token was removed from its installation (and counted as failed).
    let push_id = everyone["pushId"].as_str().unwrap();
    let status = finished_status(&m, push_id, Duration::from_secs(5)).await;
    assert_eq!(
        (status["numSent"].clone(), status["numFailed"].clone()),
        (json!(3), json!(1))
    );
    assert_eq!(status["tokensRemoved"], 1);
    assert_eq!(
        status["sentPerType"],
        json!({"android": 1, "ios": 1, "windows phone": 1})
    );
    assert_eq!(status["failedPerType"], json!({"android": 1}));
    assert_eq!(status["errors"]["webhook"], json!(["Unregistered"]));
    assert_eq!(status["payload"], data);
    assert_eq!(status["source"], "rest");
    assert!(status["finishedAt"]["iso"].is_string(), "{status}");
    let stored = m
        .request(Method::GET, &format!("/1/installations/{dead}"), None, true)
        .await
        .unwrap()
        .body;
    assert!(stored.get("deviceToken").is_none(), "{stored}");
    installation(
        &c,
        json!({"deviceType": "android", "installationId": "and-3", "deviceToken": "dead-token-2"}),
    )
    .await;

    let listed = m
        .request(
            Method::GET,
            "/1/push?where=%7B%22status%22%3A%22succeeded%22%7D&count=1&limit=0",
            None,
            true,
        )
        .await
        .unwrap()
        .body;
    assert_eq!(listed["count"], 1, "{listed}");
}

/// A provider answering 503 is tried again; with `clientPush` the app's keys may push; without
/// a provider for them, the devices fail and the push says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_is_retried_sent_by_clients_when_allowed_and_fails_without_a_provider() {
    let hook = PushWebhook::start().await;
    let Devices { cluster, .. } = devices(&hook).await;
    let (c, m) = (cluster.client(0), cluster.master_client(1));
    // A provider answering 503 is tried again.
    hook.fail_next(2);
    let before = hook.requests();
    let id = push(
        &m,
        json!({"data": {"alert": "retry"}, "where": {"deviceType": "ios"}}),
        true,
    )
    .await
    .unwrap();
    let status = finished_status(&m, &id, Duration::from_secs(30)).await;
    assert_eq!(
        (status["status"].clone(), status["numSent"].clone()),
        (json!("succeeded"), json!(1))
    );
    assert_eq!(hook.requests() - before, 3);

    // With clientPush, the app's keys may push too.
    cluster.set_app_settings(json!({"clientPush": true})).await;
    let id = push(
        &c,
        json!({"data": {"alert": "from a client"}, "channels": ["sport"], "where": {"deviceType": "ios"}}),
        false,
    )
    .await
    .unwrap();
    assert_eq!(
        finished_status(&m, &id, Duration::from_secs(30)).await["status"],
        "succeeded"
    );
    assert_eq!(hook.messages_of(&id).len(), 1);

    // Without a provider for them, the devices fail and the push says why.
    cluster.set_app_settings(json!({"push": null})).await;
    let id = push(
        &m,
        json!({"data": {"alert": "nowhere"}, "where": {"deviceType": "ios"}}),
        true,
    )
    .await
    .unwrap();
    let status = finished_status(&m, &id, Duration::from_secs(30)).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert!(status["errors"]["none"][0]
        .as_str()
        .unwrap()
        .contains("no provider"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_pushes_wait_and_expired_pushes_are_never_sent() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let hook = PushWebhook::start().await;
    cluster.set_app_settings(hook.settings()).await;
    let c = cluster.client(0);
    let m = cluster.master_client(2);
    let device = installation(
        &c,
        json!({"deviceType": "ios", "deviceToken": "b".repeat(64)}),
    )
    .await;

    // A push for five seconds from now: scheduled until then.
    // Push times are written to the second.
    let when = (Utc::now() + Span::seconds(5)).with_nanosecond(0).unwrap();
    let later = push(
        &m,
        json!({"data": {"alert": "later"}, "push_time": wire_time(when)}),
        true,
    )
    .await
    .unwrap();
    // One for then that expires a millisecond after: never sent.
    let expiring = push(
        &m,
        json!({"data": {"alert": "too late"}, "push_time": wire_time(when), "expiration_interval": 0.001}),
        true,
    )
    .await
    .unwrap();
    // One whose expiry is far: sent.
    let lasting = push(
        &m,
        json!({"data": {"alert": "soon"}, "expiration_time": wire_time(Utc::now() + Span::hours(1))}),
        true,
    )
    .await
    .unwrap();
    let status = m
        .request(Method::GET, &format!("/1/push/{later}"), None, true)
        .await
        .unwrap()
        .body;
    assert_eq!(status["status"], "scheduled");
    assert!(status["pushTime"]["iso"].is_string());
    hook.wait_reached(&lasting, 1, Duration::from_secs(20))
        .await;
    assert!(hook.messages_of(&later).is_empty(), "sent before its time");

    let reached = hook.wait_reached(&later, 1, Duration::from_secs(30)).await;
    assert_eq!(reached, ids(&[&device]));
    let received_at = hook.batches_of(&later)[0].received_at;
    assert!(received_at >= when, "sent at {received_at}, due at {when}");
    let status = finished_status(&m, &expiring, Duration::from_secs(30)).await;
    assert_eq!(
        (status["status"].clone(), status["numSent"].clone()),
        (json!("expired"), json!(0))
    );
    assert!(hook.messages_of(&expiring).is_empty());
}

/// Story — a fault: the scheduler killed mid-fan-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_survives_its_scheduler_being_killed() {
    const DEVICES: usize = 5_000;
    let mut cluster = TestCluster::start(3, &[], &[]).await;
    let hook = PushWebhook::start().await;
    cluster.set_app_settings(hook.settings()).await;

    // 5,000 installations, registered in batches through every node.
    let batches: Vec<Value> = (0..DEVICES / 50)
        .map(|b| {
            let requests: Vec<Value> = (0..50)
                .map(|i| {
                    json!({"method": "POST", "path": "/1/installations", "body": {
                    "deviceType": "android", "installationId": format!("dev-{b}-{i}"),
                    "deviceToken": format!("tok-{b}-{i}"), "channels": ["all"],
                    "location": {"__type": "GeoPoint", "latitude": 30.0 + (b as f64) / 10.0,
                        "longitude": 120.0 + (i as f64) / 10.0}}})
                })
                .collect();
            json!({"requests": requests})
        })
        .collect();
    let clients: Vec<Client> = (0..3).map(|i| cluster.client(i)).collect();
    let loads = batches
        .chunks(batches.len().div_ceil(6))
        .enumerate()
        .map(|(n, chunk)| {
            let c = clients[n % 3].clone();
            let chunk = chunk.to_vec();
            async move {
                for body in chunk {
                    let r = c
                        .request(Method::POST, "/1/batch", Some(&body), false)
                        .await
                        .unwrap();
                    for (i, answer) in r.body.as_array().unwrap().iter().enumerate() {
                        assert!(answer.get("success").is_some(), "{i}: {answer}");
                    }
                }
            }
        });
    futures::future::join_all(loads).await;

    // A slow provider, so that the fan-out is midway when its node dies.
    hook.delay(1_500);
    let m = cluster.master_client(0);
    let id = push(
        &m,
        json!({"data": {"alert": "once"}, "channels": ["all"]}),
        true,
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while hook.batches_of(&id).len() < 2 {
        assert!(Instant::now() < deadline, "the fan-out did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut sender = None;
    for i in 0..3 {
        if cluster.metric(i, "basalt_push_messages_total").await > 0.0 {
            sender = Some(i);
        }
    }
    let sender = sender.expect("the node sending the push");
    cluster.kill(sender);
    hook.delay(200);
    let other = (sender + 1) % 3;
    let m = cluster.master_client(other);

    let reached = hook
        .wait_reached(&id, DEVICES, Duration::from_secs(120))
        .await;
    assert_eq!(reached.len(), DEVICES);
    let status = finished_status(&m, &id, Duration::from_secs(60)).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["numSent"], DEVICES, "{status}");
    assert_eq!(status["numTargeted"], DEVICES, "{status}");
    // A device got the push once, or again in the page that was in flight when the node died,
    // with the same message id and idempotency key (so the receiver drops the repeat).
    let batches = hook.batches_of(&id);
    let keys: BTreeSet<String> = batches.iter().map(|b| b.idempotency_key.clone()).collect();
    assert_eq!(keys.len(), DEVICES.div_ceil(1000), "one key per page");
    let mut repeated = 0;
    for (installation, copies) in hook.messages_of(&id) {
        let ids: BTreeSet<&str> = copies.iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(
            ids.len(),
            1,
            "{installation}: one message id for all its copies"
        );
        repeated += copies.len() - 1;
    }
    // The node died holding a page (the webhook keeps a batch before it answers): that page
    // was sent again by the next scheduler, under the same key, and only that one.
    let resent: Vec<&String> = keys
        .iter()
        .filter(|k| batches.iter().filter(|b| &b.idempotency_key == *k).count() > 1)
        .collect();
    assert_eq!(resent.len(), 1, "one page sent twice: {resent:?}");
    let first_copy = batches
        .iter()
        .find(|b| &b.idempotency_key == resent[0])
        .unwrap();
    assert_eq!(
        repeated,
        first_copy.body["messages"].as_array().unwrap().len(),
        "the repeats are that page's"
    );

    // A push whose audience is ordered by distance pages by objectId all the same: every
    // device once.
    let near = push(
        &m,
        json!({"data": {"alert": "near"}, "where": {"location": {"$nearSphere": {"__type": "GeoPoint", "latitude": 30.0, "longitude": 120.0}, "$maxDistanceInKilometers": 2000.0}}}),
        true,
    )
    .await
    .unwrap();
    hook.wait_reached(&near, DEVICES, Duration::from_secs(120))
        .await;
    let status = finished_status(&m, &near, Duration::from_secs(60)).await;
    assert_eq!(
        (status["numSent"].clone(), status["status"].clone()),
        (json!(DEVICES), json!("succeeded")),
        "{status}"
    );
    assert!(hook
        .messages_of(&near)
        .values()
        .all(|copies| copies.len() == 1));
}

/// Story — a provider's protocol end to end: APNs over HTTP/2 with a provider token signed
/// by the app's key; a dead token removed from its installation; then a silent push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ios_devices_are_pushed_through_apns_over_http2() {
    let apns = FakeApns::start().await;
    let hook = PushWebhook::start().await;
    let args = apns.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cluster = TestCluster::start(3, &[], &args).await;
    let mut settings = hook.settings();
    settings["push"]["apns"] = FakeApns::settings();
    cluster.set_app_settings(settings).await;
    let c = cluster.client(1);
    let m = cluster.master_client(2);
    let phone = installation(
        &c,
        json!({"deviceType": "ios", "deviceToken": "ab".repeat(32)}),
    )
    .await;
    let gone = installation(
        &c,
        json!({"deviceType": "ios", "deviceToken": format!("dead{}", "0".repeat(60))}),
    )
    .await;
    let android = installation(
        &c,
        json!({"deviceType": "android", "installationId": "a-1", "deviceToken": "fcm-1"}),
    )
    .await;

    let data =
        json!({"alert": "hi", "badge": 3, "sound": "ding", "title": "android only", "score": 7});
    let sent_at = Utc::now().timestamp();
    let id = push(&m, json!({"data": data, "expiration_interval": 3600}), true)
        .await
        .unwrap();
    let status = finished_status(&m, &id, Duration::from_secs(30)).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(
        (status["numSent"].clone(), status["numFailed"].clone()),
        (json!(2), json!(1))
    );
    assert_eq!(status["errors"]["apns"], json!(["Unregistered"]));
    assert_eq!(status["tokensRemoved"], 1);
    // iOS went to APNs, android to the webhook (the app has no FCM credentials).
    let got = apns.received();
    assert_eq!(got.len(), 2, "{got:?}");
    for r in &got {
        assert!(r.http2, "HTTP/2");
        assert!(r.authorized, "a provider token signed with the app's key");
        assert_eq!(r.topic, "com.example.app");
        assert_eq!((r.push_type.as_str(), r.priority.as_str()), ("alert", "10"));
        assert_eq!(r.apns_id.len(), 36);
        let expires = r.expiration.unwrap();
        assert!(
            (sent_at + 3590..=sent_at + 3610).contains(&expires),
            "{expires}"
        );
        assert_eq!(
            r.body,
            json!({"aps": {"alert": "hi", "badge": 3, "sound": "ding"}, "score": 7})
        );
    }
    let tokens: BTreeSet<&str> = got.iter().map(|r| r.token.as_str()).collect();
    assert!(tokens.contains("ab".repeat(32).as_str()));
    assert_eq!(
        hook.messages_of(&id).into_keys().collect::<BTreeSet<_>>(),
        ids(&[&android])
    );
    let stored = m
        .request(Method::GET, &format!("/1/installations/{gone}"), None, true)
        .await
        .unwrap()
        .body;
    assert!(stored.get("deviceToken").is_none(), "{stored}");

    // A silent push wakes the app: background, priority 5, no expiry.
    let id = push(
        &m,
        json!({"data": {"content-available": 1, "sync": true}, "where": {"deviceType": "ios"}}),
        true,
    )
    .await
    .unwrap();
    assert_eq!(
        finished_status(&m, &id, Duration::from_secs(30)).await["numSent"],
        1
    );
    let last = apns.received().pop().unwrap();
    assert_eq!(last.token, "ab".repeat(32));
    assert_eq!(
        (last.push_type.as_str(), last.priority.as_str()),
        ("background", "5")
    );
    assert_eq!(last.expiration, None);
    assert_eq!(
        last.body,
        json!({"aps": {"content-available": 1}, "sync": true})
    );
    let _ = phone;
}

/// Story — two providers' protocols end to end: FCM and WNS with their OAuth tokens (taken
/// once, WNS's renewed when it expires), dead tokens and channels removed, a uri that is no
/// WNS channel never given the app's token, then a raw WNS push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn android_and_windows_devices_go_through_fcm_and_wns() {
    let fcm = FakeFcm::start().await;
    let wns = FakeWns::start().await;
    let args: Vec<String> = fcm.args().into_iter().chain(wns.args()).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cluster = TestCluster::start(3, &[], &args).await;
    cluster
        .set_app_settings(json!({"push": {"fcm": fcm.settings(), "wns": FakeWns::settings()}}))
        .await;
    let c = cluster.client(2);
    let m = cluster.master_client(0);
    let phone = installation(
        &c,
        json!({"deviceType": "android", "installationId": "p-1", "deviceToken": "fcm-ok"}),
    )
    .await;
    let old_phone = installation(
        &c,
        json!({"deviceType": "android", "installationId": "p-2", "deviceToken": "dead-fcm"}),
    )
    .await;
    let _tablet = installation(&c, json!({"deviceType": "windows phone", "installationId": "w-1", "notificationUri": wns.channel("ok")})).await;
    let old_tablet = installation(&c, json!({"deviceType": "windows phone", "installationId": "w-2", "notificationUri": wns.channel("dead-1")})).await;
    // A uri that is not a WNS channel never gets the app's token.
    let _elsewhere = installation(&c, json!({"deviceType": "windows phone", "installationId": "w-3", "notificationUri": "https://collector.example/steal"})).await;

    let data =
        json!({"alert": "hello", "title": "News", "score": 7, "wp": 1, "wpAlert": "toast & jam"});
    let id = push(&m, json!({"data": data, "expiration_interval": 600}), true)
        .await
        .unwrap();
    let status = finished_status(&m, &id, Duration::from_secs(30)).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(
        (status["numSent"].clone(), status["numFailed"].clone()),
        (json!(2), json!(3)),
        "{status}"
    );
    assert_eq!(status["tokensRemoved"], 2, "{status}");
    assert!(
        status["errors"]["fcm"][0]
            .as_str()
            .unwrap()
            .starts_with("UNREGISTERED"),
        "{status}"
    );
    assert!(
        status["errors"]["wns"]
            .to_string()
            .contains("not a WNS channel uri"),
        "{status}"
    );

    // FCM: one token for the service account, then the message with a notification and
    // string data.
    assert_eq!(fcm.token_requests(), 1);
    let sent = fcm.received();
    assert_eq!(sent.len(), 2);
    let ok = sent
        .iter()
        .map(|r| r.json())
        .find(|b| b["message"]["token"] == "fcm-ok")
        .unwrap();
    assert!(sent
        .iter()
        .all(|r| r.path == "/v1/projects/basalt-test/messages:send"));
    assert_eq!(
        ok["message"]["notification"],
        json!({"title": "News", "body": "hello"})
    );
    assert_eq!(ok["message"]["data"]["score"], "7");
    assert_eq!(ok["message"]["data"]["push_id"], id.as_str());
    assert_eq!(
        ok["message"]["data"]["message_id"].as_str().unwrap().len(),
        36
    );
    let ttl = ok["message"]["android"]["ttl"].as_str().unwrap();
    let secs: i64 = ttl.trim_end_matches('s').parse().unwrap();
    assert!((590..=600).contains(&secs), "{ttl}");

    // WNS: a toast, with the app's token, to the channels on the fake only.
    assert_eq!(wns.token_requests(), 1);
    let got = wns.received();
    assert_eq!(got.len(), 2, "{got:?}");
    let toast = got.iter().find(|r| r.path == "/channel/ok").unwrap();
    assert_eq!(toast.header("x-wns-type"), Some("wns/toast"));
    assert_eq!(toast.header("content-type"), Some("text/xml"));
    let ttl: i64 = toast.header("x-wns-ttl").unwrap().parse().unwrap();
    assert!((590..=600).contains(&ttl), "{ttl}");
    let xml = String::from_utf8(toast.body.clone()).unwrap();
    assert!(
        xml.contains("<text id=\"1\">News</text><text id=\"2\">toast &amp; jam</text>"),
        "{xml}"
    );

    // Dead tokens and channels are gone from their installations.
    for (dead, field) in [
        (&old_phone, "deviceToken"),
        (&old_tablet, "notificationUri"),
    ] {
        let stored = m
            .request(Method::GET, &format!("/1/installations/{dead}"), None, true)
            .await
            .unwrap()
            .body;
        assert!(stored.get(field).is_none(), "{stored}");
    }

    // An expired WNS token is renewed once; FCM's is reused. A raw push (wp 0) carries the
    // payload as JSON.
    wns.expire_tokens();
    let id = push(&m, json!({"data": {"alert": "again", "k": [1]}}), true)
        .await
        .unwrap();
    let status = finished_status(&m, &id, Duration::from_secs(30)).await;
    assert_eq!(status["numSent"], 2, "{status}");
    assert_eq!((fcm.token_requests(), wns.token_requests()), (1, 2));
    let raw = wns.received().pop().unwrap();
    assert_eq!(raw.header("x-wns-type"), Some("wns/raw"));
    assert_eq!(raw.json(), json!({"alert": "again", "k": [1]}));
    assert!(raw.header("x-wns-ttl").is_none());
    let _ = phone;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_renewed_while_its_old_one_is_reported_dead_is_kept() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let hook = PushWebhook::start().await;
    cluster.set_app_settings(hook.settings()).await;
    let m = cluster.master_client(0);
    let device = installation(
        &cluster.client(1),
        json!({"deviceType": "android", "installationId": "renewing", "deviceToken": "dead-old"}),
    )
    .await;
    // The webhook holds its answer (which calls the old token dead) while the device, through
    // another node, registers its new token.
    hook.delay(2_000);
    let id = push(&m, json!({"data": {"alert": "x"}}), true)
        .await
        .unwrap();
    hook.wait_reached(&id, 1, Duration::from_secs(20)).await;
    let r = cluster
        .client(2)
        .request(
            Method::POST,
            "/1/installations",
            Some(&json!({"deviceType": "android", "installationId": "renewing", "deviceToken": "fresh-new"})),
            false,
        )
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.body["objectId"].as_str()),
        (200, Some(device.as_str()))
    );
    let status = finished_status(&m, &id, Duration::from_secs(30)).await;
    assert_eq!(status["tokensRemoved"], 0, "{status}");
    let stored = m
        .request(
            Method::GET,
            &format!("/1/installations/{device}"),
            None,
            true,
        )
        .await
        .unwrap()
        .body;
    assert_eq!(stored["deviceToken"], "fresh-new", "{stored}");
}
