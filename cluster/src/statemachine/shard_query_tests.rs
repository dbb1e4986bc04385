//! Property tests of a shard's query paths against a naive read of every object: random
//! objects (missing fields, nulls, booleans, integers beyond 2^53, strings, Dates, Pointers,
//! arrays of mixed scalars, objects, GeoPoints; many `createdAt` ties; public, private and
//! shared ACLs) written, updated and deleted through `apply`, with indexes declared before the
//! objects or rebuilt in pages while writes go on; then random `where` / `order` / `skip` /
//! `limit` / principals, with and without `count`. The ordered walks (of `createdAt`,
//! `updatedAt` and declared columns), the counts from the index, and the planner's choices
//! must answer exactly the rows and count that filtering and sorting every stored object
//! gives. The class's kept counts must equal the objects stored.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::apply::apply_command;
use super::staged::Staged;
use crate::acl::{allows, Access, Principals};
use crate::cancel::Cancel;
use crate::command::{Command, CommandResult};
use crate::ids::GroupId;
use crate::namespace::Namespace;
use crate::object::StoredObject;
use crate::query::aggregate::{AggregateRequest, AggregateSpec, Folder, Metric};
use crate::query::filter::Filter;
use crate::query::index::{field_prefix, meta_key, public_read, IndexMeta, FORMAT, TYPED};
use crate::query::merge::merge_rows;
use crate::query::order::RowOrder;
use crate::query::shard_exec::{aggregate_shards, scan_shards, GROUP_WALKS};
use crate::query::{ScanRequest, SortKey};
use crate::storage::keys::{self, CF_SM};
use crate::storage::records::{live_record, ReplicaState};
use crate::storage::Store;
use crate::update::parse_updates;

const G: GroupId = GroupId::new(1);

fn run(store: &Store, cmd: Command) -> CommandResult {
    run_in(store, G, cmd)
}

fn run_in(store: &Store, group: GroupId, cmd: Command) -> CommandResult {
    let mut st = Staged::new(store, group);
    let r = apply_command(&mut st, cmd).unwrap();
    store.write(st.into_batch().unwrap(), true).unwrap();
    r
}

fn create(id: &str, now: i64, body: &Value) -> Command {
    Command::CreateObject {
        app: "a".into(),
        class: "C".into(),
        object_id: id.into(),
        now_ms: now,
        updates: parse_updates(body.as_object().unwrap()).unwrap(),
    }
}

fn update(id: &str, now: i64, body: &Value) -> Command {
    Command::UpdateObject {
        app: "a".into(),
        class: "C".into(),
        object_id: id.into(),
        now_ms: now,
        updates: parse_updates(body.as_object().unwrap()).unwrap(),
        principals: Principals::master(),
        unset: Vec::new(),
        holds: Vec::new(),
    }
}

fn delete(id: &str) -> Command {
    Command::DeleteObject {
        app: "a".into(),
        class: "C".into(),
        object_id: id.into(),
        principals: Principals::master(),
    }
}

fn declare(field: Option<&str>, after: Option<String>, limit: u32) -> Command {
    rebuild(field, after, limit, None)
}

fn rebuild(field: Option<&str>, after: Option<String>, limit: u32, token: Option<&str>) -> Command {
    Command::DeclareIndex {
        app: "a".into(),
        class: "C".into(),
        field: field.map(str::to_string),
        after,
        limit: Some(limit),
        rebuild: token.map(str::to_string),
    }
}

fn date(ms: i64) -> Value {
    let iso = crate::object::format_wire_time(ms);
    json!({"__type": "Date", "iso": iso})
}

/// A random scalar of any kind the index holds.
fn scalar(rng: &mut StdRng) -> Value {
    match rng.random_range(0..9) {
        0 => json!(rng.random_bool(0.5)),
        1 | 2 => json!(rng.random_range(-3..6)),
        3 => json!(rng.random_range(-3..6) as f64 / 2.0),
        4 => json!(9_007_199_254_740_992i64 + rng.random_range(0..3)),
        5 => json!(["", "a", "a\u{0}", "ab", "b", "Z"][rng.random_range(0..6)]),
        6 => date(1_000 + rng.random_range(0..4) * 1_000),
        7 => {
            let id = ["p1", "p2", "a"][rng.random_range(0..3)];
            json!({"__type": "Pointer", "className": "P", "objectId": id})
        }
        _ => json!(0.0),
    }
}

/// A random value for the mixed column `s`: mostly scalars, sometimes none, null, an array,
/// an object or a GeoPoint.
fn mixed(rng: &mut StdRng) -> Option<Value> {
    match rng.random_range(0..12) {
        0 => None,
        1 => Some(Value::Null),
        2 | 3 => Some(Value::Array(
            (0..rng.random_range(0..4)).map(|_| scalar(rng)).collect(),
        )),
        4 => Some(json!({"k": rng.random_range(0..3)})),
        5 => Some(
            json!({"__type": "GeoPoint", "latitude": rng.random_range(-5..5), "longitude": 1.0}),
        ),
        _ => Some(scalar(rng)),
    }
}

fn acl(rng: &mut StdRng) -> Option<Value> {
    match rng.random_range(0..6) {
        0 => Some(json!({"u1": {"read": true, "write": true}})),
        1 => Some(json!({"u1": {"read": true}, "role:r": {"read": true}})),
        2 => Some(json!({"role:r": {"read": true}, "u2": {"write": true}})),
        3 => Some(json!({"*": {"read": true}, "u1": {"write": true}})),
        4 => Some(json!({})),
        _ => None,
    }
}

fn random_body(rng: &mut StdRng) -> Value {
    let mut o = serde_json::Map::new();
    if let Some(v) = mixed(rng) {
        o.insert("s".into(), v);
    }
    if rng.random_bool(0.9) {
        o.insert("n".into(), json!(rng.random_range(0..10)));
    }
    // `t`: held by every object (a scalar, sometimes null or an array).
    let t = match rng.random_range(0..8) {
        0 => Value::Null,
        1 => Value::Array((0..rng.random_range(0..3)).map(|_| scalar(rng)).collect()),
        _ => scalar(rng),
    };
    o.insert("t".into(), t);
    if let Some(a) = acl(rng) {
        o.insert("ACL".into(), a);
    }
    Value::Object(o)
}

