//! What nodes say to each other about copies of stored files (the JSON inside the
//! `FileService` messages of `proto/basalt.proto`): the client side is `rpc::file_client`, the
//! server side `peer_service::file_service`.

use serde::{Deserialize, Serialize};

use super::record::FileId;
use crate::ids::{GroupId, NodeId};

/// Header of a PutCopy stream's first chunk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PutHeader {
    pub id: FileId,
}

/// Header of a PutCopy stream's last chunk: what the copy must hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PutTrailer {
    pub size: u64,
    pub md5: String,
}

/// A holder's answers on a PutCopy stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PutAck {
    /// The copy is open: send the bytes.
    Ready,
    /// The copy is whole and durable.
    Stored,
}

/// Header of a GetCopy stream's first chunk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GetHeader {
    /// The whole copy's size.
    pub size: u64,
}

/// A request about copies.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CopyRequest {
    /// Stream `len` bytes of the copy of `id` from `offset` (GetCopy).
    Get { id: FileId, offset: u64, len: u64 },
    /// The copies this node holds of files whose records are in `group` by the slot map the
    /// node routes by: answers `Vec<HeldCopy>`. (`shards`, the asker's count of initial
    /// groups, is what older builds place files by.)
    List { group: GroupId, shards: u32 },
    /// Fetch a copy of `id` (which must hold `size` bytes with `md5`) from one of `sources`,
    /// unless this node holds one: answers `()`.
    Pull {
        id: FileId,
        size: u64,
        md5: String,
        sources: Vec<NodeId>,
    },
    /// Delete the copies of `ids` this node holds: answers how many it held.
    Drop { ids: Vec<FileId> },
}

/// A copy a node holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldCopy {
    pub id: FileId,
    pub size: u64,
    /// How long ago it was put in place, in ms.
    pub age_ms: i64,
}
