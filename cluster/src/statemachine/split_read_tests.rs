//! Reads across a split (decisions/0038): a group that froze slots for a child answers a read
//! routed by the map naming the child without them — its index counts and walks included —
//! and a read routed by an older map with them, until it drops them; from then on such a read
//! is refused `Moved` (the reader takes up the newer map), as is an object read of a slot it
//! no longer answers for. A merge is the way back: the target takes in the source's slots,
//! leaving them out of reads by an older map until the map names it for them. Reads go through
//! `local_read::serve_read`, as a leader serves them.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::apply::apply_command;
use super::staged::Staged;
use crate::acl::Principals;
use crate::cancel::Cancel;
use crate::command::{Command, CommandResult, ImportedObject, ReadRequest, ReadResponse};
use crate::error::Error;
use crate::ids::{slot_for, GroupId};
use crate::local_read::serve_read;
use crate::query::aggregate::{AggregateRequest, AggregateSpec};
use crate::query::filter::Filter;
use crate::query::{ScanRequest, SortKey};
use crate::slots::{Frozen, Incoming};
use crate::storage::keys::{self, CF_SM};
use crate::storage::Store;
use crate::update::parse_updates;

const PARENT: GroupId = GroupId::new(1);
const CHILD: GroupId = GroupId::new(5);
const TOTAL: u32 = 4 * 256;
const EPOCH: u64 = 3;

fn run(store: &Store, group: GroupId, cmd: Command) -> CommandResult {
    let mut st = Staged::new(store, group);
    let r = apply_command(&mut st, cmd).expect("apply");
    store
        .write(st.into_batch().expect("batch"), true)
        .expect("write");
    r
}

fn create(id: &str, n: i64) -> Command {
    create_with(id, n, json!({"n": n, "tag": format!("t{}", n % 5)}))
}

/// The create of object `id` of class `C` holding `body`, at time `1_000 + n`.
fn create_with(id: &str, n: i64, body: Value) -> Command {
    Command::CreateObject {
        app: "a".into(),
        class: "C".into(),
        object_id: id.into(),
        now_ms: 1_000 + n,
        updates: parse_updates(body.as_object().expect("body")).expect("updates"),
    }
}

/// The stored objects of `ids` in `group`, as a copy page carries them.
fn exported<'a>(
    store: &Store,
    group: GroupId,
    ids: impl IntoIterator<Item = &'a String>,
) -> Vec<ImportedObject> {
    ids.into_iter()
        .map(|id| ImportedObject {
            app: "a".into(),
            class: "C".into(),
            object_id: id.clone(),
            stored: store
                .get(CF_SM, &keys::object_key(group, "a", "C", id))
                .expect("get")
                .expect("stored"),
        })
        .collect()
}

fn frozen_slot(id: &str) -> bool {
    slot_for("a", "C", id, TOTAL).is_multiple_of(2)
}

fn scan(limit: usize, ordered: bool) -> ScanRequest {
    ScanRequest {
        app: "a".into(),
        class: "C".into(),
        filter: Filter::All,
        order: match ordered {
            true => vec![SortKey {
                field: "createdAt".into(),
                descending: false,
            }],
            false => vec![],
        },
        skip: 0,
        limit,
        principals: Principals::master(),
        count: true,
        keys: Vec::new(),
    }
}

fn read(
    store: &Store,
    groups: &[GroupId],
    req: ReadRequest,
    epoch: u64,
) -> Result<ReadResponse, Error> {
    serve_read(store, groups, &req.at_epoch(epoch), 0, &Cancel::never())
}

/// The count and objectIds a counted scan of `groups` answers, routed by the map of `epoch`.
fn scanned(
    store: &Store,
    groups: &[GroupId],
    ordered: bool,
    epoch: u64,
) -> Result<(u64, BTreeSet<String>), Error> {
    match read(
        store,
        groups,
        ReadRequest::ScanObjects(scan(1_000, ordered)),
        epoch,
    )? {
        ReadResponse::Scan { rows, count } => Ok((
            count,
            rows.iter()
                .filter_map(|r| r["objectId"].as_str().map(String::from))
                .collect(),
        )),
        other => panic!("{other:?}"),
    }
}

