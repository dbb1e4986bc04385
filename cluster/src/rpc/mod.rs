//! Node-to-node gRPC (tonic), the client side and the wire: `router` keeps one connection per
//! peer shared by all groups and sends Raft traffic, forwarded proposals and reads, and admin
//! requests, `raft_link` streams every group's appends to a peer on one pipelined stream, and
//! `file_client` sends copies of stored files over a second connection per
//! peer, `pace` spreads the snapshots it sends over time (each over mutual TLS when the node has certificates: `dial`); `convert` frames domain types into the protobuf envelopes of
//! `proto/basalt.proto`. The server side is `peer_service`.

pub mod convert;
mod dial;
pub mod file_client;
pub mod pace;
pub(crate) mod raft_link;
pub mod router;

/// Code generated from `proto/basalt.proto`.
#[allow(clippy::all, clippy::unwrap_used, clippy::expect_used, missing_docs)]
pub mod pb {
    tonic::include_proto!("basalt.v1");
}

/// Largest gRPC message either side accepts (log batches can carry large objects).
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;