/// A random condition on `s`, `t` or `n`.
fn condition(rng: &mut StdRng) -> Value {
    let field = ["s", "s", "s", "t", "t", "n", "n"][rng.random_range(0..7)];
    let arg = |rng: &mut StdRng| match field {
        "s" | "t" => scalar(rng),
        _ => json!(rng.random_range(0..10)),
    };
    let cond = match rng.random_range(0..9) {
        0 | 1 => arg(rng),
        2 => json!({"$in": (0..rng.random_range(1..4)).map(|_| arg(rng)).collect::<Vec<_>>()}),
        3 => json!({"$gt": arg(rng)}),
        4 => json!({"$lte": arg(rng)}),
        5 => {
            let (a, b) = (arg(rng), arg(rng));
            json!({"$gte": a, "$lt": b})
        }
        6 => json!({"$ne": arg(rng)}),
        7 => json!({"$exists": rng.random_bool(0.5)}),
        _ => json!({"$nin": [arg(rng)]}),
    };
    json!({ field: cond })
}

/// A random condition on `createdAt` (whose values tie a lot): a range, or `$in` naming a
/// time twice.
fn time_condition(rng: &mut StdRng) -> Value {
    let t = |rng: &mut StdRng| date(1_000 + rng.random_range(0..7) * 1_000);
    match rng.random_range(0..3) {
        0 => json!({"createdAt": {"$gte": t(rng)}}),
        1 => json!({"createdAt": {"$lt": t(rng), "$gt": t(rng)}}),
        _ => {
            let (a, b) = (t(rng), t(rng));
            json!({"createdAt": {"$in": [a.clone(), b, a]}})
        }
    }
}

fn random_where(rng: &mut StdRng) -> Value {
    match rng.random_range(0..8) {
        0 => json!({}),
        6 => time_condition(rng),
        7 => {
            let (a, b) = (time_condition(rng), condition(rng));
            json!({"$and": [a, b]})
        }
        1 => {
            let (a, b) = (condition(rng), condition(rng));
            let mut m = a.as_object().unwrap().clone();
            for (k, v) in b.as_object().unwrap() {
                m.entry(k.clone()).or_insert(v.clone());
            }
            Value::Object(m)
        }
        2 => json!({"$or": [condition(rng), condition(rng)]}),
        _ => condition(rng),
    }
}

fn random_order(rng: &mut StdRng) -> Vec<SortKey> {
    let spec = [
        "s",
        "-s",
        "s,-n",
        "-s,n",
        "n",
        "-n",
        "createdAt",
        "-createdAt",
        "-updatedAt",
        "",
        "t",
        "-t,n",
    ][rng.random_range(0..12)];
    ScanRequest::parse_order(spec)
}

/// What reading, filtering and sorting every stored object answers: the first `keep` rows
/// and the number of matches.
fn naive(store: &Store, groups: &[GroupId], req: &ScanRequest) -> (Vec<Value>, u64) {
    let prepared = req.filter.prepare().unwrap();
    let mut rows = Vec::new();
    for &group in groups {
        let prefix = keys::class_prefix(group, &req.app, &req.class);
        let end = keys::separated_end(&prefix);
        store
            .scan(CF_SM, &prefix, &end, |k, v| {
                let id = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
                let obj = StoredObject::decode(v)?;
                if allows(&obj.fields, &req.principals, Access::Read) {
                    let row = obj.render_for_query(&id);
                    if prepared.matches(&row) {
                        rows.push(row);
                    }
                }
                Ok(true)
            })
            .unwrap();
    }
    let count = rows.len() as u64;
    let order = RowOrder::new(&req.order, &req.filter);
    rows.sort_by(|a, b| order.compare(a, b));
    rows.truncate(req.skip + req.limit);
    (rows, count)
}

fn meta(store: &Store) -> IndexMeta {
    live_record(
        &ReplicaState { store, group: G },
        Namespace::IndexMeta.name(),
        &meta_key("a", "C"),
        None,
    )
    .unwrap()
    .map(|r| serde_json::from_value(r.value).unwrap())
    .unwrap_or_default()
}

/// Overwrites the class's index metadata (as an older Basalt left it).
fn put_meta(store: &Store, m: &IndexMeta) {
    let mut st = Staged::new(store, G);
    super::record_writes::put_record(
        &mut st,
        Namespace::IndexMeta.name(),
        &meta_key("a", "C"),
        serde_json::to_value(m).unwrap(),
        None,
    )
    .unwrap();
    store.write(st.into_batch().unwrap(), true).unwrap();
}

/// The class's kept counts equal the stored objects (all, and readable by anyone), and each
/// automatic column's count the objects holding it.
fn assert_counts_exact(store: &Store, when: &str) {
    let prefix = keys::class_prefix(G, "a", "C");
    let (mut objects, mut public) = (0, 0);
    let mut holders: std::collections::BTreeMap<String, u64> = Default::default();
    store
        .scan(CF_SM, &prefix, &keys::separated_end(&prefix), |_, v| {
            let obj = StoredObject::decode(v)?;
            objects += 1;
            public += u64::from(public_read(&obj.fields));
            for k in obj.fields.keys() {
                *holders.entry(k.clone()).or_default() += 1;
            }
            Ok(true)
        })
        .unwrap();
    let m = meta(store);
    assert!(m.current(), "{when}: {m:?}");
    assert_eq!(
        (m.counts.objects, m.counts.public),
        (objects, public),
        "{when}"
    );
    if let Some(auto) = &m.automatic {
        for (column, n) in &auto.columns {
            assert_eq!(
                *n,
                holders.get(column).copied().unwrap_or_default(),
                "{when}: holders of {column}"
            );
        }
    }
    // Each indexed column's marker count is the number of its markers in the store.
    if let Some(markers) = &m.markers {
        let indexed: Vec<String> = m
            .declared
            .iter()
            .chain(m.automatic.iter().flat_map(|a| a.columns.keys()))
            .cloned()
            .collect();
        for column in &indexed {
            let (start, end) = crate::query::index::irregular_range(
                &crate::query::index::field_prefix(G, "a", "C", column),
            );
            let mut stored = 0u64;
            store
                .scan(CF_SM, &start, &end, |_, _| {
                    stored += 1;
                    Ok(true)
                })
                .unwrap();
            let counted = markers.get(column).copied().unwrap_or_default();
            assert_eq!(counted, stored, "{when}: markers of {column}");
        }
        for column in markers.keys() {
            assert!(
                indexed.contains(column),
                "{when}: {column} counted, not indexed"
            );
        }
    } else {
        assert!(m.automatic.is_none(), "{when}: markers uncounted: {m:?}");
    }
    assert_tallies_exact(store, &m, when);
}

