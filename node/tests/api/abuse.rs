//! Abuse and races on a 3-node cluster (docs/security.md): single-use links, SMS codes,
//! captchas and validate tokens, and SMS quotas hold when requests race through every node; SMS codes cannot be guessed without limit in any form;
//! logins and console logins are throttled per account (and answer unknown accounts like wrong
//! passwords); one number written many ways is one number; mails are limited per address.

use std::time::Instant;

use basalt_client::Client;
use futures::future::join_all;
use reqwest::Method;
use serde_json::{json, Value};

use super::common::smtp::SmtpSink;
use super::common::webhook::SmsReceiver;
use super::common::{assert_api_error, link_in, register_user, TestCluster};

async fn post(c: &Client, path: &str, body: Value) -> Result<Value, basalt_client::Error> {
    c.request(Method::POST, path, Some(&body), false)
        .await
        .map(|r| r.body)
}

/// Sends an SMS code to `number`; answers the code as the webhook received it.
async fn code_sent_to(c: &Client, receiver: &SmsReceiver, number: &str) -> String {
    let sent = post(c, "/1/requestSmsCode", json!({"mobilePhoneNumber": number}))
        .await
        .unwrap();
    receiver.code(sent["smsId"].as_i64().unwrap()).await
}

/// Node flags that lift the per-IP limits (every test request comes from 127.0.0.1), so the
/// per-account and per-number limits are what the tests see.
const NO_IP_LIMITS: [&str; 6] = [
    "--login-attempts-per-ip",
    "0",
    "--sms-requests-per-ip",
    "0",
    "--mail-requests-per-ip",
    "0",
];

/// 3 nodes mailing to a local SMTP sink and sending SMS to a local webhook, per-IP limits off.
async fn start_with_mail_and_sms() -> (TestCluster, SmtpSink, SmsReceiver) {
    let sink = SmtpSink::start().await;
    let receiver = SmsReceiver::start().await;
    let (smtp, hook) = (sink.url(), receiver.url());
    let mut args = vec![
        "--smtp-url",
        smtp.as_str(),
        "--sms-webhook-url",
        hook.as_str(),
    ];
    args.extend(NO_IP_LIMITS);
    let cluster = TestCluster::start(3, &["--shards", "4"], &args).await;
    (cluster, sink, receiver)
}

/// The link's path, followed through node `i` instead of the node that mailed it.
fn through(cluster: &TestCluster, i: usize, link: &str) -> String {
    let path = &link[link.find("/email/").expect("email path")..];
    format!("http://{}{path}", cluster.nodes[i].http)
}

