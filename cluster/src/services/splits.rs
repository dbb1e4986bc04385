//! Splits (decisions/0038): `begin` records a split of a data group in the slot map's record
//! (`basalt admin split`), and the scheduler's `splits` job brings it a step further each round
//! — chooses the child's voters once (the parent's, also named in the placement record),
//! starts the child with them (`AdminRequest::StartGroup` to one of them: `start_here`),
//! freezes the slots in the parent, copies their objects to the child in pages of at most
//! `command::MAX_IMPORT_BYTES`, seals the child's imports, switches the map, and drops the
//! copies from the parent — the copy and the drop at `moveKbPerS` (`split_pace`) — saving
//! how far it got in the record, so that a new metadata leader goes on where the last one
//! stopped. A merge (`begin_merge`) runs the same phases the
//! other way, into a group that holds slots already (`OpenImports`, freeze, copy, switch,
//! `AdoptSlots`, drop), and retires a split-off source. `AutoSplits` begins either by itself.
//! Neighbours: `slots` (the map), `statemachine::split_writes`
//! (the commands), `local_read` (the parent's pages), `replicas` (routing), `scheduler`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openraft::BasicNode;
use serde_json::{json, Value};

use crate::admin::{AdminRequest, AdminResponse, SplitSettings, SplitSettingsChange};
use crate::command::{Command, CommandResult, ReadRequest, ReadResponse, MAX_IMPORT_BYTES};
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId, META_GROUP};
use crate::namespace::Namespace;
use crate::replicas::{unexpected, Replicas};
use crate::services::rebalance;
use crate::services::split_pace::{self, MovePace};
use crate::slots::{
    Finished, Frozen, Incoming, MoveKind, SlotMap, SplitInProgress, SplitPhase, SLOTS_KEY,
};

/// What this build adds that older builds cannot read (`services::upgrade`): slot maps with
/// splits, the split commands and reads. Splits begin only once it is finalized.
pub const FEATURES: [&str; 3] = [SLOTS_FEATURE, BATCHES_FEATURE, INDEX_FEATURE];

/// Splits and merges, and slot maps with them.
const SLOTS_FEATURE: &str = "slots";

/// Splits and merges in batches (`rest` and `batch` in the map's record, `DropSlots` naming
/// its batch): until it is finalized a split or merge moves every slot at once, so that a
/// build without it can go on with any split under way.
const BATCHES_FEATURE: &str = "slot-batches";

/// The data groups' slot indexes (`Command::IndexSlots`, decisions/0038 step 7): until it is
/// finalized no group keeps one (a build without it applies the same log alike), and a batch
/// is copied and dropped by looking at every object of its group.
const INDEX_FEATURE: &str = "slot-index";

/// Objects one `IndexSlots` enters: apply reads them (values too) for their keys.
const INDEX_PAGE: u32 = 1_000;

/// Key of the automatic splits' settings (namespace `Cluster`, `admin::SplitSettings`).
const SETTINGS_KEY: &str = "splitting";

/// How often the groups' sizes and writes are looked at for an automatic split.
const AUTO_LOOK: Duration = Duration::from_secs(10);

/// The window a group's writes a second are counted over: its load is sustained when the
/// rate over the whole window passes the limit.
const LOAD_WINDOW: Duration = Duration::from_secs(60);

/// Samples further apart than this are not one window's: the window starts again.
const STALE_SAMPLE: Duration = Duration::from_secs(30);

/// Load alone splits a group down to this many slots: writes to a few hot objects are not
/// spread by splitting further.
const LOAD_SPLIT_MIN_SLOTS: u32 = 32;

/// Objects one `DropSlots` deletes.
const DROP_PAGE: u32 = 2_000;

/// How long one round works before it saves and leaves the scheduler to its other jobs.
const ROUND_BUDGET: Duration = Duration::from_secs(1);

/// How long (from the round's start) a round copies a frozen batch before it saves the cursor
/// and waits for the next, checked between pages: writes to the batch's objects wait while it
/// is frozen, so its copy goes on past `ROUND_BUDGET`, and the batch is switched and adopted
/// in the same round.
const FROZEN_BUDGET: Duration = Duration::from_secs(4);

/// After the switch, how long the parent keeps the copies before dropping them: nodes take up
/// the new map within a refresh (250 ms), and until then their reads of the parent see every
/// object (a read by an older map after the drop began is refused `Moved` and read again).
const SWITCH_GRACE: Duration = Duration::from_secs(2);

/// How long the parent's leader is waited for when the child's voters are chosen.
const STATUS_WAIT: Duration = Duration::from_secs(2);

/// How long the child's first leader is waited for in one round.
const CHILD_WAIT: Duration = Duration::from_secs(2);

/// The map a slot map record holds (the initial map when there is none yet).
fn map_of(replicas: &Replicas, record: Option<&Value>) -> Result<SlotMap> {
    let settings = replicas.settings();
    match record {
        Some(v) => SlotMap::from_record(v.clone(), settings.shards, settings.group_cap())
            .map_err(|e| Error::Internal(format!("the slot map record: {e}"))),
        None => Ok(SlotMap::initial(settings.shards)),
    }
}

/// The slot map's record as stored (none until a first split) and the map it holds, from this
/// node's replica of the metadata group.
fn current(replicas: &Replicas) -> Result<(Option<Value>, SlotMap)> {
    let record = replicas.local_meta_record(Namespace::Cluster, SLOTS_KEY)?;
    let map = map_of(replicas, record.as_ref())?;
    Ok((record, map))
}

/// The same as the metadata group's leader holds it (a linearizable read).
async fn current_at_leader(replicas: &Replicas) -> Result<(Option<Value>, SlotMap)> {
    let record = replicas
        .get_record(META_GROUP, Namespace::Cluster, SLOTS_KEY)
        .await?;
    let map = map_of(replicas, record.as_ref())?;
    Ok((record, map))
}

/// The slot map as the metadata group's leader holds it (a linearizable read).
pub(crate) async fn map_at_leader(replicas: &Replicas) -> Result<SlotMap> {
    Ok(current_at_leader(replicas).await?.1)
}

/// Writes `next` in place of `before` (compare-and-set: `Conflict` when another write came
/// first) and routes by it at once.
async fn save(replicas: &Replicas, before: Option<Value>, next: &SlotMap) -> Result<()> {
    let value = serde_json::to_value(next)?;
    replicas
        .cas_record(
            META_GROUP,
            Namespace::Cluster,
            SLOTS_KEY,
            before,
            Some(value),
        )
        .await?;
    replicas.refresh_slot_map()?;
    Ok(())
}

