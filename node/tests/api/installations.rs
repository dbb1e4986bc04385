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

/// The master's view of an installation (`GET /1/installations/<id>`).
async fn stored(m: &Client, id: &str) -> Value {
    m.request(Method::GET, &format!("/1/installations/{id}"), None, true)
        .await
        .unwrap()
        .body
}

/// Story — one device through every node: an iOS device sent again through another node is
/// the same installation, updated; an Android device is found by its installationId when it
/// gets or replaces its FCM token; an APNs token in capitals is the same device; the app
/// reinstalled (a new installationId, the old token) is a new installation that takes the
/// token over; a deleted installation frees its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_sent_again_through_any_node_is_the_same_installation() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let c = cluster.client(0);
    let m = cluster.master_client(2);
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
    let again = post(
        &cluster.client(1),
        "/1/classes/_Installation",
        json!({"deviceType": "ios", "deviceToken": TOKEN, "badge": 3}),
    )
    .await
    .unwrap();
    assert_eq!(
        (again.status, again.body["objectId"].clone()),
        (200, json!(ios))
    );
    assert!(again.body["updatedAt"].is_string());
    let s = stored(&m, &ios).await;
    assert_eq!(
        (&s["badge"], &s["channels"], &s["timeZone"]),
        (&json!(3), &json!(["news"]), &json!("Asia/Shanghai"))
    );

    let android = post(
        &c,
        "/1/classes/_Installation",
        json!({"deviceType": "android", "installationId": "a-1"}),
    )
    .await
    .unwrap();
    assert_eq!(android.status, 201);
    let android = android.body["objectId"].as_str().unwrap().to_string();
    let other = created(
        &c,
        json!({"deviceType": "android", "installationId": "a-2"}),
    )
    .await;
    let other_path = format!("/1/installations/{other}");
    let take_token_1 = || put(&c, &other_path, json!({"deviceToken": "fcm:token_1"}));
    for (node, token) in [(2, "fcm:token_1"), (1, "fcm:token_2")] {
        if token == "fcm:token_2" {
            let taken = take_token_1().await;
            assert_api_error(taken, 400, 137, "a token another installation holds");
        }
        let r = post(
            &cluster.client(node),
            "/1/installations",
            json!({"deviceType": "android", "installationId": "a-1", "deviceToken": token}),
        )
        .await
        .unwrap();
        assert_eq!(
            (r.status, r.body["objectId"].clone()),
            (200, json!(android))
        );
        assert_eq!(stored(&m, &android).await["deviceToken"], token);
    }
    take_token_1().await.expect("a replaced token is free");
    let uri = "https://db3.notify.live.net/throttledthirdparty/01.00/abc";
    created(
        &c,
        json!({"deviceType": "windows phone", "notificationUri": uri}),
    )
    .await;

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
    put(
        &c,
        &format!("/1/installations/{ios}"),
        json!({"installationId": "i-9"}),
    )
    .await
    .expect("the iPhone's first installationId");
    let reinstalled = post(
        &cluster.client(1),
        "/1/installations",
        json!({"deviceType": "ios", "deviceToken": TOKEN, "installationId": "i-10"}),
    )
    .await
    .unwrap();
    assert_eq!(reinstalled.status, 201);
    let reinstalled = reinstalled.body["objectId"].as_str().unwrap().to_string();
    assert!(stored(&m, &ios).await.get("deviceToken").is_none());
    assert_eq!(stored(&m, &reinstalled).await["deviceToken"], TOKEN);

    let path = format!("/1/installations/{reinstalled}");
    c.request(Method::DELETE, &path, None, false).await.unwrap();
    assert_api_error(
        m.request(Method::GET, &path, None, true).await,
        404,
        101,
        "deleted",
    );
    let fresh = created(&c, json!({"deviceType": "ios", "deviceToken": TOKEN})).await;
    assert_ne!(fresh, reinstalled);
}

/// Channels: a plain array overwrites, `AddUnique` subscribes, `Remove` unsubscribes; an
/// identifying field takes a first value once (then it is the device's: 137 for another
/// installation), and the same value again is no change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_change_and_identifying_fields_are_set_once() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let (c, m) = (cluster.client(0), cluster.master_client(2));
    let ios = created(&c, json!({"deviceType": "ios", "deviceToken": TOKEN})).await;
    let path = format!("/1/installations/{ios}");
    for change in [
        json!({"channels": ["a", "b"]}),
        json!({"channels": {"__op": "AddUnique", "objects": ["b", "c"]}}),
        json!({"channels": {"__op": "Remove", "objects": ["a"]}}),
        json!({"deviceType": "ios", "deviceToken": TOKEN, "badge": 1}),
        json!({"installationId": "i-9"}),
    ] {
        let r = put(&c, &path, change.clone()).await.expect("changed");
        assert!(r.body["updatedAt"].is_string(), "{change}");
    }
    let s = stored(&m, &ios).await;
    assert_eq!(
        (&s["channels"], &s["installationId"]),
        (&json!(["b", "c"]), &json!("i-9"))
    );
    let other = created(&c, json!({"deviceType": "ios", "deviceToken": TOKEN2})).await;
    assert_api_error(
        put(
            &c,
            &format!("/1/installations/{other}"),
            json!({"installationId": "i-9"}),
        )
        .await,
        400,
        137,
        "an installationId another installation holds",
    );
}

