//! Identifiers of the cluster and the routing of objects to shards.
//!
//! Group 0 is the metadata group; groups `1..=shards` are data shards. An object lives in the
//! shard chosen by a stable hash (FNV-1a, 64 bit) of `(app, class, objectId)`: the function must
//! never change, since it decides where existing objects are stored.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A node of the cluster (openraft's node id). Serialized as the bare number, as it always was
/// in the Raft log, votes and membership on disk.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct NodeId(u64);

impl NodeId {
    pub const fn new(id: u64) -> NodeId {
        NodeId(id)
    }

    /// The number, for the wire (gRPC) and for display.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A Raft group: 0 is metadata, `1..=shards` are data shards. Serialized as the bare number.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct GroupId(u32);

impl GroupId {
    pub const fn new(id: u32) -> GroupId {
        GroupId(id)
    }

    /// The number, for keys on disk, the wire (gRPC) and display.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The data shards of a cluster of `shards` shards: groups `1..=shards`.
    pub fn data_shards(shards: u32) -> impl Iterator<Item = GroupId> {
        (1..=shards.max(1)).map(GroupId)
    }

    /// The groups of a cluster of `shards` shards: the metadata group, then the data shards.
    pub fn all(shards: u32) -> impl Iterator<Item = GroupId> {
        std::iter::once(META_GROUP).chain(GroupId::data_shards(shards))
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The metadata group: cluster members, placement, accounts, apps, schemas.
pub const META_GROUP: GroupId = GroupId(0);

/// FNV-1a over the bytes of `parts`, each followed by a 0 byte.
fn fnv1a64<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for part in parts {
        for &b in part.iter().chain(std::iter::once(&0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

/// The hash slot (of `slots`) of `(app, class, object_id)` — or of a record's `(scope, word,
/// routing key)` — (`slots::SlotMap`): `shard_for` is slot mod `shards` when `slots` is a
/// multiple of it.
pub fn slot_for(app: &str, class: &str, object_id: &str, slots: u32) -> u32 {
    let h = fnv1a64([app.as_bytes(), class.as_bytes(), object_id.as_bytes()]);
    (h % u64::from(slots.max(1))) as u32
}

/// The data shard (a group in `1..=shards`) that owns `(app, class, object_id)`.
pub fn shard_for(app: &str, class: &str, object_id: &str, shards: u32) -> GroupId {
    let shards = shards.max(1);
    let h = fnv1a64([app.as_bytes(), class.as_bytes(), object_id.as_bytes()]);
    GroupId(1 + (h % u64::from(shards)) as u32)
}

/// Classes whose objects live in the metadata group rather than in data shards, so that every
/// node holds them and can read them locally: roles, whose graph every logged-in request needs.
pub const META_CLASSES: [&str; 1] = ["_Role"];

/// Whether objects of `class` live in the metadata group.
pub fn is_meta_class(class: &str) -> bool {
    META_CLASSES.contains(&class)
}

/// The group that stores an object: the metadata group for [`META_CLASSES`], else its data
/// shard.
pub fn object_group(app: &str, class: &str, object_id: &str, shards: u32) -> GroupId {
    if is_meta_class(class) {
        META_GROUP
    } else {
        shard_for(app, class, object_id, shards)
    }
}

/// The groups that store objects of `class`: what a scan, count or aggregation asks.
pub fn class_groups(class: &str, shards: u32) -> Vec<GroupId> {
    if is_meta_class(class) {
        vec![META_GROUP]
    } else {
        GroupId::data_shards(shards).collect()
    }
}

/// The data shard that holds the record of the stored file `file_id` (decisions/0020). Fixed
/// forever, like [`shard_for`]: it decides where existing file records are.
pub fn file_group(file_id: &str, shards: u32) -> GroupId {
    shard_for("", "_File", file_id, shards)
}

/// Rendezvous score of `node` for the copies of the stored file `file_id`: a file's copies go
/// to the nodes ranked first by it (decisions/0020).
pub fn copy_score(file_id: &str, node: NodeId) -> u64 {
    avalanche(fnv1a64([file_id.as_bytes(), &node.get().to_be_bytes()[..]]))
}

/// A final mixing step that spreads nearby hashes apart.
fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

/// Rendezvous (highest random weight) score of `node` for `group`: placement ranks nodes by it.
pub fn placement_score(group: GroupId, node: NodeId) -> u64 {
    let g = group.get().to_be_bytes();
    let n = node.get().to_be_bytes();
    avalanche(fnv1a64([&g[..], &n[..]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_routing_is_stable_and_in_range() {
        // Fixed expectations: changing the hash would move stored objects.
        assert_eq!(fnv1a64([&b"a"[..]]), 0x089b_e207_b544_f1e4);
        for i in 0..1000 {
            let s = shard_for("app", "Game", &format!("id{i}"), 16);
            assert!((1..=16).contains(&s.get()));
        }
        assert_eq!(
            shard_for("app", "Game", "x", 16),
            shard_for("app", "Game", "x", 16)
        );
    }

    #[test]
    fn shards_are_used_evenly() {
        let mut counts = [0u32; 16];
        for i in 0..16_000 {
            counts[(shard_for("app", "Game", &format!("{i:010}"), 16).get() - 1) as usize] += 1;
        }
        for c in counts {
            assert!((700..1300).contains(&c), "uneven shard use: {counts:?}");
        }
    }
}
