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

/// Most data shards a cluster may begin with (`--shards`).
pub const MAX_SHARDS: u32 = 1024;

impl ClusterSettings {
    /// The highest group id the cluster may ever have: groups split off at run time take ids
    /// above `shards` up to this (decisions/0038). Fixed by `shards`, so every node and every
    /// build agrees on it without storing it.
    pub fn group_cap(&self) -> u32 {
        self.shards.max(1).saturating_mul(8).max(64)
    }
}
