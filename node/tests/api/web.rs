//! What users of peer systems expect by default (docs/security.md): CORS for browsers (any
//! origin for the app-key API unless the app lists its origins, none for the console API),
//! other users' private fields hidden, safe default ACLs for roles, `Location` built from the
//! public URL, request ids, and connections that cannot be held open by slow or idle clients.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::common::{assert_api_error, register_user, TestCluster};

/// CORS for browsers: the app-key API answers a preflight from any origin with the brand's
/// headers, and carries the origin back on a real request; the console API answers no
/// origin; an app that lists its origins refuses others (403).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_reach_the_app_api_from_the_origins_it_allows() {
    let cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    let base = format!("http://{}", cluster.nodes[0].http);
    let http = reqwest::Client::new();
    let keys = cluster.keys.clone();
    let pre = http
        .request(Method::OPTIONS, format!("{base}/1/classes/Post"))
        .header("Origin", "https://shop.example")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "x-service-application-id,x-service-rest-api-key,content-type",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status().as_u16(), 200);
    let h = pre.headers();
    assert_eq!(h["access-control-allow-origin"], "https://shop.example");
    let allowed = h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(allowed.contains("x-service-rest-api-key"), "{allowed}");
    let pre = http
        .request(Method::OPTIONS, format!("{base}/1/apps"))
        .header("Origin", "https://shop.example")
        .header("Access-Control-Request-Method", "GET")
        .send()
        .await
        .unwrap();
    assert!(pre.headers().get("access-control-allow-origin").is_none());
    let get = |origin: &'static str| {
        let (http, base, keys) = (http.clone(), base.clone(), keys.clone());
        async move {
            http.get(format!("{base}/1/classes/Post"))
                .header("Origin", origin)
                .header("X-Service-Application-Id", &keys.application_id)
                .header("X-Service-REST-API-Key", &keys.rest_key)
                .send()
                .await
                .unwrap()
        }
    };
    let r = get("https://shop.example").await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://shop.example"
    );
    cluster
        .set_app_settings(json!({"allowedOrigins": ["https://shop.example"]}))
        .await;
    assert_eq!(get("https://shop.example").await.status().as_u16(), 200);
    let r = get("https://evil.example").await;
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], 403);
}

