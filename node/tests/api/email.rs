//! Emailed links (spec 3, 4.5): verification on registration and on request, the verification
//! link setting `emailVerified`, and the password-reset link's page and form — delivered over
//! real SMTP to a local sink, on a 3-node cluster with requests rotating over the nodes; and
//! each endpoint's answers, case by case (120, 205, 107, 401, 404).

use reqwest::Method;
use serde_json::{json, Value};

use super::common::scenario::{run_rows, As, Row};
use super::common::smtp::SmtpSink;
use super::common::{assert_api_error, link_in, TestCluster};

/// A 3-node cluster that mails through a local SMTP sink, and the sink.
async fn mailing_cluster() -> (SmtpSink, TestCluster) {
    let sink = SmtpSink::start().await;
    let smtp = sink.url();
    let cluster = TestCluster::start(3, &["--shards", "4"], &["--smtp-url", &smtp]).await;
    (sink, cluster)
}

/// Verification through a real SMTP sink, requests rotating over three nodes: off, a user has
/// no `emailVerified`; on, registering mails a link that verifies once (404 after); a known
/// email asks for a new link; changing the email resets `emailVerified` and mails the new
/// address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_link_arrives_and_verifies_once() {
    let (sink, cluster) = mailing_cluster().await;
    let client = cluster.spread_client();
    let post = |path: &str, body: Value| {
        let (c, path) = (client.clone(), path.to_string());
        async move { c.request(Method::POST, &path, Some(&body), false).await }
    };
    let u0 = post(
        "/1/users",
        json!({"username": "off", "password": "p", "email": "off@x.org"}),
    )
    .await
    .unwrap();
    let id0 = u0.body["objectId"].as_str().unwrap();
    let got = client
        .request(Method::GET, &format!("/1/users/{id0}"), None, false)
        .await
        .unwrap()
        .body;
    assert!(got.get("emailVerified").is_none(), "{got}");

    cluster.set_app_settings(json!({"emailVerify": true})).await;

    // Registering with an email: emailVerified false and a link mailed; following it verifies.
    let u = post(
        "/1/users",
        json!({"username": "ann", "password": "p", "email": "ann@x.org"}),
    )
    .await
    .unwrap();
    let id = u.body["objectId"].as_str().unwrap().to_string();
    let user = |id: String| {
        let c = client.clone();
        async move {
            c.request(Method::GET, &format!("/1/users/{id}"), None, false)
                .await
                .unwrap()
                .body
        }
    };
    assert_eq!(user(id.clone()).await["emailVerified"], false);
    let mail = sink.wait_for("ann@x.org").await;
    let link = link_in(&mail, "verify");
    let page = reqwest::get(&link).await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().await.unwrap().contains("verified"));
    assert_eq!(user(id.clone()).await["emailVerified"], true);
    assert_eq!(
        reqwest::get(&link).await.unwrap().status().as_u16(),
        404,
        "a link works once"
    );

    // On request, a known email gets a new link.
    post("/1/requestEmailVerify", json!({"email": "ann@x.org"}))
        .await
        .expect("request verify");

    // Changing the email resets emailVerified and mails the new address.
    let token = u.body["sessionToken"].as_str().unwrap();
    client
        .clone()
        .with_session(Some(token))
        .request(
            Method::PUT,
            &format!("/1/users/{id}"),
            Some(&json!({"email": "ann2@x.org"})),
            false,
        )
        .await
        .unwrap();
    assert_eq!(user(id.clone()).await["emailVerified"], false);
    sink.wait_for("ann2@x.org").await;
}

