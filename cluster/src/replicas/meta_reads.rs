//! The metadata group's records this node read lately from its own replica (an app by id, a
//! class's triggers, the member list), kept while the replica has applied nothing newer
//! (`kept_reads::KeptReads`, which holds the rule). Records are kept with their expiry and
//! checked against the clock on every read.
//!
//! Neighbours: `Replicas::local_meta_record(s…)` (the only users), `kept_reads`,
//! `storage::records`.

use std::sync::Arc;

use crate::kept_reads::KeptReads;
use crate::namespace::Namespace;
use crate::storage::records::StoredRecord;

/// Records kept at most, over all reads (more clears what is kept).
const MAX_RECORDS: usize = 20_000;

/// What a read returned: its records (key within the namespace, record), in key order.
pub(super) type Records = Arc<Vec<(String, StoredRecord)>>;

/// A read: one record (`One`) or those whose keys start with a prefix (`Prefix`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum MetaRead {
    One(Namespace, String),
    Prefix(Namespace, String),
}

/// The metadata reads kept, counted in `basalt_meta_reads_total{kept}`.
pub(super) type MetaReads = KeptReads<MetaRead, Records>;

pub(super) fn meta_reads() -> MetaReads {
    KeptReads::new("basalt_meta_reads_total", MAX_RECORDS)
}