/// The class's tallies are exactly its declared columns' entries per bucket and kind: none
/// for empty buckets, other columns or a class whose tallies are not kept.
fn assert_tallies_exact(store: &Store, m: &IndexMeta, when: &str) {
    use crate::query::tally;
    let mut want: std::collections::BTreeMap<Vec<u8>, tally::Tally> = Default::default();
    if m.tallies {
        for column in &m.declared {
            let prefix = crate::query::index::field_prefix(G, "a", "C", column);
            let (start, end) = crate::query::index::value_range(&prefix);
            store
                .scan(CF_SM, &start, &end, |k, flags| {
                    let value = tally::entry_value(k, prefix.len()).unwrap();
                    if let Some(bucket) = tally::bucket(value) {
                        let mut key = tally::field_tally_prefix(G, "a", "C", column);
                        key.extend_from_slice(&bucket);
                        let t = want.entry(key).or_default();
                        match tally::plain(flags, value) {
                            true => t.plain += 1,
                            false => t.other += 1,
                        }
                    }
                    Ok(true)
                })
                .unwrap();
        }
    }
    let prefix = tally::class_tally_prefix(G, "a", "C");
    let mut have = std::collections::BTreeMap::new();
    store
        .scan(CF_SM, &prefix, &keys::separated_end(&prefix), |k, v| {
            have.insert(k.to_vec(), tally::Tally::decode(v).unwrap());
            Ok(true)
        })
        .unwrap();
    let differ: Vec<_> = have
        .keys()
        .chain(want.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| have.get(*k) != want.get(*k))
        .map(|k| {
            (
                k[k.len().saturating_sub(3)..].to_vec(),
                have.get(k),
                want.get(k),
            )
        })
        .collect();
    assert!(
        differ.is_empty(),
        "{when}: tallies (bucket, stored, due) {differ:?} ({m:?})"
    );
}

/// The class's index entries are exactly those its objects have under its metadata: none
/// left behind by deleted objects, old values or dropped columns, none missing.
fn assert_entries_exact(store: &Store, when: &str) {
    let m = meta(store);
    let prefix = keys::class_prefix(G, "a", "C");
    let mut want: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    store
        .scan(CF_SM, &prefix, &keys::separated_end(&prefix), |k, v| {
            let id = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
            let obj = StoredObject::decode(v)?;
            want.extend(crate::query::index::entries(G, "a", "C", &id, &obj, &m));
            Ok(true)
        })
        .unwrap();
    want.sort();
    let ix = crate::query::index::class_index_prefix(G, "a", "C");
    let mut have = Vec::new();
    store
        .scan(CF_SM, &ix, &keys::separated_end(&ix), |k, v| {
            have.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })
        .unwrap();
    assert_eq!(have.len(), want.len(), "{when}: entries stored vs due");
    assert!(have == want, "{when}: entries differ from the objects'");
}

/// How a test class gets its indexes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Indexing {
    /// `s` and `n` declared before any object.
    Declared,
    /// Objects first (their columns automatic), then `n` declared and `s` rebuilt in pages
    /// while writes go on.
    RebuiltMidway,
    /// Nothing declared: every column automatic.
    Automatic,
    /// A class from before automatic columns (scanned on them), rebuilt midway.
    Legacy,
}

const INDEXINGS: [Indexing; 4] = [
    Indexing::Declared,
    Indexing::RebuiltMidway,
    Indexing::Automatic,
    Indexing::Legacy,
];

/// Opts `field` out of the indexes in pages of `page` entries; none of them remain.
fn drop_index(store: &Store, field: &str, page: u32) {
    let mut started = false;
    loop {
        let CommandResult::Purged { next, .. } = run(store, drop_page(field, started, page)) else {
            panic!("a drop page answers Purged");
        };
        if next.is_none() {
            break;
        }
        started = true;
    }
    assert_eq!(
        entries_under(store, field),
        0,
        "entries of {field} left after dropping its index"
    );
    let m = meta(store);
    assert!(!m.indexes(field) && m.opted_out.contains(&field.to_string()));
}

fn drop_page(field: &str, started: bool, limit: u32) -> Command {
    Command::DropIndex {
        app: "a".into(),
        class: "C".into(),
        field: field.into(),
        started,
        limit,
    }
}

/// How many entries and markers `field` has (latitude entries aside).
fn entries_under(store: &Store, field: &str) -> usize {
    let prefix = crate::query::index::field_prefix(G, "a", "C", field);
    let (start, end) = crate::query::index::value_range(&prefix);
    let mut n = 0;
    store
        .scan(CF_SM, &start, &end, |_, _| {
            n += 1;
            Ok(true)
        })
        .unwrap();
    n
}

/// Checks `queries` random queries, counted and not, against `naive`, over `G`.
fn check_queries(store: &Store, rng: &mut StdRng, queries: usize, seed: u64) {
    check_queries_of(store, &[G], rng, queries, seed);
}

/// Checks `queries` random queries over `groups`, counted and not, against `naive`: read
/// together (`scan_shards`, each shard bounded by the rows before it) and one shard at a time
/// merged as a coordinator merges nodes' answers.
fn check_queries_of(
    store: &Store,
    groups: &[GroupId],
    rng: &mut StdRng,
    queries: usize,
    seed: u64,
) {
    let principals = [
        None,
        Some(vec!["*".to_string()]),
        Some(vec!["*".to_string(), "u1".to_string()]),
        Some(vec![
            "*".to_string(),
            "u1".to_string(),
            "role:r".to_string(),
        ]),
    ];
    for q in 0..queries {
        let w = random_where(rng);
        // Ranges over booleans or Pointers are refused (107) before any shard sees them.
        let Ok(filter) = Filter::parse(w.as_object().unwrap()) else {
            continue;
        };
        let (skip, limit) =
            [(0, 1), (0, 5), (2, 7), (0, 30), (40, 20), (0, 0)][rng.random_range(0..6)];
        let req = ScanRequest {
            app: "a".into(),
            class: "C".into(),
            filter,
            order: random_order(rng),
            skip,
            limit,
            principals: principals[rng.random_range(0..principals.len())]
                .clone()
                .into(),
            count: true,
            keys: Vec::new(),
        };
        let what = format!(
            "seed {seed} query {q}: where {w} order {:?} {skip}+{limit} as {:?}",
            req.order, req.principals
        );
        let (want_rows, want_count) = naive(store, groups, &req);
        let (rows, count) = scan_shards(store, groups, &req, 0, &Cancel::never()).unwrap();
        assert_eq!(count, want_count, "count, {what}");
        assert_eq!(rows, want_rows, "counted rows, {what}");
        let uncounted = ScanRequest {
            count: false,
            ..req.clone()
        };
        let (rows, _) = scan_shards(store, groups, &uncounted, 0, &Cancel::never()).unwrap();
        assert_eq!(rows, want_rows, "uncounted rows, {what}");
        let keys = [&["n"][..], &["s", "t"], &["ACL"], &["s.k"], &["objectId"]]
            [rng.random_range(0..5)]
        .iter()
        .map(|k| k.to_string())
        .collect();
        let keyed = ScanRequest {
            keys,
            ..req.clone()
        };
        let (rows, _) = scan_shards(store, groups, &keyed, 0, &Cancel::never()).unwrap();
        let kept = keyed.kept_fields().unwrap();
        let want_keyed: Vec<Value> = want_rows
            .iter()
            .map(|r| {
                let mut r = r.as_object().unwrap().clone();
                r.retain(|k, _| {
                    kept.contains(k.as_str())
                        || ["objectId", "createdAt", "updatedAt"].contains(&k.as_str())
                });
                Value::Object(r)
            })
            .collect();
        assert_eq!(rows, want_keyed, "rows with keys {:?}, {what}", keyed.keys);
        check_aggregation(store, groups, &req, rng, &what);
        if groups.len() > 1 {
            let order = RowOrder::new(&req.order, &req.filter);
            let parts = groups
                .iter()
                .map(|g| {
                    scan_shards(
                        store,
                        std::slice::from_ref(g),
                        &uncounted,
                        0,
                        &Cancel::never(),
                    )
                    .unwrap()
                    .0
                })
                .collect();
            let merged = merge_rows(parts, &order, 0, skip + limit);
            assert_eq!(merged, want_rows, "rows merged from single shards, {what}");
        }
    }
}

