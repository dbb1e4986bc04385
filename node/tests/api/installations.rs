//! Installations (spec 2.5, 4.12) on a 3-node cluster: creation with each platform's rules
//! (131), an installation sent again updating the stored one (200 with its objectId, also when
//! the same device registers through every node at once), `channels` set whole, `AddUnique`
//! and `Remove`, read-only identifying fields (136), who may read, list, change and delete
//! them, and queries over them with the master key.

use basalt_client::{Client, Method};
use serde_json::{json, Value};

use crate::common::{assert_api_error, TestCluster};

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const TOKEN2: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

async fn post(
    c: &Client,
    path: &str,
    body: Value,
) -> Result<basalt_client::Response, basalt_client::Error> {
    c.request(Method::POST, path, Some(&body), false).await
}

/// Registers an installation that must be new; its objectId.
async fn created(c: &Client, body: Value) -> String {
    let r = post(c, "/1/installations", body).await.unwrap();
    assert_eq!(r.status, 201, "{:?}", r.body);
    r.body["objectId"].as_str().unwrap().to_string()
}

async fn put(
    c: &Client,
    path: &str,
    body: Value,
) -> Result<basalt_client::Response, basalt_client::Error> {
    c.request(Method::PUT, path, Some(&body), false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installations_are_registered_once_per_device_and_keep_their_identity() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let c = cluster.client(0);
    let m = cluster.master_client(2);
    let get = |id: String| {
        let m = m.clone();
        async move {
            m.request(Method::GET, &format!("/1/installations/{id}"), None, true)
                .await
                .unwrap()
                .body
        }
    };

    // An iOS device: 201 with its objectId and location.
    let r = post(&c, "/1/installations", json!({"deviceType": "ios", "deviceToken": TOKEN, "channels": ["news"], "badge": 0, "timeZone": "Asia/Shanghai"}))
        .await
        .unwrap();
    assert_eq!(r.status, 201);
    let ios = r.body["objectId"].as_str().unwrap().to_string();
    assert!(r.body["createdAt"].is_string());
    assert!(r
        .location
        .unwrap()
        .ends_with(&format!("/1/installations/{ios}")));
    // Sent again through another node (as the SDKs do at every start): the same one, updated.
    let again = post(
        &cluster.client(1),
        "/1/classes/_Installation",
        json!({"deviceType": "ios", "deviceToken": TOKEN, "badge": 3}),
    )
    .await
    .unwrap();
    assert_eq!(again.status, 200);
    assert_eq!(again.body["objectId"], ios.as_str());
    assert!(again.body["updatedAt"].is_string());
    let stored = get(ios.clone()).await;
    assert_eq!(
        (stored["badge"].clone(), stored["channels"].clone()),
        (json!(3), json!(["news"]))
    );
    assert_eq!(stored["timeZone"], "Asia/Shanghai");

    // An Android device by its installationId, then again with its first FCM token.
    let android = post(
        &c,
        "/1/classes/_Installation",
        json!({"deviceType": "android", "installationId": "a-1"}),
    )
    .await
    .unwrap();
    assert_eq!(android.status, 201);
    let android = android.body["objectId"].as_str().unwrap().to_string();
    let again = post(
        &cluster.client(2),
        "/1/installations",
        json!({"deviceType": "android", "installationId": "a-1", "deviceToken": "fcm:token_1"}),
    )
    .await
    .unwrap();
    assert_eq!(
        (again.status, again.body["objectId"].clone()),
        (200, json!(android))
    );
    assert_eq!(get(android.clone()).await["deviceToken"], "fcm:token_1");
    let wp = post(&c, "/1/installations", json!({"deviceType": "windows phone", "notificationUri": "https://db3.notify.live.net/throttledthirdparty/01.00/abc"}))
        .await
        .unwrap();
    assert_eq!(wp.status, 201);

    // 131: a missing or unknown device type, each platform's identifier missing or invalid.
    for bad in [
        json!({"installationId": "x-1"}),
        json!({"deviceType": "blackberry", "installationId": "x-1"}),
        json!({"deviceType": "ios"}),
        json!({"deviceType": "ios", "deviceToken": "not-a-token"}),
        json!({"deviceType": "android"}),
        json!({"deviceType": "android", "installationId": "two words"}),
        json!({"deviceType": "windows phone"}),
        json!({"deviceType": "windows phone", "notificationUri": "nope"}),
    ] {
        assert_api_error(
            post(&c, "/1/installations", bad.clone()).await,
            400,
            131,
            &bad.to_string(),
        );
    }

    // Channels: a plain array overwrites, AddUnique subscribes, Remove unsubscribes; only strings.
    let path = format!("/1/installations/{ios}");
    let r = put(&c, &path, json!({"channels": ["a", "b"]}))
        .await
        .unwrap();
    assert!(r.body["updatedAt"].is_string());
    put(
        &c,
        &path,
        json!({"channels": {"__op": "AddUnique", "objects": ["b", "c"]}}),
    )
    .await
    .unwrap();
    put(
        &c,
        &path,
        json!({"channels": {"__op": "Remove", "objects": ["a"]}}),
    )
    .await
    .unwrap();
    assert_eq!(get(ios.clone()).await["channels"], json!(["b", "c"]));
    assert_api_error(
        put(&c, &path, json!({"channels": [1]})).await,
        400,
        111,
        "a channel that is a number",
    );

    // 136: the identifying fields never change; the same value or a first value is fine.
    for change in [
        json!({"deviceType": "android"}),
        json!({"deviceToken": TOKEN2}),
        json!({"installationId": "i-9", "deviceToken": TOKEN2}),
        json!({"deviceType": {"__op": "Delete"}}),
    ] {
        assert_api_error(
            put(&c, &path, change.clone()).await,
            400,
            136,
            &change.to_string(),
        );
    }
    put(
        &c,
        &path,
        json!({"deviceType": "ios", "deviceToken": TOKEN, "badge": 1}),
    )
    .await
    .unwrap();
    put(&c, &path, json!({"installationId": "i-9"}))
        .await
        .unwrap();
    assert_eq!(get(ios.clone()).await["installationId"], "i-9");
    // ...and is then the device's: another installation cannot take it (137).
    let other = created(
        &c,
        json!({"deviceType": "android", "installationId": "a-2"}),
    )
    .await;
    assert_api_error(
        put(
            &c,
            &format!("/1/installations/{other}"),
            json!({"deviceToken": "fcm:token_1"}),
        )
        .await,
        400,
        137,
        "a token another installation holds",
    );

    // An FCM token replaced: the device, found by its installationId, gets the new one, and
    // the old one is free.
    let refreshed = post(
        &c,
        "/1/installations",
        json!({"deviceType": "android", "installationId": "a-1", "deviceToken": "fcm:token_2"}),
    )
    .await
    .unwrap();
    assert_eq!(
        (refreshed.status, refreshed.body["objectId"].clone()),
        (200, json!(android))
    );
    assert_eq!(get(android.clone()).await["deviceToken"], "fcm:token_2");
    put(
        &c,
        &format!("/1/installations/{other}"),
        json!({"deviceToken": "fcm:token_1"}),
    )
    .await
    .unwrap();
    // An APNs token in capitals is the same device.
    let upper = post(
        &c,
        "/1/installations",
        json!({"deviceType": "ios", "deviceToken": TOKEN.to_uppercase()}),
    )
    .await
    .unwrap();
    assert_eq!(
        (upper.status, upper.body["objectId"].clone()),
        (200, json!(ios))
    );
    // Registering again is a write under the installation's ACL, and never changes the ACL.
    put(&m, &format!("/1/installations/{other}"), json!({"ACL": {}}))
        .await
        .unwrap();
    assert_api_error(
        post(
            &c,
            "/1/installations",
            json!({"deviceType": "android", "installationId": "a-2", "badge": 9}),
        )
        .await,
        404,
        101,
        "registering again an installation the client may not write",
    );
    let r = post(&c, "/1/installations", json!({"deviceType": "android", "installationId": "a-1", "ACL.*": {"read": true}, "ACL": {"*": {"read": true}}}))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_api_error(
        c.request(
            Method::GET,
            &format!("/1/installations/{android}"),
            None,
            false,
        )
        .await,
        404,
        101,
        "the ACL of a registration sent again is ignored",
    );
    // The app reinstalled on an iPhone: a new installationId with the old token makes a new
    // installation, which takes the token over.
    let reinstalled = post(
        &cluster.client(1),
        "/1/installations",
        json!({"deviceType": "ios", "deviceToken": TOKEN, "installationId": "i-10"}),
    )
    .await
    .unwrap();
    assert_eq!(reinstalled.status, 201);
    let reinstalled = reinstalled.body["objectId"].as_str().unwrap().to_string();
    assert!(get(ios.clone()).await.get("deviceToken").is_none());
    assert_eq!(get(reinstalled.clone()).await["deviceToken"], TOKEN);

    // Clients write the installations they know the id of, but cannot read or list any.
    assert_api_error(
        c.request(Method::GET, &path, None, false).await,
        404,
        101,
        "a client's get",
    );
    let listed = c
        .request(Method::GET, "/1/installations", None, false)
        .await
        .unwrap();
    assert_eq!(listed.body["results"], json!([]));
    // The master key lists and queries them (by channel, device type).
    let q = m
        .request(
            Method::GET,
            "/1/installations?where=%7B%22channels%22%3A%22c%22%7D",
            None,
            true,
        )
        .await
        .unwrap();
    let ids: Vec<&str> = q.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["objectId"].as_str())
        .collect();
    assert_eq!(ids, [ios.as_str()]);
    let q = m
        .request(
            Method::GET,
            "/1/classes/_Installation?where=%7B%22deviceType%22%3A%22android%22%7D&count=1&limit=0",
            None,
            true,
        )
        .await
        .unwrap();
    assert_eq!(q.body["count"], 2);

    // Deleted by the device: gone, and its token free for a new registration.
    let path = format!("/1/installations/{reinstalled}");
    c.request(Method::DELETE, &path, None, false).await.unwrap();
    assert_api_error(
        m.request(Method::GET, &path, None, true).await,
        404,
        101,
        "deleted",
    );
    let fresh = post(
        &c,
        "/1/installations",
        json!({"deviceType": "ios", "deviceToken": TOKEN}),
    )
    .await
    .unwrap();
    assert_eq!(fresh.status, 201);
    assert_ne!(fresh.body["objectId"], reinstalled.as_str());

    // The app's push credentials are set through app management, and checked when set.
    let apns_key = include_str!("../fixtures/apns-test-key.p8");
    let fcm_key = include_str!("../fixtures/fcm-test-key.pem");
    cluster
        .set_app_settings(json!({"clientPush": true, "push": {
            "webhook": {"url": "http://127.0.0.1:9/push", "secret": "s3cret"},
            "apns": {"keyId": "ABC123DEFG", "teamId": "DEF123GHIJ", "bundleId": "com.example.app", "key": apns_key},
            "fcm": {"serviceAccount": {"type": "service_account", "project_id": "p", "client_email": "a@p.iam.gserviceaccount.com", "private_key": fcm_key, "token_uri": "http://127.0.0.1:9/token"}}
        }}))
        .await;
    // The app as the console sees it, through node `i`.
    let app_of = |i: usize| {
        let console = cluster.console_client(i);
        let path = format!("/1/apps/{}", cluster.keys.application_id);
        async move {
            console
                .request(Method::GET, &path, None, false)
                .await
                .unwrap()
                .body
        }
    };
    let app = app_of(1).await;
    assert_eq!(app["clientPush"], true);
    assert_eq!(app["push"]["apns"]["bundleId"], "com.example.app");
    assert_eq!(app["push"]["apns"]["production"], false);
    assert_eq!(app["push"]["webhook"]["url"], "http://127.0.0.1:9/push");
    for bad in [
        json!({"push": {"apns": {"keyId": "K", "teamId": "T", "bundleId": "b", "key": "not a key"}}}),
        json!({"push": {"fcm": {"serviceAccount": {"project_id": "p"}}}}),
        json!({"push": {"webhook": {"url": "ftp://x"}}}),
        json!({"push": {"pushy": {}}}),
        json!({"clientPush": "yes"}),
    ] {
        assert_api_error(
            cluster.try_app_settings(&bad).await,
            400,
            107,
            &bad.to_string(),
        );
    }
    cluster.set_app_settings(json!({"push": null})).await;
    let app = app_of(2).await;
    assert!(app.get("push").is_none_or(Value::is_null), "{app}");
}