/// The count alone (`limit` 0: the class's kept counts answer it when nothing is left out).
fn counted(store: &Store, groups: &[GroupId], epoch: u64) -> Result<u64, Error> {
    match read(
        store,
        groups,
        ReadRequest::ScanObjects(scan(0, false)),
        epoch,
    )? {
        ReadResponse::Scan { count, .. } => Ok(count),
        other => panic!("{other:?}"),
    }
}

/// Objects per `tag` group of an aggregation.
fn grouped(store: &Store, groups: &[GroupId], epoch: u64) -> Result<u64, Error> {
    let agg = AggregateRequest {
        app: "a".into(),
        class: "C".into(),
        filter: Filter::All,
        spec: AggregateSpec {
            group_by: vec!["tag".into()],
            metrics: vec![],
            group_count: true,
        },
        principals: Principals::master(),
    };
    match read(store, groups, ReadRequest::Aggregate(agg), epoch)? {
        ReadResponse::Groups(g) => Ok(g.iter().map(|g| g.count).sum()),
        other => panic!("{other:?}"),
    }
}

fn stored_ids(store: &Store, group: GroupId, epoch: u64) -> Result<BTreeSet<String>, Error> {
    let req = ReadRequest::ScanStoredObjects {
        app: "a".into(),
        class: "C".into(),
    };
    match read(store, &[group], req, epoch)? {
        ReadResponse::StoredObjects(o) => Ok(o.into_iter().map(|(id, _)| id).collect()),
        other => panic!("{other:?}"),
    }
}

fn get(store: &Store, id: &str) -> Result<Option<Value>, Error> {
    let req = ReadRequest::GetObject {
        app: "a".into(),
        class: "C".into(),
        object_id: id.into(),
        principals: Principals::master(),
    };
    match read(store, &[PARENT], req, 0)? {
        ReadResponse::Object(o) => Ok(o),
        other => panic!("{other:?}"),
    }
}

fn moved(r: Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(r, Err(Error::Moved { epoch: EPOCH }))
}

/// Story — a split seen by readers: before the drop, a reader of the old map reads the parent
/// whole and a reader of the new map reads parent and child without counting a moved object
/// twice (listings, ordered walks, counts from kept totals, aggregations, stored scans); once
/// the parent has begun dropping, the old map's reads are refused `Moved`, and so are object
/// reads of the moved slots; objects it kept are read as before.
#[test]
fn reads_across_a_split_count_every_object_once() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path()).expect("store");
    split_story(&store);
}

