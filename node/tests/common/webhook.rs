//! A minimal SMS webhook receiver on loopback for tests: keeps every JSON body POSTed to it
//! and answers 200, or 500 for numbers ending in `000000` (a gateway refusing them).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::Value;

type Received = Arc<Mutex<Vec<Value>>>;

#[derive(Clone)]
pub struct SmsReceiver {
    pub port: u16,
    received: Received,
}

async fn receive(State(received): State<Received>, Json(body): Json<Value>) -> StatusCode {
    let refused = body["mobilePhoneNumber"]
        .as_str()
        .is_some_and(|n| n.ends_with("000000"));
    if let Ok(mut r) = received.lock() {
        r.push(body);
    }
    if refused {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

impl SmsReceiver {
    pub async fn start() -> SmsReceiver {
        let received: Received = Arc::default();
        let app = Router::new()
            .route("/sms", post(receive))
            .with_state(Arc::clone(&received));
        let port = super::serve_on_loopback(app).await;
        SmsReceiver { port, received }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/sms", self.port)
    }

    pub fn messages(&self) -> Vec<Value> {
        self.received.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// The message with this smsId, waiting up to 10 s for it.
    pub async fn message(&self, sms_id: i64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(m) = self
                .messages()
                .into_iter()
                .find(|m| m["smsId"].as_i64() == Some(sms_id))
            {
                return m;
            }
            assert!(Instant::now() < deadline, "no SMS {sms_id} arrived");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The six-digit code in the message with this smsId.
    pub async fn code(&self, sms_id: i64) -> String {
        let m = self.message(sms_id).await;
        let content = m["content"].as_str().unwrap_or_default();
        let digits: Vec<char> = content.chars().collect();
        digits
            .windows(6)
            .map(|w| w.iter().collect::<String>())
            .find(|w| w.bytes().all(|b| b.is_ascii_digit()))
            .unwrap_or_else(|| panic!("no code in {content:?}"))
    }
}
