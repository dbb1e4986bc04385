//! The real client SDKs against a `--header-brand Bmob` node, installed by `make test`'s `sdks`
//! step (scripts/install-sdks.sh) into ~/.cache/basalt/sdks or `BASALT_SDKS_DIR`: python-bmob
//! 1.8.0 uploads and deletes files through its own `upload` and `delFile`; hydrogen-js-sdk
//! 2.7.3, in Node and in encrypted mode, through `Bmob.File(..).save()` and `destroy`; both
//! call cloud functions; the JS SDK's socket.io client subscribes to tables and rows; both
//! SDKs work against nodes serving HTTPS.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::common::TestCluster;

/// Where scripts/install-sdks.sh puts the SDKs.
fn sdks_dir() -> PathBuf {
    std::env::var_os("BASALT_SDKS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/basalt/sdks")
        })
}

/// Where scripts/install-sdks.sh put an SDK: `sub` of the SDKs' directory, which holds
/// `marker` once installed.
fn installed_sdk(sub: &str, marker: &str) -> PathBuf {
    let dir = sdks_dir().join(sub);
    assert!(
        dir.join(marker).exists(),
        "no SDK in {dir:?}: run scripts/install-sdks.sh (make test does)"
    );
    dir
}

/// Runs `code` with python-bmob importable and `b` a client of node 1; its last output line
/// as JSON.
fn run_python(cluster: &TestCluster, code: &str) -> Value {
    let prelude = format!(
        "import json, sys\nfrom bmobpy.bmob import Bmob\nb = Bmob({:?}, {:?})\nb.resetDomain({:?})\n",
        cluster.keys.application_id,
        cluster.keys.rest_key,
        cluster.url(0)
    );
    let mut python = Command::new("python3");
    python
        .arg("-c")
        .arg(format!("{prelude}{code}"))
        .env("PYTHONPATH", installed_sdk("python", "bmobpy"));
    trust_https_ca(cluster, &mut python);
    last_line(python)
}

/// With the nodes on HTTPS, makes `cmd`'s TLS clients (Python's `requests` and `ssl`,
/// Node's) trust the CA of their certificate, as an app's operator would.
fn trust_https_ca(cluster: &TestCluster, cmd: &mut Command) {
    if let Some(ca) = &cluster.https_ca {
        let path = cluster.dir.path().join("https-ca.pem");
        std::fs::write(&path, ca).expect("write the CA");
        cmd.env("REQUESTS_CA_BUNDLE", &path)
            .env("SSL_CERT_FILE", &path)
            .env("NODE_EXTRA_CA_CERTS", &path);
    }
}

/// Runs `cmd` without proxies (the SDKs' HTTP clients honour them and ignore NO_PROXY); its
/// last output line as JSON.
fn last_line(mut cmd: Command) -> Value {
    let out = cmd
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{:?} failed: {stdout}\n{}",
        cmd.get_program(),
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_bmob_uploads_and_deletes_files() {
    let cluster = TestCluster::start(1, &[], &["--header-brand", "Bmob"]).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("photo.png");
    let bytes: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, &bytes).unwrap();

    let cluster_ref = &cluster;
    let uploaded = tokio::task::block_in_place(|| {
        run_python(
            cluster_ref,
            &format!(
                "f = b.upload({:?})\nprint(json.dumps({{'url': f.url, 'filename': f.filename}}))",
                path.to_str().unwrap()
            ),
        )
    });
    assert_eq!(uploaded["filename"], "photo.png");
    let url = uploaded["url"].as_str().unwrap().to_string();
    assert!(url.ends_with(".png"), "{url}");
    let got = reqwest::get(&url).await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().as_ref(), bytes.as_slice());

    let delete = format!("print(json.dumps({{'deleted': b.delFile({url:?})}}))");
    let deleted = tokio::task::block_in_place(|| run_python(cluster_ref, &delete));
    assert_eq!(deleted["deleted"], true);
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 404);
    // Deleting it again: the SDK sees the error (151).
    let again = tokio::task::block_in_place(|| {
        run_python(
            cluster_ref,
            &format!("{delete}\nprint(json.dumps({{'code': b.error['code']}}))"),
        )
    });
    assert_eq!(again["code"], 151);
}