/// The slot map as the metadata group's leader holds it, for `basalt admin slots`: its epoch,
/// how many slots each data group holds, and the split under way.
pub async fn view(replicas: &Replicas) -> Result<Value> {
    let map = map_at_leader(replicas).await?;
    let mut held: BTreeMap<String, u32> = BTreeMap::new();
    for slot in 0..map.slots() {
        *held.entry(map.group_of_slot(slot).to_string()).or_default() += 1;
    }
    let splits: Vec<Value> = map
        .splits
        .iter()
        .map(|s| {
            json!({
                "parent": s.parent.get(),
                "child": s.child.get(),
                "slots": s.slots.len(),
                "epoch": s.epoch,
                "phase": s.phase,
                "kind": s.kind,
                "batch": s.batch,
                "left": s.rest.len(),
            })
        })
        .collect();
    Ok(json!({
        "epoch": map.epoch,
        "shards": map.shards,
        "slots": map.slots(),
        "groups": held,
        "splits": splits,
        "retired": map.retired,
        "auto": settings_at_leader(replicas).await?,
    }))
}

/// The automatic splits' settings as the metadata group's leader holds them (what does not
/// read is named: none begins until they are set again).
async fn settings_at_leader(replicas: &Replicas) -> Result<Value> {
    let raw = replicas
        .get_record(META_GROUP, Namespace::Cluster, SETTINGS_KEY)
        .await?;
    Ok(match raw.map(SplitSettings::from_stored) {
        None => serde_json::to_value(SplitSettings::default())?,
        Some(Ok(s)) => serde_json::to_value(s)?,
        Some(Err(e)) => json!({"unreadable": e.to_string()}),
    })
}

/// Changes the automatic splits' settings given (`basalt admin slots --split-above-mb N
/// ...`); 0 turns that rule off.
pub async fn change_settings(replicas: &Replicas, change: SplitSettingsChange) -> Result<()> {
    if change.is_empty() {
        return Ok(());
    }
    replicas
        .update_meta_record(Namespace::Cluster, SETTINGS_KEY, 5, |raw| {
            // A record that does not read is written afresh.
            let before: SplitSettings = raw
                .and_then(|v| SplitSettings::from_stored(v.clone()).ok())
                .unwrap_or_default();
            Ok(Some(serde_json::to_value(change.applied_to(before))?))
        })
        .await?;
    Ok(())
}

/// What the `splits` job keeps between rounds to split and merge groups by themselves: each
/// data group's applied index over the last `LOAD_WINDOW`.
#[derive(Default)]
pub struct AutoSplits(Mutex<AutoState>);

#[derive(Default)]
struct AutoState {
    last_look: Option<Instant>,
    applied: BTreeMap<GroupId, VecDeque<(Instant, u64)>>,
    /// Groups whose slot index answered complete.
    indexed: BTreeSet<GroupId>,
}

/// Why a group is split or merged by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AutoReason {
    Size,
    Load,
    Small,
}

impl AutoReason {
    fn name(self) -> &'static str {
        match self {
            AutoReason::Size => "size",
            AutoReason::Load => "load",
            AutoReason::Small => "small",
        }
    }
}

/// A group as the automatic splits weigh it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Weighed {
    group: GroupId,
    bytes: u64,
    /// Writes a second over the whole window and over the last look, the lower (None: not
    /// watched that long yet).
    writes_per_s: Option<f64>,
    /// Slots it holds.
    slots: u32,
    /// It was not split or merged lately and no member drains or runs low on disk.
    settled: bool,
    /// A group id is left for a child.
    room: bool,
}

/// The group to split now and why: the largest above the size limit, else the busiest above
/// the load limit.
fn choose(groups: &[Weighed], settings: &SplitSettings) -> Option<(GroupId, AutoReason)> {
    let size_limit = u64::from(settings.split_above_mb) << 20;
    let may_split = |g: &&Weighed| g.settled && g.room;
    let by_size = groups
        .iter()
        .filter(may_split)
        .filter(|g| g.slots >= 2)
        .filter(|g| settings.split_above_mb > 0 && g.bytes > size_limit)
        .max_by_key(|g| g.bytes)
        .map(|g| (g.group, AutoReason::Size));
    let load_limit = f64::from(settings.split_above_writes_per_s);
    let by_load = || {
        groups
            .iter()
            .filter(may_split)
            .filter(|g| g.slots >= LOAD_SPLIT_MIN_SLOTS)
            .filter(|_| settings.split_above_writes_per_s > 0)
            .filter_map(|g| Some((g.group, g.writes_per_s?)))
            .filter(|&(_, rate)| rate > load_limit)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(g, _)| (g, AutoReason::Load))
    };
    by_size.or_else(by_load)
}

/// The merge to begin now, when no group is to be split: of the groups that began as a
/// split's child (`shards` is the cluster's), the one whose bytes with its family's target's
/// (`target_of`) are fewest, below `merge_below_mb`, both settled and watched a whole window
/// with writes under a quarter of the load limit (with no load limit, of the default one).
fn choose_merge(
    groups: &[Weighed],
    settings: &SplitSettings,
    shards: u32,
    target_of: impl Fn(GroupId) -> Option<GroupId>,
) -> Option<(GroupId, GroupId)> {
    if settings.merge_below_mb == 0 {
        return None;
    }
    let limit = u64::from(settings.merge_below_mb) << 20;
    // With no load limit, a quarter of the default one.
    let quiet_below = match settings.split_above_writes_per_s {
        0 => f64::from(SplitSettings::default().split_above_writes_per_s) / 4.0,
        w => f64::from(w) / 4.0,
    };
    let quiet = |g: &Weighed| g.settled && g.writes_per_s.is_some_and(|w| w < quiet_below);
    let by_id: BTreeMap<GroupId, &Weighed> = groups.iter().map(|g| (g.group, g)).collect();
    groups
        .iter()
        .filter(|g| g.group.get() > shards && quiet(g))
        .filter_map(|g| {
            let t = by_id.get(&target_of(g.group)?)?;
            let sum = g.bytes.saturating_add(t.bytes);
            (quiet(t) && sum < limit).then_some((sum, g.group, t.group))
        })
        .min()
        .map(|(_, source, target)| (source, target))
}