/// The split story on `store`: the objectIds the parent kept and those the child holds.
fn split_story(store: &Store) -> (BTreeSet<String>, BTreeSet<String>) {
    let ids: Vec<String> = (0..240).map(|i| format!("obj{i:04}")).collect();
    for (i, id) in ids.iter().enumerate() {
        run(store, PARENT, create(id, i as i64));
    }
    let moving: BTreeSet<String> = ids.iter().filter(|id| frozen_slot(id)).cloned().collect();
    let kept: BTreeSet<String> = ids.iter().filter(|id| !frozen_slot(id)).cloned().collect();
    assert!(moving.len() > 80 && kept.len() > 80, "{}", moving.len());
    let all = ids.len() as u64;

    let freeze = Frozen {
        child: CHILD,
        slots: (0..TOTAL).filter(|s| s.is_multiple_of(2)).collect(),
        total: TOTAL,
        epoch: EPOCH,
        dropped_through: None,
    };
    assert_eq!(
        run(store, PARENT, Command::FreezeSlots(freeze)),
        CommandResult::Done
    );
    let imported = exported(store, PARENT, &moving);
    assert_eq!(
        run(store, CHILD, Command::ImportObjects(imported)),
        CommandResult::Done
    );

    // Sealed before the switch: a late page of the copy cannot undo the child's own writes.
    assert_eq!(run(store, CHILD, Command::SealImports), CommandResult::Done);
    assert!(matches!(
        run(store, CHILD, Command::ImportObjects(Vec::new())),
        CommandResult::Rejected(Error::Conflict(_))
    ));

    // Before the drop: the old map's reader asks the parent alone, and sees everything.
    for ordered in [false, true] {
        let (count, rows) = scanned(store, &[PARENT], ordered, 0).expect("old map");
        assert_eq!((count, rows.len() as u64), (all, all));
    }
    assert_eq!(counted(store, &[PARENT], 0).expect("count"), all);
    assert_eq!(grouped(store, &[PARENT], 0).expect("groups"), all);
    // The new map's reader asks both: every object once, however the shards are read.
    for ordered in [false, true] {
        let (count, rows) = scanned(store, &[PARENT], ordered, EPOCH).expect("parent");
        assert_eq!(rows, kept, "ordered {ordered}");
        assert_eq!(count, kept.len() as u64);
        let (count, rows) = scanned(store, &[PARENT, CHILD], ordered, EPOCH).expect("both");
        assert_eq!((count, rows.len() as u64), (all, all), "ordered {ordered}");
    }
    assert_eq!(
        counted(store, &[PARENT], EPOCH).expect("count"),
        kept.len() as u64
    );
    assert_eq!(counted(store, &[PARENT, CHILD], EPOCH).expect("count"), all);
    assert_eq!(
        grouped(store, &[PARENT, CHILD], EPOCH).expect("groups"),
        all
    );
    assert_eq!(stored_ids(store, PARENT, EPOCH).expect("stored"), kept);
    assert_eq!(
        stored_ids(store, PARENT, 0).expect("stored").len(),
        ids.len()
    );
    let some_moving = moving.iter().next().expect("one");
    assert!(
        get(store, some_moving).expect("get").is_some(),
        "frozen, not dropped"
    );

    // The drop begins: the old map's reads would miss objects, and are refused.
    let drop = |limit| Command::DropSlots {
        child: CHILD,
        limit,
        epoch: Some(EPOCH),
    };
    let other = Command::DropSlots {
        child: GroupId::new(9),
        limit: 10,
        epoch: None,
    };
    assert!(
        matches!(
            run(store, PARENT, other),
            CommandResult::Rejected(Error::Conflict(_))
        ),
        "a drop for another split's child"
    );
    let first = run(store, PARENT, drop(10));
    assert!(
        matches!(
            first,
            CommandResult::Purged {
                count: 10,
                next: Some(_)
            }
        ),
        "{first:?}"
    );
    assert!(moved(scanned(store, &[PARENT], false, 0)));
    assert!(moved(counted(store, &[PARENT], 0)));
    assert!(moved(grouped(store, &[PARENT], 0)));
    assert!(moved(stored_ids(store, PARENT, 0)));
    assert!(
        moved(get(store, some_moving)),
        "a moved object is read from the child"
    );
    assert_eq!(counted(store, &[PARENT, CHILD], EPOCH).expect("count"), all);

    // Dropped whole: the slots stay given away.
    while let CommandResult::Purged { next: Some(_), .. } = run(store, PARENT, drop(1_000)) {}
    assert!(moved(counted(store, &[PARENT], 0)));
    assert!(moved(get(store, some_moving)));
    let some_kept = kept.iter().next().expect("one");
    assert!(get(store, some_kept).expect("get").is_some());
    for ordered in [false, true] {
        let (count, rows) = scanned(store, &[PARENT, CHILD], ordered, EPOCH).expect("both");
        assert_eq!((count, rows.len() as u64), (all, all), "ordered {ordered}");
    }
    assert_eq!(
        counted(store, &[PARENT], EPOCH).expect("count"),
        kept.len() as u64
    );
    assert_eq!(counted(store, &[PARENT, CHILD], EPOCH).expect("count"), all);
    (kept, moving)
}

