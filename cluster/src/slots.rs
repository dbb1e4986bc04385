//! Hash slots (decisions/0038): every object, routed record and stored file's record hashes to
//! one of `shards · 256` slots, and the slot map says which data group holds each slot. Slot
//! `s` begins in group `1 + s mod shards`, exactly where `ids::shard_for` puts the same key, so
//! a cluster's layout is unchanged until a group is split. Neighbours: `ids` (the hash, group
//! ids), `namespace` (how a record's slot is named); `replicas` keeps the map the node routes
//! by.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ids::{is_meta_class, slot_for, GroupId, NodeId, META_GROUP};
use crate::namespace::{Namespace, Placement};

/// Slots per data group a cluster begins with.
pub const SLOTS_PER_SHARD: u32 = 256;

/// Key of the slot map's record in the metadata group (namespace `Cluster`): absent until a
/// group is first split; each node routes by the newest epoch its replica holds.
pub const SLOTS_KEY: &str = "slots";

/// Slots of a group that belong to a child from the `FreezeSlots` entry on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Frozen {
    pub child: GroupId,
    pub slots: BTreeSet<u32>,
    /// The cluster's number of slots (`SlotMap::slots`): what an object's slot is taken of.
    pub total: u32,
    /// The map's epoch once the slots are the child's.
    pub epoch: u64,
    /// `DropSlots`' progress: the last object key it looked at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_through: Option<Vec<u8>>,
}

impl Frozen {
    /// Whether the object is in one of the frozen slots.
    pub fn holds(&self, app: &str, class: &str, object_id: &str) -> bool {
        self.slots
            .contains(&slot_for(app, class, object_id, self.total))
    }
}

/// What a data group keeps of its splits (its record at group · `s`, written by the state
/// machine's `split_writes`): the slots it froze for the split under way, and those it gave
/// away — refused `Moved` for good, so that a node still routing by an older map never writes
/// to them there again (a merge would give them back).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupSplits {
    /// The cluster's number of slots (0: no split yet).
    pub total: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen: Option<Frozen>,
    /// Each slot given to a child: the child, and the map's epoch from which it holds it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gone: BTreeMap<u32, (GroupId, u64)>,
    /// A split's child whose imports are over (`SealImports`): it takes no more.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sealed: bool,
}

impl GroupSplits {
    /// The record as stored at group · `s` (none: no split yet).
    pub fn from_stored(bytes: Option<&[u8]>) -> serde_json::Result<GroupSplits> {
        bytes.map_or_else(|| Ok(GroupSplits::default()), serde_json::from_slice)
    }

    /// How a scan or aggregation routed by the map of `epoch` reads the group: whole
    /// (`Ok(None)`); without the frozen slots (`Ok(Some)`: that map gives them to the child,
    /// which the reader asks too); or not at all (`Err(e)`): the group dropped objects that
    /// the reader's map still routes to it, and the reader must take up the map of epoch `e`.
    pub fn read_at(&self, epoch: u64) -> Result<Option<&Frozen>, u64> {
        if let Some(e) = self
            .gone
            .values()
            .map(|&(_, e)| e)
            .filter(|&e| e > epoch)
            .min()
        {
            return Err(e);
        }
        match &self.frozen {
            Some(f) if epoch >= f.epoch => Ok(Some(f)),
            Some(f) if f.dropped_through.is_some() => Err(f.epoch),
            _ => Ok(None),
        }
    }

    /// The epoch of the map that routes the object elsewhere, when the group no longer answers
    /// for it: its slot was given away, or its frozen slot's objects are being dropped. (A
    /// frozen object not yet dropped is the same here and in the child.)
    pub fn moved_object(&self, app: &str, class: &str, object_id: &str) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let slot = slot_for(app, class, object_id, self.total);
        if let Some(&(_, e)) = self.gone.get(&slot) {
            return Some(e);
        }
        match &self.frozen {
            Some(f) if f.slots.contains(&slot) && f.dropped_through.is_some() => Some(f.epoch),
            _ => None,
        }
    }
}

/// Which data group holds each slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotMap {
    /// The data groups the cluster began with (`--shards`): `shards · 256` slots.
    pub shards: u32,
    /// Raised by every change of the map.
    pub epoch: u64,
    /// Slots no longer in the group they began in, and the group they are in.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub moved: BTreeMap<u32, GroupId>,
    /// The id the next split's child takes (0: none taken yet, `shards + 1`); ids are never
    /// taken again.
    #[serde(default)]
    pub next_group: u32,
    /// Splits in progress: their children are groups of the cluster (peers make replicas of
    /// them) but hold none of the map's slots until switched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub splits: Vec<SplitInProgress>,
}