/// Who may see installations: registering again is a write under the installation's ACL
/// (and never changes it); clients write the ones they know the id of but cannot read or list
/// any; the master key lists and queries them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_register_installations_and_only_the_master_reads_them() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let (c, m) = (cluster.client(0), cluster.master_client(2));
    let ios = created(
        &c,
        json!({"deviceType": "ios", "deviceToken": TOKEN, "channels": ["c"]}),
    )
    .await;
    let android = created(
        &c,
        json!({"deviceType": "android", "installationId": "a-1"}),
    )
    .await;
    let locked = created(
        &c,
        json!({"deviceType": "android", "installationId": "a-2"}),
    )
    .await;
    put(
        &m,
        &format!("/1/installations/{locked}"),
        json!({"ACL": {}}),
    )
    .await
    .unwrap();
    let again = post(
        &c,
        "/1/installations",
        json!({"deviceType": "android", "installationId": "a-2", "badge": 9}),
    )
    .await;
    assert_api_error(
        again,
        404,
        101,
        "registering again one the client may not write",
    );
    let r = post(&c, "/1/installations", json!({"deviceType": "android", "installationId": "a-1", "ACL.*": {"read": true}, "ACL": {"*": {"read": true}}}))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    for id in [&android, &ios] {
        let read = c
            .request(Method::GET, &format!("/1/installations/{id}"), None, false)
            .await;
        assert_api_error(read, 404, 101, "a client's get");
    }
    let listed = c
        .request(Method::GET, "/1/installations", None, false)
        .await
        .unwrap();
    assert_eq!(listed.body["results"], json!([]));
    let by_channel = "/1/installations?where=%7B%22channels%22%3A%22c%22%7D";
    let q = m
        .request(Method::GET, by_channel, None, true)
        .await
        .unwrap();
    assert_eq!(q.body["results"].as_array().map(Vec::len), Some(1));
    assert_eq!(q.body["results"][0]["objectId"], ios.as_str());
    let android_count =
        "/1/classes/_Installation?where=%7B%22deviceType%22%3A%22android%22%7D&count=1&limit=0";
    let q = m
        .request(Method::GET, android_count, None, true)
        .await
        .unwrap();
    assert_eq!(q.body["count"], 2);
}

/// The app's push credentials are set through app management (seen through every node), and
/// checked when set (107); `null` removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_credentials_are_checked_when_set() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    let apns_key = include_str!("../fixtures/apns-test-key.p8");
    let fcm_key = include_str!("../fixtures/fcm-test-key.pem");
    cluster
        .set_app_settings(json!({"clientPush": true, "push": {
            "webhook": {"url": "http://127.0.0.1:9/push", "secret": "s3cret"},
            "apns": {"keyId": "ABC123DEFG", "teamId": "DEF123GHIJ", "bundleId": "com.example.app", "key": apns_key},
            "fcm": {"serviceAccount": {"type": "service_account", "project_id": "p", "client_email": "a@p.iam.gserviceaccount.com", "private_key": fcm_key, "token_uri": "http://127.0.0.1:9/token"}}
        }}))
        .await;
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
    let more = [
        (
            "an ios token that is not hex",
            r#"{"deviceType": "ios", "deviceToken": "not-a-token"}"#,
        ),
        (
            "a windows phone without its uri",
            r#"{"deviceType": "windows phone"}"#,
        ),
        (
            "a windows phone uri that is no url",
            r#"{"deviceType": "windows phone", "notificationUri": "nope"}"#,
        ),
    ];
    let rows: Vec<Row> = more
        .into_iter()
        .map(|(name, body)| register(name, body).fails(400, 131))
        .collect();
    run_rows(&cluster, &rows).await;
    // The identifying fields of a registered device never change (136), nor its channels to
    // what is not a name (111): each refused, the device as it was.
    let ios = created(
        &cluster.client(0),
        json!({"deviceType": "ios", "deviceToken": TOKEN, "channels": ["a"]}),
    )
    .await;
    let path = format!("/1/installations/{ios}");
    let holds = |field: &'static str, value: Value| After::Field {
        class: "_Installation",
        id: ios.clone(),
        field,
        value,
    };
    let change = |name: &'static str, body: &str, code: i64, kept: After| {
        Row::new(name, Method::PUT, path.clone())
            .body(body.to_string())
            .fails(400, code)
            .after(kept)
    };
    let (ios_type, token, channels) = (json!("ios"), json!(TOKEN), json!(["a"]));
    let token2 = format!(r#"{{"deviceToken": "{TOKEN2}"}}"#);
    let first_id = format!(r#"{{"installationId": "i-9", "deviceToken": "{TOKEN2}"}}"#);
    let rows = vec![
        change(
            "its deviceType changed",
            r#"{"deviceType": "android"}"#,
            136,
            holds("deviceType", ios_type.clone()),
        ),
        change(
            "its deviceToken changed",
            &token2,
            136,
            holds("deviceToken", token.clone()),
        ),
        change(
            "a token with a first installationId",
            &first_id,
            136,
            holds("installationId", Value::Null),
        ),
        change(
            "its deviceType deleted",
            r#"{"deviceType": {"__op": "Delete"}}"#,
            136,
            holds("deviceType", ios_type),
        ),
        change(
            "a channel that is a number",
            r#"{"channels": [1]}"#,
            111,
            holds("channels", channels),
        ),
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