/// A password reset through a real SMTP sink: the mailed link opens a form whose POST sets
/// the password (the old one no longer logs in) and ends every session; the link works once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_link_opens_a_form_that_sets_the_password_once() {
    let (sink, cluster) = mailing_cluster().await;
    let client = cluster.spread_client();
    let post = |path: &str, body: Value| {
        let (c, path) = (client.clone(), path.to_string());
        async move { c.request(Method::POST, &path, Some(&body), false).await }
    };
    let body = json!({"username": "ann", "password": "p", "email": "ann2@x.org"});
    let u = post("/1/users", body).await.unwrap();
    let id = u.body["objectId"].as_str().unwrap().to_string();
    let token = u.body["sessionToken"].as_str().unwrap();
    let before = sink.messages().len();
    post("/1/requestPasswordReset", json!({"email": "ann2@x.org"}))
        .await
        .expect("request reset");
    let mail = loop {
        let m = sink.messages();
        if m.len() > before && m.last().is_some_and(|t| t.contains("/email/reset/")) {
            break m.last().cloned().unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let link = link_in(&mail, "reset");
    let form = reqwest::get(&link).await.unwrap().text().await.unwrap();
    assert!(form.contains("<form") && form.contains("name=\"password\""));
    let done = reqwest::Client::new()
        .post(&link)
        .form(&[("password", "n3w")])
        .send()
        .await
        .unwrap();
    assert_eq!(done.status().as_u16(), 200);
    let check = client
        .clone()
        .with_session(Some(token))
        .request(Method::GET, &format!("/1/checkSession/{id}"), None, false)
        .await
        .unwrap();
    assert_eq!(check.body["msg"], "fail", "the reset ended the session");
    post("/1/login", json!({"username": "ann", "password": "n3w"}))
        .await
        .expect("new password");
    assert_api_error(
        post("/1/login", json!({"username": "ann", "password": "p"})).await,
        404,
        101,
        "old password",
    );
    assert_eq!(
        reqwest::get(&link).await.unwrap().status().as_u16(),
        404,
        "a reset link works once"
    );
}

/// The email endpoints, case by case: with verification off and on, known, unknown and missing
/// emails, bad bodies and keys, and links that do not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_endpoints_answer_every_case() {
    let sink = SmtpSink::start().await;
    let smtp = sink.url();
    let cluster = TestCluster::start(1, &["--shards", "4"], &["--smtp-url", &smtp]).await;
    let client = cluster.client(0);
    client
        .request(
            Method::POST,
            "/1/users",
            Some(&json!({"username": "ann", "password": "p", "email": "ann@x.org"})),
            false,
        )
        .await
        .expect("register");
    let verify = "/1/requestEmailVerify";
    let reset = "/1/requestPasswordReset";
    run_rows(
        &cluster,
        &[
            Row::new("verify while verification is off", Method::POST, verify)
                .body(r#"{"email":"ann@x.org"}"#)
                .fails(400, 120),
        ],
    )
    .await;
    cluster.set_app_settings(json!({"emailVerify": true})).await;
    let rows = [
        // POST /1/requestEmailVerify
        Row::new("verify a known email", Method::POST, verify).body(r#"{"email":"ann@x.org"}"#),
        Row::new("verify an unknown email", Method::POST, verify)
            .body(r#"{"email":"nobody@x.org"}"#)
            .fails(400, 205),
        Row::new("verify without an email", Method::POST, verify)
            .body("{}")
            .fails(400, 107),
        Row::new("verify an email that is a number", Method::POST, verify)
            .body(r#"{"email":7}"#)
            .fails(400, 107),
        Row::new("verify with malformed JSON", Method::POST, verify)
            .body("{bad")
            .fails(400, 107),
        Row::new("verify without keys", Method::POST, verify)
            .auth(As::Nobody)
            .body(r#"{"email":"ann@x.org"}"#)
            .unauthorized(),
        Row::new("verify with a wrong key", Method::POST, verify)
            .auth(As::WrongKey)
            .body(r#"{"email":"ann@x.org"}"#)
            .unauthorized(),
        // POST /1/requestPasswordReset
        Row::new("reset a known email", Method::POST, reset).body(r#"{"email":"ann@x.org"}"#),
        Row::new("reset an unknown email", Method::POST, reset)
            .body(r#"{"email":"none@x.org"}"#)
            .fails(400, 205),
        Row::new("reset without an email", Method::POST, reset)
            .body("{}")
            .fails(400, 107),
        Row::new("reset with an array", Method::POST, reset)
            .body("[1]")
            .fails(400, 107),
        Row::new("reset without keys", Method::POST, reset)
            .auth(As::Nobody)
            .body(r#"{"email":"ann@x.org"}"#)
            .unauthorized(),
        // The pages of links that do not exist.
        Row::new(
            "an unknown verification link",
            Method::GET,
            "/email/verify/nosuchlink",
        )
        .auth(As::Nobody)
        .answers(404),
        Row::new(
            "an unknown reset link",
            Method::GET,
            "/email/reset/nosuchlink",
        )
        .auth(As::Nobody)
        .answers(404),
    ];
    run_rows(&cluster, &rows).await;
    // Exactly the two accepted requests were mailed (the registration came before verification
    // was on).
    sink.wait_for("ann@x.org").await;
    let sent = || {
        sink.messages()
            .iter()
            .filter(|m| m.contains("ann@x.org"))
            .count()
    };
    for _ in 0..50 {
        if sent() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(sent(), 2);
}
