//! What a running function may ask of the node (`engine::Host`), as the prelude's `__host`
//! calls: `request` (the data API: any `/1/` or `/2/` path of the REST API, run through the
//! node's own router as the function's caller — their session and keys, or the master key when
//! the function asks — so every rule a client meets holds for its functions too), `sleep`
//! (timers), `fetch` (http(s) to the hosts the app allows, no redirects) and `console` lines,
//! which go to the node's log with the request id. The router is reached through `Dispatch`,
//! which `api::functions` builds (this module knows nothing of the API's types).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use futures::future::BoxFuture;
use http::{header, Method, Request, Response};
use serde_json::{json, Map, Value};

use super::engine::{Host, HostFuture, LogLevel, Thrown};
use super::settings::FunctionSettings;

/// Runs a request through the node's router as the function's caller (`false`) or with the
/// app's master key (`true`).
pub type Dispatch =
    Arc<dyn Fn(Request<Body>, bool) -> BoxFuture<'static, Response<Body>> + Send + Sync>;

/// The largest answer a data call or `fetch` hands to a function.
const MAX_ANSWER_BYTES: usize = 32 << 20;
/// The longest a `fetch` may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest one timer may wait (the invocation's own limit ends it sooner).
const MAX_SLEEP: Duration = Duration::from_secs(120);

/// The node as one invocation's host.
pub struct NodeHost {
    pub dispatch: Dispatch,
    pub app: String,
    pub function: String,
    /// The id of the request the invocation serves (its log lines carry it).
    pub request_id: Option<String>,
    pub settings: FunctionSettings,
    pub http: reqwest::Client,
}

fn refused(code: i64, message: impl Into<String>) -> Thrown {
    Thrown {
        code: Some(code),
        message: message.into(),
        own: false,
    }
}

impl Host for NodeHost {
    fn call(&self, op: &str, args: Value) -> HostFuture {
        match op {
            "request" => {
                let (dispatch, id) = (self.dispatch.clone(), self.request_id.clone());
                Box::pin(async move {
                    let work = data_request(dispatch, args);
                    match id {
                        Some(id) => basalt_cluster::request_id::scope(id, work).await,
                        None => work.await,
                    }
                })
            }
            "sleep" => {
                let ms = args["ms"].as_f64().unwrap_or(0.0).max(0.0);
                let wait = Duration::from_millis(ms as u64).min(MAX_SLEEP);
                Box::pin(async move {
                    tokio::time::sleep(wait).await;
                    Ok(Value::Null)
                })
            }
            "fetch" => {
                let (settings, http) = (self.settings.clone(), self.http.clone());
                Box::pin(async move { fetch(&settings, &http, args).await })
            }
            other => {
                let e = refused(107, format!("no host call {other:?}"));
                Box::pin(async move { Err(e) })
            }
        }
    }

    fn log(&self, level: LogLevel, line: &str) {
        let id = self.request_id.as_deref().unwrap_or("-");
        let (app, function) = (&self.app, &self.function);
        match level {
            LogLevel::Log => {
                tracing::info!(target: "basalt::functions", request_id = id, app, function, "{line}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: "basalt::functions", request_id = id, app, function, "{line}")
            }
            LogLevel::Error => {
                tracing::error!(target: "basalt::functions", request_id = id, app, function, "{line}")
            }
        }
    }
}

/// `{method, path, body?, master?}` through the router; the answer's JSON, or its code and
/// message as the error the function sees.
async fn data_request(dispatch: Dispatch, args: Value) -> Result<Value, Thrown> {
    let method = args["method"]
        .as_str()
        .and_then(|m| Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok())
        .filter(|m| [Method::GET, Method::POST, Method::PUT, Method::DELETE].contains(m))
        .ok_or_else(|| refused(107, "a data call's method is GET, POST, PUT or DELETE"))?;
    let path = args["path"]
        .as_str()
        .filter(|p| {
            (p.starts_with("/1/") || p.starts_with("/2/"))
                && !p.contains('#')
                && p.parse::<http::Uri>().is_ok()
        })
        .ok_or_else(|| refused(107, "a data call's path starts with /1/ or /2/"))?;
    let body = match &args["body"] {
        Value::Null => String::new(),
        b => b.to_string(),
    };
    let master = args["master"].as_bool().unwrap_or(false);
    // The path's aliases and trailing slash as a client's request gets them, the query kept.
    let uri = match path.split_once('?') {
        Some((p, q)) => format!("{}?{q}", crate::paths::routed_path(p)),
        None => crate::paths::routed_path(path),
    };
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .map_err(|e| refused(107, format!("invalid data call: {e}")))?;
    let resp = dispatch(req, master).await;
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), MAX_ANSWER_BYTES)
        .await
        .map_err(|e| refused(500, format!("reading the answer: {e}")))?;
    let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    match status.is_success() {
        true => Ok(answer),
        false => Err(Thrown {
            code: Some(
                answer["code"]
                    .as_i64()
                    .unwrap_or(i64::from(status.as_u16())),
            ),
            own: false,
            message: answer["error"]
                .as_str()
                .unwrap_or("the request failed")
                .to_string(),
        }),
    }
}

/// `{url, method?, headers?, body?}` to an allowed host; `{status, headers, body}` (the body
/// as text).
async fn fetch(
    settings: &FunctionSettings,
    http: &reqwest::Client,
    args: Value,
) -> Result<Value, Thrown> {
    let url = args["url"]
        .as_str()
        .and_then(|u| url::Url::parse(u).ok())
        .ok_or_else(|| refused(107, "fetch needs an absolute http(s) url"))?;
    if !settings.may_fetch(&url) {
        return Err(refused(
            403,
            format!(
                "fetch: {} is not in the app's functions.fetchAllow",
                url.host_str().unwrap_or("")
            ),
        ));
    }
    let method = args["method"]
        .as_str()
        .map(|m| Method::from_bytes(m.to_ascii_uppercase().as_bytes()))
        .transpose()
        .map_err(|_| refused(107, "fetch: invalid method"))?
        .unwrap_or(Method::GET);
    let mut req = http.request(method, url).timeout(FETCH_TIMEOUT);
    if let Some(headers) = args["headers"].as_object() {
        for (k, v) in headers {
            if let Some(v) = v.as_str() {
                req = req.header(k.as_str(), v);
            }
        }
    }
    if let Some(body) = args["body"].as_str() {
        req = req.body(body.to_string());
    }
    let resp = req
        .send()
        .await
        .map_err(|e| refused(502, format!("fetch failed: {e}")))?;
    let status = resp.status().as_u16();
    let mut headers = Map::new();
    for (k, v) in resp.headers() {
        if let Ok(v) = v.to_str() {
            headers.insert(k.as_str().to_string(), json!(v));
        }
    }
    let bytes = crate::outbound::read_capped(resp, MAX_ANSWER_BYTES)
        .await
        .map_err(|e| refused(502, format!("fetch: {e}")))?;
    Ok(json!({
        "status": status,
        "headers": headers,
        "body": String::from_utf8_lossy(&bytes),
    }))
}