/// Runs `code`, the body of an async function, in Node with `Bmob` the JS SDK signing for
/// `app` (its secret key and safe token: encrypted mode) against node 1, and `settle(p)`
/// giving up on a promise after 20 s (the SDK's file promises never settle on errors); the
/// function's result as JSON.
fn run_js(cluster: &TestCluster, app: &Value, code: &str) -> Value {
    let script = format!(
        r#"
const Bmob = require({sdk:?});
Bmob.initialize({secret}, {token});
Bmob.domain({url:?});
const settle = (p) => Promise.race([p, new Promise((_, no) =>
  setTimeout(() => no(new Error("no answer in 20 s")), 20000).unref())]);
(async () => {{ {code} }})().then(
  (r) => {{ console.log(JSON.stringify(r)); process.exit(0); }},
  (e) => {{ console.error("failed:", e); process.exit(1); }});
"#,
        sdk = installed_sdk("js/package", "index.js"),
        secret = app["secretKey"],
        token = app["safeToken"],
        url = cluster.url(0),
    );
    let mut node = Command::new("node");
    node.arg("-e").arg(script);
    trust_https_ca(cluster, &mut node);
    last_line(node)
}

/// A new app made through the console API of a `--header-brand Bmob` node 1: its JSON.
async fn bmob_app(cluster: &TestCluster, name: &str) -> Value {
    cluster
        .console_client(0)
        .with_brand("Bmob")
        .request(
            reqwest::Method::POST,
            "/1/apps",
            Some(&serde_json::json!({ "appName": name })),
            false,
        )
        .await
        .expect("create app")
        .body
}

/// The JS SDK uploads from Node with `content-type: application/json` and its signature over
/// `JSON.stringify` of the data (a Buffer's numbers, a string's escaped text): both are
/// accepted once the body streamed past, the bytes read back unchanged, and `destroy` deletes
/// one url and a list of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_sdk_uploads_and_destroys_files_in_encrypted_mode() {
    let cluster = TestCluster::start(1, &[], &["--header-brand", "Bmob"]).await;
    let app = bmob_app(&cluster, "js files").await;
    let bytes: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let text = "line one\n\"quoted\" \\ tab\t 你好\u{1}";
    let cluster_ref = &cluster;
    let uploaded = tokio::task::block_in_place(|| {
        run_js(
            cluster_ref,
            &app,
            &format!(
                r#"
const bytes = Buffer.from(Array.from({{ length: 70000 }}, (_, i) => (i * 7) % 251));
const photo = await settle(Bmob.File("photo.png", bytes).save());
const note = await settle(Bmob.File("note.txt", {text}).save());
return {{ photo: photo[0], note: note[0] }};
"#,
                text = serde_json::to_string(text).unwrap()
            ),
        )
    });
    for (which, want) in [("photo", bytes.as_slice()), ("note", text.as_bytes())] {
        let file = &uploaded[which];
        let url = file["url"].as_str().unwrap_or_else(|| panic!("{uploaded}"));
        let got = reqwest::get(url).await.unwrap();
        assert_eq!(got.status(), 200, "{which}");
        assert_eq!(got.bytes().await.unwrap().as_ref(), want, "{which}");
    }
    assert_eq!(uploaded["photo"]["filename"], "photo.png");
    let (photo, note) = (&uploaded["photo"]["url"], &uploaded["note"]["url"]);
    let destroyed = tokio::task::block_in_place(|| {
        run_js(
            cluster_ref,
            &app,
            &format!(
                r#"
const f = Bmob.File();
const one = await settle(f.destroy({photo}));
const many = await settle(f.destroy([{note}]));
return {{ one, many }};
"#
            ),
        )
    });
    assert_eq!(destroyed["one"]["msg"], "ok", "{destroyed}");
    assert_eq!(destroyed["many"]["msg"], "ok", "{destroyed}");
    for url in [photo, note] {
        let status = reqwest::get(url.as_str().unwrap()).await.unwrap().status();
        assert_eq!(status, 404, "{url}");
    }
}

