//! Splits (decisions/0038): `begin` records a split of a data group in the slot map's record
//! (`basalt admin split`), and the scheduler's `splits` job brings it a step further each round
//! — chooses the child's voters once (the parent's, also named in the placement record),
//! starts the child with them (`AdminRequest::StartGroup` to one of them: `start_here`),
//! freezes the slots in the parent, copies their objects to the child in pages of at most
//! `command::MAX_IMPORT_BYTES`, seals the child's imports, switches the map, and drops the
//! copies from the parent — saving how far it got in the record, so that a new metadata
//! leader goes on where the last one stopped. Neighbours: `slots` (the map), `statemachine::split_writes`
//! (the commands), `local_read` (the parent's pages), `replicas` (routing), `scheduler`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openraft::BasicNode;
use serde_json::{json, Value};

use crate::admin::{AdminRequest, AdminResponse};
use crate::command::{Command, CommandResult, ReadRequest, ReadResponse};
use crate::error::{Error, Result};
use crate::ids::{GroupId, NodeId, META_GROUP};
use crate::namespace::Namespace;
use crate::replicas::{unexpected, Replicas};
use crate::services::rebalance;
use crate::slots::{Frozen, SlotMap, SplitInProgress, SplitPhase, SLOTS_KEY};

/// What this build adds that older builds cannot read (`services::upgrade`): slot maps with
/// splits, the split commands and reads. Splits begin only once it is finalized.
pub const FEATURES: [&str; 1] = ["slots"];

/// Objects one `DropSlots` deletes.
const DROP_PAGE: u32 = 2_000;

/// How long one round works before it saves and leaves the scheduler to its other jobs.
const ROUND_BUDGET: Duration = Duration::from_secs(1);

/// After the switch, how long the parent keeps the copies before dropping them: nodes take up
/// the new map within a refresh (250 ms), and until then their reads of the parent see every
/// object (a read by an older map after the drop began is refused `Moved` and read again).
const SWITCH_GRACE: Duration = Duration::from_secs(2);

/// How long the parent's leader is waited for when the child's voters are chosen.
const STATUS_WAIT: Duration = Duration::from_secs(2);

/// How long the child's first leader is waited for in one round.
const CHILD_WAIT: Duration = Duration::from_secs(2);

/// The slot map's record as stored (none until a first split) and the map it holds, from this
/// node's replica of the metadata group.
fn current(replicas: &Replicas) -> Result<(Option<Value>, SlotMap)> {
    let settings = replicas.settings();
    let record = replicas.local_meta_record(Namespace::Cluster, SLOTS_KEY)?;
    let map = match &record {
        Some(v) => SlotMap::from_record(v.clone(), settings.shards, settings.group_cap())
            .map_err(|e| Error::Internal(format!("the slot map record: {e}")))?,
        None => SlotMap::initial(settings.shards),
    };
    Ok((record, map))
}

/// The slot map as the metadata group's leader holds it (a linearizable read).
pub(crate) async fn map_at_leader(replicas: &Replicas) -> Result<SlotMap> {
    let settings = replicas.settings();
    match replicas
        .get_record(META_GROUP, Namespace::Cluster, SLOTS_KEY)
        .await?
    {
        Some(v) => SlotMap::from_record(v, settings.shards, settings.group_cap())
            .map_err(|e| Error::Internal(format!("the slot map record: {e}"))),
        None => Ok(SlotMap::initial(settings.shards)),
    }
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
            })
        })
        .collect();
    Ok(json!({
        "epoch": map.epoch,
        "shards": map.shards,
        "slots": map.slots(),
        "groups": held,
        "splits": splits,
    }))
}

/// Records a split of `parent` (`basalt admin split`): half its slots, to a new group, once
/// the `splits` job has copied them. Refused while the cluster has not finalized `FEATURES`,
/// while another split is under way, for a group of one slot, and once every group id is
/// taken.
pub async fn begin(replicas: &Replicas, parent: GroupId) -> Result<SplitInProgress> {
    if let Some(off) = FEATURES
        .iter()
        .find(|f| !crate::services::upgrade::is_on(replicas, f))
    {
        return Err(Error::InvalidOperation(format!(
            "splits are off until every member runs a build with `{off}` and the cluster \
             finalized it (`basalt admin upgrade status`)"
        )));
    }
    let (before, mut map) = current(replicas)?;
    let cap = replicas.settings().group_cap();
    let split = map
        .begin_split(parent, cap)
        .map_err(Error::InvalidOperation)?;
    save(replicas, before, &map).await?;
    tracing::info!(%parent, child = %split.child, slots = split.slots.len(), epoch = split.epoch, "split begun");
    metrics::counter!("basalt_splits_begun_total").increment(1);
    Ok(split)
}