/// Story — a race through every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_and_quotas_hold_when_requests_race_through_every_node() {
    let (cluster, sink, receiver) = start_with_mail_and_sms().await;
    let c = cluster.spread_client();
    let http = reqwest::Client::new();

    // A password-reset link followed 6 times at once through 3 nodes changes the password once.
    post(
        &c,
        "/1/users",
        json!({"username": "rl", "password": "old", "email": "rl@x.org"}),
    )
    .await
    .unwrap();
    post(&c, "/1/requestPasswordReset", json!({"email": "rl@x.org"}))
        .await
        .unwrap();
    let link = link_in(&sink.wait_for("rl@x.org").await, "reset");
    let tries = (0..6).map(|i| {
        let url = through(&cluster, i % 3, &link);
        let http = http.clone();
        async move {
            let password = format!("new{i}");
            let r = http
                .post(url)
                .form(&[("password", password.as_str())])
                .send()
                .await
                .expect("post");
            (r.status().as_u16(), password)
        }
    });
    let outcomes = join_all(tries).await;
    let winners: Vec<&String> = outcomes
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, p)| p)
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    assert!(
        outcomes.iter().all(|(s, _)| *s == 200 || *s == 404),
        "{outcomes:?}"
    );
    let login = |p: &str| {
        let c = c.clone();
        let p = p.to_string();
        async move {
            c.request(
                Method::GET,
                &format!("/1/login?username=rl&password={p}"),
                None,
                false,
            )
            .await
        }
    };
    login(winners[0])
        .await
        .expect("the winner's password works");
    for (_, p) in outcomes.iter().filter(|(s, _)| *s != 200) {
        assert!(login(p).await.is_err(), "a loser's password {p} works");
    }

    // A verification link followed 6 times at once verifies once.
    cluster.set_app_settings(json!({"emailVerify": true})).await;
    post(
        &c,
        "/1/users",
        json!({"username": "vl", "password": "p", "email": "vl@x.org"}),
    )
    .await
    .unwrap();
    let link = link_in(&sink.wait_for("vl@x.org").await, "verify");
    let follows = (0..6).map(|i| {
        let url = through(&cluster, i % 3, &link);
        let http = http.clone();
        async move { http.get(url).send().await.expect("get").status().as_u16() }
    });
    let statuses = join_all(follows).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );

    // 1 SMS a minute per number: 9 requests at once through 3 nodes let exactly one through,
    // in every round.
    for round in 0..5 {
        let number = format!("+86139000000{round:02}");
        let sends = (0..9).map(|i| {
            let c = cluster.client(i % 3);
            let body = json!({"mobilePhoneNumber": number});
            async move { post(&c, "/1/requestSmsCode", body).await }
        });
        let results = join_all(sends).await;
        let sent = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(sent, 1, "round {round}: {results:?}");
        for r in results.into_iter().filter(|r| r.is_err()) {
            assert_api_error(r, 400, 10010, "over the minute's quota");
        }
    }

    // An SMS code verified 6 times at once through 3 nodes is good once.
    let number = "+8613900000077";
    let code = code_sent_to(&c, &receiver, number).await;
    let verifies = (0..6).map(|i| {
        let c = cluster.client(i % 3);
        let path = format!("/1/verifySmsCode/{code}");
        async move {
            c.request(
                Method::POST,
                &path,
                Some(&json!({"mobilePhoneNumber": number})),
                false,
            )
            .await
        }
    });
    let results = join_all(verifies).await;
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );

    // A captcha verified 6 times at once gives one validate_token, and that token sends one
    // SMS of a captcha-guarded template however many requests race with it.
    cluster
        .console_client(1)
        .request(
            Method::POST,
            &format!("/1/apps/{}/smsTemplates", cluster.keys.application_id),
            Some(&json!({"name": "guarded", "content": "%smscode%", "captcha": true})),
            false,
        )
        .await
        .unwrap();
    let cap = cluster
        .master_client(0)
        .request(Method::POST, "/1/requestCaptcha", Some(&json!({})), true)
        .await
        .unwrap()
        .body;
    let answer =
        json!({"captcha_code": cap["captcha_code"], "captcha_token": cap["captcha_token"]});
    let passes = (0..6).map(|i| {
        let c = cluster.client(i % 3);
        let body = answer.clone();
        async move { post(&c, "/1/verifyCaptcha", body).await }
    });
    let passes = join_all(passes).await;
    let tokens: Vec<String> = passes
        .iter()
        .filter_map(|r| {
            r.as_ref().ok()?["validate_token"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(tokens.len(), 1, "{passes:?}");
    let sends = (0..6).map(|i| {
        let c = cluster.client(i % 3);
        let body = json!({
            "mobilePhoneNumber": format!("+861390000010{i}"),
            "template": "guarded",
            "validate_token": tokens[0],
        });
        async move { post(&c, "/1/requestSmsCode", body).await }
    });
    let sends = join_all(sends).await;
    assert_eq!(sends.iter().filter(|r| r.is_ok()).count(), 1, "{sends:?}");
    for r in sends.into_iter().filter(|r| r.is_err()) {
        assert_api_error(r, 400, 10024, "a used validate_token");
    }

    // One number written four ways is one number: the second send within the minute is refused.
    post(
        &c,
        "/1/requestSmsCode",
        json!({"mobilePhoneNumber": "13700000001"}),
    )
    .await
    .expect("first send");
    for form in ["+8613700000001", "008613700000001", "013700000001"] {
        assert_api_error(
            post(&c, "/1/requestSmsCode", json!({"mobilePhoneNumber": form})).await,
            400,
            10010,
            form,
        );
    }
}

/// Story — an attack: guessing, step by step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codes_passwords_and_mails_cannot_be_tried_without_limit() {
    let (cluster, _sink, receiver) = start_with_mail_and_sms().await;
    let c = cluster.spread_client();

    // Guessing a reset code without the number: 20 tries per app in 10 minutes, after which
    // even the right code finds nothing; with the number the victim's code still works.
    let victim = "+8613800000077";
    post(
        &c,
        "/1/users",
        json!({"username": "victim", "password": "secret", "mobilePhoneNumber": victim}),
    )
    .await
    .unwrap();
    let code = code_sent_to(&c, &receiver, victim).await;
    let wrong: Vec<String> = (0..20)
        .map(|i| format!("{:06}", (code.parse::<u32>().unwrap() + 1 + i) % 1_000_000))
        .collect();
    let guesses = wrong.iter().enumerate().map(|(i, w)| {
        let c = cluster.client(i % 3);
        let path = format!("/1/resetPasswordBySmsCode/{w}");
        async move {
            c.request(
                Method::PUT,
                &path,
                Some(&json!({"password": "pwned"})),
                false,
            )
            .await
        }
    });
    for r in join_all(guesses).await {
        assert_api_error(r, 400, 207, "wrong guess");
    }
    assert_api_error(
        c.request(
            Method::PUT,
            &format!("/1/resetPasswordBySmsCode/{code}"),
            Some(&json!({"password": "pwned"})),
            false,
        )
        .await,
        400,
        207,
        "the right code after the budget is spent",
    );
    c.request(
        Method::GET,
        "/1/login?username=victim&password=secret",
        None,
        false,
    )
    .await
    .expect("the password is unchanged");
    c.request(
        Method::PUT,
        &format!("/1/resetPasswordBySmsCode/{code}"),
        Some(&json!({"password": "mine", "mobilePhoneNumber": victim})),
        false,
    )
    .await
    .expect("the owner, with the number, resets");

    // Logins: 10 wrong passwords per account in 15 minutes, then 429 (10076) with Retry-After
    // even for the right one; racing guesses through every node are all counted.
    register_user(&c, "ada").await;
    let wrong = (0..10).map(|i| {
        let c = cluster.client(i % 3);
        async move {
            c.request(
                Method::GET,
                "/1/login?username=ada&password=nope",
                None,
                false,
            )
            .await
        }
    });
    for r in join_all(wrong).await {
        assert_api_error(r, 404, 101, "wrong password");
    }
    assert_api_error(
        c.request(Method::GET, "/1/login?username=ada&password=p", None, false)
            .await,
        429,
        10076,
        "11th attempt",
    );
    // Another account is not affected, and a right password clears the count.
    register_user(&c, "bob").await;
    for _ in 0..3 {
        let _ = c
            .request(
                Method::GET,
                "/1/login?username=bob&password=nope",
                None,
                false,
            )
            .await;
    }
    c.request(Method::GET, "/1/login?username=bob&password=p", None, false)
        .await
        .expect("bob logs in");

    // An unknown username is refused like a wrong password, in about the same time.
    let time = |name: &'static str| {
        let c = c.clone();
        async move {
            let mut took = Vec::new();
            for i in 0..5 {
                let started = Instant::now();
                let r = c
                    .request(
                        Method::GET,
                        &format!("/1/login?username={name}{i}&password=x"),
                        None,
                        false,
                    )
                    .await;
                took.push(started.elapsed());
                assert_api_error(r, 404, 101, name);
            }
            took.sort();
            took[2]
        }
    };
    for i in 0..5 {
        register_user(&c, &format!("known{i}")).await;
    }
    let (known, unknown) = (time("known").await, time("nobody").await);
    assert!(
        unknown * 3 >= known,
        "unknown accounts answer in {unknown:?}, known in {known:?}"
    );

    // Console logins: 10 wrong passwords, then 429 (10210).
    let creds = cluster.credentials();
    let email = creds["console"]["email"].as_str().unwrap();
    let wrong_console = cluster.anonymous_client(1).with_console(email, "wrong");
    for _ in 0..10 {
        assert!(wrong_console
            .request(Method::GET, "/1/apps", None, false)
            .await
            .is_err());
    }
    assert_api_error(
        cluster
            .console_client(2)
            .request(Method::GET, "/1/apps", None, false)
            .await,
        429,
        10210,
        "console after 10 failures",
    );

    // Mails: two per address a minute, however asked for and through whichever node.
    post(
        &c,
        "/1/users",
        json!({"username": "mm", "password": "p", "email": "mm@x.org"}),
    )
    .await
    .unwrap();
    for i in 0..2 {
        post(
            &cluster.client(i),
            "/1/requestPasswordReset",
            json!({"email": "mm@x.org"}),
        )
        .await
        .expect("first two mails");
    }
    assert_api_error(
        post(&c, "/1/requestPasswordReset", json!({"email": "mm@x.org"})).await,
        429,
        10076,
        "third mail within the minute",
    );
}

