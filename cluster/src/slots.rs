//! Hash slots (decisions/0038): every object, routed record and stored file's record hashes to
//! one of `shards · 256` slots, and the slot map says which data group holds each slot. Slot
//! `s` begins in group `1 + s mod shards`, exactly where `ids::shard_for` puts the same key, so
//! a cluster's layout is unchanged until a group is split (or merged: its slots go to another
//! group, and a split-off group left with none is retired). Neighbours: `ids` (the hash, group
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
    /// A merge into this group (`OpenImports`): the slots it takes in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incoming: Option<Incoming>,
    /// Reads routed by a map older than this epoch are refused `Moved`: the group took in
    /// slots at it, and such a reader would count their objects here and where they were.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub floor: u64,
    /// The slot index (`SlotIndex`), once the group keeps one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_index: Option<SlotIndex>,
}

/// A group's slot index (decisions/0038 step 7): an entry at group · `h` · slot · object for
/// each object, so that a split's or merge's batch copies and drops its own slots' objects
/// without reading the rest of the group. Kept by apply from the first `IndexSlots` on (for
/// every object created, imported or deleted from then on), while `IndexSlots` pages enter
/// the objects that were there before; `complete` once they have all been entered: from then
/// on, and only then, it names exactly the group's objects of each slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotIndex {
    /// The cluster's number of slots the entries are of (`SlotMap::slots`).
    pub total: u32,
    /// The last object key the pages entered (none: none yet, or complete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<Vec<u8>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub complete: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Slots a merge brings into a group (decisions/0038): from `OpenImports` on it takes imports
/// of their objects (and no write to them); from `AdoptSlots` on (just after the map names
/// the group for them) they are its own, though a read routed by a map older than `epoch`
/// still leaves them out (that reader asks `from`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Incoming {
    pub from: GroupId,
    pub slots: BTreeSet<u32>,
    /// The cluster's number of slots (`SlotMap::slots`).
    pub total: u32,
    /// The map's epoch once the slots are this group's.
    pub epoch: u64,
    /// `AdoptSlots` was applied: imports are over, writes to the slots are taken.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopted: bool,
}

/// Slots a read leaves out of a group (`GroupSplits::read_at`): those it froze for a split's
/// child, or those a merge brings in that the reader's map does not name it for yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    pub slots: BTreeSet<u32>,
    /// The cluster's number of slots: what an object's slot is taken of.
    pub total: u32,
}

impl Excluded {
    /// Whether the object is in one of the left-out slots.
    pub fn holds(&self, app: &str, class: &str, object_id: &str) -> bool {
        self.slots
            .contains(&slot_for(app, class, object_id, self.total))
    }
}

impl GroupSplits {
    /// The complete slot index of `total` slots, if the group keeps one.
    pub fn slot_index_of(&self, total: u32) -> Option<&SlotIndex> {
        self.slot_index
            .as_ref()
            .filter(|i| i.complete && i.total == total)
    }

    /// The record as stored at group · `s` (none: no split yet).
    pub fn from_stored(bytes: Option<&[u8]>) -> serde_json::Result<GroupSplits> {
        bytes.map_or_else(|| Ok(GroupSplits::default()), serde_json::from_slice)
    }