/// When the split of each child was switched, as this metadata leader saw it (a new leader
/// waits the grace again).
#[derive(Default)]
pub struct Switched(Mutex<BTreeMap<GroupId, Instant>>);

impl Switched {
    fn since(&self, child: GroupId) -> Duration {
        let mut at = match self.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        at.entry(child).or_insert_with(Instant::now).elapsed()
    }
}

/// One round of the `splits` job: the split under way (one at a time) goes a phase further, or
/// its copy or drop a few pages further.
pub async fn round(replicas: &Replicas, switched: &Switched) -> Result<()> {
    let (before, mut map) = current(replicas)?;
    let Some(split) = map.splits.first().cloned() else {
        return Ok(());
    };
    let started = Instant::now();
    match split.phase {
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
            place_child(replicas, &split, &voters).await?;
            if let Some(s) = map.splits.iter_mut().find(|s| s.child == split.child) {
                s.voters = voters;
            }
        }
        SplitPhase::Begun => {
            start_child(replicas, &split).await?;
            let frozen = Frozen {
                child: split.child,
                slots: split.slots.clone(),
                total: map.slots(),
                epoch: split.epoch,
                dropped_through: None,
            };
            crate::failpoints::pause("split-before-freeze").await;
            propose_done(replicas, split.parent, Command::FreezeSlots(frozen)).await?;
            set_phase(&mut map, split.child, SplitPhase::Frozen, None);
            tracing::info!(parent = %split.parent, child = %split.child, "split: slots frozen");
        }
        SplitPhase::Frozen => {
            let mut cursor = split.cursor.as_deref().map(decode_cursor).transpose()?;
            let mut phase = SplitPhase::Frozen;
            while started.elapsed() < ROUND_BUDGET {
                let (next, copied) = copy_page(replicas, &split, cursor.clone()).await?;
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
            set_phase(&mut map, split.child, phase, cursor);
            if phase == SplitPhase::Copied {
                tracing::info!(parent = %split.parent, child = %split.child, "split: objects copied");
            }
        }
        SplitPhase::Copied => {
            // No page a former metadata leader still sends is taken once the map names the
            // child: it would undo the child's own writes.
            propose_done(replicas, split.child, Command::SealImports).await?;
            crate::failpoints::pause("split-sealed").await;
            map.switch(split.child).map_err(Error::Internal)?;
            tracing::info!(parent = %split.parent, child = %split.child, epoch = split.epoch, "split: the map names the child");
        }
        SplitPhase::Switched => {
            if switched.since(split.child) < SWITCH_GRACE {
                return Ok(());
            }
            let mut left = true;
            while left && started.elapsed() < ROUND_BUDGET {
                let purged = replicas
                    .propose(
                        split.parent,
                        Command::DropSlots {
                            child: split.child,
                            limit: DROP_PAGE,
                        },
                    )
                    .await?
                    .result;
                left = match purged {
                    CommandResult::Purged { next, .. } => next.is_some(),
                    other => return Err(refusal(other)),
                };
                crate::failpoints::pause("split-dropped-page").await;
            }
            if left {
                return Ok(());
            }
            map.splits.retain(|s| s.child != split.child);
            metrics::counter!("basalt_splits_total").increment(1);
            tracing::info!(parent = %split.parent, child = %split.child, "split done");
        }
    }
    save(replicas, before, &map).await
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
/// the first) to the child: the cursor to go on from, `None` once every object was copied,
/// and how many it copied.
async fn copy_page(
    replicas: &Replicas,
    split: &SplitInProgress,
    after: Option<Vec<u8>>,
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
    if !objects.is_empty() {
        propose_done(replicas, split.child, Command::ImportObjects(objects)).await?;
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
    fn a_cursor_reads_back_as_it_was_saved() {
        let key = vec![0u8, 1, 0x6f, 0xff, b'a', b'/', 0x10];
        assert_eq!(decode_cursor(&hex(&key)).expect("hex"), key);
        assert!(decode_cursor("abc").is_err());
        assert!(decode_cursor("zz").is_err());
    }
}