/// Story — a race through every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_device_registering_through_every_node_at_once_is_one_installation() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    // Rounds 0 and 1 by installationId (Android), 2 and 3 by APNs token (iOS).
    for round in 0..4 {
        let installation_id = format!("race-{round}");
        let token = format!("{round:02}{}", &TOKEN[2..]);
        let tasks: Vec<_> = (0..9)
            .map(|i| {
                let c = cluster.client(i % 3);
                let body = if round < 2 {
                    json!({"deviceType": "android", "installationId": installation_id, "channels": [format!("c{i}")]})
                } else {
                    json!({"deviceType": "ios", "deviceToken": token, "channels": [format!("c{i}")]})
                };
                tokio::spawn(async move { post(&c, "/1/installations", body).await })
            })
            .collect();
        let mut created = 0;
        let mut ids = std::collections::BTreeSet::new();
        for t in tasks {
            let r = t.await.unwrap().expect("a registration");
            if r.status == 201 {
                created += 1;
            } else {
                assert_eq!(r.status, 200, "{:?}", r.body);
            }
            ids.insert(r.body["objectId"].as_str().unwrap().to_string());
        }
        assert_eq!((created, ids.len()), (1, 1), "round {round}: {ids:?}");
        let where_ = if round < 2 {
            format!("%7B%22installationId%22%3A%22{installation_id}%22%7D")
        } else {
            format!("%7B%22deviceToken%22%3A%22{token}%22%7D")
        };
        let q = cluster
            .master_client(0)
            .request(
                Method::GET,
                &format!("/1/installations?where={where_}&count=1"),
                None,
                true,
            )
            .await
            .unwrap();
        assert_eq!(q.body["count"], 1, "round {round}");
    }
    // A first deviceToken set by nine writers at once through every node: one of them sets
    // it, the others are refused (136) and their tokens stay free.
    let id = created(
        &cluster.client(0),
        json!({"deviceType": "android", "installationId": "first-set"}),
    )
    .await;
    let tasks: Vec<_> = (0..9)
        .map(|i| {
            let c = cluster.client(i % 3);
            let path = format!("/1/installations/{id}");
            tokio::spawn(async move {
                put(&c, &path, json!({"deviceToken": format!("fcm:first-{i}")})).await
            })
        })
        .collect();
    let mut won = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(_) => won.push(i),
            Err(e) => assert_eq!(
                (e.status(), e.code()),
                (Some(400), Some(136)),
                "writer {i}: {e}"
            ),
        }
    }
    assert_eq!(won.len(), 1, "{won:?}");
    let m = cluster.master_client(1);
    let stored = m
        .request(Method::GET, &format!("/1/installations/{id}"), None, true)
        .await
        .unwrap()
        .body;
    assert_eq!(stored["deviceToken"], format!("fcm:first-{}", won[0]));
    let loser = (won[0] + 1) % 9;
    let other = post(&cluster.client(2), "/1/installations", json!({"deviceType": "android", "installationId": "other", "deviceToken": format!("fcm:first-{loser}")}))
        .await
        .unwrap();
    assert_eq!(other.status, 201, "a refused writer's token is free");
}

