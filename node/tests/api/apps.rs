//! App management (spec 4.8, 2.7): console authentication, create/list/read/change apps, the
//! app settings' effects (status, notAllowedCreateTable) and isolation between apps.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::{assert_api_error, assert_unauthorized, TestCluster};

/// A new app named Demo, made through `console`.
async fn demo_app(console: &basalt_client::Client) -> Value {
    let body = json!({"appName": "Demo"});
    let made = console
        .request(Method::POST, "/1/apps", Some(&body), false)
        .await;
    made.expect("create").body
}

/// A new app gets generated keys and the defaults (200), lists beside the default app and
/// reads back as made; the console's password is checked (refusals of bodies and callers: the
/// table below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_app_has_generated_keys_and_its_defaults() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let console = cluster.console_client(0);
    let wrong = cluster
        .anonymous_client(0)
        .with_console("admin@basalt.local", "wrong");
    let refused = wrong.request(Method::GET, "/1/apps", None, false).await;
    assert_unauthorized(refused, "bad password");
    let created = console
        .request(
            Method::POST,
            "/1/apps",
            Some(&json!({"appName": "Demo"})),
            false,
        )
        .await
        .expect("create");
    assert_eq!(created.status, 200);
    let app = created.body;
    assert_eq!(app["appName"], "Demo");
    assert_eq!(app["status"], 1);
    assert_eq!(app["notAllowedCreateTable"], 0);
    assert_eq!(app["secretKey"].as_str().unwrap().len(), 16);
    assert_eq!(app["safeToken"].as_str().unwrap().len(), 6);
    for k in ["applicationId", "restKey", "masterKey", "accessKey"] {
        assert!(app[k].as_str().is_some_and(|s| s.len() >= 16), "{k}");
    }
    assert!(app.get("owner").is_none());
    let id = app["applicationId"].as_str().unwrap().to_string();

    let list = console
        .request(Method::GET, "/1/apps", None, false)
        .await
        .unwrap()
        .body;
    let names: Vec<&str> = list["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["appName"].as_str())
        .collect();
    assert!(
        names.contains(&"Default") && names.contains(&"Demo"),
        "{names:?}"
    );
    let one = console
        .request(Method::GET, &format!("/1/apps/{id}"), None, false)
        .await
        .unwrap()
        .body;
    assert_eq!(one, app);
    let longest = json!({"appName": "x".repeat(29), "status": 0});
    let made = console
        .request(Method::POST, "/1/apps", Some(&longest), false)
        .await;
    assert_eq!(made.expect("a 29-character name").body["status"], 0);
}

/// An app's keys work at once, and apps see none of each other's data: gets, listings (each
/// its own schema), updates and deletes across apps are 101.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_see_none_of_each_others_data() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let console = cluster.console_client(0);
    let app = demo_app(&console).await;
    let demo = cluster.app_client(0, &app);
    let default = cluster.client(0);
    let mine = demo
        .create_object("Shared", &json!({"v": "demo"}))
        .await
        .unwrap();
    let theirs = default
        .create_object("Shared", &json!({"v": 1}))
        .await
        .unwrap();
    assert!(default
        .get_object("Shared", &mine.object_id)
        .await
        .unwrap()
        .is_none());
    assert!(demo
        .get_object("Shared", &theirs.object_id)
        .await
        .unwrap()
        .is_none());
    let listed = demo.query("Shared", &[]).await.unwrap();
    assert_eq!(listed["results"].as_array().unwrap().len(), 1);
    assert_eq!(
        listed["results"][0]["v"], "demo",
        "each app has its own schema too"
    );
    assert_api_error(
        default
            .update_object("Shared", &mine.object_id, &json!({"v": 2}))
            .await,
        404,
        101,
        "update across apps",
    );
    assert_api_error(
        default.delete_object("Shared", &mine.object_id).await,
        404,
        101,
        "delete across apps",
    );
}

/// A change of an app sets only the members given and never its keys (10032 for a name too
/// long); `status` 0 stops the app's data requests (10008) and no other app's, 1 restores them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_app_keeps_its_keys_and_a_disabled_one_serves_no_data() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let console = cluster.console_client(0);
    let app = demo_app(&console).await;
    let id = app["applicationId"].as_str().unwrap().to_string();
    let demo = cluster.app_client(0, &app);
    let default = cluster.client(0);
    demo.create_object("Shared", &json!({"v": "demo"}))
        .await
        .unwrap();
    default
        .create_object("Shared", &json!({"v": 1}))
        .await
        .unwrap();
    let put = |body: Value| {
        let (c, path) = (console.clone(), format!("/1/apps/{id}"));
        async move { c.request(Method::PUT, &path, Some(&body), false).await }
    };
    let changed = put(json!({"appName": "Demo 2", "restKey": "ignored"}))
        .await
        .unwrap()
        .body;
    assert_eq!(changed["appName"], "Demo 2");
    assert_eq!(changed["restKey"], app["restKey"]);
    assert_eq!(changed["status"], 1);
    assert_api_error(
        put(json!({"appName": "y".repeat(31)})).await,
        400,
        10032,
        "long name",
    );

    // status 0 disables the app's data requests (10008); 1 enables them again.
    put(json!({"status": 0})).await.unwrap();
    assert_api_error(demo.query("Shared", &[]).await, 400, 10008, "disabled app");
    assert_api_error(
        demo.create_object("Shared", &json!({"v": "x"})).await,
        400,
        10008,
        "disabled app write",
    );
    assert!(
        default.query("Shared", &[]).await.is_ok(),
        "other apps unaffected"
    );
    put(json!({"status": 1})).await.unwrap();
    assert!(demo.query("Shared", &[]).await.is_ok());
}