/// Other users' email and phone number are hidden in listings, gets and includes, and cannot
/// be queried (102); the user itself and the master key see them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_users_private_fields_are_hidden_everywhere() {
    let cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    let c = cluster.client(0);
    let body = json!({"username": "ann", "password": "p", "email": "ann@x.org", "mobilePhoneNumber": "+8613800000011"});
    let ann = c
        .request(Method::POST, "/1/users", Some(&body), false)
        .await
        .unwrap()
        .body;
    let (ann_id, ann_token) = (
        ann["objectId"].as_str().unwrap(),
        ann["sessionToken"].as_str().unwrap(),
    );
    let (_, bob_token) = register_user(&c, "bob").await;
    let bob = c.clone().with_session(Some(&bob_token));
    let read = |who: basalt_client::Client, path: String, master: bool| async move {
        who.request(Method::GET, &path, None, master)
            .await
            .unwrap()
            .body
    };
    let listed = bob.query("_User", &[]).await.unwrap();
    let users = listed["results"].as_array().unwrap();
    let seen_ann = users
        .iter()
        .find(|u| u["username"] == "ann")
        .cloned()
        .unwrap();
    let user_path = format!("/1/users/{ann_id}");
    let got = read(bob.clone(), user_path.clone(), false).await;
    let owner = json!({"owner": {"__type": "Pointer", "className": "_User", "objectId": ann_id}});
    let post = c.create_object("Post", &owner).await.unwrap();
    let include = format!("/1/classes/Post/{}?include=owner", post.object_id);
    let with_owner = read(bob.clone(), include, false).await;
    assert_eq!(with_owner["owner"]["username"], "ann");
    for (seen, key) in [
        (&seen_ann, "email"),
        (&seen_ann, "mobilePhoneNumber"),
        (&got, "email"),
        (&with_owner["owner"], "email"),
    ] {
        assert!(seen.get(key).is_none(), "{key} shown: {seen}");
    }
    let by_email = bob
        .query("_User", &[("where", r#"{"email":"ann@x.org"}"#)])
        .await;
    assert_api_error(by_email, 400, 102, "querying by another's email");
    let own = read(
        c.clone().with_session(Some(ann_token)),
        user_path.clone(),
        false,
    )
    .await;
    assert_eq!(own["email"], "ann@x.org");
    let master = read(cluster.master_client(0), user_path, true).await;
    assert_eq!(master["mobilePhoneNumber"], "+8613800000011");
}

/// A role created without an ACL is readable by all and writable by its creator only (a role
/// made without a session by no one); its name is trimmed, and a blank one is 139.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_made_without_an_acl_is_its_creators() {
    let cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    let c = cluster.client(0);
    let (ann_id, _) = register_user(&c, "ann").await;
    let (_, bob_token) = register_user(&c, "bob").await;
    let bob = c.clone().with_session(Some(&bob_token));
    let role = bob
        .request(
            Method::POST,
            "/1/roles",
            Some(&json!({"name": "editors "})),
            false,
        )
        .await
        .unwrap()
        .body;
    let role_id = role["objectId"].as_str().unwrap().to_string();
    let shown = c
        .request(Method::GET, &format!("/1/roles/{role_id}"), None, false)
        .await
        .unwrap()
        .body;
    assert_eq!(shown["name"], "editors");
    let join = json!({"users": {"__op": "AddRelation", "objects": [
        {"__type": "Pointer", "className": "_User", "objectId": ann_id}
    ]}});
    assert!(c
        .request(
            Method::PUT,
            &format!("/1/roles/{role_id}"),
            Some(&join),
            false
        )
        .await
        .is_err());
    bob.request(
        Method::PUT,
        &format!("/1/roles/{role_id}"),
        Some(&join),
        false,
    )
    .await
    .expect("the creator changes its role");
    let anon_role = c
        .request(
            Method::POST,
            "/1/roles",
            Some(&json!({"name": "open"})),
            false,
        )
        .await
        .unwrap()
        .body;
    assert!(c
        .request(
            Method::PUT,
            &format!("/1/roles/{}", anon_role["objectId"].as_str().unwrap()),
            Some(&join),
            false,
        )
        .await
        .is_err());
    assert_api_error(
        c.request(
            Method::POST,
            "/1/roles",
            Some(&json!({"name": "   "})),
            false,
        )
        .await,
        400,
        139,
        "blank role name",
    );
}

/// `Location` comes from the public URL, never from the Host header; a request's id comes
/// back, and one is made when none was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locations_come_from_the_public_url_and_request_ids_come_back() {
    let cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    let base = format!("http://{}", cluster.nodes[0].http);
    let http = reqwest::Client::new();
    let keys = cluster.keys.clone();
    let r = http
        .post(format!("{base}/1/classes/Post"))
        .header("Host", "evil.example/phish?")
        .header("X-Service-Application-Id", &keys.application_id)
        .header("X-Service-REST-API-Key", &keys.rest_key)
        .header("X-Request-Id", "trace-42")
        .json(&json!({"a": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    assert!(location.starts_with(&base), "{location}");
    assert_eq!(r.headers()["x-request-id"], "trace-42");
    let r = http.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(r.headers()["x-request-id"].len(), 16);
}

/// Reads from `s` until the peer closes it (0 bytes) or `within` passes; answers whether it
/// closed.
async fn closed_within(s: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_cannot_hold_a_node() {
    let cluster = TestCluster::start(
        1,
        &["--shards", "2"],
        &[
            "--http-header-timeout-secs",
            "2",
            "--http-idle-timeout-secs",
            "2",
            "--max-connections-per-ip",
            "20",
        ],
    )
    .await;
    let addr = cluster.nodes[0].http.clone();

    // One header byte a second: dropped at the header timeout, not held.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let started = Instant::now();
    let mut dropped = false;
    for b in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: yes\r\n".iter() {
        if slow.write_all(&[*b]).await.is_err()
            || closed_within(&mut slow, Duration::from_secs(1)).await
        {
            dropped = true;
            break;
        }
    }
    assert!(
        dropped,
        "a client sending a byte a second was held for {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );

    // An idle keep-alive connection is closed after the idle timeout.
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(
        closed_within(&mut idle, Duration::from_secs(5)).await,
        "idle connection held"
    );

    // At most 20 connections per client IP: the 21st is closed at once, and the node keeps
    // serving once they go.
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut extra = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let _ = extra
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    assert!(
        closed_within(&mut extra, Duration::from_secs(1)).await,
        "21st connection served"
    );
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(cluster.client(0).healthy().await);
}
