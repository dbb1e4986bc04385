//! The route table from outside: each row is a method and path of the API and the
//! authentication its family needs. Without credentials each answers as its family does (401
//! for app and console routes, 10061 for master-key routes with only app keys, the handler
//! itself for pages whose token is the credential); with the right credentials each reaches its
//! handler (never the router's 404 or 405); a method a path does not serve answers 405, and an
//! unknown path 404.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::TestCluster;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Auth {
    /// App keys or a signed request.
    App,
    /// The app's master key.
    Master,
    /// A console account's email and password.
    Console,
    /// None: the token in the path is the credential, or the route is operational.
    Open,
}

use Auth::*;

/// Every route: method, path (with `{app}` for an applicationId), family.
const ROUTES: &[(&str, &str, Auth)] = &[
    ("GET", "/1/classes/RouteT", App),
    ("POST", "/1/classes/RouteT", App),
    ("GET", "/1/classes/RouteT/x1", App),
    ("PUT", "/1/classes/RouteT/x1", App),
    ("DELETE", "/1/classes/RouteT/x1", App),
    ("GET", "/1/users", App),
    ("POST", "/1/users", App),
    ("POST", "/1/usersv1", App),
    ("GET", "/1/users/x1", App),
    ("PUT", "/1/users/x1", App),
    ("DELETE", "/1/users/x1", App),
    ("GET", "/1/login", App),
    ("POST", "/1/login", App),
    ("POST", "/1/updateUserPassword/x1", App),
    ("PUT", "/1/updateUserPassword/x1", App),
    ("PUT", "/1/updatePassword/x1", App),
    ("POST", "/1/updatePassword/x1", App),
    ("GET", "/1/checkSession/x1", App),
    ("POST", "/1/requestEmailVerify", App),
    ("POST", "/1/requestPasswordReset", App),
    ("POST", "/1/requestSmsCode", App),
    ("POST", "/1/verifySmsCode", App),
    ("POST", "/1/verifySmsCode/123456", App),
    ("GET", "/1/querySms/1", App),
    ("PUT", "/1/resetPasswordBySmsCode/123456", App),
    ("POST", "/1/resetPasswordBySmsCode/123456", App),
    ("POST", "/1/requestCaptcha", App),
    ("POST", "/1/verifyCaptcha", App),
    ("GET", "/1/roles", App),
    ("POST", "/1/roles", App),
    ("GET", "/1/roles/x1", App),
    ("PUT", "/1/roles/x1", App),
    ("DELETE", "/1/roles/x1", App),
    ("POST", "/1/batch", App),
    ("GET", "/1/timestamp", App),
    ("GET", "/1/cloudQuery", App),
    ("GET", "/1/classes/_User", App),
    ("GET", "/1/classes/_Role/x1", App),
    ("GET", "/1/schemas", Master),
    ("GET", "/1/schemas/RouteT", Master),
    ("POST", "/1/schemas/RouteT", Master),
    ("PUT", "/1/schemas/RouteT", Master),
    ("DELETE", "/1/schemas/RouteT", Master),
    ("GET", "/1/schemas/RouteT/indexes", Master),
    ("POST", "/1/schemas/RouteT/indexes", Master),
    ("DELETE", "/1/schemas/RouteT/indexes/x", Master),
    ("GET", "/1/apps", Console),
    ("POST", "/1/apps", Console),
    ("GET", "/1/apps/{app}", Console),
    ("PUT", "/1/apps/{app}", Console),
    ("GET", "/1/apps/{app}/smsTemplates", Console),
    ("POST", "/1/apps/{app}/smsTemplates", Console),
    ("DELETE", "/1/apps/{app}/smsTemplates/none", Console),
    ("GET", "/email/verify/no-such-token", Open),
    ("GET", "/email/reset/no-such-token", Open),
    ("POST", "/email/reset/no-such-token", Open),
    ("GET", "/captcha/no-such-token", Open),
    ("GET", "/health", Open),
    ("GET", "/metrics", Open),
];

