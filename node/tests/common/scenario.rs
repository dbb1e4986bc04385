//! Tests as tables: a `Row` is one request (how it authenticates, method, path, raw body) and
//! what must come back (status, code), with an optional `After` check that reads state back
//! with the master key, to prove a refused request wrote nothing. `run_rows` sends each row to
//! node 1 and names the failing row.

use reqwest::Method;
use serde_json::Value;

use super::TestCluster;

/// How a row authenticates.
#[derive(Debug, Clone)]
pub enum As {
    /// The app's id and REST key.
    App,
    /// The app's id and master key.
    Master,
    /// The app's id and REST key, and a session token.
    Session(String),
    /// The app's id and a wrong REST key.
    WrongKey,
    /// No keys at all.
    Nobody,
    /// The console account's email and password (app management).
    Console,
}

/// State read back after a row, with the master key.
#[derive(Debug, Clone)]
pub enum After {
    /// The class holds exactly this many objects.
    Count(&'static str, u64),
    /// The object's field has this value (`Value::Null`: absent).
    Field {
        class: &'static str,
        id: String,
        field: &'static str,
        value: Value,
    },
}

/// One request and what must come back.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: &'static str,
    pub auth: As,
    pub method: Method,
    pub path: String,
    /// The raw body (sent as JSON), if any.
    pub body: Option<String>,
    pub status: u16,
    /// The `code` of the error body; `None` for a success (or the bare 401 body).
    pub code: Option<i64>,
    pub after: Option<After>,
}

impl Row {
    /// A row sent with the app keys and no body.
    pub fn new(name: &'static str, method: Method, path: impl Into<String>) -> Row {
        Row {
            name,
            auth: As::App,
            method,
            path: path.into(),
            body: None,
            status: 200,
            code: None,
            after: None,
        }
    }

    pub fn auth(mut self, auth: As) -> Row {
        self.auth = auth;
        self
    }

    pub fn body(mut self, body: impl Into<String>) -> Row {
        self.body = Some(body.into());
        self
    }

    /// Expects an error: this status and wire code.
    pub fn fails(mut self, status: u16, code: i64) -> Row {
        self.status = status;
        self.code = Some(code);
        self
    }

    /// Expects the bare 401 `{"error":"unauthorized"}` of missing or wrong app keys.
    pub fn unauthorized(mut self) -> Row {
        self.status = 401;
        self.code = None;
        self
    }

    /// Expects a success with this status.
    pub fn succeeds(mut self, status: u16) -> Row {
        self.status = status;
        self.code = None;
        self
    }

    /// Expects this status and no error code to check: a page, not a JSON error.
    pub fn answers(mut self, status: u16) -> Row {
        self.status = status;
        self.code = None;
        self
    }

    pub fn after(mut self, after: After) -> Row {
        self.after = Some(after);
        self
    }
}

/// Sends every row to node 1, in order; panics naming the first row that does not answer as
/// it says, or whose `after` check does not hold.
pub async fn run_rows(cluster: &TestCluster, rows: &[Row]) {
    let http = reqwest::Client::new();
    let keys = &cluster.keys;
    let master = cluster.master_client(0);
    for row in rows {
        let mut req = http.request(
            row.method.clone(),
            format!("http://{}{}", cluster.nodes[0].http, row.path),
        );
        let app = ("X-Service-Application-Id", keys.application_id.clone());
        let rest = ("X-Service-REST-API-Key", keys.rest_key.clone());
        let headers: Vec<(&str, String)> = match &row.auth {
            As::App => vec![app, rest],
            As::Master => vec![app, ("X-Service-Master-Key", cluster.master_key())],
            As::Session(t) => vec![app, rest, ("X-Service-Session-Token", t.clone())],
            As::WrongKey => vec![app, ("X-Service-REST-API-Key", "wrong".into())],
            As::Nobody => vec![],
            As::Console => {
                let doc = cluster.credentials();
                let text = |k: &str| doc["console"][k].as_str().unwrap_or_default().to_string();
                vec![
                    ("X-Service-Email", text("email")),
                    ("X-Service-Password", text("password")),
                ]
            }
        };
        for (k, v) in headers {
            req = req.header(k, v);
        }
        if let Some(b) = &row.body {
            req = req
                .header("Content-Type", "application/json")
                .body(b.clone());
        }
        let resp = req.send().await.expect("send");
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(status, row.status, "{}: status, body {body}", row.name);
        if status == 401 && row.code.is_none() {
            assert_eq!(
                body,
                serde_json::json!({"error": "unauthorized"}),
                "{}",
                row.name
            );
        }
        if let Some(code) = row.code {
            assert_eq!(
                body["code"].as_i64(),
                Some(code),
                "{}: code, body {body}",
                row.name
            );
            assert!(
                body["error"].is_string(),
                "{}: error message, body {body}",
                row.name
            );
        }
        match &row.after {
            None => {}
            Some(After::Count(class, n)) => {
                let r = master
                    .request(
                        Method::GET,
                        &format!("/1/classes/{class}?count=1&limit=0"),
                        None,
                        true,
                    )
                    .await
                    .expect("count");
                assert_eq!(
                    r.body["count"], *n,
                    "{}: objects of {class} after",
                    row.name
                );
            }
            Some(After::Field {
                class,
                id,
                field,
                value,
            }) => {
                let r = master
                    .request(Method::GET, &format!("/1/classes/{class}/{id}"), None, true)
                    .await
                    .expect("read back");
                assert_eq!(&r.body[*field], value, "{}: {field} after", row.name);
            }
        }
    }
}
