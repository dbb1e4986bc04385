//! The API over HTTPS (`--tls-cert`, `--tls-key`; decisions/0031): REST, files and realtime
//! (wss) work with a client that trusts the certificate's CA; ALPN offers HTTP/2; plaintext is
//! refused; links follow the `https://` public url; SIGHUP swaps the certificate for new
//! connections and keeps the old one when the new files are bad.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::common::{HttpsFiles, TestCluster};

/// A TLS connection to `addr` trusting `ca`, offering `alpn`; the negotiated protocol and the
/// server's leaf certificate.
async fn tls_connect(
    addr: &str,
    ca: &[u8],
    alpn: &[&[u8]],
) -> (
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    Option<Vec<u8>>,
    Vec<u8>,
) {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca) {
        roots.add(cert.expect("pem")).expect("root");
    }
    let mut config =
        rustls::ClientConfig::builder_with_provider(basalt_cluster::tls::peer::provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("handshake");
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let leaf = session.peer_certificates().expect("certs")[0].to_vec();
    (tls, alpn, leaf)
}

/// Story — real TLS end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_files_and_realtime_are_served_over_https() {
    let dir = tempfile::tempdir().expect("dir");
    let tls = HttpsFiles::make(&dir.path().join("tls"));
    let cluster = TestCluster::start_https(1, &[], &tls).await;
    let addr = cluster.nodes[0].http.clone();
    let c = cluster.client(0);
    let o = c
        .create_object("Secure", &json!({"n": 1}))
        .await
        .expect("create over https");
    let got = c.get_object("Secure", &o.object_id).await.expect("get");
    assert_eq!(got.expect("the object")["n"], 1);
    let location = o.location.expect("location");
    let url = cluster.credentials()["url"]
        .as_str()
        .expect("url")
        .to_string();
    assert_eq!(
        url,
        format!("https://{addr}"),
        "credentials.json names the https url"
    );
    assert!(
        location.starts_with(&format!("https://{addr}/")),
        "{location}"
    );

    // Plaintext on the same port gets no answer.
    let plain = basalt_client::Client::new(&format!("http://{addr}"), Some(cluster.keys.clone()))
        .expect("client");
    assert!(plain.get_object("Secure", &o.object_id).await.is_err());

    // ALPN: HTTP/2 when offered, HTTP/1.1 otherwise; a request over HTTP/2 is served.
    let (_, h1, _) = tls_connect(&addr, &tls.ca_pem, &[b"http/1.1"]).await;
    assert_eq!(h1.as_deref(), Some(&b"http/1.1"[..]));
    let (stream, h2, _) = tls_connect(&addr, &tls.ca_pem, &[b"h2", b"http/1.1"]).await;
    assert_eq!(h2.as_deref(), Some(&b"h2"[..]));
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let req = http::Request::get(format!("https://{addr}/health"))
        .body(String::new())
        .expect("request");
    let resp = sender.send_request(req).await.expect("h2 request");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), http::Version::HTTP_2);

    // Files: their urls are https, and they are served.
    let up = c
        .upload_file("hello.txt", "text/plain", b"over tls".to_vec())
        .await
        .expect("upload");
    let url = up.body["url"].as_str().expect("url").to_string();
    assert!(url.starts_with(&format!("https://{addr}/")), "{url}");

    // Realtime over wss: an event of a write arrives.
    let (stream, _, _) = tls_connect(&addr, &tls.ca_pem, &[b"http/1.1"]).await;
    let ws_url = format!(
        "wss://{addr}/1/realtime?applicationId={}&restKey={}",
        cluster.keys.application_id, cluster.keys.rest_key
    );
    let (mut ws, _) = tokio_tungstenite::client_async(ws_url, stream)
        .await
        .expect("wss handshake");
    let sub = json!({"name": "client_sub", "args": [{"appKey": cluster.keys.application_id, "tableName": "Secure", "action": "updateTable"}]});
    ws.send(Message::Text(sub.to_string().into()))
        .await
        .expect("subscribe");
    let mut acked = false;
    let mut created = None;
    let event = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(Ok(m)) = ws.next().await {
            let Message::Text(t) = m else { continue };
            let v: Value = serde_json::from_str(&t).expect("json");
            match v["name"].as_str() {
                Some("server_sub") if !acked => {
                    acked = true;
                    created = Some(
                        c.create_object("Secure", &json!({"n": 2}))
                            .await
                            .expect("create"),
                    );
                }
                Some("server_pub") => return v,
                _ => {}
            }
        }
        panic!("the wss connection ended");
    })
    .await
    .expect("an event over wss");
    assert_eq!(
        event["args"][0]["data"]["objectId"].as_str(),
        created.map(|o| o.object_id).as_deref()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_swaps_the_https_certificate_and_keeps_it_when_the_new_one_is_bad() {
    let dir = tempfile::tempdir().expect("dir");
    let tls = HttpsFiles::make(&dir.path().join("tls"));
    let cluster = TestCluster::start_https(1, &[], &tls).await;
    let addr = cluster.nodes[0].http.clone();
    let (_, _, first) = tls_connect(&addr, &tls.ca_pem, &[b"http/1.1"]).await;

    // A key that is not the certificate's: refused, the certificate in use kept.
    let other = HttpsFiles::make(&dir.path().join("other"));
    let good_key = std::fs::read(&tls.key).expect("key");
    std::fs::copy(&other.key, &tls.key).expect("swap the key alone");
    cluster.hangup(0);
    TestCluster::eventually(Duration::from_secs(10), "the bad pair is refused", || {
        cluster.log_text(0).contains("HTTPS certificate kept")
    })
    .await;
    let (_, _, still) = tls_connect(&addr, &tls.ca_pem, &[b"http/1.1"]).await;
    assert_eq!(still, first);

    // A new certificate of the same CA: new connections get it, requests go on.
    std::fs::write(&tls.key, good_key).expect("restore");
    let ca = basalt_cluster::tls::issue::Authority::create(
        basalt_cluster::tls::issue::Validity::days(1),
    )
    .expect("ca");
    let renewed = ca
        .issue_node(
            basalt_cluster::ids::NodeId::new(1),
            &["127.0.0.1".into()],
            basalt_cluster::tls::issue::Validity::days(1),
        )
        .expect("renewed");
    renewed
        .write(dir.path().join("tls").as_path(), "api.pem", "api.key")
        .expect("write");
    cluster.hangup(0);
    TestCluster::eventually(
        Duration::from_secs(10),
        "the new certificate is loaded",
        || cluster.log_text(0).contains("HTTPS certificate reloaded"),
    )
    .await;
    let (_, _, now) = tls_connect(&addr, ca.cert_pem().as_bytes(), &[b"http/1.1"]).await;
    assert_ne!(now, first);
    assert_eq!(now, renewed.cert_der());
    let c = basalt_client::Client::new(&format!("https://{addr}"), Some(cluster.keys.clone()))
        .expect("client")
        .with_ca(ca.cert_pem().as_bytes())
        .expect("ca");
    assert!(c
        .create_object("Secure", &json!({"after": "reload"}))
        .await
        .is_ok());
}