/// An aggregation with the query's filter and caller (grouped by `s`, `n` or the day of
/// `createdAt`; sum of `n`, extremes of `s`) against folding every match `naive` finds. One
/// in three only counts the groups of every object the caller may read (grouped by `s`, `t`
/// or `n`), which shards whose index meets every object answer from its entries.
fn check_aggregation(
    store: &Store,
    groups: &[GroupId],
    req: &ScanRequest,
    rng: &mut StdRng,
    what: &str,
) {
    let counted = rng.random_range(0..3) == 0;
    let (spec, filter) = if counted {
        let group_by = ["s", "t", "n"][rng.random_range(0..3)].to_string();
        let spec = AggregateSpec {
            group_by: vec![group_by],
            metrics: vec![],
            group_count: true,
        };
        (spec, Filter::All)
    } else {
        let group_by = ["s", "n", "createdAt"][rng.random_range(0..3)].to_string();
        let spec = AggregateSpec {
            group_by: vec![group_by],
            metrics: vec![
                (Metric::Sum, "n".to_string()),
                (Metric::Max, "s".to_string()),
                (Metric::Min, "s".to_string()),
            ],
            group_count: true,
        };
        (spec, req.filter.clone())
    };
    let req = ScanRequest {
        filter,
        ..req.clone()
    };
    assert_aggregation(store, groups, &req, &spec, what);
}

/// `aggregate_shards` of `spec` over the objects `req` selects (its filter and caller) answers
/// what folding every match `naive` finds gives.
fn assert_aggregation(
    store: &Store,
    groups: &[GroupId],
    req: &ScanRequest,
    spec: &AggregateSpec,
    what: &str,
) {
    let all = ScanRequest {
        skip: 0,
        limit: usize::MAX,
        ..req.clone()
    };
    let columns = spec.columns();
    let mut folder = Folder::default();
    // Shards fold their matches group by group, each in objectId order.
    for g in groups {
        let (mut matches, _) = naive(store, std::slice::from_ref(g), &all);
        matches.sort_by(|a, b| a["objectId"].as_str().cmp(&b["objectId"].as_str()));
        for m in &matches {
            folder.add(spec, &columns, m).unwrap();
        }
    }
    let agg = AggregateRequest {
        app: req.app.clone(),
        class: req.class.clone(),
        filter: req.filter.clone(),
        spec: spec.clone(),
        principals: req.principals.clone(),
    };
    let got = aggregate_shards(store, groups, &agg, 0, &Cancel::never()).unwrap();
    assert_eq!(
        got,
        folder.into_partials(),
        "aggregation by {:?}, {what}",
        spec.group_by
    );
}

fn random_id(rng: &mut StdRng, i: usize) -> String {
    // Some ids longer than 48 characters: the entry's length byte still finds them.
    let len = if i.is_multiple_of(17) { 60 } else { 10 };
    let tail: String = (0..len - 4)
        .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
        .collect();
    format!("o{i:03}{tail}")
}

/// Writes, updates and deletes random objects, indexed as `indexing` says.
fn populate(store: &Store, rng: &mut StdRng, indexing: Indexing) -> Vec<String> {
    match indexing {
        Indexing::Declared => {
            run(store, declare(Some("s"), None, 100));
            run(store, declare(Some("n"), None, 100));
        }
        Indexing::Legacy => {
            // The metadata an older Basalt left: current, without automatic columns.
            let old = IndexMeta {
                automatic: None,
                markers: None,
                ..IndexMeta::empty()
            };
            put_meta(store, &old);
        }
        Indexing::RebuiltMidway | Indexing::Automatic => {}
    }
    let rebuild_midway = matches!(indexing, Indexing::RebuiltMidway | Indexing::Legacy);
    let mut ids = Vec::new();
    for i in 0..90 {
        let id = random_id(rng, i);
        // Few distinct creation times: many ties on createdAt.
        let now = 1_000 + rng.random_range(0..6) * 1_000;
        assert!(matches!(
            run(store, create(&id, now, &random_body(rng))),
            CommandResult::Created { .. }
        ));
        ids.push(id);
    }
    if indexing == Indexing::Legacy {
        // No automatic columns yet: `s`, `t` and `n` are read from the objects.
        let m = meta(store);
        assert!(m.current() && !m.indexes("s") && !m.indexes("t"), "{m:?}");
        check_queries(store, rng, 40, 0);
    }
    if rebuild_midway {
        // A class with objects before its indexes: `n` at once, then `s` rebuilt 7 objects a
        // page, with writes to objects before and after the rebuild's position between pages.
        run(store, declare(Some("n"), None, 1_000));
        let mut after = None;
        let mut field = Some("s");
        loop {
            let CommandResult::Purged { next, .. } = run(store, declare(field, after.clone(), 7))
            else {
                panic!("a page answers Purged");
            };
            if rng.random_bool(0.3) {
                // A page whose answer was lost is proposed again: it counts nothing twice.
                run(store, declare(field, after, 7));
            }
            field = None;
            let Some(next) = next else { break };
            let victim = ids.remove(rng.random_range(0..ids.len()));
            run(store, delete(&victim));
            let id = format!("o{:03}new{}", 900 + ids.len(), rng.random_range(0..1000));
            run(store, create(&id, 9_000, &random_body(rng)));
            ids.push(id);
            let target = ids[rng.random_range(0..ids.len())].clone();
            run(store, update(&target, 9_500, &json!({"ACL": acl(rng)})));
            after = Some(next);
        }
    }
    for _ in 0..40 {
        let id = ids[rng.random_range(0..ids.len())].clone();
        let mut body = random_body(rng);
        if body.get("ACL").is_none() {
            body["ACL"] = json!({"*": {"read": true, "write": true}});
        }
        run(store, update(&id, 20_000 + rng.random_range(0..3), &body));
    }
    for _ in 0..10 {
        let victim = ids.remove(rng.random_range(0..ids.len()));
        run(store, delete(&victim));
    }
    ids
}

