//! `BqlError`: a fault in a statement, at a byte offset (the lexer's and the parser's).

/// A fault in a statement, at a byte offset.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{msg} at position {pos}")]
pub struct BqlError {
    pub pos: usize,
    pub msg: String,
}

impl BqlError {
    pub fn new(pos: usize, msg: impl Into<String>) -> Self {
        BqlError {
            pos,
            msg: msg.into(),
        }
    }
}
