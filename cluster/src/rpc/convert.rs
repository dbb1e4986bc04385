//! Framing of domain values into the protobuf envelopes: payloads in `crate::encoding`'s
//! versioned binary format (plain JSON from older nodes still read), and typed
//! `cluster::Error`s (JSON) in `Reply.error` so that a remote error arrives as the same variant.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::pb::{GroupMessage, Reply};
use crate::error::{Error, Result};
use crate::ids::GroupId;

pub fn group_message<T: Serialize>(group: GroupId, value: &T) -> Result<GroupMessage> {
    Ok(GroupMessage {
        group: group.get(),
        payload: crate::encoding::encode(value)?,
        more_groups: Vec::new(),
    })
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    crate::encoding::decode(bytes).map_err(|e| Error::Internal(format!("bad message: {e}")))
}

/// Encodes a Raft message (an AppendEntries or its answer) for the replication stream.
pub fn encode_raft<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    crate::encoding::encode(value)
}

/// Decodes what `encode_raft` encoded.
pub fn decode_raft<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    decode(bytes)
}

pub fn reply<T: Serialize>(result: Result<T>) -> Reply {
    let encoded = result.and_then(|v| crate::encoding::encode(&v));
    match encoded {
        Ok(payload) => Reply {
            payload,
            error: Vec::new(),
        },
        Err(e) => Reply {
            payload: Vec::new(),
            error: serde_json::to_vec(&e)
                .unwrap_or_else(|_| b"{\"Internal\":\"unencodable error\"}".to_vec()),
        },
    }
}

pub fn from_reply<T: DeserializeOwned>(r: Reply) -> Result<T> {
    if !r.error.is_empty() {
        return Err(decode::<Error>(&r.error)?);
    }
    decode(&r.payload)
}

/// A transport failure: the peer could not be asked or did not answer.
pub fn transport_error(status: &tonic::Status) -> Error {
    match status.code() {
        tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            Error::Timeout(status.message().to_string())
        }
        tonic::Code::Unavailable if status.message().contains("connect") => {
            Error::PeerUnreachable(status.message().to_string())
        }
        _ => Error::Unavailable(format!("peer: {}", status.message())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_cross_the_wire_typed() {
        let e = Error::NotLeader {
            group: crate::ids::GroupId::new(3),
            leader: Some(crate::ids::NodeId::new(2)),
            leader_addr: Some("127.0.0.1:1".into()),
        };
        let back: Result<u32> = from_reply(reply::<u32>(Err(e.clone())));
        assert_eq!(back, Err(e));
        assert_eq!(from_reply::<u32>(reply(Ok(7u32))), Ok(7));
    }
}