/// Story — the child merges back into its parent at epoch `EPOCH + 1`: the parent opens its
/// imports for the child's slots (writes to them refused `Moved`, imports of other slots
/// refused), the child freezes them and they are copied; a reader of the split's map reads
/// both without counting an object twice; the parent adopts them (writes taken, imports
/// over) and a reader of the merge's map reads the parent alone; the child drops them, and
/// readers of older maps are refused `Moved` by both.
#[test]
fn a_merge_back_into_the_parent_counts_every_object_once() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path()).expect("store");
    let (kept, mut moving) = split_story(&store);
    // The child's own write, after the switch.
    let own = (0..)
        .map(|i| format!("own{i}"))
        .find(|id| frozen_slot(id))
        .expect("an id in the child's slots");
    assert!(matches!(
        run(&store, CHILD, create(&own, 7)),
        CommandResult::Created { .. }
    ));
    moving.insert(own.clone());
    let all = (kept.len() + moving.len()) as u64;
    let merged = EPOCH + 1;
    let slots: BTreeSet<u32> = (0..TOTAL).filter(|s| s.is_multiple_of(2)).collect();

    let open = Command::OpenImports(Incoming {
        from: CHILD,
        slots: slots.clone(),
        total: TOTAL,
        epoch: merged,
        adopted: false,
    });
    assert_eq!(run(&store, PARENT, open.clone()), CommandResult::Done);
    assert_eq!(run(&store, PARENT, open), CommandResult::Done, "again");
    let freeze = Frozen {
        child: PARENT,
        slots,
        total: TOTAL,
        epoch: merged,
        dropped_through: None,
    };
    assert_eq!(
        run(&store, CHILD, Command::FreezeSlots(freeze)),
        CommandResult::Done
    );
    let refused = CommandResult::Rejected(Error::Moved { epoch: merged });
    let another = (0..)
        .map(|i| format!("new{i}"))
        .find(|id| frozen_slot(id))
        .expect("an id in the child's slots");
    assert_eq!(run(&store, CHILD, create(&another, 1)), refused);
    assert_eq!(
        run(&store, PARENT, create(&another, 1)),
        refused,
        "not the parent's before it adopts the slot"
    );
    let stray = exported(&store, PARENT, kept.iter().take(1));
    assert!(
        matches!(
            run(&store, PARENT, Command::ImportObjects(stray)),
            CommandResult::Rejected(Error::InvalidOperation(_))
        ),
        "an import of a slot the parent keeps"
    );
    assert_eq!(
        run(
            &store,
            PARENT,
            Command::ImportObjects(exported(&store, CHILD, &moving))
        ),
        CommandResult::Done
    );

    // The split's map names both: every object once, by every way of reading.
    for ordered in [false, true] {
        let (count, rows) = scanned(&store, &[PARENT, CHILD], ordered, EPOCH).expect("both");
        assert_eq!((count, rows.len() as u64), (all, all), "ordered {ordered}");
        let (_, rows) = scanned(&store, &[PARENT], ordered, EPOCH).expect("parent");
        assert_eq!(rows, kept, "the parent without what it takes in");
    }
    assert_eq!(
        counted(&store, &[PARENT, CHILD], EPOCH).expect("count"),
        all
    );
    assert_eq!(
        grouped(&store, &[PARENT, CHILD], EPOCH).expect("groups"),
        all
    );

    // Adopted: writes to the slots are the parent's, imports are over.
    assert_eq!(
        run(
            &store,
            PARENT,
            Command::AdoptSlots {
                from: CHILD,
                epoch: merged
            }
        ),
        CommandResult::Done
    );
    assert!(matches!(
        run(&store, PARENT, Command::ImportObjects(Vec::new())),
        CommandResult::Rejected(Error::Conflict(_))
    ));
    assert!(matches!(
        run(&store, PARENT, create(&another, 1)),
        CommandResult::Created { .. }
    ));
    // Steps of this merge or an earlier one, sent late by a former metadata leader, change
    // nothing.
    let stale = Command::OpenImports(Incoming {
        from: GroupId::new(6),
        slots: BTreeSet::from([1]),
        total: TOTAL,
        epoch: EPOCH,
        adopted: false,
    });
    assert!(matches!(
        run(&store, PARENT, stale),
        CommandResult::Rejected(Error::Conflict(_))
    ));
    assert!(matches!(
        run(
            &store,
            PARENT,
            Command::AdoptSlots {
                from: CHILD,
                epoch: EPOCH
            }
        ),
        CommandResult::Rejected(Error::Conflict(_))
    ));
    let all = all + 1;
    // The merge's map names the parent alone.
    for ordered in [false, true] {
        let (count, rows) = scanned(&store, &[PARENT], ordered, merged).expect("merged");
        assert_eq!((count, rows.len() as u64), (all, all), "ordered {ordered}");
    }
    assert_eq!(counted(&store, &[PARENT], merged).expect("count"), all);
    assert_eq!(grouped(&store, &[PARENT], merged).expect("groups"), all);

    // The child drops what it gave: the split's map is refused by it; a map from before the
    // split is refused by the parent, which took the slots back.
    while let CommandResult::Purged { next: Some(_), .. } = run(
        &store,
        CHILD,
        Command::DropSlots {
            child: PARENT,
            limit: 50,
            epoch: Some(merged),
        },
    ) {}
    assert!(matches!(
        counted(&store, &[CHILD], EPOCH),
        Err(Error::Moved { epoch }) if epoch == merged
    ));
    assert!(matches!(
        counted(&store, &[PARENT], 0),
        Err(Error::Moved { epoch: EPOCH })
    ));
    assert_eq!(counted(&store, &[PARENT], merged).expect("count"), all);
    assert!(get(&store, &own).expect("get").is_some());
}

