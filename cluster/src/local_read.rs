//! Reads served from this node's copy of a group, after the caller made them linearizable
//! (the group's leader confirmed its leadership and applied up to the read index) or, for the
//! metadata group, knowingly stale. Records are read through `storage::records`, queries run by
//! `query::shard_exec`; `replicas` calls this.

use serde_json::Value;

use crate::acl::{allows, Access};
use crate::cancel::Cancel;
use crate::command::{ImportedObject, ReadRequest, ReadResponse, MAX_IMPORT_BYTES};
use crate::error::{Error, Result};
use crate::ids::GroupId;
use crate::names::AppId;
use crate::namespace::Namespace;
use crate::object::StoredObject;
use crate::query::index::IndexMeta;
use crate::query::shard_exec::{aggregate_shards, scan_shards, split_exclusion};
use crate::slots::GroupSplits;
use crate::storage::keys::{self, CF_SM};
use crate::storage::records::{live_record, live_records_with_prefix, ReplicaState, StoredRecord};
use crate::storage::store::ReadView;
use crate::storage::Store;

/// Serves `req` from the store: a scan or aggregation over every group of `groups` (read
/// together, `query::shard_exec`, which stops once `cancel` trips), any other read from its
/// one group. A bulk read leaves out the slots a split gives to a child by the map it was
/// routed by (`ReadRequest::AtEpoch`; epoch 0 without it), and an object read of a slot the
/// group no longer answers for is refused `Moved` (`slots::GroupSplits`).
pub fn serve_read(
    store: &Store,
    groups: &[GroupId],
    req: &ReadRequest,
    now_ms: i64,
    cancel: &Cancel,
) -> Result<ReadResponse> {
    let (epoch, req) = match req {
        ReadRequest::AtEpoch { epoch, read } => (*epoch, read.as_ref()),
        other => (0, other),
    };
    Ok(match req {
        ReadRequest::AtEpoch { .. } => {
            return Err(Error::InvalidOperation(
                "a read at an epoch holds another such read".into(),
            ))
        }
        ReadRequest::GetObject {
            app,
            class,
            object_id,
            principals,
        } => {
            refuse_moved(store, one_group(groups)?, app, class, object_id)?;
            let obj = store
                .get(
                    CF_SM,
                    &keys::object_key(one_group(groups)?, app, class, object_id),
                )?
                .map(|b| StoredObject::decode(&b))
                .transpose()?
                .filter(|o| allows(&o.fields, principals, Access::Read))
                .map(|o| o.render(object_id));
            ReadResponse::Object(obj)
        }
        ReadRequest::GetStoredObject {
            app,
            class,
            object_id,
        } => {
            refuse_moved(store, one_group(groups)?, app, class, object_id)?;
            ReadResponse::Stored(
                store
                    .get(
                        CF_SM,
                        &keys::object_key(one_group(groups)?, app, class, object_id),
                    )?
                    .map(|b| StoredObject::decode(&b))
                    .transpose()?,
            )
        }
        ReadRequest::ScanStoredObjects { app, class } => {
            let group = one_group(groups)?;
            let view = store.view();
            let excluded = split_exclusion(&view, group, epoch)?;
            let prefix = keys::class_prefix(group, app, class);
            let end = keys::separated_end(&prefix);
            let mut out = Vec::new();
            view.scan(CF_SM, &prefix, &end, |k, v| {
                let id = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
                if !excluded.as_ref().is_some_and(|f| f.holds(app, class, &id)) {
                    out.push((id, StoredObject::decode(v)?));
                }
                Ok(true)
            })?;
            ReadResponse::StoredObjects(out)
        }
        ReadRequest::GetRecord { ns, key } => {
            ReadResponse::Record(get_record(store, one_group(groups)?, ns, key, now_ms)?)
        }
        ReadRequest::ListRecords { ns, prefix } => ReadResponse::Records(live_records_with_prefix(
            store,
            one_group(groups)?,
            ns,
            prefix,
            now_ms,
        )?),
        ReadRequest::ExportSlots { after } => {
            export_slots(store, one_group(groups)?, after.as_deref())?
        }
        ReadRequest::ScanObjects(scan) => {
            let (rows, count) = scan_shards(store, groups, scan, epoch, cancel)?;
            ReadResponse::Scan { rows, count }
        }
        ReadRequest::Aggregate(agg) => {
            fail::fail_point!("aggregate-read", |_| Err(Error::Internal(
                "fail point aggregate-read".into()
            )));
            ReadResponse::Groups(aggregate_shards(store, groups, agg, epoch, cancel)?)
        }
    })
}