    /// How a scan or aggregation routed by the map of `epoch` reads the group: whole
    /// (`Ok(None)`); without some slots (`Ok(Some)`: the frozen ones, when that map gives them
    /// to the child, which the reader asks too; or those a merge brings in, when that map
    /// still names the group they come from); or not at all (`Err(e)`): the group dropped
    /// objects that the reader's map still routes to it, or took in slots before that map,
    /// and the reader must take up the map of epoch `e`.
    pub fn read_at(&self, epoch: u64) -> Result<Option<Excluded>, u64> {
        if let Some(e) = self
            .gone
            .values()
            .map(|&(_, e)| e)
            .chain((self.floor > 0).then_some(self.floor))
            .filter(|&e| e > epoch)
            .min()
        {
            return Err(e);
        }
        if let Some(f) = self
            .frozen
            .as_ref()
            .filter(|f| epoch < f.epoch && f.dropped_through.is_some())
        {
            return Err(f.epoch);
        }
        if let Some(i) = self.incoming.as_ref().filter(|i| epoch < i.epoch) {
            return Ok(Some(Excluded {
                slots: i.slots.clone(),
                total: i.total,
            }));
        }
        match &self.frozen {
            Some(f) if epoch >= f.epoch => Ok(Some(Excluded {
                slots: f.slots.clone(),
                total: f.total,
            })),
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
        // A merge brought the slot back.
        if self
            .incoming
            .as_ref()
            .is_some_and(|i| i.adopted && i.slots.contains(&slot))
        {
            return None;
        }
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
    /// Splits and merges in progress (one at a time): a split's child is a group of the
    /// cluster (peers make replicas of it) but holds none of the map's slots until switched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub splits: Vec<SplitInProgress>,
    /// Groups merged away (ids above the shards'): no node keeps a replica of them, and their
    /// ids are never taken again.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub retired: BTreeSet<GroupId>,
    /// When each group's last split or merge was done (ms since the epoch): automatic ones
    /// leave it alone for a while (`SplitSettings::settle_secs`), whichever node schedules.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settled: BTreeMap<GroupId, u64>,
}

/// How long `SlotMap::settled` remembers a group's last split or merge.
const SETTLED_KEPT_MS: u64 = 7 * 24 * 3600 * 1000;

/// Whether a slot-map change moves slots to a new group or back into one that has some.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MoveKind {
    /// `parent` gives half its slots to the new group `child`.
    #[default]
    Split,
    /// `parent` (the source) gives every slot it holds to `child` (the target, a data group
    /// already), and is retired when it began as a split's child.
    Merge,
}

impl MoveKind {
    fn is_split(&self) -> bool {
        *self == MoveKind::Split
    }
}

/// What `SlotMap::finish` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// The next batch began.
    Batched,
    /// The split or merge is over.
    Done,
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
    /// A split, or a merge of `parent` into `child`.
    #[serde(default, skip_serializing_if = "MoveKind::is_split")]
    pub kind: MoveKind,
    /// Slots still to move once `slots` (this batch) are done: each batch is frozen, copied
    /// and switched on its own, so that writes wait for one batch's copy at most.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub rest: BTreeSet<u32>,
    /// This batch's number, from 0: from the second on, `child` holds slots already and
    /// takes the batch in as a merge's target does (`OpenImports`, `AdoptSlots`).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub batch: u32,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl SplitInProgress {
    /// Whether `child` holds slots of its own before this batch: a merge's target, or a
    /// split's child from its second batch on. It then opens its imports for the batch and
    /// adopts it after the switch, where a new child seals its imports instead.
    pub fn into_held(&self) -> bool {
        self.kind == MoveKind::Merge || self.batch > 0
    }
}

/// `slots` cut into the first batch of at most `batch` slots (none: all of them) and the rest,
/// in order.
fn first_batch(slots: BTreeSet<u32>, batch: Option<u32>) -> (BTreeSet<u32>, BTreeSet<u32>) {
    let n = batch.map_or(usize::MAX, |b| b.max(1) as usize);
    let mut first = slots;
    let rest = match first.iter().nth(n) {
        Some(&at) => first.split_off(&at),
        None => BTreeSet::new(),
    };
    (first, rest)
}