impl AutoSplits {
    /// Looks at the groups (every `AUTO_LOOK`) and begins a split of the one that passed a
    /// limit, else a merge of a small one, if any; the caller runs this only while no split
    /// or merge is under way. None begins while a member drains or its disk is low (both
    /// write the moved objects again).
    async fn round(&self, replicas: &Replicas, map: &SlotMap) -> Result<()> {
        {
            let state = self.0.lock().map_err(poisoned)?;
            if state.last_look.is_some_and(|t| t.elapsed() < AUTO_LOOK) {
                return Ok(());
            }
        }
        let settings = match replicas.local_meta_record(Namespace::Cluster, SETTINGS_KEY)? {
            None => SplitSettings::default(),
            Some(v) => match SplitSettings::from_stored(v) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("the automatic splits' settings do not read ({e}): none begins until they are set again (`basalt admin slots --split-above-mb N`)");
                    return Ok(());
                }
            },
        };
        let off = settings.split_above_mb == 0
            && settings.split_above_writes_per_s == 0
            && settings.merge_below_mb == 0;
        if off || !crate::services::upgrade::is_on(replicas, SLOTS_FEATURE) {
            return Ok(());
        }
        let busy_member = busy_member(replicas);
        let (statuses, _) = replicas.member_statuses(STATUS_WAIT, false).await;
        let now = Instant::now();
        let now_ms = crate::replicas::now_ms().max(0) as u64;
        let settle_ms = u64::from(settings.settle_secs) * 1000;
        let cap = replicas.settings().group_cap();
        let room = map.next_group.max(map.shards + 1) <= cap;
        let mut held: BTreeMap<GroupId, u32> = BTreeMap::new();
        for slot in 0..map.slots() {
            *held.entry(map.group_of_slot(slot)).or_default() += 1;
        }
        let weighed: Vec<Weighed> = {
            let mut state = self.0.lock().map_err(poisoned)?;
            state.last_look = Some(now);
            state.applied.retain(|g, _| held.contains_key(g));
            let mut weighed = Vec::new();
            for (&g, &slots) in &held {
                let Some(status) = statuses.get(&g) else {
                    continue;
                };
                let samples = state.applied.entry(g).or_default();
                // Samples with a gap between them (no look while a split ran, or while another
                // node led) are dropped: the window is counted afresh.
                if samples
                    .back()
                    .is_some_and(|(at, _)| now.duration_since(*at) > STALE_SAMPLE)
                {
                    samples.clear();
                }
                let last = samples.back().copied();
                samples.push_back((now, status.applied));
                // The oldest sample kept is the last one at least a window old.
                while samples
                    .get(1)
                    .is_some_and(|(at, _)| now.duration_since(*at) >= LOAD_WINDOW)
                {
                    samples.pop_front();
                }
                let rate = |(at, applied): (Instant, u64)| {
                    let secs = now.duration_since(at).as_secs_f64().max(0.001);
                    status.applied.saturating_sub(applied) as f64 / secs
                };
                // Sustained: over the whole window, and still over the last look.
                let writes_per_s = samples
                    .front()
                    .copied()
                    .filter(|(at, _)| now.duration_since(*at) >= LOAD_WINDOW)
                    .zip(last)
                    .map(|(first, last)| rate(first).min(rate(last)));
                let settled = !busy_member
                    && map
                        .settled
                        .get(&g)
                        .is_none_or(|&at| now_ms.saturating_sub(at) >= settle_ms);
                weighed.push(Weighed {
                    group: g,
                    bytes: status.bytes,
                    writes_per_s,
                    slots,
                    settled,
                    room,
                });
            }
            weighed
        };
        if let Some((group, reason)) = choose(&weighed, &settings) {
            let split = begin(replicas, group, None).await?;
            tracing::info!(parent = %group, child = %split.child, reason = reason.name(), "a group splits by itself");
            metrics::counter!("basalt_splits_auto_total", "reason" => reason.name()).increment(1);
            return Ok(());
        }
        if let Some((source, target)) =
            choose_merge(&weighed, &settings, map.shards, |g| map.merge_target(g))
        {
            begin_merge(replicas, source, Some(target), None).await?;
            tracing::info!(%source, %target, "a small group merges by itself");
            metrics::counter!("basalt_merges_auto_total", "reason" => AutoReason::Small.name())
                .increment(1);
        }
        Ok(())
    }

    /// Builds the data groups' slot indexes once `slot-index` is on, a few pages a round:
    /// true once every group's is complete (or the feature is off), so that no automatic
    /// split begins before its group's batches can be read through one.
    async fn index_slots(&self, replicas: &Replicas, map: &SlotMap) -> Result<bool> {
        if !crate::services::upgrade::is_on(replicas, INDEX_FEATURE) {
            return Ok(true);
        }
        // The index is one key more per object: none is entered while a member drains or
        // runs low on disk (nor does a split begin).
        if busy_member(replicas) {
            return Ok(false);
        }
        let started = Instant::now();
        let pending: Vec<GroupId> = {
            let state = self.0.lock().map_err(poisoned)?;
            map.data_groups()
                .into_iter()
                .filter(|g| !state.indexed.contains(g))
                .collect()
        };
        let mut left = pending.len();
        metrics::gauge!("basalt_slot_index_pending_groups").set(left as f64);
        for group in pending {
            loop {
                if started.elapsed() >= ROUND_BUDGET {
                    return Ok(false);
                }
                let cmd = Command::IndexSlots {
                    total: map.slots(),
                    limit: INDEX_PAGE,
                };
                let answer = replicas.propose(group, cmd).await.map(|a| a.result);
                match answer {
                    Ok(CommandResult::Purged { count, next }) => {
                        metrics::counter!("basalt_slot_index_entered_total").increment(count);
                        if next.is_none() {
                            tracing::info!(%group, "the group's slot index is complete");
                            self.0.lock().map_err(poisoned)?.indexed.insert(group);
                            left -= 1;
                            metrics::gauge!("basalt_slot_index_pending_groups").set(left as f64);
                            break;
                        }
                    }
                    // A group that does not answer is tried again next round; the others
                    // (and the automatic splits, which weigh the groups that answer) go on.
                    Ok(other) => {
                        tracing::warn!(%group, "the group's slot index was not built: {:?}", refusal(other));
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(%group, "the group's slot index was not built: {e}");
                        break;
                    }
                }
            }
        }
        Ok(true)
    }

    /// A split or merge between `a` and `b` is done: their writes a second are counted afresh.
    fn settle(&self, a: GroupId, b: GroupId) {
        let mut state = match self.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        for g in [a, b] {
            state.applied.remove(&g);
        }
    }
}

