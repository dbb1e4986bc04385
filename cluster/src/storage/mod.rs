//! Storage: the only module that touches RocksDB. `keys` defines the key layout, `store` the
//! database and its WAL group commit, `records` the stored form of records and the one way to
//! read them. The Raft log (`crate::raft::log_store`) and the state machine
//! (`crate::statemachine`) write through `Store` with keys from `keys`.

pub mod keys;
pub mod records;
pub mod store;

pub use store::{Store, StoreTuning};

/// The write batch type of the store, for modules that stage writes (the state machine).
pub use rocksdb::WriteBatch;
