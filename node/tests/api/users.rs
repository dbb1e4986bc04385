//! Users and sessions (spec 4.5, 2.3, decisions "Users and sessions"): register, log in (GET and
//! POST, by username or email), read and list without secrets, change with the user's session
//! or the master key only (206), password changes ending other sessions, uniqueness (202/203)
//! including 200 concurrent registrations through three nodes, checkSession, and the `_User`
//! class alias. Requests rotate over the nodes of a 3-node cluster.

use std::time::Duration;

use basalt_client::Client;
use reqwest::Method;
use serde_json::{json, Value};

use super::common::platforms::{FakePlatforms, MINI_APP_ID, MINI_APP_SECRET, OAUTH_APP_ID};
use super::common::scenario::{run_rows, After, As, Row};
use super::common::{assert_api_error, register_user, TestCluster};

/// A client's POST of `body` to `path`.
async fn post_as(
    c: &Client,
    path: &str,
    body: Value,
) -> Result<basalt_client::Response, basalt_client::Error> {
    c.request(Method::POST, path, Some(&body), false).await
}

/// A user registers (201, Location, objectId, createdAt, sessionToken); reading and listing
/// never show the password or sessions, and `/1/classes/_User` is `/1/users`; it logs in by GET
/// and POST, by username or email (case aside), each login a new session changing nothing
/// visible. Requests rotate over three nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_registers_reads_without_secrets_and_logs_in() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let client = cluster.spread_client();
    let body = json!({"username": "ann", "password": "pw1", "email": "Ann@Example.org", "age": 30});
    let r = post_as(&client, "/1/users", body).await.expect("register");
    assert_eq!(r.status, 201);
    let ann = r.body["objectId"].as_str().unwrap().to_string();
    let token = r.body["sessionToken"].as_str().unwrap().to_string();
    assert!(r.body["createdAt"].is_string());
    let location = r.location.as_deref().unwrap_or_default();
    assert!(location.ends_with(&format!("/1/users/{ann}")), "{location}");
    register_user(&client, "ann2").await;
    let read = |path: String| {
        let c = client.clone();
        async move {
            c.request(Method::GET, &path, None, false)
                .await
                .unwrap()
                .body
        }
    };
    let got = read(format!("/1/users/{ann}")).await;
    assert_eq!((&got["username"], &got["age"]), (&json!("ann"), &json!(30)));
    for secret in ["password", "sessionToken", "_password", "_sessions"] {
        assert!(got.get(secret).is_none(), "{secret} shown: {got}");
    }
    let alias = read(format!("/1/classes/_User/{ann}")).await;
    assert_eq!(alias, got, "/1/classes/_User is /1/users");
    let list = read("/1/users?count=1".into()).await;
    assert_eq!(list["count"], 2);
    let users = list["results"].as_array().unwrap();
    assert!(users.iter().all(|u| u.get("password").is_none()));

    let login = read("/1/login?username=ann&password=pw1".into()).await;
    assert_eq!(
        (&login["objectId"], &login["age"]),
        (&json!(ann), &json!(30))
    );
    assert!(login.get("password").is_none());
    assert_ne!(login["sessionToken"], token.as_str());
    assert_eq!(
        login["updatedAt"], got["updatedAt"],
        "logging in changes nothing visible"
    );
    let by_email = json!({"username": "ann@example.org", "password": "pw1"});
    let by_email = post_as(&client, "/1/login", by_email)
        .await
        .expect("email login");
    assert_eq!(by_email.body["objectId"], ann.as_str());
}

/// Who may change a user, as a table: its own session or the master key; no session, another
/// user's or the SDKs' no-session placeholder is 206 and changes nothing. `checkSession` says
/// whose session a token is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_changes_only_with_its_own_session_or_the_master_key() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let (ann, token) = register_user(&client, "ann").await;
    let (_, other) = register_user(&client, "ann2").await;
    let path = format!("/1/users/{ann}");
    let age = |v: Value| After::Field {
        class: "_User",
        id: ann.clone(),
        field: "age",
        value: v,
    };
    let change = |name: &'static str, auth: As, to: u32| {
        Row::new(name, Method::PUT, path.clone())
            .auth(auth)
            .body(format!(r#"{{"age": {to}}}"#))
    };
    let rows = vec![
        change("without a session", As::App, 30)
            .fails(400, 206)
            .after(age(Value::Null)),
        change(
            "with another user's session",
            As::Session(other.clone()),
            30,
        )
        .fails(400, 206)
        .after(age(Value::Null)),
        change(
            "with the no-session placeholder",
            As::Session("bmob".into()),
            30,
        )
        .fails(400, 206)
        .after(age(Value::Null)),
        change("with its own session", As::Session(token.clone()), 31)
            .succeeds(200)
            .after(age(json!(31))),
        change("with the master key", As::Master, 32)
            .succeeds(200)
            .after(age(json!(32))),
    ];
    run_rows(&cluster, &rows).await;
    // Through the other nodes too: the user's own session changes it (a newer updatedAt), and
    // checkSession knows whose a token is.
    let own = cluster.client(2).with_session(Some(&token));
    let up = own.update_object("_User", &ann, &json!({"age": 33})).await;
    assert!(up.expect("own session, node 3").body["updatedAt"].is_string());
    for (t, msg) in [(&token, "ok"), (&other, "fail")] {
        let c = cluster.client(1).with_session(Some(t));
        let path = format!("/1/checkSession/{ann}");
        let r = c.request(Method::GET, &path, None, false).await.unwrap();
        assert_eq!(r.body["msg"], msg);
    }
}