/// Story — a split's second batch (decisions/0038): the child, sealed after the first, opens
/// its imports for the batch's slots (slots ≡ 1 mod 4 of those the parent kept) at the next
/// epoch; the parent freezes them and they are copied. A reader of the first batch's map
/// counts them in the parent alone, one of the second's in the child alone; once the child
/// adopts them it takes writes to them, and once the parent dropped them a reader of the
/// first batch's map is refused by it.
#[test]
fn a_splits_second_batch_goes_into_the_sealed_child() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path()).expect("store");
    let (kept, first) = split_story(&store);
    let second = EPOCH + 1;
    let in_batch = |id: &str| slot_for("a", "C", id, TOTAL) % 4 == 1;
    let slots: BTreeSet<u32> = (0..TOTAL).filter(|s| s % 4 == 1).collect();
    let moving: BTreeSet<String> = kept.iter().filter(|id| in_batch(id)).cloned().collect();
    let staying: BTreeSet<String> = kept.difference(&moving).cloned().collect();
    assert!(!moving.is_empty() && !staying.is_empty());
    let all = (kept.len() + first.len()) as u64;

    let open = Command::OpenImports(Incoming {
        from: PARENT,
        slots: slots.clone(),
        total: TOTAL,
        epoch: second,
        adopted: false,
    });
    assert_eq!(run(&store, CHILD, open), CommandResult::Done);
    let freeze = Frozen {
        child: CHILD,
        slots,
        total: TOTAL,
        epoch: second,
        dropped_through: None,
    };
    assert_eq!(
        run(&store, PARENT, Command::FreezeSlots(freeze)),
        CommandResult::Done
    );
    let newcomer = (0..)
        .map(|i| format!("b2new{i}"))
        .find(|id| in_batch(id))
        .expect("an id in the batch");
    let refused = CommandResult::Rejected(Error::Moved { epoch: second });
    assert_eq!(run(&store, PARENT, create(&newcomer, 1)), refused);
    assert_eq!(run(&store, CHILD, create(&newcomer, 1)), refused);
    assert_eq!(
        run(
            &store,
            CHILD,
            Command::ImportObjects(exported(&store, PARENT, &moving))
        ),
        CommandResult::Done,
        "a sealed child takes the imports it opened"
    );

    // Every object once, by the first batch's map and by the second's.
    for epoch in [EPOCH, second] {
        for ordered in [false, true] {
            let (count, rows) = scanned(&store, &[PARENT, CHILD], ordered, epoch).expect("both");
            assert_eq!((count, rows.len() as u64), (all, all), "epoch {epoch}");
        }
        assert_eq!(
            counted(&store, &[PARENT, CHILD], epoch).expect("count"),
            all
        );
        assert_eq!(
            grouped(&store, &[PARENT, CHILD], epoch).expect("groups"),
            all
        );
    }
    assert_eq!(
        stored_ids(&store, PARENT, second).expect("parent"),
        staying,
        "the parent without the batch, by the second's map"
    );
    assert_eq!(
        stored_ids(&store, CHILD, EPOCH).expect("child"),
        first,
        "the child without the batch, by the first's map"
    );

    // Adopted: the child takes writes to the batch and no more imports.
    let adopt = Command::AdoptSlots {
        from: PARENT,
        epoch: second,
    };
    assert_eq!(run(&store, CHILD, adopt), CommandResult::Done);
    assert!(matches!(
        run(&store, CHILD, create(&newcomer, 1)),
        CommandResult::Created { .. }
    ));
    assert!(matches!(
        run(&store, CHILD, Command::ImportObjects(Vec::new())),
        CommandResult::Rejected(Error::Conflict(_))
    ));
    let all = all + 1;
    while let CommandResult::Purged { next: Some(_), .. } = run(
        &store,
        PARENT,
        Command::DropSlots {
            child: CHILD,
            limit: 50,
            epoch: Some(second),
        },
    ) {}
    assert!(matches!(
        counted(&store, &[PARENT], EPOCH),
        Err(Error::Moved { epoch }) if epoch == second
    ));
    assert_eq!(
        counted(&store, &[PARENT, CHILD], second).expect("count"),
        all
    );
    assert_eq!(stored_ids(&store, PARENT, second).expect("parent"), staying);
    assert!(
        matches!(get(&store, &newcomer), Err(Error::Moved { epoch }) if epoch == second),
        "the parent sends a reader of the batch to the child"
    );
    assert!(stored_ids(&store, CHILD, second)
        .expect("child")
        .contains(&newcomer));
}