/// One login (or, with `console`, one console request) from the client address `from`
/// (127.0.0.0/8 is all loopback): its status and code.
async fn login_from(
    cluster: &TestCluster,
    from: [u8; 4],
    name: &str,
    password: &str,
    extra: &[(&str, &str)],
) -> (u16, Option<i64>) {
    let http = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(from))
        .build()
        .expect("client");
    let mut query: Vec<(&str, &str)> = vec![("username", name), ("password", password)];
    query.extend_from_slice(extra);
    let r = http
        .get(format!("{}/1/login", cluster.url(0)))
        .query(&query)
        .header("X-Service-Application-Id", &cluster.keys.application_id)
        .header("X-Service-REST-API-Key", &cluster.keys.rest_key)
        .send()
        .await
        .expect("login");
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    (status, body["code"].as_i64())
}

async fn console_from(cluster: &TestCluster, from: [u8; 4], password: &str) -> (u16, Option<i64>) {
    let email = cluster.credentials()["console"]["email"]
        .as_str()
        .unwrap()
        .to_string();
    console_as(cluster, from, &email, password).await
}

/// One console request as `email` from the client address `from`: its status and code.
async fn console_as(
    cluster: &TestCluster,
    from: [u8; 4],
    email: &str,
    password: &str,
) -> (u16, Option<i64>) {
    let http = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(from))
        .build()
        .expect("client");
    let r = http
        .get(format!("{}/1/apps", cluster.url(0)))
        .header("X-Service-Email", email)
        .header("X-Service-Password", password)
        .send()
        .await
        .expect("console");
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    (status, body["code"].as_i64())
}

