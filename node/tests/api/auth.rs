//! Authentication (spec 5, decisions "Headers and authentication"): standard mode with a
//! configured header brand, the master key, and encrypted mode with both signature formulas,
//! freshness, replayed nonces, the per-app safe token and the standard-mode switch.

use reqwest::Method;
use serde_json::{json, Value};

use basalt_client::signing::{self, Formula, SignedKeys};
use basalt_client::{AppKeys, Client};

use super::common::{assert_api_error, assert_unauthorized, TestCluster};

fn keys_of(app: &Value) -> SignedKeys {
    SignedKeys::new(
        app["secretKey"].as_str().unwrap(),
        app["safeToken"].as_str().unwrap(),
        Formula::JsSdk,
    )
}

/// Sends one signed POST with explicit timestamp and nonce; answers (status, body).
async fn signed_post(
    base: &str,
    keys: &SignedKeys,
    path: &str,
    body: &str,
    ts: &str,
    nonce: &str,
    sent_body: Option<&str>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("Content-Type", "application/json")
        .body(sent_body.unwrap_or(body).to_string());
    for (name, value) in signing::sign(keys, path, body.as_bytes(), ts, nonce) {
        req = req.header(format!("X-Bmob-{name}"), value);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A Bmob-branded one-node cluster and a new app on it: its base url, the console, the app
/// and its keys.
async fn signed_app() -> (TestCluster, String, Client, Value, AppKeys) {
    let cluster = TestCluster::start(1, &["--shards", "4"], &["--header-brand", "Bmob"]).await;
    let base = format!("http://{}", cluster.nodes[0].http);
    let console = cluster.console_client(0).with_brand("Bmob");
    let body = json!({"appName": "Signed"});
    let made = console
        .request(Method::POST, "/1/apps", Some(&body), false)
        .await;
    let app = made.expect("create app").body;
    let keys = AppKeys {
        application_id: app["applicationId"].as_str().unwrap().into(),
        rest_key: app["restKey"].as_str().unwrap().into(),
        master_key: app["masterKey"].as_str().map(str::to_string),
    };
    (cluster, base, console, app, keys)
}

/// A client of `base` signing with `keys`, under the Bmob brand.
fn signing_client(base: &str, keys: SignedKeys) -> Client {
    Client::new(base, None)
        .unwrap()
        .with_brand("Bmob")
        .with_signing(keys)
}

/// Standard mode answers the configured brand's headers, in any case of their names, and
/// not the default brand's; a wrong REST key is 401; with the right master key the REST key is
/// not needed, with a wrong one nothing passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_mode_takes_the_brands_headers_and_the_master_key() {
    let (_cluster, base, _console, app, keys) = signed_app().await;
    let id = app["applicationId"].as_str().unwrap();
    let std_client = Client::new(&base, Some(keys.clone()))
        .unwrap()
        .with_brand("Bmob");
    let obj = std_client
        .create_object("Note", &json!({"t": "a"}))
        .await
        .expect("create");
    let raw = reqwest::Client::new()
        .get(format!("{base}/1/classes/Note/{}", obj.object_id))
        .header("x-bmob-application-id", id)
        .header("X-BMOB-REST-API-KEY", &keys.rest_key)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 200);
    // The default brand's headers mean nothing on this server.
    let other_brand = Client::new(&base, Some(keys.clone())).unwrap();
    assert_unauthorized(other_brand.query("Note", &[]).await, "wrong brand");
    let mut bad = keys.clone();
    bad.rest_key = "wrong".into();
    let bad_client = Client::new(&base, Some(bad.clone()))
        .unwrap()
        .with_brand("Bmob");
    assert_unauthorized(bad_client.query("Note", &[]).await, "wrong REST key");
    // With the right master key the REST key is not needed.
    assert!(bad_client
        .request(Method::GET, "/1/classes/Note", None, true)
        .await
        .is_ok());
    bad.master_key = Some("wrong".into());
    let bad_master = Client::new(&base, Some(bad)).unwrap().with_brand("Bmob");
    assert_unauthorized(
        bad_master
            .request(Method::GET, "/1/classes/Note", None, true)
            .await,
        "wrong master key",
    );
    let master = std_client
        .request(Method::GET, "/1/classes/Note", None, true)
        .await;
    assert_eq!(master.expect("master key").status, 200);
}

/// Encrypted mode, with both signature formulas, finds the app by its secret key alone and
/// serves every object request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_mode_signs_with_either_formula() {
    let (_cluster, base, _console, app, _keys) = signed_app().await;
    for formula in [Formula::Spec, Formula::JsSdk] {
        let mut k = keys_of(&app);
        k.formula = formula;
        let signed = signing_client(&base, k);
        let c = signed
            .create_object("Note", &json!({"t": format!("{formula:?}")}))
            .await
            .unwrap_or_else(|e| panic!("{formula:?}: {e}"));
        let got = signed
            .get_object("Note", &c.object_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got["t"], format!("{formula:?}"));
        signed
            .update_object("Note", &c.object_id, &json!({"t": "x"}))
            .await
            .unwrap();
        signed.delete_object("Note", &c.object_id).await.unwrap();
    }
}

