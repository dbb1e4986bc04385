//! Rewrites the objects a node stores in the first encoding (one JSON document each) in the
//! current one (`object::StoredObject::encode`), once, when the node opens its store and
//! before its groups start (`cluster::bootstrap`). Both encodings are always readable, so a
//! rewrite cut short by a crash is simply done again at the next start; the marker
//! `OBJECTS_UPGRADED` in the default column family says that every object was rewritten.
//! Snapshots, which may have been built before the rewrite, are rewritten as they are
//! installed (`current_encoding`, called by `snapshot::load`). Writes go straight to this
//! node's store, not through Raft: they change how an object is written, never what it holds.
//! Nodes of one cluster run the same build (see `docs/decisions/0017-object-encoding.md`), so
//! replicas agree byte for byte afterwards. An object that cannot be decoded is left as it is
//! (reading it fails as it did before) and logged: it never stops a node from starting.
//!
//! `count_usage` likewise makes the first count of what each app stores per group (the
//! `usage` records apply keeps since), once, marked by `USAGE_COUNTED`; `group_usage` counts
//! one group, also for a snapshot built before apply counted (`snapshot::load`); and
//! `count_changes` / `group_change_bytes` the same for the change log's byte counts.

use std::collections::BTreeMap;

use super::change_writes;
use super::usage_writes;
use crate::error::Result;
use crate::ids::GroupId;
use crate::namespace::Namespace;
use crate::object::StoredObject;
use crate::storage::keys::{self, CF_SM};
use crate::storage::records::StoredRecord;
use crate::storage::{Store, WriteBatch};
use crate::usage::{AppUsage, UsageDelta};

/// Key of the marker, in the default column family.
const OBJECTS_UPGRADED: &[u8] = b"objects-encoding-2";
/// Objects rewritten per write batch.
const BATCH: usize = 1_000;

/// Rewrites every object of the first encoding in the current one; answers how many it
/// rewrote (none once the marker is written).
pub fn upgrade_objects(store: &Store) -> Result<u64> {
    if store.get_default(OBJECTS_UPGRADED)?.is_some() {
        return Ok(0);
    }
    let mut rewritten = 0u64;
    let mut damaged = 0u64;
    let mut group = first_group(store, &[])?;
    while let Some(g) = group {
        let start = keys::sm_family(g, keys::SM_OBJECT);
        let end = keys::sm_family(g, keys::SM_OBJECT + 1);
        let mut from = start;
        loop {
            let mut page: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut last: Option<Vec<u8>> = None;
            store.scan(CF_SM, &from, &end, |k, v| {
                if !StoredObject::is_current_encoding(v) {
                    match StoredObject::decode(v).and_then(|o| o.encode()) {
                        Ok(bytes) => page.push((k.to_vec(), bytes)),
                        Err(e) => {
                            damaged += 1;
                            tracing::warn!(key = ?k, error = %e, "an object that cannot be decoded is left as it is");
                        }
                    }
                }
                last = Some(k.to_vec());
                Ok(page.len() < BATCH)
            })?;
            if !page.is_empty() {
                let mut batch = WriteBatch::default();
                let cf = store.cf(CF_SM)?;
                for (k, v) in &page {
                    batch.put_cf(cf, k, v);
                }
                store.write(batch, true)?;
                rewritten += page.len() as u64;
            }
            match last {
                Some(mut k) if page.len() == BATCH => {
                    k.push(0);
                    from = k;
                }
                _ => break,
            }
        }
        group = first_group(store, &keys::group_end(g))?;
    }
    let mut marker = WriteBatch::default();
    marker.put(OBJECTS_UPGRADED, [2u8]);
    store.write(marker, true)?;
    if rewritten + damaged > 0 {
        tracing::info!(
            rewritten,
            damaged,
            "objects rewritten in the current encoding"
        );
    }
    Ok(rewritten)
}

/// `value` of state-machine key `key` (group prefix included) as a snapshot install writes
/// it: an object of the first encoding in the current one, anything else as it is.
pub fn current_encoding(key: &[u8], value: Vec<u8>) -> Vec<u8> {
    if key.get(4) != Some(&keys::SM_OBJECT) || StoredObject::is_current_encoding(&value) {
        return value;
    }
    match StoredObject::decode(&value).and_then(|o| o.encode()) {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::warn!(key = ?key, error = %e, "an object that cannot be decoded is installed as it is");
            value
        }
    }
}

/// Key of the marker saying every group's usage was counted, in the default column family.
const USAGE_COUNTED: &[u8] = b"usage-counted-1";

/// Makes the first count of what each app stores in each group (`usage_writes`), once, for a
/// store written before apply counted it (no marker yet); answers how many groups it counted.
/// Counting again after a crash writes the same counts.
pub fn count_usage(store: &Store) -> Result<u64> {
    count_each_group_once(store, USAGE_COUNTED, group_usage)
}