/// `Moved` when `group` no longer answers for the object: its slot went to a split's child
/// (`GroupSplits::moved_object`), and the reader's map is to name the child.
fn refuse_moved(
    store: &Store,
    group: GroupId,
    app: &str,
    class: &str,
    object_id: &str,
) -> Result<()> {
    let bytes = store.get(CF_SM, &keys::split_key(group))?;
    match GroupSplits::from_stored(bytes.as_deref())?.moved_object(app, class, object_id) {
        Some(epoch) => Err(Error::Moved { epoch }),
        None => Ok(()),
    }
}

/// Keys one page of `ExportSlots` looks at, at most (without a slot index most may be of slots
/// that stay: a batch of a few slots is spread over the whole group).
const EXPORT_LOOK: usize = 200_000;

/// How long one page of `ExportSlots` reads, at most: a page of large or uncached objects ends
/// early (with what it found and the cursor after it) rather than pass its caller's deadline.
const EXPORT_READ: std::time::Duration = std::time::Duration::from_millis(250);

/// A page of the objects of the slots `group` froze, after the cursor `after`: up to
/// `MAX_IMPORT_BYTES` of them (one larger object alone), looking at `EXPORT_LOOK` keys at most
/// for `EXPORT_READ` at most (at least one key), from one snapshot; the first page carries the
/// group's index declarations. Through the group's slot index when it is complete (the frozen
/// slots' entries only; the cursor is then an entry's key), else by looking at every object
/// (the cursor an object's key); a copy goes on the way it began. `Conflict` when the group
/// freezes nothing.
fn export_slots(store: &Store, group: GroupId, after: Option<&[u8]>) -> Result<ReadResponse> {
    let view = store.view();
    let bytes = view.get(CF_SM, &keys::split_key(group))?;
    let splits = GroupSplits::from_stored(bytes.as_deref())?;
    let Some(frozen) = splits.frozen.as_ref() else {
        return Err(Error::Conflict(format!("group {group} freezes no slots")));
    };
    let metas = match after {
        Some(_) => Vec::new(),
        None => index_metas(&view, group)?,
    };
    let by_index = match after {
        Some(k) => k.get(4) == Some(&keys::SM_SLOT_INDEX),
        None => splits.slot_index_of(frozen.total).is_some(),
    };
    let mut page = ExportPage {
        objects: Vec::new(),
        bytes: 0,
        looked: 0,
        more: false,
        last: None,
        began: std::time::Instant::now(),
    };
    if by_index {
        let from = after.and_then(keys::slot_of_entry);
        for &slot in frozen.slots.range(from.unwrap_or(0)..) {
            let (mut start, end) = keys::slot_range(group, slot);
            if let Some(k) = after.filter(|_| from == Some(slot)) {
                start = [k, &[0u8]].concat();
            }
            view.scan(CF_SM, &start, &end, |entry, _| {
                let Some(object) = keys::object_of_slot_entry(entry) else {
                    return Ok(true);
                };
                let stored = view.get(CF_SM, &object)?;
                let found = stored.as_deref().map(|v| (object.as_slice(), v));
                Ok(page.offer(entry, found, |_, _, _| true))
            })?;
            if page.more {
                break;
            }
        }
    } else {
        let start = match after {
            Some(k) => [k, &[0u8]].concat(),
            None => keys::sm_family(group, keys::SM_OBJECT),
        };
        let end = keys::sm_family(group, keys::SM_OBJECT + 1);
        view.scan(CF_SM, &start, &end, |k, v| {
            Ok(page.offer(k, Some((k, v)), |app, class, id| {
                frozen.holds(app, class, id)
            }))
        })?;
    }
    let via = if by_index { "index" } else { "scan" };
    metrics::counter!("basalt_split_keys_read_total", "via" => via).increment(page.looked as u64);
    let next = match page.more {
        true => page.last.or_else(|| after.map(<[u8]>::to_vec)),
        false => None,
    };
    Ok(ReadResponse::Exported {
        metas,
        objects: page.objects,
        next,
    })
}

