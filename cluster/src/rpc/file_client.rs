//! The client side of `FileService` (copies of stored files, decisions/0020), on each peer's
//! bulk connection (`PeerRouter::bulk_channel`): `open_copy` starts writing a copy on a peer
//! (`CopySink`), `get_copy` streams one from a peer, `copy_request` asks the rest
//! (`files::wire::CopyRequest`). Used by `files`; the server side is
//! `peer_service::file_service`.

use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tonic::transport::Channel;

use super::convert::{decode, from_reply, transport_error};
use super::pb::file_service_client::FileServiceClient;
use super::pb::{CopyChunk, CopyMessage, Reply};
use super::router::PeerRouter;
use super::MAX_MESSAGE_BYTES;
use crate::error::{Error, Result};
use crate::files::record::FileId;
use crate::files::wire::{CopyRequest, GetHeader, PutAck, PutHeader, PutTrailer};
use crate::ids::NodeId;

/// How long a holder may take to open a copy, or to take one chunk.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

fn client(ch: Channel) -> FileServiceClient<Channel> {
    FileServiceClient::new(ch)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// A copy being written on a peer: chunks go out in order; dropped before `finish`, the peer
/// discards what it received.
pub struct CopySink {
    pub node: NodeId,
    tx: mpsc::Sender<CopyChunk>,
    acks: tonic::Streaming<Reply>,
}

async fn next_ack(acks: &mut tonic::Streaming<Reply>, timeout: Duration) -> Result<PutAck> {
    match tokio::time::timeout(timeout, acks.next()).await {
        Err(_) => Err(Error::Timeout("the holder did not answer".into())),
        Ok(None) => Err(Error::Unavailable(
            "the holder closed the copy stream".into(),
        )),
        Ok(Some(Err(status))) => Err(transport_error(&status)),
        Ok(Some(Ok(reply))) => from_reply(reply),
    }
}

impl CopySink {
    /// Sends the next bytes of the copy.
    pub async fn send(&mut self, data: Vec<u8>) -> Result<()> {
        let chunk = CopyChunk {
            header: Vec::new(),
            data,
            last: false,
        };
        match tokio::time::timeout(STEP_TIMEOUT, self.tx.send(chunk)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(Error::Unavailable("the copy stream ended".into())),
            Err(_) => Err(Error::Timeout("the holder stopped taking bytes".into())),
        }
    }

    /// Ends the copy, which must hold `size` bytes with `md5`, and waits (up to `timeout`) for
    /// the holder to say it is durable.
    pub async fn finish(mut self, size: u64, md5: &str, timeout: Duration) -> Result<()> {
        let chunk = CopyChunk {
            header: serde_json::to_vec(&PutTrailer {
                size,
                md5: md5.to_string(),
            })?,
            data: Vec::new(),
            last: true,
        };
        let stored = async {
            self.tx
                .send(chunk)
                .await
                .map_err(|_| Error::Unavailable("the copy stream ended".into()))?;
            match next_ack(&mut self.acks, timeout).await? {
                PutAck::Stored => Ok(()),
                PutAck::Ready => Err(Error::Internal("the holder answered Ready twice".into())),
            }
        };
        tokio::time::timeout(timeout, stored)
            .await
            .map_err(|_| Error::Timeout("the holder did not store its copy in time".into()))?
    }
}

impl PeerRouter {
    /// Opens a copy of `id` on `node`: answers once the peer is ready for its bytes.
    pub(crate) async fn open_copy(&self, node: NodeId, id: &FileId) -> Result<CopySink> {
        let mut client = client(self.bulk_channel(node)?);
        let (tx, rx) = mpsc::channel::<CopyChunk>(4);
        let header = CopyChunk {
            header: serde_json::to_vec(&PutHeader { id: id.clone() })?,
            data: Vec::new(),
            last: false,
        };
        tx.send(header)
            .await
            .map_err(|_| Error::Internal("copy stream closed at once".into()))?;
        let call = client.put_copy(tokio_stream::wrappers::ReceiverStream::new(rx));
        let mut acks = match tokio::time::timeout(STEP_TIMEOUT, call).await {
            Err(_) => return Err(Error::Timeout(format!("node {node} did not open a copy"))),
            Ok(Err(status)) => return Err(transport_error(&status)),
            Ok(Ok(resp)) => resp.into_inner(),
        };
        match next_ack(&mut acks, STEP_TIMEOUT).await? {
            PutAck::Ready => Ok(CopySink { node, tx, acks }),
            PutAck::Stored => Err(Error::Internal("the holder stored an empty copy".into())),
        }
    }

    /// Streams `len` bytes of `node`'s copy of `id` from `offset`; answers the whole copy's
    /// size with the stream.
    pub(crate) async fn get_copy(
        &self,
        node: NodeId,
        id: &FileId,
        offset: u64,
        len: u64,
    ) -> Result<(u64, BoxStream<'static, Result<Bytes>>)> {
        let mut client = client(self.bulk_channel(node)?);
        let req = CopyRequest::Get {
            id: id.clone(),
            offset,
            len,
        };
        let msg = CopyMessage {
            payload: serde_json::to_vec(&req)?,
        };
        let mut stream = match tokio::time::timeout(STEP_TIMEOUT, client.get_copy(msg)).await {
            Err(_) => return Err(Error::Timeout(format!("node {node} did not answer"))),
            Ok(Err(status)) => return Err(status_error(&status)),
            Ok(Ok(resp)) => resp.into_inner(),
        };
        let first = match tokio::time::timeout(STEP_TIMEOUT, stream.next()).await {
            Err(_) => return Err(Error::Timeout(format!("node {node} did not answer"))),
            Ok(None) => return Err(Error::Unavailable("empty copy stream".into())),
            Ok(Some(Err(status))) => return Err(status_error(&status)),
            Ok(Some(Ok(chunk))) => chunk,
        };
        let header: GetHeader = decode(&first.header)?;
        let head = futures::stream::iter((!first.data.is_empty()).then(|| Ok(first.data.into())));
        let rest = stream.map(|chunk| match chunk {
            Ok(c) => Ok(Bytes::from(c.data)),
            Err(status) => Err(transport_error(&status)),
        });
        Ok((header.size, head.chain(rest).boxed()))
    }

    /// Asks `node` a `CopyRequest` other than `Get`, within `timeout`.
    pub(crate) async fn copy_request<T: DeserializeOwned>(
        &self,
        node: NodeId,
        req: &CopyRequest,
        timeout: Duration,
    ) -> Result<T> {
        let mut client = client(self.bulk_channel(node)?);
        let mut msg = tonic::Request::new(CopyMessage {
            payload: serde_json::to_vec(req)?,
        });
        msg.set_timeout(timeout);
        let reply = client.copies(msg).await.map_err(|s| transport_error(&s))?;
        from_reply(reply.into_inner())
    }
}

/// A GetCopy failure: `NotFound` is the peer holding no copy.
fn status_error(status: &tonic::Status) -> Error {
    match status.code() {
        tonic::Code::NotFound => Error::ObjectNotFound,
        _ => transport_error(status),
    }
}