/// Whether an answer is the router's own: no route (404) or no such method on it (405).
fn router_answer(status: u16, body: &Value) -> bool {
    matches!(status, 404 | 405) && matches!(body["code"].as_i64(), Some(404 | 405))
}

/// Table — every route of `api::table`, by method.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_asks_for_its_authentication_and_reaches_its_handler() {
    let cluster = TestCluster::start(1, &["--shards", "2"], &[]).await;
    let http = reqwest::Client::new();
    let base = format!("http://{}", cluster.nodes[0].http);
    let creds = cluster.credentials();
    let app_id = creds["app"]["applicationId"]
        .as_str()
        .expect("applicationId")
        .to_string();
    let send = |method: &str, path: &str, headers: Vec<(String, String)>| {
        let mut req = http
            .request(
                Method::from_bytes(method.as_bytes()).expect("method"),
                format!("{base}{}", path.replace("{app}", &app_id)),
            )
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(k, v);
        }
        if matches!(method, "POST" | "PUT") {
            req = req.body("{}");
        }
        async move {
            let resp = req.send().await.expect("send");
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap_or_default();
            (
                status,
                serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)),
            )
        }
    };
    let app_keys = vec![
        ("X-Service-Application-Id".to_string(), app_id.clone()),
        (
            "X-Service-REST-API-Key".to_string(),
            creds["app"]["restKey"]
                .as_str()
                .expect("restKey")
                .to_string(),
        ),
    ];
    let mut master = app_keys.clone();
    master.push((
        "X-Service-Master-Key".to_string(),
        creds["app"]["masterKey"]
            .as_str()
            .expect("masterKey")
            .to_string(),
    ));
    let console = vec![
        (
            "X-Service-Email".to_string(),
            creds["console"]["email"]
                .as_str()
                .expect("email")
                .to_string(),
        ),
        (
            "X-Service-Password".to_string(),
            creds["console"]["password"]
                .as_str()
                .expect("password")
                .to_string(),
        ),
    ];
    for &(method, path, auth) in ROUTES {
        let what = format!("{method} {path} ({auth:?})");
        // Without the family's credentials.
        let (status, body) = match auth {
            Master => send(method, path, app_keys.clone()).await,
            _ => send(method, path, Vec::new()).await,
        };
        match auth {
            App | Console => {
                assert_eq!(status, 401, "{what}: {body}");
                assert_eq!(body, json!({"error": "unauthorized"}), "{what}");
            }
            Master => assert_eq!(body["code"], 10061, "{what}: {status} {body}"),
            Open => assert!(!router_answer(status, &body), "{what}: {status} {body}"),
        }
        // With them: the handler answers (its own success or refusal), never the router.
        let headers = match auth {
            App => app_keys.clone(),
            Master => master.clone(),
            Console => console.clone(),
            Open => Vec::new(),
        };
        let (status, body) = send(method, path, headers).await;
        assert!(!router_answer(status, &body), "{what}: {status} {body}");
        assert_ne!(status, 401, "{what}: {body}");
        assert_ne!(body["code"], 10061, "{what}: {body}");
    }

    // A method a routed path does not serve: 405; an unknown path: 404.
    for (method, path) in [
        ("PATCH", "/1/classes/RouteT"),
        ("DELETE", "/1/classes/RouteT"),
        ("POST", "/1/classes/RouteT/x1"),
        ("DELETE", "/1/login"),
        ("GET", "/1/batch"),
        ("PATCH", "/1/schemas/RouteT"),
        ("DELETE", "/1/apps"),
    ] {
        let (status, body) = send(method, path, master.clone()).await;
        assert_eq!(
            (status, body["code"].as_i64()),
            (405, Some(405)),
            "{method} {path}: {body}"
        );
    }
    for path in [
        "/1/nothing",
        "/1/classes",
        "/2/classes/RouteT",
        "/1/apps/x/y/z",
    ] {
        let (status, body) = send("GET", path, master.clone()).await;
        assert_eq!(
            (status, body["code"].as_i64()),
            (404, Some(404)),
            "GET {path}: {body}"
        );
    }
}