/// Records (key, value) counted from what a group holds.
type Counted = Vec<(Vec<u8>, Vec<u8>)>;

/// Writes `count(group)` for every group of the store, once: nothing when `marker` is in the
/// default column family, else every group's records and then the marker (a crash before it
/// counts again, writing the same). Answers how many groups it counted.
fn count_each_group_once(
    store: &Store,
    marker: &[u8],
    count: fn(&Store, GroupId) -> Result<Counted>,
) -> Result<u64> {
    if store.get_default(marker)?.is_some() {
        return Ok(0);
    }
    let mut counted = 0u64;
    let mut group = first_group(store, &[])?;
    while let Some(g) = group {
        let mut batch = WriteBatch::default();
        let cf = store.cf(CF_SM)?;
        for (k, v) in count(store, g)? {
            batch.put_cf(cf, k, v);
        }
        store.write(batch, true)?;
        counted += 1;
        group = first_group(store, &keys::group_end(g))?;
    }
    let mut done = WriteBatch::default();
    done.put(marker, [1u8]);
    store.write(done, true)?;
    Ok(counted)
}

/// Key of the marker saying every group's change log bytes were counted.
const CHANGES_COUNTED: &[u8] = b"changes-counted-1";

/// Makes the first count of each group's change log bytes (`change_writes`), once, for a store
/// written before apply counted them; answers how many groups it counted. The count is what
/// apply would have kept, so replicas upgraded at different log indexes agree.
pub fn count_changes(store: &Store) -> Result<u64> {
    count_each_group_once(store, CHANGES_COUNTED, group_change_bytes)
}

/// The change log's byte counts of `group` (key, value: in all and per stretch), counted from
/// the changes the store holds; none when it holds none.
pub fn group_change_bytes(store: &Store, group: GroupId) -> Result<Counted> {
    let mut stretches: BTreeMap<u64, u64> = BTreeMap::new();
    let start = keys::sm_family(group, keys::SM_CHANGES);
    let end = keys::sm_family(group, keys::SM_CHANGES + 1);
    store.scan(CF_SM, &start, &end, |k, v| {
        if let Some(index) = keys::change_index(k) {
            let n = stretches
                .entry(index / crate::changes::BYTES_STRETCH)
                .or_default();
            *n += (k.len() + v.len()) as u64;
        }
        Ok(true)
    })?;
    if stretches.is_empty() {
        return Ok(Vec::new());
    }
    let total: u64 = stretches.values().sum();
    let mut out = vec![(
        change_writes::total_key(group),
        total.to_le_bytes().to_vec(),
    )];
    for (stretch, n) in stretches {
        out.push((
            change_writes::stretch_key(group, stretch),
            n.to_le_bytes().to_vec(),
        ));
    }
    Ok(out)
}

/// The usage records (key, value) of every app with objects or files in `group`, counted from
/// what the store holds.
pub fn group_usage(store: &Store, group: GroupId) -> Result<Counted> {
    let mut by_app: BTreeMap<String, AppUsage> = BTreeMap::new();
    let start = keys::sm_family(group, keys::SM_OBJECT);
    let end = keys::sm_family(group, keys::SM_OBJECT + 1);
    store.scan(CF_SM, &start, &end, |k, v| {
        let rest = &k[start.len()..];
        let app = &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())];
        let app = String::from_utf8_lossy(app).into_owned();
        let u = by_app.entry(app).or_default();
        *u = u.changed_by(UsageDelta::object(None, Some(v.len())));
        Ok(true)
    })?;
    let files = keys::record_ns_prefix(group, Namespace::File.name());
    store.scan(CF_SM, &files, &keys::separated_end(&files), |_, v| {
        if let Ok(rec) = StoredRecord::decode(v) {
            if let Some((app, size)) = usage_writes::file_of(&rec.value) {
                let u = by_app.entry(app.to_string()).or_default();
                *u = u.changed_by(UsageDelta::file(size, 1));
            }
        }
        Ok(true)
    })?;
    by_app
        .into_iter()
        .map(|(app, usage)| {
            let key = keys::record_key(group, Namespace::Usage.name(), &app);
            Ok((key, usage_writes::encode(usage)?))
        })
        .collect()
}