/// Story — an attack from one address while the owner logs in from another.
///
/// Failed logins lock the address they come from out of the account, not the account for
/// everybody: its username, email and phone share one count, the owner logs in from another
/// address, and once the account failed too often from many addresses only an address it
/// logged in from lately, or a caller with a captcha's `validate_token`, may try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_address_is_locked_out_not_the_account() {
    let cluster = TestCluster::start(1, &[], &NO_IP_LIMITS).await;
    let c = cluster.client(0);
    post(
        &c,
        "/1/users",
        json!({"username": "owner", "password": "right", "email": "owner@x.org", "mobilePhoneNumber": "+8613800000088"}),
    )
    .await
    .unwrap();
    // The owner logs in from home (127.0.0.1), which the account then knows.
    assert_eq!(
        login_from(&cluster, [127, 0, 0, 1], "owner", "right", &[])
            .await
            .0,
        200
    );

    // A stranger at 127.0.0.2 tries the account's three names: ten failures in all.
    let stranger = [127, 0, 0, 2];
    for name in ["owner", "owner@x.org", "+8613800000088"]
        .iter()
        .cycle()
        .take(10)
    {
        assert_eq!(
            login_from(&cluster, stranger, name, "guess", &[]).await,
            (404, Some(101))
        );
    }
    assert_eq!(
        login_from(&cluster, stranger, "owner@x.org", "right", &[]).await,
        (429, Some(10076)),
        "the stranger's address is locked, whatever name it uses"
    );
    assert_eq!(
        login_from(&cluster, [127, 0, 0, 1], "owner", "right", &[])
            .await
            .0,
        200,
        "the owner still gets in"
    );
    assert_eq!(
        login_from(&cluster, [127, 0, 0, 3], "owner", "guess", &[]).await,
        (404, Some(101)),
        "another address is not locked"
    );

    // Many addresses, ten failures each: the account's allowance (100 in 15 minutes) is spent.
    for host in 10..19u8 {
        for _ in 0..10 {
            login_from(&cluster, [127, 0, 0, host], "owner", "guess", &[]).await;
        }
    }
    assert_eq!(
        login_from(&cluster, [127, 0, 0, 40], "owner", "right", &[]).await,
        (400, Some(10024)),
        "a new address needs a captcha"
    );
    assert_eq!(
        login_from(&cluster, [127, 0, 0, 1], "owner", "right", &[])
            .await
            .0,
        200,
        "a known address does not"
    );
    let captcha = cluster
        .master_client(0)
        .request(Method::POST, "/1/requestCaptcha", Some(&json!({})), true)
        .await
        .unwrap()
        .body;
    let pass = post(
        &c,
        "/1/verifyCaptcha",
        json!({"captcha_code": captcha["captcha_code"], "captcha_token": captcha["captcha_token"]}),
    )
    .await
    .unwrap();
    let token = pass["validate_token"].as_str().unwrap();
    assert_eq!(
        login_from(
            &cluster,
            [127, 0, 0, 40],
            "owner",
            "right",
            &[("validate_token", token)]
        )
        .await
        .0,
        200,
        "with a captcha a new address gets in"
    );
    assert_eq!(
        login_from(
            &cluster,
            [127, 0, 0, 41],
            "owner",
            "right",
            &[("validate_token", token)]
        )
        .await,
        (400, Some(10024)),
        "a captcha's pass is single-use"
    );

    // The console account: the same per address.
    let console_password = cluster.credentials()["console"]["password"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        console_from(&cluster, [127, 0, 0, 1], &console_password)
            .await
            .0,
        200
    );
    for _ in 0..10 {
        assert_eq!(console_from(&cluster, stranger, "wrong").await.0, 401);
    }
    assert_eq!(
        console_from(&cluster, stranger, &console_password).await,
        (429, Some(10210))
    );
    assert_eq!(
        console_from(&cluster, [127, 0, 0, 1], &console_password)
            .await
            .0,
        200,
        "the operator still gets in"
    );

    // Emails crafted to spell the operator's records (its address's count, its known
    // addresses) are accounts of their own: they lock nobody else out.
    let email = cluster.credentials()["console"]["email"]
        .as_str()
        .unwrap()
        .to_string();
    for crafted in [
        format!("{email}@127.0.0.1"),
        format!("{email}@127.0.0.1/known"),
        format!("{email}:127.0.0.1"),
    ] {
        for _ in 0..12 {
            console_as(&cluster, [127, 0, 0, 5], &crafted, "wrong").await;
        }
    }
    assert_eq!(
        console_from(&cluster, [127, 0, 0, 1], &console_password)
            .await
            .0,
        200,
        "crafted emails lock nobody out"
    );
}