/// An app that forbids new classes (`notAllowedCreateTable`) needs the master key for one
/// (302 without); classes it has take new objects and columns as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_that_forbids_new_classes_needs_the_master_key_for_one() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let console = cluster.console_client(0);
    let app = demo_app(&console).await;
    let id = app["applicationId"].as_str().unwrap().to_string();
    let demo = cluster.app_client(0, &app);
    demo.create_object("Shared", &json!({"v": "demo"}))
        .await
        .unwrap();
    let put = |body: Value| {
        let (c, path) = (console.clone(), format!("/1/apps/{id}"));
        async move { c.request(Method::PUT, &path, Some(&body), false).await }
    };
    put(json!({"notAllowedCreateTable": 1})).await.unwrap();
    assert_api_error(
        demo.create_object("Brand", &json!({"a": 1})).await,
        400,
        302,
        "new class without master key",
    );
    assert!(demo
        .create_object("Shared", &json!({"v": "ok", "newColumn": 1}))
        .await
        .is_ok());
    let by_master = demo
        .request(
            Method::POST,
            "/1/classes/Brand",
            Some(&json!({"a": 1})),
            true,
        )
        .await
        .expect("master key may create classes");
    assert_eq!(by_master.status, 201);
    assert!(demo.create_object("Brand", &json!({"a": 2})).await.is_ok());
    assert_eq!(
        demo.query("Brand", &[("count", "1"), ("limit", "0")])
            .await
            .unwrap()["count"],
        2
    );
}

/// An app limited to 5 requests a second gets 429/10077 with `Retry-After` past them, on
/// every node (each admits its part), while another app is not limited; a second later it
/// is admitted again; the setting is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_request_rate_is_limited_and_others_are_not() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    assert_api_error(
        cluster
            .try_app_settings(&json!({"requestsPerSecond": 0}))
            .await,
        400,
        107,
        "a rate of none",
    );
    cluster
        .set_app_settings(json!({"requestsPerSecond": 5}))
        .await;
    let other_app = cluster.create_app(0, "unlimited").await;
    let other = cluster.app_client(0, &other_app);
    let http = reqwest::Client::new();
    let url = format!("http://{}/1/classes/Rated", cluster.nodes[0].http);
    let (mut admitted, mut limited) = (0, 0);
    for _ in 0..20 {
        let r = http
            .get(&url)
            .header("X-Service-Application-Id", &cluster.keys.application_id)
            .header("X-Service-REST-API-Key", &cluster.keys.rest_key)
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => admitted += 1,
            429 => {
                limited += 1;
                let retry: u64 = r.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!((1..=2).contains(&retry), "{retry}");
                let body: Value = r.json().await.unwrap();
                assert_eq!(body["code"], 10077, "{body}");
            }
            other => panic!("{other}"),
        }
        // The other app is not held back.
        other.query("Rated", &[]).await.expect("another app");
    }
    assert!(
        admitted >= 5 && limited >= 8,
        "admitted {admitted}, limited {limited}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    cluster
        .client(0)
        .query("Rated", &[])
        .await
        .expect("admitted again");
    cluster
        .set_app_settings(json!({"requestsPerSecond": null}))
        .await;
}

/// App management as a table, on one node: who may manage apps (the console account only), each
/// refused app body and its code, and unknown apps; a refused create leaves no app behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_endpoints_answer_as_their_table_says() {
    use super::common::scenario::{run_rows, As, Row};
    let cluster = TestCluster::start(1, &[], &[]).await;
    let console = |name: &'static str, method: Method, path: &str| {
        Row::new(name, method, path.to_string()).auth(As::Console)
    };
    let create = |name: &'static str, body: Value| {
        console(name, Method::POST, "/1/apps").body(body.to_string())
    };
    let rows = vec![
        Row::new("the apps without an account", Method::GET, "/1/apps")
            .auth(As::Nobody)
            .unauthorized(),
        Row::new("the apps with an app's keys", Method::GET, "/1/apps").unauthorized(),
        console("the apps", Method::GET, "/1/apps").succeeds(200),
        create("an app", json!({"appName": "Demo"})).succeeds(200),
        create(
            "an app of a name too long",
            json!({"appName": "x".repeat(30)}),
        )
        .fails(400, 10032),
        create("an app without a name", json!({"status": 1})).fails(400, 107),
        create(
            "an app of a status neither 0 nor 1",
            json!({"appName": "A", "status": 7}),
        )
        .fails(400, 107),
        create(
            "an app with a member apps do not have",
            json!({"appName": "A", "owner": "x"}),
        )
        .fails(400, 107),
        create("an app body that is no object", json!([1])).fails(400, 107),
        console("an unknown app", Method::GET, "/1/apps/nope").fails(404, 101),
        console("an unknown app changed", Method::PUT, "/1/apps/nope")
            .body(r#"{"appName": "B"}"#)
            .fails(404, 101),
        console(
            "the usage of an unknown app",
            Method::GET,
            "/1/apps/nope/usage",
        )
        .fails(404, 101),
    ];
    run_rows(&cluster, &rows).await;
    // What must not happen: a refused create made an app (the default one and Demo only).
    let apps = cluster
        .console_client(0)
        .request(Method::GET, "/1/apps", None, false)
        .await
        .expect("the apps")
        .body;
    assert_eq!(apps["results"].as_array().map(Vec::len), Some(2), "{apps}");
}