/// The store of a shard that installed a snapshot of `src`'s group (in `dir`).
fn installed_copy(
    src: &Store,
    src_dir: &std::path::Path,
    dir: &std::path::Path,
) -> std::sync::Arc<Store> {
    let snap = super::snapshot::build(G, src, &src_dir.join("snaps")).unwrap();
    let dst = Store::open(&dir.join("db")).unwrap();
    let copy = dir.join("incoming.snap");
    std::fs::copy(&snap.snapshot.path, &copy).unwrap();
    super::snapshot::install(
        G,
        &dst,
        &dir.join("snaps"),
        &snap.meta,
        super::SnapshotFile { path: copy },
    )
    .unwrap();
    dst
}

#[test]
fn every_query_path_answers_like_reading_every_object() {
    for seed in 0..8u64 {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let indexing = INDEXINGS[seed as usize % INDEXINGS.len()];
        populate(&store, &mut rng, indexing);
        let when = format!("seed {seed}, {indexing:?}");
        assert_counts_exact(&store, &when);
        assert_entries_exact(&store, &when);
        // Columns nobody declared are indexed by themselves (after a rebuild, for a class
        // from before automatic columns); `t`, held by every object, is walked whole.
        let m = meta(&store);
        assert!(m.indexes("t") && m.walkable("t", false), "{when}: {m:?}");
        assert!(m.indexes("s"), "{when}: {m:?}");
        check_queries(&store, &mut rng, 300, seed);
        if indexing == Indexing::Automatic {
            // Opted out: entries gone, queries read the objects again.
            drop_index(&store, "t", 7);
            drop_index(&store, "s", 1_000);
            assert_counts_exact(&store, &format!("{when}, after opting out"));
            check_queries(&store, &mut rng, 150, seed);
            // Writes after the opt-out index nothing under them.
            run(
                &store,
                create("zz-after-drop", 60_000, &random_body(&mut rng)),
            );
            assert_eq!(entries_under(&store, "t"), 0);
            // Declaring opts back in and builds the column.
            let (mut field, mut after) = (Some("t"), None);
            loop {
                let CommandResult::Purged { next, .. } = run(&store, declare(field, after, 5))
                else {
                    panic!("a page answers Purged");
                };
                field = None;
                match next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
            let m = meta(&store);
            assert!(
                m.declared.contains(&"t".to_string()) && !m.opted_out.contains(&"t".to_string())
            );
            assert_entries_exact(&store, &format!("{when}, declared again"));
            check_queries(&store, &mut rng, 150, seed);
        }
    }
}

/// Objects spread over several shards read together: each shard's walk or objectId-ordered
/// read stops at the worst row the shards before it found, and the answer is still exactly
/// what reading every object of every shard gives.
#[test]
fn shards_read_together_answer_like_reading_every_object() {
    let groups: Vec<GroupId> = (1..=4).map(GroupId::new).collect();
    for seed in 20..24u64 {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        for &g in &groups {
            run_in(&store, g, declare(Some("s"), None, 1_000));
            run_in(&store, g, declare(Some("n"), None, 1_000));
        }
        let group_of = |id: &str| groups[id.bytes().map(usize::from).sum::<usize>() % groups.len()];
        let mut ids = Vec::new();
        for i in 0..160 {
            let id = random_id(&mut rng, i);
            let now = 1_000 + rng.random_range(0..6) * 1_000;
            run_in(
                &store,
                group_of(&id),
                create(&id, now, &random_body(&mut rng)),
            );
            ids.push(id);
        }
        for _ in 0..40 {
            let id = ids[rng.random_range(0..ids.len())].clone();
            let body = random_body(&mut rng);
            run_in(&store, group_of(&id), update(&id, 20_000, &body));
        }
        for _ in 0..10 {
            let victim = ids.remove(rng.random_range(0..ids.len()));
            run_in(&store, group_of(&victim), delete(&victim));
        }
        check_queries_of(&store, &groups, &mut rng, 300, seed);
    }
}

/// Ordered walks over several shards stop at a bound found from their first index entries
/// (`walk_bound`): with values that rarely tie, any bound too tight, or a walk that does not
/// go on past the entries it read ahead, loses rows. Mostly public objects (so the bound is
/// set), some private, some without one scalar; an automatic column (`u`) and, in half the
/// seeds, a declared one; each query also on one shard at a time, merged.
#[test]
fn walks_over_shards_stop_at_their_common_bound() {
    let groups: Vec<GroupId> = (1..=4).map(GroupId::new).collect();
    for seed in 40..46u64 {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        if seed % 2 == 0 {
            for &g in &groups {
                run_in(&store, g, declare(Some("u"), None, 1_000));
            }
        }
        let group_of = |id: &str| groups[id.bytes().map(usize::from).sum::<usize>() % groups.len()];
        let mut values: Vec<i64> = (0..240).map(|v| v * 7).collect();
        for i in (1..values.len()).rev() {
            values.swap(i, rng.random_range(0..=i));
        }
        // Without the odd ones, every object holds `u` (the automatic column is walkable for
        // every query); with them, only queries that need a value walk it.
        let irregular = seed % 3 == 0;
        for (i, v) in values.iter().enumerate() {
            let id = random_id(&mut rng, i);
            let u = match rng.random_range(0..20) {
                0 if irregular => Value::Null,
                1 if irregular => json!([v, v + 1]),
                _ => json!(v),
            };
            let mut body = json!({"u": u});
            if rng.random_bool(0.2) {
                if let Some(a) = acl(&mut rng) {
                    body["ACL"] = a;
                }
            }
            let now = 1_000 + i as i64 * 1_000;
            run_in(&store, group_of(&id), create(&id, now, &body));
        }
        let principals = [
            None,
            Some(vec!["*".to_string()]),
            Some(vec!["*".to_string(), "u1".to_string()]),
        ];
        for q in 0..200 {
            let lo = rng.random_range(0..1_700);
            let w = match rng.random_range(0..6) {
                0 => json!({}),
                1 => json!({"u": {"$gt": lo}}),
                2 => json!({"u": {"$lt": lo}}),
                3 => json!({"u": {"$gte": lo, "$lt": lo + 400}}),
                4 => json!({"u": {"$in": [lo, lo + 7, lo + 14, 700]}}),
                // A filter the planner cannot use (the walk then reads every value).
                _ => json!({"u": {"$in": [lo - lo % 7, null]}}),
            };
            let order =
                ["u", "-u", "createdAt", "-createdAt", "-u,createdAt"][rng.random_range(0..5)];
            let (skip, limit) =
                [(0, 1), (0, 5), (0, 20), (3, 10), (30, 20)][rng.random_range(0..5)];
            let req = ScanRequest {
                app: "a".into(),
                class: "C".into(),
                filter: Filter::parse(w.as_object().unwrap()).unwrap(),
                order: ScanRequest::parse_order(order),
                skip,
                limit,
                principals: principals[rng.random_range(0..principals.len())]
                    .clone()
                    .into(),
                count: rng.random_bool(0.3),
                keys: Vec::new(),
            };
            let what = format!(
                "seed {seed} query {q}: where {w} order {order} {skip}+{limit} as {:?}",
                req.principals
            );
            let (want, _) = naive(&store, &groups, &req);
            let (rows, _) = scan_shards(&store, &groups, &req, 0, &Cancel::never()).unwrap();
            assert_eq!(rows, want, "{what}");
        }
    }
}

/// A read whose caller left stops: with its token tripped, a scan, a count and an ordered
/// walk answer the abandonment error instead of rows.
#[test]
fn an_abandoned_read_stops() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    populate(&store, &mut rng, Indexing::Declared);
    let (cancel, guard) = Cancel::new();
    let req = |w: Value, order: &str, count: bool| ScanRequest {
        app: "a".into(),
        class: "C".into(),
        filter: Filter::parse(w.as_object().unwrap()).unwrap(),
        order: ScanRequest::parse_order(order),
        skip: 0,
        limit: 10,
        principals: Principals::master(),
        count,
        keys: Vec::new(),
    };
    let cases = [
        req(json!({}), "", false),
        req(json!({"n": {"$gt": 2}}), "-s", true),
        req(json!({}), "-createdAt", false),
    ];
    for r in &cases {
        assert!(scan_shards(&store, &[G], r, 0, &cancel).is_ok());
    }
    drop(guard);
    for r in &cases {
        assert!(matches!(
            scan_shards(&store, &[G], r, 0, &cancel),
            Err(crate::error::Error::Timeout(_))
        ));
    }
}