/// A password change needs the old password (210) and the user's session (206); it ends
/// every other session of the user and keeps the one it was made with; the old password
/// no longer logs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_change_ends_every_other_session() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let client = cluster.spread_client();
    let (ann, first) = register_user(&client, "ann").await;
    let login = || {
        let c = client.clone();
        async move {
            let r = post_as(&c, "/1/login", json!({"username": "ann", "password": "p"})).await;
            r.expect("login").body["sessionToken"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let (kept, other) = (login().await, login().await);
    let pw_path = format!("/1/updateUserPassword/{ann}");
    let rows = vec![
        Row::new("a wrong old password", Method::POST, pw_path.clone())
            .auth(As::Session(kept.clone()))
            .body(r#"{"oldPassword": "bad", "newPassword": "pw2"}"#)
            .fails(400, 210),
        Row::new("without a session", Method::POST, pw_path.clone())
            .body(r#"{"oldPassword": "p", "newPassword": "pw2"}"#)
            .fails(400, 206),
    ];
    run_rows(&cluster, &rows).await;
    let change = json!({"oldPassword": "p", "newPassword": "pw2"});
    let ok = client
        .clone()
        .with_session(Some(&kept))
        .request(Method::PUT, &pw_path, Some(&change), false)
        .await
        .expect("change password");
    assert_eq!(ok.body, json!({"msg": "ok"}));
    for (t, msg) in [(&kept, "ok"), (&other, "fail"), (&first, "fail")] {
        let c = client.clone().with_session(Some(t));
        let path = format!("/1/checkSession/{ann}");
        let r = c.request(Method::GET, &path, None, false).await.unwrap();
        assert_eq!(r.body["msg"], msg, "{t}");
    }
    let old = post_as(
        &client,
        "/1/login",
        json!({"username": "ann", "password": "p"}),
    )
    .await;
    assert_api_error(old, 404, 101, "old password");
    post_as(
        &client,
        "/1/login",
        json!({"username": "ann", "password": "pw2"}),
    )
    .await
    .expect("new password");
}

/// Renaming claims the new name (202 when taken) and frees the old one; a delete needs the
/// session (206), and frees every name the user held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_and_deleting_a_user_free_its_names() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let client = cluster.spread_client();
    let body = json!({"username": "ann", "password": "p", "email": "Ann@Example.org"});
    let r = post_as(&client, "/1/users", body)
        .await
        .expect("register")
        .body;
    let (ann, token) = (
        r["objectId"].as_str().unwrap(),
        r["sessionToken"].as_str().unwrap(),
    );
    register_user(&client, "ann2").await;
    let path = format!("/1/users/{ann}");
    let as_ann = client.clone().with_session(Some(token));
    let rename = |to: &str| {
        let (c, path, body) = (as_ann.clone(), path.clone(), json!({"username": to}));
        async move { c.request(Method::PUT, &path, Some(&body), false).await }
    };
    rename("anna").await.expect("rename");
    assert_api_error(rename("ann2").await, 400, 202, "rename to a taken name");
    post_as(
        &client,
        "/1/login",
        json!({"username": "anna", "password": "p"}),
    )
    .await
    .expect("login under the new name");
    register_user(&client, "ann").await;
    let unsigned = client.request(Method::DELETE, &path, None, false).await;
    assert_api_error(unsigned, 400, 206, "delete without session");
    let del = as_ann.request(Method::DELETE, &path, None, false).await;
    assert_eq!(del.expect("delete").body, json!({"msg": "ok"}));
    let gone = client.request(Method::GET, &path, None, false).await;
    assert_api_error(gone, 404, 101, "deleted");
    let again = json!({"username": "anna", "password": "p", "email": "ann@example.org"});
    post_as(&client, "/1/users", again)
        .await
        .expect("names freed");
}

/// A batch updates a user with its element's token (206 without one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_updates_a_user_with_its_elements_token() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let client = cluster.spread_client();
    let (bob, token) = register_user(&client, "bob").await;
    let r = post_as(&client, "/1/batch", json!({"requests": [
        {"method": "PUT", "path": format!("/1/users/{bob}"), "body": {"age": 5}},
        {"method": "PUT", "path": format!("/1/classes/_User/{bob}"), "body": {"age": 6}, "token": token},
    ]}))
    .await
    .unwrap();
    assert_eq!(r.body[0]["error"]["code"], 206);
    assert!(r.body[1]["success"]["updatedAt"].is_string(), "{}", r.body);
    let path = format!("/1/users/{bob}");
    let b = client
        .request(Method::GET, &path, None, false)
        .await
        .unwrap();
    assert_eq!(b.body["age"], 6);
}

/// Story — a race through every node: 200 registrations of 20 names at once, spread over three
/// nodes, make exactly one user per name; every other attempt is 202.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_racing_for_a_name_make_one_user() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let client = cluster.spread_client();
    let attempts = (0..200).map(|i| {
        let c = client.clone();
        async move {
            let body = json!({"username": format!("racer{}", i % 20), "password": "p"});
            c.request(Method::POST, "/1/users", Some(&body), false)
                .await
        }
    });
    let results = futures::future::join_all(attempts).await;
    let won = results.iter().filter(|r| r.is_ok()).count();
    let other: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .filter(|e| e.code() != Some(202))
        .map(|e| e.to_string())
        .collect();
    assert!(other.is_empty(), "{other:?}");
    assert_eq!(won, 20, "one registration per name");
    let listed = client
        .request(Method::GET, "/1/users?limit=500", None, false)
        .await
        .unwrap()
        .body;
    let mut racers: Vec<&str> = listed["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|u| u["username"].as_str())
        .filter(|n| n.starts_with("racer"))
        .collect();
    racers.sort_unstable();
    let before = racers.len();
    racers.dedup();
    assert_eq!((before, racers.len()), (20, 20), "20 distinct users exist");
}

/// Every users endpoint, one row per case: success, missing or wrong app keys, malformed body,
/// missing or conflicting fields, another user's session (206), not found; refused requests
/// change nothing (read back with the master key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_endpoints_answer_every_case() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let r = client
        .request(
            Method::POST,
            "/1/users",
            Some(&json!({"username": "ann", "password": "pw1", "email": "Ann@Example.org", "age": 30})),
            false,
        )
        .await
        .expect("register ann");
    let ann = r.body["objectId"].as_str().expect("id").to_string();
    let ann_t = r.body["sessionToken"].as_str().expect("token").to_string();
    let (bob, bob_t) = register_user(&client, "bob").await;
    let users = |n: u64| After::Count("_User", n);
    let ann_field = |field: &'static str, value: Value| After::Field {
        class: "_User",
        id: ann.clone(),
        field,
        value,
    };
    let ann_path = format!("/1/users/{ann}");
    let bob_path = format!("/1/users/{bob}");
    let password_path = format!("/1/updateUserPassword/{ann}");
    let rows = [
        // POST /1/users
        Row::new("sign up", Method::POST, "/1/users")
            .body(r#"{"username":"cat","password":"p"}"#)
            .succeeds(201)
            .after(users(3)),
        Row::new("sign up without keys", Method::POST, "/1/users")
            .auth(As::Nobody)
            .body(r#"{"username":"dan","password":"p"}"#)
            .unauthorized()
            .after(users(3)),
        Row::new("sign up with a wrong key", Method::POST, "/1/users")
            .auth(As::WrongKey)
            .body(r#"{"username":"dan","password":"p"}"#)
            .unauthorized()
            .after(users(3)),
        Row::new("sign up with malformed JSON", Method::POST, "/1/users")
            .body("{bad")
            .fails(400, 107)
            .after(users(3)),
        Row::new("sign up with an array", Method::POST, "/1/users")
            .body("[1]")
            .fails(400, 107),
        Row::new("sign up without a password", Method::POST, "/1/users")
            .body(r#"{"username":"dan"}"#)
            .fails(400, 108)
            .after(users(3)),
        Row::new("sign up without a username", Method::POST, "/1/users")
            .body(r#"{"password":"p"}"#)
            .fails(400, 108),
        Row::new("sign up with a taken username", Method::POST, "/1/users")
            .body(r#"{"username":"ann","password":"p"}"#)
            .fails(400, 202)
            .after(users(3)),
        Row::new(
            "sign up with a taken email (any case)",
            Method::POST,
            "/1/users",
        )
        .body(r#"{"username":"dan","password":"p","email":"ann@example.ORG"}"#)
        .fails(400, 203)
        .after(users(3)),
        Row::new("sign up with a service field", Method::POST, "/1/users")
            .body(r#"{"username":"dan","password":"p","emailVerified":true}"#)
            .fails(400, 105)
            .after(users(3)),
        Row::new(
            "sign up with a username that is not text",
            Method::POST,
            "/1/users",
        )
        .body(r#"{"username":5,"password":"p"}"#)
        .fails(400, 107)
        .after(users(3)),
        Row::new("the refused names stayed free", Method::POST, "/1/users")
            .body(r#"{"username":"dan","password":"p","email":"dan@example.org"}"#)
            .succeeds(201)
            .after(users(4)),
        // GET and POST /1/login
        Row::new(
            "log in by query",
            Method::GET,
            "/1/login?username=ann&password=pw1",
        )
        .succeeds(200),
        Row::new("log in by email", Method::POST, "/1/login")
            .body(r#"{"username":"ann@example.org","password":"pw1"}"#)
            .succeeds(200),
        Row::new("log in without keys", Method::POST, "/1/login")
            .auth(As::Nobody)
            .body(r#"{"username":"ann","password":"pw1"}"#)
            .unauthorized(),
        Row::new(
            "log in with a wrong password",
            Method::GET,
            "/1/login?username=ann&password=nope",
        )
        .fails(404, 101),
        Row::new("log in as nobody", Method::POST, "/1/login")
            .body(r#"{"username":"nobody","password":"x"}"#)
            .fails(404, 101),
        Row::new("log in without a password", Method::POST, "/1/login")
            .body(r#"{"username":"ann"}"#)
            .fails(400, 108),
        Row::new("log in with a password only", Method::POST, "/1/login")
            .body(r#"{"password":"x"}"#)
            .fails(400, 108),
        Row::new("log in with nothing", Method::POST, "/1/login")
            .body("{}")
            .fails(400, 109),
        Row::new("log in with malformed JSON", Method::POST, "/1/login")
            .body("{bad")
            .fails(400, 107),
        // GET /1/users/<id>
        Row::new("read a user", Method::GET, &ann_path).succeeds(200),
        Row::new("read a user without keys", Method::GET, &ann_path)
            .auth(As::Nobody)
            .unauthorized(),
        Row::new("read a missing user", Method::GET, "/1/users/nope123456").fails(404, 101),
        Row::new("read an impossible id", Method::GET, "/1/users/no-such!").fails(404, 101),
        // PUT /1/users/<id>
        Row::new("change with the user's session", Method::PUT, &ann_path)
            .auth(As::Session(ann_t.clone()))
            .body(r#"{"age":31}"#)
            .succeeds(200)
            .after(ann_field("age", json!(31))),
        Row::new("change with another user's session", Method::PUT, &ann_path)
            .auth(As::Session(bob_t.clone()))
            .body(r#"{"age":99}"#)
            .fails(400, 206)
            .after(ann_field("age", json!(31))),
        Row::new("change without a session", Method::PUT, &ann_path)
            .body(r#"{"age":99}"#)
            .fails(400, 206)
            .after(ann_field("age", json!(31))),
        Row::new("change with the master key", Method::PUT, &ann_path)
            .auth(As::Master)
            .body(r#"{"age":32}"#)
            .succeeds(200)
            .after(ann_field("age", json!(32))),
        Row::new("change with malformed JSON", Method::PUT, &ann_path)
            .auth(As::Session(ann_t.clone()))
            .body("{bad")
            .fails(400, 107)
            .after(ann_field("age", json!(32))),
        Row::new("change to a taken username", Method::PUT, &ann_path)
            .auth(As::Session(ann_t.clone()))
            .body(r#"{"username":"bob"}"#)
            .fails(400, 202)
            .after(ann_field("username", json!("ann"))),
        Row::new("change a missing user", Method::PUT, "/1/users/nope123456")
            .auth(As::Master)
            .body(r#"{"age":1}"#)
            .fails(404, 101),
        // PUT /1/updateUserPassword/<id>
        Row::new(
            "password change with a wrong old password",
            Method::PUT,
            &password_path,
        )
        .auth(As::Session(ann_t.clone()))
        .body(r#"{"oldPassword":"nope","newPassword":"pw2"}"#)
        .fails(400, 210),
        Row::new(
            "password change without the new password",
            Method::PUT,
            &password_path,
        )
        .auth(As::Session(ann_t.clone()))
        .body(r#"{"oldPassword":"pw1"}"#)
        .fails(400, 107),
        Row::new(
            "password change with another user's session",
            Method::PUT,
            &password_path,
        )
        .auth(As::Session(bob_t.clone()))
        .body(r#"{"oldPassword":"pw1","newPassword":"pw2"}"#)
        .fails(400, 206),
        Row::new(
            "the password did not change",
            Method::GET,
            "/1/login?username=ann&password=pw1",
        )
        .succeeds(200),
        // GET /1/checkSession/<id>
        Row::new(
            "check a session",
            Method::GET,
            format!("/1/checkSession/{ann}"),
        )
        .auth(As::Session(ann_t.clone()))
        .succeeds(200),
        // DELETE /1/users/<id>
        Row::new(
            "delete with another user's session",
            Method::DELETE,
            &bob_path,
        )
        .auth(As::Session(ann_t.clone()))
        .fails(400, 206)
        .after(users(4)),
        Row::new("delete without keys", Method::DELETE, &bob_path)
            .auth(As::Nobody)
            .unauthorized()
            .after(users(4)),
        Row::new("delete with the user's session", Method::DELETE, &bob_path)
            .auth(As::Session(bob_t.clone()))
            .succeeds(200)
            .after(users(3)),
        Row::new("delete a deleted user", Method::DELETE, &bob_path)
            .auth(As::Master)
            .fails(404, 101)
            .after(users(3)),
        Row::new("the deleted user's name is free", Method::POST, "/1/users")
            .body(r#"{"username":"bob","password":"p"}"#)
            .succeeds(201)
            .after(users(4)),
    ];
    run_rows(&cluster, &rows).await;
}

/// A third-party account registers a user once (201, Location, a random username, a
/// session) and then logs that user in (200, a new session, no authData shown); bad authData
/// (107) and missing keys (401) register nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_party_account_registers_once_and_then_logs_in() {
    let platforms = FakePlatforms::start().await;
    let cluster = platforms.cluster(3, "4").await;
    let client = cluster.spread_client();
    let post = |body: Value| post_as(&client, "/1/users", body);
    let weixin =
        json!({"weixin": {"openid": "wx-1", "access_token": platforms.grant_token("wx-1")}});
    let weibo = json!({"weibo": {"uid": "9", "access_token": platforms.grant_token("9")}});

    // A new account: 201, Location, a random username, a session.
    let first = post(json!({ "authData": weixin }))
        .await
        .expect("register by authData");
    assert_eq!(first.status, 201);
    assert!(first.location.is_some());
    let uid = first.body["objectId"].as_str().unwrap().to_string();
    let username = first.body["username"].as_str().unwrap().to_string();
    assert_eq!(username.len(), 10);
    assert!(first.body["sessionToken"].is_string());

    // The same account again logs that user in: 200 with the user and a new session.
    let again = post(json!({ "authData": weixin }))
        .await
        .expect("log in by authData");
    assert_eq!(again.status, 200);
    assert_eq!(again.body["objectId"], uid.as_str());
    assert_eq!(again.body["username"], username.as_str());
    assert!(again.body["sessionToken"].is_string());
    assert!(again.body.get("authData").is_none() && again.body.get("_authData").is_none());

    // Bad authData (107) and missing keys (401) register nobody.
    let one_user = || After::Count("_User", 1);
    run_rows(
        &cluster,
        &[
            Row::new("an unknown platform", Method::POST, "/1/users")
                .body(r#"{"authData":{"myspace":{"id":"x"}}}"#)
                .fails(400, 107)
                .after(one_user()),
            Row::new("no id field", Method::POST, "/1/users")
                .body(r#"{"authData":{"weibo":{"openid":"x"}}}"#)
                .fails(400, 107)
                .after(one_user()),
            Row::new(
                "a platform's data that is not an object",
                Method::POST,
                "/1/users",
            )
            .body(r#"{"authData":{"weixin":"wx-2"}}"#)
            .fails(400, 107)
            .after(one_user()),
            Row::new("authData without keys", Method::POST, "/1/users")
                .auth(As::Nobody)
                .body(json!({ "authData": weibo }).to_string())
                .unauthorized()
                .after(one_user()),
        ],
    )
    .await;
}

/// Story — an account's life across users: a second platform linked to a password user logs
/// that user in; the same account cannot go to another user (208); unlinked, it is free and
/// links to another user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_party_account_links_to_one_user_at_a_time() {
    let platforms = FakePlatforms::start().await;
    let cluster = platforms.cluster(3, "4").await;
    let client = cluster.spread_client();
    let post = |body: Value| post_as(&client, "/1/users", body);
    let weixin =
        json!({"weixin": {"openid": "wx-1", "access_token": platforms.grant_token("wx-1")}});
    let weibo = json!({"weibo": {"uid": "9", "access_token": platforms.grant_token("9")}});

    let first = post(json!({ "authData": weixin }))
        .await
        .expect("register by authData");
    let uid = first.body["objectId"].as_str().unwrap().to_string();
    let token = first.body["sessionToken"].as_str().unwrap().to_string();
    let ann = post(json!({"username": "ann", "password": "p"}))
        .await
        .unwrap()
        .body;
    let ann_id = ann["objectId"].as_str().unwrap().to_string();
    let as_ann = client.clone().with_session(ann["sessionToken"].as_str());
    let ann_path = format!("/1/users/{ann_id}");
    as_ann
        .request(
            Method::PUT,
            &ann_path,
            Some(&json!({ "authData": weibo })),
            false,
        )
        .await
        .expect("link");
    let by_weibo = post(json!({ "authData": weibo }))
        .await
        .expect("login by linked account");
    assert_eq!(by_weibo.body["objectId"], ann_id.as_str());
    run_rows(
        &cluster,
        &[Row::new(
            "link an account linked to another user",
            Method::PUT,
            &ann_path,
        )
        .auth(As::Session(
            ann["sessionToken"].as_str().unwrap_or("").to_string(),
        ))
        .body(json!({ "authData": weixin }).to_string())
        .fails(400, 208)],
    )
    .await;
    let as_first = client.clone().with_session(Some(&token));
    as_first
        .request(
            Method::PUT,
            &format!("/1/users/{uid}"),
            Some(&json!({"authData": {"weixin": null}})),
            false,
        )
        .await
        .expect("unlink");
    as_ann
        .request(
            Method::PUT,
            &ann_path,
            Some(&json!({ "authData": weixin })),
            false,
        )
        .await
        .expect("the unlinked account is free");
    let now_ann = post(json!({ "authData": weixin })).await.unwrap();
    assert_eq!(now_ann.body["objectId"], ann_id.as_str());
}

/// Story — an attack: knowing a victim's openid is not enough to log in as the victim (no
/// token, a made-up one or the attacker's own: 251), unless the app opts into unverified
/// authData (the old, risky behaviour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knowing_an_openid_is_not_enough_to_log_in() {
    let fake = FakePlatforms::start().await;
    let cluster = fake.cluster(1, "2").await;
    let client = cluster.client(0);
    let post = |auth_data: Value| post_as(&client, "/1/users", json!({ "authData": auth_data }));

    let victim =
        post(json!({"weixin": {"openid": "victim", "access_token": fake.grant_token("victim")}}))
            .await
            .expect("the victim registers with a real token");
    assert_eq!(victim.status, 201);
    for (data, why) in [
        (json!({"openid": "victim"}), "no token"),
        (
            json!({"openid": "victim", "access_token": "made-up"}),
            "a made-up token",
        ),
        (
            json!({"openid": "victim", "access_token": fake.grant_token("attacker")}),
            "the attacker's own token",
        ),
    ] {
        assert_api_error(post(json!({ "weixin": data })).await, 400, 251, why);
    }

    cluster
        .set_app_settings(json!({"allowUnverifiedAuthData": true}))
        .await;
    let r = post(json!({"weixin": {"openid": "victim"}}))
        .await
        .expect("unverified login allowed");
    assert_eq!(r.body["objectId"], victim.body["objectId"]);
}

/// Table — each platform proves its accounts: mini-programs and Apple need the app's
/// credentials first (252); then, per platform, data that proves the account registers (201)
/// and data that does not (a code used up, another account's token, a bad signature or claim)
/// is 251.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_platform_proves_its_accounts() {
    let fake = FakePlatforms::start().await;
    let cluster = fake.cluster(1, "2").await;
    let client = cluster.client(0);
    let post = |auth_data: Value| post_as(&client, "/1/users", json!({ "authData": auth_data }));

    // Mini-programs and Apple need the app's credentials first (252), then a real code/token.
    let code = fake.grant_code("mini-1");
    assert_api_error(
        post(json!({"weapp": {"openid": "mini-1", "code": code}})).await,
        400,
        252,
        "weapp without credentials",
    );
    let apple_app = "org.example.app";
    cluster
        .set_app_settings(json!({"authProviders": {
            "weapp": {"appId": MINI_APP_ID, "appSecret": MINI_APP_SECRET},
            "qqapp": {"appId": MINI_APP_ID, "appSecret": MINI_APP_SECRET},
            "toutiao": {"appId": MINI_APP_ID, "appSecret": MINI_APP_SECRET},
            "qq": {"appId": OAUTH_APP_ID},
            "weibo": {"appId": OAUTH_APP_ID},
            "apple": {"appId": apple_app},
        }}))
        .await;

    // One row per platform: data that proves the account (201), data that does not (251).
    let rows = [
        (
            "weapp",
            json!({"openid": "mini-1", "code": code}),
            json!({"openid": "mini-1", "code": code}),
        ),
        (
            "qqapp",
            json!({"openid": "qa-1", "code": fake.grant_code("qa-1")}),
            json!({"openid": "qa-2", "code": fake.grant_code("qa-1")}),
        ),
        (
            "toutiao",
            json!({"openid": "tt-1", "code": fake.grant_code("tt-1")}),
            json!({"openid": "tt-1", "code": "made-up"}),
        ),
        (
            "qq",
            json!({"openid": "qq-1", "access_token": fake.grant_token("qq-1")}),
            json!({"openid": "qq-2", "access_token": fake.grant_token("qq-1")}),
        ),
        (
            "weibo",
            json!({"uid": "77", "access_token": fake.grant_token("77")}),
            json!({"uid": "78", "access_token": fake.grant_token("77")}),
        ),
        (
            "apple",
            json!({"uid": "ap-1", "token": fake.apple_token("ap-1", apple_app, 600)}),
            json!({"uid": "ap-1", "token": fake.apple_token("ap-1", "com.other.app", 600)}),
        ),
        (
            "apple",
            json!({"uid": "ap-2", "token": fake.apple_token("ap-2", apple_app, 600)}),
            json!({"uid": "ap-2", "token": fake.apple_token("ap-2", apple_app, -600)}),
        ),
        (
            "apple",
            json!({"uid": "ap-3", "identity_token": fake.apple_token("ap-3", apple_app, 600)}),
            json!({"uid": "ap-3", "token": fake.apple_token("ap-1", apple_app, 600)}),
        ),
    ];
    for (platform, good, bad) in rows {
        let r = post(json!({ platform: good })).await;
        assert_eq!(r.map(|r| r.status).ok(), Some(201), "{platform}: {good}");
        // The second is a code used up, another account's token, or a bad signature/claim.
        assert_api_error(post(json!({ platform: bad })).await, 400, 251, platform);
    }
}

/// A platform that fails answers 503 and lets nobody in; a link is checked the same way, and
/// a refused link reserves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_platform_lets_nobody_in_and_links_are_checked_alike() {
    let fake = FakePlatforms::start().await;
    let cluster = fake.cluster(1, "2").await;
    let client = cluster.client(0);
    let post = |auth_data: Value| post_as(&client, "/1/users", json!({ "authData": auth_data }));

    assert_api_error(
        post(json!({"weixin": {"openid": "victim", "access_token": "down"}})).await,
        503,
        503,
        "platform down",
    );

    let (ann_id, ann_token) = super::common::register_user(&client, "ann").await;
    let as_ann = client.clone().with_session(Some(&ann_token));
    assert_api_error(
        as_ann
            .request(
                Method::PUT,
                &format!("/1/users/{ann_id}"),
                Some(&json!({"authData": {"weixin": {"openid": "free-1", "access_token": "made-up"}}})),
                false,
            )
            .await,
        400,
        251,
        "unverified link",
    );
    let free =
        post(json!({"weixin": {"openid": "free-1", "access_token": fake.grant_token("free-1")}}))
            .await
            .expect("the refused link reserved nothing");
    assert_eq!(free.status, 201);
}

/// Anonymous ids are never sent anywhere; the master key (the app's own server) is trusted;
/// the providers' settings are checked when set (107).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_ids_and_the_master_key_are_trusted_and_settings_checked() {
    let fake = FakePlatforms::start().await;
    let cluster = fake.cluster(1, "2").await;
    let client = cluster.client(0);
    let post = |auth_data: Value| post_as(&client, "/1/users", json!({ "authData": auth_data }));

    assert_eq!(
        post(json!({"anonymous": {"id": "device-1"}}))
            .await
            .unwrap()
            .status,
        201
    );
    let by_master = cluster
        .master_client(0)
        .request(
            Method::POST,
            "/1/users",
            Some(&json!({"authData": {"weixin": {"openid": "srv-1"}}})),
            true,
        )
        .await
        .expect("the master key links without a check");
    assert_eq!(by_master.status, 201);

    for bad in [
        json!({"authProviders": {"anonymous": {}}}),
        json!({"authProviders": {"weapp": {"appId": "a", "key": "b"}}}),
        json!({"authProviders": {"weapp": {"appId": 1}}}),
        json!({"authProviders": []}),
    ] {
        assert_api_error(
            cluster.try_app_settings(&bad).await,
            400,
            107,
            &bad.to_string(),
        );
    }
}

/// Logs in `username` through `client`; answers the session token.
async fn log_in_as(client: Client, username: &str, password: String) -> String {
    client
        .request(
            Method::POST,
            "/1/login",
            Some(&json!({"username": username, "password": password})),
            false,
        )
        .await
        .expect("log in")
        .body["sessionToken"]
        .as_str()
        .expect("sessionToken")
        .to_string()
}

/// Changes `user`'s password with the session `token` (`updateUserPassword`).
async fn change_password(client: Client, token: &str, user: &str, old: &str, new: &str) {
    client
        .with_session(Some(token))
        .request(
            Method::PUT,
            &format!("/1/updateUserPassword/{user}"),
            Some(&json!({"oldPassword": old, "newPassword": new})),
            false,
        )
        .await
        .expect("change the password");
}

/// Story — through every node.
///
/// A session works through every node the moment it is made, and ends through every node the
/// moment the password changes or the user is deleted: each node checks sessions on its own
/// replica of the user's shard when it is current, and the writes that end sessions settle on
/// every member before they answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_start_and_end_at_once_through_every_node() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let node = |i: usize| cluster.client(i);
    let (sam, first) = register_user(&node(0), "sam").await;
    let doc = node(0)
        .with_session(Some(&first))
        .create_object(
            "Diary",
            &json!({"text": "mine", "ACL": {sam.as_str(): {"read": true}}}),
        )
        .await
        .expect("create the diary")
        .object_id;
    // Through node `i` with `token`: checkSession says ok, and the private object is readable.
    let live = |i: usize, token: String| {
        let c = node(i).with_session(Some(&token));
        let (check, doc) = (format!("/1/checkSession/{sam}"), doc.clone());
        async move {
            let msg = c
                .request(Method::GET, &check, None, false)
                .await
                .expect("checkSession")
                .body["msg"]
                .clone();
            let read = c.get_object("Diary", &doc).await.expect("read").is_some();
            assert_eq!(msg == "ok", read, "checkSession and the ACL disagree");
            read
        }
    };
    let log_in = |i: usize, password: String| log_in_as(node(i), "sam", password);

    let mut password = "p".to_string();
    let mut keeper = first;
    for round in 0..6 {
        let via = round % 3;
        let fresh = log_in(via, password.clone()).await;
        for i in 0..3 {
            assert!(
                live(i, fresh.clone()).await,
                "round {round}: node {i} refuses a session made through node {via}"
            );
        }
        // The password changes through the next node with `keeper`: `fresh` ends everywhere.
        let new_password = format!("p{round}");
        change_password(node((via + 1) % 3), &keeper, &sam, &password, &new_password).await;
        password = new_password;
        for i in 0..3 {
            assert!(
                !live(i, fresh.clone()).await,
                "round {round}: node {i} still accepts a session the password change ended"
            );
            assert!(
                live(i, keeper.clone()).await,
                "round {round}: node {i} refuses the session that changed the password"
            );
        }
        if round % 2 == 1 {
            keeper = log_in(round % 3, password.clone()).await;
        }
    }
    let mut served_locally = 0.0;
    for i in 0..3 {
        served_locally += cluster
            .metric(i, "basalt_session_checks_total{source=\"replica\"}")
            .await;
    }
    assert!(
        served_locally > 0.0,
        "no session check was served by a node's own replica"
    );

    // Deleting the user ends its sessions through every node at once.
    cluster
        .master_client(2)
        .request(Method::DELETE, &format!("/1/users/{sam}"), None, true)
        .await
        .expect("delete the user");
    for i in 0..3 {
        let c = node(i).with_session(Some(&keeper));
        let msg = c
            .request(Method::GET, &format!("/1/checkSession/{sam}"), None, false)
            .await
            .expect("checkSession")
            .body["msg"]
            .clone();
        assert_eq!(msg, "fail", "node {i} accepts a deleted user's session");
    }
}

/// A node whose replica of the user's shard lags (every log append there takes 300 ms, a fail
/// point) never accepts a session that a password change through another node has ended: the
/// change answers only once that replica has applied it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_replica_never_accepts_an_ended_session() {
    let mut cluster = TestCluster::start(3, &["--shards", "1"], &[]).await;
    let (sam, keeper) = register_user(&cluster.client(0), "sam").await;
    cluster.stop(2);
    cluster.restart_with_failpoints(2, "log-append=sleep(300)");
    cluster.wait_healthy(2, Duration::from_secs(60)).await;
    let check = |token: String| {
        let c = cluster.client(2).with_session(Some(&token));
        let path = format!("/1/checkSession/{sam}");
        async move {
            c.request(Method::GET, &path, None, false)
                .await
                .expect("checkSession")
                .body["msg"]
                .clone()
        }
    };
    let mut password = "p".to_string();
    for round in 0..4 {
        let fresh = log_in_as(cluster.client(0), "sam", password.clone()).await;
        // Until node 3's replica has the new session it asks the leader: accepted either way.
        assert_eq!(check(fresh.clone()).await, "ok", "round {round}");
        // Let the lagging replica apply the login, so it vouches for itself again.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let new_password = format!("p{round}");
        change_password(cluster.client(1), &keeper, &sam, &password, &new_password).await;
        password = new_password;
        assert_eq!(
            check(fresh).await,
            "fail",
            "round {round}: the lagging node accepts a session the password change ended"
        );
        assert_eq!(check(keeper.clone()).await, "ok", "round {round}");
    }
}
