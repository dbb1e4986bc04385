//! The server side of node-to-node gRPC: `raft_service` hands Raft traffic to the addressed
//! group's local replica (`raft_stream`: the pipelined replication stream of all groups); `node_service` serves proposals and reads forwarded by other nodes
//! (through the local replica only, never forwarded again) and hands admin requests to an
//! [`AdminHandler`] (the `Cluster`). Both work on the node's `Replicas`. `file_service` writes,
//! reads, lists, pulls and drops copies of stored files for peers (`files`).

mod file_service;
mod node_service;
mod raft_service;
mod raft_stream;

use std::sync::Arc;

use futures::StreamExt;

use crate::files::Files;
use crate::replicas::Replicas;
use crate::rpc::pb::file_service_server::FileServiceServer;
use crate::rpc::pb::node_service_server::NodeServiceServer;
use crate::rpc::pb::raft_service_server::RaftServiceServer;
use crate::rpc::MAX_MESSAGE_BYTES;
use file_service::FileServiceImpl;
pub use node_service::AdminHandler;
use node_service::NodeServiceImpl;
use raft_service::RaftServiceImpl;

/// Serves the peer services on `listener` until the node shuts down.
pub async fn serve(
    replicas: Replicas,
    admin: Arc<dyn AdminHandler>,
    files: Files,
    listener: tokio::net::TcpListener,
) {
    let mut shutdown = replicas.shutdown_signal();
    let raft = RaftServiceServer::new(RaftServiceImpl {
        replicas: replicas.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let node = NodeServiceServer::new(NodeServiceImpl { replicas, admin })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let files = FileServiceServer::new(FileServiceImpl { files })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // Accepted sockets need TCP_NODELAY themselves (the builder's setting only applies to
    // listeners it binds): without it, small Raft messages wait for delayed ACKs (~40 ms).
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        conn.inspect(|stream| {
            let _ = stream.set_nodelay(true);
        })
    });
    let result = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        // A peer that vanished without closing its connection (a crash, a partition) is
        // noticed, and its replication stream's sessions end.
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(5)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(5)))
        .add_service(raft)
        .add_service(node)
        .add_service(files)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = shutdown.changed().await;
        })
        .await;
    if let Err(e) = result {
        tracing::error!("peer gRPC server stopped: {e}");
    }
}