/// A replica that received the shard by snapshot, and then restarted (its store reopened),
/// keeps the same counts, entries and answers.
#[test]
fn counts_and_indexes_survive_a_snapshot_and_a_restart() {
    let src_dir = tempfile::tempdir().unwrap();
    let src = Store::open(&src_dir.path().join("db")).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    populate(&src, &mut rng, Indexing::RebuiltMidway);
    let want = meta(&src).counts;
    let dst_dir = tempfile::tempdir().unwrap();
    let dst = installed_copy(&src, src_dir.path(), dst_dir.path());
    assert_eq!(meta(&dst).counts, want);
    assert_counts_exact(&dst, "after the snapshot");
    check_queries(&dst, &mut rng, 100, 7);
    drop(dst);
    let reopened = Store::open(&dst_dir.path().join("db")).unwrap();
    assert_eq!(meta(&reopened).counts, want);
    assert_counts_exact(&reopened, "after a restart");
    // Writes go on counting from the restored counts.
    run(
        &reopened,
        create("zz-after-restart", 50_000, &json!({"n": 1})),
    );
    assert_counts_exact(&reopened, "after a write on the restarted replica");
    check_queries(&reopened, &mut rng, 100, 7);
}

/// Counts stay exact through every write that changes them: creates (a retried create
/// counts once), ACL changes both ways, deletes, and a class dropped and created again.
#[test]
fn class_counts_follow_creates_acl_changes_deletes_and_drops() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let private = json!({"ACL": {"u1": {"read": true}}});
    run(&store, create("a1", 1, &json!({})));
    run(&store, create("a1", 1, &json!({})));
    run(&store, create("a2", 2, &private));
    run(&store, create("a3", 3, &private));
    assert_eq!(meta(&store).counts.objects, 3);
    assert_eq!(meta(&store).counts.public, 1);
    run(
        &store,
        update("a2", 4, &json!({"ACL": {"*": {"read": true}}})),
    );
    run(&store, update("a1", 5, &private));
    run(&store, update("a3", 6, &json!({"x": 1})));
    assert_counts_exact(&store, "after updates");
    assert_eq!(meta(&store).counts.public, 1);
    run(&store, delete("a2"));
    run(&store, delete("a2"));
    assert_counts_exact(&store, "after a delete");
    assert_eq!(meta(&store).counts.objects, 2);
    let whole = |principals: Option<Vec<String>>| {
        scan_shards(
            &store,
            &[G],
            &ScanRequest {
                app: "a".into(),
                class: "C".into(),
                filter: Filter::All,
                order: vec![],
                skip: 0,
                limit: 0,
                principals: principals.into(),
                count: true,
                keys: Vec::new(),
            },
            0,
            &Cancel::never(),
        )
        .unwrap()
        .1
    };
    assert_eq!(whole(None), 2);
    assert_eq!(whole(Some(vec!["*".into()])), 0);
    assert_eq!(whole(Some(vec!["*".into(), "u1".into()])), 2);
    // Dropped: purged in pages, then created again from nothing.
    let mut after = None;
    loop {
        let CommandResult::Purged { next, .. } = run(
            &store,
            Command::PurgeClass {
                app: "a".into(),
                class: "C".into(),
                field: None,
                after,
                limit: 1,
            },
        ) else {
            panic!("a purge page answers Purged");
        };
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(whole(None), 0);
    run(&store, create("b1", 10, &json!({})));
    assert_counts_exact(&store, "after the class came back");
    assert_eq!(whole(None), 1);
    assert_eq!(whole(Some(vec!["*".into()])), 1);
}

/// Two rebuilds of one class whose pages interleave (a declaration retried while the first
/// runs): the later one replaces the earlier, whose remaining pages do nothing; the counts end
/// exact and every declared column is indexed.
#[test]
fn a_later_rebuild_replaces_an_earlier_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    for i in 0..60 {
        run(
            &store,
            create(&random_id(&mut rng, i), 1_000, &random_body(&mut rng)),
        );
    }
    let page = |field, after, token| match run(&store, rebuild(field, after, 5, Some(token))) {
        CommandResult::Purged { next, .. } => next,
        other => panic!("a page answers Purged: {other:?}"),
    };
    let mut a = page(Some("s"), None, "A");
    a = page(Some("s"), a, "A");
    a = page(Some("s"), a, "A");
    let mut b = page(Some("n"), None, "B");
    // A's next page belongs to a replaced rebuild: it does nothing and ends.
    assert_eq!(page(Some("s"), a, "A"), None);
    while b.is_some() {
        b = page(Some("n"), b, "B");
    }
    assert_counts_exact(&store, "after two interleaved rebuilds");
    assert_eq!(meta(&store).declared, ["s", "n"]);
    check_queries(&store, &mut rng, 150, 11);
}

