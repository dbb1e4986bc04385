//! Node-to-node gRPC (tonic): `raft_service` carries Raft traffic of every group between
//! replicas; `node_service` carries forwarded proposals and reads and cluster administration;
//! `router` is the client side, one connection per peer shared by all groups; `convert`
//! frames domain types into the protobuf envelopes of `proto/basalt.proto`.

pub mod convert;
pub mod node_service;
pub mod raft_service;
pub mod router;

/// Code generated from `proto/basalt.proto`.
#[allow(clippy::all, clippy::unwrap_used, clippy::expect_used, missing_docs)]
pub mod pb {
    tonic::include_proto!("basalt.v1");
}

/// Largest gRPC message either side accepts (log batches can carry large objects).
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;