/// Both SDKs call cloud functions unchanged: python-bmob's `functions(name, body)` (the
/// answer's `result`, or `None` with `b.error` set) and the JS SDK's `Bmob.functions(name,
/// params)` in encrypted mode (`result`, parsed when it is JSON text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sdks_call_cloud_functions() {
    let cluster = TestCluster::start(1, &[], &["--header-brand", "Bmob"]).await;
    let deploy = |m: basalt_client::Client, name: &'static str, source: &'static str| async move {
        let body = serde_json::json!({ "source": source });
        m.request(
            reqwest::Method::PUT,
            &format!("/1/functions/{name}"),
            Some(&body),
            true,
        )
        .await
        .unwrap_or_else(|e| panic!("deploy {name}: {e}"));
    };
    let functions = [
        ("add", "return request.params.a + request.params.b;"),
        ("fails", "throw new Error('nope');"),
        (
            "asText",
            "return JSON.stringify({n: request.params.n, user: request.user});",
        ),
    ];
    for (name, source) in functions {
        deploy(cluster.master_client(0).with_brand("Bmob"), name, source).await;
    }
    let cluster_ref = &cluster;
    let py = tokio::task::block_in_place(|| {
        run_python(
            cluster_ref,
            "r = {'add': b.functions('add', {'a': 1, 'b': 2})}\n\
             r['fails'] = b.functions('fails')\n\
             r['failsCode'] = b.error['code']\n\
             r['none'] = b.functions('nothing', {})\n\
             r['noneCode'] = b.error['code']\n\
             print(json.dumps(r))",
        )
    });
    assert_eq!(
        py,
        serde_json::json!({"add": 3, "fails": null, "failsCode": 310, "none": null, "noneCode": 311})
    );

    let app = bmob_app(&cluster, "js functions").await;
    for (name, source) in functions {
        deploy(cluster.app_client(0, &app).with_brand("Bmob"), name, source).await;
    }
    let js = tokio::task::block_in_place(|| {
        run_js(
            cluster_ref,
            &app,
            r#"
const add = await settle(Bmob.functions("add", { a: 2, b: 5 }));
const asText = await settle(Bmob.functions("asText", { n: 7 }));
let failed = null;
try { await settle(Bmob.functions("fails", {})); } catch (e) { failed = e; }
return { add, asText, failed };
"#,
        )
    });
    assert_eq!(js["add"], 7, "{js}");
    assert_eq!(
        js["asText"],
        serde_json::json!({"n": 7, "user": null}),
        "{js}"
    );
    assert_eq!(js["failed"]["code"], 310, "{js}");
}