/// Answers the `next` of a paged command's page.
fn next_page(r: CommandResult) -> Option<String> {
    match r {
        CommandResult::Purged { next, .. } => next,
        other => panic!("a page answers Purged: {other:?}"),
    }
}

/// An opt-out and a declaration of the same column whose pages interleave, with writes
/// between pages, leave exactly the entries the objects have (whichever came last wins); so
/// does an opt-out cut short after its first page followed by dropping the class and making
/// it again.
#[test]
fn opt_outs_and_declarations_interleaved_leave_exact_entries() {
    for seed in 30..36u64 {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut ids = populate(&store, &mut rng, Indexing::Automatic);
        let churn = |store: &Store, rng: &mut StdRng, ids: &mut Vec<String>| {
            let id = ids[rng.random_range(0..ids.len())].clone();
            run(store, update(&id, 30_000, &random_body(rng)));
            let victim = ids.remove(rng.random_range(0..ids.len()));
            run(store, delete(&victim));
            let id = format!("o{:03}late{}", 950 + ids.len(), rng.random_range(0..1000));
            run(store, create(&id, 31_000, &random_body(rng)));
            ids.push(id);
        };
        let declare_last = seed % 2 == 0;
        // The opt-out's first page, then the declaration's, then their pages in turns.
        let mut drop_next = next_page(run(&store, drop_page("t", false, 7)));
        let token = format!("r{seed}");
        let mut declare_next = next_page(run(&store, rebuild(Some("t"), None, 7, Some(&token))));
        if !declare_last {
            // The column is opted out again after the declaration started: that wins.
            drop_next = next_page(run(&store, drop_page("t", false, 7)));
        }
        while drop_next.is_some() || declare_next.is_some() {
            churn(&store, &mut rng, &mut ids);
            if drop_next.is_some() {
                drop_next = next_page(run(&store, drop_page("t", true, 7)));
            }
            if let Some(after) = declare_next.take() {
                let page = rebuild(Some("t"), Some(after), 7, Some(&token));
                declare_next = next_page(run(&store, page));
            }
        }
        let when = format!("seed {seed}, declared last: {declare_last}");
        let m = meta(&store);
        assert_eq!(
            m.declared.contains(&"t".to_string()),
            declare_last,
            "{when}: {m:?}"
        );
        assert_eq!(
            m.opted_out.contains(&"t".to_string()),
            !declare_last,
            "{when}: {m:?}"
        );
        assert!(m.dropping.is_empty(), "{when}: {m:?}");
        assert_counts_exact(&store, &when);
        assert_entries_exact(&store, &when);
        check_queries(&store, &mut rng, 100, seed);

        // An opt-out cut short after its first page, writes that leave its entries stale,
        // then the class dropped and made again: the new class starts clean.
        run(&store, drop_page("s", false, 3));
        churn(&store, &mut rng, &mut ids);
        let mut after = None;
        loop {
            let cmd = Command::PurgeClass {
                app: "a".into(),
                class: "C".into(),
                field: None,
                after,
                limit: 5,
            };
            match next_page(run(&store, cmd)) {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(meta(&store), IndexMeta::default(), "{when}: forgotten");
        for i in 0..20 {
            let body = random_body(&mut rng);
            run(&store, create(&format!("again{i:02}"), 40_000, &body));
        }
        let m = meta(&store);
        assert!(m.indexes("s") && m.opted_out.is_empty(), "{when}: {m:?}");
        assert_counts_exact(&store, &format!("{when}, class made again"));
        assert_entries_exact(&store, &format!("{when}, class made again"));
        check_queries(&store, &mut rng, 100, seed);
    }
}

/// A count of `where` (limit 0) as `principals` sees it, through the shard and naively.
fn counts_of(store: &Store, w: &Value, principals: Option<Vec<String>>) -> (u64, u64) {
    let req = ScanRequest {
        app: "a".into(),
        class: "C".into(),
        filter: Filter::parse(w.as_object().unwrap()).unwrap(),
        order: Vec::new(),
        skip: 0,
        limit: 0,
        principals: principals.into(),
        count: true,
        keys: Vec::new(),
    };
    let (_, count) = scan_shards(store, &[G], &req, 0, &Cancel::never()).unwrap();
    (count, naive(store, &[G], &req).1)
}

/// Counts of a declared column's ranges read the tallies of the buckets they cover whole:
/// exactly what reading every object answers, for every caller, while objects are public,
/// private, arrays or numbers held imprecisely, through updates and deletes, a rebuild, an
/// opt-out and a declaration again.
#[test]
fn range_counts_from_tallies_answer_like_reading_every_object() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut rng = StdRng::seed_from_u64(40);
    run(&store, declare(Some("v"), None, 100));
    let number = |rng: &mut StdRng| match rng.random_range(0..4) {
        0 => json!(rng.random_range(-2_000..2_000) as f64 / 4.0),
        _ => json!(rng.random_range(-500..2_000)),
    };
    let principals = [
        None,
        Some(vec!["*".to_string()]),
        Some(vec!["*".to_string(), "u1".to_string()]),
    ];
    let check = |store: &Store, rng: &mut StdRng, when: &str| {
        assert_counts_exact(store, when);
        for q in 0..150 {
            let (a, b) = (number(rng), number(rng));
            let w = match rng.random_range(0..4) {
                0 => json!({"v": {"$gte": a, "$lt": b}}),
                1 => json!({"v": {"$gt": a}}),
                2 => json!({"v": {"$lte": b}}),
                _ => json!({"v": {"$gt": a, "$lte": b}}),
            };
            let who = principals[rng.random_range(0..principals.len())].clone();
            let (count, want) = counts_of(store, &w, who.clone());
            assert_eq!(count, want, "{when}, query {q}: {w} as {who:?}");
        }
    };
    // Public numbers only: whole buckets are counted from their tallies alone.
    let mut ids = Vec::new();
    for i in 0..400 {
        let id = format!("o{i:04}");
        run(&store, create(&id, 1_000, &json!({"v": number(&mut rng)})));
        ids.push(id);
    }
    check(&store, &mut rng, "public numbers");
    // Private objects, arrays, numbers held imprecisely, objects without the column, then
    // values changed, ACLs turned and objects deleted.
    for i in 0..150 {
        let id = format!("p{i:04}");
        let v = match rng.random_range(0..5) {
            0 => json!([number(&mut rng), number(&mut rng)]),
            1 => json!(9_007_199_254_740_993u64),
            2 => Value::Null,
            _ => number(&mut rng),
        };
        let mut body = json!({"v": v});
        if let Some(a) = acl(&mut rng) {
            body["ACL"] = a;
        }
        run(&store, create(&id, 2_000, &body));
        ids.push(id);
    }
    check(&store, &mut rng, "mixed objects");
    for _ in 0..150 {
        let id = ids[rng.random_range(0..ids.len())].clone();
        let body = match rng.random_range(0..3) {
            0 => json!({"v": number(&mut rng)}),
            1 => json!({"ACL": acl(&mut rng).unwrap_or(json!({"*": {"read": true}}))}),
            _ => json!({"v": [number(&mut rng)]}),
        };
        run(&store, update(&id, 3_000, &body));
    }
    for _ in 0..100 {
        let victim = ids.remove(rng.random_range(0..ids.len()));
        run(&store, delete(&victim));
    }
    check(&store, &mut rng, "after updates and deletes");
    // A rebuild in pages of 7 with writes between them tallies everything again.
    let mut after = None;
    loop {
        let next = next_page(run(&store, declare(Some("w"), after, 7)));
        let id = format!("q{}", rng.random_range(0..100_000));
        run(&store, create(&id, 4_000, &json!({"v": number(&mut rng)})));
        let Some(next) = next else { break };
        after = Some(next);
    }
    check(&store, &mut rng, "after a rebuild");
    // Opted out: its tallies go with its entries; declared again: tallied again.
    drop_index(&store, "v", 9);
    check(&store, &mut rng, "opted out");
    let mut after = None;
    while let Some(next) = next_page(run(&store, declare(Some("v"), after, 50))) {
        after = Some(next);
    }
    check(&store, &mut rng, "declared again");
}

/// Every object of the class `principals` may read, unordered (what an aggregation without
/// `where` folds).
fn whole_class(principals: Option<Vec<String>>) -> ScanRequest {
    ScanRequest {
        app: "a".into(),
        class: "C".into(),
        filter: Filter::All,
        order: Vec::new(),
        skip: 0,
        limit: 0,
        principals: principals.into(),
        count: false,
        keys: Vec::new(),
    }
}

/// Group counts by a column that a walk of its entries meets whole (declared, or automatic and
/// held by every object) count the objects of plain public values from their entries and read
/// the others: arrays (whose elements have entries too), whole numbers written as floats,
/// Dates, Pointers, nulls, missing values, imprecise numbers, objects private to the caller.
/// Few enough of those that the walk is cheaper than a scan; updates and deletes between
/// checks; every caller.
#[test]
fn group_counts_from_index_entries_answer_like_reading_every_object() {
    let value = |rng: &mut StdRng| -> Option<Value> {
        Some(match rng.random_range(0..100) {
            0..=59 => json!([0, 1, 2, 3, 4][rng.random_range(0..5)]),
            60..=69 => json!(["a", "b", "a\u{0}", ""][rng.random_range(0..4)]),
            70..=74 => json!(rng.random_bool(0.5)),
            75..=79 => json!([2.5, -1.5][rng.random_range(0..2)]),
            80..=82 => json!(1.0),
            83..=84 => date(1_000 + rng.random_range(0..2) * 1_000),
            85..=86 => json!({"__type": "Pointer", "className": "P", "objectId": "a"}),
            87 => json!("P/a"),
            88..=90 => json!([1, "a", 1]),
            91 => Value::Null,
            92 => json!(9_007_199_254_740_993i64),
            93 => [json!({"k": 1}), json!(-0.0)][rng.random_range(0..2)].clone(),
            94 => return None,
            _ => json!(3),
        })
    };
    let body = |rng: &mut StdRng, holds_all: bool| -> Value {
        let mut o = serde_json::Map::new();
        match value(rng) {
            Some(v) => {
                o.insert("g".into(), v);
            }
            None if holds_all => {
                o.insert("g".into(), Value::Null);
            }
            None => {}
        }
        if rng.random_range(0..100) < 5 {
            o.insert("ACL".into(), json!({"u1": {"read": true}}));
        }
        Value::Object(o)
    };
    for seed in 0..6u64 {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        // Declared (objects without `g` have markers) or automatic (every object holds `g`).
        let declared = seed % 2 == 0;
        if declared {
            run(&store, declare(Some("g"), None, 100));
        }
        let mut ids = Vec::new();
        for i in 0..300 {
            let id = random_id(&mut rng, i);
            run(&store, create(&id, 1_000, &body(&mut rng, !declared)));
            ids.push(id);
        }
        let m = meta(&store);
        assert!(m.walkable("g", false), "seed {seed}: {m:?}");
        let spec = AggregateSpec {
            group_by: vec!["g".to_string()],
            metrics: vec![],
            group_count: true,
        };
        for round in 0..3 {
            for principals in [
                None,
                Some(vec!["*".to_string()]),
                Some(vec!["*".to_string(), "u1".to_string()]),
                // A caller that does not hold `*` (only internal reads): public entries say
                // nothing about what it may read.
                Some(vec!["u1".to_string()]),
            ] {
                let walks = GROUP_WALKS.with(|n| n.get());
                let walked = principals
                    .as_ref()
                    .is_none_or(|ps| ps.contains(&"*".to_string()));
                let what = format!("seed {seed} round {round} as {principals:?}");
                assert_aggregation(&store, &[G], &whole_class(principals), &spec, &what);
                assert_eq!(
                    GROUP_WALKS.with(|n| n.get()) > walks,
                    walked,
                    "{what}: counted from the entries"
                );
            }
            for _ in 0..20 {
                let id = ids[rng.random_range(0..ids.len())].clone();
                run(&store, update(&id, 2_000, &body(&mut rng, !declared)));
            }
            for _ in 0..5 {
                let victim = ids.remove(rng.random_range(0..ids.len()));
                run(&store, delete(&victim));
            }
        }
        // A class indexed before entries said `TYPED` (format 1): its entries are not
        // trusted for group values, the objects are read.
        let prefix = field_prefix(G, "a", "C", "g");
        let end = keys::separated_end(&prefix);
        let mut st = Staged::new(&store, G);
        store
            .scan(CF_SM, &prefix, &end, |k, v| {
                st.put(k.to_vec(), v.iter().map(|f| f & !TYPED).collect());
                Ok(true)
            })
            .unwrap();
        store.write(st.into_batch().unwrap(), true).unwrap();
        let old = IndexMeta {
            format: FORMAT,
            ..meta(&store)
        };
        put_meta(&store, &old);
        let what = format!("seed {seed}, format 1");
        assert_aggregation(&store, &[G], &whole_class(None), &spec, &what);
    }
}