/// An object of about 20 KB: fifty make more than one copy page.
fn padded(id: &str, n: i64) -> Command {
    create_with(id, n, json!({"n": n, "pad": "x".repeat(20_000)}))
}

fn remove(id: &str) -> Command {
    Command::DeleteObject {
        app: "a".into(),
        class: "C".into(),
        object_id: id.into(),
        principals: Principals::master(),
    }
}

/// The group's slot-index entries, as (slot, objectId).
fn slot_entries(store: &Store, group: GroupId) -> BTreeSet<(u32, String)> {
    let mut out = BTreeSet::new();
    let start = keys::sm_family(group, keys::SM_SLOT_INDEX);
    let end = keys::sm_family(group, keys::SM_SLOT_INDEX + 1);
    store
        .scan(CF_SM, &start, &end, |k, _| {
            let slot = keys::slot_of_entry(k).expect("slot");
            let object = keys::object_of_slot_entry(k).expect("object");
            let (_, _, id) = keys::parse_object_key(&object).expect("key");
            out.insert((slot, id));
            Ok(true)
        })
        .expect("scan");
    out
}

/// The objectIds the group stores.
fn objects_in(store: &Store, group: GroupId) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let start = keys::sm_family(group, keys::SM_OBJECT);
    let end = keys::sm_family(group, keys::SM_OBJECT + 1);
    store
        .scan(CF_SM, &start, &end, |k, _| {
            out.insert(keys::parse_object_key(k).expect("key").2);
            Ok(true)
        })
        .expect("scan");
    out
}

fn entries_of<'a>(ids: impl IntoIterator<Item = &'a String>) -> BTreeSet<(u32, String)> {
    ids.into_iter()
        .map(|id| (slot_for("a", "C", id, TOTAL), id.clone()))
        .collect()
}

/// Every page of the export of the frozen slots: the objects (objectId → stored bytes) and
/// the family of each cursor given back.
fn export_all(store: &Store) -> (std::collections::BTreeMap<String, Vec<u8>>, Vec<u8>) {
    let mut objects = std::collections::BTreeMap::new();
    let mut families = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = read(store, &[PARENT], ReadRequest::ExportSlots { after }, 0).expect("export");
        let ReadResponse::Exported {
            objects: found,
            next,
            ..
        } = page
        else {
            panic!("{page:?}")
        };
        for o in found {
            objects.insert(o.object_id, o.stored);
        }
        match next {
            Some(k) => {
                families.push(k[4]);
                after = Some(k);
            }
            None => return (objects, families),
        }
    }
}