/// One page of `export_slots` as it fills.
struct ExportPage {
    objects: Vec<ImportedObject>,
    bytes: usize,
    looked: usize,
    /// The page ended before the last key: more are to be looked at.
    more: bool,
    /// The cursor: the last key looked at.
    last: Option<Vec<u8>>,
    began: std::time::Instant,
}

impl ExportPage {
    /// Looks at the key `cursor` and the object it names (its key and stored value, if any),
    /// taking the object when `wanted`; false once the page is full.
    fn offer(
        &mut self,
        cursor: &[u8],
        object: Option<(&[u8], &[u8])>,
        wanted: impl Fn(&str, &str, &str) -> bool,
    ) -> bool {
        let out_of_time = self.looked > 0
            && self.looked.is_multiple_of(256)
            && self.began.elapsed() >= EXPORT_READ;
        if self.looked == EXPORT_LOOK || out_of_time {
            self.more = true;
            return false;
        }
        if let Some((key, v)) = object {
            if let Some((app, class, object_id)) = keys::parse_object_key(key) {
                if wanted(&app, &class, &object_id) {
                    if !self.objects.is_empty() && self.bytes + v.len() > MAX_IMPORT_BYTES {
                        self.more = true;
                        return false;
                    }
                    self.bytes += v.len();
                    self.objects.push(ImportedObject {
                        app: AppId::stored(app),
                        class,
                        object_id,
                        stored: v.to_vec(),
                    });
                }
            }
        }
        self.looked += 1;
        self.last = Some(cursor.to_vec());
        true
    }
}

/// The index declarations of every class `group` holds (its `IndexMeta` records).
fn index_metas(view: &ReadView<'_>, group: GroupId) -> Result<Vec<(AppId, String, IndexMeta)>> {
    let prefix = keys::record_ns_prefix(group, Namespace::IndexMeta.name());
    let end = keys::separated_end(&prefix);
    let mut out = Vec::new();
    view.scan(CF_SM, &prefix, &end, |k, v| {
        let key = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
        if let Some((app, class)) = key.split_once('/') {
            let rec = StoredRecord::decode(v)?;
            if let Ok(meta) = serde_json::from_value::<IndexMeta>(rec.value) {
                out.push((AppId::stored(app.to_string()), class.to_string(), meta));
            }
        }
        Ok(true)
    })?;
    Ok(out)
}

/// The one group a point read names.
fn one_group(groups: &[GroupId]) -> Result<GroupId> {
    match groups {
        [group] => Ok(*group),
        _ => Err(Error::InvalidOperation(format!(
            "a point read names one group, not {}",
            groups.len()
        ))),
    }
}

/// A record's value unless it is absent or expired at `now_ms`.
pub fn get_record(
    store: &Store,
    group: GroupId,
    ns: &str,
    key: &str,
    now_ms: i64,
) -> Result<Option<Value>> {
    let state = ReplicaState { store, group };
    Ok(live_record(&state, ns, key, Some(now_ms))?.map(|r| r.value))
}