/// A signature holds only while fresh (a timestamp in seconds or milliseconds within 10 s;
/// stale, future or no number: 401), over the body it was made for (the JS formula covers the
/// body), and once per nonce.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_holds_fresh_unaltered_and_once() {
    let (_cluster, base, _console, app, _keys) = signed_app().await;
    let k = keys_of(&app);
    let now_s = signing::timestamp_now(Formula::JsSdk);
    let now_ms = signing::timestamp_now(Formula::Spec);
    let body = r#"{"t":"signed"}"#;
    let post = |ts: String, nonce: String, sent: Option<&'static str>| {
        let (base, k) = (base.clone(), k.clone());
        async move { signed_post(&base, &k, "/1/classes/Note", body, &ts, &nonce, sent).await }
    };
    assert_eq!(post(now_s.clone(), signing::new_nonce(), None).await.0, 201);
    assert_eq!(
        post(now_ms.clone(), signing::new_nonce(), None).await.0,
        201
    );
    let stale = (now_s.parse::<i64>().unwrap() - 20).to_string();
    let future = (now_s.parse::<i64>().unwrap() + 20).to_string();
    for (ts, what) in [
        (stale, "stale"),
        (future, "future"),
        ("abc".into(), "not a number"),
    ] {
        let (status, body) = post(ts, signing::new_nonce(), None).await;
        assert_eq!(
            (status, body),
            (401, json!({"error": "unauthorized"})),
            "{what}"
        );
    }
    let (status, _) = post(
        now_s.clone(),
        signing::new_nonce(),
        Some(r#"{"t":"tampered"}"#),
    )
    .await;
    assert_eq!(status, 401, "a body other than the signed one");

    let nonce = signing::new_nonce();
    assert_eq!(post(now_s.clone(), nonce.clone(), None).await.0, 201);
    let (status, _) = post(now_s.clone(), nonce, None).await;
    assert_eq!(status, 401, "replayed nonce");
}

/// A signature made with another safe token, a secret key no app has, or an SDK type no SDK
/// is, is 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_with_a_wrong_token_secret_or_sdk_is_refused() {
    let (_cluster, base, _console, app, _keys) = signed_app().await;
    let mut wrong = keys_of(&app);
    wrong.safe_token = "zzzzzz".into();
    let c = signing_client(&base, wrong);
    assert_unauthorized(c.query("Note", &[]).await, "wrong safe token");
    let mut wrong = keys_of(&app);
    wrong.secret_key = "0000000000000000".into();
    let c = signing_client(&base, wrong);
    assert_unauthorized(c.query("Note", &[]).await, "unknown secret key");
    let mut wrong = keys_of(&app);
    wrong.sdk_type = "cobol".into();
    let c = signing_client(&base, wrong);
    assert_unauthorized(c.query("Note", &[]).await, "unknown SDK type");
}

/// The safe token is the app's and changes (the old one then fails); standard mode can be
/// switched off, the master key still working; a disabled app answers signed requests 10008.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_safe_token_changes_and_standard_mode_switches_off() {
    let (_cluster, base, console, app, keys) = signed_app().await;
    let id = app["applicationId"].as_str().unwrap();
    let std_client = Client::new(&base, Some(keys.clone()))
        .unwrap()
        .with_brand("Bmob");
    let app_path = format!("/1/apps/{id}");
    console
        .request(
            Method::PUT,
            &app_path,
            Some(&json!({"safeToken": "n3wTok", "disableStandardMode": true})),
            false,
        )
        .await
        .expect("change settings");
    let old = signing_client(&base, keys_of(&app));
    assert_unauthorized(old.query("Note", &[]).await, "old safe token");
    let mut new_keys = keys_of(&app);
    new_keys.safe_token = "n3wTok".into();
    let signed = signing_client(&base, new_keys);
    assert!(signed.query("Note", &[]).await.is_ok(), "new safe token");
    assert_unauthorized(std_client.query("Note", &[]).await, "standard mode off");
    assert!(
        std_client
            .request(Method::GET, "/1/classes/Note", None, true)
            .await
            .is_ok(),
        "the master key still works"
    );
    console
        .request(Method::PUT, &app_path, Some(&json!({"status": 0})), false)
        .await
        .unwrap();
    assert_api_error(
        signed.query("Note", &[]).await,
        400,
        10008,
        "disabled, signed",
    );
}