/// Whether an active member drains or runs low on disk: no split begins and no slot index
/// is built meanwhile (both write objects or keys again).
fn busy_member(replicas: &Replicas) -> bool {
    replicas
        .local_nodes()
        .iter()
        .filter(|n| n.state == crate::admin::NodeState::Active)
        .any(|n| n.draining_since_ms.is_some() || n.disk_level() >= crate::disk::DiskLevel::Low)
}

fn poisoned<T>(_: std::sync::PoisonError<T>) -> Error {
    Error::Internal("the automatic splits' state lock was poisoned".into())
}

/// `InvalidOperation` while the cluster has not finalized `slots`: `what` (splits, merges)
/// waits for it.
fn refuse_until_finalized(replicas: &Replicas, what: &str) -> Result<()> {
    if crate::services::upgrade::is_on(replicas, SLOTS_FEATURE) {
        return Ok(());
    }
    Err(Error::InvalidOperation(format!(
        "{what} are off until every member runs a build with `{SLOTS_FEATURE}` and the \
         cluster finalized it (`basalt admin upgrade status`)"
    )))
}

/// Records a split of `parent` (`basalt admin split`): half its slots, to a new group, once
/// the `splits` job has copied them. Refused while the cluster has not finalized `slots`,
/// while another split is under way, for a group of one slot, and once every group id is
/// taken.
pub async fn begin(
    replicas: &Replicas,
    parent: GroupId,
    batch: Option<u32>,
) -> Result<SplitInProgress> {
    refuse_until_finalized(replicas, "splits")?;
    // The map as the metadata group's leader holds it: a replica of this node behind it (a
    // node just resumed) would refuse for a split that is over.
    let (before, mut map) = current_at_leader(replicas).await?;
    let cap = replicas.settings().group_cap();
    let batch = batch_of(replicas, &map, parent, batch).await?;
    let split = map
        .begin_split(parent, cap, batch)
        .map_err(Error::InvalidOperation)?;
    save(replicas, before, &map).await?;
    tracing::info!(%parent, child = %split.child, slots = split.slots.len(), epoch = split.epoch, "split begun");
    metrics::counter!("basalt_splits_begun_total").increment(1);
    Ok(split)
}

/// Records a merge of every slot `source` holds into `into`, or by default into the group of
/// its family holding fewest slots (`SlotMap::merge_target`: for a split's child, the group
/// it was split from) — `basalt admin merge`. Refused as `begin` refuses, and for a group
/// that holds no slot or has no group to go into.
pub async fn begin_merge(
    replicas: &Replicas,
    source: GroupId,
    into: Option<GroupId>,
    batch: Option<u32>,
) -> Result<SplitInProgress> {
    refuse_until_finalized(replicas, "merges")?;
    let (before, mut map) = current_at_leader(replicas).await?;
    let target = match into {
        Some(t) => t,
        None => map.merge_target(source).ok_or_else(|| {
            Error::InvalidOperation(format!(
                "group {source} has no group to merge into: name one with --into"
            ))
        })?,
    };
    let batch = batch_of(replicas, &map, source, batch).await?;
    let merge = map
        .begin_merge(source, target, batch)
        .map_err(Error::InvalidOperation)?;
    save(replicas, before, &map).await?;
    tracing::info!(%source, %target, slots = merge.slots.len(), epoch = merge.epoch, "merge begun");
    metrics::counter!("basalt_merges_begun_total").increment(1);
    Ok(merge)
}

/// How many slots a split or merge of `group` moves at a time (none: all at once, and always
/// until `slot-batches` is finalized): `asked` (0: all at once), else about `moveBatchKb` of
/// the group's bytes on its leader's disk, at most a second of `moveKbPerS`
/// (`split_pace::batch_kb`, `batch_slots`).
async fn batch_of(
    replicas: &Replicas,
    map: &SlotMap,
    group: GroupId,
    asked: Option<u32>,
) -> Result<Option<u32>> {
    // A build without batches may be brought back until they are finalized.
    if !crate::services::upgrade::is_on(replicas, BATCHES_FEATURE) {
        if asked.is_some() {
            tracing::warn!(%group, "batches are off until `{BATCHES_FEATURE}` is finalized: every slot moves at once");
        }
        return Ok(None);
    }
    if let Some(n) = asked {
        return Ok((n > 0).then_some(n));
    }
    let settings = local_settings(replicas)?;
    let (statuses, _) = replicas.member_statuses(STATUS_WAIT, false).await;
    let bytes = statuses.get(&group).map_or(0, |s| s.bytes);
    let held = map.slots_of(group).len() as u64;
    let batch_kb = split_pace::batch_kb(settings.move_batch_kb, settings.move_kb_per_s);
    Ok(batch_slots(bytes, held, batch_kb))
}

/// The splits' settings as this node's replica of the metadata group holds them (the defaults
/// when none are set or they do not read).
fn local_settings(replicas: &Replicas) -> Result<SplitSettings> {
    Ok(replicas
        .local_meta_record(Namespace::Cluster, SETTINGS_KEY)?
        .and_then(|v| SplitSettings::from_stored(v).ok())
        .unwrap_or_default())
}

/// Slots of a group of `bytes` in `held` slots that hold about `batch_kb` KiB (at least one;
/// none: all at once, when `batch_kb` is 0 or the group's files hold nothing yet).
fn batch_slots(bytes: u64, held: u64, batch_kb: u32) -> Option<u32> {
    if batch_kb == 0 || bytes == 0 || held == 0 {
        return None;
    }
    let per_slot = (bytes / held).max(1);
    let n = (u64::from(batch_kb) << 10) / per_slot;
    Some(n.clamp(1, u64::from(u32::MAX)) as u32)
}

