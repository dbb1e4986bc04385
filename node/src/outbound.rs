//! Answers of outside services — a function's `fetch`, push providers, identity providers —
//! read within a size cap, piece by piece: an answer past its cap is refused as the cap is
//! crossed, never held whole first (a server answering gigabytes, chunked, takes no more than
//! the cap of the node's memory). Used by `functions::host`, `push::provider` and
//! `users::third_party`.

use bytes::{Bytes, BytesMut};

/// Most bytes of a push provider's error answer read (its reason); more is not read.
pub const ERROR_ANSWER_BYTES: usize = 64 << 10;

/// Why an answer was not read.
#[derive(Debug, thiserror::Error)]
pub enum CappedError {
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    #[error("reading the answer: {0}")]
    Read(String),
}

/// The body of `resp`, if it is at most `max` bytes.
pub async fn read_capped(mut resp: reqwest::Response, max: usize) -> Result<Bytes, CappedError> {
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(CappedError::TooLarge(max));
    }
    let mut out = BytesMut::new();
    while let Some(piece) = resp
        .chunk()
        .await
        .map_err(|e| CappedError::Read(e.to_string()))?
    {
        if out.len().saturating_add(piece.len()) > max {
            return Err(CappedError::TooLarge(max));
        }
        out.extend_from_slice(&piece);
    }
    Ok(out.freeze())
}