/// The phases of a split or merge, in order.
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
            retired: BTreeSet::new(),
            settled: BTreeMap::new(),
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
    /// is taken from `next_group` (at most `cap`), at the next epoch, `batch` slots at a time
    /// (none: all at once). Nothing routes differently until `switch`.
    pub fn begin_split(
        &mut self,
        parent: GroupId,
        cap: u32,
        batch: Option<u32>,
    ) -> Result<SplitInProgress, String> {
        if !self.data_groups().contains(&parent) {
            return Err(format!("group {parent} is not a data group of the cluster"));
        }
        self.none_under_way()?;
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
        let epoch = self.next_epoch();
        let (slots, rest) = first_batch(held.into_iter().skip(1).step_by(2).collect(), batch);
        let split = SplitInProgress {
            parent,
            child: GroupId::new(next),
            slots,
            epoch,
            phase: SplitPhase::Begun,
            cursor: None,
            voters: Vec::new(),
            kind: MoveKind::Split,
            rest,
            batch: 0,
        };
        self.next_group = next + 1;
        self.splits.push(split.clone());
        Ok(split)
    }

    /// One split or merge at a time: epochs then switch in the order they were given.
    fn none_under_way(&self) -> Result<(), String> {
        match self.splits.first() {
            Some(s) if s.kind == MoveKind::Merge => Err(format!(
                "group {} is merging into group {}: one split or merge at a time",
                s.parent, s.child
            )),
            Some(s) => Err(format!(
                "group {} is splitting off group {}: one split or merge at a time",
                s.parent, s.child
            )),
            None => Ok(()),
        }
    }

    fn next_epoch(&self) -> u64 {
        self.splits
            .iter()
            .map(|s| s.epoch)
            .max()
            .unwrap_or(self.epoch)
            .max(self.epoch)
            + 1
    }

    /// The group `source`'s slots go back into by default: of the other data groups holding
    /// slots that began where `source`'s first slot began (its family: the group it was split
    /// from, its siblings), the one holding fewest, the lowest id first.
    pub fn merge_target(&self, source: GroupId) -> Option<GroupId> {
        let shards = self.shards.max(1);
        let first = self.slots_of(source).into_iter().next()?;
        let mut held: BTreeMap<GroupId, u32> = BTreeMap::new();
        for slot in (first % shards..self.slots()).step_by(shards as usize) {
            let g = self.group_of_slot(slot);
            if g != source {
                *held.entry(g).or_default() += 1;
            }
        }
        held.into_iter()
            .min_by_key(|&(g, n)| (n, g))
            .map(|(g, _)| g)
    }

    /// Records a merge of every slot `source` holds into `target` (another data group, while
    /// no split or merge is in progress), at the next epoch, `batch` slots at a time (none: all
    /// at once). Nothing routes differently until `switch`; a source that began as a split's
    /// child is retired once its last batch is done.
    pub fn begin_merge(
        &mut self,
        source: GroupId,
        target: GroupId,
        batch: Option<u32>,
    ) -> Result<SplitInProgress, String> {
        let groups = self.data_groups();
        for g in [source, target] {
            if !groups.contains(&g) {
                return Err(format!("group {g} is not a data group of the cluster"));
            }
        }
        if source == target {
            return Err(format!("group {source} cannot merge into itself"));
        }
        self.none_under_way()?;
        let slots = self.slots_of(source);
        if slots.is_empty() {
            return Err(format!("group {source} holds no slot: nothing to merge"));
        }
        let (slots, rest) = first_batch(slots, batch);
        let merge = SplitInProgress {
            parent: source,
            child: target,
            slots,
            epoch: self.next_epoch(),
            phase: SplitPhase::Begun,
            cursor: None,
            voters: Vec::new(),
            kind: MoveKind::Merge,
            rest,
            batch: 0,
        };
        self.splits.push(merge.clone());
        Ok(merge)
    }

    /// The map with the split or merge to `child` switched: its slots are the child's, at its
    /// epoch (a slot back in the group it began in is no longer listed as moved).
    pub fn switch(&mut self, child: GroupId) -> Result<(), String> {
        let shards = self.shards.max(1);
        let Some(split) = self.splits.iter_mut().find(|s| s.child == child) else {
            return Err(format!("no split or merge to group {child} is in progress"));
        };
        if split.phase >= SplitPhase::Switched {
            return Ok(());
        }
        for &slot in &split.slots {
            if GroupId::new(1 + slot % shards) == child {
                self.moved.remove(&slot);
            } else {
                self.moved.insert(slot, child);
            }
        }
        split.phase = SplitPhase::Switched;
        self.epoch = self.epoch.max(split.epoch);
        Ok(())
    }

    /// Ends the batch of the split or merge to `child` once its source dropped what it gave,
    /// at `now_ms`. With slots left, the next batch (as many slots as this one) begins at the
    /// next epoch: `Batched`. Else the split or merge is over (`Done`): a merged source that
    /// began as a split's child (and so holds no records) is retired; the groups left are
    /// noted as settled then.
    pub fn finish(&mut self, child: GroupId, now_ms: u64) -> Finished {
        let epoch = self.next_epoch();
        let Some(at) = self.splits.iter().position(|s| s.child == child) else {
            return Finished::Done;
        };
        if let Some(s) = self.splits.get_mut(at).filter(|s| !s.rest.is_empty()) {
            let size = s.slots.len().max(1) as u32;
            let (next, rest) = first_batch(std::mem::take(&mut s.rest), Some(size));
            s.slots = next;
            s.rest = rest;
            s.epoch = epoch;
            s.phase = SplitPhase::Begun;
            s.cursor = None;
            s.batch += 1;
            return Finished::Batched;
        }
        let done = self.splits.remove(at);
        if done.kind == MoveKind::Merge
            && done.parent.get() > self.shards
            && self.slots_of(done.parent).is_empty()
        {
            self.retired.insert(done.parent);
        }
        let groups = self.data_groups();
        self.settled
            .retain(|g, &mut at| groups.contains(g) && now_ms.saturating_sub(at) < SETTLED_KEPT_MS);
        for g in [done.parent, done.child] {
            if groups.contains(&g) {
                self.settled.insert(g, now_ms);
            }
        }
        Finished::Done
    }

    /// Every group of the cluster: the metadata group, the data groups, the children of
    /// splits in progress (which peers make replicas of before they hold slots) and the
    /// sources of merges in progress (until they drop what they gave).
    pub fn known_groups(&self) -> BTreeSet<GroupId> {
        let mut all: BTreeSet<GroupId> = self.data_groups().into_iter().collect();
        all.insert(META_GROUP);
        // A split's child before the switch, a merge's source until it is retired.
        all.extend(self.splits.iter().flat_map(|s| [s.child, s.parent]));
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
        if let Some(g) = map
            .retired
            .iter()
            .find(|g| g.get() <= shards || g.get() > cap || map.moved.values().any(|m| m == *g))
        {
            return Err(format!("group {g} cannot be retired"));
        }
        if let Some(s) = map.splits.iter().find(|s| {
            s.child.get() == 0
                || s.child.get() > cap
                || s.slots.iter().chain(&s.rest).any(|&x| x >= slots)
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
        let split = map.begin_split(GroupId::new(2), 64, None).expect("split");
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
        assert!(map.begin_split(GroupId::new(2), 64, None).is_err());
        assert!(
            map.begin_split(GroupId::new(3), 64, None).is_err(),
            "one at a time"
        );
        assert!(
            map.begin_split(GroupId::new(5), 64, None).is_err(),
            "not a data group yet"
        );
        assert!(map.begin_split(GroupId::new(0), 64, None).is_err());

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
        let next = map.begin_split(GroupId::new(3), 64, None).expect("another");
        assert_eq!((next.child, next.epoch), (GroupId::new(6), 2));
        let mut full = SlotMap::initial(4);
        full.next_group = 65;
        assert!(
            full.begin_split(GroupId::new(1), 64, None).is_err(),
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

    /// Story — group 5, split off group 2, merges back: by default into 2 (its family's group
    /// holding fewest slots); nothing routes differently until the switch, then every slot is
    /// 2's again (no longer listed as moved); at the finish 5 is retired and both are noted
    /// settled. A group of the shards merged away is not retired (it keeps records); merges
    /// into itself, of unknown groups, or beside a split under way are refused.
    #[test]
    fn a_merge_gives_every_slot_back_and_retires_a_child() {
        let mut map = SlotMap::initial(4);
        map.begin_split(GroupId::new(2), 64, None).expect("split");
        map.switch(GroupId::new(5)).expect("switch");
        map.finish(GroupId::new(5), 1_000);
        assert_eq!(map.slots_of(GroupId::new(5)).len(), 128);
        let split_map = map.clone();
        assert_eq!(map.merge_target(GroupId::new(5)), Some(GroupId::new(2)));
        assert!(map
            .begin_merge(GroupId::new(5), GroupId::new(5), None)
            .is_err());
        assert!(map
            .begin_merge(GroupId::new(9), GroupId::new(2), None)
            .is_err());
        assert!(map
            .begin_merge(GroupId::new(5), GroupId::new(0), None)
            .is_err());

        let merge = map
            .begin_merge(GroupId::new(5), GroupId::new(2), None)
            .expect("merge");
        assert_eq!((merge.kind, merge.epoch), (MoveKind::Merge, 2));
        assert_eq!(merge.slots, split_map.slots_of(GroupId::new(5)));
        assert!(
            map.begin_split(GroupId::new(3), 64, None).is_err(),
            "one at a time"
        );
        assert!(map
            .begin_merge(GroupId::new(5), GroupId::new(1), None)
            .is_err());
        assert_eq!(
            map.data_groups(),
            split_map.data_groups(),
            "no routing change"
        );
        assert!(map.known_groups().contains(&GroupId::new(5)));

        map.switch(GroupId::new(2)).expect("switch");
        assert_eq!(map.epoch, 2);
        assert!(map.moved.is_empty(), "every slot back where it began");
        assert_eq!(map.slots_of(GroupId::new(2)).len(), 256);
        assert!(
            map.known_groups().contains(&GroupId::new(5)),
            "until it dropped what it gave"
        );
        map.finish(GroupId::new(2), 5_000);
        assert_eq!(map.retired, BTreeSet::from([GroupId::new(5)]));
        assert!(!map.known_groups().contains(&GroupId::new(5)));
        assert_eq!(map.settled.get(&GroupId::new(2)), Some(&5_000));
        assert_eq!(map.settled.get(&GroupId::new(5)), None);
        let value = serde_json::to_value(&map).expect("json");
        assert_eq!(SlotMap::from_record(value, 4, 64), Ok(map.clone()));
        // Its id is not taken again.
        let next = map.begin_split(GroupId::new(1), 64, None).expect("split");
        assert_eq!(next.child, GroupId::new(6));
        map.splits.clear();

        // A group of the shards merged into another keeps its records: not retired.
        let merge = map
            .begin_merge(GroupId::new(3), GroupId::new(4), None)
            .expect("merge 3");
        assert_eq!(merge.slots.len(), 256);
        assert_eq!(
            map.merge_target(GroupId::new(3)),
            None,
            "3's family is 3 alone"
        );
        map.switch(GroupId::new(4)).expect("switch");
        map.finish(GroupId::new(4), 6_000);
        assert!(!map.retired.contains(&GroupId::new(3)));
        assert!(map.slots_of(GroupId::new(3)).is_empty());
        assert!(map.data_groups().contains(&GroupId::new(3)));
        assert!(
            map.begin_merge(GroupId::new(3), GroupId::new(4), None)
                .is_err(),
            "no slot left"
        );

        // A record retiring a group of the shards, or one that holds slots, is refused.
        for bad in [3u32, 4, 7] {
            let mut wrong = map.clone();
            wrong.moved.insert(1, GroupId::new(7));
            wrong.retired.insert(GroupId::new(bad));
            let value = serde_json::to_value(&wrong).expect("json");
            assert!(SlotMap::from_record(value, 4, 64).is_err(), "{bad}");
        }
    }

    /// Story — a split of group 2 of 4 in batches of 40 slots: each batch is switched at an
    /// epoch of its own, only its slots routing to the child; the next batch (as many slots,
    /// the last fewer) begins at the next epoch and takes the child in as a merge's target
    /// does; the child is noted settled only after the last. A merge in batches retires its
    /// source only once its last slot is gone. The record reads back between batches.
    #[test]
    fn a_split_in_batches_switches_one_batch_at_a_time() {
        let mut map = SlotMap::initial(4);
        let split = map
            .begin_split(GroupId::new(2), 64, Some(40))
            .expect("split");
        assert_eq!((split.slots.len(), split.rest.len()), (40, 88));
        assert!(!split.into_held(), "a new child seals its imports");
        let all: BTreeSet<u32> = split.slots.union(&split.rest).copied().collect();
        assert!(all.iter().all(|s| s % 4 == 1) && all.len() == 128);
        let mut seen = BTreeSet::new();
        let mut sizes = Vec::new();
        for round in 0..4u64 {
            let now = map.splits[0].clone();
            assert_eq!((now.batch, now.epoch), (round as u32, round + 1));
            assert_eq!(now.phase, SplitPhase::Begun);
            assert_eq!(now.into_held(), round > 0);
            assert!(now.slots.is_disjoint(&seen), "a slot moved twice");
            sizes.push(now.slots.len());
            map.switch(GroupId::new(5)).expect("switch");
            assert_eq!(map.epoch, round + 1);
            seen.extend(now.slots.iter().copied());
            assert_eq!(
                map.slots_of(GroupId::new(5)),
                seen,
                "exactly the batches switched"
            );
            assert!(
                map.begin_merge(GroupId::new(5), GroupId::new(2), None)
                    .is_err(),
                "one at a time, between batches too"
            );
            let value = serde_json::to_value(&map).expect("json");
            assert_eq!(SlotMap::from_record(value, 4, 64), Ok(map.clone()));
            let finished = map.finish(GroupId::new(5), 1_000 + round);
            assert_eq!(finished == Finished::Done, round == 3, "batch {round}");
            assert_eq!(map.settled.contains_key(&GroupId::new(5)), round == 3);
        }
        assert_eq!(sizes, vec![40, 40, 40, 8]);
        assert_eq!(seen, all);
        assert!(map.splits.is_empty());
        assert_eq!(map.slots_of(GroupId::new(2)).len(), 128);

        // Back in batches of 100: 5 is retired only with its last slot gone.
        map.begin_merge(GroupId::new(5), GroupId::new(2), Some(100))
            .expect("merge");
        assert_eq!(map.splits[0].rest.len(), 28);
        map.switch(GroupId::new(2)).expect("switch");
        assert_eq!(map.finish(GroupId::new(2), 2_000), Finished::Batched);
        assert!(map.retired.is_empty());
        assert_eq!(map.slots_of(GroupId::new(5)).len(), 28);
        map.switch(GroupId::new(2)).expect("switch");
        assert_eq!(map.finish(GroupId::new(2), 3_000), Finished::Done);
        assert_eq!(map.retired, BTreeSet::from([GroupId::new(5)]));
        assert!(map.moved.is_empty());
        assert_eq!(map.epoch, 6);

        // A record naming a slot past the map's in the rest is refused.
        let mut bad = SlotMap::initial(4);
        let mut split = bad
            .begin_split(GroupId::new(1), 64, Some(8))
            .expect("split");
        split.rest.insert(4 * 256);
        bad.splits = vec![split];
        let value = serde_json::to_value(&bad).expect("json");
        assert!(SlotMap::from_record(value, 4, 64).is_err());
    }

    /// Reads at each epoch of a group that takes in a merge's slots: without them before the
    /// merge's epoch, whole from it on; once a later merge replaces it, refused below the
    /// floor.
    #[test]
    fn a_merge_target_leaves_incoming_slots_out_of_older_reads() {
        let mut g = GroupSplits {
            total: 1024,
            incoming: Some(Incoming {
                from: GroupId::new(5),
                slots: BTreeSet::from([1, 3]),
                total: 1024,
                epoch: 4,
                adopted: false,
            }),
            ..GroupSplits::default()
        };
        let out = g.read_at(3).expect("older").expect("left out");
        assert_eq!(out.slots, BTreeSet::from([1, 3]));
        assert_eq!(g.read_at(4), Ok(None));
        g.floor = 4;
        assert_eq!(g.read_at(3), Err(4));
        assert_eq!(g.read_at(5), Ok(None));
    }
}