/// Story — a slot index is built while objects are written, then a batch is copied and dropped
/// through it: before the first `IndexSlots` apply writes nothing new (as a build without the
/// feature); pages enter the objects stored before while writes on both sides of the cursor
/// keep theirs, so that once complete the index names exactly the group's objects by slot; a
/// batch's copy through it reads the same objects as one looking at every object, its pages
/// going on from entry keys; its drop deletes exactly the batch's objects and their entries.
#[test]
fn a_batch_is_copied_and_dropped_through_the_slot_index() {
    let dirs = [
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    ];
    let indexed = Store::open(dirs[0].path()).expect("store");
    let plain = Store::open(dirs[1].path()).expect("store");
    let both = |cmd: Command| {
        let a = run(&indexed, PARENT, cmd.clone());
        assert_eq!(a, run(&plain, PARENT, cmd));
        a
    };
    let mut live: BTreeSet<String> = BTreeSet::new();
    for i in 0..200 {
        let id = format!("obj{i:04}");
        both(padded(&id, i));
        live.insert(id);
    }
    assert!(
        slot_entries(&indexed, PARENT).is_empty(),
        "no index kept yet"
    );

    let index = |limit| Command::IndexSlots {
        total: TOTAL,
        limit,
    };
    let mut pages = 0;
    loop {
        let r = run(&indexed, PARENT, index(40));
        pages += 1;
        if pages == 2 {
            // Written on both sides of the cursor while the pages go on.
            for id in ["aaa-before", "obj0100x", "zzz-after"] {
                both(padded(id, 7));
                live.insert(id.to_string());
            }
            for id in ["obj0005", "obj0150"] {
                assert_eq!(both(remove(id)), CommandResult::Deleted);
                live.remove(id);
            }
        }
        match r {
            CommandResult::Purged { next: Some(_), .. } => continue,
            CommandResult::Purged { next: None, .. } => break,
            other => panic!("{other:?}"),
        }
    }
    assert!(pages >= 5, "{pages} pages");
    assert_eq!(slot_entries(&indexed, PARENT), entries_of(&live));
    assert_eq!(
        run(&indexed, PARENT, index(40)),
        CommandResult::Purged {
            count: 0,
            next: None
        },
        "complete"
    );
    assert!(matches!(
        run(
            &indexed,
            PARENT,
            Command::IndexSlots {
                total: TOTAL * 2,
                limit: 40
            }
        ),
        CommandResult::Rejected(Error::InvalidOperation(_))
    ));

    let freeze = Frozen {
        child: CHILD,
        slots: (0..TOTAL).filter(|s| s.is_multiple_of(2)).collect(),
        total: TOTAL,
        epoch: EPOCH,
        dropped_through: None,
    };
    assert_eq!(both(Command::FreezeSlots(freeze)), CommandResult::Done);
    let moving: BTreeSet<String> = live.iter().filter(|id| frozen_slot(id)).cloned().collect();
    let kept: BTreeSet<String> = live.difference(&moving).cloned().collect();
    let (through_index, families) = export_all(&indexed);
    let (looking_at_all, plain_families) = export_all(&plain);
    assert_eq!(
        through_index.keys().cloned().collect::<BTreeSet<_>>(),
        moving
    );
    assert_eq!(through_index, looking_at_all);
    assert!(!families.is_empty(), "more than one page");
    assert!(families.iter().all(|&f| f == keys::SM_SLOT_INDEX));
    assert!(plain_families.iter().all(|&f| f == keys::SM_OBJECT));

    let drop = Command::DropSlots {
        child: CHILD,
        limit: 7,
        epoch: Some(EPOCH),
    };
    let mut dropped = 0;
    loop {
        match run(&indexed, PARENT, drop.clone()) {
            CommandResult::Purged { count, next } => {
                assert!(count <= 7);
                dropped += count;
                if next.is_none() {
                    break;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(dropped, moving.len() as u64);
    assert_eq!(objects_in(&indexed, PARENT), kept);
    assert_eq!(slot_entries(&indexed, PARENT), entries_of(&kept));
    assert!(moved(get(&indexed, moving.iter().next().expect("one"))));

    // Kept as objects come and go.
    let id = kept.iter().next().expect("one").clone();
    assert_eq!(run(&indexed, PARENT, remove(&id)), CommandResult::Deleted);
    let mut fresh = (0..)
        .map(|i| format!("new{i}"))
        .filter(|id| !frozen_slot(id));
    let new = fresh.next().expect("an id of a kept slot");
    assert!(matches!(
        run(&indexed, PARENT, padded(&new, 9)),
        CommandResult::Created { .. }
    ));
    let mut now = kept.clone();
    now.remove(&id);
    now.insert(new);
    assert_eq!(slot_entries(&indexed, PARENT), entries_of(&now));
}
