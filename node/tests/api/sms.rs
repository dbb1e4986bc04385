//! SMS codes and captchas (spec 4.5, 4.10), delivered through a local
//! webhook receiver: sending within the cluster-wide quota (10010), templates (10022) and
//! captcha-guarded templates (10023, 10024), verification (207), `querySms`, phone one-step
//! register/login, login and password reset by code.

use basalt_client::Client;
use reqwest::Method;
use serde_json::{json, Value};

use super::common::scenario::{run_rows, As, Row};
use super::common::webhook::SmsReceiver;
use super::common::{assert_api_error, register_user, TestCluster};

async fn post(c: &Client, path: &str, body: Value) -> Result<Value, basalt_client::Error> {
    c.request(Method::POST, path, Some(&body), false)
        .await
        .map(|r| r.body)
}

async fn send_code(c: &Client, number: &str) -> i64 {
    let r = post(c, "/1/requestSmsCode", json!({"mobilePhoneNumber": number}))
        .await
        .unwrap();
    r["smsId"].as_i64().unwrap_or_else(|| panic!("smsId: {r}"))
}

async fn sms_state(c: &Client, sms_id: i64) -> Value {
    c.request(Method::GET, &format!("/1/querySms/{sms_id}"), None, false)
        .await
        .unwrap()
        .body
}

