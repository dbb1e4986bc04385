//! Reads across a split (decisions/0038): a group that froze slots for a child answers a read
//! routed by the map naming the child without them — its index counts and walks included —
//! and a read routed by an older map with them, until it drops them; from then on such a read
//! is refused `Moved` (the reader takes up the newer map), as is an object read of a slot it
//! no longer answers for. Reads go through `local_read::serve_read`, as a leader serves them.

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
use crate::slots::Frozen;
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
    let ids: Vec<String> = (0..240).map(|i| format!("obj{i:04}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let body = json!({"n": i, "tag": format!("t{}", i % 5)});
        let create = Command::CreateObject {
            app: "a".into(),
            class: "C".into(),
            object_id: id.as_str().into(),
            now_ms: 1_000 + i as i64,
            updates: parse_updates(body.as_object().expect("body")).expect("updates"),
        };
        run(&store, PARENT, create);
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
        run(&store, PARENT, Command::FreezeSlots(freeze)),
        CommandResult::Done
    );
    let imported: Vec<ImportedObject> = moving
        .iter()
        .map(|id| ImportedObject {
            app: "a".into(),
            class: "C".into(),
            object_id: id.clone(),
            stored: store
                .get(CF_SM, &keys::object_key(PARENT, "a", "C", id))
                .expect("get")
                .expect("stored"),
        })
        .collect();
    assert_eq!(
        run(&store, CHILD, Command::ImportObjects(imported)),
        CommandResult::Done
    );

    // Sealed before the switch: a late page of the copy cannot undo the child's own writes.
    assert_eq!(
        run(&store, CHILD, Command::SealImports),
        CommandResult::Done
    );
    assert!(matches!(
        run(&store, CHILD, Command::ImportObjects(Vec::new())),
        CommandResult::Rejected(Error::Conflict(_))
    ));

    // Before the drop: the old map's reader asks the parent alone, and sees everything.
    for ordered in [false, true] {
        let (count, rows) = scanned(&store, &[PARENT], ordered, 0).expect("old map");
        assert_eq!((count, rows.len() as u64), (all, all));
    }
    assert_eq!(counted(&store, &[PARENT], 0).expect("count"), all);
    assert_eq!(grouped(&store, &[PARENT], 0).expect("groups"), all);
    // The new map's reader asks both: every object once, however the shards are read.
    for ordered in [false, true] {
        let (count, rows) = scanned(&store, &[PARENT], ordered, EPOCH).expect("parent");
        assert_eq!(rows, kept, "ordered {ordered}");
        assert_eq!(count, kept.len() as u64);
        let (count, rows) = scanned(&store, &[PARENT, CHILD], ordered, EPOCH).expect("both");
        assert_eq!((count, rows.len() as u64), (all, all), "ordered {ordered}");
    }
    assert_eq!(
        counted(&store, &[PARENT], EPOCH).expect("count"),
        kept.len() as u64
    );
    assert_eq!(
        counted(&store, &[PARENT, CHILD], EPOCH).expect("count"),
        all
    );
    assert_eq!(
        grouped(&store, &[PARENT, CHILD], EPOCH).expect("groups"),
        all
    );
    assert_eq!(stored_ids(&store, PARENT, EPOCH).expect("stored"), kept);
    assert_eq!(
        stored_ids(&store, PARENT, 0).expect("stored").len(),
        ids.len()
    );
    let some_moving = moving.iter().next().expect("one");
    assert!(
        get(&store, some_moving).expect("get").is_some(),
        "frozen, not dropped"
    );

    // The drop begins: the old map's reads would miss objects, and are refused.
    let drop = |limit| Command::DropSlots {
        child: CHILD,
        limit,
    };
    let other = Command::DropSlots {
        child: GroupId::new(9),
        limit: 10,
    };
    assert!(
        matches!(
            run(&store, PARENT, other),
            CommandResult::Rejected(Error::Conflict(_))
        ),
        "a drop for another split's child"
    );
    let first = run(&store, PARENT, drop(10));
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
    assert!(moved(scanned(&store, &[PARENT], false, 0)));
    assert!(moved(counted(&store, &[PARENT], 0)));
    assert!(moved(grouped(&store, &[PARENT], 0)));
    assert!(moved(stored_ids(&store, PARENT, 0)));
    assert!(
        moved(get(&store, some_moving)),
        "a moved object is read from the child"
    );
    assert_eq!(
        counted(&store, &[PARENT, CHILD], EPOCH).expect("count"),
        all
    );

    // Dropped whole: the slots stay given away.
    while let CommandResult::Purged { next: Some(_), .. } = run(&store, PARENT, drop(1_000)) {}
    assert!(moved(counted(&store, &[PARENT], 0)));
    assert!(moved(get(&store, some_moving)));
    let some_kept = kept.iter().next().expect("one");
    assert!(get(&store, some_kept).expect("get").is_some());
    for ordered in [false, true] {
        let (count, rows) = scanned(&store, &[PARENT, CHILD], ordered, EPOCH).expect("both");
        assert_eq!((count, rows.len() as u64), (all, all), "ordered {ordered}");
    }
    assert_eq!(
        counted(&store, &[PARENT], EPOCH).expect("count"),
        kept.len() as u64
    );
    assert_eq!(
        counted(&store, &[PARENT, CHILD], EPOCH).expect("count"),
        all
    );
}
