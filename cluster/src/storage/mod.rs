//! Storage: the only module that touches RocksDB. `keys` defines the key layout, `store` the
//! database and its WAL group commit, `log_store` the Raft log of each group. The state
//! machine (`crate::statemachine`) writes through `Store` with keys from `keys`.

pub mod keys;
pub mod log_store;
pub mod store;

pub use log_store::RocksLogStore;
pub use store::Store;

/// The write batch type of the store, for modules that stage writes (the state machine).
pub use rocksdb::WriteBatch;