/// Takes a retired group out of the placement record (when the cluster keeps one), so that
/// placement and the rebalancer stop keeping replicas of it.
async fn unplace(replicas: &Replicas, group: GroupId) -> Result<()> {
    replicas
        .update_meta_record(Namespace::Cluster, rebalance::PLACEMENT_KEY, 5, |raw| {
            let Some(raw) = raw else {
                return Ok(None);
            };
            let mut record: rebalance::PlacementRecord = serde_json::from_value(raw.clone())?;
            if record.groups.remove(&group).is_none() {
                return Ok(None);
            }
            Ok(Some(serde_json::to_value(&record)?))
        })
        .await?;
    Ok(())
}

/// When the split of each child was switched, as this metadata leader saw it (a new leader
/// waits the grace again), and whether the child has adopted its slots since (a new leader
/// asks it again: adopting is idempotent).
#[derive(Default)]
pub struct Switched(Mutex<BTreeMap<(GroupId, u64), SwitchSeen>>);

/// What this metadata leader saw of one switch.
struct SwitchSeen {
    at: Instant,
    adopted: bool,
}

impl Switched {
    /// The switch of `child` at `epoch` as seen (first seen now); what is older is forgotten
    /// (a merge's target may take in slots again at a later epoch).
    fn seen<T>(&self, child: GroupId, epoch: u64, f: impl FnOnce(&mut SwitchSeen) -> T) -> T {
        let mut all = match self.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        all.retain(|&(_, e), _| e >= epoch);
        let seen = all.entry((child, epoch)).or_insert_with(|| SwitchSeen {
            at: Instant::now(),
            adopted: false,
        });
        f(seen)
    }

    /// How long ago the map switched for `child` at `epoch`.
    fn since(&self, child: GroupId, epoch: u64) -> Duration {
        self.seen(child, epoch, |s| s.at.elapsed())
    }

    /// Whether `child` adopted the slots of its switch at `epoch` since this leader saw it.
    fn adopted(&self, child: GroupId, epoch: u64) -> bool {
        self.seen(child, epoch, |s| s.adopted)
    }

    /// `child` adopted its slots: the switch's grace counts from now.
    fn set_adopted(&self, child: GroupId, epoch: u64) {
        self.seen(child, epoch, |s| {
            s.adopted = true;
            s.at = Instant::now();
        });
    }
}

/// Whether a round goes on to the next step of the split under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The phase went further: the next one may follow at once.
    Next,
    /// Wait for the next round (the switch's grace, pages left, the split done).
    Wait,
}

/// One round of the `splits` job: the split or merge under way (one at a time) goes phases
/// further — a batch frozen, copied (for up to `FROZEN_BUDGET`), switched and adopted in one
/// round, so that writes to its slots wait for no round in between — saving the map after
/// each; or, with none under way, the automatic splits look at the groups.
pub async fn round(
    replicas: &Replicas,
    switched: &Switched,
    auto: &AutoSplits,
    pace: &MovePace,
) -> Result<()> {
    let (mut before, mut map) = current(replicas)?;
    if map.splits.is_empty() {
        if !auto.index_slots(replicas, &map).await? {
            return Ok(());
        }
        return auto.round(replicas, &map).await;
    }
    pace.set_rate_kb(local_settings(replicas)?.move_kb_per_s);
    let started = Instant::now();
    while let Some(split) = map.splits.first().cloned() {
        // A batch is frozen only with most of the round left for its copy.
        if split.phase == SplitPhase::Begun && started.elapsed() > ROUND_BUDGET / 4 {
            break;
        }
        let saved = map.clone();
        // A step that fails saves nothing: the next round does it again.
        let next = step(replicas, switched, auto, pace, &mut map, &split, started).await?;
        if map != saved {
            save(replicas, before, &map).await?;
            before = Some(serde_json::to_value(&map)?);
            // Counted once saved: a step done again after a failed save counts once.
            count_finished(&split, &map);
        }
        // Past the budget, a batch just copied is still switched, and one just switched
        // adopted, at once: writes to its objects wait meanwhile.
        let finishing = matches!(split.phase, SplitPhase::Frozen | SplitPhase::Copied);
        if next == Step::Wait || (started.elapsed() >= ROUND_BUDGET && !finishing) {
            break;
        }
    }
    Ok(())
}

