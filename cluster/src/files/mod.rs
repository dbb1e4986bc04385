//! Stored files (decisions/0020), the leaves the files service (`services::files`) builds on:
//! a file is a record in a data shard (`ids::file_group`, namespace `file`: `record::FileRecord`)
//! and whole copies on the R active nodes ranked first by `ids::copy_score` — or, with
//! `--files-backend s3://...`, one object in a bucket (`bucket`). `copies` keeps this node's
//! copies on disk; `wire` holds the messages of the copy RPCs.

pub mod bucket;
pub mod copies;
pub mod record;
pub mod wire;
