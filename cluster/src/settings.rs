//! The cluster's settings, fixed when it is initialised: kept in each node's identity and the
//! metadata group (`admin` answers them to joining nodes), and in a backup's manifest.

use serde::{Deserialize, Serialize};

/// Fixed when the cluster is initialised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSettings {
    /// Number of data shards (groups `1..=shards`).
    pub shards: u32,
    /// Replicas per group (capped by the number of active nodes).
    pub replicas: u32,
    /// Log indexes of object changes each group keeps for realtime subscribers (`changes`).
    #[serde(default = "crate::changes::default_kept")]
    pub changes_kept: u64,
}