/// Takes `split` (the first of `map`'s) one phase further, or its copy or drop a few pages,
/// changing `map` as it goes.
async fn step(
    replicas: &Replicas,
    switched: &Switched,
    auto: &AutoSplits,
    pace: &MovePace,
    map: &mut SlotMap,
    split: &SplitInProgress,
    started: Instant,
) -> Result<Step> {
    let merge = split.kind == MoveKind::Merge;
    // A batch is frozen only once what was moved before is spent at the rate: its copy then
    // takes no more than its share.
    let freezing =
        split.phase == SplitPhase::Begun && (split.into_held() || !split.voters.is_empty());
    if freezing {
        if pace.free_in() > Duration::ZERO {
            return Ok(Step::Wait);
        }
        pace.start_batch();
    }
    match split.phase {
        SplitPhase::Begun if split.into_held() => {
            // The target takes imports of the batch's slots (and refuses writes to them), then
            // the source freezes them: from then on its objects stay as they are copied.
            let incoming = Incoming {
                from: split.parent,
                slots: split.slots.clone(),
                total: map.slots(),
                epoch: split.epoch,
                adopted: false,
            };
            propose_done(replicas, split.child, Command::OpenImports(incoming)).await?;
            freeze(replicas, map, split).await?;
        }
        SplitPhase::Begun if split.voters.is_empty() => {
            // The child's voters, chosen once: the parent's, as its leader reports them.
            let (statuses, _) = replicas.member_statuses(STATUS_WAIT, false).await;
            let voters = statuses
                .get(&split.parent)
                .map(|s| s.voters.clone())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    Error::Unavailable(format!("group {} reported no leader", split.parent))
                })?;
            place_child(replicas, split, &voters).await?;
            if let Some(s) = map.splits.iter_mut().find(|s| s.child == split.child) {
                s.voters = voters;
            }
        }
        SplitPhase::Begun => {
            start_child(replicas, split).await?;
            freeze(replicas, map, split).await?;
        }
        SplitPhase::Frozen => {
            let mut cursor = split.cursor.as_deref().map(decode_cursor).transpose()?;
            let mut phase = SplitPhase::Frozen;
            while started.elapsed() < FROZEN_BUDGET {
                let (next, copied) = copy_page(replicas, split, cursor.clone(), pace).await?;
                metrics::counter!("basalt_split_objects_copied_total").increment(copied);
                crate::failpoints::pause("split-copied-page").await;
                match next {
                    Some(next) => cursor = Some(next),
                    None => {
                        phase = SplitPhase::Copied;
                        cursor = None;
                        break;
                    }
                }
            }
            let cursor = cursor.map(|c| hex(&c));
            set_phase(map, split.child, phase, cursor);
            if phase != SplitPhase::Copied {
                return Ok(Step::Wait);
            }
            tracing::info!(parent = %split.parent, child = %split.child, batch = split.batch, "split: objects copied");
        }
        SplitPhase::Copied => {
            // No page a former metadata leader still sends is taken once the map names the
            // child: it would undo the child's own writes. (A group that holds slots already
            // refuses writes to the batch's until it adopts them, after the switch.)
            if !split.into_held() {
                propose_done(replicas, split.child, Command::SealImports).await?;
            }
            crate::failpoints::pause("split-sealed").await;
            map.switch(split.child).map_err(Error::Internal)?;
            tracing::info!(parent = %split.parent, child = %split.child, epoch = split.epoch, batch = split.batch, kind = ?split.kind, "split: the map names the child");
        }
        SplitPhase::Switched => {
            if split.into_held() && !switched.adopted(split.child, split.epoch) {
                // The map names the target: it takes writes to the slots (a writer refused
                // meanwhile tries again a moment later) and no more imports. Done already is
                // done; a node routing by a map older than the split it once made is refused.
                // Asked once per switch by this leader, not each round of the grace and drop.
                let adopt = Command::AdoptSlots {
                    from: split.parent,
                    epoch: split.epoch,
                };
                propose_done(replicas, split.child, adopt).await?;
                switched.set_adopted(split.child, split.epoch);
            }
            if switched.since(split.child, split.epoch) < SWITCH_GRACE {
                return Ok(Step::Wait);
            }
            let mut left = true;
            let limit = pace.drop_limit(DROP_PAGE);
            while left && started.elapsed() < ROUND_BUDGET {
                // Nothing waits for the drop but the next batch: a page goes once what was
                // moved before is spent at the rate, else a later round goes on (the job never
                // sleeps: the scheduler runs its jobs one after another).
                if pace.free_in() > Duration::ZERO {
                    break;
                }
                let purged = replicas
                    .propose(
                        split.parent,
                        Command::DropSlots {
                            child: split.child,
                            limit,
                            epoch: Some(split.epoch),
                        },
                    )
                    .await?
                    .result;
                left = match purged {
                    CommandResult::Purged { next, count } => {
                        pace.charge(pace.dropped_bytes(count));
                        next.is_some()
                    }
                    other => return Err(refusal(other)),
                };
                crate::failpoints::pause("split-dropped-page").await;
            }
            if left {
                return Ok(Step::Wait);
            }
            let now_ms = crate::replicas::now_ms().max(0) as u64;
            if map.finish(split.child, now_ms) == Finished::Batched {
                tracing::info!(parent = %split.parent, child = %split.child, batch = split.batch, "batch done");
                return Ok(Step::Next);
            }
            auto.settle(split.parent, split.child);
            if merge {
                if map.retired.contains(&split.parent) {
                    unplace(replicas, split.parent).await?;
                }
                tracing::info!(source = %split.parent, target = %split.child, "merge done");
            } else {
                tracing::info!(parent = %split.parent, child = %split.child, "split done");
            }
            return Ok(Step::Wait);
        }
    }
    Ok(Step::Next)
}

/// Counts what saving `map` finished of `split` (as it was before the step): its batch, and
/// the split or merge when that was its last.
fn count_finished(split: &SplitInProgress, map: &SlotMap) {
    if split.phase != SplitPhase::Switched {
        return;
    }
    let now = map.splits.iter().find(|s| s.child == split.child);
    if now.is_some_and(|s| s.batch == split.batch) {
        return;
    }
    metrics::counter!("basalt_split_batches_total").increment(1);
    match (now, split.kind) {
        (Some(_), _) => {}
        (None, MoveKind::Merge) => metrics::counter!("basalt_merges_total").increment(1),
        (None, MoveKind::Split) => metrics::counter!("basalt_splits_total").increment(1),
    }
}

/// Freezes the split's or merge's slots in its source (`FreezeSlots`): from then on their
/// objects stay as they are copied. The map's record goes to the `Frozen` phase.
async fn freeze(replicas: &Replicas, map: &mut SlotMap, split: &SplitInProgress) -> Result<()> {
    let frozen = Frozen {
        child: split.child,
        slots: split.slots.clone(),
        total: map.slots(),
        epoch: split.epoch,
        dropped_through: None,
    };
    crate::failpoints::pause("split-before-freeze").await;
    propose_done(replicas, split.parent, Command::FreezeSlots(frozen)).await?;
    set_phase(map, split.child, SplitPhase::Frozen, None);
    tracing::info!(parent = %split.parent, child = %split.child, kind = ?split.kind, "slots frozen");
    Ok(())
}

fn set_phase(map: &mut SlotMap, child: GroupId, phase: SplitPhase, cursor: Option<String>) {
    if let Some(s) = map.splits.iter_mut().find(|s| s.child == child) {
        s.phase = phase;
        s.cursor = cursor;
    }
}

/// Proposes a split step to `group`, whose answer must be `Done`.
async fn propose_done(replicas: &Replicas, group: GroupId, cmd: Command) -> Result<()> {
    match replicas.propose(group, cmd).await?.result {
        CommandResult::Done => Ok(()),
        other => Err(refusal(other)),
    }
}

fn refusal(result: CommandResult) -> Error {
    match result {
        CommandResult::Rejected(e) => e,
        other => Error::Internal(format!("a split step answered {other:?}")),
    }
}

/// Names the child in the placement record with the voters it starts with (when the cluster
/// keeps one), so that placement keeps it there until the rebalancer moves it.
async fn place_child(
    replicas: &Replicas,
    split: &SplitInProgress,
    voters: &[NodeId],
) -> Result<()> {
    let Some(raw) = replicas
        .get_record(META_GROUP, Namespace::Cluster, rebalance::PLACEMENT_KEY)
        .await?
    else {
        return Ok(());
    };
    let mut record: rebalance::PlacementRecord = serde_json::from_value(raw.clone())?;
    if record.groups.contains_key(&split.child) {
        return Ok(());
    }
    // The parent's preferred leader first, as the record names it.
    let mut ordered: Vec<NodeId> = record
        .groups
        .get(&split.parent)
        .map(|p| p.iter().copied().filter(|n| voters.contains(n)).collect())
        .unwrap_or_default();
    let rest: Vec<NodeId> = voters
        .iter()
        .copied()
        .filter(|n| !ordered.contains(n))
        .collect();
    ordered.extend(rest);
    record.groups.insert(split.child, ordered);
    let value = serde_json::to_value(&record)?;
    replicas
        .cas_record(
            META_GROUP,
            Namespace::Cluster,
            rebalance::PLACEMENT_KEY,
            Some(raw),
            Some(value),
        )
        .await?;
    Ok(())
}

