//! The server side of node-to-node gRPC: `raft_service` hands Raft traffic to the addressed
//! group's local replica (`raft_stream`: the pipelined replication stream of all groups); `node_service` serves proposals and reads forwarded by other nodes
//! (through the local replica only, never forwarded again) and hands admin requests to an
//! [`AdminHandler`] (the `Cluster`). Both work on the node's `Replicas`. `file_service` writes,
//! reads, lists, pulls and drops copies of stored files for peers (`files`). `accept` takes
//! connections (with peer TLS: mutual handshakes, bounded), `authorize` decides per request
//! whether the caller's certificate allows it (decisions/0031).

mod accept;
pub mod authorize;
mod file_service;
mod node_service;
mod raft_service;
mod raft_stream;

use std::sync::Arc;

use crate::replicas::Replicas;
use crate::rpc::pb::file_service_server::FileServiceServer;
use crate::rpc::pb::node_service_server::NodeServiceServer;
use crate::rpc::pb::raft_service_server::RaftServiceServer;
use crate::rpc::MAX_MESSAGE_BYTES;
use crate::services::files::Files;
use crate::tls::PeerTls;
use authorize::PeerAuth;
use file_service::FileServiceImpl;
pub use node_service::AdminHandler;
use node_service::NodeServiceImpl;
use raft_service::RaftServiceImpl;

/// Serves the peer services on `listener` until the node shuts down: over mutual TLS with
/// `tls`, else in plaintext.
pub async fn serve(
    replicas: Replicas,
    admin: Arc<dyn AdminHandler>,
    files: Files,
    listener: tokio::net::TcpListener,
    tls: Option<Arc<PeerTls>>,
) {
    let mut shutdown = replicas.shutdown_signal();
    let auth = match tls {
        Some(_) => PeerAuth::Mutual,
        None => PeerAuth::Open,
    };
    let raft = RaftServiceServer::new(RaftServiceImpl {
        replicas: replicas.clone(),
        auth,
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let node = NodeServiceServer::new(NodeServiceImpl {
        replicas,
        admin,
        auth,
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let files = FileServiceServer::new(FileServiceImpl { files, auth })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let router = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        // A peer that vanished without closing its connection (a crash, a partition) is
        // noticed, and its replication stream's sessions end.
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(5)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(5)))
        .add_service(raft)
        .add_service(node)
        .add_service(files);
    let stop = async move {
        let _ = shutdown.changed().await;
    };
    let result = match tls {
        Some(tls) => {
            router
                .serve_with_incoming_shutdown(accept::mutual_tls(listener, tls), stop)
                .await
        }
        None => {
            router
                .serve_with_incoming_shutdown(accept::plain(listener), stop)
                .await
        }
    };
    if let Err(e) = result {
        tracing::error!("peer gRPC server stopped: {e}");
    }
}
