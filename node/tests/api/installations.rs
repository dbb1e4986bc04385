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
    let other = post(
        &c,
        "/1/installations",
        json!({"deviceType": "android", "installationId": "a-2"}),
    )
    .await
    .unwrap()
    .body["objectId"]
        .as_str()
        .unwrap()
        .to_string();
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
    assert_ne!(fresh.body["objectId"], ios.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_device_registering_through_every_node_at_once_is_one_installation() {
    let cluster = TestCluster::start(3, &[], &[]).await;
    for round in 0..3 {
        let installation_id = format!("race-{round}");
        let tasks: Vec<_> = (0..9)
            .map(|i| {
                let c = cluster.client(i % 3);
                let body = json!({"deviceType": "android", "installationId": installation_id, "channels": [format!("c{i}")]});
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
        let where_ = format!("%7B%22installationId%22%3A%22{installation_id}%22%7D");
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
}