/// A split on its way (decisions/0038): which phase the `splits` job has brought it to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SplitInProgress {
    pub parent: GroupId,
    pub child: GroupId,
    pub slots: BTreeSet<u32>,
    /// The map's epoch once the slots are the child's.
    pub epoch: u64,
    pub phase: SplitPhase,
    /// How far the copy got (the last object key looked at, hex), for a new job to resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// The child's voters, chosen once (the parent's, as its leader reported them) before
    /// any is started: every start initializes the child with exactly these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub voters: Vec<NodeId>,
}

/// The phases of a split, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SplitPhase {
    /// Recorded: the child is being started.
    Begun,
    /// The parent froze the slots: they are being copied.
    Frozen,
    /// Every object was copied: the map is about to switch.
    Copied,
    /// The map names the child: the parent drops what it kept.
    Switched,
}

impl SlotMap {
    /// The map a cluster of `shards` data groups begins with: every slot where `shard_for` puts
    /// its keys.
    pub fn initial(shards: u32) -> SlotMap {
        SlotMap {
            shards: shards.max(1),
            epoch: 0,
            moved: BTreeMap::new(),
            next_group: 0,
            splits: Vec::new(),
        }
    }

    /// The slots `group` holds.
    pub fn slots_of(&self, group: GroupId) -> BTreeSet<u32> {
        (0..self.slots())
            .filter(|&s| self.group_of_slot(s) == group)
            .collect()
    }

    /// Records a split of `parent` (a data group holding at least two slots, while no other
    /// split is in progress): half its slots, every other one in order, go to a child whose id
    /// is taken from `next_group` (at most `cap`), at the next epoch. Nothing routes
    /// differently until `switch`.
    pub fn begin_split(&mut self, parent: GroupId, cap: u32) -> Result<SplitInProgress, String> {
        if !self.data_groups().contains(&parent) {
            return Err(format!("group {parent} is not a data group of the cluster"));
        }
        // One split at a time: epochs then switch in the order they were given.
        if let Some(s) = self.splits.first() {
            return Err(format!(
                "group {} is splitting off group {}: one split at a time",
                s.parent, s.child
            ));
        }
        let held = self.slots_of(parent);
        if held.len() < 2 {
            return Err(format!(
                "group {parent} holds {} slot: it cannot be split",
                held.len()
            ));
        }
        let next = self.next_group.max(self.shards + 1);
        if next > cap {
            return Err(format!(
                "the cluster has every group id it may have ({cap}): merge groups first"
            ));
        }
        let epoch = self
            .splits
            .iter()
            .map(|s| s.epoch)
            .max()
            .unwrap_or(self.epoch)
            .max(self.epoch)
            + 1;
        let split = SplitInProgress {
            parent,
            child: GroupId::new(next),
            slots: held.into_iter().skip(1).step_by(2).collect(),
            epoch,
            phase: SplitPhase::Begun,
            cursor: None,
            voters: Vec::new(),
        };
        self.next_group = next + 1;
        self.splits.push(split.clone());
        Ok(split)
    }

    /// The map with the split of `child` switched: its slots are the child's, at its epoch.
    pub fn switch(&mut self, child: GroupId) -> Result<(), String> {
        let Some(split) = self.splits.iter_mut().find(|s| s.child == child) else {
            return Err(format!("no split to group {child} is in progress"));
        };
        if split.phase >= SplitPhase::Switched {
            return Ok(());
        }
        for &slot in &split.slots {
            self.moved.insert(slot, child);
        }
        split.phase = SplitPhase::Switched;
        self.epoch = self.epoch.max(split.epoch);
        Ok(())
    }

    /// Every group of the cluster: the metadata group, the data groups, and the children of
    /// splits in progress (which peers make replicas of before they hold slots).
    pub fn known_groups(&self) -> BTreeSet<GroupId> {
        let mut all: BTreeSet<GroupId> = self.data_groups().into_iter().collect();
        all.insert(META_GROUP);
        all.extend(self.splits.iter().map(|s| s.child));
        all
    }