/// Waits until `querySms` reports a final delivery state; answers the whole state.
async fn delivered(c: &Client, sms_id: i64) -> Value {
    for _ in 0..100 {
        let s = sms_state(c, sms_id).await;
        if s["sms_state"] != "SENDING" {
            return s;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("SMS {sms_id} still SENDING");
}

/// Every SMS endpoint, one row per case: success, missing app keys, malformed body, a number
/// that is not one, an unknown template (10022), a wrong or malformed code (207), an unknown
/// message (101), a reset for a number no user has (101).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sms_endpoints_answer_every_case() {
    let receiver = SmsReceiver::start().await;
    let hook = receiver.url();
    let cluster = TestCluster::start(
        1,
        &["--shards", "2"],
        &["--sms-webhook-url", &hook, "--sms-requests-per-ip", "0"],
    )
    .await;
    register_user(&cluster.client(0), "holder").await;
    let n = "+8613800000077";
    let number = format!(r#"{{"mobilePhoneNumber":"{n}"}}"#);
    let request = |name: &'static str, body: &str| {
        Row::new(name, Method::POST, "/1/requestSmsCode").body(body.to_string())
    };
    let rows = [
        request("request a code", &number).succeeds(200),
        request("request without keys", &number)
            .auth(As::Nobody)
            .unauthorized(),
        request("request with malformed JSON", "{bad").fails(400, 107),
        request("request without a number", "{}").fails(400, 107),
        request(
            "request with a number that is not text",
            r#"{"mobilePhoneNumber":13800138000}"#,
        )
        .fails(400, 107),
        request(
            "request with a number that is not one",
            r#"{"mobilePhoneNumber":"12ab"}"#,
        )
        .fails(400, 107),
        request(
            "request with an unknown template",
            &format!(r#"{{"mobilePhoneNumber":"{n}","template":"nope"}}"#),
        )
        .fails(400, 10022),
        Row::new(
            "verify a wrong code",
            Method::POST,
            "/1/verifySmsCode/000000",
        )
        .body(number.clone())
        .fails(400, 207),
        Row::new(
            "verify a code that is not six digits",
            Method::POST,
            "/1/verifySmsCode/abc",
        )
        .body(number.clone())
        .fails(400, 207),
        Row::new(
            "verify with malformed JSON",
            Method::POST,
            "/1/verifySmsCode/000000",
        )
        .body("{bad")
        .fails(400, 107),
        Row::new(
            "verify without keys",
            Method::POST,
            "/1/verifySmsCode/000000",
        )
        .auth(As::Nobody)
        .body(number.clone())
        .unauthorized(),
        Row::new("query an unknown message", Method::GET, "/1/querySms/999").fails(404, 101),
        Row::new(
            "query a message id that is not one",
            Method::GET,
            "/1/querySms/abc",
        )
        .fails(404, 101),
        Row::new(
            "reset without a password",
            Method::PUT,
            "/1/resetPasswordBySmsCode/000000",
        )
        .body(number.clone())
        .fails(400, 107),
        Row::new(
            "reset for a number no user has",
            Method::PUT,
            "/1/resetPasswordBySmsCode/000000",
        )
        .body(format!(r#"{{"mobilePhoneNumber":"{n}","password":"x"}}"#))
        .fails(404, 101),
        Row::new(
            "reset with a code sent to no number",
            Method::PUT,
            "/1/resetPasswordBySmsCode/000000",
        )
        .body(r#"{"password":"x"}"#)
        .fails(400, 207),
    ];
    run_rows(&cluster, &rows).await;
}

/// A 3-node cluster whose codes go to `receiver`, with the per-IP limit lifted (every test
/// request comes from 127.0.0.1; that limit is tested in abuse.rs).
async fn sms_cluster(receiver: &SmsReceiver, nodes: usize) -> TestCluster {
    let hook = receiver.url();
    TestCluster::start(
        nodes,
        &["--shards", "4"],
        &["--sms-webhook-url", &hook, "--sms-requests-per-ip", "0"],
    )
    .await
}

/// Story — one code through every node: it goes out through the webhook with the default
/// template; a second one for the number within the minute is refused whichever node is
/// asked (10010); `querySms` on another node says delivered, not verified; a wrong code or
/// the right one for another number is 207, the right one works once; a code may also travel
/// in the body; a refused delivery is `FAIL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_is_sent_once_a_minute_and_verified_once_through_every_node() {
    let receiver = SmsReceiver::start().await;
    let cluster = sms_cluster(&receiver, 3).await;
    let c: Vec<Client> = (0..3).map(|i| cluster.client(i)).collect();
    let n1 = "+8613800000001";
    let id1 = send_code(&c[0], n1).await;
    let m = receiver.message(id1).await;
    assert_eq!(m["mobilePhoneNumber"], n1);
    assert_eq!(m["appId"], cluster.keys.application_id.as_str());
    let content = m["content"].as_str().unwrap();
    assert!(content.contains("10 minutes"), "{content}");
    let counted = content.chars().count() + 6;
    assert_eq!(m["countedLength"].as_u64(), Some(counted as u64));
    assert_eq!(m["segments"], if counted <= 70 { 1 } else { 2 });
    let code1 = receiver.code(id1).await;
    for node in [&c[1], &c[2], &c[0]] {
        let again = post(node, "/1/requestSmsCode", json!({"mobilePhoneNumber": n1})).await;
        assert_api_error(again, 400, 10010, "second code within a minute");
    }
    let s = delivered(&c[2], id1).await;
    assert_eq!(s, json!({"sms_state": "SUCCESS", "verify_state": false}));

    let verify = |node: usize, code: &str, number: &str| {
        let path = format!("/1/verifySmsCode/{code}");
        let node = c[node].clone();
        let body = json!({"mobilePhoneNumber": number});
        async move { post(&node, &path, body).await }
    };
    let wrong = if code1 == "000000" {
        "111111"
    } else {
        "000000"
    };
    assert_api_error(verify(1, wrong, n1).await, 400, 207, "wrong code");
    let other_number = verify(1, &code1, "+8613800000009").await;
    assert_api_error(other_number, 400, 207, "right code, other number");
    assert_eq!(verify(1, &code1, n1).await.unwrap(), json!({"msg": "ok"}));
    assert_eq!(sms_state(&c[0], id1).await["verify_state"], true);
    let in_body = json!({"mobilePhoneNumber": n1, "smsCode": code1});
    let twice = post(&c[2], "/1/verifySmsCode", in_body).await;
    assert_api_error(twice, 400, 207, "a code works once");

    let n2 = "+8613800000002";
    let id2 = send_code(&c[1], n2).await;
    let in_body = json!({"mobilePhoneNumber": n2, "smsCode": receiver.code(id2).await});
    let ok = post(&c[0], "/1/verifySmsCode", in_body).await.unwrap();
    assert_eq!(ok, json!({"msg": "ok"}));
    let id_fail = send_code(&c[0], "+8613800000000").await;
    assert_eq!(delivered(&c[1], id_fail).await["sms_state"], "FAIL");
}

/// Templates are the console's: made (107 for one without `%smscode%` or a name), listed,
/// rendered with their placeholders by a code asked through another node, deleted once (101
/// after).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_are_made_by_the_console_and_render_their_placeholders() {
    let receiver = SmsReceiver::start().await;
    let cluster = sms_cluster(&receiver, 3).await;
    let app_id = cluster.keys.application_id.clone();
    let templates = format!("/1/apps/{app_id}/smsTemplates");
    let console = |name: &'static str, method: Method, path: &str| {
        Row::new(name, method, path.to_string()).auth(As::Console)
    };
    let signup = r#"{"name": "signup", "content": "[%appname%] code %smscode%, valid %ttl% min"}"#;
    let rows = vec![
        console("a template without the code", Method::POST, &templates)
            .body(r#"{"name": "x", "content": "no code"}"#)
            .fails(400, 107),
        console("a template without a name", Method::POST, &templates)
            .body(r#"{"content": "%smscode%"}"#)
            .fails(400, 107),
        console("a template", Method::POST, &templates)
            .body(signup)
            .succeeds(200),
        console("a guarded template", Method::POST, &templates)
            .body(r#"{"name": "guarded", "content": "%smscode%", "captcha": true}"#)
            .succeeds(200),
        console("templates with the app keys", Method::GET, &templates)
            .auth(As::App)
            .unauthorized(),
        console("the templates", Method::GET, &templates).succeeds(200),
    ];
    run_rows(&cluster, &rows).await;
    let c = cluster.console_client(0);
    let listed = c
        .request(Method::GET, &templates, None, false)
        .await
        .unwrap()
        .body;
    let names: Vec<&str> = listed["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["guarded", "signup"]);
    let app = c
        .request(Method::GET, &format!("/1/apps/{app_id}"), None, false)
        .await
        .unwrap()
        .body;
    let body = json!({"mobilePhoneNumber": "+8613800000003", "template": "signup"});
    let id = post(&cluster.client(2), "/1/requestSmsCode", body)
        .await
        .unwrap()["smsId"]
        .as_i64()
        .unwrap();
    let (code, m) = (receiver.code(id).await, receiver.message(id).await);
    let app_name = app["appName"].as_str().unwrap();
    assert_eq!(
        m["content"],
        format!("[{app_name}] code {code}, valid 10 min")
    );
    assert_eq!(m["template"], "signup");
    let del = format!("{templates}/signup");
    let rows = vec![
        console("a template deleted", Method::DELETE, &del).succeeds(200),
        console("a template deleted twice", Method::DELETE, &del).fails(404, 101),
    ];
    run_rows(&cluster, &rows).await;
}

/// Story — a captcha's one use through every node: a guarded template needs a pass (10024
/// without one or with a bogus one); a captcha is a PNG of the asked size, whose picture is
/// gone after one wrong attempt (10023); the master key sees the text; a captcha passes once,
/// and its pass sends one code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captchas_guard_a_template_once_through_every_node() {
    let receiver = SmsReceiver::start().await;
    let cluster = sms_cluster(&receiver, 3).await;
    let c: Vec<Client> = (0..3).map(|i| cluster.client(i)).collect();
    let templates = format!("/1/apps/{}/smsTemplates", cluster.keys.application_id);
    let guarded_template = json!({"name": "guarded", "content": "%smscode%", "captcha": true});
    let console = cluster.console_client(0);
    console
        .request(Method::POST, &templates, Some(&guarded_template), false)
        .await
        .unwrap();
    let guarded = |number: &str, token: Option<&str>| {
        let mut body = json!({"mobilePhoneNumber": number, "template": "guarded"});
        if let Some(t) = token {
            body["validate_token"] = json!(t);
        }
        body
    };
    for (token, what) in [
        (None, "no validate_token"),
        (Some("x"), "bogus validate_token"),
    ] {
        let sent = post(&c[0], "/1/requestSmsCode", guarded("+8613800000004", token)).await;
        assert_api_error(sent, 400, 10024, what);
    }
    let size = json!({"width": 120, "height": 40, "size": 5});
    let cap = post(&c[0], "/1/requestCaptcha", size).await.unwrap();
    assert!(
        cap.get("captcha_code").is_none(),
        "only the master key sees the text"
    );
    let url = cap["captcha_url"].as_str().unwrap();
    let png = reqwest::get(url).await.unwrap();
    assert_eq!(png.status(), 200);
    assert_eq!(png.headers()["content-type"], "image/png");
    let bytes = png.bytes().await.unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((width, height), (120, 40));
    let attempt = json!({"captcha_code": "2222", "captcha_token": cap["captcha_token"]});
    let wrong = post(&c[1], "/1/verifyCaptcha", attempt).await;
    assert_api_error(wrong, 400, 10023, "wrong captcha text");
    let gone = reqwest::get(url).await.unwrap();
    assert_eq!(gone.status(), 404, "a used captcha has no picture");

    let asked = c[0]
        .request(Method::POST, "/1/requestCaptcha", Some(&json!({})), true)
        .await;
    let cap = asked.unwrap().body;
    let text = cap["captcha_code"].as_str().unwrap();
    assert_eq!(text.len(), 4, "default size");
    let attempt =
        json!({"captcha_code": text.to_lowercase(), "captcha_token": cap["captcha_token"]});
    let pass = post(&c[2], "/1/verifyCaptcha", attempt.clone())
        .await
        .unwrap();
    let pass = pass["validate_token"].as_str().unwrap();
    let again = post(&c[1], "/1/verifyCaptcha", attempt).await;
    assert_api_error(again, 400, 10023, "a captcha is verified once");
    let sent = post(
        &c[1],
        "/1/requestSmsCode",
        guarded("+8613800000004", Some(pass)),
    )
    .await;
    receiver
        .message(sent.unwrap()["smsId"].as_i64().unwrap())
        .await;
    let reused = post(
        &c[2],
        "/1/requestSmsCode",
        guarded("+8613800000005", Some(pass)),
    )
    .await;
    assert_api_error(reused, 400, 10024, "a validate_token works once");
}

/// A user of `c` with a password and a number; its objectId.
async fn phone_user(c: &Client, username: &str, password: &str, number: &str) -> String {
    let body = json!({"username": username, "password": password, "mobilePhoneNumber": number});
    let r = post(c, "/1/users", body).await.expect("sign up");
    r["objectId"].as_str().unwrap().to_string()
}

/// What `checkSession` says of `token` for `user`, through `c`.
async fn session_of(c: &Client, user: &str, token: &str) -> Value {
    let path = format!("/1/checkSession/{user}");
    let c = c.clone().with_session(Some(token));
    c.request(Method::GET, &path, None, false)
        .await
        .unwrap()
        .body
}

/// One-step sign-up by code (`/1/usersv1`): 207 for a wrong code; else 200 with the whole
/// user, its number as username and verified, with a live session. `POST /1/users` with a
/// number that has a user and its code logs that user in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_signs_up_a_new_number_and_logs_in_a_known_one() {
    let receiver = SmsReceiver::start().await;
    let cluster = sms_cluster(&receiver, 3).await;
    let c: Vec<Client> = (0..3).map(|i| cluster.client(i)).collect();
    let n1 = "13900000001";
    let code = receiver.code(send_code(&c[0], n1).await).await;
    let wrong = json!({"mobilePhoneNumber": n1, "smsCode": "000000"});
    let refused = post(&c[1], "/1/usersv1", wrong).await.map(|_| ());
    assert_api_error(refused, 400, 207, "wrong code");
    let body = json!({"mobilePhoneNumber": n1, "smsCode": code, "nickname": "Ann"});
    let r = c[1]
        .request(Method::POST, "/1/usersv1", Some(&body), false)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let user = r.body;
    assert_eq!(
        (&user["username"], &user["mobilePhoneNumber"]),
        (&json!(n1), &json!(n1))
    );
    assert_eq!(
        (&user["mobilePhoneVerified"], &user["nickname"]),
        (&json!(true), &json!("Ann"))
    );
    assert!(user.get("password").is_none());
    let (uid, token) = (
        user["objectId"].as_str().unwrap(),
        user["sessionToken"].as_str().unwrap(),
    );
    assert_eq!(session_of(&c[2], uid, token).await, json!({"msg": "ok"}));

    let n2 = "13900000002";
    let bob = phone_user(&c[0], "bob", "pw1", n2).await;
    let code = receiver.code(send_code(&c[2], n2).await).await;
    let body = json!({"mobilePhoneNumber": n2, "smsCode": code});
    let r = c[0]
        .request(Method::POST, "/1/users", Some(&body), false)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        (&r.body["objectId"], &r.body["username"]),
        (&json!(bob), &json!("bob"))
    );
    assert_eq!(r.body["mobilePhoneVerified"], true);
}

/// Login with a code: 101 for a number without a user, 207 for a wrong code, else the user,
/// verified; the number also logs in with the password; changing the number makes it
/// unverified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_logs_a_user_in_and_a_new_number_is_unverified() {
    let receiver = SmsReceiver::start().await;
    let cluster = sms_cluster(&receiver, 3).await;
    let c: Vec<Client> = (0..3).map(|i| cluster.client(i)).collect();
    let n3 = "13900000003";
    let cat = phone_user(&c[0], "cat", "old", n3).await;
    let nobody = json!({"mobilePhoneNumber": "13900000999", "smsCode": "123456"});
    assert_api_error(
        post(&c[1], "/1/login", nobody).await,
        404,
        101,
        "no such user",
    );
    let code = receiver.code(send_code(&c[1], n3).await).await;
    let wrong = if code == "999999" { "888888" } else { "999999" };
    let refused = post(
        &c[1],
        "/1/login",
        json!({"mobilePhoneNumber": n3, "smsCode": wrong}),
    )
    .await;
    assert_api_error(refused, 400, 207, "wrong login code");
    let logged = post(
        &c[2],
        "/1/login",
        json!({"mobilePhoneNumber": n3, "smsCode": code}),
    )
    .await
    .unwrap();
    assert_eq!(
        (&logged["username"], &logged["objectId"]),
        (&json!("cat"), &json!(cat))
    );
    assert_eq!(logged["mobilePhoneVerified"], true);
    let token = logged["sessionToken"].as_str().unwrap().to_string();
    let by_number = post(
        &c[0],
        "/1/login",
        json!({"username": n3, "password": "old"}),
    )
    .await;
    assert_eq!(by_number.unwrap()["objectId"], cat.as_str());
    let number = json!({"mobilePhoneNumber": "13900000033"});
    let me = c[0].clone().with_session(Some(&token));
    let changed = me
        .request(
            Method::PUT,
            &format!("/1/users/{cat}"),
            Some(&number),
            false,
        )
        .await;
    assert!(changed.is_ok(), "{changed:?}");
    let now = c[1]
        .request(Method::GET, &format!("/1/users/{cat}"), None, false)
        .await;
    assert_eq!(now.unwrap().body["mobilePhoneVerified"], false);
}

/// A reset by code (the number taken from the code): 207 for a wrong code; the new password
/// logs in, the old one no longer, every session ends, and the code is used up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_by_code_changes_the_password_and_ends_every_session() {
    let receiver = SmsReceiver::start().await;
    let cluster = sms_cluster(&receiver, 3).await;
    let c: Vec<Client> = (0..3).map(|i| cluster.client(i)).collect();
    let n4 = "13900000004";
    phone_user(&c[0], "dan", "old", n4).await;
    let dan = post(
        &c[0],
        "/1/login",
        json!({"username": "dan", "password": "old"}),
    )
    .await
    .unwrap();
    let (dan_id, token) = (
        dan["objectId"].as_str().unwrap(),
        dan["sessionToken"].as_str().unwrap(),
    );
    let code = receiver.code(send_code(&c[2], n4).await).await;
    let reset = |code: &str, body: Value| {
        let (node, path) = (c[1].clone(), format!("/1/resetPasswordBySmsCode/{code}"));
        async move { node.request(Method::PUT, &path, Some(&body), false).await }
    };
    let wrong = reset(
        "000001",
        json!({"password": "new", "mobilePhoneNumber": n4}),
    )
    .await;
    assert_api_error(wrong, 400, 207, "wrong reset code");
    let ok = reset(&code, json!({"password": "new"})).await.unwrap();
    assert_eq!(ok.body, json!({"msg": "ok"}));
    let old = post(
        &c[0],
        "/1/login",
        json!({"username": "dan", "password": "old"}),
    )
    .await;
    assert_api_error(old, 404, 101, "old password");
    let again = post(
        &c[2],
        "/1/login",
        json!({"username": "dan", "password": "new"}),
    )
    .await;
    assert_eq!(again.unwrap()["mobilePhoneVerified"], true);
    let ended = session_of(&c[0], dan_id, token).await;
    assert_eq!(ended, json!({"msg": "fail"}), "reset ends the sessions");
    let reused = reset(&code, json!({"password": "x", "mobilePhoneNumber": n4})).await;
    assert_api_error(reused, 400, 207, "reset code reused");
}