/// The installation endpoints as a table, on one node: registering with each refused body and
/// its code, the same device twice being one installation, who may list, and unknown ones; a
/// refused registration leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installation_endpoints_answer_as_their_table_says() {
    use crate::common::scenario::{run_rows, After, As, Row};
    let cluster = TestCluster::start(1, &[], &[]).await;
    let register = |name: &'static str, body: &str| {
        Row::new(name, Method::POST, "/1/installations")
            .body(body.to_string())
            .after(After::Count("_Installation", 1))
    };
    let device = r#"{"deviceType": "android", "installationId": "dev-1"}"#;
    let master = |name: &'static str, method: Method, path: &str| {
        Row::new(name, method, path.to_string()).auth(As::Master)
    };
    let rows = vec![
        register("a device registered", device).succeeds(201),
        register("the same device again", device).succeeds(200),
        register("no deviceType", r#"{"installationId": "dev-2"}"#).fails(400, 131),
        register(
            "an unknown deviceType",
            r#"{"deviceType": "tv", "installationId": "dev-2"}"#,
        )
        .fails(400, 131),
        register(
            "an ios device without its token",
            r#"{"deviceType": "ios"}"#,
        )
        .fails(400, 131),
        register(
            "an android device without its installationId",
            r#"{"deviceType": "android"}"#,
        )
        .fails(400, 131),
        register(
            "an installationId with a space",
            r#"{"deviceType": "android", "installationId": "a b"}"#,
        )
        .fails(400, 131),
        register(
            "channels that are not names",
            r#"{"deviceType": "android", "installationId": "dev-3", "channels": [1]}"#,
        )
        .fails(400, 111),
        register("a body that is no object", "[1]").fails(400, 107),
        Row::new(
            "a device registered without keys",
            Method::POST,
            "/1/installations",
        )
        .auth(As::Nobody)
        .body(device)
        .unauthorized(),
        Row::new(
            "the list with the app's keys",
            Method::GET,
            "/1/installations",
        )
        .succeeds(200),
        master("the list", Method::GET, "/1/installations").succeeds(200),
        master(
            "an unknown installation read",
            Method::GET,
            "/1/installations/abcdefghij",
        )
        .fails(404, 101),
        master(
            "an unknown installation changed",
            Method::PUT,
            "/1/installations/abcdefghij",
        )
        .body(r#"{"badge": 1}"#)
        .fails(404, 101),
        master(
            "an unknown installation deleted",
            Method::DELETE,
            "/1/installations/abcdefghij",
        )
        .fails(404, 101),
    ];
    run_rows(&cluster, &rows).await;
    // What must not happen: the refused registration of dev-3 kept its claim (it registers).
    let again = post(
        &cluster.client(0),
        "/1/installations",
        json!({"deviceType": "android", "installationId": "dev-3"}),
    )
    .await
    .expect("dev-3 registers once its refused body is mended");
    assert_eq!(again.status, 201);
}