/// The group of the first state-machine key at or after `from`.
fn first_group(store: &Store, from: &[u8]) -> Result<Option<GroupId>> {
    let mut found = None;
    store.scan(CF_SM, from, &[0xff; 5], |k, _| {
        found = k
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(|b| GroupId::new(u32::from_be_bytes(b)));
        Ok(false)
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn first_encoding(ms: i64, fields: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"v": 1, "created_ms": ms, "updated_ms": ms, "fields": fields}))
            .unwrap()
    }

    #[test]
    fn objects_of_the_first_encoding_are_rewritten_once_and_read_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut expected = Vec::new();
        let mut current = 0;
        let mut batch = WriteBatch::default();
        let cf = store.cf(CF_SM).unwrap();
        // Three groups, one with more objects than a write batch, some objects already in
        // the current encoding; records and index entries around them stay as they are.
        for (g, n) in [(1u32, 3usize), (7, BATCH + 5), (40_000, 1)] {
            let group = GroupId::new(g);
            for i in 0..n {
                let key = keys::object_key(group, "app", "C", &format!("id{i:05}"));
                let fields = json!({"i": i, "s": "x".repeat(i % 7)});
                let bytes = first_encoding(i as i64, fields.clone());
                let obj = StoredObject::decode(&bytes).unwrap();
                if i == 1 {
                    current += 1;
                    batch.put_cf(cf, &key, obj.encode().unwrap());
                } else {
                    batch.put_cf(cf, &key, &bytes);
                }
                expected.push((key, obj));
            }
            batch.put_cf(cf, keys::record_key(group, "ns", "k"), b"{\"r\":1}");
            // A damaged object stays as it is and does not stop the rewrite.
            batch.put_cf(cf, keys::object_key(group, "app", "D", "bad"), b"{\"v\":1,");
            batch.put_cf(cf, keys::sm_family(group, keys::SM_INDEX), b"");
        }
        store.write(batch, true).unwrap();

        let total = expected.len() as u64;
        assert_eq!(upgrade_objects(&store).unwrap(), total - current);
        for (key, obj) in &expected {
            let bytes = store.get(CF_SM, key).unwrap().unwrap();
            assert!(StoredObject::is_current_encoding(&bytes));
            assert_eq!(&StoredObject::decode(&bytes).unwrap(), obj);
        }
        for g in [1u32, 7, 40_000] {
            let group = GroupId::new(g);
            let record = store
                .get(CF_SM, &keys::record_key(group, "ns", "k"))
                .unwrap();
            assert_eq!(record.as_deref(), Some(&b"{\"r\":1}"[..]));
        }
        // Once done, a later open reads no object again.
        let key = &expected[0].0;
        store
            .write(
                {
                    let mut b = WriteBatch::default();
                    b.put_cf(store.cf(CF_SM).unwrap(), key, first_encoding(9, json!({})));
                    b
                },
                true,
            )
            .unwrap();
        assert_eq!(upgrade_objects(&store).unwrap(), 0);
    }

    /// A store written before apply counted usage gets its first count once, per group and
    /// app, from its objects and file records.
    #[test]
    fn usage_of_a_store_written_before_counting_is_counted_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut batch = WriteBatch::default();
        let cf = store.cf(CF_SM).unwrap();
        let obj = StoredObject::new(1).encode().unwrap();
        for (g, app, id) in [
            (1u32, "a", "x"),
            (1, "a", "y"),
            (1, "b", "x"),
            (2, "a", "z"),
        ] {
            batch.put_cf(cf, keys::object_key(GroupId::new(g), app, "C", id), &obj);
        }
        let file = crate::storage::records::StoredRecord {
            v: 1,
            value: json!({"app": "b", "size": 77}),
            expires_at_ms: None,
        };
        batch.put_cf(
            cf,
            keys::record_key(GroupId::new(2), "file", "f"),
            serde_json::to_vec(&file).unwrap(),
        );
        store.write(batch, true).unwrap();
        assert_eq!(count_usage(&store).unwrap(), 2);
        let read = |g: u32, app: &str| {
            let bytes = store
                .get(CF_SM, &keys::record_key(GroupId::new(g), "usage", app))
                .unwrap()
                .unwrap();
            usage_writes::decode(&bytes).unwrap()
        };
        let len = obj.len() as u64;
        assert_eq!(
            (read(1, "a").objects, read(1, "a").object_bytes),
            (2, 2 * len)
        );
        assert_eq!(read(1, "b").objects, 1);
        assert_eq!((read(2, "b").files, read(2, "b").file_bytes), (1, 77));
        assert_eq!(read(2, "a").objects, 1);
        assert_eq!(count_usage(&store).unwrap(), 0);
    }

    #[test]
    fn a_snapshot_installs_objects_in_the_current_encoding_and_nothing_else_changes() {
        let group = GroupId::new(3);
        let object = keys::object_key(group, "app", "C", "id");
        let first = first_encoding(4, json!({"a": [1, {"b": null}]}));
        let now = current_encoding(&object, first.clone());
        assert!(StoredObject::is_current_encoding(&now));
        assert_eq!(
            StoredObject::decode(&now).unwrap(),
            StoredObject::decode(&first).unwrap()
        );
        assert_eq!(current_encoding(&object, now.clone()), now);
        // Records (JSON that looks like an object) and damaged objects pass as they are.
        let record = keys::record_key(group, "ns", "k");
        assert_eq!(current_encoding(&record, first.clone()), first);
        assert_eq!(
            current_encoding(&object, b"{oops".to_vec()),
            b"{oops".to_vec()
        );
    }
}