    /// The map a record of the metadata group holds, checked against the cluster's shards and
    /// group cap: a map of another cluster's shape, or one naming a slot or group that cannot
    /// be, is refused (the node keeps routing by the map it has).
    pub fn from_record(value: serde_json::Value, shards: u32, cap: u32) -> Result<SlotMap, String> {
        let map: SlotMap = serde_json::from_value(value).map_err(|e| e.to_string())?;
        if map.shards != shards {
            return Err(format!(
                "it is a map of {} shards, this cluster began with {shards}",
                map.shards
            ));
        }
        let slots = map.slots();
        if let Some((slot, group)) = map
            .moved
            .iter()
            .find(|(&s, g)| s >= slots || g.get() == 0 || g.get() > cap)
        {
            return Err(format!(
                "slot {slot} in group {group}: slots are below {slots}, groups from 1 to {cap}"
            ));
        }
        if let Some(s) = map.splits.iter().find(|s| {
            s.child.get() == 0 || s.child.get() > cap || s.slots.iter().any(|&x| x >= slots)
        }) {
            return Err(format!(
                "the split to group {} names what cannot be",
                s.child
            ));
        }
        Ok(map)
    }

    /// How many slots there are.
    pub fn slots(&self) -> u32 {
        self.shards.max(1).saturating_mul(SLOTS_PER_SHARD)
    }

    /// The group holding `slot`.
    pub fn group_of_slot(&self, slot: u32) -> GroupId {
        self.moved
            .get(&slot)
            .copied()
            .unwrap_or_else(|| GroupId::new(1 + slot % self.shards.max(1)))
    }

    /// The data group holding the key hashed from `parts` (`ids::slot_for`).
    fn group_of(&self, scope: &str, word: &str, key: &str) -> GroupId {
        self.group_of_slot(slot_for(scope, word, key, self.slots()))
    }

    /// The group a key's slot began in: where records stay (splits move objects only,
    /// decisions/0038).
    fn initial_group_of(&self, scope: &str, word: &str, key: &str) -> GroupId {
        GroupId::new(1 + slot_for(scope, word, key, self.slots()) % self.shards.max(1))
    }

    /// The group that stores an object: the metadata group for its classes
    /// (`ids::META_CLASSES`), else the data group of its slot.
    pub fn object_group(&self, app: &str, class: &str, object_id: &str) -> GroupId {
        if is_meta_class(class) {
            META_GROUP
        } else {
            self.group_of(app, class, object_id)
        }
    }

    /// The group holding the record of `ns` that `key` routes (`namespace::record_group`).
    /// Records are not moved by splits: they stay in the group their slot began in.
    pub fn record_group(&self, ns: Namespace, app: &str, key: &str) -> GroupId {
        match ns.placement() {
            Placement::Meta | Placement::EachGroup => META_GROUP,
            Placement::Shard { fixed, word } => {
                self.initial_group_of(fixed.unwrap_or(app), word, key)
            }
        }
    }

    /// The data group holding the record of the stored file `file_id` (`ids::file_group`):
    /// like every record, where its slot began.
    pub fn file_group(&self, file_id: &str) -> GroupId {
        self.initial_group_of("", "_File", file_id)
    }

    /// Every data group, in order.
    pub fn data_groups(&self) -> Vec<GroupId> {
        let mut groups: BTreeSet<GroupId> = GroupId::data_shards(self.shards).collect();
        groups.extend(self.moved.values().copied());
        groups.into_iter().collect()
    }