/// Starts the child group with the voters the split chose, through the first of them that
/// answers, and waits (a moment) for its first leader.
async fn start_child(replicas: &Replicas, split: &SplitInProgress) -> Result<()> {
    if child_answers(replicas, split.child, Duration::from_millis(300)).await {
        return Ok(());
    }
    let addrs: BTreeMap<NodeId, String> = replicas
        .local_nodes()
        .into_iter()
        .map(|n| (n.id, n.rpc_addr))
        .collect();
    let voters: BTreeMap<NodeId, String> = split
        .voters
        .iter()
        .map(|v| (*v, addrs.get(v).cloned().unwrap_or_default()))
        .collect();
    let req = AdminRequest::StartGroup {
        group: split.child,
        voters: voters.clone(),
    };
    let mut last = None;
    let mut started = false;
    for (&node, addr) in &voters {
        let answer = if node == replicas.node_id() {
            start_here(replicas, split.child, voters.clone())
                .await
                .map(|()| AdminResponse::Done)
        } else {
            replicas.router().learn(node, addr);
            replicas
                .router()
                .admin(node, &req, Duration::from_secs(5))
                .await
        };
        match answer {
            Ok(_) => {
                started = true;
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    if !started {
        return Err(last.unwrap_or_else(|| {
            Error::Unavailable(format!("no voter of group {} answers", split.child))
        }));
    }
    if !child_answers(replicas, split.child, CHILD_WAIT).await {
        return Err(Error::Unavailable(format!(
            "group {} was started and has no leader yet",
            split.child
        )));
    }
    Ok(())
}

/// Whether `child` has a leader that answers a read within `within`.
async fn child_answers(replicas: &Replicas, child: GroupId, within: Duration) -> bool {
    let probe = ReadRequest::GetRecord {
        ns: Namespace::Cluster.name().to_string(),
        key: SLOTS_KEY.to_string(),
    };
    replicas.read_within(child, probe, within).await.is_ok()
}

/// Makes this node's replica of `child` and initializes the group with exactly `voters`
/// (every start of one split names the same, so any of them may), when this node is one of
/// them and its slot map names the split. Done already is done.
pub async fn start_here(
    replicas: &Replicas,
    child: GroupId,
    voters: BTreeMap<NodeId, String>,
) -> Result<()> {
    if let Err(e) = replicas.refresh_slot_map() {
        tracing::warn!("{e}");
    }
    if !replicas
        .slot_map()
        .splits
        .iter()
        .any(|s| s.child == child && voters.keys().eq(s.voters.iter()))
    {
        return Err(Error::Conflict(format!(
            "this node's slot map has no split to group {child} with these voters (yet)"
        )));
    }
    if !voters.contains_key(&replicas.node_id()) {
        return Err(Error::InvalidOperation(format!(
            "node {} is not a voter of group {child}",
            replicas.node_id()
        )));
    }
    let child_raft = replicas.ensure_group(child).await?;
    let initialized = child_raft
        .is_initialized()
        .await
        .map_err(|e| Error::Internal(e.to_string()))?;
    if !initialized {
        tracing::info!(%child, voters = voters.len(), "starting a split's child group");
        let members: BTreeMap<NodeId, BasicNode> = voters
            .into_iter()
            .map(|(id, addr)| (id, BasicNode::new(addr)))
            .collect();
        child_raft
            .initialize(members)
            .await
            .map_err(|e| Error::Internal(format!("initializing group {child}: {e}")))?;
    }
    Ok(())
}

/// Copies one page of the parent's frozen objects (with the classes' index declarations on
/// the first) to the child, in imports of the pace's pieces (counted against it): the cursor
/// to go on from, `None` once every object was copied, and how many it copied.
async fn copy_page(
    replicas: &Replicas,
    split: &SplitInProgress,
    after: Option<Vec<u8>>,
    pace: &MovePace,
) -> Result<(Option<Vec<u8>>, u64)> {
    let first = after.is_none();
    let page = replicas
        .read(split.parent, ReadRequest::ExportSlots { after })
        .await?;
    let ReadResponse::Exported {
        metas,
        objects,
        next,
    } = page
    else {
        return Err(unexpected(page));
    };
    if first && !metas.is_empty() {
        propose_done(replicas, split.child, Command::ImportIndexMeta(metas)).await?;
    }
    let copied = objects.len() as u64;
    // As fast as it goes (writes to the batch wait), counted against the pace.
    for piece in pace.pieces(objects, MAX_IMPORT_BYTES as u64) {
        pace.charge(piece.iter().map(|o| o.stored.len() as u64).sum());
        propose_done(replicas, split.child, Command::ImportObjects(piece)).await?;
    }
    Ok((next, copied))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_cursor(s: &str) -> Result<Vec<u8>> {
    let bad = || Error::Internal(format!("a split's copy cursor is not hex: {s}"));
    if !s.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
                .ok_or_else(bad)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_holds_about_the_setting_of_a_groups_bytes() {
        // 48 MiB in 256 slots: 192 KiB a slot, 2 MiB is 10 slots.
        assert_eq!(batch_slots(48 << 20, 256, 2048), Some(10));
        // Slots larger than a batch: one at a time.
        assert_eq!(batch_slots(48 << 30, 256, 2048), Some(1));
        // Off, or nothing in the group's files yet: all at once.
        assert_eq!(batch_slots(48 << 20, 256, 0), None);
        assert_eq!(batch_slots(0, 256, 2048), None);
        assert_eq!(batch_slots(1 << 20, 0, 2048), None);
    }

    #[test]
    fn a_switch_is_adopted_once_per_leader_and_forgotten_by_a_later_epoch() {
        let switched = Switched::default();
        let child = GroupId::new(17);
        assert!(!switched.adopted(child, 5));
        switched.set_adopted(child, 5);
        assert!(switched.adopted(child, 5));
        // The grace counts from the adoption.
        assert!(switched.since(child, 5) < SWITCH_GRACE);
        // The same target taking in slots again, at a later epoch, is asked again; the
        // earlier switch is forgotten.
        assert!(!switched.adopted(child, 7));
        assert!(!switched.adopted(child, 5));
    }

    #[test]
    fn a_cursor_reads_back_as_it_was_saved() {
        let key = vec![0u8, 1, 0x6f, 0xff, b'a', b'/', 0x10];
        assert_eq!(decode_cursor(&hex(&key)).expect("hex"), key);
        assert!(decode_cursor("abc").is_err());
        assert!(decode_cursor("zz").is_err());
    }

    fn weighed(group: u32, mb: u64, writes_per_s: Option<f64>) -> Weighed {
        Weighed {
            group: GroupId::new(group),
            bytes: mb << 20,
            writes_per_s,
            slots: 64,
            settled: true,
            room: true,
        }
    }

    #[test]
    fn the_largest_group_above_the_size_limit_splits_first() {
        let settings = SplitSettings::default();
        let groups = [
            weighed(1, 300, Some(10.0)),
            weighed(2, 900, None),
            weighed(3, 100, Some(9_000.0)),
        ];
        assert_eq!(
            choose(&groups, &settings),
            Some((GroupId::new(2), AutoReason::Size))
        );
    }

    #[test]
    fn the_busiest_group_above_the_load_limit_splits_when_none_is_too_large() {
        let settings = SplitSettings::default();
        let groups = [
            weighed(1, 10, Some(3_500.0)),
            weighed(2, 10, Some(8_000.0)),
            weighed(3, 10, None),
            weighed(4, 10, Some(2_000.0)),
        ];
        assert_eq!(
            choose(&groups, &settings),
            Some((GroupId::new(2), AutoReason::Load))
        );
        // A load not watched for a whole window yet, or under the limit, splits nothing.
        assert_eq!(choose(&groups[2..], &settings), None);
        // Load alone does not split a group of few slots (its writes go to a few objects).
        let mut few = weighed(5, 10, Some(50_000.0));
        few.slots = LOAD_SPLIT_MIN_SLOTS - 1;
        assert_eq!(choose(&[few], &settings), None);
        few.bytes = 300 << 20;
        assert_eq!(
            choose(&[few], &settings),
            Some((GroupId::new(5), AutoReason::Size))
        );
        few.slots = 1;
        assert_eq!(choose(&[few], &settings), None);
    }

    #[test]
    fn limits_at_zero_and_groups_that_may_not_split_are_left() {
        let off = SplitSettings {
            split_above_mb: 0,
            split_above_writes_per_s: 0,
            ..SplitSettings::default()
        };
        let groups = [weighed(1, 10_000, Some(1e6))];
        assert_eq!(choose(&groups, &off), None);
        let mut settled = weighed(1, 10_000, Some(1e6));
        settled.settled = false;
        assert_eq!(choose(&[settled], &SplitSettings::default()), None);
        let mut no_id_left = weighed(1, 10_000, Some(1e6));
        no_id_left.room = false;
        assert_eq!(choose(&[no_id_left], &SplitSettings::default()), None);
        // Exactly at the limit is not above it.
        assert_eq!(
            choose(&[weighed(1, 256, Some(3_000.0))], &SplitSettings::default()),
            None
        );
    }

    /// Groups 1–4 are the shards'; 5 and 6 were split off 1, 7 off 2. Each merges back into
    /// the group given by `target_of` (here: 1 for 5 and 6, 2 for 7).
    fn family(g: GroupId) -> Option<GroupId> {
        match g.get() {
            5 | 6 => Some(GroupId::new(1)),
            7 => Some(GroupId::new(2)),
            _ => None,
        }
    }

    #[test]
    fn the_smallest_quiet_child_merges_back_below_the_limit() {
        let settings = SplitSettings::default();
        let groups = [
            weighed(1, 20, Some(5.0)),
            weighed(2, 10, Some(5.0)),
            weighed(5, 30, Some(5.0)),
            weighed(6, 25, Some(5.0)),
            weighed(7, 30, Some(5.0)),
        ];
        // 6 + 1 = 45 MiB and 7 + 2 = 40 MiB are under 64: the smaller sum goes first. 5 + 1 =
        // 50 would go too, later. Groups of the shards are never merged away.
        assert_eq!(
            choose_merge(&groups, &settings, 4, family),
            Some((GroupId::new(7), GroupId::new(2)))
        );
        // Busy (a quarter of the load limit or more), not watched a whole window, or lately
        // split: left.
        let mut busy = groups;
        busy[4].writes_per_s = Some(750.0);
        busy[3].writes_per_s = None;
        busy[2].settled = false;
        assert_eq!(choose_merge(&busy, &settings, 4, family), None);
        // Their target busy: left too.
        let mut target_busy = groups;
        target_busy[1].writes_per_s = Some(1_000.0);
        assert_eq!(
            choose_merge(&target_busy, &settings, 4, family),
            Some((GroupId::new(6), GroupId::new(1)))
        );
        // At or above the limit together, or merges off: none.
        let big = [weighed(1, 40, Some(1.0)), weighed(5, 24, Some(1.0))];
        assert_eq!(choose_merge(&big, &settings, 4, family), None);
        let off = SplitSettings {
            merge_below_mb: 0,
            ..settings
        };
        assert_eq!(choose_merge(&groups, &off, 4, family), None);
        // With no load limit, quiet is under a quarter of the default one.
        let no_load = SplitSettings {
            split_above_writes_per_s: 0,
            ..settings
        };
        let mut loud = groups;
        loud[4].writes_per_s = Some(1e6);
        loud[1].writes_per_s = Some(700.0);
        assert_eq!(
            choose_merge(&loud, &no_load, 4, family),
            Some((GroupId::new(6), GroupId::new(1)))
        );
        // A record from before merges with automatic splits off keeps merges off.
        let old = SplitSettings::from_stored(json!({"splitAboveMb": 0, "splitAboveWritesPerS": 0}))
            .expect("old record");
        assert_eq!(old.merge_below_mb, 0);
        let old = SplitSettings::from_stored(json!({"splitAboveMb": 100})).expect("old record");
        assert_eq!(old.merge_below_mb, 64);
    }
}
