//! Storage: the only module that touches RocksDB. `keys` defines the key layout, `store` the
//! database and its WAL group commit (`tuning`: its memory and settings), `records` the stored
//! form of records and the one way to read them. The Raft log (`crate::raft::log_store`) and the state machine
//! (`crate::statemachine`) write through `Store` with keys from `keys`.

pub mod keys;
pub mod records;
pub mod store;
pub mod tuning;

pub use store::Store;
pub use tuning::StoreTuning;

/// The write batch type of the store, for modules that stage writes (the Raft log, the state
/// machine).
pub use rocksdb::WriteBatch;

impl From<rocksdb::Error> for crate::error::Error {
    fn from(e: rocksdb::Error) -> Self {
        crate::error::Error::Storage(e.to_string())
    }
}
