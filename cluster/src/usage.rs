//! What an app stores: its objects and files, how many and their bytes (`AppUsage`). Each
//! group counts its own exactly as it applies writes (`statemachine::usage_writes`, one record
//! of namespace `usage` per app, carried by snapshots like any record); an app's usage in the
//! cluster is the sum over the data shards (`Replicas::app_usage`), which per-app storage
//! quotas are checked against (the node's `storage_quota`).

use serde::{Deserialize, Serialize};

/// What an app stores in one group, or in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppUsage {
    /// Objects (users, roles, installations and the app's own classes).
    #[serde(default)]
    pub objects: u64,
    /// Their bytes as stored (each object's encoding; indexes and the change log not counted).
    #[serde(default)]
    pub object_bytes: u64,
    /// Stored files.
    #[serde(default)]
    pub files: u64,
    /// Their bytes (each file's size, once however many copies the cluster keeps).
    #[serde(default)]
    pub file_bytes: u64,
}

impl AppUsage {
    /// Nothing stored.
    pub fn is_empty(&self) -> bool {
        *self == AppUsage::default()
    }

    /// The usage of two groups together.
    pub fn plus(self, other: AppUsage) -> AppUsage {
        AppUsage {
            objects: self.objects.saturating_add(other.objects),
            object_bytes: self.object_bytes.saturating_add(other.object_bytes),
            files: self.files.saturating_add(other.files),
            file_bytes: self.file_bytes.saturating_add(other.file_bytes),
        }
    }

    /// The usage after a change of `delta` (never below nothing).
    pub fn changed_by(self, delta: UsageDelta) -> AppUsage {
        fn add(n: u64, d: i64) -> u64 {
            if d >= 0 {
                n.saturating_add(d as u64)
            } else {
                n.saturating_sub(d.unsigned_abs())
            }
        }
        AppUsage {
            objects: add(self.objects, delta.objects),
            object_bytes: add(self.object_bytes, delta.object_bytes),
            files: add(self.files, delta.files),
            file_bytes: add(self.file_bytes, delta.file_bytes),
        }
    }
}

/// A change of what an app stores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageDelta {
    pub objects: i64,
    pub object_bytes: i64,
    pub files: i64,
    pub file_bytes: i64,
}

impl UsageDelta {
    /// An object of `old` bytes (none: it did not exist) becoming one of `new` bytes (none:
    /// deleted).
    pub fn object(old: Option<usize>, new: Option<usize>) -> UsageDelta {
        UsageDelta {
            objects: i64::from(new.is_some()) - i64::from(old.is_some()),
            object_bytes: new.unwrap_or(0) as i64 - old.unwrap_or(0) as i64,
            ..UsageDelta::default()
        }
    }

    /// A file of `size` bytes stored (`sign` 1) or deleted (`sign` -1).
    pub fn file(size: u64, sign: i64) -> UsageDelta {
        UsageDelta {
            files: sign,
            file_bytes: (size.min(i64::MAX as u64) as i64).saturating_mul(sign),
            ..UsageDelta::default()
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == UsageDelta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_add_and_never_go_below_nothing() {
        let u = AppUsage::default()
            .changed_by(UsageDelta::object(None, Some(100)))
            .changed_by(UsageDelta::object(Some(100), Some(40)))
            .changed_by(UsageDelta::file(1_000, 1));
        assert_eq!(
            u,
            AppUsage {
                objects: 1,
                object_bytes: 40,
                files: 1,
                file_bytes: 1_000
            }
        );
        let gone = u
            .changed_by(UsageDelta::object(Some(500), None))
            .changed_by(UsageDelta::file(1_000, -1));
        assert!(gone.is_empty());
        assert_eq!(u.plus(u).object_bytes, 80);
    }
}