    /// The groups that store objects of `class`: what a scan, count or aggregation asks.
    pub fn class_groups(&self, class: &str) -> Vec<GroupId> {
        if is_meta_class(class) {
            vec![META_GROUP]
        } else {
            self.data_groups()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{class_groups, file_group, object_group};

    /// The initial map puts every key where the fixed placement (`ids::shard_for`) did: no data
    /// moves when a cluster begins routing by slots.
    #[test]
    fn the_initial_map_is_the_fixed_placement() {
        for shards in [1u32, 2, 3, 7, 16, 64] {
            let map = SlotMap::initial(shards);
            for i in 0..3000 {
                let id = format!("{i:x}obj{}", i * 7919);
                for class in ["GameScore", "_User", "_Role", "_Installation"] {
                    assert_eq!(
                        map.object_group("app1", class, &id),
                        object_group("app1", class, &id, shards),
                        "{shards} shards, {class}/{id}"
                    );
                }
                assert_eq!(map.file_group(&id), file_group(&id, shards));
                for ns in Namespace::ALL {
                    assert_eq!(
                        map.record_group(ns, "app1", &id),
                        crate::namespace::record_group(ns, "app1", &id, shards),
                        "{ns:?}"
                    );
                }
            }
            assert_eq!(map.class_groups("Thing"), class_groups("Thing", shards));
            assert_eq!(map.class_groups("_Role"), vec![META_GROUP]);
        }
    }

    /// Story — a split of group 2 of 4: half its slots, every other one, go to group 5 (the
    /// first id after the shards) at the next epoch; nothing routes differently until the
    /// switch, then exactly those slots' objects go to group 5; a second split of a splitting
    /// group is refused, the next split takes id 6, ids stop at the cap.
    #[test]
    fn a_split_takes_half_its_parents_slots_at_the_switch() {
        let mut map = SlotMap::initial(4);
        let before = map.clone();
        let split = map.begin_split(GroupId::new(2), 64).expect("split");
        assert_eq!(split.child, GroupId::new(5));
        assert_eq!(split.epoch, 1);
        assert_eq!(split.slots.len(), 128);
        assert!(split.slots.iter().all(|s| s % 4 == 1), "group 2's slots");
        assert_eq!(
            map.data_groups(),
            before.data_groups(),
            "no routing change yet"
        );
        assert!(map.known_groups().contains(&GroupId::new(5)));
        for i in 0..2000 {
            let id = format!("o{i}");
            assert_eq!(
                map.object_group("a", "C", &id),
                before.object_group("a", "C", &id)
            );
        }
        assert!(map.begin_split(GroupId::new(2), 64).is_err());
        assert!(
            map.begin_split(GroupId::new(3), 64).is_err(),
            "one at a time"
        );
        assert!(
            map.begin_split(GroupId::new(5), 64).is_err(),
            "not a data group yet"
        );
        assert!(map.begin_split(GroupId::new(0), 64).is_err());

        map.switch(GroupId::new(5)).expect("switch");
        map.switch(GroupId::new(5)).expect("again: nothing more");
        assert_eq!(map.epoch, 1);
        let (mut to_child, mut kept) = (0, 0);
        for i in 0..4000 {
            let id = format!("o{i}");
            let slot = slot_for("a", "C", &id, map.slots());
            match (
                before.object_group("a", "C", &id),
                map.object_group("a", "C", &id),
            ) {
                (b, a) if b == a => kept += 1,
                (b, a) => {
                    assert_eq!((b, a), (GroupId::new(2), GroupId::new(5)));
                    assert!(split.slots.contains(&slot));
                    to_child += 1;
                }
            }
        }
        assert!(to_child > 300 && kept > 3000, "{to_child} {kept}");
        assert_eq!(map.slots_of(GroupId::new(2)).len(), 128);
        let value = serde_json::to_value(&map).expect("json");
        assert_eq!(SlotMap::from_record(value, 4, 64), Ok(map.clone()));

        map.splits.clear();
        let next = map.begin_split(GroupId::new(3), 64).expect("another");
        assert_eq!((next.child, next.epoch), (GroupId::new(6), 2));
        let mut full = SlotMap::initial(4);
        full.next_group = 65;
        assert!(
            full.begin_split(GroupId::new(1), 64).is_err(),
            "past the cap"
        );
    }

    #[test]
    fn a_map_record_is_taken_only_for_this_clusters_shape() {
        let mut map = SlotMap::initial(4);
        map.epoch = 3;
        map.moved.insert(7, GroupId::new(5));
        let value = serde_json::to_value(&map).expect("json");
        assert_eq!(SlotMap::from_record(value.clone(), 4, 64), Ok(map.clone()));
        assert!(SlotMap::from_record(value, 8, 64)
            .expect_err("other shards")
            .contains("8"));
        for (slot, group) in [(4 * 256, 5), (7, 65), (7, 0)] {
            let mut bad = map.clone();
            bad.moved.insert(slot, GroupId::new(group));
            let value = serde_json::to_value(&bad).expect("json");
            assert!(
                SlotMap::from_record(value, 4, 64).is_err(),
                "slot {slot} in group {group}"
            );
        }
        assert!(SlotMap::from_record(serde_json::json!({"epoch": 1}), 4, 64).is_err());
    }

    #[test]
    fn a_moved_slot_routes_to_its_group_and_the_group_is_listed() {
        let mut map = SlotMap::initial(4);
        let slot = slot_for("app1", "Thing", "abc", map.slots());
        let before = map.object_group("app1", "Thing", "abc");
        assert_eq!(before, GroupId::new(1 + slot % 4));
        map.moved.insert(slot, GroupId::new(5));
        map.epoch += 1;
        assert_eq!(map.object_group("app1", "Thing", "abc"), GroupId::new(5));
        // Records hashed to the same slot stay where the slot began.
        let file_slot = slot_for("", "_File", "f1", map.slots());
        map.moved.insert(file_slot, GroupId::new(6));
        assert_eq!(map.file_group("f1"), GroupId::new(1 + file_slot % 4));
        map.moved.remove(&file_slot);
        assert_eq!(
            map.data_groups(),
            (1..=5).map(GroupId::new).collect::<Vec<_>>()
        );
        let text = serde_json::to_string(&map).expect("json");
        assert_eq!(serde_json::from_str::<SlotMap>(&text).expect("parse"), map);
    }
}