/// Story — a real SDK's session.
///
/// The JS SDK's realtime client (`Bmob.Socket`, socket.io 0.9, written for mini-programs) run in
/// Node: `wx`'s request and socket functions are given over `fetch` and Node's WebSocket, with
/// the SDK's fixed host (`wss.bmobcloud.com`) pointed at node 1. It handshakes, subscribes on
/// `client_send_data` naming only the app, answers heartbeats, and its callbacks get the
/// events of writes made through the REST API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_sdk_subscribes_to_tables_and_rows_over_socket_io() {
    use std::io::BufRead;
    let cluster = TestCluster::start(1, &[], &["--header-brand", "Bmob"]).await;
    let app = bmob_app(&cluster, "js realtime").await;
    let c = cluster.app_client(0, &app).with_brand("Bmob");
    let row = c
        .create_object("Chat", &serde_json::json!({"text": "first"}))
        .await
        .unwrap()
        .object_id;
    let base = format!("http://{}", cluster.nodes[0].http);
    let script = format!(
        r#"
const Bmob = require({sdk:?});
const base = {base:?};
const local = (u) => u.replace("https://wss.bmobcloud.com", base)
  .replace("wss://wss.bmobcloud.com", base.replace("http://", "ws://"));
let sock = null;
const on = {{}};
global.wx = {{
  request({{ method, url, success, fail }}) {{
    fetch(local(url), {{ method: method || "GET" }})
      .then((r) => r.text().then((data) => success && success({{ statusCode: r.status, data }})))
      .catch((e) => fail && fail(e));
  }},
  connectSocket({{ url }}) {{
    sock = new WebSocket(local(url));
    sock.onopen = () => on.open && on.open();
    sock.onerror = (e) => on.error && on.error(e);
    sock.onmessage = (m) => on.message && on.message({{ data: m.data }});
    sock.onclose = () => on.close && on.close();
  }},
  onSocketOpen(cb) {{ on.open = cb; }},
  onSocketError(cb) {{ on.error = cb; }},
  onSocketMessage(cb) {{ on.message = cb; }},
  onSocketClose(cb) {{ on.close = cb; }},
  sendSocketMessage({{ data }}) {{ sock.send(data); }},
}};
const events = [];
const done = (r) => {{ console.log(JSON.stringify(r)); process.exit(0); }};
setTimeout(() => done({{ timedOut: true, events }}), 30000).unref();
const s = Bmob.Socket({app_id:?});
const got = (e) => {{ events.push(e); if (events.length === 4) done({{ events }}); }};
s.onUpdateTable = (tableName, data) => got({{ kind: "updateTable", tableName, id: data.objectId, text: data.text }});
s.onUpdateRow = (tableName, objectId, data) => got({{ kind: "updateRow", tableName, id: objectId, text: data.text }});
s.onDeleteRow = (tableName, objectId, data) => got({{ kind: "deleteRow", tableName, id: objectId }});
let acks = 0;
s.on("server_sub", () => {{ acks += 1; if (acks === 3) console.log("ready"); }});
s.onInitListen = () => {{
  s.updateTable("Chat");
  s.updateRow("Chat", {row:?});
  s.deleteRow("Chat", {row:?});
}};
"#,
        sdk = installed_sdk("js/package", "index.js"),
        app_id = app["applicationId"].as_str().unwrap(),
    );
    let mut child = std::process::Command::new("node")
        .arg("--experimental-websocket")
        .arg("-e")
        .arg(script)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("node");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::task::block_in_place(|| {
        lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.trim() == "ready")
    });
    assert!(ready, "the SDK never subscribed");
    let created = c
        .create_object("Chat", &serde_json::json!({"text": "hello"}))
        .await
        .unwrap()
        .object_id;
    c.update_object("Chat", &row, &serde_json::json!({"text": "edited"}))
        .await
        .unwrap();
    c.delete_object("Chat", &row).await.unwrap();
    let last = tokio::task::block_in_place(|| lines.map_while(Result::ok).last());
    let _ = child.wait();
    let out: Value = serde_json::from_str(&last.unwrap_or_default()).expect("the SDK's events");
    let mut events: Vec<String> = out["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{out}"))
        .iter()
        .map(|e| format!("{} {} {} {}", e["kind"], e["tableName"], e["id"], e["text"]))
        .collect();
    events.sort();
    let mut want = vec![
        format!(r#""updateTable" "Chat" "{created}" "hello""#),
        format!(r#""updateTable" "Chat" "{row}" "edited""#),
        format!(r#""updateRow" "Chat" "{row}" "edited""#),
        format!(r#""deleteRow" "Chat" "{row}" null"#),
    ];
    want.sort();
    assert_eq!(events, want, "{out}");
}

/// Both SDKs against a node on HTTPS (`--tls-cert`), trusting its CA as an operator's apps
/// would: uploads come back with `https://` urls that serve the bytes, and a function call
/// answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sdks_work_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let tls = crate::common::HttpsFiles::make(dir.path());
    let cluster = TestCluster::start_https(1, &["--header-brand", "Bmob"], &tls).await;
    let file = dir.path().join("photo.png");
    std::fs::write(&file, b"\x89PNG not really").unwrap();
    let cluster_ref = &cluster;
    let uploaded = tokio::task::block_in_place(|| {
        run_python(
            cluster_ref,
            &format!(
                "f = b.upload({:?})\nprint(json.dumps({{'url': f.url}}))",
                file.to_str().unwrap()
            ),
        )
    });
    let url = uploaded["url"].as_str().unwrap().to_string();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&tls.ca_pem).unwrap())
        .build()
        .unwrap();
    let got = https.get(&url).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().as_ref(), b"\x89PNG not really");

    let app = bmob_app(&cluster, "js over https").await;
    let saved = tokio::task::block_in_place(|| {
        run_js(
            cluster_ref,
            &app,
            r#"const note = await settle(Bmob.File("note.txt", "over tls").save()); return note[0];"#,
        )
    });
    let url = saved["url"].as_str().unwrap_or_else(|| panic!("{saved}"));
    assert!(url.starts_with("https://"), "{url}");
    let got = https.get(url).send().await.unwrap();
    assert_eq!(got.bytes().await.unwrap().as_ref(), b"over tls");
}
