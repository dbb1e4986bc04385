//! Captchas (spec 4.10) as a table, on one node: asking for one (sizes outside the ranges are
//! 107), verifying one that does not exist, who may ask, and the picture of an unknown one. How
//! a captcha guards SMS sends is told in `sms`.

use basalt_client::Method;

use super::common::scenario::{run_rows, As, Row};
use super::common::TestCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captcha_endpoints_answer_as_their_table_says() {
    let cluster = TestCluster::start(1, &[], &[]).await;
    let ask = |name: &'static str, body: &str| {
        Row::new(name, Method::POST, "/1/requestCaptcha").body(body.to_string())
    };
    let rows = vec![
        ask("a captcha", "{}").succeeds(200),
        ask(
            "a captcha of a size",
            r#"{"width": 120, "height": 40, "size": 5}"#,
        )
        .succeeds(200),
        ask("a captcha too wide", r#"{"width": 201}"#).fails(400, 107),
        ask("a captcha without keys", "{}")
            .auth(As::Nobody)
            .unauthorized(),
        Row::new(
            "an unknown captcha verified",
            Method::POST,
            "/1/verifyCaptcha",
        )
        .body(r#"{"captcha_code": "2222", "captcha_token": "nope"}"#)
        .fails(400, 10023),
        Row::new(
            "the picture of an unknown captcha",
            Method::GET,
            "/captcha/nope",
        )
        .auth(As::Nobody)
        .answers(404),
    ];
    run_rows(&cluster, &rows).await;
}
