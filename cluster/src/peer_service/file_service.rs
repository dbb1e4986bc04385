//! `FileService`: copies of stored files asked for by peers (decisions/0020) — written
//! (`PutCopy`: ready, then stored once whole and durable), read (`GetCopy`), listed, pulled
//! from another peer and dropped — on this node's `files::copies::CopyStore`. The client side
//! is `rpc::file_client`.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use crate::error::{Error, Result};
use crate::files::copies::CopyStore;
use crate::files::wire::{CopyRequest, GetHeader, PutAck, PutHeader, PutTrailer};
use crate::rpc::convert::{decode, reply};
use crate::rpc::pb::file_service_server::FileService;
use crate::rpc::pb::{CopyChunk, CopyMessage, Reply};
use crate::services::files::Files;

pub struct FileServiceImpl {
    pub(super) files: Files,
    pub(super) auth: super::authorize::PeerAuth,
}

type ReplyStream = Pin<Box<dyn Stream<Item = std::result::Result<Reply, Status>> + Send>>;
type ChunkStream = Pin<Box<dyn Stream<Item = std::result::Result<CopyChunk, Status>> + Send>>;

/// Receives one copy from `input` into `copies`, saying `Ready` on `acks` once it is open.
async fn receive(
    copies: &CopyStore,
    input: &mut Streaming<CopyChunk>,
    acks: &mpsc::Sender<std::result::Result<Reply, Status>>,
) -> Result<PutAck> {
    let first = input
        .next()
        .await
        .ok_or_else(|| Error::InvalidOperation("empty copy stream".into()))?
        .map_err(|s| Error::Unavailable(s.message().to_string()))?;
    let header: PutHeader = decode(&first.header)?;
    let mut writer = copies.writer(&header.id).await?;
    acks.send(Ok(reply(Ok(PutAck::Ready))))
        .await
        .map_err(|_| Error::Unavailable("the uploader left".into()))?;
    while let Some(chunk) = input.next().await {
        let chunk = chunk.map_err(|s| Error::Unavailable(s.message().to_string()))?;
        writer.write(&chunk.data).await?;
        if chunk.last {
            let trailer: PutTrailer = decode(&chunk.header)?;
            writer.finish(trailer.size, &trailer.md5).await?;
            return Ok(PutAck::Stored);
        }
    }
    // The uploader went away before the end: the writer, dropped, deletes what it wrote.
    Err(Error::Unavailable("the copy stream ended early".into()))
}

#[tonic::async_trait]
impl FileService for FileServiceImpl {
    type PutCopyStream = ReplyStream;
    type GetCopyStream = ChunkStream;

    async fn put_copy(
        &self,
        request: Request<Streaming<CopyChunk>>,
    ) -> std::result::Result<Response<ReplyStream>, Status> {
        self.auth.node(&request, "write file copies")?;
        let mut input = request.into_inner();
        let copies = self.files.copies().clone();
        let room = self.files.room_for_copies();
        let (tx, rx) = mpsc::channel(2);
        tokio::spawn(async move {
            let outcome = match room {
                Ok(()) => receive(&copies, &mut input, &tx).await,
                Err(e) => Err(e),
            };
            let _ = tx.send(Ok(reply(outcome))).await;
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn get_copy(
        &self,
        request: Request<CopyMessage>,
    ) -> std::result::Result<Response<ChunkStream>, Status> {
        self.auth.node(&request, "read file copies")?;
        let req: CopyRequest = decode(&request.get_ref().payload)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let CopyRequest::Get { id, offset, len } = req else {
            return Err(Status::invalid_argument("GetCopy takes a Get request"));
        };
        let copies = self.files.copies();
        let size = copies
            .get(&id)
            .map(|c| c.size)
            .ok_or_else(|| Status::not_found("no copy here"))?;
        let reader = copies
            .reader(&id, offset, len)
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .ok_or_else(|| Status::not_found("no copy here"))?;
        let header =
            serde_json::to_vec(&GetHeader { size }).map_err(|e| Status::internal(e.to_string()))?;
        let head = futures::stream::once(async move {
            Ok(CopyChunk {
                header,
                data: Vec::new(),
                last: false,
            })
        });
        let body = crate::services::files::stream_of(reader).map(|bytes| match bytes {
            Ok(b) => Ok(CopyChunk {
                header: Vec::new(),
                data: b.to_vec(),
                last: false,
            }),
            Err(e) => Err(Status::internal(e.to_string())),
        });
        Ok(Response::new(Box::pin(head.chain(body))))
    }

    async fn copies(
        &self,
        request: Request<CopyMessage>,
    ) -> std::result::Result<Response<Reply>, Status> {
        self.auth.node(&request, "manage file copies")?;
        let req: Result<CopyRequest> = decode(&request.get_ref().payload);
        let files = &self.files;
        let answer = match req {
            Err(e) => reply::<()>(Err(e)),
            Ok(CopyRequest::List { group, .. }) => reply(Ok(files.held_here(group))),
            Ok(CopyRequest::Pull {
                id,
                size,
                md5,
                sources,
            }) => reply(files.pull(&id, size, &md5, &sources).await),
            Ok(CopyRequest::Drop { ids }) => reply(files.drop_here(&ids).await),
            Ok(CopyRequest::Get { .. }) => reply::<()>(Err(Error::InvalidOperation(
                "Get goes through GetCopy".into(),
            ))),
        };
        Ok(Response::new(answer))
    }
}
